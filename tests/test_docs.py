"""The README says what rooda.py does: each table that mirrors a table in the code
(settings, reserved words, presets, log events) is checked against it, so that adding a
row in one place and not the other fails here (design review, R12)."""
import os
import re

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
    assert set(rooda.COMMAND_WORDS) | {"help", "version"} == set(rooda.RESERVED_WORDS)
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
