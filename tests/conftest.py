"""Shared fixtures: a scripted fake agent, runners for rooda in-process and as a
subprocess, and process-table helpers for checking that nothing survives."""
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import tempfile
import time

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ROODA = os.path.join(ROOT, "rooda.py")
FAKE_AGENT = os.path.join(ROOT, "tests", "fake_agent.py")
STREAMS = os.path.join(ROOT, "tests", "agent-streams")
sys.path.insert(0, ROOT)

import rooda  # noqa: E402


class FakeAgent:
    """The fake agent of one test: its script, its records, and the --ai-cmd to run it."""

    def __init__(self, state_dir):
        self.state = str(state_dir)
        self.script_path = os.path.join(self.state, "script.json")
        self.cmd = "%s %s" % (shlex.quote(sys.executable), shlex.quote(FAKE_AGENT))

    def script(self, *steps):
        with open(self.script_path, "w") as stream:
            json.dump(list(steps), stream)
        return self

    @property
    def env(self):
        return {"FAKE_AGENT_STATE": self.state, "FAKE_AGENT_SCRIPT": self.script_path}

    @property
    def calls(self):
        try:
            with open(os.path.join(self.state, "calls")) as stream:
                return int(stream.read())
        except FileNotFoundError:
            return 0

    def prompt(self, call):
        with open(os.path.join(self.state, "prompt-%d.txt" % call), "rb") as stream:
            return stream.read().decode("utf-8")

    def env_of(self, call):
        with open(os.path.join(self.state, "env-%d.json" % call)) as stream:
            return json.load(stream)

    def cli(self, call):
        """Which fake CLI (fake_cli) made call N."""
        with open(os.path.join(self.state, "cli-%d" % call)) as stream:
            return stream.read()

    def argv(self, call):
        with open(os.path.join(self.state, "argv-%d.json" % call)) as stream:
            return json.load(stream)

    def pid(self, call=1, name=None):
        """The pid the agent wrote (waited for: a file just created may be empty yet)."""
        path = os.path.join(self.state, name or "pid-%d" % call)

        def written():
            with open(path) as stream:
                return stream.read().strip()
        return int(wait_until(written, 10.0))

    def started(self, call):
        with open(os.path.join(self.state, "time-%d" % call)) as stream:
            return float(stream.read())

    def wait_for(self, name, timeout=10.0):
        """Wait until the agent created FAKE_AGENT_STATE/name (an event, with a deadline)."""
        path = os.path.join(self.state, name)
        deadline = time.monotonic() + timeout
        while not os.path.exists(path):
            if time.monotonic() > deadline:
                raise AssertionError("the fake agent never created %s" % name)
            time.sleep(0.01)


