"""Defects of revision 4 found by a hostile hunt and a night with the real CLIs (issue 36),
one test each (or a few), named by what they pin and numbered by the issue's items. Each
goes through the command line where a user meets the defect, and failed on revision 4."""
import fcntl
import json
import os
import re
import signal
import time

import pytest

import rooda
from conftest import (OK_RESULT, alive, await_event, ends, events_line, fake_cli, interrupt, progress_lines,
                      run_main, run_rooda, say, session_events, start_rooda, status, wait_until, write_config)

ESCAPES = "\x1b]0;pwned\x07\x1b]52;c;ZXZpbA==\x07\x1b[8m"
FAKE_LINE = "\n[10:00:00] Iteration 9/9 completed in 1.0s (success)\n"


def newest_events(logs):
    """The events of the session started last in a log directory."""
    sessions = [json.loads("[%s]" % ",".join((logs / name).read_text().splitlines())) for name in os.listdir(logs)
                if name.endswith(".jsonl") and "-agent" not in name]
    return max(sessions, key=lambda events: events[0]["time"])


def no_escape(text):
    return "\x1b" not in text and "\x07" not in text and "\x00" not in text


def verdict(status, explanation="", next_step=None, summary="did some"):
    """A Claude run whose schema verdict is this object (and whose stream has no marker)."""
    answer = {"status": status, "summary": summary, "explanation": explanation, "next_step": next_step}
    return {"actions": [{"out": events_line(say("done"), dict(OK_RESULT, structured_output=answer))}]}


@pytest.fixture
def claude(tmp_path, monkeypatch, workspace, agent):
    """The fake agent as `claude` on PATH, with a subscription's login (no API key)."""
    fake_cli(tmp_path, monkeypatch, "claude")
    monkeypatch.setenv("IS_SANDBOX", "1")
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    return agent


def rooda_cli(workspace, agent, *args):
    done = run_rooda(*args, cwd=str(workspace), env=agent.env)
    return done.returncode, done.stdout.decode(), done.stderr.decode()


# 1, 2, 4, 5: an agent's verdict, cleaned and bounded ----------------------------------------

def test_1_a_failure_verdicts_explanation_prints_no_escape_and_no_fake_line(claude, workspace, tmp_path):
    write_config(workspace, {"loop": {"verdict": "schema"}})
    claude.script(verdict("failure", ESCAPES + "the key is missing" + FAKE_LINE + "more"))
    code, _, err = rooda_cli(workspace, claude, "build", "-n", "1", "--ai-cmd-alias", "claude", "--log-dir",
                             tmp_path / "logs", "--no-verify-baseline")
    assert no_escape(err) and "\n[10:00:00] Iteration 9/9" not in err, err
    assert "  agent: the key is missing [10:00:00] Iteration 9/9 completed in 1.0s (success) more" in err
    assert "WARNING: 1 of 1 iteration failed; the last: agent, the key is missing [10:00:00]" in err
    [end] = ends(session_events(tmp_path / "logs"))
    assert no_escape(end["reason"]) and "\n" not in end["reason"]


def test_2_an_unknown_verdict_key_is_named_without_its_escapes(claude, workspace, tmp_path):
    write_config(workspace, {"loop": {"verdict": "schema"}})
    answer = {"status": "continue", "summary": "s", "explanation": "", "next_step": None, ESCAPES + "odd": 1}
    claude.script({"actions": [{"out": events_line(say("x"), dict(OK_RESULT, structured_output=answer))}]})
    code, _, err = rooda_cli(workspace, claude, "build", "-n", "1", "--ai-cmd-alias", "claude", "--no-log",
                             "--no-verify-baseline")
    assert "no verdict from the agent (unknown '\\x1b]0;pwned" in err and no_escape(err), err


def test_4_a_nul_in_a_next_step_or_an_explanation_reaches_no_prompt_argument(claude, workspace, tmp_path):
    write_config(workspace, {"loop": {"verdict": "schema"}})
    claude.script(verdict("continue", next_step="run the\x00tests"), verdict("failure", "no\x00db"),
                  verdict("success"))
    code, _, err = rooda_cli(workspace, claude, "build", "-n", "3", "--ai-cmd",
                             "claude -p {prompt} --output-format stream-json", "--no-log", "--no-verify-baseline")
    assert code == 0 and claude.calls == 3, err  # (it was exit 2: a NUL cannot cross exec)
    assert "Its next step, in its own words: run the tests" in claude.argv(2)[1]
    assert "Why: agent: no db" in claude.argv(3)[1]


