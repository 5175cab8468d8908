"""Watching a run (SPEC 14): the status line on a terminal, heartbeats off one, the gate
and wait lines, and `status` -- against live, ended, aborted, interrupted and killed runs."""
import fcntl
import json
import os
import pty
import re
import select
import signal
import subprocess
import sys
import time

from conftest import (OK_RESULT, ROODA, events_line, interrupt, make_repo, procedure, process_state, release,
                      run_main, run_rooda, say, start_rooda, status, status_json, wait_until, write_config)


def screen(raw):
    """What a terminal shows after `raw`: carriage returns, erase-line and newlines applied."""
    lines, current, column = [], "", 0
    for token in re.split(r"(\r|\n|\x1b\[K)", raw):
        if token == "\n":
            lines.append(current)
            current, column = "", 0
        elif token == "\r":
            column = 0
        elif token == "\x1b[K":
            current = current[:column]
        elif token:
            current = current[:column] + token + current[column + len(token):]
            column += len(token)
    return lines + ([current] if current else [])


def start_in_terminal(agent, *args, cwd, columns=None, term="xterm"):
    """rooda with stdout and stderr on a pseudo-terminal; (process, master fd)."""
    import struct
    import termios

    master, slave = pty.openpty()
    if columns:
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, columns, 0, 0))
    env = dict(os.environ, **agent.env)
    env["TERM"] = term
    proc = subprocess.Popen([sys.executable, ROODA, "build", "--ai-cmd", agent.cmd] + list(args),
                            cwd=str(cwd), env=env, stdin=subprocess.DEVNULL, stdout=slave, stderr=slave)
    os.close(slave)
    return proc, master


