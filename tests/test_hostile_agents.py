"""Agents that misbehave, and bad input: rooda ends as SPEC says, loses nothing, and
leaves no process of the agent behind. Every case runs with both I/O pumps: the
selector loop with os.posix_spawnp, and the thread-based fallback with subprocess.Popen
(what Windows runs) forced on Linux."""
import os
import signal
import subprocess
import sys
import time

import pytest

from conftest import (ROODA, alive, group_members, interrupt, progress_lines, run_rooda, session_events,
                      start_rooda, wait_until, write_config)

linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="needs Linux /proc")


@pytest.fixture(params=["selectors", "threads"])
def io_mode(request, monkeypatch):
    if request.param == "threads":
        monkeypatch.setenv("ROODA_THREADED_IO", "1")
        monkeypatch.setenv("ROODA_SPAWN", "popen")
    return request.param


def rooda(agent, workspace, *args, timeout=60):
    """rooda as a subprocess with the fake agent; (exit code, stdout, stderr, seconds)."""
    started = time.monotonic()
    proc = run_rooda("build", "--ai-cmd", agent.cmd, *args, cwd=str(workspace), env=agent.env,
                     timeout=timeout)
    return proc.returncode, proc.stdout.decode(), proc.stderr.decode(), time.monotonic() - started


def assert_nothing_survives(agent, calls=1, *names):
    for call in range(1, calls + 1):
        assert wait_until(lambda: group_members(agent.pid(call)) == [], timeout=2), \
            "a process of the agent's group survived"
    for name in names:
        pid = agent.pid(name=name)
        assert wait_until(lambda: not alive(pid), timeout=2), "%s survived" % name


def test_agent_ignoring_sigterm_is_killed_after_the_grace(workspace, agent, io_mode):
    write_config(workspace, {"loop": {"kill_grace": 0.5}})
    agent.script({"actions": [{"ignore_term": True}, {"background": 60}, {"sleep": 60}]})
    code, _, err, took = rooda(agent, workspace, "-n", "1", "--timeout", "0.5")
    assert code == 0 and took < 20
    assert "Iteration 1/1 completed in D (timeout, consecutive: 1/3)" in progress_lines(err)
    assert_nothing_survives(agent, 1, "bg-1.pid")


@linux_only
def test_a_double_forked_daemon_holding_stdout_does_not_stall_the_loop(workspace, agent, io_mode):
    agent.script({"actions": [{"background": 60, "hold_output": True, "setsid": True},
                              {"out": "<promise>SUCCESS</promise>\n"}]})
    code, _, err, took = rooda(agent, workspace, "-n", "3")
    assert code == 0 and took < 10, err
    assert "Completed: agent signalled SUCCESS (1 iteration" in err
    assert_nothing_survives(agent, 1, "bg-1.pid")


def test_an_agent_that_sleeps_forever_meets_the_iteration_timeout(workspace, agent, io_mode):
    agent.script({"actions": [{"background": 60}, {"sleep": 3600}]})
    code, _, err, took = rooda(agent, workspace, "-n", "2", "--timeout", "0.4")
    assert code == 0 and took < 20
    assert progress_lines(err).count("Iteration 2/2 completed in D (timeout, consecutive: 2/3)") == 1
    assert_nothing_survives(agent, 2, "bg-1.pid", "bg-2.pid")


def test_an_agent_that_goes_quiet_meets_the_idle_timeout(workspace, agent, io_mode):
    agent.script({"actions": [{"out": "working...\n"}, {"sleep": 3600}]})
    code, _, err, took = rooda(agent, workspace, "-n", "1", "--idle-timeout", "0.4",
                               "--failure-threshold", "1")
    assert code == 1 and took < 20
    assert "no output for 0.4s; the agent was stopped" in err
    assert_nothing_survives(agent)


def test_200_mb_on_one_line_then_the_signal_keeps_memory_bounded(workspace, agent, io_mode, tmp_path):
    script = tmp_path / "flood.sh"
    script.write_text("head -c 209715200 /dev/zero\nprintf '<promise>SUCCESS</promise>\\n'\n")
    env = dict(os.environ, **agent.env)
    proc = subprocess.Popen([sys.executable, ROODA, "build", "-n", "2", "--no-log", "--ai-cmd",
                             "sh %s" % script], cwd=str(workspace), env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    err = proc.stderr.read().decode()
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status) if hasattr(os, "waitstatus_to_exitcode") else status >> 8
    assert proc.returncode == 0, err
    assert "Completed: agent signalled SUCCESS (1 iteration" in err
    peak_mib = usage.ru_maxrss / 1024
    assert peak_mib < 120, "rooda peaked at %.0f MiB for 200 MB of output" % peak_mib


