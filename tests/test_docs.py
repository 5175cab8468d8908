"""The README says what rooda.py does: each table that mirrors a table in the code
(settings, reserved words, presets, log events, exit codes) is checked against it, and
the code's own tables against each other (formats, stops, the settings a plan is read
by), so that adding a row in one place and not the other fails here (design review, R12
and section 6)."""
import ast
import inspect
import os
import re
import string

import rooda
from conftest import ROOT

with open(os.path.join(ROOT, "README.md")) as _stream:
    README = _stream.read()


def section(start, end):
    return README.split(start, 1)[1].split(end, 1)[0]


def test_every_setting_is_in_the_readmes_list_of_loop_settings():
    listed = section("Loop settings and their defaults:", "A procedure has")
    missing = [setting.key for setting in rooda.SETTINGS if "`%s`" % setting.key not in listed]
    assert missing == []


def test_the_reserved_words_are_the_commands_and_the_readme_names_them_all():
    assert set(rooda.COMMANDS) | {"help", "version"} == set(rooda.RESERVED_WORDS)
    line = re.search(r"The words `([a-z ]+)` cannot name one", README).group(1)
    assert line.split() == list(rooda.RESERVED_WORDS)


def test_the_preset_table_is_the_catalogue():
    rows = re.findall(r"^\| `([\w-]+)`(?: \(`[\w-]+`\))? \| `([^`]+)`", section("| preset | command |", "\n\n"),
                      re.M)
    assert sorted(name for name, _ in rows) == sorted(cli.name for cli in rooda.AGENT_CLIS)
    for name, command in rows:
        assert rooda.PRESETS[name].command in command, name


def test_the_event_table_has_every_event_a_session_log_writes():
    with open(rooda.__file__) as stream:
        written = re.findall(r"\b(?:log|self)\.event\(\"(\w+)\"", stream.read())
    names = set(written)
    documented = set(re.findall(r"^\| `(\w+)` \|", section("| event | fields |", "\n\n"), re.M))
    assert names == documented


def test_the_gates_table_gives_the_default_commit_message():
    row = re.search(r"^\| `git: \{commit: true\}` \|(.*)$", README, re.M).group(1)
    assert "message `%s` unless" % rooda.DEFAULT_COMMIT_MESSAGE in row


# --- the code's own tables, each against the others -------------------------------------

def test_every_clis_stream_format_is_text_or_a_registered_format():
    unknown = [(cli.name, cli.stream_format) for cli in rooda.AGENT_CLIS
               if cli.stream_format != "text" and cli.stream_format not in rooda.OUTPUT_FORMATS]
    assert unknown == []


def test_the_formats_are_text_and_every_registered_one():
    assert rooda.AGENT_FORMATS == ("text",) + tuple(rooda.OUTPUT_FORMATS)


# The readers of STOPS' shape and of the closing line's code, one each.

def stops():
    """{stop: (status, exit code or None for 128 + the signal, closing-line template)}."""
    return {name: (row.status, row.exit_code, row.words) for name, row in rooda.STOPS.items()}


def test_each_stop_is_said_at_a_level_progress_has_and_resume_takes_what_may_go_on():
    assert {row.level for row in rooda.STOPS.values()} <= {"info", "error", "always"}
    assert all(callable(getattr(rooda.Progress, row.level)) for row in rooda.STOPS.values())
    assert {row.status for row in rooda.STOPS.values() if row.resumable} == {"interrupted", "limited", "unavailable",
                                                                          "error"}  # (error: the account)


def closing_line_keywords():
    """The names the closing-line function passes to a STOPS template's format()."""
    tree = ast.parse(inspect.getsource(rooda._closing_line))
    [call] = [node for node in ast.walk(tree) if isinstance(node, ast.Call)
              and isinstance(node.func, ast.Attribute) and node.func.attr == "format"]
    return {keyword.arg for keyword in call.keywords}


def test_every_stops_closing_line_formats_with_what_the_closing_line_passes():
    passed = closing_line_keywords()
    assert {"done", "total", "reason"} <= passed  # the reader found the call
    unfilled = {}
    for name, (_, _, template) in stops().items():
        fields = {re.match(r"\w*", field).group() for _, field, _, _ in string.Formatter().parse(template)
                  if field is not None}
        if fields - passed:
            unfilled[name] = sorted(fields - passed)
    assert unfilled == {}
    for _, _, template in stops().values():  # and each fills in
        template.format(**dict.fromkeys(passed, "x"))


def exit_code(text):
    """An exit code as the three places write it; 128 + a signal's number is "128+N"."""
    return "128+N" if text == "128+N" or int(text) > 128 else text


def test_the_readme_the_epilog_and_stops_give_the_same_exit_codes():
    rows = re.findall(r"^\| ([\d / ]+) \| (\w+)", section("| exit | meaning |", "\n\n"), re.M)
    readme = {}
    for codes, first_word in rows:
        for code in codes.split(" / "):
            readme.setdefault(exit_code(code), first_word)
    said = " ".join(rooda.EPILOG.split("exit codes:", 1)[1].split("\n\n", 1)[0].split())
    epilog = {exit_code(code): word for code, word in re.findall(r"(?:^|, )(\d+(?:\+N)?) (\w+)", said)}
    table = {"128+N" if code is None else str(code) for _, code, _ in stops().values()}
    assert set(readme) == set(epilog) == table
    assert readme == epilog  # each code's meaning starts with the same word in both


def unknown_plan_reads(source):
    """(line, name) of each `plan.<name>` or `self.plan.<name>` read in source that is
    neither a declared field of RunPlan, nor a key of SETTINGS (RunPlan.__getattr__ reads
    those), nor a method of the record (plan.replace)."""
    fields = {name for cls in rooda.RunPlan.__mro__ for name in vars(cls).get("__annotations__", {})}
    keys = {setting.key for setting in rooda.SETTINGS}
    methods = {name for name in dir(rooda.RunPlan) if callable(getattr(rooda.RunPlan, name))}
    unknown = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Load):
            owner = node.value
            is_plan = (isinstance(owner, ast.Name) and owner.id == "plan") or (
                isinstance(owner, ast.Attribute) and owner.attr == "plan"
                and isinstance(owner.value, ast.Name) and owner.value.id == "self")
            if is_plan and node.attr not in fields | keys | methods:
                unknown.append((node.lineno, node.attr))
    return unknown


def test_every_setting_a_plan_is_read_by_is_a_field_or_a_row_of_settings():
    """A setting read by a name not in the table fails here, not in a night's second
    iteration (SPEC 17, rev 4): RunPlan.__getattr__ passes mypy for any name. Checked by
    hand on a copy of rooda.py with one `plan.delay` written `plan.delya`:
    `unknown_plan_reads` gave [(5363, 'delya')] (rooda.py at 6bb52bd) and this test failed."""
    with open(rooda.__file__, encoding="utf-8") as stream:
        source = stream.read()
    reads = unknown_plan_reads(source)
    assert reads == []
    assert len(re.findall(r"\bplan\.\w+", source)) > 100  # the reads were found at all


def test_every_option_help_shows_is_in_the_readmes_commands_and_options():
    # (`--keep` was missing: issue 43, 12)
    listed = section("## Commands and options", "## How an iteration ends")
    shown = [option for action in rooda.build_parser()._actions for option in action.option_strings
             if option.startswith("--") and action.help != "==SUPPRESS=="]
    assert [option for option in shown if option not in listed and
            not any(option in phases for phases in re.findall(r"--observe/[-/a-z]+", listed))] == []