@pytest.fixture(autouse=True)
def isolated_environment(tmp_path_factory, monkeypatch):
    """No global config or ROODA_LOOP_* of the developer's leaks into a test."""
    for name in list(os.environ):
        if name.startswith("ROODA_") or name in ("XDG_CONFIG_HOME", "CLAUDECODE", "NO_COLOR"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("ROODA_CONFIG_HOME", str(tmp_path_factory.mktemp("no-global-config")))
    # (CI runs as root: a fake `claude` must not meet the real one's refusal of root, which a
    # run now refuses before it starts; the tests of that trap unset it)
    monkeypatch.setenv("IS_SANDBOX", "1")
    monkeypatch.setenv("ROODA_LOOP_LOG_DIR", str(tmp_path_factory.mktemp("logs")))


@pytest.fixture
def global_dir(tmp_path, monkeypatch):
    directory = tmp_path / "global-config"
    directory.mkdir()
    monkeypatch.setenv("ROODA_CONFIG_HOME", str(directory))
    return directory


@pytest.fixture
def agent(tmp_path, monkeypatch):
    state = tmp_path / "agent-state"
    state.mkdir()
    fake = FakeAgent(state)
    fake.script({})
    for key, value in fake.env.items():
        monkeypatch.setenv(key, value)
    return fake


@pytest.fixture
def waits(monkeypatch):
    """Every wait the loop asks for, recorded and returned at once (the injected clock)."""
    asked = []
    monkeypatch.setattr(rooda.SignalGuard, "wait", lambda self, seconds, ticker=None: asked.append(seconds))
    return asked


@pytest.fixture
def fake_inhibit(tmp_path, monkeypatch):
    """A systemd-inhibit on PATH that works: it records its pid and arguments in the file
    returned, then becomes the command it holds the inhibitor for."""
    bin_dir = tmp_path / "fake-bin"
    bin_dir.mkdir()
    record = tmp_path / "inhibit-calls"
    script = bin_dir / "systemd-inhibit"
    script.write_text('#!/bin/sh\necho "$$ $*" >> %s\nwhile [ "${1#--}" != "$1" ]; do shift; done\n'
                      'exec "$@"\n' % record)
    script.chmod(0o755)
    monkeypatch.setenv("PATH", "%s%s%s" % (bin_dir, os.pathsep, os.environ["PATH"]))
    return record


def fake_cli(tmp_path, monkeypatch, name):
    """An executable called `name` on PATH that is the fake agent (a preset's CLI); each call
    records which CLI it was (FakeAgent.cli)."""
    bin_dir = tmp_path / "cli-bin"
    bin_dir.mkdir(exist_ok=True)
    script = bin_dir / name
    script.write_text('#!/bin/sh\nFAKE_AGENT_AS=%s exec "%s" "%s" "$@"\n' % (name, sys.executable, FAKE_AGENT))
    script.chmod(0o755)
    monkeypatch.setenv("PATH", "%s%s%s" % (bin_dir, os.pathsep, os.environ["PATH"]))


@pytest.fixture
def workspace(tmp_path, monkeypatch):
    """An empty project directory as the current directory."""
    project = tmp_path / "project"
    project.mkdir()
    monkeypatch.chdir(project)
    monkeypatch.delenv("NO_COLOR", raising=False)
    return project


def run_main(capfd, *args):
    """rooda.main in-process; returns (exit code, stdout, stderr)."""
    code = rooda.main([str(a) for a in args])
    out, err = capfd.readouterr()
    return code, out, err


def run_build(capfd, agent, *args):
    """`build` in-process with the fake agent, logging to a directory of its own:
    (exit code, stdout, stderr, the session's events; none when no session began)."""
    logs = tempfile.mkdtemp(prefix="run-", dir=os.environ["ROODA_LOOP_LOG_DIR"])
    code, out, err = run_main(capfd, "build", "--ai-cmd", agent.cmd, "--log-dir", logs, *args)
    return code, out, err, session_events(logs) if os.listdir(logs) else []


def run_rooda(*args, cwd=None, env=None, timeout=60, **kwargs):
    """rooda.py as a user runs it: a subprocess; returns the CompletedProcess."""
    full_env = dict(os.environ)
    full_env.update(env or {})
    return subprocess.run([sys.executable, ROODA] + [str(a) for a in args], cwd=cwd,
                          env=full_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          timeout=timeout, **kwargs)


def status(log_dir, *args):
    """`rooda.py status --log-dir log_dir ...` as a subprocess: (exit code, stdout, stderr)."""
    proc = run_rooda("status", "--log-dir", log_dir, *args)
    return proc.returncode, proc.stdout.decode(), proc.stderr.decode()


def status_json(log_dir):
    """What `status --json` says of the latest session in log_dir (it must say it)."""
    code, out, err = status(log_dir, "--json")
    assert code == 0, err
    return json.loads(out)


# rooda processes a test started; killed at teardown if still running (a failed wait
# must not leave a loop behind).
_STARTED = []


@pytest.fixture(autouse=True)
def _kill_leftover_runs():
    yield
    while _STARTED:
        proc = _STARTED.pop()
        if proc.poll() is None:
            proc.kill()
            proc.communicate()


def start_rooda(agent, *args, cwd, procedure="build", stdout=subprocess.PIPE, python=None, stdin_text=None):
    """`python3 rooda.py <procedure> --ai-cmd <fake agent> ...` started, not waited for
    (`stdin_text`: piped in, then closed)."""
    env = dict(os.environ)
    env.update(agent.env)
    argv = [python or sys.executable, ROODA, procedure, "--ai-cmd", agent.cmd] + [str(a) for a in args]
    proc = subprocess.Popen(argv, cwd=str(cwd), env=env, stdout=stdout, stderr=subprocess.PIPE,
                            stdin=subprocess.PIPE if stdin_text is not None else None)
    if stdin_text is not None:
        proc.stdin.write(stdin_text)
        proc.stdin.close()
        proc.stdin = None  # (communicate() would flush it)
    _STARTED.append(proc)
    return proc


def interrupt(proc, signum=signal.SIGINT, timeout=10):
    """Send rooda a signal and wait for it to end: (seconds it took, its stderr text)."""
    sent = time.monotonic()
    proc.send_signal(signum)
    proc.wait(timeout=timeout)
    took = time.monotonic() - sent
    _, err = proc.communicate()
    return took, (err or b"").decode("utf-8", "replace")


def progress_lines(stderr):
    """The progress lines without their clock, durations masked as D; the closing
    `Log: <path>` line is left out (tests of the logs check it)."""
    lines = []
    for line in stderr.splitlines():
        match = re.match(r"^\[\d\d:\d\d:\d\d\] (.*)$", line)
        if match and not match.group(1).startswith("Log: "):
            text = re.sub(r"\b\d+\.\ds\b", "D", match.group(1))
            lines.append(re.sub(r"total: [0-9hms.]+", "total: D", text))
    return lines


def process_state(pid):
    """The state letter of a process from /proc (None when it does not exist)."""
    try:
        with open("/proc/%d/stat" % pid) as stream:
            return stream.read().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return None


def alive(pid):
    """True while pid runs; a zombie counts as dead (PID 1 may never reap it here)."""
    return process_state(pid) not in (None, "Z", "X")


def group_members(pgid):
    """Live (non-zombie) processes whose process group is pgid."""
    members = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % entry) as stream:
                fields = stream.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid and fields[0] not in ("Z", "X"):
            members.append(int(entry))
    return members