def test_invalid_utf8_and_nul_bytes_around_the_signal(workspace, agent, io_mode):
    agent.script({"actions": [{"out_hex": "fffe00" + "<promise>SUCCESS</promise>".encode().hex() + "00c30a"}]})
    code, _, err, _ = rooda(agent, workspace, "-n", "3")
    assert code == 0 and "Completed: agent signalled SUCCESS (1 iteration" in err


def test_the_signal_split_across_writes_with_a_pause(workspace, agent, io_mode):
    agent.script({"actions": [{"out": "done: <promise>SUCC"}, {"sleep": 0.3}, {"out": "ESS</promise>\n"}]})
    code, _, err, _ = rooda(agent, workspace, "-n", "3")
    assert code == 0 and "Completed: agent signalled SUCCESS (1 iteration" in err


def test_output_on_stderr_only(workspace, agent, io_mode):
    agent.script({"actions": [{"err": "progress\n" * 1000 + "<promise>FAILURE</promise>\n"}]})
    code, out, err, _ = rooda(agent, workspace, "-n", "1", "-v")
    assert out == "" and "progress\n" in err
    assert "(failure, consecutive: 1/3)" in err


def test_an_agent_killed_by_a_signal_shows_128_plus_n(workspace, agent, io_mode, tmp_path):
    agent.script({"actions": [{"kill_self": signal.SIGSEGV}]})
    code, _, err, _ = rooda(agent, workspace, "-n", "1", "--log-dir", str(tmp_path / "l"))
    end = [event for event in session_events(tmp_path / "l") if event["event"] == "iteration_end"][0]
    assert end["exit_code"] == 128 + signal.SIGSEGV and end["signal"] == "SIGSEGV"
    assert end["outcome"] == "failure"


def test_a_second_ctrl_c_during_the_grace_kills_at_once(workspace, agent, io_mode):
    agent.script({"actions": [{"term_goes_on": "terminated"}, {"touch": "ready"}, {"sleep": 60}]})
    proc = start_rooda(agent, cwd=workspace, stdout=subprocess.DEVNULL)
    agent.wait_for("ready")
    proc.send_signal(signal.SIGINT)
    agent.wait_for("terminated")  # rooda handled the first signal: the agent got its SIGTERM
    assert proc.poll() is None
    took, _ = interrupt(proc)
    assert proc.returncode == -signal.SIGINT and took < 1.0
    assert_nothing_survives(agent)


@linux_only
def test_an_escaped_descendant_is_terminated(workspace, agent, io_mode):
    agent.script({"actions": [{"background": 60, "hold_output": False, "setsid": True}]})
    code, _, _, _ = rooda(agent, workspace, "-n", "1")
    assert code == 0
    assert_nothing_survives(agent, 1, "bg-1.pid")


def test_a_huge_prompt_to_an_agent_that_never_reads(workspace, agent, io_mode):
    (workspace / "big.txt").write_bytes(b"y" * (8 * 1024 * 1024))
    agent.script({"stdin": "never", "actions": [{"sleep": 0.2}]})
    code, _, err, took = rooda(agent, workspace, "-n", "2", "-c", "@big.txt", "--timeout", "30")
    assert code == 0 and took < 20
    assert "Iteration 2/2 completed in D (success)" in progress_lines(err)


# --- broken pipes ---------------------------------------------------------------------

def test_verbose_into_a_closed_pipe_warns_once_and_goes_on(workspace, agent, io_mode):
    agent.script({"actions": [{"out_bytes": 1 << 20, "line": 100}]})
    command = '%s %s build -n 3 -v --ai-cmd "%s" | head -1; echo "rooda=${PIPESTATUS[0]}" >&2' % (
        sys.executable, ROODA, agent.cmd)
    proc = subprocess.run(["bash", "-c", command], cwd=str(workspace), env=dict(os.environ, **agent.env),
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=60)
    err = proc.stderr.decode()
    assert proc.stdout.count(b"\n") == 1
    assert err.count("stdout is closed; agent output is no longer shown (the loop goes on)") == 1
    assert "Reached max iterations: 3" in err and "rooda=0" in err
    assert "Traceback" not in err and "Exception ignored" not in err


# --- bad input: one clear line, the right exit code -------------------------------------

