"""When the agent needs the person (SPEC 24, issue 46): what it needs and what it assumed
(its schema verdict, or NEEDS: / ASSUMED: lines), what its CLI refused it, the morning
report's Waiting on you and Decided without you, and `resume --answer`. Through the
command line, with fake `claude` and `codex` on PATH."""
import json
import os
import re
from html.parser import HTMLParser

import pytest

from conftest import OK_RESULT, events_line, fake_cli, run_rooda, say, session_events, write_config

ESCAPES = "\x1b]0;pwned\x07\x1b[31m"


@pytest.fixture
def clis(tmp_path, monkeypatch, workspace, agent):
    """The fake agent as `claude` and `codex` on PATH (subscription logins)."""
    for name in ("claude", "codex"):
        fake_cli(tmp_path, monkeypatch, name)
    for key in ("ANTHROPIC_API_KEY", "OPENAI_API_KEY", "CODEX_API_KEY"):
        monkeypatch.delenv(key, raising=False)
    return agent


def cli(workspace, agent, *args, env=None):
    done = run_rooda(*args, cwd=str(workspace), env=dict(agent.env, **(env or {})))
    return done.returncode, done.stdout.decode(), done.stderr.decode()


def verdict(status, needs=None, assumptions=(), explanation="", summary="did some"):
    """A Claude run whose schema verdict has needs and assumptions."""
    answer = {"status": status, "summary": summary, "explanation": explanation, "next_step": None,
              "needs": needs, "assumptions": list(assumptions)}
    return {"actions": [{"out": events_line(say("done"), dict(OK_RESULT, structured_output=answer))}]}


def claude_says(*events, result=None):
    return {"actions": [{"out": events_line(*events, result or dict(OK_RESULT, result="did a step"))}]}


def ends(logs):
    return [event for event in session_events(logs) if event["event"] == "iteration_end"]


def report(workspace, logs, *args):
    done = run_rooda("report", "--log-dir", logs, *args, cwd=str(workspace), env={"COLUMNS": "400"})
    assert done.returncode == 0, done.stderr
    return done.stdout.decode()


# --- what an attempt leaves for the person ------------------------------------------------------

def test_a_verdicts_needs_and_assumptions_are_recorded_and_needs_explains_a_failure(clis, workspace, tmp_path):
    write_config(workspace, {"loop": {"verdict": "schema"}})
    clis.script(verdict("continue", assumptions=["used SQLite for the cache", "kept the old API name"]),
                verdict("failure", needs="Which database should production use?" + ESCAPES,
                        assumptions=["used SQLite for the cache"]))
    logs = tmp_path / "logs"
    code, _, err = cli(workspace, clis, "build", "-n", "2", "--ai-cmd-alias", "claude", "--log-dir", logs,
                       "--failure-threshold", "5")
    assert code == 0, err
    first, second = ends(logs)
    assert first["needs"] is None and first["assumptions"] == ["used SQLite for the cache", "kept the old API name"]
    assert second["needs"] == "Which database should production use?" and "\x1b" not in json.dumps(second)
    # (no explanation of its own: what it needs is why it failed)
    assert second["reason"] == "agent: Which database should production use?"
    assert "  agent: Which database should production use?" in err and "\x1b" not in err


def test_the_verdict_schema_asks_for_both_and_a_verdict_without_them_is_still_one(clis, workspace, tmp_path):
    import rooda
    assert {"needs", "assumptions"} <= set(rooda.VERDICT_SCHEMA["required"])
    assert rooda.verdict_problem({"status": "success", "summary": "s", "explanation": "", "next_step": None}) == ""
    assert rooda.verdict_problem({"status": "success", "summary": "s", "explanation": "", "next_step": None,
                                  "needs": 3, "assumptions": []}) == "needs or assumptions not text"
    assert rooda.verdict_problem({"status": "success", "summary": "s", "explanation": "", "next_step": None,
                                  "needs": None, "assumptions": "x"}) == "needs or assumptions not text"


