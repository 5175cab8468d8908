#!/usr/bin/env python3
"""rooda.py's own overhead, measured against the plain shell loop (`make bench`).

Five rows, each figure the median of several interleaved runs (A B A B ..., so that a
busy moment of the machine hits both sides), each comparison a ratio of figures from
the same run:

  1. start-up: `rooda.py --version` and `rooda.py build --dry-run` against `python3 -c pass`
  2. per-iteration overhead: rooda with `true` as the agent, 200 iterations, quiet,
     start-up subtracted, against a bash loop `cat prompt.md | true` with the same
     prompt -- once with --no-log outside git, and once in the configuration users run:
     logs on, inside a git repository with 300 committed files
  3. streaming: an agent writing 1 GiB in 64 KiB chunks then the signal, rooda --verbose
     to /dev/null with logging off and on, against the same agent piped into `cat`; and
     rooda without --verbose with stderr on a terminal (the status line redrawn once a
     second) against stderr to /dev/null
  4. memory: rooda's peak RSS with 1 MiB and with 1 GiB of agent output
  5. signal latency: SIGINT to rooda while a cooperative agent runs, until rooda has
     exited and the agent's process group is empty
  6. a structured stream: 1 GiB of Claude Code stream-json (tool results of ~450 KB
     between small assistant events) through rooda -v --ai-format claude, against the
     same bytes read as text; peak RSS for 1 MiB and 1 GiB of it
  7. `status --all` over 1,000 sessions of 100 iterations each (~100 MB of .jsonl)
  8. rooda's CPU (with its helpers) while the agent works quietly for a minute, status
     line on a terminal and logs on, read from /proc a few seconds into the iteration
  9. `report` of a session of 1,000 iterations (tests/nights.py), as text and as the
     HTML page: each under a second, the page under 2 MB
 10. what keeping the night's work honest costs per iteration (SPEC 22), rooda vendored
     in the 300-file repository of row 2 with `verify: true`: neither guard, `protect`
     with its default (:rooda, :agent and git's own files), and `keep: better` (a git snapshot
     per iteration)

Standard library, and the tests' conftest (so pytest) for reading the process table;
never fails on a figure (machines are noisy): it prints them. `--quick` uses fewer runs
and 256 MiB for the streaming row; `--rows 2,3` runs only those rows.
"""
import json
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

from conftest import group_members  # the tests' own reading of /proc (so pytest is needed)

HERE = os.path.dirname(os.path.abspath(__file__))
ROODA = os.path.join(os.path.dirname(HERE), "rooda.py")
PYTHON = sys.executable
QUICK = "--quick" in sys.argv
# --rows 2,3 runs only those rows (while working on one figure)
ROWS = {int(r) for r in sys.argv[sys.argv.index("--rows") + 1].split(",")} if "--rows" in sys.argv \
    else {1, 2, 3, 4, 5, 6, 7, 8, 9, 10}
TARGETS = {"startup_ms": 35.0, "iteration_ratio": 0.6, "stream_ratio": 0.4, "rss_ratio": 1.3,
           "signal_ms": 100.0, "structured_mbps": 200.0, "status_all_s": 1.0, "quiet_cpu_s": 0.1,
           "report_s": 1.0, "report_html_mb": 2.0}

WRITER = r'''
import os, sys
total = int(sys.argv[1])
block = (b"x" * 79 + b"\n") * (65536 // 80) + b"x" * (65536 % 80)
view = memoryview(block)
while total > 0:
    n = min(total, len(block))
    written = 0
    while written < n:
        written += os.write(1, view[written:n])
    total -= n
os.write(1, b"\n<promise>SUCCESS</promise>\n")
'''

