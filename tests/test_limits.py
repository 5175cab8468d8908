"""Usage limits and provider errors (SPEC 13): a limit is waited out and the iteration
run again; bad credentials stop the run at once. The real error samples are replayed;
waits are measured through an injected wait, never slept through."""
import calendar
import datetime
import json
import os
import signal
import time

import pytest

import rooda
from conftest import (OK_RESULT, STREAMS, await_event, ends, events_line, interrupt, progress_lines, replay, run_main,
                      say, session_events, start_rooda, status, wait_until, write_config)


# --- the error samples: limits stop with exit 4 under on_limit: stop ---------------------

LIMIT_SAMPLES = [
    ("claude-error-rate-limit-429.jsonl", "claude", 1, "rate limit", None),
    ("claude-stream-usage-limit.jsonl", "claude", 1, "five_hour", "2026-11-23T21:04:05.000Z"),
    ("codex-error-rate-limit-429.jsonl", "codex", 1, "rate limit", None),
    ("codex-error-response-failed.jsonl", "codex", 1, "rate limit", "in 1.5s"),
    ("codex-error-usage-limit-429.jsonl", "codex", 1, "usage limit", "7:32 PM"),
    ("gemini-error-daily-quota-429.jsonl", "gemini", 173, "daily quota", None),
]


@pytest.mark.parametrize("sample,agent_format,exit_code,kind,resets", LIMIT_SAMPLES,
                         ids=[s[0] for s in LIMIT_SAMPLES])
def test_each_clis_limit_is_limited_and_on_limit_stop_exits_4(workspace, agent, capfd, tmp_path, sample,
                                                             agent_format, exit_code, kind, resets):
    write_config(workspace, {"loop": {"on_limit": "stop"}})
    agent.script(replay(sample, exit_code))
    logs = tmp_path / "logs"
    before = time.time()
    code, _, err = run_main(capfd, "build", "-n", "3", "--ai-cmd", agent.cmd, "--ai-format", agent_format,
                            "--log-dir", logs)
    assert code == 4 and agent.calls == 1, err
    events = session_events(logs)
    end = ends(events)[0]
    limit = [e for e in events if e["event"] == "limit"][0]
    assert end["outcome"] == "limited" and limit["kind"] == kind
    assert events[-1]["status"] == "limited" and events[-1]["exit_code"] == 4
    assert limit["wait_seconds"] == 0  # it stops instead of waiting
    if resets is None:
        assert limit["resets_at"] is None
        assert "the provider did not say when it resets" in err
    elif resets == "in 1.5s":
        assert 0 <= calendar.timegm(datetime.datetime.strptime(
            limit["resets_at"], "%Y-%m-%dT%H:%M:%S.%fZ").timetuple()) - before <= 3
    elif resets == "7:32 PM":
        moment = datetime.datetime.strptime(limit["resets_at"], "%Y-%m-%dT%H:%M:%S.000Z")
        local = time.localtime(calendar.timegm(moment.timetuple()))
        assert (local.tm_hour, local.tm_min) == (19, 32)
        assert 0 <= calendar.timegm(moment.timetuple()) - before <= 86400 + 300
    else:
        assert limit["resets_at"] == resets
    last = progress_lines(err)[-1]
    assert last.startswith("ERROR: Stopped at a usage limit (%s): " % kind) and "on_limit is stop" in last


AUTH_SAMPLES = [
    ("claude-error-auth-401.jsonl", "claude", 1, "Invalid API key · Fix external API key"),
    ("codex-error-auth-401.jsonl", "codex", 1, "unexpected status 401 Unauthorized"),
    ("gemini-error-api-key-400.jsonl", "gemini", 144, "API key not valid"),
    ("copilot-error-auth-401.jsonl", "copilot", 1, "Authentication failed with provider"),
    ("opencode-error-auth-401.jsonl", "opencode", 1, "Incorrect API key provided"),
    ("qwen-error-auth-401.jsonl", "claude", 0, "[API Error: 401 Incorrect API key provided"),
]


@pytest.mark.parametrize("sample,agent_format,exit_code,words", AUTH_SAMPLES, ids=[s[0] for s in AUTH_SAMPLES])
def test_bad_credentials_stop_after_one_iteration_with_exit_2(workspace, agent, capfd, sample, agent_format,
                                                             exit_code, words):
    agent.script(replay(sample, exit_code))
    code, _, err = run_main(capfd, "build", "-n", "5", "--ai-cmd", agent.cmd, "--ai-format", agent_format)
    assert code == 2 and agent.calls == 1, err
    last = progress_lines(err)[-1]
    assert last.startswith("ERROR: the agent cannot authenticate: ") and words in last
    assert ".;" not in last  # the CLI's closing full stop is not doubled by rooda's own words


