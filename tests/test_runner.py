"""The agent runner of SPEC 7: streams, stdin, signals, timeouts and process groups.

Signals and streaming are tested through a real `python3 rooda.py` subprocess, the
way a user meets them; the rest in-process for speed.
"""
import json
import os
import select
import signal
import subprocess
import sys
import time

import pytest

from conftest import (ROODA, alive, group_members, progress_lines, run_main, run_rooda,
                      interrupt, start_rooda, wait_until, write_config)

def release(agent, name="release"):
    open(os.path.join(agent.state, name), "w").close()


# --- streaming ---------------------------------------------------------------------

def test_verbose_streams_a_partial_line_before_the_agent_exits(workspace, agent):
    agent.script({"actions": [{"out": "partial-without-newline"}, {"wait_for": "release"}]})
    proc = start_rooda(agent, "-n", "1", "--verbose", cwd=workspace)
    try:
        seen = b""
        deadline = time.monotonic() + 15
        while b"partial-without-newline" not in seen and time.monotonic() < deadline:
            ready, _, _ = select.select([proc.stdout], [], [], 0.5)
            if ready:
                seen += os.read(proc.stdout.fileno(), 4096)
        assert b"partial-without-newline" in seen
        assert alive(agent.pid(1)), "the output arrived only after the agent exited"
    finally:
        release(agent)
        out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err


def test_verbose_passes_bytes_through_unchanged(workspace, agent, capfd):
    raw = "ff00fe0d0a" + "e282ac"  # invalid UTF-8, NUL, CR LF, then a euro sign
    agent.script({"actions": [{"out_hex": raw}]})
    proc = run_rooda("build", "-n", "1", "-v", "--ai-cmd", agent.cmd, cwd=workspace, env=agent.env)
    assert proc.returncode == 0
    assert proc.stdout == bytes.fromhex(raw)


# --- interruption ------------------------------------------------------------------

@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP])
def test_a_signal_ends_rooda_and_the_agent_group_with_128_plus_n(workspace, agent, signum):
    agent.script({"actions": [{"background": 60}, {"touch": "ready"}, {"sleep": 60}]})
    proc = start_rooda(agent, "-n", "3", cwd=workspace)
    agent.wait_for("ready")
    agent.wait_for("bg-1.pid")
    group, child = agent.pid(1), agent.pid(name="bg-1.pid")
    assert alive(child)
    took, err = interrupt(proc, signum)
    assert proc.returncode == -signum  # the shell shows 128 + signum
    assert took < 1.0, "rooda needed %.2fs to go" % took
    assert group_members(group) == []
    assert not alive(child)
    name = signal.Signals(signum).name
    assert progress_lines(err)[-1] == \
        "Interrupted by %s during iteration 1 (0 iterations completed, total: D)" % name