# The floor: the least a Python loop can do per iteration -- posix_spawn `true` in a new
# session with three pipes, wait for end of output, reap it.
FLOOR = r'''
import os, select, shutil, sys
true = shutil.which("true")
for _ in range(int(sys.argv[1])):
    r0, w0 = os.pipe(); r1, w1 = os.pipe(); r2, w2 = os.pipe()
    pid = os.posix_spawn(true, [true], os.environ, setsid=True, file_actions=[
        (os.POSIX_SPAWN_DUP2, r0, 0), (os.POSIX_SPAWN_DUP2, w1, 1), (os.POSIX_SPAWN_DUP2, w2, 2)])
    for fd in (r0, w1, w2, w0):
        os.close(fd)
    poller = select.poll()
    poller.register(r1, select.POLLIN)
    poller.register(r2, select.POLLIN)
    left = 2
    while left:
        for fd, _ in poller.poll():
            if not os.read(fd, 65536):
                poller.unregister(fd)
                os.close(fd)
                left -= 1
    os.waitpid(pid, 0)
'''

# A Claude Code stream-json agent: `total` bytes of tool calls and tool results, then SUCCESS.
CLAUDE_STREAM = r'''
import json, os, sys
total = int(sys.argv[1])
text = "".join("line %d of a file the agent read, with \"quotes\" and a\ttab\n" % i for i in range(4000))
def line(event):
    return json.dumps(event).encode() + b"\n"
user = line({"type": "user", "message": {"role": "user", "content": [
    {"tool_use_id": "toolu_1", "type": "tool_result", "content": text}]},
    "tool_use_result": {"stdout": text, "stderr": ""}})
tool = line({"type": "assistant", "message": {"content": [
    {"type": "tool_use", "id": "toolu_1", "name": "Bash", "input": {"command": "pytest -q"}}]}})
say = line({"type": "assistant", "message": {"content": [{"type": "text", "text": "Running the tests."}]}})
block = say + tool + user
def write(data):
    view = memoryview(data)
    while view:
        view = view[os.write(1, view):]
write(line({"type": "system", "subtype": "init", "model": "bench"}))
written = 0
while written < total:
    part = block[:total - written]
    write(part)
    written += len(part)
write(b"\n" + line({"type": "assistant", "message": {"content": [{"type": "text",
                                                                  "text": "<promise>SUCCESS</promise>"}]}}))
write(line({"type": "result", "subtype": "success", "is_error": False, "total_cost_usd": 0.5,
            "num_turns": 3, "usage": {"input_tokens": 10, "output_tokens": 5}}))
'''

SLEEPER = r'''
import os, sys, time
open(sys.argv[1], "w").close()
time.sleep(60)
'''


def drained_terminal():
    """A pseudo-terminal whose output a thread reads away: (its slave fd, close())."""
    import pty
    import threading

    master, slave = pty.openpty()

    def drain():
        try:
            while os.read(master, 65536):
                pass
        except OSError:
            pass
    reader = threading.Thread(target=drain, daemon=True)
    reader.start()

    def close():
        os.close(slave)
        reader.join(5)
        os.close(master)
    return slave, close


def run(argv, terminal=False, **kwargs):
    """Wall-clock seconds of one command, its output discarded (stderr on a pseudo-
    terminal that a thread drains, with `terminal`)."""
    if not terminal:
        started = time.perf_counter()
        subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False, **kwargs)
        return time.perf_counter() - started
    slave, close = drained_terminal()
    started = time.perf_counter()
    subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=slave, check=False,
                   env=dict(os.environ, TERM="xterm"), **kwargs)
    took = time.perf_counter() - started
    close()
    return took


def interleaved(commands, rounds):
    """{name: median seconds} over `rounds` rounds of running every command once."""
    times = {name: [] for name in commands}
    for _ in range(rounds):
        for name, (argv, kwargs) in commands.items():
            times[name].append(run(argv, **kwargs))
    return {name: statistics.median(values) for name, values in times.items()}


def verdict(ok):
    return "met" if ok else "MISSED"


