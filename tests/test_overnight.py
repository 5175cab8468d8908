"""Left alone (SPEC 16, issue 20): rooda killed with SIGKILL leaves nothing running, the
keep-awake hold ends with it, `notify` tells of the end, `resume` goes on where a run
stopped, commits say what they are, the budget reaches the agent's own flag."""
import json
import os
import signal

import pytest

from conftest import (OK_RESULT, fake_cli, alive, process_state, events_line, git, interrupt, make_repo,
                      procedure, replay, run_main, run_rooda, say, session_events, start_rooda, status, status_json,
                      wait_until, write_config)

SUCCESS = {"actions": [{"out": "done\n<promise>SUCCESS</promise>\n"}]}
HOLD = {"actions": [{"touch": "running"}, {"wait_for": "never"}]}


# --- rooda's own death --------------------------------------------------------------------

def test_sigkill_of_rooda_ends_the_agent_its_child_and_its_setsid_grandchild(workspace, agent, tmp_path,
                                                                             fake_inhibit):
    agent.script({"actions": [{"background": 120, "hold_output": False, "name": "child.pid"},
                              {"background": 120, "setsid": True, "name": "escapee.pid"},
                              {"touch": "running"}, {"sleep": 120}]})
    logs = tmp_path / "logs"
    proc = start_rooda(agent, "-n", "1", "--log-dir", logs, cwd=workspace)
    agent.wait_for("running")
    [inhibitor] = [int(line.split()[0]) for line in fake_inhibit.read_text().splitlines()]
    pids = [agent.pid(1), agent.pid(name="child.pid"), agent.pid(name="escapee.pid"), inhibitor]
    assert all(alive(pid) for pid in pids)
    proc.kill()
    proc.wait()
    assert wait_until(lambda: not any(alive(pid) for pid in pids), timeout=3), \
        [pid for pid in pids if alive(pid)]
    shown = status(logs)[1]
    assert "state       died: no session_end, and its process (pid %d) is gone; it was in iteration 1" \
        % proc.pid in shown


def test_died_lasts_until_the_last_sign_of_life_not_the_last_event(workspace, agent, tmp_path):
    """`status` said `elapsed 0.0s` for a run killed an hour into its first iteration."""
    agent.script({"actions": [{"out": "working\n"}, {"touch": "running"}, {"sleep": 60}]})
    logs = tmp_path / "logs"
    proc = start_rooda(agent, "-n", "1", "--log-dir", logs, cwd=workspace)
    agent.wait_for("running")
    proc.kill()
    proc.wait()
    [log] = [path for path in logs.iterdir() if path.suffix == ".log"]
    started = status_json(logs)["elapsed_seconds"]
    os.utime(str(log), (log.stat().st_mtime + 3600, log.stat().st_mtime + 3600))  # output an hour on
    assert status_json(logs)["elapsed_seconds"] >= started + 3599


def test_a_keep_awake_that_fails_at_once_is_no_zombie_for_the_run(workspace, agent, tmp_path, monkeypatch):
    """systemd-inhibit without a system bus exits at once; it was left a zombie all run."""
    bin_dir = tmp_path / "failing-bin"
    bin_dir.mkdir()
    (bin_dir / "systemd-inhibit").write_text("#!/bin/sh\necho $$ > %s/inhibit.pid\nexit 1\n" % agent.state)
    (bin_dir / "systemd-inhibit").chmod(0o755)
    monkeypatch.setenv("PATH", "%s%s%s" % (bin_dir, os.pathsep, os.environ["PATH"]))
    agent.script({}, HOLD)
    proc = start_rooda(agent, "-n", "2", cwd=workspace)
    agent.wait_for("running")
    try:
        assert process_state(agent.pid(name="inhibit.pid")) is None  # reaped, not "Z"
    finally:
        interrupt(proc)


def test_the_keep_awake_hold_is_taken_for_the_run_and_gone_when_it_ends(workspace, agent, tmp_path,
                                                                        fake_inhibit):
    agent.script(SUCCESS)
    result = run_rooda("build", "-n", "1", "--ai-cmd", agent.cmd, cwd=workspace, env=agent.env)
    assert result.returncode == 0, result.stderr
    [call] = fake_inhibit.read_text().splitlines()
    assert "--what=idle:sleep" in call and "--who=rooda" in call
    assert wait_until(lambda: not alive(int(call.split()[0])), timeout=2)


