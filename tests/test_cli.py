"""The command line: parsing, dry-run, prompt assembly, errors and exit codes."""
import os
import re
import subprocess
import sys

import pytest

import rooda
from conftest import ROODA, run_main, run_rooda, write_config

PHASE_HEADINGS = ["## OBSERVE", "## ORIENT", "## DECIDE", "## ACT"]


def test_version(capfd):
    code, out, _ = run_main(capfd, "--version")
    assert (code, out) == (0, "rooda %s\n" % rooda.__version__)
    assert run_main(capfd, "version")[1] == out


def test_help_has_examples_and_exit_codes(capfd):
    code, out, _ = run_main(capfd, "--help")
    assert code == 0
    assert "examples:" in out and "--max-iterations" in out and "exit codes:" in out
    assert run_main(capfd, "help")[1] == out


def test_no_arguments_is_a_usage_error(capfd):
    code, out, err = run_main(capfd)
    assert code == 2 and out == "" and "usage:" in err


# --- dry-run (seed 000 examples 4 and 5) -----------------------------------------------

def test_dry_run_prints_the_prompt_and_runs_no_agent(workspace, agent, capfd):
    code, out, err = run_main(capfd, "build", "--dry-run", "--ai-cmd", agent.cmd)
    assert code == 0 and agent.calls == 0
    assert err == "[DRY RUN] Procedure: build\n[DRY RUN] Would execute with: %s\n" % agent.cmd
    assert out.startswith("# OODA Loop Iteration\n\n## OBSERVE\n")
    assert [line for line in out.splitlines() if line.startswith("## ")] == PHASE_HEADINGS
    assert "## CONTEXT" not in out and "PREVIOUS ITERATION" not in out


def test_dry_run_with_context_runs_no_agent(workspace, agent, capfd):
    text = "focus on the auth module, the JWT validation is broken"
    code, out, _ = run_main(capfd, "build", "-d", "--context", text, "--ai-cmd", agent.cmd)
    assert code == 0 and agent.calls == 0
    assert out.startswith("# OODA Loop Iteration\n\n## CONTEXT\n%s\n\n## OBSERVE\n" % text)


def test_dry_run_needs_no_agent_on_path(workspace, capfd, monkeypatch):
    monkeypatch.setenv("PATH", str(workspace))
    code, out, err = run_main(capfd, "plan", "--dry-run")
    assert code == 0
    assert "[DRY RUN] Would execute with: (no agent found)" in err
    assert out.startswith("# OODA Loop Iteration")


def test_dry_run_of_every_shipped_procedure_has_four_nonempty_phases(workspace, capfd):
    for name in rooda.load_config().data["procedures"]:
        code, out, _ = run_main(capfd, name, "--dry-run", "--ai-cmd", "x")
        assert code == 0
        sections = out.split("\n## ")[1:]
        assert [s.split("\n", 1)[0] for s in sections] == ["OBSERVE", "ORIENT", "DECIDE", "ACT"]
        assert all(s.split("\n", 1)[1].strip() for s in sections), name


def test_shipped_prompts_never_hold_a_bare_signal_line():
    for folder, _, files in os.walk(os.path.join(os.path.dirname(ROODA), "prompts")):
        for name in files:
            with open(os.path.join(folder, name)) as stream:
                for number, line in enumerate(stream, 1):
                    assert line.strip() not in ("<promise>SUCCESS</promise>",
                                                "<promise>FAILURE</promise>"), (name, number)


def test_several_contexts_are_joined_by_a_blank_line_and_files_are_read(workspace, capfd):
    (workspace / "notes.md").write_text("from a file\n")
    code, out, _ = run_main(capfd, "build", "-d", "-c", "one", "-c", "@notes.md", "-c", "@@literal",
                            "--ai-cmd", "x")
    assert "## CONTEXT\none\n\nfrom a file\n\n@literal\n\n## OBSERVE" in out


