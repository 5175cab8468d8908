"""The Ralph gates of SPEC 6: verify, done_when, requires, stuck, git, and `prompt`.
One test per gate and per stop reason, each with its exit code from SPEC 5."""
import json
import os
import signal
import subprocess

import pytest

import rooda
from conftest import (alive, commits, ends, git, group_members, interrupt, make_repo, procedure,
                      progress_lines, run_main, run_rooda, session_events, start_rooda, write_config)

SUCCESS_SIGNAL = {"actions": [{"out": "done\n<promise>SUCCESS</promise>\n"}]}


# --- verify -------------------------------------------------------------------------

def test_a_success_claim_rejected_by_verify_is_not_completion(workspace, agent, capfd):
    agent.script(SUCCESS_SIGNAL)
    code, _, err = run_main(capfd, "build", "-n", "5", "--ai-cmd", agent.cmd, "--verify", "exit 1",
                            "--failure-threshold", "2")
    assert code == 1 and agent.calls == 2
    lines = progress_lines(err)
    assert "Iteration 1/5 completed in D (rejected, consecutive: 1/2)" in lines
    assert "the agent signalled SUCCESS but verify (`exit 1`) failed; the claim is rejected" in err
    assert lines[-1].startswith("ERROR: Aborting after 2 consecutive failures")


def test_the_same_claim_with_a_passing_verifier_completes(workspace, agent, capfd):
    agent.script(SUCCESS_SIGNAL)
    code, _, err = run_main(capfd, "build", "-n", "5", "--ai-cmd", agent.cmd, "--verify", "true")
    assert code == 0 and agent.calls == 1
    assert progress_lines(err)[-1] == "Completed: agent signalled SUCCESS (1 iteration, total: D)"


def test_a_failing_verifier_fails_a_quiet_success(workspace, agent, capfd):
    agent.script({})
    code, _, err = run_main(capfd, "build", "-n", "1", "--ai-cmd", agent.cmd, "--verify", "false")
    assert "Iteration 1/1 completed in D (failure, consecutive: 1/3)" in progress_lines(err)


def test_verify_from_the_procedure_and_its_output_feeds_the_next_prompt(workspace, agent, capfd):
    procedure(workspace, verify="echo 'FAILED tests/test_widget.py::test_spin - 3 != 4'; exit 1")
    agent.script({})
    run_main(capfd, "p", "-n", "2", "--ai-cmd", agent.cmd)
    second = agent.prompt(2)
    assert "## PREVIOUS ITERATION\nIteration 1 ended in failure (exit code 0)." in second
    assert "the verifier's (`echo" in second
    assert "FAILED tests/test_widget.py::test_spin - 3 != 4" in second


def test_verify_is_not_run_after_a_timeout(workspace, agent, capfd):
    agent.script({"actions": [{"sleep": 30}]})
    marker = workspace / "verified"
    code, _, err = run_main(capfd, "build", "-n", "1", "--timeout", "0.3", "--ai-cmd", agent.cmd,
                            "--verify", "touch %s" % marker, "--no-verify-baseline")
    assert "(timeout, consecutive: 1/3)" in err and not marker.exists()


def test_verify_output_is_shown_in_verbose_mode(workspace, agent, capfd):
    code, out, err = run_main(capfd, "build", "-n", "1", "-v", "--ai-cmd", agent.cmd,
                              "--verify", "echo verifier-speaks; echo verifier-err >&2")
    assert "verifier-speaks" in out and "verifier-err" in err


# --- done_when ----------------------------------------------------------------------

def test_done_when_0_before_the_first_iteration_completes_with_nothing_to_do(workspace, agent, capfd):
    code, _, err = run_main(capfd, "build", "--ai-cmd", agent.cmd, "--done-when", "true")
    assert code == 0 and agent.calls == 0
    assert progress_lines(err)[-1] == \
        "Completed: done_when reports nothing left to do (0 iterations, total: D)"


def test_done_when_1_goes_on_until_it_says_done(workspace, agent, capfd):
    agent.script({}, {"actions": [{"write_file": "queue-empty", "text": ""}]}, {})
    code, _, err = run_main(capfd, "build", "-n", "10", "--ai-cmd", agent.cmd,
                            "--done-when", "test -f queue-empty")
    assert code == 0 and agent.calls == 2
    assert progress_lines(err)[-1] == \
        "Completed: done_when reports nothing left to do (2 iterations, total: D)"


