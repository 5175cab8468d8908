"""A structured verdict (SPEC 21): with `verdict: schema`, Claude Code and Codex get their
schema flag, and the object they return -- checked by rooda -- is the signal, the
commit's summary and the next prompt's next step. Replayed from the real CLIs' recorded
streams through a fake `claude` / `codex` on PATH that records its argv."""
import json
import os
import sys

import rooda
from conftest import (FAKE_AGENT, OK_RESULT, commits, events_line, make_repo, progress_lines, replay, run_rooda,
                      session_events, say, write_config)


def fake(tmp_path, monkeypatch, name):
    """`name` on PATH: the fake agent, after keeping a copy of the file that follows
    --output-schema (rooda removes it when the iteration ends)."""
    bin_dir = tmp_path / "cli-bin"
    bin_dir.mkdir(exist_ok=True)
    script = bin_dir / name
    script.write_text('#!/bin/sh\nprev=\nfor a in "$@"; do [ "$prev" = --output-schema ] && cp "$a" "%s/schema.json";'
                      ' prev=$a; done\nexec "%s" "%s" "$@"\n' % (tmp_path, sys.executable, FAKE_AGENT))
    script.chmod(0o755)
    monkeypatch.setenv("PATH", "%s%s%s" % (bin_dir, os.pathsep, os.environ["PATH"]))


def run(workspace, tmp_path, *args, verdict="schema", commit=True):
    write_config(workspace, {"loop": {"verdict": verdict, "git": {"commit": commit}}})
    make_repo(workspace)
    done = run_rooda("build", "--log-dir", tmp_path / "logs", "--no-verify-baseline", *args, cwd=str(workspace))
    err = done.stderr.decode()
    assert "Traceback" not in err
    ends = [e for e in session_events(tmp_path / "logs") if e["event"] == "iteration_end"]
    return done.returncode, err, ends


def verdict(status, summary="did it", explanation="", next_step=None):
    return {"status": status, "summary": summary, "explanation": explanation, "next_step": next_step}


def claude_says(answer, text="done"):
    """A Claude run that writes a file and returns `answer` as its structured output."""
    return {"actions": [{"write_file": "work-%s.txt" % answer["summary"][:4], "text": text},
                        {"out": events_line(say(text), dict(OK_RESULT, result=json.dumps(answer),
                                                            structured_output=answer))}]}


def test_claude_gets_the_schema_and_its_verdict_is_the_signal_and_the_commit(workspace, agent, tmp_path,
                                                                          monkeypatch):
    fake(tmp_path, monkeypatch, "claude")
    recorded = replay("claude-verdict-ok.jsonl")
    agent.script(dict(recorded, actions=[{"write_file": "hello.txt", "text": "hi"}] + recorded["actions"]))
    code, err, ends = run(workspace, tmp_path, "-n", "3", "--ai-cmd-alias", "claude")
    assert code == 0 and agent.calls == 1, err
    argv = agent.argv(1)
    assert json.loads(argv[argv.index("--json-schema") + 1]) == rooda.VERDICT_SCHEMA
    assert ends[0]["outcome"] == "completed" and ends[0]["signals"] == ["SUCCESS"]
    assert ends[0]["verdict"] == verdict("success", "Add hello.txt with a greeting", "")
    assert commits(workspace)[0] == "build 1: Add hello.txt with a greeting"
    assert "WARNING" not in err


def test_codex_gets_a_schema_file_before_its_stdin_dash_and_it_is_removed(workspace, agent, tmp_path, monkeypatch):
    fake(tmp_path, monkeypatch, "codex")
    agent.script(replay("codex-verdict-ok.jsonl"))
    code, err, ends = run(workspace, tmp_path, "-n", "3", "--ai-cmd-alias", "codex", commit=False)
    assert code == 0 and agent.calls == 1, err
    argv = agent.argv(1)
    at = argv.index("--output-schema")
    assert argv[-1] == "-" and at == len(argv) - 3
    assert json.loads((tmp_path / "schema.json").read_text()) == rooda.VERDICT_SCHEMA
    assert not os.path.exists(argv[at + 1])
    assert ends[0]["outcome"] == "completed" and ends[0]["verdict"]["status"] == "success"


def test_a_claude_that_ignores_the_schema_is_never_success_and_warns_once(workspace, agent, tmp_path, monkeypatch):
    fake(tmp_path, monkeypatch, "claude")
    agent.script(replay("claude-verdict-ignored.jsonl"))
    code, err, ends = run(workspace, tmp_path, "-n", "2", "--ai-cmd-alias", "claude", commit=False)
    assert code == 0 and agent.calls == 2
    assert [e["outcome"] for e in ends] == ["success", "success"]  # (exit 0, no signal: not done)
    assert [e["verdict"] for e in ends] == [None, None]
    warnings = [line for line in progress_lines(err) if line.startswith("WARNING")]
    assert warnings == ["WARNING: iteration 1: no verdict from the agent (none came); its promise markers,"
                        " if any, decide instead"]
    assert progress_lines(err)[-1] == "Reached max iterations: 2 (total: D) · 77.8k tokens · $0.31"