def test_a_text_agent_says_them_in_needs_and_assumed_lines_not_the_prompts_own(workspace, agent, tmp_path):
    logs = tmp_path / "logs"
    agent.script({"actions": [{"echo_prompt": True}, {"out": "worked on it\nASSUMED: the API is v2\n"
                                                             "NEEDS: the staging password\n"
                                                             "ASSUMED:   the API is v2  \n"
                                                             "<promise>FAILURE</promise>\n"}]})
    done = run_rooda("build", "-n", "1", "--ai-cmd", agent.cmd, "--log-dir", logs, cwd=str(workspace),
                     env=agent.env)
    assert done.returncode == 0, done.stderr
    [end] = ends(logs)
    assert end["needs"] == "the staging password" and end["assumptions"] == ["the API is v2"]
    assert end["reason"] == "agent: the staging password"
    # The shipped fragment tells the agent how, without a line of its own that would read as one.
    assert "`NEEDS: <what>`" in agent.prompt(1) and "`ASSUMED: <choice>`" in agent.prompt(1)


def test_claudes_permission_denials_and_a_tool_it_has_not_are_refused_actions(clis, workspace, tmp_path):
    ask = {"type": "assistant", "message": {"content": [{"type": "tool_use", "id": "toolu_1",
                                                         "name": "AskUserQuestion", "input": {
        "questions": [{"question": "Postgres or SQLite?", "header": "DB", "options": []}]}}]}}
    missing = {"type": "user", "message": {"content": [{"type": "tool_result", "tool_use_id": "toolu_1",
                                                        "is_error": True, "content": "<tool_use_error>Error: No"
                                                        " such tool available: AskUserQuestion. AskUserQuestion is"
                                                        " disabled for this session, in subagents as well as"
                                                        " here.</tool_use_error>"}]}}  # (2.1.332's words)
    denials = [{"tool_name": "Bash", "tool_use_id": "toolu_2", "tool_input": {"command": "rm -rf build"}},
               {"tool_name": "Write", "tool_use_id": "toolu_3", "tool_input": {"file_path": "/etc/hosts"}}]
    clis.script(claude_says(ask, missing, result=dict(OK_RESULT, result="did a step", permission_denials=denials)))
    logs = tmp_path / "logs"
    code, _, err = cli(workspace, clis, "build", "-n", "1", "--ai-cmd-alias", "claude", "--log-dir", logs)
    assert code == 0, err
    [end] = ends(logs)
    assert end["denied"][0]["tool"] == "AskUserQuestion" and "Postgres or SQLite?" in end["denied"][0]["input"]
    assert end["denied"][1:] == [{"tool": "Bash", "input": "rm -rf build"}, {"tool": "Write", "input": "/etc/hosts"}]


def test_codexs_declined_command_is_a_refused_action(clis, workspace, tmp_path):
    declined = {"type": "item.completed", "item": {"id": "item_1", "type": "command_execution",
                                                   "command": "/bin/bash -lc 'git push --force'",
                                                   "aggregated_output": "", "exit_code": None,
                                                   "status": "declined"}}
    said = {"type": "item.completed", "item": {"id": "item_2", "type": "agent_message", "text": "could not push"}}
    clis.script({"actions": [{"out": events_line(declined, said, {"type": "turn.completed", "usage": {}})}]})
    logs = tmp_path / "logs"
    code, _, err = cli(workspace, clis, "build", "-n", "1", "--ai-cmd-alias", "codex", "--log-dir", logs)
    assert code == 0, err
    assert ends(logs)[0]["denied"] == [{"tool": "command_execution", "input": "git push --force"}]


# --- the morning report: Waiting on you, Decided without you ---------------------------------

