"""One registry of the checks before a run (SPEC 17 rev 6, issue 42): what `doctor` calls
an error is what the run's start refuses (exit 2, before any agent runs, with the same
words), and a misconfiguration `doctor` passes is never refused by the run."""
import re
import subprocess

import pytest

from conftest import fake_cli, run_rooda, write_config

CASES = {
    "a missing verifier": ({"loop": {"verify": "no-such-verifier --all"}}, []),
    "a missing acceptance check": ({"loop": {"accept": "no-such-acceptance"}}, []),
    "keep better without verify": ({"loop": {"keep": "better"}}, []),
    "an unknown fallback": ({}, ["--fallback", "codx"]),
    "a program twice": ({}, ["--fallback", "codex,codex"]),
    "schema without a schema flag": ({"loop": {"verdict": "schema"}}, ["--fallback", "gemini"]),
    "a pattern that matches nothing (a warning)": ({"loop": {"protect": [":rooda", ":agent", "nothing/**"]}}, []),
    "all is well": ({}, []),
}


@pytest.mark.parametrize("case", list(CASES))
def test_what_doctor_calls_an_error_is_what_the_run_refuses(workspace, agent, tmp_path, monkeypatch, case):
    for name in ("claude", "codex", "gemini"):
        fake_cli(tmp_path, monkeypatch, name)
    config, args = CASES[case]
    write_config(workspace, config)
    subprocess.run(["git", "init", "-q"], cwd=str(workspace), check=True)
    doctor = run_rooda("doctor", "build", "--ai-cmd-alias", "claude", *args, cwd=str(workspace), env=agent.env)
    errors = [line.split(": ", 1)[1] for line in doctor.stdout.decode().splitlines() if line.startswith("error")]
    agent.script({"actions": [{"out": "<promise>SUCCESS</promise>\n"}]})
    run = run_rooda("build", "-n", "1", "--ai-cmd-alias", "claude", "--log-dir", tmp_path / "logs", *args,
                    cwd=str(workspace), env=agent.env)
    said = run.stderr.decode()
    assert (doctor.returncode == 2) == bool(errors), doctor.stdout
    if errors:  # (the run refuses on the first, in the same words, before any agent runs)
        assert run.returncode == 2 and agent.calls == 0, said
        assert re.sub(r"^rooda: error: ", "", said.strip()) == errors[0], (said, errors)
    else:
        assert run.returncode == 0 and agent.calls == 1, said