def row_startup(rounds, work):
    # `python3 rooda.py` compiles the whole script on every run (CPython never caches
    # the bytecode of __main__); `python3 -m rooda` imports it, using __pycache__. Both
    # are measured, the module form from a copy whose cache is written first.
    import py_compile

    copy = os.path.join(work, "module")
    os.makedirs(copy)
    for name in ("rooda.py", "rooda-config.json"):
        shutil.copy(os.path.join(os.path.dirname(ROODA), name), copy)
    shutil.copytree(os.path.join(os.path.dirname(ROODA), "prompts"), os.path.join(copy, "prompts"))
    import importlib.util

    module = os.path.join(copy, "rooda.py")
    py_compile.compile(module, cfile=importlib.util.cache_from_source(module), doraise=True)
    env = dict(os.environ, PYTHONPATH=copy)
    times = interleaved({
        "pass": ([PYTHON, "-c", "pass"], {}),
        "version": ([PYTHON, ROODA, "--version"], {}),
        "dry": ([PYTHON, ROODA, "build", "--dry-run", "--ai-cmd", "true"], {}),
        # from `work`, not the repository: `-m` puts the current directory first on sys.path
        "m_version": ([PYTHON, "-m", "rooda", "--version"], {"env": env, "cwd": work}),
        "m_dry": ([PYTHON, "-m", "rooda", "build", "--dry-run", "--ai-cmd", "true"],
                  {"env": env, "cwd": work}),
    }, rounds)
    base = times["pass"] * 1000
    added = {name: times[name] * 1000 - base for name in times}
    print("1. start-up              python3 -c pass            %8.1f ms" % base)
    for name, label in (("version", "rooda.py --version"), ("dry", "rooda.py build --dry-run"),
                        ("m_version", "-m rooda --version"), ("m_dry", "-m rooda build --dry-run")):
        print("                         %-26s %8.1f ms  +%.1f ms   target +%.0f ms: %s"
              % (label, times[name] * 1000, added[name], TARGETS["startup_ms"],
                 verdict(added[name] <= TARGETS["startup_ms"])))
    compile_ms = statistics.median(
        _compile_seconds(ROODA) for _ in range(5)) * 1000
    print("                         (compiling rooda.py alone: %.1f ms)" % compile_ms)
    return {"startup_version_ms": added["version"], "startup_dry_ms": added["dry"],
            "startup_module_version_ms": added["m_version"], "startup_module_dry_ms": added["m_dry"]}


def _compile_seconds(path):
    with open(path) as stream:
        source = stream.read()
    started = time.perf_counter()
    compile(source, path, "exec")
    return time.perf_counter() - started


def row_iterations(rounds, work):
    prompt = os.path.join(work, "prompt.md")
    with open(prompt, "wb") as stream:
        stream.write(subprocess.run([PYTHON, ROODA, "build", "--dry-run", "--ai-cmd", "true"],
                                    stdout=subprocess.PIPE, stderr=subprocess.DEVNULL).stdout)
    count = 200
    loop = 'for i in $(seq %d); do cat "%s" | true; done'
    rooda = [PYTHON, ROODA, "build", "-q", "--no-log", "--ai-cmd", "true", "-n"]
    floor = os.path.join(work, "floor.py")
    with open(floor, "w") as stream:
        stream.write(FLOOR)
    repo = make_repository(os.path.join(work, "repo"), 300)
    logs = os.path.join(repo, ".rooda", "logs")
    default = [PYTHON, ROODA, "build", "-q", "--log-dir", logs, "--ai-cmd", "true", "-n"]
    times = interleaved({
        "rooda_1": (rooda + ["1"], {"cwd": work}),
        "rooda_n": (rooda + [str(count + 1)], {"cwd": work}),
        "default_1": (default + ["1"], {"cwd": repo}),
        "default_n": (default + [str(count + 1)], {"cwd": repo}),
        "bash_1": (["bash", "-c", loop % (1, prompt)], {}),
        "bash_n": (["bash", "-c", loop % (count + 1, prompt)], {}),
        "floor_1": ([PYTHON, floor, "1"], {}),
        "floor_n": ([PYTHON, floor, str(count + 1)], {}),
    }, rounds)
    per = {name: (times[name + "_n"] - times[name + "_1"]) / count * 1e6
           for name in ("rooda", "default", "bash", "floor")}
    ratio = per["rooda"] / per["bash"]
    default_ratio = per["default"] / per["bash"]
    shutil.rmtree(logs, ignore_errors=True)
    print("2. per-iteration         bash: cat prompt.md | true %8.0f µs   (prompt %d bytes)"
          % (per["bash"], os.path.getsize(prompt)))
    print("                         rooda --no-log, no git     %8.0f µs  ratio %.2f   target <= %.2f: %s"
          % (per["rooda"], ratio, TARGETS["iteration_ratio"], verdict(ratio <= TARGETS["iteration_ratio"])))
    print("                         rooda default: logs, git   %8.0f µs  ratio %.2f   target <= %.2f: %s"
          % (per["default"], default_ratio, TARGETS["iteration_ratio"],
             verdict(default_ratio <= TARGETS["iteration_ratio"])))
    print("                         floor: bare Python spawn   %8.0f µs  ratio %.2f   (what CPython can do)"
          % (per["floor"], per["floor"] / per["bash"]))
    return {"iteration_us": per["rooda"], "bash_iteration_us": per["bash"], "iteration_ratio": ratio,
            "default_iteration_us": per["default"], "default_iteration_ratio": default_ratio,
            "floor_ratio": per["floor"] / per["bash"]}