def read_until(fd, seen, done, timeout=30):
    """Read a pseudo-terminal into `seen` (a list of str) until done(text) or the deadline."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ready, _, _ = select.select([fd], [], [], 0.2)
        if ready:
            try:
                chunk = os.read(fd, 65536)
            except OSError:  # EIO: the other side is closed
                break
            if not chunk:
                break
            seen.append(chunk.decode("utf-8", "replace"))
        if done("".join(seen)):
            return True
    return done("".join(seen))


def watch_in_terminal(agent, workspace, until, *args, columns=None, term="xterm", step=None):
    """A one-iteration run on a pseudo-terminal whose agent (by default: `thinking`, then
    a wait for `release`) goes on once `until(text)` holds for what the terminal has shown;
    (raw output, exit code)."""
    agent.script(step or {"actions": [{"out": "thinking\n"}, {"wait_for": "release"}]})
    proc, master = start_in_terminal(agent, "-n", "1", *args, cwd=workspace, columns=columns, term=term)
    seen = []
    try:
        assert read_until(master, seen, until), "".join(seen)
        release(agent)
        read_until(master, seen, lambda text: "Log: " in text)
        proc.wait(timeout=30)
    finally:
        release(agent)
        os.close(master)
    return "".join(seen), proc.returncode


def test_the_status_line_ticks_on_a_terminal_and_is_gone_from_the_final_screen(workspace, agent):
    raw, code = watch_in_terminal(agent, workspace, lambda text: len(set(re.findall(
        r"iteration 1/1 · (\d+\.\ds) · \d+ B output", text))) >= 2)
    ticks = [float(t[:-1]) for t in re.findall(r"iteration 1/1 · (\d+\.\d)s", raw)]
    assert ticks == sorted(ticks) and ticks[-1] > ticks[0]  # the elapsed time advances
    assert "\r\x1b[K" in raw
    final = screen(raw)
    assert not [line for line in final if "iteration 1/1 ·" in line], final
    assert any("Iteration 1/1 completed in" in line for line in final)
    assert code == 0


def test_the_status_line_is_never_wider_than_the_terminal(workspace, agent):
    raw, _ = watch_in_terminal(agent, workspace, lambda text: "\x1b[Kiteration" in text, columns=24)
    status = [line for line in re.findall(r"\r\x1b\[K([^\r\n]+)", raw) if line.startswith("iteration")]
    assert status and all(len(line) <= 23 for line in status), status


def test_no_escape_sequence_when_stderr_is_a_pipe(workspace, agent):
    agent.script({"actions": [{"sleep": 1.5}]})
    proc = run_rooda("build", "-n", "1", "--ai-cmd", agent.cmd, cwd=workspace, env=agent.env)
    assert proc.returncode == 0
    assert b"\x1b" not in proc.stderr and b"\r" not in proc.stderr


def test_heartbeat_lines_in_a_pipe(workspace, agent):
    write_config(workspace, {"loop": {"heartbeat": 1}})
    agent.script({"actions": [{"out": "started\n"}, {"wait_for": "release"}]})
    proc = start_rooda(agent, "-n", "1", cwd=workspace)
    fcntl.fcntl(proc.stderr, fcntl.F_SETFL, os.O_NONBLOCK)
    seen = b""
    deadline = time.monotonic() + 30
    try:
        while seen.count(b"still running") < 2 and time.monotonic() < deadline:
            select.select([proc.stderr], [], [], 0.5)
            try:
                seen += proc.stderr.read() or b""
            except (IOError, TypeError):
                pass
    finally:
        release(agent)
    proc.wait(timeout=30)
    seen += proc.stderr.read() or b""
    lines = re.findall(rb"\] (Iteration 1/1 still running \([^)]*\))", seen)
    assert len(lines) >= 2, seen
    assert re.match(rb"Iteration 1/1 still running \(\d+\.\ds, \d+ B output\)", lines[0])
    assert b"\x1b" not in seen


def test_heartbeat_0_turns_them_off(workspace, agent):
    write_config(workspace, {"loop": {"heartbeat": 0}})
    agent.script({"actions": [{"sleep": 1.5}]})
    proc = run_rooda("build", "-n", "1", "--ai-cmd", agent.cmd, cwd=workspace, env=agent.env)
    assert proc.returncode == 0 and b"still running" not in proc.stderr


def test_a_failing_gate_and_a_wait_announce_themselves(workspace, agent, capfd):
    agent.script({}, {})
    code, _, err = run_main(capfd, "build", "-n", "2", "--ai-cmd", agent.cmd, "--delay", "1",
                            "--verify", "echo 'FAILED test_x - boom'; exit 2", "--failure-threshold", "5")
    assert re.search(r"\] verify: echo 'FAILED test_x - boom'; exit 2 failed \(exit 2\) in \d+\.\ds:"
                     r" FAILED test_x - boom\n", err)
    assert "] Waiting 1s before iteration 2\n" in err


# --- status ------------------------------------------------------------------------------

def test_status_of_a_live_run_in_another_process(workspace, agent, tmp_path):
    logs = tmp_path / "logs"
    agent.script({"actions": [{"touch": "ready"}, {"wait_for": "release"}]})
    proc = start_rooda(agent, "-n", "3", "--log-dir", logs, cwd=workspace)
    try:
        agent.wait_for("ready")
        live = status_json(logs)
        assert live["state"] == "running" and live["pid"] == proc.pid
        assert (live["procedure"], live["iteration"], live["max_iterations"]) == ("build", 1, 3)
        assert live["status"] is None and live["last_event"] == "iteration_start"
        code, text, _ = status(logs)
        assert "running (pid %d), iteration 1/3 under way" % proc.pid in text
    finally:
        release(agent)
    proc.wait(timeout=30)
    ended = status_json(logs)
    assert (ended["state"], ended["status"], ended["exit_code"]) == ("ended", "completed", 0)
    assert (ended["iterations"], ended["successes"], ended["failures"]) == (3, 3, 0)


def test_status_of_aborted_interrupted_and_killed_runs(workspace, agent, tmp_path):
    logs = tmp_path / "logs"
    agent.script({"exit": 1})
    run_rooda("build", "--ai-cmd", agent.cmd, "--log-dir", logs, cwd=workspace, env=agent.env)
    aborted = status_json(logs)
    assert (aborted["status"], aborted["exit_code"], aborted["failures"]) == ("aborted", 1, 3)

    agent.script({"actions": [{"touch": "ready-2"}, {"sleep": 60}]})
    proc = start_rooda(agent, "--log-dir", logs, cwd=workspace)
    agent.wait_for("ready-2")
    interrupt(proc, signal.SIGINT)
    interrupted = status_json(logs)
    assert (interrupted["status"], interrupted["exit_code"]) == ("interrupted", 130)

    agent.script({"actions": [{"touch": "ready-3"}, {"sleep": 60}]})
    proc = start_rooda(agent, "--log-dir", logs, cwd=workspace)
    agent.wait_for("ready-3")
    proc.kill()
    proc.wait()
    os.killpg(agent.pid(agent.calls), signal.SIGKILL)
    killed = status_json(logs)
    assert killed["state"] == "died" and killed["status"] is None
    code, text, _ = status(logs)
    assert code == 0 and "died: no session_end, and its process (pid %d) is gone; it was in iteration 1, the" \
        " last event iteration_start at " % proc.pid in text
    code, rows, _ = status(logs, "--all")
    assert [row.split()[4] for row in rows.splitlines()] == ["died", "interrupted", "aborted"]
    code, lines, _ = status(logs, "--all", "--json")
    assert [json.loads(line)["state"] for line in lines.splitlines()] == ["died", "ended", "ended"]


def test_status_reports_usage_and_skips_lines_it_cannot_parse(workspace, tmp_path):
    logs = tmp_path / "logs"
    logs.mkdir()
    lines = [{"event": "session_start", "time": "2026-11-24T10:00:00.000Z", "procedure": "build",
              "pid": 999999999, "max_iterations": 5},
             {"event": "iteration_start", "time": "2026-11-24T10:00:01.000Z", "iteration": 1},
             {"event": "iteration_end", "time": "2026-11-24T10:01:00.000Z", "iteration": 1,
              "outcome": "success", "usage": {"input_tokens": 1000, "output_tokens": 200,
                                              "cost_usd": 0.25, "model": "m"}}]
    text = "\n".join(json.dumps(line) for line in lines) + "\nnot json\n{\"event\": \"iteration_st"
    (logs / "session-20261124-100000.jsonl").write_text(text)
    summary = status_json(logs)
    assert summary["skipped_lines"] == 2 and summary["state"] == "died"
    assert summary["usage"]["cost_usd"] == 0.25 and summary["usage"]["input_tokens"] == 1000
    code, text, _ = status(logs)
    assert "usage       1.2k tokens · $0.25 · m" in text and "2 lines that did not parse" in text


def test_status_without_logs_says_so_with_exit_1(workspace, tmp_path):
    code, out, err = status(tmp_path / "nothing-here")
    assert code == 1 and out == "" and "no log directory at " in err
    (tmp_path / "empty").mkdir()
    code, out, err = status(tmp_path / "empty")
    assert code == 1 and "no session logs in " in err and "Traceback" not in err


def test_status_uses_the_log_directory_a_run_from_here_would_use(workspace, agent, tmp_path):
    logs = tmp_path / "configured-logs"
    write_config(workspace, {"loop": {"log_dir": str(logs)}})
    env = dict(os.environ, **agent.env)
    env.pop("ROODA_LOOP_LOG_DIR")
    subprocess.run([sys.executable, ROODA, "build", "-n", "1", "--ai-cmd", agent.cmd], cwd=str(workspace),
                   env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=30)
    proc = subprocess.run([sys.executable, ROODA, "status", "--json"], cwd=str(workspace), env=env,
                          stdout=subprocess.PIPE, timeout=30)
    assert json.loads(proc.stdout.decode())["session"].startswith(str(logs))


def test_the_readme_lists_the_status_json_fields(tmp_path):
    from conftest import ROOT
    import rooda

    path = tmp_path / "session-20261124-100000.jsonl"
    path.write_text('{"event": "session_start", "time": "2026-11-24T10:00:00.000Z", "pid": 1}\n')
    fields = set(rooda.summarize_session(str(path)))
    with open(os.path.join(ROOT, "README.md")) as stream:
        documented = stream.read().split("`--json` fields:")[1].split("No log directory")[0]
    assert set(re.findall(r"`(\w+)`", documented)) - {"running", "stopped", "ended", "died", "outage",
                                                       "utilization", "threshold"} == fields


# --- moved from the review round's edge cases: each went wrong once ---------------------

def test_status_survives_lines_of_the_wrong_shape(workspace, tmp_path):
    logs = tmp_path / "logs"
    logs.mkdir()
    lines = [{"event": "session_start", "time": "2026-11-24T10:00:00.000Z", "pid": "x", "max_iterations": "y"},
             {"event": "iteration_end", "time": "2026-11-24T10:05:00.000Z", "outcome": "success", "usage": [1]},
             {"event": 7, "time": "2026-11-24T10:06:00.000Z"},
             ["not", "an", "object"],
             {"event": "iteration_end", "time": "not a time"}]
    (logs / "session-20261124-100000.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    proc = run_rooda("status", "--json", "--log-dir", str(logs), cwd=str(workspace))
    assert proc.returncode == 0 and b"Traceback" not in proc.stderr, proc.stderr
    summary = json.loads(proc.stdout.decode())
    assert summary["skipped_lines"] == 3 and summary["state"] == "died" and summary["iterations"] == 1
    assert summary["elapsed_seconds"] == 300.0  # a killed run lasted until its last event
    ended = lines[:2] + [{"event": "session_end", "time": "2026-11-24T10:07:00.000Z", "iterations": None,
                          "seconds": "long", "status": "completed", "exit_code": 0}]
    (logs / "session-20261124-100000.jsonl").write_text("".join(json.dumps(line) + "\n" for line in ended))
    proc = run_rooda("status", "--log-dir", str(logs), cwd=str(workspace))
    assert proc.returncode == 0 and b"ended: completed, exit code 0" in proc.stdout, proc.stderr


# --- what the agent is doing (issue 21) ----------------------------------------------------

TOOL_USE = {"type": "assistant", "message": {"id": "m1", "content": [
    {"type": "tool_use", "id": "t1", "name": "Bash", "input": {"command": "pytest -q"}}]}}
TOOL_RESULT = {"type": "user", "message": {"content": [
    {"type": "tool_result", "tool_use_id": "t1", "content": "3 passed"}]}}
API_RETRY = {"type": "system", "subtype": "api_retry", "attempt": 2, "max_retries": 10,
             "retry_delay_ms": 1161.6, "error_status": 529, "error": "overloaded"}


def test_the_status_line_follows_a_claude_stream_tool_thinking_retrying(workspace, agent, tmp_path):
    """The line and `status` from another process say what the agent does, step by step;
    SIGSTOP and SIGCONT show in `status`."""
    agent.script({"actions": [
        {"out": events_line(TOOL_USE)}, {"wait_for": "r1"}, {"out": events_line(TOOL_RESULT)},
        {"wait_for": "r2"}, {"out": events_line(API_RETRY)}, {"wait_for": "r3"},
        {"out": events_line(say("done <promise>SUCCESS</promise>"), OK_RESULT)}]})
    logs = tmp_path / "logs"
    proc, master = start_in_terminal(agent, "-n", "1", "--ai-format", "claude", "--log-dir", logs,
                                     cwd=workspace)
    seen = []
    try:
        assert read_until(master, seen, lambda text: "→ Bash: pytest -q · " in text), "".join(seen)
        running = wait_until(lambda: "→ Bash: pytest -q" in status(logs)[1])
        assert running
        text = status(logs)[1]
        assert "now         → Bash: pytest -q · " in text and "iteration   1 tool call so far" in text
        os.kill(proc.pid, signal.SIGSTOP)
        assert "state       stopped (pid %d" % proc.pid in status(logs)[1]
        os.kill(proc.pid, signal.SIGCONT)
        assert "state       running (pid %d)" % proc.pid in status(logs)[1]
        release(agent, "r1")
        assert read_until(master, seen, lambda text: "1 tool call · thinking · " in text), "".join(seen)
        release(agent, "r2")
        retrying = "retrying: HTTP 529 overloaded · attempt 2/10"
        assert read_until(master, seen, lambda text: retrying in text), "".join(seen)
        release(agent, "r3")
        read_until(master, seen, lambda text: "Log: " in text)
        assert proc.wait(timeout=30) == 0
    finally:
        for name in ("r1", "r2", "r3"):
            release(agent, name)
        os.close(master)


def test_status_all_orders_sessions_by_their_start_not_their_file_names(workspace, tmp_path):
    """Names written in two time zones sort against the start times they hold."""
    logs = tmp_path / "logs"
    logs.mkdir()
    for stamp, started, which in (("20261124-230000", "2026-11-24T08:00:00.000Z", "older"),
                                  ("20261124-100000", "2026-11-24T10:00:00.000Z", "newer")):
        (logs / ("session-%s.jsonl" % stamp)).write_text(json.dumps(
            {"event": "session_start", "time": started, "procedure": which, "pid": 999999999}) + "\n")
    code, rows, _ = status(logs, "--all")
    assert code == 0 and [row.split()[2] for row in rows.splitlines()] == ["newer", "older"]
    assert "procedure   newer" in status(logs)[1]


def test_heartbeats_go_on_through_the_agent_verify_and_a_slow_pre_commit_hook(workspace, agent):
    """Off a terminal (TERM=dumb: no status line, no colour), each step that runs longer
    than `heartbeat` says so, by name."""
    def waits_for(name):
        return "while [ ! -e %s ]; do sleep 0.05; done" % os.path.join(agent.state, name)
    make_repo(workspace)
    hook = workspace / ".git" / "hooks" / "pre-commit"
    hook.write_text("#!/bin/sh\n%s\n" % waits_for("r3"))
    hook.chmod(0o755)
    procedure(workspace, verify=waits_for("r2"), verify_baseline=False, git={"commit": True})
    agent.script({"actions": [{"write_file": "a.txt", "text": "a"}, {"wait_for": "r1"}]})
    env = dict(os.environ, ROODA_LOOP_HEARTBEAT="0.5", TERM="dumb", **agent.env)
    proc = subprocess.Popen([sys.executable, ROODA, "p", "-n", "1", "--ai-cmd", agent.cmd],
                            cwd=str(workspace), env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    fcntl.fcntl(proc.stderr, fcntl.F_SETFL, os.O_NONBLOCK)
    seen = b""
    try:
        for name, words in (("r1", rb"\] Iteration 1/1 still running \("),
                            ("r2", rb"\] verify: while \[ .* still running \("),
                            ("r3", rb"\] git: commit still running \(")):
            deadline = time.monotonic() + 30
            while not re.search(words, seen) and time.monotonic() < deadline:
                select.select([proc.stderr], [], [], 0.5)
                seen += proc.stderr.read() or b""
            assert re.search(words, seen), seen
            release(agent, name)
        proc.wait(timeout=30)
    finally:
        for name in ("r1", "r2", "r3"):
            release(agent, name)
    seen += proc.stderr.read() or b""
    assert proc.returncode == 0, seen
    assert b"\x1b" not in seen and b"\r" not in seen


def test_a_narrow_status_line_keeps_what_is_under_way_and_counts_wide_characters():
    import unicodedata

    import rooda

    line = "iteration 3/10 · 2m13s · 14 tool calls · retrying: HTTP 529 overloaded · attempt 3/10"
    assert rooda._fit(line, 79) == "iteration 3/10 · 2m13s · retrying: HTTP 529 overloaded · attempt 3/10"
    # The elapsed time stays: without it a narrow line would not change for minutes.
    assert rooda._fit(line, 61) == "iteration 3/10 · 2m13s · retrying: HTTP 529 overloaded · att…"
    assert rooda._fit("verify: make test · 12s", 10) == "verify: m…"
    wide = rooda._fit("iteration 1/1 · 1.0s · 1 tool call · → Bash: echo 你好世界你好世界你好世界 · 2s", 40)
    columns = sum(2 if unicodedata.east_asian_width(char) in "WF" else 1 for char in wide)
    assert wide.startswith("iteration 1/1 · 1.0s · → Bash: ") and wide.endswith("… · 2s") and columns <= 40


def test_a_long_tool_command_gives_way_and_the_line_still_ticks():
    # 100 columns and a long command: the tool's detail is shortened, never the clock or the
    # tool's timer, so each redraw differs (it looked hung when those were cut first).
    import rooda

    command = "→ Bash: curl -H 'Authorization: Bearer xyz' https://example.com/api/v1/a/very/long/path?q=1"
    lines = [rooda._fit("iteration 3/10 · %s · 14 tool calls · %s · %s" % (spent, command, timer), 99)
             for spent, timer in (("2m13s", "12s"), ("2m14s", "13s"))]
    assert lines[0] != lines[1] and all(len(line) == 99 for line in lines)
    assert lines[0].startswith("iteration 3/10 · 2m13s · 14 tool calls · → Bash: curl -H") and \
        lines[0].endswith("… · 12s") and lines[1].endswith("… · 13s")


def test_status_counts_a_wait_down(workspace, agent, tmp_path):
    """(Found running the real Claude Code: `now  wait · 0.0s` stood still for the
    whole outage wait.)"""
    logs = tmp_path / "logs"
    proc = start_rooda(agent, "-n", "2", "--delay", "200", "--log-dir", logs, cwd=workspace)
    try:
        shown = wait_until(lambda: re.search(r"now         waiting before iteration 2 · (\d+)m(\d\d)s left",
                                             status(logs)[1]))
        assert shown and 150 <= int(shown.group(1)) * 60 + int(shown.group(2)) <= 200, shown
    finally:
        interrupt(proc)


# --- issue 22: defects of revision 2, each once seen ------------------------------------

def test_term_dumb_on_a_terminal_gets_heartbeats_and_no_escape_at_all(workspace, agent):
    """Items 4 and 17: TERM=dumb had neither a status line nor a heartbeat, and `--color
    auto` still wrote colour."""
    write_config(workspace, {"loop": {"heartbeat": 0.5}})
    raw, _ = watch_in_terminal(agent, workspace, lambda text: text.count("still running") >= 2, term="dumb",
                               step={"actions": [{"out": "thinking\n"}, {"wait_for": "release"}], "exit": 1})
    assert "Iteration 1/1 completed in" in raw and "\x1b" not in raw and "\r\n\r" not in raw


def test_the_heartbeat_counts_from_the_last_line_across_steps(workspace, agent):
    """Item 14: each step restarted the count: steps of 1.2 s each under a 2 s heartbeat
    left 3.6 s without a line."""
    make_repo(workspace)
    hook = workspace / ".git" / "hooks" / "pre-commit"
    hook.write_text("#!/bin/sh\nsleep 1.2\n")
    hook.chmod(0o755)
    procedure(workspace, verify="sleep 1.2", git={"commit": True})
    agent.script({"actions": [{"write_file": "a.txt", "text": "a"}, {"sleep": 1.2}]})
    proc = run_rooda("p", "-n", "1", "--ai-cmd", agent.cmd, cwd=workspace, env=dict(
        agent.env, ROODA_LOOP_HEARTBEAT="2"))
    assert proc.returncode == 0, proc.stderr
    assert b"still running" in proc.stderr, proc.stderr


def test_a_killed_run_not_yet_reaped_is_died(workspace, agent, tmp_path):
    """Item 16: a zombie's pid still answers kill(pid, 0)."""
    logs = tmp_path / "logs"
    agent.script({"actions": [{"touch": "ready"}, {"sleep": 60}]})
    proc = start_rooda(agent, "-n", "1", "--log-dir", logs, cwd=workspace)
    agent.wait_for("ready")
    proc.kill()
    assert wait_until(lambda: process_state(proc.pid) == "Z")
    try:
        assert status_json(logs)["state"] == "died"
    finally:
        proc.wait()


