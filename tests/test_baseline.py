"""The verifier's baseline (SPEC 20): verify runs once before iteration 1, so that a verify
that cannot run stops the night before the agent is paid, and a tree that already fails
is what the agent is told and what `same_error` counts from. Each test runs rooda.py as a
user does, with the fake agent, in a git repository."""
import json
import signal

from conftest import interrupt, make_repo, progress_lines, run_rooda, session_events, start_rooda

FAILING = "echo 'FAILED test_x.py::test_one'; echo '3 failed, 10 passed'; exit 1"


def run(workspace, agent, tmp_path, *args):
    """`build` in the repository with logs in tmp_path/logs: (exit code, progress lines,
    stderr, events)."""
    make_repo(workspace)
    done = run_rooda("build", "--ai-cmd", agent.cmd, "--log-dir", tmp_path / "logs", *args, cwd=str(workspace))
    err = done.stderr.decode()
    assert "Traceback" not in err
    return done.returncode, progress_lines(err), err, session_events(tmp_path / "logs")


def gates(events):
    return [(event["gate"], event["exit_code"], event.get("baseline", False))
            for event in events if event["event"] == "gate"]


def test_a_verify_that_is_not_installed_stops_before_any_agent_runs(workspace, agent, tmp_path):
    # (a program the checks before the run cannot see: the shell finds it missing)
    code, lines, err, events = run(workspace, agent, tmp_path, "-n", "3", "--verify", "${TOOL:-no-such-tool} -q")
    assert code == 2 and agent.calls == 0
    assert lines[-1].startswith("ERROR: verify command `${TOOL:-no-such-tool} -q` exited 127 (it cannot run): ")
    assert "no-such-tool" in lines[-1].split("(it cannot run): ")[1]  # with its output
    assert gates(events) == [("verify", 127, True)]
    assert [e["event"] for e in events] == ["session_start", "gate", "session_end"]
    assert events[-1]["status"] == "error" and events[-1]["exit_code"] == 2


def test_a_verify_killed_by_a_signal_stops_with_exit_2(workspace, agent, tmp_path):
    code, lines, _, events = run(workspace, agent, tmp_path, "-n", "3", "--verify", "kill -KILL $$")
    assert code == 2 and agent.calls == 0
    assert lines[-1] == "ERROR: verify command `kill -KILL $$` was killed by SIGKILL"


def test_a_verify_past_gate_timeout_stops_with_exit_2(workspace, agent, tmp_path):
    (workspace / "rooda-config.json").write_text(json.dumps({"loop": {"gate_timeout": 0.5}}))
    code, lines, _, _ = run(workspace, agent, tmp_path, "-n", "3", "--verify", "sleep 30")
    assert code == 2 and agent.calls == 0
    assert lines[-1] == "ERROR: verify command `sleep 30` did not finish within D"


def test_a_failing_baseline_is_said_at_the_start_and_leads_the_first_prompt(workspace, agent, tmp_path):
    agent.script({"actions": [{"write_file": "fixed", "text": ""}, {"out": "fixed it"}]})
    verify = "test -f fixed || { %s; }" % FAILING
    code, lines, _, events = run(workspace, agent, tmp_path, "-n", "1", "--verify", verify)
    assert code == 0 and agent.calls == 1
    assert lines[2] == "verify fails before iteration 1 (exit 1): 3 failed, 10 passed"
    assert lines[3] == "Iteration 1/1 starting..."
    prompt = agent.prompt(1)
    section = prompt.split("## PREVIOUS ITERATION\n", 1)[1]
    assert section.startswith("Before this run, verify failed (exit 1): 3 failed, 10 passed.\n"
                              "The last 46 bytes of the verifier's (`%s`) output:\n\n"
                              "FAILED test_x.py::test_one\n3 failed, 10 passed" % verify)
    assert gates(events) == [("verify", 1, True), ("verify", 0, False)]
    baseline = [e for e in events if e["event"] == "gate"][0]
    assert baseline["line"] == "3 failed, 10 passed"
    # status --json: the baseline and the last verify side by side.
    status = run_rooda("status", "--json", "--log-dir", tmp_path / "logs", cwd=str(workspace))
    summary = json.loads(status.stdout)
    assert summary["baseline"] == {"result": "fail", "exit_code": 1, "line": "3 failed, 10 passed",
                                   "counts": {"run": 13, "skipped": 0, "failed": 3}}  # (SPEC 22)
    assert summary["last_verify"] == {"result": "pass", "exit_code": 0, "line": "", "counts": None}
    text = run_rooda("status", "--log-dir", tmp_path / "logs", cwd=str(workspace)).stdout.decode()
    assert "verify      failing (3 failed of 13 run) before → passing after\n" in text  # (one wording)