def test_keep_awake_false_takes_no_hold(workspace, agent, fake_inhibit, monkeypatch, capfd):
    agent.script(SUCCESS)
    monkeypatch.setenv("ROODA_LOOP_KEEP_AWAKE", "false")
    assert run_main(capfd, "build", "-n", "1", "--ai-cmd", agent.cmd)[0] == 0
    assert not fake_inhibit.exists()


# --- notify -------------------------------------------------------------------------------

def notified(path):
    """The ROODA_* variables each notify call saw: one dict per call."""
    calls = []
    for block in path.read_text().split("--\n")[:-1]:
        calls.append(dict(line.split("=", 1) for line in block.splitlines()))
    return calls


@pytest.fixture
def notify_record(tmp_path, monkeypatch):
    record = tmp_path / "notified"
    monkeypatch.setenv("ROODA_LOOP_NOTIFY", "env | grep '^ROODA_[A-Z_]*=' | grep -v ROODA_LOOP_ | grep -v "
                       "ROODA_RUN= | grep -v ROODA_CONFIG_HOME= >> %s; echo -- >> %s" % (record, record))
    return record


def test_notify_at_the_end_of_a_completed_run_gets_the_documented_variables(workspace, agent, capfd,
                                                                            notify_record, tmp_path):
    agent.script({"actions": [{"out": events_line(say("done <promise>SUCCESS</promise>"), OK_RESULT)}]})
    logs = tmp_path / "logs"
    code, _, err = run_main(capfd, "build", "-n", "3", "--ai-cmd", agent.cmd, "--ai-format", "claude",
                            "--log-dir", logs)
    assert code == 0, err
    [call] = notified(notify_record)
    log = call.pop("ROODA_LOG")
    assert log.endswith(".log") and os.path.dirname(log) == str(logs)
    assert call == {"ROODA_EVENT": "session_end", "ROODA_STATUS": "completed", "ROODA_EXIT_CODE": "0",
                    "ROODA_REASON": "success signal", "ROODA_PROCEDURE": "build",
                    "ROODA_ITERATION": "1", "ROODA_ITERATIONS": "1", "ROODA_COST_USD": "0.10",
                    "ROODA_SESSION": log[:-4] + ".jsonl"}


def test_notify_at_an_aborted_run_and_at_each_iteration_end(workspace, agent, capfd, notify_record):
    write_config(workspace, {"loop": {"notify_on": ["iteration_end", "session_end"]}})
    agent.script({"actions": [{"err": "boom\n"}], "exit": 1})
    code, _, err = run_main(capfd, "build", "-n", "5", "--ai-cmd", agent.cmd, "--failure-threshold", "2")
    assert code == 1, err
    calls = notified(notify_record)
    assert [(c["ROODA_EVENT"], c["ROODA_ITERATION"], c["ROODA_STATUS"], c["ROODA_EXIT_CODE"])
            for c in calls] == [("iteration_end", "1", "failure", ""), ("iteration_end", "2", "failure", ""),
                                ("session_end", "2", "aborted", "1")]
    assert calls[-1]["ROODA_COST_USD"] == "" and calls[-1]["ROODA_ITERATIONS"] == "2"


def test_notify_runs_when_the_run_is_interrupted_before_the_signal_is_re_raised(workspace, agent, tmp_path,
                                                                                notify_record):
    agent.script(HOLD)
    proc = start_rooda(agent, "-n", "3", cwd=workspace)
    agent.wait_for("running")
    interrupt(proc)
    assert proc.returncode == -signal.SIGINT
    [call] = notified(notify_record)
    assert (call["ROODA_EVENT"], call["ROODA_STATUS"], call["ROODA_EXIT_CODE"], call["ROODA_ITERATION"]) == \
        ("session_end", "interrupted", "130", "1")


