"""Why an iteration ended (SPEC 15): one cause per iteration that did not succeed, outages
waited out, accounts that cannot pay stopped at once, the agent's own explanation kept,
and the tokens of an iteration cut short. Waits are recorded through an injected wait,
never slept through."""
import json
import os
import signal

import pytest

import rooda
from conftest import (ends, fake_cli, interrupt, procedure, progress_lines, replay, run_build, run_main,
                      run_rooda, session_events, start_rooda, write_config)


# --- outages: waited out, not failures ---------------------------------------------------

def test_a_claude_529_is_waited_out_and_the_iteration_completes_within_the_cap(workspace, agent, capfd, waits):
    agent.script(replay("claude-error-overloaded-529.jsonl", 1), replay("claude-error-overloaded-529.jsonl", 1),
                 replay("claude.jsonl", 0))
    code, _, err, events = run_build(capfd, agent, "-n", "1", "--ai-format", "claude", "--verify", "touch verified")
    assert code == 0 and agent.calls == 3, err
    assert [(e["outcome"], e["cause"], e["iteration"]) for e in ends(events)] == [
        ("unavailable", "outage", 1), ("unavailable", "outage", 1), ("completed", None, 1)]
    assert waits == [60, 120]  # 1, 2, 4 ... minutes
    outages = [e for e in events if e["event"] == "limit"]
    assert [e["kind"] for e in outages] == ["outage", "outage"] and outages[0]["wait_seconds"] == 60
    assert [agent.env_of(n)["ROODA_ITERATION"] for n in (1, 2, 3)] == ["1", "1", "1"]
    lines = progress_lines(err)
    assert "Iteration 1/1 completed in D (unavailable)" in lines
    assert "Provider unavailable: API Error: 529 Overloaded; retrying in 1m · attempt 1. kill -TERM %d stops." \
        % os.getpid() in lines  # (no terminal here: Ctrl+C would not reach rooda)
    assert "Provider unavailable: " in lines[lines.index("Iteration 1/1 completed in D (unavailable)") + 1]
    assert "Completed: agent signalled SUCCESS (1 iteration, total: D) · 39.2k tokens · $0.20" in lines
    assert ends(events)[-1]["verify"] == "pass" and [e["verify"] for e in ends(events)[:2]] == [None, None]


def test_an_outage_longer_than_outage_wait_stops_with_exit_4(workspace, agent, capfd, waits):
    write_config(workspace, {"loop": {"outage_wait": 100}})
    agent.script(replay("claude-error-overloaded-529.jsonl", 1))
    code, _, err, events = run_build(capfd, agent, "-n", "5", "--ai-format", "claude")
    assert code == 4 and agent.calls == 2 and waits == [60]  # the next step, 2m, would end past 100 s
    assert events[-1]["status"] == "unavailable" and events[-1]["exit_code"] == 4
    assert [(e["kind"], e["wait_seconds"]) for e in events if e["event"] == "limit"] == \
        [("outage", 60), ("outage", 0)]  # the second stops the run: no wait
    lines = err.splitlines()
    closing = [line for line in lines if "ERROR: Stopped: provider unavailable" in line][0]
    assert closing[11:].startswith("ERROR: Stopped: provider unavailable: API Error: 529 Overloaded (beyond outage_wait"
                            " (1m40s)) (0 iterations completed, total: ")
    assert lines[lines.index(closing) + 1].startswith("  outage (server_error): API Error: 529 Overloaded.")


def test_outage_wait_0_does_not_wait(workspace, agent, capfd, waits):
    write_config(workspace, {"loop": {"outage_wait": 0}})
    agent.script({"actions": [{"out": "working\nAPI Error: Connection error.\n"}], "exit": 1})
    code, _, err, events = run_build(capfd, agent, "-n", "5")
    assert code == 4 and agent.calls == 1 and waits == []
    assert ends(events)[0]["cause"] == "outage"


def test_claude_text_mode_529_is_an_outage_but_a_quoted_529_in_a_good_run_changes_nothing(
        workspace, agent, capfd, waits):
    agent.script(replay("claude-text-529.txt", 1),
                 {"actions": [{"out": "the log says: API Error: 529 Overloaded\nall good\n"}]})
    code, _, err, events = run_build(capfd, agent, "-n", "1")
    assert code == 0 and agent.calls == 2 and waits == [60]
    assert [e["outcome"] for e in ends(events)] == ["unavailable", "success"]