def test_the_shell_sees_130_after_ctrl_c(workspace, agent):
    agent.script({"actions": [{"touch": "ready"}, {"sleep": 60}]})
    env = dict(os.environ)
    env.update(agent.env)
    script = '"$@"; echo "status=$?"'
    proc = subprocess.Popen(["sh", "-c", script, "sh", sys.executable, ROODA, "build", "--ai-cmd",
                             agent.cmd], cwd=str(workspace), env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    agent.wait_for("ready")
    with open(os.path.join(agent.state, "ppid-1")) as stream:
        rooda_pid = int(stream.read())
    os.kill(rooda_pid, signal.SIGINT)
    out, _ = proc.communicate(timeout=20)
    assert out.decode().strip().endswith("status=130")


# --- stdin and pipes: no deadlock, no stall ------------------------------------------

def test_10mb_prompt_to_an_agent_that_writes_1mb_before_reading(workspace, agent, capfd):
    (workspace / "big.txt").write_bytes(b"y" * (10 * 1024 * 1024))
    agent.script({"stdin": "after", "actions": [{"out_bytes": 1024 * 1024, "line": 80}]})
    code, _, err = run_main(capfd, "build", "-n", "1", "-c", "@big.txt", "--ai-cmd", agent.cmd,
                            "--timeout", "60")
    assert code == 0, err
    assert "(success)" in err
    assert len(agent.prompt(1)) > 10 * 1024 * 1024


def test_an_agent_that_never_reads_stdin_completes(workspace, agent, capfd):
    (workspace / "big.txt").write_bytes(b"y" * (4 * 1024 * 1024))
    agent.script({"stdin": "never", "actions": [{"sleep": 0.2}, {"out": "ok\n"}]})
    code, _, err = run_main(capfd, "build", "-n", "2", "-c", "@big.txt", "--ai-cmd", agent.cmd,
                            "--timeout", "60")
    assert code == 0
    assert progress_lines(err).count("Iteration 2/2 completed in D (success)") == 1


def test_a_background_child_holding_stdout_does_not_stall_the_loop(workspace, agent, capfd):
    agent.script({"actions": [{"background": 60, "hold_output": True}, {"out": "bye\n"}]})
    started = time.monotonic()
    code, _, err = run_main(capfd, "build", "-n", "2", "--ai-cmd", agent.cmd)
    assert code == 0
    assert time.monotonic() - started < 10  # the child alone would hold the pipe for 60 s
    for call in (1, 2):
        assert not alive(agent.pid(name="bg-%d.pid" % call))


def test_leftovers_not_holding_the_pipes_are_terminated_too(workspace, agent, capfd):
    agent.script({"actions": [{"background": 60, "hold_output": False}]})
    code, _, _ = run_main(capfd, "build", "-n", "1", "--ai-cmd", agent.cmd)
    assert code == 0
    assert not alive(agent.pid(name="bg-1.pid"))
    assert group_members(agent.pid(1)) == []


def test_agent_killed_by_a_signal_is_a_failure_with_exit_128_plus_n(workspace, agent, capfd):
    agent.script({"actions": [{"out": "dying\n"}, {"kill_self": 9}]}, {})
    code, _, err = run_main(capfd, "build", "-n", "2", "--ai-cmd", agent.cmd)
    assert "Iteration 1/2 completed in D (failure, consecutive: 1/3)" in progress_lines(err)
    assert "Iteration 1 ended in failure (exit code 137)." in agent.prompt(2)


# --- the agent's command, environment and prompt ---------------------------------------

def test_agent_environment(workspace, agent, capfd, monkeypatch):
    monkeypatch.setenv("CLAUDECODE", "1")
    write_config(workspace, {"loop": {"env": {"FAKE_EXTRA": "from-loop"}}})
    agent.script({})
    run_main(capfd, "build", "-n", "2", "--ai-cmd", agent.cmd)
    env = agent.env_of(2)
    assert env["ROODA_PROCEDURE"] == "build"
    assert env["ROODA_ITERATION"] == "2"
    assert env["ROODA_MAX_ITERATIONS"] == "2"
    assert env["FAKE_EXTRA"] == "from-loop"
    assert "CLAUDECODE" not in env


def test_max_iterations_variable_is_empty_when_unlimited(workspace, agent, capfd):
    agent.script({"actions": [{"out": "<promise>SUCCESS</promise>\n"}]})
    run_main(capfd, "build", "-u", "--ai-cmd", agent.cmd)
    assert agent.env_of(1)["ROODA_MAX_ITERATIONS"] == ""


def test_prompt_file_token(workspace, agent, capfd):
    agent.script({"actions": [{"echo_prompt": True}]})
    code, _, _ = run_main(capfd, "build", "-n", "1", "--ai-cmd", agent.cmd + " --prompt-file {prompt_file}")
    assert code == 0
    with open(os.path.join(agent.state, "argv-1.json")) as stream:
        argv = json.load(stream)
    path = argv[argv.index("--prompt-file") + 1]
    assert path != "{prompt_file}"
    assert not os.path.exists(path), "the prompt file was not removed"
    assert agent.prompt(1).startswith("# OODA Loop Iteration")


def test_prompt_token_passes_the_prompt_as_one_argument(workspace, agent, capfd):
    code, _, _ = run_main(capfd, "build", "-n", "1", "--ai-cmd", agent.cmd + " {prompt}")
    assert code == 0
    with open(os.path.join(agent.state, "argv-1.json")) as stream:
        argv = json.load(stream)
    assert len(argv) == 1 and argv[0].startswith("# OODA Loop Iteration\n")
    assert agent.prompt(1) == ""  # stdin was /dev/null


def test_prompt_token_refuses_a_prompt_over_128_kib(workspace, agent, capfd):
    (workspace / "big.txt").write_text("z" * 200000)
    code, _, err = run_main(capfd, "build", "-n", "1", "-c", "@big.txt", "--ai-cmd", agent.cmd + " {prompt}")
    assert code == 2
    assert "{prompt_file}" in err
    assert agent.calls == 0


def test_missing_agent_program_exits_2_before_the_first_iteration(workspace, capfd):
    code, _, err = run_main(capfd, "build", "--ai-cmd", "no-such-agent-xyz --flag")
    assert code == 2
    assert "agent program 'no-such-agent-xyz' not found on PATH" in err
    assert "--ai-cmd" in err and "Iteration" not in err


def test_no_agent_at_all_exits_2_listing_the_presets(workspace, capfd, monkeypatch):
    monkeypatch.setenv("PATH", str(workspace))
    code, _, err = run_main(capfd, "build")
    assert code == 2
    assert "no agent found" in err and "claude" in err and "--ai-cmd-alias" in err


def test_preset_found_on_path_is_chosen_and_named(workspace, agent, capfd, monkeypatch, tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake_codex = bin_dir / "codex"
    fake_codex.write_text("#!/bin/sh\ncat >/dev/null\necho '<promise>SUCCESS</promise>'\n")
    fake_codex.chmod(0o755)
    monkeypatch.setenv("PATH", "%s:%s" % (bin_dir, os.environ["PATH"]))
    monkeypatch.setattr("rooda._which", lambda name: str(fake_codex) if name == "codex" else None)
    code, _, err = run_main(capfd, "build", "-n", "1")
    assert code == 0
    assert "Agent: codex exec --dangerously-bypass-approvals-and-sandbox --skip-git-repo-check" \
        " --color never - (preset codex, found on PATH)" in progress_lines(err)


def test_feedback_section_quotes_the_failed_iteration(workspace, agent, capfd):
    agent.script({"actions": [{"out": "ERROR: widget broke at line 42\n<promise>FAILURE</promise>\n"}],
                  "exit": 1}, {}, {})
    run_main(capfd, "build", "-n", "3", "--ai-cmd", agent.cmd)
    second = agent.prompt(2)
    assert "## PREVIOUS ITERATION\nIteration 1 ended in failure (exit code 1)." in second
    assert "widget broke at line 42" in second
    assert "<promise>FAILURE</promise>" not in second.split("## OBSERVE")[0]
    assert second.index("## PREVIOUS ITERATION") < second.index("## OBSERVE")
    assert "PREVIOUS ITERATION" not in agent.prompt(1)
    assert "PREVIOUS ITERATION" not in agent.prompt(3)  # iteration 2 succeeded


def test_feedback_can_be_turned_off(workspace, agent, capfd):
    write_config(workspace, {"loop": {"feedback": False}})
    agent.script({"exit": 1}, {})
    run_main(capfd, "build", "-n", "2", "--ai-cmd", agent.cmd)
    assert "PREVIOUS ITERATION" not in agent.prompt(2)


def test_prompt_is_rebuilt_each_iteration(workspace, agent, capfd):
    (workspace / "act.md").write_text("first version")
    write_config(workspace, {"procedures": {"edit": {
        "observe": "act.md", "orient": "act.md", "decide": "act.md", "act": "act.md"}}})
    agent.script({"actions": [{"write_file": "act.md", "text": "second version"}]}, {})
    code, _, _ = run_main(capfd, "edit", "-n", "2", "--ai-cmd", agent.cmd)
    assert code == 0
    assert "first version" in agent.prompt(1) and "second version" not in agent.prompt(1)
    assert "second version" in agent.prompt(2)


def test_a_signal_between_iterations_stops_at_once(workspace, agent):
    agent.script({"actions": [{"touch": "ready"}]})
    proc = start_rooda(agent, "-n", "3", "--delay", "60", cwd=workspace)
    agent.wait_for("ready")
    wait_until(lambda: not alive(agent.pid(1)))
    time.sleep(0.2)  # not synchronisation: let rooda reach its delay
    took, err = interrupt(proc)
    assert proc.returncode == -signal.SIGINT and took < 1.0
    assert progress_lines(err)[-1] == \
        "Interrupted by SIGINT between iterations (1 iteration completed, total: D)"