def test_a_number_out_of_range_skips_its_line_in_status_and_status_all(workspace, tmp_path):
    """Item 19: `1e400` parses as infinity, and int() of it raised OverflowError."""
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "session-20261124-100000.jsonl").write_text(
        '{"event": "session_start", "time": "2026-11-24T10:00:00.000Z", "procedure": "build", "pid": 999999999}\n'
        '{"event": "iteration_end", "time": "2026-11-24T10:01:00.000Z", "iteration": 1, "outcome": "success",'
        ' "usage": {"input_tokens": 1e400, "cost_usd": 1e400}}\n'
        '{"event": "session_end", "time": "2026-11-24T10:02:00.000Z", "iterations": 1e400, "seconds": 1e400,'
        ' "status": "completed", "exit_code": 0}\n'
        '{"event": "session_end", "time": "2026-11-24T10:02:00.000Z", "seconds": %s}\n' % ("9" * 400))
    for args in ((), ("--all",), ("--json",), ("--all", "--json")):
        code, out, err = status(logs, *args)
        assert code == 0 and "Traceback" not in err and out, (args, err)
    summary = status_json(logs)
    assert summary["skipped_lines"] == 3 and summary["state"] == "died"


def test_a_status_line_with_wide_characters_fits_the_terminal(workspace, agent):
    """Item 3: a tool call with CJK text made the line 77 columns wide on 70: it wrapped."""
    import unicodedata

    wide = {"type": "assistant", "message": {"content": [
        {"type": "tool_use", "id": "t1", "name": "Bash", "input": {"command": "echo " + "你好世界" * 10}}]}}
    raw, _ = watch_in_terminal(agent, workspace, lambda text: "→ Bash: echo 你好" in text, "--ai-format", "claude",
                               columns=70, step={"actions": [
                                   {"out": events_line(wide)}, {"wait_for": "release"},
                                   {"out": events_line(say("<promise>SUCCESS</promise> done"), OK_RESULT)}]})
    drawn = [line for line in re.findall(r"\r\x1b\[K([^\r\n]+)", raw) if "→ Bash" in line]
    columns = [sum(2 if unicodedata.east_asian_width(c) in "WF" else 1 for c in line) for line in drawn]
    assert drawn and max(columns) <= 69, drawn