def test_a_limit_recovered_from_is_not_blamed_for_a_later_server_error(workspace, agent, capfd, waits):
    """A rejected rate_limit_event, then the model answered, then an API 500 ended the run:
    that is an outage (a short backoff), not the limit's hours-long wait (defect 9)."""
    events = [{"type": "system", "subtype": "init", "model": "claude-x"},
              {"type": "rate_limit_event", "rate_limit_info": {"status": "rejected", "resetsAt": 4102444800,
                                                               "rateLimitType": "five_hour"}},
              {"type": "assistant", "message": {"content": [{"type": "text", "text": "working on it"}]}},
              {"type": "result", "is_error": True, "api_error_status": 500, "result": "API Error: 500 boom"}]
    (workspace / "s.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    agent.script({"actions": [{"out_file": str(workspace / "s.jsonl")}], "exit": 1}, replay("claude.jsonl"))
    code, _, err, log = run_build(capfd, agent, "-n", "1", "--ai-format", "claude")
    assert code == 0 and waits == [60]
    assert ends(log)[0]["cause"] == "outage"


# --- billing: stop at once ---------------------------------------------------------------

# OpenAI's insufficient_quota as codex, Copilot and OpenCode print it (revision 2 read these
# samples as limits), and Anthropic's credit error (recorded with Claude Code 2.1.197).
BILLING_SAMPLES = [
    ("codex-error-quota-429.jsonl", "codex", "Quota exceeded. Check your plan and billing details"),
    ("copilot-error-quota-429.jsonl", "copilot", "You exceeded your current quota"),
    ("opencode-error-quota-429.jsonl", "opencode", "You exceeded your current quota"),
    ("claude-error-credit-400.jsonl", "claude", "Credit balance is too low"),
    ("claude-text-credit-400.txt", "text", "Credit balance is too low"),
]


@pytest.mark.parametrize("sample,agent_format,words", BILLING_SAMPLES, ids=[s[0] for s in BILLING_SAMPLES])
def test_an_account_that_cannot_pay_stops_after_one_iteration_with_exit_2_and_no_verify(
        workspace, agent, capfd, sample, agent_format, words):
    write_config(workspace, {"loop": {"on_limit": "stop"}})  # (read as a limit, it would not hang)
    agent.script(replay(sample, 1))
    code, _, err, events = run_build(capfd, agent, "-n", "5", "--ai-format", agent_format,
                                     "--verify", "touch verified", "--no-verify-baseline")
    assert code == 2 and agent.calls == 1, err
    assert not (workspace / "verified").exists()
    last = progress_lines(err)[-1]
    assert last.startswith("ERROR: the agent's account cannot pay: ") and words in last
    assert ".;" not in last  # the CLI's closing full stop is not doubled by rooda's own words
    [end] = ends(events)
    assert end["cause"] == "billing" and end["verify"] is None
    assert events[-1]["status"] == "error" and events[-1]["exit_code"] == 2


def test_the_billing_stop_says_who_pays_and_counts_no_failure_streak(workspace, agent, capfd, tmp_path,
                                                                     monkeypatch):
    """(Found running the real Claude Code 2.1.197: the stop said neither.)"""
    fake_cli(tmp_path, monkeypatch, "claude")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test")
    agent.script(replay("claude-error-credit-400.jsonl", 1))
    logs = tmp_path / "logs"
    code, _, err = run_main(capfd, "build", "-n", "5", "--ai-cmd", "claude -p --output-format stream-json",
                            "--log-dir", logs)
    sessions = [str(path) for path in logs.glob("session-*.jsonl") if not path.name.endswith("-agent.jsonl")]
    assert code == 2
    # (no failure, in every word: issue 43, 10)
    assert "Iteration 1/5 completed in D (billing: the run stops)" in progress_lines(err)
    assert progress_lines(err)[-1].startswith(
        "ERROR: the agent's account cannot pay: Credit balance is too low; who pays: API billing (the Anthropic"
        " Console account), not the Claude subscription (ANTHROPIC_API_KEY found here); add credit there, or"
        " use another login; then: cd ")
    assert progress_lines(err)[-1].endswith(" resume %s --log-dir %s" % (
        os.path.basename(sessions[0])[:-6], os.path.dirname(sessions[0])))
    [report] = [json.loads(line) for line in run_rooda("report", "--json", sessions[0]).stdout.splitlines()]
    assert report["failures"] == 0 and rooda.tally(report["attempts"]) == "1 stopped"


def test_a_usage_limit_that_names_its_reset_is_a_limit_not_billing(workspace, agent, capfd, waits):
    write_config(workspace, {"loop": {"on_limit": "stop"}})
    agent.script({"actions": [{"out": "ERROR: You've hit your usage limit. Upgrade to Pro or purchase more"
                                      " credits or try again at 7:32 PM.\n"}], "exit": 1})
    code, _, err = run_main(capfd, "build", "-n", "2", "--ai-cmd", agent.cmd)
    assert code == 4 and "usage limit" in progress_lines(err)[-1]


# --- the agent's own explanation, and the cause in every place it shows -----------------

def test_a_failure_explained_by_the_agent_under_a_failing_verifier(workspace, agent, capfd):
    agent.script({"actions": [{"out": "looked at the tests\nthe tests need a running Postgres"
                                      " <promise>FAILURE</promise>\n"}]}, {})
    code, _, err, events = run_build(capfd, agent, "-n", "2", "--verify", "echo '1 failed, 4 passed'; exit 1")
    lines = err.splitlines()
    first = [i for i, line in enumerate(lines) if "Iteration 1/2 completed" in line][0]
    assert lines[first + 1:first + 3] == ["  agent: the tests need a running Postgres",
                                          "  verify exit 1: 1 failed, 4 passed"]
    end = ends(events)[0]
    assert (end["outcome"], end["cause"]) == ("failure", "agent")
    assert end["reason"] == "agent: the tests need a running Postgres"
    section = agent.prompt(2).split("## PREVIOUS ITERATION\n")[1].split("## OBSERVE")[0]
    assert section.startswith("Iteration 1 ended in failure (exit code 0).\n"
                              "Why: agent: the tests need a running Postgres\n"
                              "The last 18 bytes of the verifier's (`echo '1 failed, 4 passed'; exit 1`)"
                              " output:\n\n1 failed, 4 passed")
    log = open(events[0]["log"]).read()
    assert "Cause: agent\nReason: agent: the tests need a running Postgres\n" in log


def test_the_explanation_is_the_line_before_a_bare_marker(workspace, agent, capfd):
    agent.script({"actions": [{"out": "Blocked: the schema file is missing\n<promise>FAILURE</promise>\n"}]})
    code, _, err, events = run_build(capfd, agent, "-n", "1")
    assert "  agent: Blocked: the schema file is missing" in err.splitlines()


def test_three_different_explanations_are_not_the_same_error(workspace, agent, capfd):
    procedure(workspace, stuck={"same_error": 3})
    agent.script(*[{"actions": [{"out": "%s <promise>FAILURE</promise>\n" % why}]}
                   for why in ("no database", "no network", "no disk")], {})
    code, _, err = run_main(capfd, "p", "-n", "4", "--failure-threshold", "5", "--ai-cmd", agent.cmd)
    assert code == 0 and agent.calls == 4 and "Stuck" not in err


def test_three_identical_explanations_are(workspace, agent, capfd):
    procedure(workspace, stuck={"same_error": 3})
    agent.script({"actions": [{"out": "no database <promise>FAILURE</promise>\n"}]})
    code, _, err = run_main(capfd, "p", "-n", "5", "--failure-threshold", "5", "--ai-cmd", agent.cmd)
    assert code == 3 and agent.calls == 3
    lines = err.splitlines()
    assert "  agent: no database" == lines[[i for i, l in enumerate(lines) if "ERROR: Stuck" in l][0] + 1]


def test_on_failure_signal_stop_ends_the_run_when_the_agent_asks_for_help(workspace, agent, capfd):
    write_config(workspace, {"loop": {"on_failure_signal": "stop"}})
    agent.script({}, {"actions": [{"out": "I need the API key <promise>FAILURE</promise>\n"}]})
    code, _, err, events = run_build(capfd, agent, "-n", "5")
    assert code == 1 and agent.calls == 2
    assert progress_lines(err)[-1] == "ERROR: The agent asked for help (2 iterations completed, total: D)"
    assert err.splitlines()[-2] == "  agent: I need the API key"
    assert events[-1]["status"] == "aborted" and events[-1]["exit_code"] == 1


def test_on_failure_signal_is_a_procedure_setting_and_refuses_other_words(workspace, agent, capfd):
    procedure(workspace, on_failure_signal="halt")
    code, _, err = run_main(capfd, "p", "--ai-cmd", agent.cmd)
    assert code == 2 and "on_failure_signal: must be one of retry, stop, not 'halt'" in err


# --- usage of an iteration cut short ------------------------------------------------------

def test_partial_usage_after_sigint_during_a_claude_stream(workspace, agent, tmp_path):
    with open(os.path.join(rooda.ROODA_DIR, "tests", "agent-streams", "claude-stream.jsonl")) as stream:
        head = [line for line in stream if '"type":"result"' not in line]  # no run-ending event
    (workspace / "cut.jsonl").write_text("".join(head))
    agent.script({"actions": [{"out_file": str(workspace / "cut.jsonl")}, {"touch": "ready"}, {"sleep": 60}]})
    logs = tmp_path / "logs"
    proc = start_rooda(agent, "--ai-format", "claude", "--log-dir", logs, cwd=workspace)
    agent.wait_for("ready")
    _, err = interrupt(proc, signal.SIGINT)
    events = session_events(logs)
    [end] = ends(events)
    assert end["outcome"] == "interrupted" and end["cause"] is None
    usage = end["usage"]
    # four assistant messages (one of them in two events, counted once): 19524+19625+19739+19845 in
    assert usage["partial"] is True and usage["input_tokens"] == 78733 and usage["output_tokens"] == 4
    assert usage["cost_usd"] is None
    assert events[-1]["usage"]["input_tokens"] == 78733  # counted in the run's totals
    closing = [line for line in err.splitlines() if "Interrupted by SIGINT during iteration 1" in line][0]
    assert closing.endswith("· 78.7k tokens")  # the run's total