def test_markers_in_the_agents_words_still_count_without_a_verdict(workspace, agent, tmp_path, monkeypatch):
    fake(tmp_path, monkeypatch, "claude")
    agent.script({"actions": [{"out": events_line(say("all done <promise>SUCCESS</promise>"), OK_RESULT)}]})
    code, _, ends = run(workspace, tmp_path, "-n", "3", "--ai-cmd-alias", "claude", commit=False)
    assert code == 0 and ends[0]["outcome"] == "completed" and ends[0]["verdict"] is None


def test_a_codex_plain_text_answer_is_no_verdict(workspace, agent, tmp_path, monkeypatch):
    fake(tmp_path, monkeypatch, "codex")
    agent.script(replay("codex-verdict-not-json.jsonl"))
    code, err, ends = run(workspace, tmp_path, "-n", "1", "--ai-cmd-alias", "codex", commit=False)
    assert code == 0 and ends[0]["outcome"] == "success"
    assert "no verdict from the agent (its final message is not JSON)" in err


def test_five_invalid_verdicts_are_an_agent_failure_with_claudes_message(workspace, agent, tmp_path, monkeypatch):
    fake(tmp_path, monkeypatch, "claude")
    agent.script(replay("claude-verdict-invalid.jsonl", 1), claude_says(verdict("success")))
    code, err, ends = run(workspace, tmp_path, "-n", "3", "--ai-cmd-alias", "claude", commit=False)
    assert code == 0 and agent.calls == 2
    assert ends[0]["outcome"] == "failure" and ends[0]["cause"] == "agent"
    assert ends[0]["reason"].startswith("agent: Failed to provide valid structured output after 5 attempts")
    assert "Failed to provide valid structured output" in agent.prompt(2)


def test_an_invalid_object_is_no_verdict(workspace, agent, tmp_path, monkeypatch):
    fake(tmp_path, monkeypatch, "claude")
    agent.script(claude_says({"status": "done", "summary": "x", "explanation": "", "next_step": None}),
                 claude_says(dict(verdict("success"), extra=1)))
    code, err, ends = run(workspace, tmp_path, "-n", "2", "--ai-cmd-alias", "claude", commit=False)
    assert [e["outcome"] for e in ends] == ["success", "success"]
    assert "no verdict from the agent (status 'done')" in err
    assert ends[1]["verdict"]["extra"] == 1  # as the agent gave it


def test_a_failure_verdict_explains_and_a_next_step_goes_into_the_next_prompt(workspace, agent, tmp_path,
                                                                             monkeypatch):
    fake(tmp_path, monkeypatch, "claude")
    agent.script(claude_says(verdict("failure", "stuck", "the schema file is missing", "add schema.sql")),
                 claude_says(verdict("continue", "half", "", "write the migration")),
                 claude_says(verdict("success", "Add the migration")))
    code, err, ends = run(workspace, tmp_path, "-n", "5", "--ai-cmd-alias", "claude")
    assert code == 0 and agent.calls == 3
    assert [(e["outcome"], e["cause"]) for e in ends] == [("failure", "agent"), ("success", None), ("completed", None)]
    assert ends[0]["reason"] == "agent: the schema file is missing"
    second = agent.prompt(2).split("## PREVIOUS ITERATION\n", 1)[1]
    assert "Why: agent: the schema file is missing" in second
    assert "Its next step, in its own words: add schema.sql" in second
    third = agent.prompt(3).split("## PREVIOUS ITERATION\n", 1)[1]
    assert third.startswith("Iteration 2 says the work is not done yet.\nIts next step, in its own words: write the"
                            " migration")
    assert commits(workspace)[:2] == ["build 3: Add the migration", "build 2: half"]


def test_a_command_of_your_own_that_runs_claude_gets_the_flag(workspace, agent, tmp_path, monkeypatch):
    fake(tmp_path, monkeypatch, "claude")
    agent.script(claude_says(verdict("success")))
    code, _, _ = run(workspace, tmp_path, "-n", "1", "--ai-cmd", "claude -p --output-format stream-json --verbose",
                     commit=False)
    assert code == 0 and "--json-schema" in agent.argv(1)


def test_schema_with_a_cli_that_has_no_schema_flag_is_a_config_error(workspace, agent, tmp_path, monkeypatch):
    fake(tmp_path, monkeypatch, "gemini")
    make_repo(workspace)
    write_config(workspace, {"loop": {"verdict": "schema"}})
    done = run_rooda("build", "-n", "1", "--ai-cmd-alias", "gemini", "--no-log", cwd=str(workspace))
    assert done.returncode == 2 and agent.calls == 0
    assert done.stderr.decode().splitlines()[0] == (
        "rooda-config.json:3:5: loop.verdict: schema needs an agent CLI with a schema flag (claude, codex), not gemini")
    done = run_rooda("build", "-n", "1", "--ai-cmd", agent.cmd, "--no-log", cwd=str(workspace))
    assert done.returncode == 2 and b"not this one" in done.stderr


def test_doctor_says_what_the_run_would_refuse(workspace, agent, tmp_path, monkeypatch):
    fake(tmp_path, monkeypatch, "gemini")
    write_config(workspace, {"loop": {"verdict": "schema"}})
    done = run_rooda("doctor", "build", "--ai-cmd-alias", "gemini", cwd=str(workspace))
    assert "error    config: rooda-config.json:3:5: loop.verdict: schema needs an agent CLI with a schema flag" \
        in done.stdout.decode()