def test_a_fragment_that_disappears_mid_run(workspace, agent):
    (workspace / "f.md").write_text("Do it.")
    write_config(workspace, {"loop": {"protect": []}, "procedures": {"p": {  # (protected by default: SPEC 22)
        "observe": "f.md", "orient": "f.md", "decide": "f.md", "act": "f.md"}}})
    agent.script({"actions": [{"remove": "f.md"}]})
    proc = run_rooda("p", "-n", "3", "--ai-cmd", agent.cmd, cwd=str(workspace), env=agent.env)
    err = proc.stderr.decode()
    assert proc.returncode == 2 and agent.calls == 1
    assert progress_lines(err)[-1].startswith("ERROR: observe fragment not found: ")
    assert "Traceback" not in err


BAD_INPUTS = [
    (["build", "-c", "@."], 2, "rooda: error: context file is a directory, not a file: "),
    (["build", "--ai-cmd", ""], 2, "--ai-cmd must be a non-empty command string"),
    (["build", "--ai-cmd", "  "], 2, "--ai-cmd must be a non-empty command string"),
    (["build", "--config", "."], 2, ".: config path is a directory, not a file"),
    (["build", "--config", "missing.json"], 2, "missing.json: config file not found"),
    (["build", "--max-time", "nan"], 2, "--max-time must be a number > 0, not 'nan'"),
    (["build", "--delay", "-1"], 2, "--delay must be a number >= 0, not '-1'"),
    (["build", "-n", "99999999999999999999", "--dry-run"], 0, ""),
    (["no-such-procedure"], 2, "unknown procedure 'no-such-procedure'"),
    (["prompt"], 2, "usage: python3 rooda.py prompt <file|-> [max_iterations] [options]"),
    (["list", "extra"], 2, "unexpected argument 'extra' (usage: python3 rooda.py list)"),
    (["config", "--force"], 2, "--force is only for 'vendor'"),
    (["build", "--json"], 2, "--json is only for 'config'"),
]


@pytest.mark.parametrize("args,code,message", BAD_INPUTS, ids=[" ".join(a) for a, _, _ in BAD_INPUTS])
def test_bad_command_lines(workspace, args, code, message):
    proc = run_rooda(*args, cwd=str(workspace))
    err = proc.stderr.decode()
    assert proc.returncode == code, err
    assert message in err.splitlines()[0] if message else True
    assert "Traceback" not in err


BAD_CONFIGS = [
    ("rooda-config.json", b"\xff\xfe{}", "rooda-config.json:1:1: not valid UTF-8 (byte 0xff)"),
    ("rooda-config.json", b"[1, 2]", "rooda-config.json:1:1: the top level must be a mapping, not a list"),
    ("rooda-config.json", b'{"loop": {"failure_threshold": 1e309}}',
     "rooda-config.json:1:11: loop.failure_threshold: must be a whole number >= 1, not a number"),
    ("rooda-config.json", b'{"loop": {"delay": true}}',
     "rooda-config.json:1:11: loop.delay: must be a number of seconds, not a boolean"),
    ("rooda-config.json", b'{"procedures": {"x": {"observe": 3, "orient": "a", "decide": "a", "act": "a"}}}',
     "rooda-config.json:1:23: procedures.x.observe: must be a path or a mapping with 'path' or 'content', not a number"),
    ("rooda-config.json", b'{"a": 1, "a": 2}', "rooda-config.json: duplicate key 'a'"),
    ("rooda-config.json", b"[" * 100000, "rooda-config.json"),
    ("rooda-config.yml", b"loop:\n  delay: [1, 2]\n",
     "rooda-config.yml:2:3: loop.delay: must be a number of seconds, not a list"),
    ("rooda-config.yml", b"- just\n- a list\n", "rooda-config.yml:1:1: the top level must be a mapping, not a list"),
    ("rooda-config.yml", b"procedures:\n  build:\n    git: {commit: yes}\n",
     "rooda-config.yml:3:5: procedures.build.git: commit must be true or false, not a string"),
]


@pytest.mark.parametrize("name,content,message", BAD_CONFIGS,
                         ids=["%s:%d" % (n, i) for i, (n, _, _) in enumerate(BAD_CONFIGS)])
def test_bad_config_files(workspace, name, content, message):
    (workspace / name).write_bytes(content)
    proc = run_rooda("build", "--dry-run", cwd=str(workspace))
    err = proc.stderr.decode()
    assert proc.returncode == 2
    assert err.splitlines()[0].startswith(message), err
    assert "Traceback" not in err