def test_5_a_huge_explanation_is_bounded_for_notify_and_the_run_goes_on(claude, workspace, tmp_path):
    told = tmp_path / "reason.txt"
    write_config(workspace, {"loop": {"verdict": "schema", "notify": 'echo "$ROODA_REASON" >> %s' % told,
                                      "notify_on": ["iteration_end"]}})
    claude.script(verdict("failure", "x" * 200000), verdict("success"))
    code, _, err = rooda_cli(workspace, claude, "build", "-n", "2", "--ai-cmd-alias", "claude", "--no-log",
                             "--no-verify-baseline")
    assert code == 0 and claude.calls == 2, err  # (it was exit 2: argument list too long)
    assert "WARNING: notify" not in err and 0 < len(told.read_text().splitlines()[0]) <= 2048


# 3: a limit's kind from the provider --------------------------------------------------------

def test_3_a_rejected_limits_kind_prints_no_escape(workspace, agent, tmp_path):
    write_config(workspace, {"loop": {"on_limit": "stop"}})
    event = {"type": "rate_limit_event", "rate_limit_info": {"status": "rejected", "rateLimitType":
                                                             ESCAPES + "five_hour\nx", "resetsAt": 9e9}}
    agent.script({"actions": [{"out": events_line(event, {"type": "result", "is_error": True, "result": "no"})}],
                  "exit": 1})
    code, _, err = rooda_cli(workspace, agent, "build", "-n", "1", "--ai-cmd", agent.cmd, "--ai-format", "claude",
                             "--no-log")
    assert code == 4 and no_escape(err), err
    assert "Stopped at a usage limit (five_hour): no;" in err


# 6-9: windows, reserve and pace ----------------------------------------------------------------

def remember(capfd, agent, logs, *args, **readings):
    """A first run of `claude` (the fake one on PATH, else the fake agent in its format) that
    sees these windows' readings, {window: (utilisation, reset in seconds)}: what the log
    directory remembers for the next run."""
    windows = {name: {"utilization": used, "resetsAt": time.time() + resets} for name, (used, resets)
               in readings.items()}
    event = {"type": "rate_limit_event", "rate_limit_info": {"status": "allowed", "unifiedWindows": windows}}
    agent.script({"actions": [{"out": events_line(say("working"), event, OK_RESULT)}]})
    code, _, err = run_main(capfd, "build", "-n", "1", "--log-dir", logs, "--no-verify-baseline",
                            *(args or ("--ai-cmd-alias", "claude")))
    assert code == 0, err
    agent.script({"actions": [{"out": events_line(say("<promise>SUCCESS</promise>"), OK_RESULT)}]})


@pytest.fixture
def clock(monkeypatch):
    """Waits that pass at once and move rooda's clock on by as long (the injected clock)."""
    asked, real = [], time.time
    monkeypatch.setattr(rooda.SignalGuard, "wait", lambda self, seconds, ticker=None: asked.append(seconds))
    monkeypatch.setattr(rooda.time, "time", lambda: real() + sum(asked))
    return asked


def test_6_after_one_window_is_waited_out_the_other_is_judged_too(claude, workspace, tmp_path, capfd, clock):
    waits = clock
    logs = tmp_path / "logs"
    remember(capfd, claude, logs, five_hour=(0.95, 600), seven_day=(0.80, 3600))
    write_config(workspace, {"loop": {"reserve": {"five_hour": 0.1, "seven_day": 0.3}}})
    code, _, err = run_main(capfd, "build", "-n", "1", "--ai-cmd-alias", "claude", "--log-dir", logs,
                            "--no-verify-baseline")
    held = [e["message"] for e in newest_events(logs) if e["event"] == "limit"]
    assert held == ["reserve reached: five_hour 95% used, 10% kept", "reserve reached: seven_day 80% used,"
                    " 30% kept"], err  # (the second was never judged: it started the iteration)
    assert len(waits) == 2 and code == 0