def test_a_context_file_under_home_is_read(workspace, capfd, monkeypatch, tmp_path):
    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / "notes.md").write_text("from home\n")
    code, out, _ = run_main(capfd, "build", "-d", "-c", "@~/notes.md", "--ai-cmd", "x")
    assert code == 0 and "## CONTEXT\nfrom home\n" in out


def test_a_missing_context_file_exits_2(workspace, capfd):
    code, _, err = run_main(capfd, "build", "-d", "-c", "@missing.md", "--ai-cmd", "x")
    assert code == 2 and "context file not found: " in err and "missing.md" in err


def test_phase_override_replaces_the_fragments(workspace, capfd):
    (workspace / "my-act.md").write_text("  Do exactly this.  \n")
    code, out, _ = run_main(capfd, "build", "-d", "--act", "my-act.md", "--ai-cmd", "x")
    assert code == 0
    assert out.endswith("## ACT\nDo exactly this.\n")


def test_a_missing_phase_override_exits_2(workspace, capfd):
    code, _, err = run_main(capfd, "build", "-d", "--observe", "nope.md", "--ai-cmd", "x")
    assert code == 2 and "observe fragment not found" in err


def test_options_may_stand_before_the_procedure(workspace, agent, capfd):
    code, out, _ = run_main(capfd, "--dry-run", "--ai-cmd", agent.cmd, "run", "plan")
    assert code == 0 and out.startswith("# OODA Loop Iteration")


def test_options_take_equals_values_and_unambiguous_prefixes(workspace, agent, capfd):
    agent.script({})
    code, _, err = run_main(capfd, "build", "--max-iter", "2", "--quie", "--ai-cmd=" + agent.cmd)
    assert code == 0 and agent.calls == 2 and err == ""
    code, _, err = run_main(capfd, "build", "--max-iterations=1", "--quiet", "--ai-cmd", agent.cmd)
    assert code == 0 and agent.calls == 3


def test_help_lists_every_option_with_argparse(capfd):
    code, out, _ = run_main(capfd, "--help")
    for option in ("--max-iterations", "--ai-format", "--max-cost", "--log-level", "--verify",
                   "--done-when", "--no-log", "--json", "--force", "prompt <file|-> [max_iterations]"):
        assert option in out, option


def test_log_level_maps_to_verbosity(workspace, agent, capfd):
    agent.script({"actions": [{"out": "agent says hi\n"}]})
    code, out, err = run_main(capfd, "build", "-n", "1", "--log-level", "debug", "--ai-cmd", agent.cmd)
    assert code == 0 and "agent says hi" in out
    code, out, err = run_main(capfd, "build", "-n", "1", "--log-level", "warn", "--ai-cmd", agent.cmd)
    assert code == 0 and out == "" and err == ""


def test_grouped_short_flags_and_glued_values(workspace, agent, capfd):
    agent.script({})
    code, _, err = run_main(capfd, "build", "-n2", "-q", "--ai-cmd=" + agent.cmd)
    assert code == 0 and agent.calls == 2 and err == ""


def test_fragments_join_stripped_with_a_blank_line(workspace, capfd):
    (workspace / "a.md").write_text("\n\nfirst\n\n")
    (workspace / "b.md").write_text("second\n")
    write_config(workspace, {"procedures": {"two": {
        "observe": ["a.md", "b.md"], "orient": "a.md", "decide": [{"content": "inline"}],
        "act": [{"path": "b.md"}]}}})
    code, out, _ = run_main(capfd, "two", "-d", "--ai-cmd", "x")
    assert out == ("# OODA Loop Iteration\n\n## OBSERVE\nfirst\n\nsecond\n\n## ORIENT\nfirst\n\n"
                   "## DECIDE\ninline\n\n## ACT\nsecond\n")