def test_a_failing_notify_is_one_warning_and_changes_no_exit_code(workspace, agent, capfd,
                                                                  monkeypatch):
    agent.script(SUCCESS)
    monkeypatch.setenv("ROODA_LOOP_NOTIFY", "echo no route to ntfy.sh >&2; exit 7")
    code, _, err = run_main(capfd, "build", "-n", "1", "--ai-cmd", agent.cmd)
    assert code == 0
    assert "WARNING: notify: `echo no route to ntfy.sh >&2; exit 7` exited 7: no route to ntfy.sh" in err
    agent.script({"exit": 1})
    code, _, err = run_main(capfd, "build", "-n", "1", "--ai-cmd", agent.cmd)
    assert code == 0 and "exited 7" in err  # a cap with a failure is still exit 0


# --- resume -------------------------------------------------------------------------------

def test_resume_after_sigint_goes_on_to_the_original_cap_in_the_same_session(workspace, agent, tmp_path):
    agent.script({}, HOLD, {})
    logs = tmp_path / "logs"
    proc = start_rooda(agent, "-n", "3", "--log-dir", logs, cwd=workspace)
    agent.wait_for("running")
    interrupt(proc)
    assert "state       ended: interrupted, exit code 130" in status(logs)[1]
    result = run_rooda("resume", "--log-dir", logs, cwd=workspace, env=agent.env)
    err = result.stderr.decode()
    assert result.returncode == 0, err
    assert agent.calls == 4  # iteration 2 ran again under its number, then 3
    assert "Reached max iterations: 3" in err
    events = session_events(logs)
    assert [e["event"] for e in events].count("session_resume") == 1
    assert [e["iteration"] for e in events if e["event"] == "iteration_end"] == [1, 2, 2, 3]
    assert events[-1]["event"] == "session_end" and events[-1]["iterations"] == 3
    again = run_rooda("resume", "--log-dir", logs, cwd=workspace, env=agent.env)
    assert again.returncode == 2 and b"ended completed, nothing to resume" in again.stderr


def test_resume_carries_the_cost_toward_max_cost(workspace, agent, tmp_path):
    agent.script(replay("claude-stream.jsonl"), HOLD, replay("claude-stream.jsonl"))  # $0.39 an iteration
    logs = tmp_path / "logs"
    proc = start_rooda(agent, "-n", "10", "--ai-format", "claude", "--max-cost", "1", "--log-dir", logs,
                       cwd=workspace)
    agent.wait_for("running")
    interrupt(proc)
    result = run_rooda("resume", "--log-dir", logs, cwd=workspace, env=agent.env)
    err = result.stderr.decode()
    assert result.returncode == 0, err
    assert agent.calls == 4, err  # 0.39 before; 0.79, 1.18 after: two more, not three
    assert "Completed: cost budget of $1.00 reached (3 iterations" in err


def test_resume_refuses_a_session_that_completed_or_is_running(workspace, agent, tmp_path):
    agent.script(HOLD)
    logs = tmp_path / "logs"
    proc = start_rooda(agent, "-n", "1", "--log-dir", logs, cwd=workspace)
    agent.wait_for("running")
    result = run_rooda("resume", "--log-dir", logs, cwd=workspace)
    assert result.returncode == 2 and ("is still running (pid %d)" % proc.pid).encode() in result.stderr
    interrupt(proc)


def test_resume_goes_on_with_this_directorys_session_and_refuses_another_ones(workspace, agent, tmp_path):
    # One rooda beside its logs serves several projects: the newest session may be another's,
    # and its agent, gates and commits must not run here.
    other, logs = tmp_path / "other", tmp_path / "logs"
    other.mkdir()
    agent.script(HOLD, {"actions": [{"touch": "other running"}, {"wait_for": "never"}]}, {})
    for directory, ready in ((workspace, "running"), (other, "other running")):
        proc = start_rooda(agent, "-n", "1", "--log-dir", logs, cwd=directory)
        agent.wait_for(ready)
        interrupt(proc)
    sessions = {}
    for name in sorted(os.listdir(str(logs))):
        if name.endswith(".jsonl") and not name.endswith("-agent.jsonl"):
            with open(str(logs / name)) as stream:
                sessions[json.loads(stream.readline())["cwd"]] = name
    result = run_rooda("resume", "--log-dir", logs, cwd=workspace, env=agent.env)
    assert result.returncode == 0, result.stderr
    resumed = [name for name in sessions.values() if '"session_resume"' in (logs / name).read_text()]
    assert resumed == [sessions[str(workspace)]]
    elsewhere = run_rooda("resume", sessions[str(other)][:-6], "--log-dir", logs, cwd=workspace, env=agent.env)
    assert elsewhere.returncode == 2 and agent.calls == 3
    assert elsewhere.stderr.decode() == "rooda: error: %s was started in %s; resume it from there\n" % (
        sessions[str(other)], other)
    third = tmp_path / "third"
    third.mkdir()
    nowhere = run_rooda("resume", "--log-dir", logs, cwd=third)
    assert (nowhere.returncode, nowhere.stderr.decode()) == (
        2, "rooda: error: no session in %s was started in %s\n" % (logs, third))