def test_done_when_that_cannot_run_is_an_error_exit_2(workspace, agent, capfd):
    code, _, err = run_main(capfd, "build", "--ai-cmd", agent.cmd,
                            "--done-when", "echo 'bd: command not found' >&2; exit 127")
    assert code == 2 and agent.calls == 0
    last = progress_lines(err)[-1]
    assert last.startswith("ERROR: done_when command `") and "exited 127 (it cannot run)" in last
    assert "bd: command not found" in last


@pytest.mark.parametrize("exit_code", [1, 2, 5, 101])
def test_done_when_failing_like_a_test_runner_means_not_yet(workspace, agent, capfd, exit_code):
    """make test exits 2, pytest with no tests 5, cargo test 101: all mean "not green yet"."""
    agent.script({}, {"actions": [{"write_file": "green", "text": ""}]})
    code, _, err = run_main(capfd, "build", "-n", "5", "--ai-cmd", agent.cmd,
                            "--done-when", "test -f green || exit %d" % exit_code)
    assert code == 0 and agent.calls == 2, err
    assert progress_lines(err)[-1].startswith("Completed: done_when reports nothing left to do")


@pytest.mark.parametrize("command,words", [
    ("exit 126", "exited 126 (it cannot run)"),
    ("kill -TERM $$", "was killed by SIGTERM"),
    ("sleep 30", "did not finish within D"),
])
def test_done_when_killed_or_unable_to_run_is_an_error(workspace, agent, capfd, command, words):
    write_config(workspace, {"loop": {"gate_timeout": 0.5}})
    code, _, err = run_main(capfd, "build", "--ai-cmd", agent.cmd, "--done-when", command)
    assert code == 2 and agent.calls == 0
    assert words in progress_lines(err)[-1]


def test_the_beads_recipe_shape_works(workspace, agent, capfd):
    (workspace / "ready.json").write_text("[]")
    code, _, _ = run_main(capfd, "build", "--ai-cmd", agent.cmd, "--done-when",
                          'test "$(python3 -c "import json; print(len(json.load(open(\'ready.json\'))))")" -eq 0')
    assert code == 0 and agent.calls == 0


# --- requires -----------------------------------------------------------------------

def test_a_missing_required_path_exits_2_with_the_hint(workspace, agent, capfd):
    procedure(workspace, requires=["IMPLEMENTATION_PLAN.md"],
              requires_hint="run the plan procedure first")
    code, _, err = run_main(capfd, "p", "--ai-cmd", agent.cmd)
    assert code == 2 and agent.calls == 0  # (refused before the run starts: doctor calls it an error)
    assert err == ("rooda: error: procedure p requires IMPLEMENTATION_PLAN.md, which is missing; run the plan"
                   " procedure first\n")


def test_requires_is_checked_before_each_iteration(workspace, agent, capfd):
    procedure(workspace, requires=["plan.md"], requires_hint="run the plan procedure first")
    (workspace / "plan.md").write_text("- [ ] task")
    agent.script({"actions": [{"remove": "plan.md"}]}, {})
    code, _, err = run_main(capfd, "p", "-n", "3", "--ai-cmd", agent.cmd)
    assert code == 2 and agent.calls == 1  # present before iteration 1, gone before 2
    assert progress_lines(err)[-1] == ("ERROR: procedure p requires plan.md, which is missing;"
                                       " run the plan procedure first")


# --- stuck --------------------------------------------------------------------------

def test_same_error_stops_as_stuck_with_exit_3_and_shows_the_error(workspace, agent, capfd):
    # The same failure, with a different time, duration, temp path and id each time.
    verify = ('echo "$(date +%H:%M:%S) AssertionError at /tmp/pytest-$$/x.py:12'
              ' (0x$$) took $$.5s"; exit 1')
    procedure(workspace, verify=verify, stuck={"same_error": 3})
    agent.script({})
    code, _, err = run_main(capfd, "p", "-n", "10", "--ai-cmd", agent.cmd, "--no-verify-baseline")
    assert code == 3 and agent.calls == 3
    lines = progress_lines(err)
    assert lines[-1] == ("ERROR: Stuck: same error in 3 consecutive failures (3 iterations"
                         " completed, total: D)")
    reason, excerpt = err.split("Stuck:")[1].splitlines()[1:3]
    assert reason.startswith("  verify exit 1: ") and "AssertionError at /tmp/pytest-" in reason
    assert excerpt.startswith("  | ") and "AssertionError at /tmp/pytest-" in excerpt