def test_7_another_clis_remembered_readings_hold_nothing(tmp_path, workspace, agent, capfd, monkeypatch):
    fake_cli(tmp_path, monkeypatch, "gemini")
    fake_cli(tmp_path, monkeypatch, "claude")
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    logs = tmp_path / "logs"
    remember(capfd, agent, logs, "--ai-cmd-alias", "claude", seven_day=(0.95, 3600))
    write_config(workspace, {"loop": {"reserve": {"seven_day": 0.3}, "on_limit": "stop"}})
    agent.script({"actions": [{"out": '{"type":"result","status":"success","stats":{}}\n'}]})
    code, _, err = run_main(capfd, "build", "-n", "1", "--ai-cmd-alias", "gemini", "--log-dir", logs,
                            "--no-verify-baseline")
    assert code == 0 and agent.calls == 2 and "reserve reached" not in err, err  # (it was exit 4)
    assert "reserve and pace do nothing: gemini reports no subscription windows" in err


def test_7_an_api_key_login_is_not_held_by_a_subscriptions_readings(claude, workspace, tmp_path, capfd,
                                                                     monkeypatch):
    logs = tmp_path / "logs"
    remember(capfd, claude, logs, seven_day=(0.95, 3600))
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-test")
    write_config(workspace, {"loop": {"reserve": {"seven_day": 0.3}, "on_limit": "stop"}})
    code, _, err = run_main(capfd, "build", "-n", "1", "--ai-cmd-alias", "claude", "--log-dir", logs,
                            "--no-verify-baseline")
    assert code == 0 and "reserve reached" not in err, err


def test_8_a_reading_exactly_at_one_minus_the_reserve_holds_for_every_whole_percent(workspace, agent, tmp_path,
                                                                                    capfd):
    plan = rooda.RunPlan.__new__(rooda.RunPlan)
    missed = []
    for percent in range(1, 100):
        object.__setattr__(plan, "settings", {"reserve": {"seven_day": percent / 100}, "pace": "off"})
        reading = (1 - percent / 100, time.time() + 3600, None, None)
        if rooda.window_hold({"seven_day": reading}, plan, time.time()) is None:
            missed.append(percent)
    assert missed == []  # (20 of them did not: 1 - 0.18 is 0.8200000000000001)
    logs = tmp_path / "logs"
    remember(capfd, agent, logs, "--ai-cmd", agent.cmd, "--ai-format", "claude", seven_day=(0.82, 3600))
    write_config(workspace, {"loop": {"reserve": {"seven_day": 0.18}, "on_limit": "stop"}})
    code, _, err = rooda_cli(workspace, agent, "build", "-n", "1", "--ai-cmd", agent.cmd, "--ai-format", "claude",
                             "--log-dir", logs)
    assert code == 4 and "reserve reached: seven_day 82% used, 18% kept" in err, err


@pytest.mark.parametrize("used,resets", [(0.5, 1e17), (1e308, 9e9), (-1, 9e9), ("1", 9e9), (0.5, -5)])
def test_9_a_reading_out_of_range_is_no_traceback_in_the_run_status_or_a_later_run(workspace, agent, tmp_path,
                                                                                  used, resets):
    logs = tmp_path / "logs"
    event = {"type": "rate_limit_event", "rate_limit_info": {"status": "allowed", "unifiedWindows": {
        "five_hour": {"utilization": used, "resetsAt": resets}}}}
    agent.script({"actions": [{"out": events_line(event, say("<promise>SUCCESS</promise>"), OK_RESULT)}]})
    for _ in range(2):
        code, _, err = rooda_cli(workspace, agent, "build", "-n", "1", "--ai-cmd", agent.cmd, "--ai-format",
                                 "claude", "--log-dir", logs, "--pace", "even")
        assert code == 0 and "Traceback" not in err, err
    (logs / "windows.json").write_text(json.dumps({"claude subscription": {"five_hour": [used, resets, 7, 1e308]}}))
    code, _, err = rooda_cli(workspace, agent, "build", "-n", "1", "--ai-cmd", agent.cmd, "--ai-format", "claude",
                             "--log-dir", logs, "--pace", "even")
    assert code == 0 and "Traceback" not in err, err
    code, out, err = status(logs)
    assert code == 0 and "Traceback" not in err


# 10, 11: the baseline and resume -------------------------------------------------------------