def night(clis, workspace, tmp_path):
    """A session whose agent assumed, was refused an action, then asked and stopped."""
    write_config(workspace, {"loop": {"verdict": "schema", "on_failure_signal": "stop"}})
    denied = dict(OK_RESULT, permission_denials=[{"tool_name": "Bash", "tool_input": {"command": "rm -rf /tmp/x"}}],
                  structured_output={"status": "continue", "summary": "s", "explanation": "", "next_step": None,
                                     "needs": None, "assumptions": ["<b>used SQLite</b>"]})
    clis.script({"actions": [{"out": events_line(say("done"), denied)}]},
                verdict("failure", needs="Which database should production use?" + ESCAPES,
                        assumptions=["<b>used SQLite</b>", "kept the old API name"]),
                verdict("continue"), verdict("success"))
    logs = tmp_path / "logs"
    code, _, err = cli(workspace, clis, "build", "-n", "5", "--ai-cmd-alias", "claude", "--log-dir", logs)
    assert code == 1 and "The agent asked for help" in err, err
    return logs


def test_the_report_says_what_waits_on_the_person_and_what_was_decided_without_them(clis, workspace, tmp_path):
    logs = night(clis, workspace, tmp_path)
    text = report(workspace, logs)
    assert "\x1b" not in text
    waiting = text.index("WAITING ON YOU")
    assert text.index("Total:") < waiting < text.index("DECIDED WITHOUT YOU") < re.search(r"^session-", text,
                                                                                             re.M).start()
    section = text[waiting:text.index("DECIDED WITHOUT YOU")]
    assert "#2 asks: Which database should production use?" in section
    assert re.search(r"answer: cd \S+ && python3 \S+rooda.py resume session-\S+ --log-dir \S+ --answer", section)
    assert "#1 was refused Bash: rm -rf /tmp/x" in section
    decided = text[text.index("DECIDED WITHOUT YOU"):]
    assert decided.count("used SQLite") == 1 and "#1 <b>used SQLite</b>" in decided
    assert "#2 kept the old API name" in decided
    [data] = [json.loads(line) for line in report(workspace, logs, "--json").splitlines()]
    assert data["waiting_on_you"]["needs"]["text"] == "Which database should production use?"
    assert data["waiting_on_you"]["denied"] == [{"tool": "Bash", "input": "rm -rf /tmp/x", "iteration": 1}]
    assert [a["assumption"] for a in data["decided_without_you"]] == ["<b>used SQLite</b>", "kept the old API name"]
    markdown = report(workspace, logs, "--markdown", "-")
    assert markdown.index("### Waiting on you") < markdown.index("### Decided without you") < \
        markdown.index("### session-")
    assert "#2 asks: Which database should production use?" in markdown


class Sections(HTMLParser):
    """The page's h2 headings in order, and the text under each."""

    def __init__(self):
        super().__init__()
        self.order, self.under, self.heading, self.in_h2 = [], {}, None, False

    def handle_starttag(self, tag, attrs):
        self.in_h2 = tag == "h2"

    def handle_endtag(self, tag):
        self.in_h2 = False

    def handle_data(self, data):
        if self.in_h2:
            self.heading = data
            self.order.append(data)
            self.under[data] = ""
        elif self.heading:
            self.under[self.heading] += data


def test_the_page_has_both_sections_right_after_the_glance_escaped(clis, workspace, tmp_path):
    logs = night(clis, workspace, tmp_path)
    page = report(workspace, logs, "--html", "-")
    assert "<b>used SQLite</b>" not in page and "&lt;b&gt;used SQLite&lt;/b&gt;" in page and "\x1b" not in page
    parsed = Sections()
    parsed.feed(page)
    assert parsed.order[:3] == ["Waiting on you", "Decided without you", "The night"], parsed.order
    assert "#2 asks: Which database should production use?" in parsed.under["Waiting on you"]
    assert "--answer" in parsed.under["Waiting on you"]
    assert "#1 <b>used SQLite</b>" in parsed.under["Decided without you"]


def test_an_empty_section_is_not_shown_and_a_later_success_closes_the_question(clis, workspace, tmp_path):
    write_config(workspace, {"loop": {"verdict": "schema"}})
    clis.script(verdict("continue", needs="a token for the API"), verdict("success"))
    logs = tmp_path / "logs"
    code, _, err = cli(workspace, clis, "build", "-n", "5", "--ai-cmd-alias", "claude", "--log-dir", logs)
    assert code == 0, err
    text = report(workspace, logs)
    assert "WAITING ON YOU" not in text and "DECIDED WITHOUT YOU" not in text
    assert "<h2>Waiting on you" not in report(workspace, logs, "--html", "-")