def test_different_errors_are_not_stuck(workspace, agent, capfd):
    procedure(workspace, stuck={"same_error": 2})
    agent.script({"actions": [{"out": "ImportError: no module named yaml\n"}], "exit": 1},
                 {"actions": [{"out": "SyntaxError: invalid syntax in parser.py\n"}], "exit": 1},
                 {"actions": [{"out": "AssertionError: 3 != 4\n"}], "exit": 1})
    code, _, err = run_main(capfd, "p", "-n", "3", "--failure-threshold", "5", "--ai-cmd", agent.cmd)
    assert code == 0 and agent.calls == 3 and "Stuck" not in err


def test_no_change_stops_as_stuck(workspace, agent, capfd):
    make_repo(workspace)
    procedure(workspace, stuck={"no_change": 2})
    git(workspace, "add", "-A")
    git(workspace, "commit", "-q", "-m", "config")
    agent.script({})
    code, _, err = run_main(capfd, "p", "-n", "10", "--ai-cmd", agent.cmd,
                            "--log-dir", "logs-inside-the-repo")
    assert code == 3 and agent.calls == 2
    assert progress_lines(err)[-1] == "ERROR: Stuck: no change in 2 iterations (2 iterations completed, total: D)"


def test_an_agent_that_changes_files_is_not_stuck(workspace, agent, capfd):
    make_repo(workspace)
    procedure(workspace, stuck={"no_change": 1})
    agent.script({"actions": [{"write_file": "untracked.txt", "text": "1"}]},
                 {"actions": [{"write_file": "untracked.txt", "text": "2"}]},
                 {"actions": [{"write_file": "README", "text": "changed"}]})
    code, _, err = run_main(capfd, "p", "-n", "3", "--ai-cmd", agent.cmd)
    assert code == 0 and agent.calls == 3, err


def test_no_change_outside_a_git_repository_is_a_config_error(workspace, agent, capfd, tmp_path):
    procedure(workspace, stuck={"no_change": 2})
    code, _, err = run_main(capfd, "p", "--ai-cmd", agent.cmd)
    assert code == 2 and agent.calls == 0
    assert "stuck.no_change needs a git repository" in err


def test_the_shipped_build_turns_on_same_error_3():
    assert rooda.load_config(environ={}).procedure("build")["stuck"] == {"same_error": 3}


# --- git ----------------------------------------------------------------------------

def test_git_commit_makes_one_commit_per_changing_iteration(workspace, agent, capfd):
    make_repo(workspace)
    procedure(workspace, git={"commit": True})
    git(workspace, "add", "-A")
    git(workspace, "commit", "-q", "-m", "config")
    agent.script({"actions": [{"write_file": "a.txt", "text": "a"}]},
                 {},
                 {"actions": [{"write_file": "b.txt", "text": "b"}]},
                 {"actions": [{"write_file": "c.txt", "text": "c"}], "exit": 1})
    code, _, err = run_main(capfd, "p", "-n", "4", "--ai-cmd", agent.cmd, "--log-dir", "logs")
    assert code == 0, err
    assert commits(workspace) == ["p 3: iteration 3", "p 1: iteration 1", "config", "initial"]
    tracked = git(workspace, "ls-files").split()
    assert "a.txt" in tracked and "b.txt" in tracked
    assert not any(path.startswith("logs/") for path in tracked), "the log directory was committed"
    assert "c.txt" not in tracked  # the failing iteration is not committed


def test_git_commit_message_template(workspace, agent, capfd):
    make_repo(workspace)
    procedure(workspace, git={"commit": True, "message": "ralph({procedure}) #{iteration} {other}"})
    agent.script({"actions": [{"write_file": "a.txt", "text": "a"}]})
    run_main(capfd, "p", "-n", "1", "--ai-cmd", agent.cmd)
    assert commits(workspace)[0] == "ralph(p) #1 {other}"


def test_a_git_failure_fails_the_iteration_with_gits_message(workspace, agent, capfd):
    make_repo(workspace)
    procedure(workspace, git={"commit": True})
    hook = workspace / ".git" / "hooks" / "pre-commit"
    hook.write_text("#!/bin/sh\necho 'pre-commit hook: lint failed' >&2\nexit 1\n")
    hook.chmod(0o755)
    agent.script({"actions": [{"write_file": "a.txt", "text": "a"}]})
    code, _, err = run_main(capfd, "p", "-n", "1", "--ai-cmd", agent.cmd)
    assert "Iteration 1/1 completed in D (failure, consecutive: 1/3)" in progress_lines(err)
    assert "git commit failed: pre-commit hook: lint failed" in err


