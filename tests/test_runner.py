"""The agent runner of SPEC 7: streams, stdin, signals, timeouts and process groups.

Signals and streaming are tested through a real `python3 rooda.py` subprocess, the
way a user meets them; the rest in-process for speed.
"""
import json
import os
import re
import select
import signal
import subprocess
import sys
import threading
import time

import pytest

import rooda

from conftest import (ROODA, alive, group_members, process_state, progress_lines, release, run_main, run_rooda,
                      await_event, fake_cli, interrupt, start_rooda, wait_until, write_config)

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


@pytest.mark.parametrize("ending", ["ctrl-c", "timeout", "rooda killed"])
def test_claude_is_stopped_with_sigint_for_on_sigterm_it_goes_on_working(workspace, agent, tmp_path,
                                                                         monkeypatch, ending):
    """Claude Code answers SIGTERM during a tool by asking the model for its next turn;
    its catalogue row says SIGINT, and rooda, its timeout and its guardian send that."""
    fake_cli(tmp_path, monkeypatch, "claude")
    monkeypatch.setenv("ROODA_LOOP_KILL_GRACE", "30")
    agent.script({"actions": [{"term_goes_on": "went-on"}, {"touch": "ready"}, {"sleep": 60}]})
    more = ["--timeout", "1"] if ending == "timeout" else []
    proc = start_rooda(agent, "-n", "1", "--ai-cmd", "claude -p", *more, cwd=workspace)
    agent.wait_for("ready")
    if ending == "ctrl-c":
        took, _ = interrupt(proc, signal.SIGINT)
        assert took < 1.0 and proc.returncode == -signal.SIGINT
    elif ending == "rooda killed":
        proc.kill()
    assert wait_until(lambda: not alive(agent.pid(1)), timeout=10)
    proc.wait(timeout=10)
    assert not os.path.exists(os.path.join(agent.state, "went-on"))


@pytest.mark.parametrize("ending", ["ctrl-c", "rooda killed"])
def test_what_claude_leaves_after_its_sigint_gets_sigterm_at_once(workspace, agent, tmp_path, monkeypatch,
                                                                  ending):
    """A tool's `cmd &` ignores SIGINT: once Claude went on its SIGINT, what it left gets
    SIGTERM, by rooda or its guardian, not SIGKILL `kill_grace` later."""
    fake_cli(tmp_path, monkeypatch, "claude")
    monkeypatch.setenv("ROODA_LOOP_KILL_GRACE", "30")
    agent.script({"actions": [{"term_goes_on": "went-on"}, {"background": 120, "ignore_int": True,
                                                            "hold_output": False, "name": "tool.pid"},
                              {"touch": "ready"}, {"sleep": 60}]})
    proc = start_rooda(agent, "-n", "1", "--ai-cmd", "claude -p", cwd=workspace)
    agent.wait_for("ready")
    if ending == "ctrl-c":
        took, _ = interrupt(proc, signal.SIGINT)
        assert took < 2, took
    else:
        proc.kill()
        proc.wait()
    assert wait_until(lambda: not alive(agent.pid(name="tool.pid")), timeout=3)
    assert not os.path.exists(os.path.join(agent.state, "went-on"))


