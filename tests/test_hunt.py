"""Defects of revision 3 found by a hostile hunt and a new user's night (issue 27), one
test each (or a few), named by what they pin. Each failed on revision 3's code."""
import json
import os
import signal
import stat

import rooda
from conftest import (OK_RESULT, STREAMS, alive, commits, events_line, git, interrupt, make_repo,
                      progress_lines, replay, run_build, run_main, run_rooda, say, session_events, start_rooda,
                      status, status_json, wait_until, write_config)

ESCAPES = "\x1b]0;pwned\x07\x1b]52;c;ZXZpbA==\x07\x1b[8m"


def no_escape(text):
    return "\x1b" not in text and "\x07" not in text


# 1, 17 --------------------------------------------------------------------------------

def test_a_text_agents_last_line_reaches_the_reason_line_without_its_escapes(workspace, agent, capfd):
    agent.script({"actions": [{"out": "working\n%sfailed here\x1b[0m\n" % ESCAPES}], "exit": 1})
    code, _, err, events = run_build(capfd, agent, "-n", "1")
    assert code == 0 and no_escape(err)
    assert "  exit 1: failed here" in err.splitlines()
    assert no_escape(json.dumps(events, ensure_ascii=False).replace("\\u001b", "\x1b"))


def test_the_feedback_names_the_failure_signal_as_the_readme_does(workspace, agent, capfd):
    agent.script({"actions": [{"out": "stuck on the schema <promise>FAILURE</promise>\n"}], "exit": 1}, {})
    run_build(capfd, agent, "-n", "2")
    assert "[signal FAILURE]" in agent.prompt(2) and "FAILURE/promise" not in agent.prompt(2)


# 2, 3 ---------------------------------------------------------------------------------

def test_a_tool_name_and_a_retry_reach_the_heartbeat_without_their_escapes(workspace, agent, tmp_path):
    tool = {"type": "assistant", "message": {"content": [
        {"type": "tool_use", "id": "t1", "name": "\x1b]0;pwned\x07Bash", "input": {"command": "ls\x1b[8m -la"}}]}}
    retry = {"type": "system", "subtype": "api_retry", "error": "\x1b]52;c;eA==\x07overloaded", "error_status": 529,
             "attempt": 1, "max_retries": 3}
    agent.script({"actions": [{"out": events_line(tool)}, {"sleep": 2.5}, {"out": events_line(retry)},
                              {"sleep": 2.5}, {"out": events_line(say("done"), OK_RESULT)}]})
    write_config(workspace, {"loop": {"heartbeat": 1}})
    done = run_rooda("build", "-n", "1", "--ai-cmd", agent.cmd, "--ai-format", "claude", "--no-log", cwd=str(workspace))
    err = done.stderr.decode()
    beats = [line for line in err.splitlines() if "still running" in line]
    assert any("→ Bash: ls -la" in line for line in beats), beats
    assert any("retrying: HTTP 529 overloaded · attempt 1/3" in line for line in beats), beats
    assert no_escape(err)