def test_git_push_creates_the_upstream_then_pushes(workspace, agent, capfd, tmp_path):
    remote = tmp_path / "remote.git"
    subprocess.run(["git", "init", "-q", "--bare", str(remote)], check=True)
    make_repo(workspace)
    git(workspace, "remote", "add", "origin", str(remote))
    procedure(workspace, git={"commit": True, "push": True})
    agent.script({"actions": [{"write_file": "a.txt", "text": "a"}]},
                 {"actions": [{"write_file": "b.txt", "text": "b"}]})
    code, _, err = run_main(capfd, "p", "-n", "2", "--ai-cmd", agent.cmd)
    assert code == 0, err
    remote_log = subprocess.run(["git", "--git-dir", str(remote), "log", "--format=%s", "main"],
                                stdout=subprocess.PIPE, check=True).stdout.decode().splitlines()
    assert remote_log[:2] == ["p 2: iteration 2", "p 1: iteration 1"]
    assert git(workspace, "rev-parse", "--abbrev-ref", "@{u}").strip() == "origin/main"


def test_git_gates_outside_a_repository_are_a_config_error(workspace, agent, capfd):
    procedure(workspace, git={"commit": True})
    code, _, err = run_main(capfd, "p", "--ai-cmd", agent.cmd)
    assert code == 2 and agent.calls == 0
    assert "procedures.p: git.commit needs a git repository" in err


def test_git_never_waits_for_input():
    env = rooda.git_environment()
    assert env["GIT_TERMINAL_PROMPT"] == "0" and env["GIT_EDITOR"] == "true"
    assert "BatchMode=yes" in env["GIT_SSH_COMMAND"]


# --- prompt <file> ------------------------------------------------------------------

def test_prompt_runs_one_iteration_of_the_file(workspace, agent, capfd):
    (workspace / "task.md").write_text("Refactor the parser.\n")
    code, _, err = run_main(capfd, "prompt", "task.md", "-c", "only src/", "--ai-cmd", agent.cmd)
    assert code == 0 and agent.calls == 1
    assert agent.prompt(1) == "## CONTEXT\nonly src/\n\nRefactor the parser.\n"
    assert agent.env_of(1)["ROODA_PROCEDURE"] == "prompt"
    assert progress_lines(err)[0] == "Starting procedure: prompt (max 1 iteration)"


def test_prompt_exits_1_when_its_iteration_fails(workspace, agent, capfd):
    (workspace / "task.md").write_text("Try.")
    agent.script({"exit": 1})
    code, _, _ = run_main(capfd, "prompt", "task.md", "--ai-cmd", agent.cmd)
    assert code == 1 and agent.calls == 1


def test_prompt_applies_verify(workspace, agent, capfd, tmp_path):
    """The agent exits 0 with no signal (a success on its own): verify alone fails it."""
    (workspace / "task.md").write_text("Try.")
    code, _, err = run_main(capfd, "prompt", "task.md", "--ai-cmd", agent.cmd, "--verify", "false",
                            "--log-dir", tmp_path / "logs")
    assert code == 1
    lines = err.splitlines()
    ended = [i for i, line in enumerate(lines) if "Iteration 1/1 completed" in line][0]
    assert lines[ended].endswith("(failure, consecutive: 1/1)")
    assert lines[ended + 1] == "  verify exit 1: (it printed nothing)"
    [end] = ends(session_events(tmp_path / "logs"))
    assert (end["exit_code"], end["verify"], end["outcome"], end["cause"]) == (0, "fail", "failure", "verify")


def test_prompt_with_a_missing_file_exits_2(workspace, agent, capfd):
    code, _, err = run_main(capfd, "prompt", "nope.md", "--ai-cmd", agent.cmd)
    assert code == 2 and "prompt file not found" in err and agent.calls == 0