def test_10_an_interrupted_baseline_is_no_baseline_and_resume_runs_it_again(workspace, agent, tmp_path):
    logs = tmp_path / "logs"
    gate = tmp_path / "verify.sh"
    gate.write_text('if [ -e "%s/hold" ]; then touch "%s/verifying"; sleep 30; fi\nexit 0\n' % (
        agent.state, agent.state))
    (tmp_path / "agent-state" / "hold").write_text("")
    agent.script({"actions": [{"out": "done <promise>SUCCESS</promise>\n"}]})
    proc = start_rooda(agent, "-n", "1", "--log-dir", logs, "--verify", "sh %s" % gate, cwd=workspace)
    agent.wait_for("verifying")
    _, err = interrupt(proc, signal.SIGTERM)
    assert "Interrupted by SIGTERM while verify ran before iteration 1 (0 iterations completed" in err, err
    assert [e for e in session_events(logs) if e["event"] == "gate"] == []  # (not a failing baseline)
    os.unlink(tmp_path / "agent-state" / "hold")
    code, _, err = rooda_cli(workspace, agent, "resume", "--log-dir", logs)
    assert code == 0 and "verify passes before iteration 1" in err, err
    assert "verify failed" not in agent.prompt(1)
    gates = [e for e in session_events(logs) if e["event"] == "gate"]
    assert [(g["baseline"], g["exit_code"]) for g in gates if g.get("baseline")] == [(True, 0)]


def test_11_resume_takes_the_sessions_lock_before_it_reads_it(workspace, agent, tmp_path, capfd, monkeypatch):
    logs = tmp_path / "logs"
    agent.script({"actions": [{"touch": "running"}, {"sleep": 60}]}, {"actions": [{"out": "<promise>SUCCESS"
                                                                                  "</promise>\n"}]})
    proc = start_rooda(agent, "-n", "1", "--log-dir", logs, cwd=workspace)
    agent.wait_for("running")
    interrupt(proc)
    [path] = [str(logs / name) for name in os.listdir(logs) if name.endswith(".jsonl")]
    held_when_read = []
    real = rooda.SessionReader.read

    def reading(reader):  # is the session locked while resume reads it?
        probe = os.open(reader.path, os.O_RDONLY)
        try:
            fcntl.flock(probe, fcntl.LOCK_EX | fcntl.LOCK_NB)
            held_when_read.append(False)
        except OSError:
            held_when_read.append(True)
        finally:
            os.close(probe)
        return real(reader)
    monkeypatch.setattr(rooda.SessionReader, "read", reading)
    code, _, err = run_main(capfd, "resume", "--log-dir", logs)
    assert code == 0 and held_when_read == [True], (held_when_read, err)


# 13: relative times are relative to now ----------------------------------------------------------

def test_13_status_words_a_limits_reset_from_now_not_from_when_the_session_ended(workspace, agent, tmp_path):
    logs = tmp_path / "logs"
    write_config(workspace, {"loop": {"on_limit": "stop"}})
    event = {"type": "rate_limit_event", "rate_limit_info": {"status": "rejected", "rateLimitType": "five_hour",
                                                             "resetsAt": time.time() + 7000}}
    agent.script({"actions": [{"out": events_line(event, {"type": "result", "is_error": True, "result": "no"})}],
                  "exit": 1})
    code, _, _ = rooda_cli(workspace, agent, "build", "-n", "1", "--ai-cmd", agent.cmd, "--ai-format", "claude",
                           "--log-dir", logs)
    assert code == 4
    [path] = [logs / name for name in os.listdir(logs) if name.endswith(".jsonl") and "-agent" not in name]
    events = [json.loads(line) for line in path.read_text().splitlines()]
    assert "(in " not in events[-1]["reason"]  # (a moment, not a span frozen at the end)
    for event in events:  # the session, as if it had ended an hour ago
        if event["event"] != "limit":
            event["time"] = rooda.iso_time(rooda.parse_iso_time(event["time"]) - 3600)
    path.write_text("".join(json.dumps(event) + "\n" for event in events))
    _, said, _ = status(logs)
    assert re.search(r"the limit resets at \d\d:\d\d \(in 1h5\dm\d\ds\)", said), said


# 14, 15: what notify is told ----------------------------------------------------------------------