def test_fragment_parameters(workspace, capfd):
    (workspace / "t.md").write_text("Work on {{.area}} and {{ .area }} only.")
    (workspace / "plain.md").write_text('Quote Go templates as {{"{{"}} .Values.x }}.')
    write_config(workspace, {"procedures": {"p": {
        "observe": [{"path": "t.md", "parameters": {"area": "auth"}}],
        "orient": "plain.md", "decide": "plain.md", "act": "plain.md"}}})
    code, out, _ = run_main(capfd, "p", "-d", "--ai-cmd", "x")
    assert "## OBSERVE\nWork on auth and auth only.\n" in out
    assert "## ACT\nQuote Go templates as {{ .Values.x }}.\n" in out  # Go's escape
    write_config(workspace, {"procedures": {"p": {"observe": "t.md"}}})
    code, out, err = run_main(capfd, "p", "-d", "--ai-cmd", "x")
    assert code == 2 and "placeholder {{.area}} has no parameter" in err  # never passed on as text


# --- usage errors: one line, exit 2 ----------------------------------------------------

@pytest.mark.parametrize("args,message", [
    (["biuld"], "unknown procedure 'biuld'; did you mean 'build'?"),
    (["build", "--max-itrations", "3"], "unknown option '--max-itrations'; did you mean '--max-iterations'?"),
    (["build", "--max", "3"], "ambiguous option: --max could match --max-iterations, --max-time, --max-cost"),
    (["build", "--ai-format", "claud"], "--ai-format must be text, claude, codex, gemini, copilot or opencode, not 'claud'; did you mean 'claude'?"),
    (["build", "--log-level", "loud"], "--log-level must be debug, info, warn or error, not 'loud'"),
    (["build", "--max-cost", "-5"], "--max-cost must be a number > 0, not '-5'"),
    (["list", "--json"], "--json is only for 'config'"),
    (["build", "-n", "-1"], "--max-iterations must be a whole number >= 0"),
    (["build", "three"], "max_iterations must be a whole number >= 0 (0 means unlimited), not 'three'"),
    (["build", "-v", "-q", "--ai-cmd", "x"], "--verbose and --quiet exclude each other"),
    (["build", "--timeout", "0", "--ai-cmd", "x"], "--timeout must be a number > 0, not '0'"),
    (["build", "--failure-threshold", "0", "--ai-cmd", "x"], "--failure-threshold must be a whole number >= 1"),
    (["build", "-n"], "option -n/--max-iterations needs a value"),
    (["run"], "'run' needs a procedure name"),
    (["build", "3", "4"], "unexpected argument '4'"),
    (["build", "--ai-cmd-alias", "cluade"], "unknown agent preset 'cluade' (from --ai-cmd-alias); did you mean 'claude'?"),
    (["build", "--ai-cmd", "'unbalanced"], "cannot parse the agent command from --ai-cmd"),
    (["build", "--color", "pink", "--ai-cmd", "x"], "--color must be auto, always or never"),
    # issue 22 items 20-22: a command's own options only; an empty phase file or context
    (["status", "--bogus"], "unknown option '--bogus'"),
    (["status", "--jsn"], "unknown option '--jsn'; did you mean '--json'?"),
    (["build", "--observe", "", "--ai-cmd", "x"], "--observe needs a file; an empty value names none"),
    (["build", "--act=", "-d", "--ai-cmd", "x"], "--act needs a file; an empty value names none"),
    (["build", "--context", "", "--ai-cmd", "x"], "--context needs some text (or @FILE); an empty one would"
                                                  " add an empty section"),
])
def test_usage_errors_exit_2_with_one_clear_line(workspace, capfd, args, message):
    code, out, err = run_main(capfd, *args)
    assert code == 2 and out == ""
    assert message in err.splitlines()[0]
    assert "Traceback" not in err
    assert "did you mean" in message or "did you mean" not in err  # (never --verbose for status)


def test_config_json_syntax_error_has_path_line_col_and_caret(workspace, capfd):
    (workspace / "rooda-config.json").write_text('{\n  "loop": {\n    "delay": 1,\n  }\n}\n')
    code, _, err = run_main(capfd, "build", "-d")
    assert code == 2
    lines = err.splitlines()
    # Where json puts the blame varies by CPython (3.13 names the trailing comma itself).
    match = re.match(r"rooda-config\.json:(\d+):(\d+): \S", lines[0])
    assert match, lines[0]
    line, col = int(match.group(1)), int(match.group(2))
    assert line in (3, 4)
    source = '{\n  "loop": {\n    "delay": 1,\n  }\n}\n'.splitlines()[line - 1]
    assert lines[1] == "  " + source and lines[2] == "  " + " " * (col - 1) + "^"