def test_prompt_loops_up_to_its_cap_and_stops_early_on_success(workspace, agent, capfd):
    """The Ralph loop `while :; do cat PROMPT.md | claude; done`, with a cap."""
    (workspace / "PROMPT.md").write_text("Study the plan, do the next task.\n")
    agent.script({}, {"actions": [{"write_file": "PROMPT.md", "text": "Now finish it.\n"}]},
                 SUCCESS_SIGNAL, {})
    write_config(workspace, {"loop": {"protect": []}})  # (a prompt file it read is protected by default)
    code, _, err = run_main(capfd, "prompt", "PROMPT.md", "5", "--ai-cmd", agent.cmd)
    assert code == 0 and agent.calls == 3
    lines = progress_lines(err)
    assert lines[0] == "Starting procedure: prompt (max 5 iterations)"
    assert lines[-1] == "Completed: agent signalled SUCCESS (3 iterations, total: D)"
    assert agent.prompt(1) == "Study the plan, do the next task.\n"
    assert agent.prompt(3) == "Now finish it.\n"  # read afresh, like `cat PROMPT.md`


def test_prompt_with_a_cap_takes_the_configured_failure_threshold(workspace, agent, capfd):
    (workspace / "PROMPT.md").write_text("Try.")
    agent.script({"exit": 1}, {"exit": 1}, {})
    code, _, err = run_main(capfd, "prompt", "PROMPT.md", "-n", "3", "--ai-cmd", agent.cmd)
    assert code == 0 and agent.calls == 3, err
    assert "Iteration 2/3 completed in D (failure, consecutive: 2/3)" in progress_lines(err)


def test_prompt_unlimited_runs_until_success(workspace, agent, capfd):
    (workspace / "PROMPT.md").write_text("Try.")
    agent.script({}, {}, {}, SUCCESS_SIGNAL)
    code, _, err = run_main(capfd, "prompt", "PROMPT.md", "-u", "--ai-cmd", agent.cmd)
    assert code == 0 and agent.calls == 4
    assert "Iteration 4 completed in D (completed)" in progress_lines(err)


def test_prompt_from_standard_input_is_read_once(workspace, agent):
    agent.script({}, SUCCESS_SIGNAL)
    proc = run_rooda("prompt", "-", "3", "--ai-cmd", agent.cmd, cwd=workspace, env=agent.env,
                     input=b"Fix the flaky test.\n")
    assert proc.returncode == 0, proc.stderr
    assert agent.calls == 2
    assert agent.prompt(1) == agent.prompt(2) == "Fix the flaky test.\n"


def test_prompt_from_empty_standard_input_is_a_usage_error(workspace, agent):
    proc = run_rooda("prompt", "-", "--ai-cmd", agent.cmd, cwd=workspace, env=agent.env, input=b"")
    assert proc.returncode == 2 and b"nothing arrived on standard input" in proc.stderr
    assert agent.calls == 0


def test_prompt_takes_gates_from_the_loop_settings_and_writes_logs(workspace, agent, capfd, tmp_path):
    make_repo(workspace)
    (workspace / "PROMPT.md").write_text("Try.")
    write_config(workspace, {"loop": {"verify": "test -f built", "git": {"commit": True},
                                      "stuck": {"same_error": 2}}})
    git(workspace, "add", "-A")
    git(workspace, "commit", "-q", "-m", "prompt and config")
    agent.script({"actions": [{"out": "compiling\n"}]},
                 {"actions": [{"write_file": "built", "text": "1"}, *SUCCESS_SIGNAL["actions"]]})
    logs = tmp_path / "prompt-logs"
    code, _, err = run_main(capfd, "prompt", "PROMPT.md", "4", "--ai-cmd", agent.cmd, "--log-dir", logs)
    assert code == 0 and agent.calls == 2, err
    assert "Iteration 1/4 completed in D (failure, consecutive: 1/3)" in progress_lines(err)
    assert commits(workspace)[0] == "prompt 2: done"  # the agent's last line, its marker left out
    jsonl = [name for name in os.listdir(str(logs)) if name.endswith(".jsonl")][0]
    start = json.loads((logs / jsonl).read_text().splitlines()[0])
    assert start["procedure"] == "prompt" and start["max_iterations"] == 4


# --- gates and signals --------------------------------------------------------------

def test_sigint_during_a_gate_kills_the_gate_and_exits_130(workspace, agent):
    marker = os.path.join(agent.state, "gate-running")
    proc = start_rooda(agent, "--no-verify-baseline",
                       "--verify", "touch %s; echo $$ > %s.pid; sleep 60" % (marker, marker),
                       cwd=workspace)
    agent.wait_for("gate-running")
    agent.wait_for("gate-running.pid")
    gate_pid = agent.pid(name="gate-running.pid")
    _, err = interrupt(proc)
    assert proc.returncode == -signal.SIGINT
    assert not alive(gate_pid) and group_members(gate_pid) == []
    assert "Interrupted by SIGINT during iteration 1" in err