def test_14_the_death_notify_says_the_iterations_cost_and_when_it_died(workspace, agent, tmp_path):
    told = tmp_path / "told.txt"
    write_config(workspace, {"loop": {"notify": "env | grep ^ROODA_ | sort > %s" % told}})
    agent.script({"actions": [{"out": events_line(say("one"), dict(OK_RESULT, total_cost_usd=0.25))}]},
                 {"actions": [{"touch": "running"}, {"sleep": 60}]})
    proc = start_rooda(agent, "-n", "3", "--ai-format", "claude", "--log-dir", tmp_path / "logs", cwd=workspace)
    agent.wait_for("running")
    proc.kill()
    proc.wait()
    assert wait_until(lambda: told.exists() and "ROODA_STATUS" in told.read_text(), timeout=10)
    said = dict(line.split("=", 1) for line in told.read_text().splitlines())
    assert (said["ROODA_STATUS"], said["ROODA_ITERATIONS"], said["ROODA_COST_USD"]) == ("died", "1", "0.25")
    assert said["ROODA_REASON"] == "rooda was killed or crashed during iteration 2"
    assert said["ROODA_ITERATION"] == "2" and not alive(agent.pid(2))


def test_15_a_wait_notification_says_the_status_the_run_would_stop_with(workspace, agent, tmp_path, capfd, waits):
    record = tmp_path / "wait.env"
    logs = tmp_path / "logs"
    remember(capfd, agent, logs, "--ai-cmd", agent.cmd, "--ai-format", "claude", seven_day=(0.9, 3600))
    write_config(workspace, {"loop": {"reserve": {"seven_day": 0.3}, "notify": "env | grep ^ROODA_ | sort > %s"
                                      % record, "notify_on": ["wait"]}})
    run_main(capfd, "build", "-n", "1", "--ai-cmd", agent.cmd, "--ai-format", "claude", "--log-dir", logs)
    said = dict(line.split("=", 1) for line in record.read_text().splitlines())
    assert (said["ROODA_EVENT"], said["ROODA_STATUS"], said["ROODA_WAIT_KIND"]) == ("wait", "limited", "reserve")


# 17-20: the command line, doctor, the prompt --------------------------------------------------

def test_17_a_dry_run_with_a_config_error_exits_2_as_the_run_would(workspace, agent):
    write_config(workspace, {"loop": {"verdict": "schema"}})
    code, out, err = rooda_cli(workspace, agent, "build", "--dry-run", "--ai-cmd-alias", "gemini")
    assert code == 2 and out == "" and "loop.verdict: schema needs an agent CLI with a schema flag" in err


def test_18_doctor_checks_the_verifiers_program_as_the_agents(workspace, agent):
    code, out, _ = rooda_cli(workspace, agent, "doctor", "build", "--ai-cmd", agent.cmd, "--verify",
                             "pyhton3 -m pytest", "--done-when", "./no-such-script && make")
    assert code == 2 and "error    verify: pyhton3: not found on PATH" in out, out
    assert "error    done_when: ./no-such-script: not found, or not executable" in out
    code, out, _ = rooda_cli(workspace, agent, "doctor", "build", "--ai-cmd", agent.cmd, "--verify",
                             "cd . && FOO=1 sh -c 'exit 0'")
    assert "verify: " not in out.split("ok       verify:")[0]  # (the shell's own words: no false alarm)


def test_19_with_verdict_schema_the_prompt_asks_for_the_verdict_not_the_markers(workspace, agent):
    write_config(workspace, {"loop": {"verdict": "schema"}})
    code, prompt, _ = rooda_cli(workspace, agent, "build", "--dry-run", "--ai-cmd-alias", "claude")
    assert code == 0 and "<promise>SUCCESS</promise>" not in prompt
    assert "`status` to `success`" in prompt and "`next_step`" in prompt
    write_config(workspace, {})
    code, prompt, _ = rooda_cli(workspace, agent, "build", "--dry-run", "--ai-cmd-alias", "claude")
    assert "<promise>SUCCESS</promise>" in prompt and "`next_step`" not in prompt


def test_20_codex_credentials_are_looked_for_in_codex_home(workspace, agent, tmp_path, monkeypatch):
    fake_cli(tmp_path, monkeypatch, "codex")
    home = tmp_path / "codex-home"
    home.mkdir()
    (home / "auth.json").write_text("{}")
    for name in ("CODEX_API_KEY", "OPENAI_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    env = dict(agent.env, CODEX_HOME=str(home), HOME=str(tmp_path / "empty-home"))
    done = run_rooda("doctor", "build", "--ai-cmd-alias", "codex", cwd=str(workspace), env=env)
    assert "ok       credentials: $CODEX_HOME/auth.json found; who pays: the ChatGPT plan" in done.stdout.decode(), \
        done.stdout