def test_what_is_not_a_session_file_is_no_traceback_and_no_hang_for_status_and_resume(workspace, tmp_path):
    logs = tmp_path / "logs"
    (logs / "session-20260101-000001.jsonl").mkdir(parents=True)
    os.mkfifo(str(logs / "session-20260101-000002.jsonl"))  # (opened, it would wait for a writer)
    for command, code in (("status", 1), ("resume", 2)):
        result = run_rooda(command, "--log-dir", logs, cwd=workspace, timeout=20)
        assert (result.returncode, result.stderr.decode()) == (code, "rooda%s: no session logs in %s\n" % (
            ": error" if command == "resume" else "", logs))
    (logs / "session-20260101-000003.jsonl").write_text(json.dumps({  # a first line cut short, say
        "event": "session_start", "time": "2026-01-01T00:00:03.000Z", "pid": 0, "cwd": str(workspace),
        "argv": ["run"]}) + "\n")
    result = run_rooda("resume", "--log-dir", logs, cwd=workspace)
    assert (result.returncode, result.stderr.decode()) == (
        2, "rooda: error: 'run' needs a procedure name, e.g. 'python3 rooda.py run build'\n"
           "Try 'python3 rooda.py --help'.\n")
    (logs / "session-20260101-000004.jsonl").write_text(json.dumps({
        "event": "session_start", "time": "2026-01-01T00:00:04.000Z", "pid": 0, "cwd": str(workspace),
        "argv": ["status", "--all"]}) + "\n")
    result = run_rooda("resume", "--log-dir", logs, cwd=workspace)
    assert (result.returncode, result.stdout, result.stderr.decode()) == (
        2, b"", "rooda: error: session-20260101-000004.jsonl was not a run (status --all); start a new run"
                " instead\n")


def test_resume_keeps_option_values_that_are_its_own_words_and_takes_the_log_file_name(
        workspace, agent, tmp_path):
    agent.script(HOLD, {})
    logs = tmp_path / "logs"
    proc = start_rooda(agent, "-n", "1", "--log-dir", logs, cwd=workspace)
    agent.wait_for("running")
    interrupt(proc)
    [log] = [name for name in os.listdir(str(logs)) if name.endswith(".log")]
    result = run_rooda("resume", str(logs / log), "--log-dir", logs, "-c", "resume", "-c", str(logs / log),
                       cwd=workspace, env=agent.env)
    assert result.returncode == 0, result.stderr
    assert "## CONTEXT\nresume\n\n%s\n" % (logs / log) in agent.prompt(2)


# --- commits that say what they are -------------------------------------------------------