def test_config_schema_errors_are_all_reported(workspace, capfd):
    write_config(workspace, {"loop": {"failure_treshold": 2, "delay": -1},
                             "procedures": {"list": {}}})
    code, _, err = run_main(capfd, "build", "-d")
    assert code == 2
    lines = err.splitlines()
    assert lines[0] == "rooda-config.json:3:5: loop.failure_treshold: unknown key; did you mean" \
        " 'failure_threshold'?"
    assert lines[1:3] == ['      "failure_treshold": 2,', "      ^"]  # indented by 2
    assert "rooda-config.json:4:5: loop.delay: must be >= 0" in lines
    assert "rooda-config.json:7:5: procedures.list: 'list' is a command and cannot name a procedure" in lines
    assert "Traceback" not in err


def test_both_json_and_yaml_config_is_ambiguous(workspace, capfd):
    (workspace / "rooda-config.json").write_text("{}")
    (workspace / "rooda-config.yml").write_text("")
    code, _, err = run_main(capfd, "build", "-d")
    assert code == 2 and "ambiguous configuration" in err


def test_broken_pipe_on_dry_run_is_quiet(workspace):
    proc = subprocess.run("%s %s build --dry-run --ai-cmd x | head -1" % (sys.executable, ROODA),
                          shell=True, cwd=str(workspace), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout == b"# OODA Loop Iteration\n"
    assert b"Traceback" not in proc.stderr and b"Exception ignored" not in proc.stderr


def test_python_floor_message():
    """The floor check runs before anything that could fail on an old interpreter."""
    with open(ROODA) as stream:
        source = stream.read()
    floor = source.index("if sys.version_info < (3, 8):")
    assert floor < source.index("\nimport os")
    assert "rooda: error: Python 3.8 or newer is required" in source


def test_runs_as_a_script_from_another_directory(tmp_path):
    proc = run_rooda("plan", "--dry-run", "--ai-cmd", "x", cwd=str(tmp_path))
    assert proc.returncode == 0 and proc.stdout.startswith(b"# OODA Loop Iteration")


# --- moved from the review round's edge cases: each went wrong once ---------------------

def test_prompt_from_a_closed_stdin_is_one_clear_error(workspace, agent):
    proc = subprocess.run([sys.executable, ROODA, "prompt", "-", "--ai-cmd", agent.cmd], cwd=str(workspace),
                          env=dict(os.environ, **agent.env), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          timeout=30, preexec_fn=lambda: os.close(0))
    assert proc.returncode == 2 and b"prompt -: standard input is closed" in proc.stderr
    assert b"Traceback" not in proc.stderr


# --- every flag by its setting's own rule (SPEC 17 rev 4) --------------------------------

@pytest.mark.parametrize("flag, text, key, value", [
    ("--verify", "", "verify", ""),                 # a command: not empty
    ("--done-when", " ", "done_when", " "),
    ("--delay", "-1", "delay", -1),                 # a number: its bound
    ("--max-cost", "-5", "max_cost", -5),
    ("--failure-threshold", "0", "failure_threshold", 0),
    ("--timeout", "nan", "iteration_timeout", float("nan")),
    ("--log-level", "loud", "log_level", "loud"),   # a choice
])
def test_a_flag_refuses_what_its_setting_refuses_in_a_file(workspace, capfd, flag, text, key, value):
    code, out, err = run_main(capfd, "build", "--ai-cmd", "true", "-n", "1", "--no-log", flag, text)
    assert code == 2 and out == "" and "Traceback" not in err
    first = err.splitlines()[0]
    assert first.startswith("rooda: error: %s must be " % flag), first
    # The same value in a file is refused by the same rule (the words after the key).
    write_config(workspace, {"loop": {key: value}})
    code, _, err = run_main(capfd, "build", "-d")
    assert code == 2 and " must be " in err.splitlines()[0]
