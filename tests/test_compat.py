"""End-to-end smoke test of rooda.py on CPython 3.8-3.13.

`make test` runs it on the oldest interpreter found (3.8 first: the one most likely to
break); `make test-compat` sets ROODA_COMPAT_ALL=1 and runs it on every one of the six.
Each interpreter runs rooda.py itself (and the fake agent): a dry-run, a loop of three
iterations, and a SIGINT while the agent runs. Missing interpreters are skipped with
the reason, so the run names what it covered.
"""
import os
import signal
import subprocess

import pytest

from conftest import FAKE_AGENT, ROODA, interrupt, progress_lines, start_rooda
from interpreters import VERSIONS, find_interpreter


# Read at collection: the autouse isolated_environment fixture clears ROODA_* later.
ALL = os.environ.get("ROODA_COMPAT_ALL") == "1"


@pytest.fixture(params=VERSIONS if ALL else ["oldest"],
                ids=["python" + v for v in VERSIONS] if ALL else ["oldest-python"])
def python(request):
    wanted = VERSIONS if request.param == "oldest" else [request.param]
    for version in wanted:
        path = find_interpreter(version)
        if path is not None:
            return path
    pytest.skip("python%s not found (pyenv versions or PATH)" % " or ".join(wanted))


def test_smoke_on_every_interpreter(python, tmp_path, agent):
    env = dict(os.environ)
    env.update(agent.env)
    env.pop("PYTHONPATH", None)
    cmd = "%s %s" % (python, FAKE_AGENT)

    def rooda(*args, **kwargs):
        return subprocess.run([python, ROODA] + list(args), cwd=str(tmp_path), env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=60, **kwargs)

    dry = rooda("build", "--dry-run", "--ai-cmd", cmd)
    assert dry.returncode == 0, dry.stderr
    assert dry.stdout.startswith(b"# OODA Loop Iteration\n")

    agent.script({}, {}, {})
    loop = rooda("build", "3", "--ai-cmd", cmd)
    assert loop.returncode == 0, loop.stderr
    assert progress_lines(loop.stderr.decode())[-1] == "Reached max iterations: 3 (total: D)"
    assert agent.calls == 3

    streams = os.path.join(os.path.dirname(FAKE_AGENT), "agent-streams")
    agent.script({"actions": [{"out_file": os.path.join(streams, "claude.jsonl")}]})
    structured = rooda("build", "--ai-cmd", cmd, "--ai-format", "claude", "--log-dir", str(tmp_path / "logs"))
    assert structured.returncode == 0, structured.stderr
    assert progress_lines(structured.stderr.decode())[-1].endswith("· 39.2k tokens · $0.20")
    status = rooda("status", "--log-dir", str(tmp_path / "logs"))
    assert status.returncode == 0 and b"ended: completed, exit code 0" in status.stdout

    (tmp_path / "rooda-config.json").write_text('{"loop": {"on_limit": "stop"}}')
    agent.script({"actions": [{"out": "You've hit your session limit \u00b7 resets Nov 26, 7:04pm"
                                      " (America/New_York)\n"}], "exit": 1})
    limited = rooda("build", "--ai-cmd", cmd)
    assert limited.returncode == 4, limited.stderr
    assert b"it resets at" in limited.stderr
    (tmp_path / "rooda-config.json").unlink()

    agent.script({"actions": [{"touch": "ready"}, {"sleep": 60}]})
    proc = start_rooda(agent, cwd=tmp_path, python=python)
    agent.wait_for("ready")
    interrupt(proc, timeout=15)
    assert proc.returncode == -signal.SIGINT