def test_a_commit_has_the_summary_trailers_and_a_progress_line_and_is_pushed(workspace, agent, capfd,
                                                                             tmp_path):
    remote = tmp_path / "remote.git"
    git(tmp_path, "init", "-q", "--bare", "-b", "main", str(remote))
    make_repo(workspace)
    git(workspace, "remote", "add", "origin", str(remote))
    git(workspace, "push", "-q", "-u", "origin", "main")
    procedure(workspace, git={"commit": True, "push": True})
    git(workspace, "add", "-A")
    git(workspace, "commit", "-q", "-m", "procedure")
    agent.script({"actions": [{"write_file": "a.txt", "text": "a"}, {"write_file": "b.txt", "text": "b"},
                              {"out": events_line(say("Added a.txt and b.txt.\n\n<promise>SUCCESS</promise>"),
                                                  OK_RESULT)}]})
    logs = tmp_path / "logs"
    code, _, err = run_main(capfd, "p", "-n", "3", "--ai-cmd", agent.cmd, "--ai-format", "claude",
                            "--log-dir", logs)
    assert code == 0, err
    head = git(workspace, "rev-parse", "--short=7", "HEAD").strip()
    assert "  git: committed %s (2 files) · pushed to origin/main" % head in err.splitlines()
    message = git(workspace, "log", "-1", "--format=%B").strip().splitlines()
    [session] = [name[:-len(".log")] for name in os.listdir(str(logs)) if name.endswith(".log")]
    assert message == ["p 1: Added a.txt and b.txt.", "", "Rooda-Session: %s" % session,
                       "Rooda-Iteration: 1/3", "Rooda-Usage: 12 tokens, $0.10"]
    assert git(remote, "log", "-1", "--format=%s").strip() == "p 1: Added a.txt and b.txt."
    [commit] = [e for e in session_events(logs) if e["event"] == "commit"]
    assert commit["iteration"] == 1 and commit["files"] == 2 and head.startswith(commit["hash"][:7])


def test_untracked_files_that_the_commit_would_sweep_in_are_named_at_the_start(workspace, agent, capfd):
    make_repo(workspace)
    procedure(workspace, git={"commit": True})
    (workspace / "nohup.out").write_text("")
    agent.script(SUCCESS)
    code, _, err = run_main(capfd, "p", "-n", "1", "--ai-cmd", agent.cmd)
    assert "WARNING: git.commit is on and these untracked files would be committed with the agent's work:" \
        " fragment.md, nohup.out, rooda-config.json" in err


# --- spend inside an iteration ------------------------------------------------------------

def test_claude_gets_what_is_left_of_max_cost_as_its_own_budget(workspace, agent, capfd, tmp_path,
                                                                monkeypatch):
    fake_cli(tmp_path, monkeypatch, "claude")
    agent.script({"actions": [{"out": events_line(say("part done"), OK_RESULT)}]})  # $0.10 each
    code, _, err = run_main(capfd, "build", "-n", "2", "--ai-cmd", "claude -p", "--ai-format", "claude",
                            "--max-cost", "0.5")
    assert code == 0, err
    assert [agent.argv(call) for call in (1, 2)] == [["-p", "--max-budget-usd", "0.50"],
                                                     ["-p", "--max-budget-usd", "0.40"]]
    assert "no spending cap of its own" not in err


def test_the_budget_passed_is_whole_cents_and_at_least_one(workspace, agent, capfd, tmp_path, monkeypatch):
    # Claude Code 2.1.197 refuses `--max-budget-usd 0.00`: "must be a positive number
    # greater than 0" (measured against the stub), and the iteration would fail for it.
    fake_cli(tmp_path, monkeypatch, "claude")
    agent.script({"actions": [{"out": events_line(say("part done"), OK_RESULT)}]})  # $0.10 each
    code, _, err = run_main(capfd, "build", "-n", "2", "--ai-cmd", "claude -p", "--ai-format", "claude",
                            "--max-cost", "0.105")
    assert code == 0, err
    assert [agent.argv(call)[-1] for call in (1, 2)] == ["0.10", "0.01"]
    run_main(capfd, "build", "-n", "1", "--ai-cmd", "claude -p", "--ai-format", "claude", "--max-cost", "0.29")
    assert agent.argv(3)[-1] == "0.29"  # (0.29 * 100 is 28.999999999999996 in floats)


def test_a_cli_without_a_budget_flag_is_told_at_the_start(workspace, agent, capfd, tmp_path, monkeypatch):
    agent.script({"actions": [{"out": events_line(say("done <promise>SUCCESS</promise>"), OK_RESULT)}]})
    code, _, err = run_main(capfd, "build", "-n", "1", "--ai-cmd", agent.cmd, "--ai-format", "claude",
                            "--max-cost", "5")
    assert "WARNING: max_cost is checked between iterations: this agent has no spending cap of its own" in err
    assert "--max-budget-usd" not in " ".join(agent.argv(1))