def test_the_auth_message_names_what_the_preset_needs(workspace, agent, capfd):
    write_config(workspace, {"ai_cmd_aliases": {"claude": {"command": agent.cmd, "format": "claude"}}})
    agent.script(replay("claude-error-auth-401.jsonl", 1))
    code, _, err = run_main(capfd, "build", "--ai-cmd-alias", "claude")
    assert code == 2 and "claude needs ANTHROPIC_API_KEY" in err


def test_gemini_exit_41_is_an_authentication_failure(workspace, agent, capfd):
    write_config(workspace, {"ai_cmd_aliases": {"gemini": {"command": agent.cmd}}})
    agent.script({"actions": [{"err": "Invalid auth method selected.\n"}], "exit": 41})
    code, _, err = run_main(capfd, "build", "--ai-cmd-alias", "gemini")
    assert code == 2 and agent.calls == 1 and "Invalid auth method selected." in err


# --- waiting: the reset time, the backoff, the bounds ---------------------------------------

def usage_limit_resetting_in(seconds, workspace, name="limit"):
    """claude-stream-usage-limit.jsonl with its reset moved `seconds` ahead (in a file of
    the workspace called `name`)."""
    lines = []
    with open(os.path.join(STREAMS, "claude-stream-usage-limit.jsonl")) as stream:
        for line in stream:
            event = json.loads(line)
            if event.get("type") == "rate_limit_event" and event["rate_limit_info"]["status"] == "rejected":
                event["rate_limit_info"]["resetsAt"] = int(time.time() + seconds)
            lines.append(json.dumps(event))
    path = workspace / ("%s.jsonl" % name)
    path.write_text("\n".join(lines) + "\n")
    return {"actions": [{"out_file": str(path)}], "exit": 1}


def test_a_known_reset_is_waited_out_and_the_same_iteration_runs_again(workspace, agent, capfd, tmp_path,
                                                                      waits):
    agent.script(usage_limit_resetting_in(3600, workspace), replay("claude.jsonl", 0))
    logs = tmp_path / "logs"
    code, _, err = run_main(capfd, "build", "-n", "1", "--ai-cmd", agent.cmd, "--ai-format", "claude",
                            "--log-dir", logs)
    assert code == 0 and agent.calls == 2, err  # a cap of 1, yet two runs: the limited one was free
    assert len(waits) == 1 and 3600 + 30 - 5 <= waits[0] <= 3600 + 30
    lines = progress_lines(err)
    assert "Iteration 1/1 completed in D (limited) · 29.3k tokens · $0.09" in lines
    assert any(line.startswith("Usage limit reached (five_hour): You've hit your session limit · resets")
               and line.endswith(". kill -TERM %d stops." % os.getpid()) for line in lines)  # (no terminal)
    assert lines.count("Iteration 1/1 starting...") == 2
    assert lines[-1].startswith("Completed: agent signalled SUCCESS (1 iteration, total: D)")
    events = session_events(logs)
    assert [e["outcome"] for e in ends(events)] == ["limited", "completed"]
    limit = [e for e in events if e["event"] == "limit"][0]
    assert limit["kind"] == "five_hour" and 3600 <= limit["wait_seconds"] <= 3630


def test_an_unknown_reset_backs_off_1_2_4_minutes(workspace, agent, capfd, waits):
    agent.script(*[replay("claude-error-rate-limit-429.jsonl", 1)] * 3 + [replay("claude.jsonl", 0)])
    code, _, err = run_main(capfd, "build", "--ai-cmd", agent.cmd, "--ai-format", "claude")
    assert code == 0 and agent.calls == 4
    assert waits == [60, 120, 240]
    assert "consecutive" not in err  # never a failure


def test_the_backoff_is_capped_at_30_minutes():
    assert [rooda.limit_wait_seconds(None, n, 0) for n in (1, 5, 6, 7, 40)] == [60, 960, 1800, 1800, 1800]


def test_a_reset_beyond_limit_wait_stops_at_once_with_exit_4(workspace, agent, capfd, waits):
    write_config(workspace, {"loop": {"limit_wait": 600}})
    agent.script(usage_limit_resetting_in(3600, workspace))
    code, _, err = run_main(capfd, "build", "--ai-cmd", agent.cmd, "--ai-format", "claude")
    assert code == 4 and waits == [] and agent.calls == 1
    assert "it resets at" in progress_lines(err)[-1] and "beyond limit_wait (10m)" in err


def test_a_reset_beyond_max_time_stops_at_once(workspace, agent, capfd, waits):
    agent.script(usage_limit_resetting_in(3600, workspace))
    code, _, err = run_main(capfd, "build", "--ai-cmd", agent.cmd, "--ai-format", "claude", "--max-time", "1800")
    assert code == 4 and waits == [] and "beyond the time budget (30m)" in err