def make_repository(path, files):
    """A git repository with `files` committed files and rooda's vendored .gitignore."""
    os.makedirs(os.path.join(path, ".rooda"))
    for index in range(files):
        folder = os.path.join(path, "src", "pkg%d" % (index // 30))
        os.makedirs(folder, exist_ok=True)
        with open(os.path.join(folder, "module%d.py" % index), "w") as stream:
            stream.write("VALUE = %d\n" % index)
    with open(os.path.join(path, ".rooda", ".gitignore"), "w") as stream:
        stream.write("logs/\n")
    quiet = {"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL, "check": True, "cwd": path}
    subprocess.run(["git", "init", "-q"], **quiet)
    subprocess.run(["git", "add", "-A"], **quiet)
    subprocess.run(["git", "-c", "user.name=bench", "-c", "user.email=bench@example.com",
                    "commit", "-q", "-m", "files"], **quiet)
    return path


def row_streaming(rounds, work, size):
    writer = os.path.join(work, "writer.py")
    with open(writer, "w") as stream:
        stream.write(WRITER)
    agent = "%s %s %%d" % (PYTHON, writer)
    # Logs go to tmpfs when there is one, so that the figure is rooda's, not the state of
    # the disk's write-back (gigabytes written in a row are throttled by the kernel).
    shm = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None
    logs = tempfile.mkdtemp(prefix="rooda-bench-logs-", dir=shm or work)

    def rooda(nbytes, log):
        argv = [PYTHON, ROODA, "build", "-n", "1", "-v", "--ai-cmd", agent % nbytes]
        argv += ["--log-dir", logs] if log else ["--no-log"]
        return argv, {"cwd": work}

    def cat(nbytes):
        return ["sh", "-c", "%s | cat" % (agent % nbytes)], {}

    def plain(nbytes, terminal):
        return [PYTHON, ROODA, "build", "-n", "1", "--no-log", "--ai-cmd", agent % nbytes], \
            {"cwd": work, "terminal": terminal}

    times = interleaved({
        "cat_0": cat(0), "cat": cat(size),
        "rooda_0": rooda(0, False), "rooda": rooda(size, False),
        "log_0": rooda(0, True), "log": rooda(size, True),
        "quiet_0": plain(0, False), "quiet": plain(size, False),
        "tty_0": plain(0, True), "tty": plain(size, True),
    }, rounds)
    shutil.rmtree(logs, ignore_errors=True)
    # The disk itself: the same bytes written in 64 KiB os.write calls to a file beside
    # the logs (the page cache, as the log gets it), so "log on" can be read against it.
    os.makedirs(logs, exist_ok=True)
    block = b"x" * 65536
    disk_times = []
    for _ in range(rounds):
        path = os.path.join(logs, "disk-test")
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        started = time.perf_counter()
        for _ in range(size // len(block)):
            os.write(fd, block)
        os.close(fd)
        disk_times.append(time.perf_counter() - started)
        os.unlink(path)
    shutil.rmtree(logs, ignore_errors=True)
    disk_gbps = size / statistics.median(disk_times) / 1e9
    gbps = {}
    for name in ("cat", "rooda", "log", "quiet", "tty"):
        seconds = max(times[name] - times[name + "_0"], 1e-6)  # start-up subtracted
        gbps[name] = size / seconds / 1e9
    print("3. streaming (%4d MiB)  agent | cat                %8.2f GB/s" % (size >> 20, gbps["cat"]))
    for name, label in (("rooda", "rooda -v, no log"), ("log", "rooda -v, log on")):
        ratio = gbps[name] / gbps["cat"]
        print("                         %-26s %8.2f GB/s  ratio %.2f   target >= %.2f: %s"
              % (label, gbps[name], ratio, TARGETS["stream_ratio"], verdict(ratio >= TARGETS["stream_ratio"])))
    print("                         (plain 64 KiB writes to %s: %.2f GB/s, the log's ceiling)"
          % ("tmpfs" if shm else "disk", disk_gbps))
    print("                         rooda, stderr to /dev/null %8.2f GB/s" % gbps["quiet"])
    print("                         rooda, status line on tty  %8.2f GB/s  ratio %.2f   (redrawn once a"
          " second, not per chunk)" % (gbps["tty"], gbps["tty"] / gbps["quiet"]))
    return {"cat_gbps": gbps["cat"], "stream_gbps": gbps["rooda"], "stream_log_gbps": gbps["log"],
            "disk_gbps": disk_gbps, "status_line_ratio": gbps["tty"] / gbps["quiet"],
            "stream_ratio": gbps["rooda"] / gbps["cat"], "stream_log_ratio": gbps["log"] / gbps["cat"]}


def peak_rss_kib(argv, cwd):
    """The peak RSS of one process (KiB), from wait4: the process and nothing else of ours."""
    proc = subprocess.Popen(argv, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, _, usage = os.wait4(proc.pid, 0)
    proc.returncode = 0
    scale = 1 if sys.platform.startswith("linux") else 1024  # macOS reports bytes
    return usage.ru_maxrss / scale


def row_memory(rounds, work):
    # A tiny agent (sh and head), so that the peak is rooda's own; one line of zeros:
    # the worst case for a line-oriented scanner.
    agent = "sh -c 'head -c %d /dev/zero; echo; echo \"<promise>SUCCESS</promise>\"'"
    results = {}
    for label, nbytes in (("1 MiB", 1 << 20), ("1 GiB", 1 << 30)):
        argv = [PYTHON, ROODA, "build", "-n", "1", "-q", "--no-log", "--ai-cmd", agent % nbytes]
        results[label] = statistics.median(peak_rss_kib(argv, work) for _ in range(rounds)) / 1024
    ratio = results["1 GiB"] / results["1 MiB"]
    print("4. memory                peak RSS, 1 MiB output     %8.1f MiB" % results["1 MiB"])
    print("                         peak RSS, 1 GiB output     %8.1f MiB  ratio %.2f   target <= %.1f: %s"
          % (results["1 GiB"], ratio, TARGETS["rss_ratio"], verdict(ratio <= TARGETS["rss_ratio"])))
    return {"rss_1mib": results["1 MiB"], "rss_1gib": results["1 GiB"], "rss_ratio": ratio}


def group_empty(pgid):
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return True
    return not os.path.isdir("/proc") or not group_members(pgid)


def row_signal(rounds, work):
    sleeper = os.path.join(work, "sleeper.py")
    with open(sleeper, "w") as stream:
        stream.write(SLEEPER)
    latencies = []
    for index in range(rounds):
        ready = os.path.join(work, "ready-%d" % index)
        agent = "%s %s %s" % (PYTHON, sleeper, ready)
        proc = subprocess.Popen([PYTHON, ROODA, "build", "-n", "1", "--no-log", "--ai-cmd", agent],
                                cwd=work, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 30
        while not os.path.exists(ready) and time.monotonic() < deadline:
            time.sleep(0.005)
        time.sleep(0.05)  # let the agent settle into its sleep
        children = [int(p) for p in open("/proc/%d/task/%d/children" % (proc.pid, proc.pid)).read().split()] \
            if os.path.exists("/proc/%d/task/%d/children" % (proc.pid, proc.pid)) else []
        children = [p for p in children if os.getsid(p) != os.getsid(proc.pid)]  # the agent, not rooda's helpers
        started = time.perf_counter()
        proc.send_signal(signal.SIGINT)
        proc.wait()
        while children and not all(group_empty(pid) for pid in children):
            time.sleep(0.0005)
        latencies.append((time.perf_counter() - started) * 1000)
    latency = statistics.median(latencies)
    print("5. signal latency        SIGINT -> exit, group empty %7.1f ms                target < %.0f ms: %s"
          % (latency, TARGETS["signal_ms"], verdict(latency < TARGETS["signal_ms"])))
    return {"signal_ms": latency}


def row_structured(rounds, work, size):
    agent_script = os.path.join(work, "claude_stream.py")
    with open(agent_script, "w") as stream:
        stream.write(CLAUDE_STREAM)
    agent = "%s %s %%d" % (PYTHON, agent_script)

    def rooda(nbytes, agent_format):
        return [PYTHON, ROODA, "build", "-n", "1", "-v", "--no-log", "--ai-format", agent_format,
                "--ai-cmd", agent % nbytes], {"cwd": work}

    times = interleaved({
        "text_0": rooda(0, "text"), "text": rooda(size, "text"),
        "claude_0": rooda(0, "claude"), "claude": rooda(size, "claude"),
    }, rounds)
    mbps = {name: size / max(times[name] - times[name + "_0"], 1e-6) / 1e6 for name in ("text", "claude")}
    rss = {}
    for label, nbytes in (("1 MiB", 1 << 20), ("1 GiB", 1 << 30)):
        argv, _ = rooda(nbytes, "claude")
        rss[label] = statistics.median(peak_rss_kib(argv, work) for _ in range(3)) / 1024
    print("6. structured (%4d MiB) rooda -v, read as text       %8.0f MB/s" % (size >> 20, mbps["text"]))
    print("                         rooda -v, claude format     %8.0f MB/s  ratio %.2f   target >= %.0f MB/s: %s"
          % (mbps["claude"], mbps["claude"] / mbps["text"], TARGETS["structured_mbps"],
             verdict(mbps["claude"] >= TARGETS["structured_mbps"])))
    print("                         peak RSS, 1 MiB / 1 GiB      %6.1f / %.1f MiB  ratio %.2f"
          % (rss["1 MiB"], rss["1 GiB"], rss["1 GiB"] / rss["1 MiB"]))
    return {"structured_mbps": mbps["claude"], "structured_text_mbps": mbps["text"],
            "structured_rss_ratio": rss["1 GiB"] / rss["1 MiB"]}


def write_sessions(directory, sessions, iterations):
    """`sessions` session logs of `iterations` iterations each, as a run writes them; their
    total size in bytes."""
    import json

    os.makedirs(directory)
    usage = {"model": "claude-opus-4-8[1m]", "input_tokens": 39210, "output_tokens": 2200,
             "cache_read_tokens": 120000, "cache_write_tokens": 800, "cost_usd": 0.31, "turns": 14,
             "tool_calls": 22, "partial": False}
    total = 0
    for number in range(sessions):
        stamp = "20261%03d-%06d" % (number // 100, number)
        events = [{"event": "session_start", "time": "2026-11-24T01:00:00.000Z", "version": "0.3.0",
                   "procedure": "build", "agent": ["claude", "-p"], "max_iterations": iterations,
                   "failure_threshold": 3, "cwd": "/home/me/project", "pid": 4242, "log": "x.log",
                   "argv": ["build", "-n", str(iterations)]}]
        for iteration in range(1, iterations + 1):
            events += [
                {"event": "iteration_start", "time": "2026-11-24T01:00:01.000Z", "iteration": iteration,
                 "prompt_sha256": "ab" * 32, "prompt_bytes": 8000, "fragments": ["prompts/observe/a.md"] * 4},
                {"event": "gate", "time": "2026-11-24T01:00:02.000Z", "gate": "verify",
                 "command": "make test", "exit_code": 0, "seconds": 12.5},
                {"event": "iteration_end", "time": "2026-11-24T01:00:03.000Z", "iteration": iteration,
                 "seconds": 312.4, "exit_code": 0, "signal": None, "signals": [], "outcome": "success",
                 "cause": None, "consecutive_failures": 0, "verify": "pass", "head_before": "a" * 40,
                 "head_after": "b" * 40, "output_bytes": 81234, "reason": None, "usage": usage}]
        events.append({"event": "session_end", "time": "2026-11-24T09:00:00.000Z", "status": "completed",
                       "reason": "cap", "iterations": iterations, "succeeded": iterations, "failed": 0,
                       "seconds": 28800.0, "exit_code": 0, "usage": usage})
        data = "".join(json.dumps(event) + "\n" for event in events).encode()
        with open(os.path.join(directory, "session-%s.jsonl" % stamp), "wb") as stream:
            stream.write(data)
        total += len(data)
    return total


def row_status_all(rounds, work):
    logs = os.path.join(work, "sessions")
    size = write_sessions(logs, 1000, 100)
    took = statistics.median(run([PYTHON, ROODA, "status", "--all", "--log-dir", logs])
                             for _ in range(rounds))
    one = statistics.median(run([PYTHON, ROODA, "status", "--log-dir", logs]) for _ in range(rounds))
    print("7. status --all          1,000 sessions x 100 iterations (%d MB)" % (size >> 20))
    print("                         status --all               %8.2f s                target < %.0f s: %s"
          % (took, TARGETS["status_all_s"], verdict(took < TARGETS["status_all_s"])))
    print("                         status (the newest, whole) %8.2f s" % one)
    return {"status_all_s": took}


def row_report(rounds, work):
    from nights import long_session
    logs = os.path.join(work, "night")
    long_session(logs)
    page = os.path.join(work, "night.html")
    text = statistics.median(run([PYTHON, ROODA, "report", "--log-dir", logs]) for _ in range(rounds))
    html = statistics.median(run([PYTHON, ROODA, "report", "--log-dir", logs, "--html", page])
                             for _ in range(rounds))
    size = os.path.getsize(page) / 1e6
    print("9. report                1,000 iterations, text     %8.2f s                 target < %.0f s: %s"
          % (text, TARGETS["report_s"], verdict(text < TARGETS["report_s"])))
    print("                         the HTML page              %8.2f s, %.2f MB        target < %.0f s, < %.0f MB: %s"
          % (html, size, TARGETS["report_s"], TARGETS["report_html_mb"],
             verdict(html < TARGETS["report_s"] and size < TARGETS["report_html_mb"])))
    return {"report_s": text, "report_html_s": html, "report_html_mb": size}


def row_guards(rounds, work):
    repo = make_repository(os.path.join(work, "guarded"), 300)
    own = os.path.join(repo, ".rooda")
    shutil.copy(ROODA, own)
    shutil.copy(os.path.join(os.path.dirname(ROODA), "rooda-config.json"), own)
    shutil.copytree(os.path.join(os.path.dirname(ROODA), "prompts"), os.path.join(own, "prompts"))
    quiet = {"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL, "check": True, "cwd": repo}
    subprocess.run(["git", "add", "-A"], **quiet)
    subprocess.run(["git", "-c", "user.name=bench", "-c", "user.email=bench@example.com", "commit", "-q",
                    "-m", "rooda"], **quiet)
    count = 50
    configs = {}
    for name, loop in (("neither", {"protect": []}), ("protect", {}), ("better", {"keep": "better"})):
        configs[name] = os.path.join(work, "%s.json" % name)
        with open(configs[name], "w") as stream:
            json.dump({"loop": dict(loop, verify="true", verify_baseline=False)}, stream)
    commands = {}
    for name, config in configs.items():
        for cap in (1, count + 1):
            commands["%s_%d" % (name, cap)] = ([PYTHON, os.path.join(own, "rooda.py"), "build", "-q", "--ai-cmd",
                                                "true", "--config", config, "-n", str(cap)], {"cwd": repo})
    times = interleaved(commands, rounds)
    per = {name: (times["%s_%d" % (name, count + 1)] - times["%s_1" % name]) / count * 1000 for name in configs}
    print("10. the guards (SPEC 22)  per iteration, verify: true, neither guard  %6.1f ms" % per["neither"])
    print("                         protect's default (:rooda, :agent, git) %6.1f ms  (+%.1f ms)"
          % (per["protect"], per["protect"] - per["neither"]))
    print("                         keep: better (and protect)              %6.1f ms  (+%.1f ms)"
          % (per["better"], per["better"] - per["neither"]))
    return {"guards_none_ms": per["neither"], "guards_protect_ms": per["protect"],
            "guards_better_ms": per["better"]}


def tree_cpu_seconds(root):
    """User + system CPU so far of a process and its descendants, from /proc (Linux)."""
    parents, cpu = {}, {}
    for name in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open("/proc/%s/stat" % name) as stream:
                fields = stream.read().rsplit(")", 1)[1].split()
        except (OSError, ValueError):
            continue
        parents[int(name)] = int(fields[1])
        cpu[int(name)] = sum(int(field) for field in fields[11:15])  # utime stime cutime cstime
    total, wanted = 0, {root}
    for pid in sorted(parents):
        chain, current = [], pid
        while current in parents and current not in wanted and current > 1:
            chain.append(current)
            current = parents[current]
        if current in wanted:
            wanted.update(chain)
            total += cpu.get(pid, 0)
    return total / os.sysconf("SC_CLK_TCK")


def row_quiet_cpu(work, seconds):
    """rooda's CPU over `seconds` of a quiet agent, a few seconds into the iteration
    (start-up and the first redraw left out), status line on a terminal, logs on."""
    if not os.path.isdir("/proc/self/task"):
        print("8. quiet agent           skipped: needs /proc")
        return {}
    project = os.path.join(work, "quiet")
    os.makedirs(project)
    subprocess.run(["git", "init", "-q", project], check=True)
    slave, close = drained_terminal()
    proc = subprocess.Popen([PYTHON, ROODA, "build", "-n", "1", "--ai-cmd", "sleep %d" % (seconds + 10),
                             "--log-dir", os.path.join(work, "quiet-logs")], cwd=project,
                            stdout=subprocess.DEVNULL, stderr=slave, env=dict(os.environ, TERM="xterm"))
    try:
        time.sleep(5)
        before = tree_cpu_seconds(proc.pid)
        time.sleep(seconds)
        per_minute = (tree_cpu_seconds(proc.pid) - before) * 60.0 / seconds
    finally:
        proc.kill()
        proc.wait()
        close()
    print("8. quiet agent           rooda's CPU per quiet minute %6.3f s (over %d s)    target < %.1f s: %s"
          % (per_minute, seconds, TARGETS["quiet_cpu_s"], verdict(per_minute < TARGETS["quiet_cpu_s"])))
    return {"quiet_cpu_s": per_minute}


def main():
    started = time.monotonic()
    rounds = 5 if QUICK else 11
    version = subprocess.run([PYTHON, ROODA, "--version"], stdout=subprocess.PIPE).stdout.decode().strip()
    print("%s bench: Python %s, %s %s, %d cores%s" % (
        version, platform.python_version(), platform.system(), platform.machine(),
        os.cpu_count() or 1, " (quick)" if QUICK else ""))
    print("medians of %d interleaved runs; ratios from the same run\n" % rounds)
    work = tempfile.mkdtemp(prefix="rooda-bench-")
    figures = {}
    try:
        if 1 in ROWS:
            figures.update(row_startup(rounds * 2, work))
        if 2 in ROWS:
            figures.update(row_iterations(rounds, work))
        if 3 in ROWS:
            figures.update(row_streaming(3 if QUICK else 5, work, (256 if QUICK else 1024) << 20))
        if 4 in ROWS:
            figures.update(row_memory(3, work))
        if 5 in ROWS:
            figures.update(row_signal(rounds, work))
        if 6 in ROWS:
            figures.update(row_structured(3 if QUICK else 5, work, (256 if QUICK else 1024) << 20))
        if 7 in ROWS:
            figures.update(row_status_all(3 if QUICK else 5, work))
        if 8 in ROWS:
            figures.update(row_quiet_cpu(work, 10 if QUICK else 60))
        if 9 in ROWS:
            figures.update(row_report(rounds, work))
        if 10 in ROWS:
            figures.update(row_guards(3 if QUICK else 5, work))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print("\n(%.0f s)" % (time.monotonic() - started))
    return 0


if __name__ == "__main__":
    sys.exit(main())