# --- the person answers ------------------------------------------------------------------------

def test_resume_answer_gives_the_next_prompt_the_answer_once_and_records_it(clis, workspace, tmp_path):
    logs = night(clis, workspace, tmp_path)
    _, out, _ = cli(workspace, clis, "status", "--log-dir", logs)
    assert re.search(r"^question +Which database should production use\? -- answer it: cd \S+ && python3 "
                     r"\S+rooda.py resume session-\S+ --log-dir \S+ --answer", out, re.M), out
    code, _, err = cli(workspace, clis, "resume", "--log-dir", logs, "--answer", "Postgres 16, the managed one")
    assert code == 0, err  # (it stopped on its question: the answer makes it resumable)
    said = 'The person answered your question "Which database should production use?": Postgres 16, the managed one'
    assert said in clis.prompt(3) and "The person answered" not in clis.prompt(4)
    resumed = [event for event in session_events(logs) if event["event"] == "session_resume"][-1]
    assert (resumed["question"], resumed["answer"]) == ("Which database should production use?",
                                                        "Postgres 16, the managed one")
    _, out, _ = cli(workspace, clis, "status", "--log-dir", logs)
    assert "question" not in out
    assert "WAITING ON YOU" not in report(workspace, logs)  # (the person answered: nothing waits)


def test_an_answer_no_attempt_received_leaves_the_question_open(clis, workspace, tmp_path):
    logs = night(clis, workspace, tmp_path)
    code, _, err = cli(workspace, clis, "resume", "--log-dir", logs, "--answer", "Postgres", "-n", "2")
    assert code == 0 and "WARNING: the answer reached no agent: the run stopped before an iteration began" in err
    _, out, _ = cli(workspace, clis, "status", "--log-dir", logs)
    assert re.search(r"^question +Which database should production use\?", out, re.M), out


def test_resume_answer_reads_a_file_and_bounds_a_long_answer(clis, workspace, tmp_path):
    logs = night(clis, workspace, tmp_path)
    (tmp_path / "answer.txt").write_text("x" * (1 << 20))
    code, _, err = cli(workspace, clis, "resume", "--log-dir", logs, "--answer", "@%s" % (tmp_path / "answer.txt"))
    assert code == 0 and "WARNING: the answer is 1048576 bytes; the next prompt gets its first 8192" in err, err
    assert "x" * 8192 + "\n" in clis.prompt(3) or clis.prompt(3).count("x" * 8192) == 1
    assert "x" * 8193 not in clis.prompt(3)


@pytest.mark.parametrize("answer, said", [
    ("", "--answer is empty"),
    ("   \n", "--answer is empty"),
    ("@/no/such/file", "--answer @/no/such/file: cannot read /no/such/file"),
])
def test_a_bad_answer_is_one_line_and_exit_2(clis, workspace, tmp_path, answer, said):
    logs = night(clis, workspace, tmp_path)
    calls = clis.calls
    code, _, err = cli(workspace, clis, "resume", "--log-dir", logs, "--answer", answer)
    assert code == 2 and said in err and "Traceback" not in err and clis.calls == calls, err


def test_answer_with_no_session_or_outside_resume_is_refused(clis, workspace, tmp_path):
    code, _, err = cli(workspace, clis, "resume", "--log-dir", tmp_path / "none", "--answer", "yes")
    assert code == 2 and "no log directory" in err, err
    code, _, err = cli(workspace, clis, "build", "--ai-cmd-alias", "claude", "--answer", "yes")
    assert code == 2 and "--answer is only for 'resume'" in err, err


def test_a_session_that_stopped_on_its_question_says_how_to_answer_it(clis, workspace, tmp_path):
    logs = night(clis, workspace, tmp_path)
    code, _, err = cli(workspace, clis, "resume", "--log-dir", logs)
    assert code == 2 and "asks: Which database should production use?; answer it: resume session-" in err, err