def test_status_shows_no_escape_of_the_model_the_reason_or_the_live_tool(workspace, tmp_path):
    logs = tmp_path / "logs"
    logs.mkdir()
    events = [{"event": "session_start", "time": "2026-11-25T10:00:00.000Z", "procedure": "build", "pid": 0},
              {"event": "iteration_end", "time": "2026-11-25T10:01:00.000Z", "iteration": 1, "outcome": "failure",
               "reason": "exit 1: " + ESCAPES + "boom", "usage": {"model": ESCAPES + "opus"}}]
    (logs / "session-20261125-100000.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    code, out, _ = status(logs)
    assert code == 0 and no_escape(out) and "boom" in out and "opus" in out
    code, out, _ = status(logs, "--all")
    assert code == 0 and no_escape(out)


# 4, 5 ---------------------------------------------------------------------------------

def test_a_nul_in_the_agents_last_line_is_no_stop_for_an_iteration_end_notify(workspace, agent, tmp_path):
    record = tmp_path / "notified"
    write_config(workspace, {"loop": {"notify": "printf '%%s' \"$ROODA_REASON\" > %s" % record,
                                      "notify_on": ["iteration_end"]}})
    agent.script({"actions": [{"out_hex": "62616400776f7264730a"}], "exit": 1}, {})
    done = run_rooda("build", "-n", "2", "--ai-cmd", agent.cmd, "--no-log", cwd=str(workspace))
    assert done.returncode == 0 and agent.calls == 2, done.stderr
    assert b"NUL" not in done.stderr


def test_a_nul_in_a_prompt_argument_agents_failing_output_is_cleaned_feedback(workspace, agent):
    agent.script({"actions": [{"out_hex": "6e756c0068657265206661696c65640a"}], "exit": 1}, {})
    done = run_rooda("build", "-n", "2", "--ai-cmd", agent.cmd + " {prompt}", "--no-log", cwd=str(workspace))
    assert done.returncode == 0 and agent.calls == 2, done.stderr
    assert "nul here failed" in agent.argv(2)[-1]


# 6 ------------------------------------------------------------------------------------

def test_the_live_file_is_private_like_the_session_log(workspace, agent, tmp_path):
    tool = {"type": "assistant", "message": {"content": [
        {"type": "tool_use", "id": "t1", "name": "Bash", "input": {"command": "curl -H 'Authorization: x'"}}]}}
    agent.script({"actions": [{"out": events_line(tool)}, {"wait_for": "release"}]})
    logs = tmp_path / "logs"
    proc = start_rooda(agent, "-n", "1", "--ai-format", "claude", "--log-dir", logs, cwd=workspace)
    assert wait_until(lambda: any(p.name.endswith("-live.json") for p in logs.iterdir()) if logs.exists() else False,
                      timeout=10)
    [live] = [p for p in logs.iterdir() if p.name.endswith("-live.json")]
    assert stat.S_IMODE(live.stat().st_mode) == 0o600
    interrupt(proc)


# 7, 8, 16 -----------------------------------------------------------------------------

def test_a_session_another_rooda_holds_is_not_resumed_twice(workspace, agent, tmp_path):
    import fcntl

    logs = tmp_path / "logs"
    agent.script({"actions": [{"touch": "first"}, {"sleep": 60}]}, {})
    proc = start_rooda(agent, "-n", "2", "--log-dir", logs, cwd=workspace)
    agent.wait_for("first")
    proc.kill()
    proc.wait()
    [session] = [p for p in logs.iterdir() if p.suffix == ".jsonl"]
    with open(str(session), "a") as held:  # what the first of two resumes holds while it runs
        fcntl.flock(held.fileno(), fcntl.LOCK_EX)
        second = run_rooda("resume", "--log-dir", logs, cwd=str(workspace))
    assert second.returncode == 2 and agent.calls == 1  # it ran no agent
    assert second.stderr.decode().splitlines()[0] == (
        "rooda: error: %s is in use by another rooda (a run, or another resume of it); one goes on with a"
        " session at a time" % session.name)
    assert run_rooda("resume", "--log-dir", logs, cwd=str(workspace)).returncode == 0  # once it is free


def test_resume_of_a_prompt_from_stdin_keeps_that_prompt_and_the_feedback(workspace, agent, tmp_path):
    logs = tmp_path / "logs"
    agent.script({"actions": [{"out": "E   KeyError: 'schema'\n"}], "exit": 1},
                 {"actions": [{"touch": "second"}, {"wait_for": "never"}]}, {})
    proc = start_rooda(agent, "-", "3", "--log-dir", logs, cwd=workspace, procedure="prompt", stdin_text=b"Fix it.\n")
    agent.wait_for("second")
    interrupt(proc)
    done = run_rooda("resume", "--log-dir", logs, cwd=str(workspace), input=b"something else\n")
    assert done.returncode == 0, done.stderr
    assert agent.prompt(3) == "Fix it.\n"  # not what stdin holds now
    assert agent.env_of(3)["ROODA_ITERATION"] == "2"


def test_the_resumed_attempt_gets_the_feedback_its_first_attempt_had(workspace, agent, tmp_path):
    logs = tmp_path / "logs"
    agent.script({"actions": [{"out": "E   KeyError: 'schema'\n"}], "exit": 1},
                 {"actions": [{"touch": "second"}, {"wait_for": "never"}]}, {})
    proc = start_rooda(agent, "-n", "3", "--log-dir", logs, cwd=workspace)
    agent.wait_for("second")
    interrupt(proc)
    done = run_rooda("resume", "--log-dir", logs, cwd=str(workspace))
    assert done.returncode == 0, done.stderr
    first, again = [agent.prompt(n).split("## PREVIOUS ITERATION\n", 1)[1].split("\n## ")[0] for n in (2, 3)]
    assert "KeyError: 'schema'" in first and again == first


# 9, 10, 11, 15 ------------------------------------------------------------------------

def test_a_sub_agent_quoting_a_limit_is_not_the_iterations_limit(workspace, agent, capfd):
    lines = [{"type": "assistant", "message": {"content": [
                 {"type": "tool_use", "id": "t1", "name": "Task", "input": {"description": "check"}}]}},
             {"type": "assistant", "parent_tool_use_id": "t1", "message": {"content": [
                 {"type": "text", "text": "You've hit your session limit · resets 9:03pm (UTC)"}]}}]
    agent.script({"actions": [{"out": events_line(*lines)}, {"sleep": 30}]})
    code, _, err, events = run_build(capfd, agent, "-n", "1", "--ai-format", "claude", "--timeout", "1")
    assert [e["outcome"] for e in events if e["event"] == "iteration_end"] == ["timeout"]
    assert not [e for e in events if e["event"] == "limit"]


def test_odd_message_ids_and_reset_times_are_no_traceback(workspace, agent, capfd):
    message = {"type": "assistant", "message": {"id": ["a", {"b": 1}], "content": [{"type": "text", "text": "x"}],
                                                "usage": {"input_tokens": 1}}}
    limits = [{"type": "rate_limit_event", "rate_limit_info": {"status": "rejected", "resetsAt": value,
                                                               "rateLimitType": "five_hour"}}
              for value in (1.8e18, 1e308)]
    write_config(workspace, {"loop": {"on_limit": "stop"}})
    for lines in ([message, OK_RESULT], [limits[0]], [limits[1]]):
        agent.script({"actions": [{"out": events_line(*lines)}], "exit": 0 if len(lines) == 2 else 1})
        code, _, err, events = run_build(capfd, agent, "-n", "1", "--ai-format", "claude")
        assert "Traceback" not in err and events[-1]["event"] == "session_end", err


def test_claudes_text_mode_5_hour_limit_is_waited_out(workspace, agent, capfd, waits):
    agent.script({"actions": [{"out_file": os.path.join(STREAMS, "claude-text-5h-limit.txt")}], "exit": 1},
                 {"actions": [{"out": "done <promise>SUCCESS</promise>\n"}]})
    write_config(workspace, {"loop": {"limit_wait": 86400}})  # (9:43am may be tomorrow)
    code, _, err, events = run_build(capfd, agent, "-n", "3")
    assert code == 0 and agent.calls == 2 and len(waits) == 1
    assert [e["kind"] for e in events if e["event"] == "limit"] == ["five_hour"]  # (one name: issue 36, 16)
    assert "Usage limit reached (five_hour): You've hit your 5-hour limit · resets 9:43am (UTC)" in err
    assert "limit limit" not in json.dumps(events)


# 12, 23 -------------------------------------------------------------------------------

def test_ctrl_c_while_the_closing_notify_runs_ends_rooda_by_that_signal(workspace, agent, tmp_path):
    write_config(workspace, {"loop": {"notify": "touch %s/notifying; sleep 30" % agent.state}})
    agent.script({"actions": [{"out": "done <promise>SUCCESS</promise>\n"}]})
    proc = start_rooda(agent, "-n", "1", "--no-log", cwd=workspace)
    agent.wait_for("notifying")
    _, err = interrupt(proc)
    assert proc.returncode == -signal.SIGINT, err  # (re-raised: a shell says 130)


def test_rooda_killed_is_told_to_notify_by_the_guardian(workspace, agent, tmp_path):
    told = tmp_path / "told.txt"
    write_config(workspace, {"loop": {"notify": "env | grep ^ROODA_ | sort > %s" % told}})
    agent.script({"actions": [{"touch": "running"}, {"sleep": 60}]})
    logs = tmp_path / "logs"
    proc = start_rooda(agent, "-n", "1", "--log-dir", logs, cwd=workspace)
    agent.wait_for("running")
    proc.kill()
    proc.wait()
    assert wait_until(lambda: told.exists() and "ROODA_STATUS" in told.read_text(), timeout=10)
    said = dict(line.split("=", 1) for line in told.read_text().splitlines())
    assert said["ROODA_EVENT"] == "session_end" and said["ROODA_STATUS"] == "died"
    assert said["ROODA_SESSION"].endswith(".jsonl") and said["ROODA_PROCEDURE"] == "build"
    assert not alive(agent.pid(1))


def test_a_run_that_ends_well_is_not_told_as_a_death(workspace, agent, tmp_path):
    told = tmp_path / "told.txt"
    write_config(workspace, {"loop": {"notify": "echo $ROODA_STATUS >> %s" % told}})
    agent.script({"actions": [{"out": "done <promise>SUCCESS</promise>\n"}]})
    done = run_rooda("build", "-n", "1", "--ai-cmd", agent.cmd, "--no-log", cwd=str(workspace))
    assert done.returncode == 0  # (rooda waits for its guardian to go: one that ran notify has done so)
    assert told.read_text().split() == ["completed"]


# 13, 14, 19, 20, 22 -------------------------------------------------------------------

def test_resume_and_status_of_a_session_in_another_log_directory(workspace, agent, tmp_path):
    elsewhere = tmp_path / "elsewhere"
    agent.script({"actions": [{"touch": "first"}, {"wait_for": "never"}]}, {})
    proc = start_rooda(agent, "-n", "1", "--log-dir", elsewhere, cwd=workspace)
    agent.wait_for("first")
    interrupt(proc)
    [session] = [p for p in elsewhere.iterdir() if p.suffix == ".jsonl"]
    write_config(workspace, {"loop": {"log_dir": str(tmp_path / "missing")}})
    assert run_rooda("status", str(session), cwd=str(workspace)).returncode == 0  # default dir missing
    done = run_rooda("resume", str(session), cwd=str(workspace))
    assert done.returncode == 0, done.stderr
    assert sorted(p.name for p in elsewhere.iterdir()) == sorted([session.name, session.name[:-6] + ".log"])
    assert not (tmp_path / "missing").exists()
    assert [e["event"] for e in session_events(elsewhere)][-2:] == ["iteration_end", "session_end"]
    assert session_events(elsewhere)[-1]["status"] == "completed"


def test_resume_of_a_session_named_by_its_bare_file_name_in_the_log_directory_here(workspace, agent):
    agent.script({"actions": [{"touch": "first"}, {"wait_for": "never"}]}, {})
    proc = start_rooda(agent, "-n", "1", "--log-dir", ".", cwd=workspace)
    agent.wait_for("first")
    interrupt(proc)
    [session] = [p.name for p in workspace.iterdir() if p.suffix == ".jsonl"]
    done = run_rooda("resume", session, cwd=str(workspace))
    assert done.returncode == 0, done.stderr
    assert session_events(workspace)[-1]["status"] == "completed"  # (its own files, not the default's)


def test_a_pid_alive_in_another_namespace_or_boot_is_not_the_sessions(workspace, tmp_path):
    logs = tmp_path / "logs"
    logs.mkdir()
    boot, pidns = rooda._namespace()
    for name, where in (("session-20261125-100000.jsonl", {"boot": boot, "pidns": 1}),
                        ("session-20261125-100001.jsonl", {"boot": "another-boot", "pidns": pidns})):
        start = dict({"event": "session_start", "time": rooda.iso_time(rooda.time.time()), "procedure": "build",
                      "pid": os.getpid()}, **where)
        (logs / name).write_text(json.dumps(start) + "\n")
        assert status_json(logs)["state"] == "died", name
        (logs / name).unlink()


def test_a_billing_stop_resumes_the_same_iteration_once_the_account_is_fixed(workspace, agent, capfd, tmp_path):
    logs = tmp_path / "logs"
    agent.script(replay("claude-error-credit-400.jsonl", 1), {"actions": [{"out": "done <promise>SUCCESS</promise>\n"}]})
    code, _, err = run_main(capfd, "build", "-n", "3", "--ai-cmd", agent.cmd, "--ai-format", "claude", "--log-dir", logs)
    assert code == 2 and "cannot pay" in err
    assert status_json(logs)["resumable"] is True
    code, _, err = run_main(capfd, "resume", "--log-dir", logs, "--ai-format", "text")
    assert code == 0, err
    assert agent.env_of(2)["ROODA_ITERATION"] == "1"  # the same iteration, not the next
    assert session_events(logs)[-1]["iterations"] == 1


def test_a_killed_sessions_reason_is_its_death_and_its_last_failure_is_labelled(workspace, agent, tmp_path):
    agent.script({"actions": [{"out": "E   boom\n"}], "exit": 1}, {"actions": [{"touch": "second"}, {"sleep": 60}]})
    logs = tmp_path / "logs"
    proc = start_rooda(agent, "-n", "3", "--log-dir", logs, cwd=workspace)
    agent.wait_for("second")
    proc.kill()
    proc.wait()
    summary = status_json(logs)
    assert summary["state"] == "died" and summary["reason"].startswith("killed or crashed: no session_end")
    assert summary["last_failure"] == "exit 1: E   boom"
    _, out, _ = status(logs)
    assert "last failure  exit 1: E   boom" in out


def test_status_all_knows_an_ended_session_written_compact(workspace, tmp_path):
    logs = tmp_path / "logs"
    logs.mkdir()
    events = [{"event": "session_start", "time": "2026-11-25T10:00:00.000Z", "procedure": "build", "pid": 0}]
    events += [{"event": "iteration_end", "time": "2026-11-25T10:00:01.000Z", "iteration": n, "outcome": "success",
                "reason": "x" * 200} for n in range(1, 500)]
    events += [{"event": "session_end", "time": "2026-11-25T11:00:00.000Z", "status": "completed", "exit_code": 0,
                "iterations": 499, "succeeded": 499, "failed": 0, "seconds": 3600, "reason": "max iterations"}]
    (logs / "session-20261125-100000.jsonl").write_text(
        "".join(json.dumps(e, separators=(",", ":")) + "\n" for e in events))
    code, out, _ = status(logs, "--all")
    assert code == 0 and "completed" in out and "max iterations" in out
    # Spotted by its last line parsed, not by its exact bytes: the first line and the end
    # are all `--all` reads of it (it read and parsed the whole tail: 4-6 times slower).
    lines, whole = rooda._read_session(str(logs / "session-20261125-100000.jsonl"), whole=False)
    assert not whole and len(lines) == 2 and b'"session_end"' in lines[1]


# 18 -----------------------------------------------------------------------------------

def test_a_wait_says_ctrl_c_only_where_ctrl_c_reaches_rooda(monkeypatch):
    with rooda.SignalGuard() as guard:
        monkeypatch.setattr(rooda.os, "isatty", lambda fd: True)
        assert guard.how_to_stop() == "Ctrl+C stops."
        monkeypatch.setattr(rooda.os, "isatty", lambda fd: False)
        assert guard.how_to_stop() == "kill -TERM %d stops." % os.getpid()
    saved = signal.signal(signal.SIGINT, signal.SIG_IGN)  # (nohup, a script's `&` job)
    try:
        with rooda.SignalGuard() as guard:
            monkeypatch.setattr(rooda.os, "isatty", lambda fd: True)
            assert guard.how_to_stop() == "kill -TERM %d stops." % os.getpid()
    finally:
        signal.signal(signal.SIGINT, saved)


# 24 and the smaller ones ---------------------------------------------------------------

def test_an_attempt_cut_short_names_what_it_left_to_the_next(workspace, agent, capfd):
    make_repo(workspace)
    agent.script({"actions": [{"write_file": "half_done.py", "text": "x = 1\n"}, {"sleep": 30}]}, {})
    code, _, err, _ = run_build(capfd, agent, "-n", "2", "--timeout", "1", "--no-verify-baseline")
    section = agent.prompt(2).split("## PREVIOUS ITERATION\n", 1)[1]
    assert "The last attempt was cut short and left these uncommitted changes; build on them rather than" \
           " redo them:\n?? half_done.py" in section


def test_a_wait_notification_says_its_kind_and_end_and_the_cost_is_in_cents(workspace, agent, capfd, tmp_path,
                                                                             waits):
    record = tmp_path / "wait.env"
    write_config(workspace, {"loop": {"notify": "env | grep ^ROODA_ | sort > %s" % record, "notify_on": ["wait"]}})
    agent.script(replay("claude-stream-usage-limit.jsonl", 1), {"actions": [{"out": events_line(say("ok"), OK_RESULT)}]})
    code, _, err, _ = run_build(capfd, agent, "-n", "1", "--ai-format", "claude")
    said = dict(line.split("=", 1) for line in record.read_text().splitlines())
    assert said["ROODA_EVENT"] == "wait" and said["ROODA_WAIT_KIND"]
    assert rooda.parse_iso_time(said["ROODA_WAIT_UNTIL"]) is not None


def test_a_summary_that_starts_with_a_hash_keeps_the_subject_and_the_trailers(workspace, agent, capfd):
    make_repo(workspace)
    write_config(workspace, {"loop": {"git": {"commit": True}}})
    git(workspace, "config", "commit.cleanup", "strip")
    git(workspace, "add", "-A")
    git(workspace, "commit", "-qm", "config")
    agent.script({"actions": [{"write_file": "a.txt", "text": "a"}, {"out": "# Heading work\n"}]})
    code, _, err, events = run_build(capfd, agent, "-n", "1")
    assert commits(workspace)[0] == "build 1: # Heading work", err
    body = git(workspace, "log", "-1", "--format=%B")
    assert "Rooda-Session: " in body and "Rooda-Iteration: 1/1" in body
    [log] = [e["log"] for e in events if e["event"] == "session_start"]
    assert "--- git: git commit -q --cleanup=verbatim -m 'build 1: # Heading work' -m '" in open(log).read()


def test_doctor_takes_the_runs_flags_and_says_what_the_night_will_do(workspace, agent, tmp_path, monkeypatch):
    from conftest import fake_cli
    fake_cli(tmp_path, monkeypatch, "claude")
    write_config(workspace, {"loop": {"notify": "true"}})
    done = run_rooda("doctor", "build", "--ai-cmd-alias", "claude", "--max-time", "28800", "--max-cost", "20",
                     "--timeout", "3600", cwd=str(workspace))
    out = done.stdout.decode()
    assert "no iteration timeout" not in out  # (the run line sets one: doctor was told)
    assert "ok       budget: max_time 8h; max_cost $20.00, and each iteration gets --max-budget-usd with what" \
           " is left" in out
    assert "ok       notify: `true` at session_end (and, should rooda die, the guardian runs it with" \
           " ROODA_STATUS=died)" in out