def events_line(*events):
    """Structured events as the JSON lines a CLI prints."""
    return "".join(json.dumps(event) + "\n" for event in events)


def say(text, **more):
    """A Claude `assistant` event saying `text`."""
    return dict({"type": "assistant", "message": {"content": [{"type": "text", "text": text}]}}, **more)


# A Claude `result` that ends a run well.
OK_RESULT = {"type": "result", "subtype": "success", "is_error": False, "result": "done",
             "total_cost_usd": 0.1, "num_turns": 1, "usage": {"input_tokens": 10, "output_tokens": 2}}


def replay(name, exit_code=0):
    """A fake agent step that prints a recorded stream (tests/agent-streams) and exits
    like the CLI did."""
    return {"actions": [{"out_file": os.path.join(STREAMS, name)}], "exit": exit_code}


def release(agent, name="release"):
    """Let a fake agent that waits for `name` go on (an event, not a sleep)."""
    open(os.path.join(agent.state, name), "w").close()


def session_events(log_dir):
    """The events of the one session .jsonl in a log directory (the agent's raw stream
    left out)."""
    import glob

    [path] = [p for p in glob.glob(os.path.join(str(log_dir), "session-*.jsonl"))
              if not p.endswith("-agent.jsonl")]
    with open(path) as stream:
        return [json.loads(line) for line in stream]


def ends(events):
    """The iteration_end events of a session."""
    return [event for event in events if event["event"] == "iteration_end"]


def await_event(log_dir, name, timeout=10.0):
    """Wait until the run logging to log_dir has written the event `name` (rooda writes
    each as it happens): an event to await, not a sleep."""
    def written():
        try:
            return any(event["event"] == name for event in session_events(log_dir))
        except ValueError:  # no session file yet, or a line half written
            return False
    assert wait_until(written, timeout), "rooda never wrote a %s event" % name


def wait_until(predicate, timeout=5.0, interval=0.01):
    """Poll a condition until it holds or the deadline passes; the final value."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value or time.monotonic() > deadline:
            return value
        time.sleep(interval)


def write_config(directory, data, name="rooda-config.json"):
    path = os.path.join(str(directory), name)
    with open(path, "w") as stream:
        json.dump(data, stream, indent=2)
    return path


# --- projects and repositories ------------------------------------------------------

def procedure(workspace, **settings):
    """A workspace procedure `p` with one fragment per phase and the given gate settings."""
    (workspace / "fragment.md").write_text("Do the work.")
    phases = {phase: "fragment.md" for phase in ("observe", "orient", "decide", "act")}
    phases.update(settings)
    write_config(workspace, {"procedures": {"p": phases}})


def git(workspace, *args, **env):
    """A git command in a directory, checked; its stdout."""
    return subprocess.run(["git"] + list(args), cwd=str(workspace), check=True,
                          env=dict(os.environ, **env) if env else None,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE).stdout.decode()


def make_repo(workspace):
    """A repository with one commit on branch main and an identity to commit with."""
    git(workspace, "init", "-q", "-b", "main")
    git(workspace, "config", "user.name", "Test")
    git(workspace, "config", "user.email", "test@example.com")
    (workspace / "README").write_text("hello\n")
    git(workspace, "add", "-A")
    git(workspace, "commit", "-q", "-m", "initial")


def commits(workspace, ref="HEAD"):
    return git(workspace, "log", "--format=%s", ref).splitlines()