def test_status_all_reads_a_long_sessions_first_line_and_tail(workspace, tmp_path):
    """--all reads no whole file: an ended session's session_end says the counts; one
    that died is read from what its last 64 KB hold (`?` for what they do not say)."""
    logs = tmp_path / "logs"
    logs.mkdir()
    for day, ended in (("24", True), ("25", False)):
        events = [{"event": "session_start", "time": "2026-11-%sT10:00:00.000Z" % day, "procedure": "build",
                   "pid": 999999999, "max_iterations": 2000}]
        events += [{"event": "iteration_end", "time": "2026-11-%sT10:59:00.000Z" % day, "iteration": number,
                    "outcome": "failure" if number % 2 else "success", "reason": "exit 1: boom %d" % number,
                    "usage": {"cost_usd": 0.5}} for number in range(1, 1001)]
        events += [{"event": "session_end", "time": "2026-11-%sT12:00:00.000Z" % day, "status": "aborted",
                    "reason": "3 failures", "iterations": 1000, "succeeded": 500, "failed": 500, "seconds": 7200,
                    "exit_code": 1, "usage": {"cost_usd": 500.0}}] if ended else []
        text = "".join(json.dumps(event) + "\n" for event in events)
        assert len(text) > 2 * 65536
        (logs / ("session-202611%s-100000.jsonl" % day)).write_text(text)
    code, rows, err = status(logs, "--all")
    assert code == 0, err
    died, ended = [row.split(None, 7) for row in rows.splitlines()]
    assert died[1:7] == ["10:00:00", "build", "1000/2000", "died", "59m00s", "?"] and died[7] == (
        "killed or crashed: no session_end; the last event iteration_end at 2026-11-25T10:59:00.000Z;"
        " last failure: exit 1: boom 999")
    # (its death, and the failure before it labelled as such: SPEC 16 rev 4, issue 36 item 12)
    assert ended[1:] == ["10:00:00", "build", "1000/2000", "aborted", "2h00m00s", "$500.00", "3 failures"]
    code, lines, _ = status(logs, "--all", "--json")
    died, ended = [json.loads(line) for line in lines.splitlines()]
    assert (died["consecutive_failures"], ended["consecutive_failures"]) == (0, None)  # None: not read


def test_an_empty_session_name_is_no_session_not_every_one(tmp_path):
    # (a truthiness rewrite once read "" as "no name given" and showed the newest session)
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "session-20261124-100000.jsonl").write_text(
        '{"event": "session_start", "time": "2026-11-24T10:00:00.000Z", "procedure": "build"}\n')
    code, out, err = status(logs, "")
    assert code == 1 and out == "" and "no such session" in err