def test_limit_wait_counts_from_the_first_limited_attempt(workspace, agent, capfd, waits):
    write_config(workspace, {"loop": {"limit_wait": 200}})
    agent.script(*[replay("claude-error-rate-limit-429.jsonl", 1)] * 4)
    code, _, err = run_main(capfd, "build", "--ai-cmd", agent.cmd, "--ai-format", "claude")
    assert code == 4 and waits == [60, 120]  # the 240 s step would pass 200 s


def test_ctrl_c_during_a_limit_wait_stops_at_once_with_130(workspace, agent):
    agent.script(usage_limit_resetting_in(3600, workspace))
    proc = start_rooda(agent, "--ai-format", "claude", cwd=workspace)
    await_event(os.environ["ROODA_LOOP_LOG_DIR"], "limit", timeout=20)  # written as the wait starts
    took, err = interrupt(proc, signal.SIGINT)
    assert proc.returncode == -signal.SIGINT and took < 1.0, err
    assert "Interrupted by SIGINT while waiting for a usage limit to reset" in err


# --- text agents: only the last 2 KB of a failed iteration --------------------------------

def test_a_text_agents_limit_message_is_read_when_it_failed(workspace, agent, capfd, waits):
    write_config(workspace, {"loop": {"limit_wait": 2 * 86400}})  # 9:03pm may be 23 hours away
    agent.script({"actions": [{"out": "You've hit your session limit · resets 9:03pm (UTC)\n"}], "exit": 1},
                 {"actions": [{"out": "<promise>SUCCESS</promise>\n"}]})
    code, _, err = run_main(capfd, "build", "--ai-cmd", agent.cmd)
    assert code == 0 and agent.calls == 2, err
    assert len(waits) == 1 and 30 <= waits[0] <= 86400 + 30
    assert "Usage limit reached (five_hour): You've hit your session limit" in err


def test_a_limit_message_early_in_the_output_changes_nothing(workspace, agent, capfd, waits):
    quoted = "You've hit your session limit · resets 9:03pm (UTC)\n" + "ordinary output\n" * 200
    agent.script({"actions": [{"out": quoted}], "exit": 1}, {})
    code, _, err = run_main(capfd, "build", "-n", "2", "--ai-cmd", agent.cmd)
    assert code == 0 and waits == []
    assert "Iteration 1/2 completed in D (failure, consecutive: 1/3)" in progress_lines(err)


def test_a_limit_message_in_a_successful_iteration_changes_nothing(workspace, agent, capfd, waits):
    agent.script({"actions": [{"out": "the docs say: You've hit your usage limit · resets 9pm\n"}]})
    code, _, err = run_main(capfd, "build", "-n", "1", "--ai-cmd", agent.cmd)
    assert code == 0 and waits == [] and "(success)" in err


# --- reading the reset time (the clock injected) -------------------------------------------

def at(text):
    return calendar.timegm(time.strptime(text, "%Y-%m-%d %H:%M"))


@pytest.mark.parametrize("message,now,expected", [
    ("You've hit your session limit · resets 9:03pm (UTC)", "2026-11-24 20:00", "2026-11-24 21:03"),
    ("You've hit your session limit · resets 9:03pm (UTC)", "2026-11-24 21:05", "2026-11-24 21:03"),
    ("You've hit your session limit · resets 9:03pm (UTC)", "2026-11-24 21:10", "2026-11-25 21:03"),
    ("You've hit your weekly limit · resets Nov 26, 7:04pm (UTC)", "2026-11-23 10:00", "2026-11-26 19:04"),
    ("resets 12:30am (UTC)", "2026-11-24 20:00", "2026-11-25 00:30"),
    ("resets Jan 2, 1:00am (UTC)", "2026-12-30 10:00", "2027-01-02 01:00"),
])
def test_reset_times_in_the_zone_they_name(message, now, expected):
    assert rooda.parse_reset_time(message, at(now)) == at(expected)


def test_a_reset_time_in_a_named_zone():
    pytest.importorskip("zoneinfo")
    try:
        import zoneinfo
        zoneinfo.ZoneInfo("America/New_York")
    except Exception:
        pytest.skip("no time zone database")
    message = "You've hit your weekly limit · resets Nov 26, 7:04pm (America/New_York)"
    assert rooda.parse_reset_time(message, at("2026-11-23 10:00")) == at("2026-11-27 00:04")


@pytest.fixture
def local_zone(monkeypatch):
    """Run with TZ set to a zone (the clock's local time), restored afterwards."""
    def use(name):
        if not os.path.exists(os.path.join("/usr/share/zoneinfo", name)):
            pytest.skip("no time zone database")
        monkeypatch.setenv("TZ", name)
        time.tzset()
    yield use
    monkeypatch.undo()
    time.tzset()