def test_an_iteration_that_fails_as_before_says_so_and_same_error_counts_the_baseline(
        workspace, agent, tmp_path):
    # The shipped build has stuck.same_error 3: the baseline and two identical failures.
    code, lines, err, events = run(workspace, agent, tmp_path, "-n", "10", "--verify", FAILING)
    assert code == 3 and agent.calls == 2
    assert "  verify exit 1: 3 failed, 10 passed (as before iteration 1)" in err.splitlines()
    assert lines[-1] == "ERROR: Stuck: same error in 3 consecutive failures (2 iterations completed, total: D)"
    ends = [e for e in events if e["event"] == "iteration_end"]
    assert [e["reason"] for e in ends] == ["verify exit 1: 3 failed, 10 passed (as before iteration 1)"] * 2


def test_a_different_failure_is_not_as_before(workspace, agent, tmp_path):
    agent.script({"actions": [{"write_file": "half", "text": ""}]})
    verify = "test -f half && { echo '1 failed, 12 passed'; exit 1; } || { %s; }" % FAILING
    code, lines, err, _ = run(workspace, agent, tmp_path, "-n", "1", "--verify", verify)
    assert code == 0
    assert "  verify exit 1: 1 failed, 12 passed" in err.splitlines()
    assert "as before" not in err


def test_a_passing_baseline_is_said_and_changes_nothing_else(workspace, agent, tmp_path):
    code, lines, _, events = run(workspace, agent, tmp_path, "-n", "1", "--verify", "true")
    assert code == 0 and agent.calls == 1
    assert lines[2] == "verify passes before iteration 1"
    assert "PREVIOUS ITERATION" not in agent.prompt(1)
    assert gates(events) == [("verify", 0, True), ("verify", 0, False)]


def test_the_flag_and_the_setting_switch_it_off(workspace, agent, tmp_path):
    code, lines, _, events = run(workspace, agent, tmp_path, "-n", "1", "--verify", FAILING,
                                 "--no-verify-baseline")
    assert gates(events) == [("verify", 1, False)] and "before iteration 1" not in "\n".join(lines)
    (workspace / "rooda-config.json").write_text(json.dumps({"loop": {"verify_baseline": False}}))
    done = run_rooda("build", "-n", "1", "--ai-cmd", agent.cmd, "--verify", FAILING, "--no-log",
                     cwd=str(workspace))
    assert b"before iteration 1" not in done.stderr and agent.calls == 2
    # No verify, no baseline, whatever the setting says.
    done = run_rooda("build", "-n", "1", "--ai-cmd", agent.cmd, "--no-log", cwd=str(workspace))
    assert b"before iteration 1" not in done.stderr


def test_doctor_says_a_baseline_will_run_and_how_to_skip_it(workspace, agent):
    make_repo(workspace)
    done = run_rooda("doctor", "build", "--ai-cmd", agent.cmd, "--verify", "make test", cwd=str(workspace))
    assert ("ok       verify: `make test` after each iteration, and once before iteration 1 to say what the"
            " agent starts from (--no-verify-baseline skips it)") in done.stdout.decode()


def test_resume_runs_no_second_baseline_but_one_for_a_session_without(workspace, agent, tmp_path):
    make_repo(workspace)
    logs = tmp_path / "logs"
    agent.script({"actions": [{"touch": "started"}, {"wait_for": "never"}]}, {})
    proc = start_rooda(agent, "-n", "2", "--verify", FAILING, "--log-dir", logs, cwd=str(workspace))
    agent.wait_for("started")
    interrupt(proc, signal.SIGINT)
    done = run_rooda("resume", "--log-dir", logs, cwd=str(workspace))
    assert done.returncode == 0, done.stderr
    assert b"before iteration 1" not in done.stderr  # the session has its baseline
    assert [g for g in gates(session_events(logs)) if g[2]] == [("verify", 1, True)]


def test_resume_of_a_session_that_had_no_baseline_runs_one(workspace, agent, tmp_path):
    make_repo(workspace)
    logs = tmp_path / "logs"
    agent.script({"actions": [{"touch": "started"}, {"wait_for": "never"}]}, {})
    proc = start_rooda(agent, "-n", "2", "--log-dir", logs, cwd=str(workspace))
    agent.wait_for("started")
    interrupt(proc, signal.SIGINT)
    done = run_rooda("resume", "--verify", FAILING, "--log-dir", logs, cwd=str(workspace))
    assert b"verify fails before iteration 1 (exit 1): 3 failed, 10 passed" in done.stderr
    assert [g for g in gates(session_events(logs)) if g[2]] == [("verify", 1, True)]