def test_claude_started_with_sigint_ignored_is_still_stopped_with_sigint(workspace, agent, tmp_path,
                                                                        monkeypatch):
    """A script's `&` (and nohup's callers) start rooda with SIGINT ignored; Claude Code
    handles SIGINT whatever it inherited, so SIGINT it still gets (SIGTERM let it go on:
    seen with the real 2.1.197 after a timeout in a background run)."""
    fake_cli(tmp_path, monkeypatch, "claude")
    monkeypatch.setenv("ROODA_LOOP_KILL_GRACE", "30")
    agent.script({"actions": [{"term_goes_on": "went-on"}, {"touch": "ready"}, {"sleep": 60}]})
    proc = subprocess.Popen([sys.executable, ROODA, "build", "-n", "1", "--ai-cmd", "claude -p", "--timeout", "1"],
                            cwd=str(workspace), env=dict(os.environ, **agent.env), stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
    _, err = proc.communicate(timeout=20)
    assert proc.returncode == 0 and b"(timeout, consecutive: 1/" in err, err
    assert not os.path.exists(os.path.join(agent.state, "went-on"))


def test_another_agent_is_stopped_with_sigterm(workspace, agent, monkeypatch):
    monkeypatch.setenv("ROODA_LOOP_KILL_GRACE", "0.5")
    agent.script({"actions": [{"term_goes_on": "went-on"}, {"touch": "ready"}, {"sleep": 60}]})
    proc = start_rooda(agent, "-n", "1", cwd=workspace)
    agent.wait_for("ready")
    interrupt(proc, signal.SIGINT)
    assert os.path.exists(os.path.join(agent.state, "went-on")) and not alive(agent.pid(1))


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
        " --color never --json - (preset codex, found on PATH)" in progress_lines(err)


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
    write_config(workspace, {"loop": {"protect": []}, "procedures": {"edit": {  # (protected by default: SPEC 22)
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
    await_event(os.environ["ROODA_LOOP_LOG_DIR"], "iteration_end")  # from here: between iterations
    took, err = interrupt(proc)
    assert proc.returncode == -signal.SIGINT and took < 1.0
    assert progress_lines(err)[-1] == \
        "Interrupted by SIGINT between iterations (1 iteration completed, total: D)"


# --- what children inherit (SPEC 7 rev 2) ---------------------------------------------

def ignored_signals(status_text):
    """The SigIgn mask of a /proc/<pid>/status text as a set of signal numbers."""
    for line in status_text.splitlines():
        if line.startswith("SigIgn:"):
            mask = int(line.split()[1], 16)
            return {bit + 1 for bit in range(64) if mask >> bit & 1}
    raise AssertionError("no SigIgn line in %r" % status_text)


@pytest.mark.parametrize("spawn", ["posix_spawnp", "popen"])
def test_the_agent_and_the_gates_start_with_sigpipe_and_sigxfsz_at_default(workspace, spawn):
    report = "grep SigIgn /proc/$$/status"
    proc = run_rooda("build", "-n", "1", "-v", "--ai-cmd", "sh -c '%s'" % report,
                     "--verify", report + " >&2", cwd=workspace, env=dict(os.environ, ROODA_SPAWN=spawn))
    assert proc.returncode == 0, proc.stderr
    for text in (proc.stdout.decode(), proc.stderr.decode()):
        ignored = ignored_signals(text)
        assert signal.SIGPIPE not in ignored and signal.SIGXFSZ not in ignored


def test_yes_piped_into_head_ends_at_once_and_quietly_under_rooda(workspace):
    proc = run_rooda("build", "-n", "1", "-v", "--timeout", "20", "--ai-cmd",
                     "sh -c 'yes | head -1; while true; do echo y; done | head -1'", cwd=workspace)
    assert proc.returncode == 0 and "(success)" in proc.stderr.decode(), proc.stderr
    assert proc.stdout == b"y\ny\n"
    assert b"Broken pipe" not in proc.stderr


def test_sighup_inherited_as_ignored_stays_ignored_by_rooda_and_the_agent(workspace, agent):
    """`nohup python3 rooda.py build &`, then logging out: the run goes on."""
    agent.script({"actions": [{"touch": "ready"}, {"wait_for": "go"},
                              {"out": "<promise>SUCCESS</promise>\n"}]})
    env = dict(os.environ, **agent.env)
    proc = subprocess.Popen([sys.executable, ROODA, "build", "--ai-cmd", agent.cmd], cwd=str(workspace),
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            preexec_fn=lambda: signal.signal(signal.SIGHUP, signal.SIG_IGN))
    try:
        agent.wait_for("ready")
        with open("/proc/%d/status" % agent.pid(1)) as stream:
            assert signal.SIGHUP in ignored_signals(stream.read())
        proc.send_signal(signal.SIGHUP)   # the terminal went away
        os.killpg(agent.pid(1), signal.SIGHUP)
        time.sleep(0.2)  # not synchronisation: give a wrongly handled SIGHUP time to act
        release(agent, "go")
        _, err = proc.communicate(timeout=30)
    finally:
        release(agent, "go")
    assert proc.returncode == 0, err
    assert "Completed: agent signalled SUCCESS" in err.decode()


def test_an_agent_that_recreates_the_project_directory_does_not_break_the_next_iteration(
        tmp_path, agent):
    project = tmp_path / "project"
    project.mkdir()
    script = "import os, shutil; os.chdir('..'); shutil.rmtree('project'); os.mkdir('project')"
    agent.script({"actions": [{"out": "rebuilt\n"}]})
    proc = run_rooda("build", "-n", "2", "--no-log", "--ai-cmd", "%s -c \"%s\"" % (sys.executable, script),
                     "--verify", "pwd", cwd=str(project), env=agent.env)
    assert proc.returncode == 0, proc.stderr
    lines = progress_lines(proc.stderr.decode())
    assert "Iteration 2/2 completed in D (success)" in lines


def test_a_nul_byte_in_a_prompt_argument_is_one_clear_error(workspace, agent, capfd):
    (workspace / "notes.txt").write_bytes("notes".encode("utf-16"))
    code, _, err = run_main(capfd, "build", "-n", "1", "-c", "@notes.txt", "--ai-cmd",
                            agent.cmd + " {prompt}")
    assert code == 2 and agent.calls == 0
    assert "the prompt contains a NUL byte" in err and "{prompt_file}" in err
    assert "Traceback" not in err


def test_a_nul_byte_in_the_agent_environment_is_one_clear_error(workspace, agent, capfd):
    write_config(workspace, {"loop": {"env": {"TOKEN": "a\u0000b"}}})
    code, _, err = run_main(capfd, "build", "-n", "1", "--ai-cmd", agent.cmd)
    assert code == 2 and agent.calls == 0
    assert "TOKEN contains a NUL byte" in err and "Traceback" not in err


def test_rooda_run_through_a_symlink_finds_its_procedures_and_logs_beside_itself(tmp_path):
    """`ln -s .../.rooda/rooda.py ~/bin/rooda`: prompts, config and logs are the copy's."""
    project = tmp_path / "project"
    project.mkdir()
    assert run_rooda("vendor", str(project)).returncode == 0
    link = tmp_path / "bin" / "rooda"
    link.parent.mkdir()
    link.symlink_to(project / ".rooda" / "rooda.py")
    listing = subprocess.run([sys.executable, str(link), "list"], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, cwd=str(project), timeout=30)
    assert listing.returncode == 0 and b"build " in listing.stdout, listing.stderr
    env = dict(os.environ)
    env.pop("ROODA_LOOP_LOG_DIR")  # the built-in log_dir: logs/ beside rooda.py
    run = subprocess.run([sys.executable, str(link), "build", "-n", "1", "--ai-cmd", "true"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=str(project),
                         env=env, timeout=30)
    assert run.returncode == 0, run.stderr
    assert os.listdir(str(project / ".rooda" / "logs"))
    assert not (tmp_path / "bin" / "logs").exists()


# --- Ctrl+Z, readers that stop reading (SPEC 7 rev 2) ------------------------------------

TICKER = ("import sys, time\n"
          "open(sys.argv[1], 'w').close()\n"
          "for _ in range(int(sys.argv[2])):\n"
          "    print('tick', flush=True); time.sleep(0.1)\n"
          "print('<promise>SUCCESS</promise>', flush=True)\n")


def test_ctrl_z_stops_the_agents_group_and_the_time_stopped_counts_toward_no_timeout(workspace, tmp_path):
    script = tmp_path / "ticker.py"
    script.write_text(TICKER)
    ready = tmp_path / "ready"
    proc = subprocess.Popen([sys.executable, ROODA, "build", "-n", "1", "--no-log", "--idle-timeout", "2",
                             "--timeout", "20", "--ai-cmd", "%s %s %s 30" % (sys.executable, script, ready)],
                            cwd=str(workspace), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert wait_until(ready.exists, timeout=20)
        children = [int(p) for p in open("/proc/%d/task/%d/children" % (proc.pid, proc.pid)).read().split()]
        [agent_pid] = [p for p in children if os.getsid(p) != os.getsid(proc.pid)]  # (not rooda's helpers)
        proc.send_signal(signal.SIGTSTP)  # what Ctrl+Z sends to the foreground job
        assert wait_until(lambda: process_state(proc.pid) == "T" and process_state(agent_pid) == "T")
        time.sleep(3)  # stopped for longer than the idle timeout: that is the scenario
        assert process_state(agent_pid) == "T", "the agent kept running while rooda was stopped"
        proc.send_signal(signal.SIGCONT)  # `fg`
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    assert b"Completed: agent signalled SUCCESS" in err and b"no output for" not in err


@pytest.mark.parametrize("logging", [["--no-log"], []], ids=["no-log", "log"])
def test_a_reader_that_stops_reading_never_blocks_timeouts_or_signals(workspace, agent, logging):
    """--verbose into a pipe nobody reads (a pager, Ctrl+S): --timeout still holds."""
    agent.script({"actions": [{"out_bytes": 12 << 20, "line": 100}, {"sleep": 60}]})
    read_end, write_end = os.pipe()
    try:
        started = time.monotonic()
        proc = subprocess.Popen([sys.executable, ROODA, "build", "-n", "1", "-v", "--timeout", "2",
                                 "--ai-cmd", agent.cmd] + logging,
                                cwd=str(workspace), env=dict(os.environ, **agent.env), stdout=write_end,
                                stderr=subprocess.PIPE)
        _, err = proc.communicate(timeout=30)
        took = time.monotonic() - started
    finally:
        os.close(write_end)
        os.close(read_end)
    assert took < 12, "the timeout of 2 s took %.1fs" % took
    assert b"(timeout, consecutive: 1/3)" in err
    # With --no-log nothing keeps the dropped output, and the warning must not say otherwise.
    assert b"stdout is not being read; output is dropped from it until it is (%s)" % (
        b"with --no-log it is lost" if logging else b"the session log keeps everything") in err


@pytest.mark.parametrize("reader", ["stopped", "slow"])
def test_sigterm_reaches_rooda_whatever_its_reader_of_verbose_output_does(workspace, agent, reader):
    """Neither a reader that stopped nor one that reads slowly holds up an interruption
    (the slow one took 30 s once: rooda drained 8 MiB into it before exiting)."""
    agent.script({"actions": [{"out_bytes": 12 << 20, "line": 100}, {"touch": "written"}, {"sleep": 60}]})
    read_end, write_end = os.pipe()

    def read_slowly():  # 64 KiB every 0.2 s
        try:
            while os.read(read_end, 65536):
                time.sleep(0.2)
        except OSError:
            pass
        os.close(read_end)
    if reader == "slow":
        threading.Thread(target=read_slowly, daemon=True).start()
    try:
        proc = start_rooda(agent, "-n", "1", "-v", "--no-log", cwd=workspace, stdout=write_end)
        agent.wait_for("written")
        took, err = interrupt(proc, signal.SIGTERM)
    finally:
        os.close(write_end)
        if reader == "stopped":
            os.close(read_end)
    assert proc.returncode == -signal.SIGTERM and took < 1.5, (took, err)


LINGERING_TREE = (
    "import os, signal, subprocess, sys, time\n"
    "sys.stdin.read()\n"
    "# a 'dev server' in a session of its own whose child outlives it by a moment on\n"
    "# SIGTERM: the child is adopted by rooda (the subreaper) and dies as its zombie\n"
    "child = ('import signal, sys, time\\n'\n"
    "         'signal.signal(signal.SIGTERM, lambda *a: (time.sleep(0.3), sys.exit(0)))\\n'\n"
    "         'time.sleep(300)\\n')\n"
    "subprocess.Popen(['sh', '-c', '%s -c \"$0\" & wait' % sys.executable, child],\n"
    "                 start_new_session=True, stdin=subprocess.DEVNULL,\n"
    "                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)\n"
    "time.sleep(0.3)\n"
    "print('<promise>SUCCESS</promise>', flush=True)\n")


def test_an_escaped_tree_whose_child_outlives_its_parent_costs_no_grace_period(workspace, tmp_path):
    script = tmp_path / "server.py"
    script.write_text(LINGERING_TREE)
    proc = run_rooda("build", "-n", "1", "--no-log", "--ai-cmd", "%s %s" % (sys.executable, script),
                     cwd=workspace)
    assert proc.returncode == 0, proc.stderr
    seconds = float(re.search(rb"completed in (\d+\.\d)s", proc.stderr).group(1))
    assert seconds < 3, "the escapees' zombie held the group for the 5 s grace (%.1fs)" % seconds


NESTED_ESCAPEES = (
    "import subprocess, sys, time\n"
    "sys.stdin.read()\n"
    "# a tool in a session of its own (claude's Bash) that starts a server in yet another\n"
    "# (`setsid server &`): the server is adopted by rooda only once the tool has died --\n"
    "# and this tool, holding 256 MiB, takes a while to die even of SIGKILL\n"
    "tool = ('import subprocess, sys, time\\n'\n"
    "        'memory = b\"x\" * (256 << 20)\\n'\n"
    "        'server = subprocess.Popen([\"sleep\", \"303\"], start_new_session=True)\\n'\n"
    "        'open(sys.argv[1], \"w\").write(str(server.pid))\\n'\n"
    "        'time.sleep(60)\\n')\n"
    "subprocess.Popen([sys.executable, '-c', tool, sys.argv[1]], start_new_session=True,\n"
    "                 stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)\n"
    "print('tool started', flush=True)\n"
    "time.sleep(60)\n")


def test_ctrl_c_leaves_no_server_that_a_tool_started_in_a_session_of_its_own(workspace, tmp_path):
    script, pid_file = tmp_path / "agent.py", tmp_path / "server.pid"
    script.write_text(NESTED_ESCAPEES)
    proc = subprocess.Popen([sys.executable, ROODA, "build", "-n", "1", "--no-log", "--ai-cmd",
                             "%s %s %s" % (sys.executable, script, pid_file)],
                            cwd=str(workspace), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert wait_until(lambda: pid_file.exists() and pid_file.read_text().strip(), timeout=20)
        server = int(pid_file.read_text())
        took, err = interrupt(proc)
        assert proc.returncode == -signal.SIGINT and took < 1.5, (took, err)
        assert not alive(server), "the tool's server outlived rooda"
    finally:
        if proc.poll() is None:
            proc.kill()
        if pid_file.exists() and pid_file.read_text().strip() and alive(int(pid_file.read_text())):
            os.kill(int(pid_file.read_text()), signal.SIGKILL)


def test_agent_output_and_progress_lines_keep_their_order_on_one_terminal(workspace, agent, tmp_path):
    agent.script({"actions": [{"out": "first agent line\n"}]}, {"actions": [{"out": "second agent line\n"}]})
    output = tmp_path / "screen.txt"
    with open(str(output), "wb") as stream:
        subprocess.run([sys.executable, ROODA, "build", "-n", "2", "-v", "--no-log", "--ai-cmd", agent.cmd],
                       cwd=str(workspace), env=dict(os.environ, **agent.env), stdout=stream, stderr=stream,
                       timeout=60)
    text = output.read_text()
    order = [text.index(marker) for marker in (
        "Iteration 1/2 starting", "first agent line", "Iteration 1/2 completed",
        "Iteration 2/2 starting", "second agent line", "Iteration 2/2 completed")]
    assert order == sorted(order), text


# --- moved from the review round's edge cases: each went wrong once ---------------------

def test_verbose_with_stdout_closed_warns_once_and_goes_on(workspace, agent):
    agent.script({"actions": [{"out": "hello\n"}]})
    proc = subprocess.run([sys.executable, ROODA, "build", "-n", "2", "-v", "--no-log", "--ai-cmd", agent.cmd],
                          cwd=str(workspace), env=dict(os.environ, **agent.env), stdout=subprocess.DEVNULL,
                          stderr=subprocess.PIPE, timeout=60, preexec_fn=lambda: os.close(1))
    err = proc.stderr.decode()
    assert proc.returncode == 0 and "Traceback" not in err, err
    assert err.count("stdout is closed; agent output is no longer shown") == 1


def test_a_signal_in_the_last_moment_of_a_run_still_ends_it_as_interrupted(workspace, agent, capfd,
                                                                          monkeypatch):
    """SIGTERM after the last iteration's checks, as the run closes: not lost, not "Completed"."""
    agent.script({"actions": [{"out": "done\n<promise>SUCCESS</promise>\n"}]})
    info = rooda.Progress.info

    def info_then_signal(progress, message):
        info(progress, message)
        if message.startswith("Iteration 1/1 completed"):
            os.kill(os.getpid(), signal.SIGTERM)  # rooda's own handler records it
    monkeypatch.setattr(rooda.Progress, "info", info_then_signal)
    code, _, err = run_main(capfd, "build", "-n", "1", "--ai-cmd", agent.cmd)
    assert code == 143, err
    assert "Interrupted by SIGTERM between iterations (1 iteration completed" in err
    assert "Completed" not in err


def test_run_agent_in_another_directory_leaves_the_callers_alone(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    seen = []
    rooda.run_agent(["pwd"], "", cwd="/", on_stdout=seen.append)
    assert b"".join(seen) == b"/\n" and os.getcwd() == str(tmp_path)


# --- issue 22: defects of revision 2, each once seen ------------------------------------

def test_huge_timeouts_are_no_overflow(workspace, agent, capfd):
    """Item 8: `--timeout 99999999` (and a huge gate_timeout) raised `OverflowError:
    timeout is too large` from select."""
    write_config(workspace, {"loop": {"gate_timeout": 1e12, "idle_timeout": 1e15, "heartbeat": 0}})
    agent.script({"actions": [{"sleep": 0.3}, {"out": "done\n"}]})  # quiet: a wait until the deadline
    code, _, err = run_main(capfd, "build", "-n", "1", "--ai-cmd", agent.cmd, "--timeout", "99999999",
                            "--verify", "sleep 0.3", "--max-time", "1e18")
    assert code == 0 and "Traceback" not in err, err
    assert "Iteration 1/1 completed in D (success)" in progress_lines(err)


def test_rooda_own_line_that_overflows_a_stalled_stream_warns_without_deadlock(tmp_path, monkeypatch):
    """Item 12: with -v and a reader that stopped reading stderr, the write that overflowed
    the buffer was one of rooda's own lines; its warning took the line's (non-reentrant)
    lock again: deadlock, and SIGTERM ignored ever after."""
    monkeypatch.setattr(rooda, "OUTLET_BUFFER_BYTES", 4096)
    read_end, write_end = os.pipe()
    os.set_blocking(write_end, False)
    try:
        while True:
            os.write(write_end, b"x" * 4096)  # the pipe full, and never read
    except BlockingIOError:
        os.set_blocking(write_end, True)
    err = rooda.Outlet(os.fdopen(write_end, "w"), "stderr")
    progress = rooda.Progress(err)
    err.on_trouble = progress.warn
    err.write(b"y" * 4000)  # the buffer all but full: the next line of rooda's overflows it
    writer = threading.Thread(target=progress.info, args=("a line of rooda's own " + "." * 200,), daemon=True)
    writer.start()
    writer.join(10)
    try:
        assert not writer.is_alive(), "deadlocked"
        assert err.dropped > 0
    finally:
        os.close(read_end)