def test_codex_names_a_reset_on_another_day_with_the_year(local_zone):
    """codex: `try again at Nov 27th, 2026 12:16 PM.` -- local time (defect 10)."""
    local_zone("UTC")
    message = "You've hit your usage limit. Upgrade to Pro or try again at Nov 27th, 2026 12:16 PM."
    assert rooda.parse_reset_time(message, at("2026-11-26 09:00")) == at("2026-11-27 12:16")


def test_a_reset_in_the_hour_that_repeats_when_the_clocks_go_back(local_zone):
    """New York, 2026-11-01: 1:00-2:00 happens twice. At 1:40 EDT, `1:30 AM` is 1:30 EST,
    50 minutes ahead -- not tomorrow (defect 11)."""
    local_zone("America/New_York")
    now = at("2026-11-01 05:40")  # 01:40 EDT
    assert rooda.parse_reset_time("You've hit your limit · resets 1:30am", now) == now + 50 * 60


def test_the_wait_is_the_reset_plus_30_seconds_or_the_margin_alone():
    assert rooda.limit_wait_seconds(1000.0, 1, 400.0) == 630
    assert rooda.limit_wait_seconds(300.0, 1, 400.0) == 30  # the printed minute has begun


def test_a_limited_iteration_that_spent_nothing_shows_no_usage(workspace, agent, capfd, waits):
    agent.script(replay("claude-error-rate-limit-429.jsonl", 1), replay("claude.jsonl", 0))
    code, _, err = run_main(capfd, "build", "--ai-cmd", agent.cmd, "--ai-format", "claude")
    assert "Iteration 1/10 completed in D (limited)" in progress_lines(err)


def test_status_says_a_run_is_waiting_for_a_limit(workspace, agent, tmp_path):
    logs = tmp_path / "logs"
    agent.script(usage_limit_resetting_in(3600, workspace))
    proc = start_rooda(agent, "--ai-format", "claude", "--log-dir", logs, cwd=workspace)

    def waiting():
        code, out, _ = status(logs, "--json")
        summary = json.loads(out or "{}") if code == 0 else {}
        return summary if summary.get("waiting_until") else None
    try:
        summary = wait_until(waiting, timeout=20, interval=0.1)
        assert summary, "status never said the run was waiting"
        assert summary["state"] == "running" and summary["last_event"] == "limit"
        waiting_until = calendar.timegm(time.strptime(summary["waiting_until"][:19], "%Y-%m-%dT%H:%M:%S"))
        assert 3500 < waiting_until - time.time() < 3700
        assert "waiting for a usage limit to reset until" in status(logs)[1]
    finally:
        interrupt(proc, signal.SIGINT)


# --- moved from the review round's edge cases: each went wrong once ---------------------

def test_a_limit_recovered_from_within_the_iteration_is_not_limited(workspace, agent, capfd):
    rejected = {"type": "rate_limit_event", "rate_limit_info": {"status": "rejected", "resetsAt": 1,
                                                                 "rateLimitType": "five_hour"}}
    allowed = {"type": "rate_limit_event", "rate_limit_info": {"status": "allowed"}}
    agent.script({"actions": [{"out": events_line(rejected, allowed, say("work done"), OK_RESULT)}]})
    code, _, err = run_main(capfd, "build", "-n", "1", "--ai-cmd", agent.cmd, "--ai-format", "claude")
    assert code == 0 and "(success)" in err and "limited" not in err
    agent.script({"actions": [{"out": events_line(rejected, allowed, say("<promise>SUCCESS</promise>"),
                                                  OK_RESULT)}]})
    code, _, err = run_main(capfd, "build", "-n", "1", "--ai-cmd", agent.cmd, "--ai-format", "claude",
                            "--verify", "exit 1")
    assert "(rejected, consecutive: 1/3)" in err  # the verifier still has its say


def test_a_401_or_429_in_a_text_agents_test_output_is_an_ordinary_failure(workspace, agent, capfd):
    agent.script({"actions": [{"out": "FAILED tests/test_api.py::test_login - assert 401 == 200\n"
                                      "E   Unauthorized\n"}], "exit": 1},
                 {"actions": [{"out": "FAILED test_rate - got 429 Too Many Requests, rate limit exceeded\n"}],
                  "exit": 1}, {})
    code, _, err = run_main(capfd, "build", "-n", "3", "--ai-cmd", agent.cmd)
    assert code == 0 and agent.calls == 3, err
    lines = progress_lines(err)
    assert "Iteration 1/3 completed in D (failure, consecutive: 1/3)" in lines
    assert "Iteration 2/3 completed in D (failure, consecutive: 2/3)" in lines
