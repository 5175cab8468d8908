"""The subscription window (SPEC 18): the readings Claude Code and Codex give of an
account's 5-hour and weekly windows are recorded and shown; a `reserve` holds the run
before an iteration once a window reaches it, `pace: even` holds a run that is ahead of
the window's elapsed part. The real CLIs' recorded streams are replayed with their
resets moved to "now + N" (the recordings' own lie in the past by now); waits go through
the injected clock, never slept through."""
import json
import os
import re
import time

import pytest

import rooda
from conftest import (STREAMS, OK_RESULT, await_event, ends, events_line, fake_cli, interrupt, progress_lines,
                      run_main, say, session_events, start_rooda, status, status_json, write_config)

HOUR, DAY = 3600, 86400
# The recording's own resets: the 5-hour window's and the weekly one's (agent-streams/README).
RECORDED_5H, RECORDED_7D = 1795784416, 1795963396


def shifted(tmp_path, sample, five_hour, seven_day):
    """A recorded stream whose 5-hour window resets `five_hour` seconds from now and its
    weekly one `seven_day` seconds from now; returns a fake-agent step that prints it."""
    now = time.time()
    text = open(os.path.join(STREAMS, sample)).read()
    text = text.replace(str(RECORDED_5H), "%.0f" % (now + five_hour))
    text = text.replace(str(RECORDED_7D), "%.0f" % (now + seven_day))
    text = text.replace("<promise>SUCCESS</promise>", "not done yet")  # (a run of several iterations)
    path = tmp_path / ("shifted-%d-%s" % (len(os.listdir(tmp_path)), sample))
    path.write_text(text)
    return {"actions": [{"out_file": str(path)}]}


def claude_windows(five_hour, seven_day, resets_5h, resets_7d):
    """A Claude run whose one rate_limit_event holds these utilisations (no SUCCESS)."""
    windows = {"five_hour": {"utilization": five_hour, "resetsAt": time.time() + resets_5h},
               "seven_day": {"utilization": seven_day, "resetsAt": time.time() + resets_7d}}
    event = {"type": "rate_limit_event", "rate_limit_info": {"status": "allowed", "unifiedWindows": windows}}
    return {"actions": [{"out": events_line(say("working"), event, dict(OK_RESULT, result="more to do"))}]}


def codex_run(started):
    """The recorded Codex run, its thread.started replaced by `started`."""
    lines = open(os.path.join(STREAMS, "codex.jsonl")).read().splitlines()
    return "\n".join(started if '"thread.started"' in line else line for line in lines) + "\n"


def build(capfd, agent, logs, *args):
    code, _, err = run_main(capfd, "build", "--ai-cmd", agent.cmd, "--ai-format", "claude", "--log-dir", logs,
                            "--no-verify-baseline", *args)
    assert "Traceback" not in err
    return code, err


def windows_of(events):
    return [(e["window"], e["utilization"], e["status"], e["threshold"]) for e in events if e["event"] == "window"]


def test_claudes_readings_are_window_events_and_status_shows_them(workspace, agent, capfd, tmp_path):
    # The real stream: response 1 at 5h 45% / 7d 72%, response 2 crosses the weekly
    # threshold (7d 81%, allowed_warning, 0.75).
    agent.script(shifted(tmp_path, "claude-stream-windows-warning-7d.jsonl", 3 * HOUR, 2 * DAY))
    logs = tmp_path / "logs"
    code, err = build(capfd, agent, logs, "-n", "1")
    assert code == 0 and agent.calls == 1, err
    events = session_events(logs)
    assert windows_of(events) == [("five_hour", 0.45, None, None), ("seven_day", 0.72, None, None),
                                  ("five_hour", 0.46, None, None), ("seven_day", 0.81, "allowed_warning", 0.75)]
    reset = [e["resets_at"] for e in events if e["event"] == "window"][-1]
    assert abs(rooda.parse_iso_time(reset) - time.time() - 2 * DAY) < 60
    names = [e["event"] for e in events]
    assert names.index("iteration_start") < names.index("window") < names.index("iteration_end")
    assert "windows     5h 46% · 7d 81%" in status(logs)[1]
    windows = status_json(logs)["windows"]
    assert windows["seven_day"]["utilization"] == 0.81 and windows["seven_day"]["threshold"] == 0.75
    assert windows["five_hour"]["status"] is None


def test_the_same_reading_seen_again_is_no_new_event(workspace, agent, capfd, tmp_path):
    # Both iterations read 5h 41% / 7d 63%, their resets unmoved: two events, not four.
    agent.script(shifted(tmp_path, "claude-stream-windows-allowed.jsonl", 3 * HOUR, 2 * DAY))
    logs = tmp_path / "logs"
    code, err = build(capfd, agent, logs, "-n", "2")
    assert code == 0 and agent.calls == 2, err
    assert windows_of(session_events(logs)) == [("five_hour", 0.41, None, None), ("seven_day", 0.63, None, None)]


def test_the_top_level_reading_counts_only_without_unified_windows(workspace, agent, capfd, tmp_path):
    agent.script(shifted(tmp_path, "claude-stream-windows-toplevel-only.jsonl", HOUR, DAY))
    logs = tmp_path / "logs"
    build(capfd, agent, logs, "-n", "1")
    assert windows_of(session_events(logs)) == [("seven_day", 0.81, "allowed_warning", 0.75)]
    # ... and a reading without a reset is shown but holds nothing: it cannot be waited out.
    assert "7d 81%" in status(logs)[1]


def test_a_reserve_reached_mid_run_holds_before_the_next_iteration(workspace, agent, capfd, tmp_path, waits):
    # Iteration 1 reads 7d 81%; the reserve of 25% is reached at 75%: iteration 2 waits
    # until the weekly reset (2h ahead), and the iteration under way was not cut.
    write_config(workspace, {"loop": {"reserve": {"seven_day": 0.25}}})
    agent.script(shifted(tmp_path, "claude-stream-windows-warning-7d.jsonl", HOUR, 2 * HOUR))
    logs = tmp_path / "logs"
    code, err = build(capfd, agent, logs, "-n", "2")
    assert code == 0 and agent.calls == 2, err  # (the injected wait returns at once)
    assert len(waits) == 1 and 2 * HOUR - 60 < waits[0] < 2 * HOUR + 120
    said = [line for line in progress_lines(err) if "Reserve reached" in line]
    assert len(said) == 1 and "Reserve reached: seven_day 81% used, 25% kept; waiting until " in said[0]
    assert said[0].endswith("Ctrl+C stops.") or "stops." in said[0]
    events = session_events(logs)
    limit = [e for e in events if e["event"] == "limit"]
    assert [(e["kind"], e["message"]) for e in limit] == [("reserve", "reserve reached: seven_day 81% used, 25% kept")]
    assert [e["outcome"] for e in ends(events)] == ["success", "success"]
    names = [e["event"] for e in events]
    assert names.index("limit") > names.index("iteration_end")  # between iterations 1 and 2


def test_a_reserve_with_on_limit_stop_exits_4_saying_the_window_and_its_reset(workspace, agent, capfd, tmp_path):
    write_config(workspace, {"loop": {"reserve": {"seven_day": 0.3}, "on_limit": "stop"}})
    agent.script(shifted(tmp_path, "claude-stream-windows-warning-7d.jsonl", HOUR, 2 * DAY + 3 * HOUR))
    logs = tmp_path / "logs"
    code, err = build(capfd, agent, logs, "-n", "3")
    assert code == 4 and agent.calls == 1, err
    last = progress_lines(err)[-1]
    assert "Stopped: reserve reached: seven_day 81% used, 30% kept; it resets at " in last
    # A moment, not a time from now: the log keeps the reason, and `status` read hours later
    # words the reset from its own now (issue 36, item 13).
    assert re.search(r"it resets at \w+ \d+ \d\d:\d\d \(on_limit is stop\) \(1 iteration completed", last), last
    end = session_events(logs)[-1]
    assert end["status"] == "limited" and end["exit_code"] == 4 and end["resumable"] is True
    assert "(in " not in end["reason"]
    _, said, _ = status(logs)
    assert re.search(r"ended: limited, exit code 4; the limit resets at \w+ \d+ \d\d:\d\d \(in 5[01]h\d\dm\d\ds\)",
                     said), said


def test_a_reading_remembered_from_the_last_run_holds_before_iteration_1(workspace, agent, capfd, tmp_path):
    logs = tmp_path / "logs"
    agent.script(shifted(tmp_path, "claude-stream-windows-warning-7d.jsonl", HOUR, DAY))
    build(capfd, agent, logs, "-n", "1")
    assert agent.calls == 1
    write_config(workspace, {"loop": {"reserve": {"seven_day": 0.3}, "on_limit": "stop"}})
    for name in os.listdir(logs):  # the next run is a new session in the same directory
        if name.startswith("session-"):
            os.rename(logs / name, logs / ("old-" + name))
    code, err = build(capfd, agent, logs, "-n", "3")
    assert code == 4 and agent.calls == 1, err  # not called again: judged before it spends
    assert "Subscription windows: 5h 46% · 7d 81% (the last readings here)" in err
    assert "Stopped: reserve reached: seven_day 81% used, 30% kept" in err and "0 iterations completed" in err
    assert windows_of(session_events(logs))[-1] == ("seven_day", 0.81, "allowed_warning", 0.75)


def test_a_remembered_reading_whose_reset_passed_holds_nothing(workspace, agent, capfd, tmp_path):
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "windows.json").write_text(json.dumps({"seven_day": [0.99, time.time() - 5, None, None],
                                                   "five_hour": "not a reading", "weekly": [0.5, 9e9, None, None]}))
    write_config(workspace, {"loop": {"reserve": {"seven_day": 0.3}, "on_limit": "stop"}})
    agent.script({"actions": [{"out": events_line(OK_RESULT)}]})
    code, err = build(capfd, agent, logs, "-n", "1")
    assert code == 0 and agent.calls == 1, err
    assert "Subscription windows" not in err


@pytest.mark.parametrize("resets_5h,waits_expected", [(3 * HOUR, 1), (HOUR, 0)], ids=["ahead", "behind"])
def test_pace_even_waits_only_when_a_window_is_ahead_of_its_elapsed_part(workspace, agent, capfd, tmp_path, waits,
                                                                        resets_5h, waits_expected):
    # 5h at 45% used. Reset in 3h: 40% of the window elapsed, ahead -> wait until 45% has
    # elapsed (15 minutes). Reset in 1h: 80% elapsed, behind -> no wait. The weekly 72%
    # with its reset 1 day ahead (86% elapsed) is behind either way.
    write_config(workspace, {"loop": {"pace": "even"}})
    agent.script(claude_windows(0.45, 0.72, resets_5h, DAY))
    logs = tmp_path / "logs"
    code, err = build(capfd, agent, logs, "-n", "2")
    assert code == 0 and agent.calls == 2, err
    assert len(waits) == waits_expected
    if waits_expected:
        assert 15 * 60 - 60 < waits[0] < 15 * 60 + 120
        said = [line for line in progress_lines(err) if "Ahead of pace" in line]
        assert "Ahead of pace: five_hour 45% used at 40% of the window; waiting until " in said[0]
        assert [e["kind"] for e in session_events(logs) if e["event"] == "limit"] == ["pace"]
    else:
        assert "Ahead of pace" not in err


def test_pace_keeps_the_reserve_out_of_the_allowance(workspace, agent, capfd, tmp_path, waits):
    # 7d 40% used with 50% of the week elapsed: on pace alone, but with 30% kept the
    # allowance is 35%: wait until 40% / 70% of the week has elapsed.
    write_config(workspace, {"loop": {"pace": "even", "reserve": {"seven_day": 0.3}, "limit_wait": DAY}})
    agent.script(claude_windows(0.1, 0.4, 4 * HOUR, 3.5 * DAY))
    code, err = build(capfd, agent, tmp_path / "logs", "-n", "2")
    expected = 7 * DAY * (0.4 / 0.7 - 0.5)
    assert len(waits) == 1 and expected - 60 < waits[0] < expected + 120, err
    assert "Ahead of pace: seven_day 40% used at 50% of the window, 30% kept" in err


def test_pace_with_on_limit_stop_names_the_pace_and_when_it_allows_more(workspace, agent, capfd, tmp_path):
    write_config(workspace, {"loop": {"pace": "even", "on_limit": "stop"}})
    agent.script(claude_windows(0.45, 0.1, 3 * HOUR, DAY))
    code, err = build(capfd, agent, tmp_path / "logs", "-n", "2")
    assert code == 4 and agent.calls == 1
    assert "Stopped: ahead of pace: five_hour 45% used at 40% of the window; the pace allows more at " in err


def test_codex_windows_are_read_from_its_rollout_file(workspace, agent, capfd, tmp_path, monkeypatch):
    # codex exec --json prints its thread id; the rollout file of that thread holds the
    # windows in its last token_count (41 -> 42% of 5h, 83 -> 84% of the week).
    lines = open(os.path.join(STREAMS, "codex-rollout-rate-limits.jsonl")).read().splitlines()
    thread = json.loads(lines[0])["thread_id"]
    home = tmp_path / "codex-home"
    folder = home / "sessions" / "2026" / "11" / "27"
    folder.mkdir(parents=True)
    soon = "%.0f" % (time.time() + 2 * HOUR)
    rollout = "\n".join(lines[1:]).replace('"resets_at":', '"resets_at":%s,"was":' % soon)
    (folder / ("rollout-2026-11-27T09-44-07-%s.jsonl" % thread)).write_text(rollout + "\n")
    (folder / "rollout-2026-11-27T09-44-07-other.jsonl").write_text(lines[1] + "\n")
    monkeypatch.setenv("CODEX_HOME", str(home))
    fake_cli(tmp_path, monkeypatch, "codex")
    agent.script({"actions": [{"out": codex_run(lines[0])}]})
    logs = tmp_path / "logs"
    code, _, err = run_main(capfd, "build", "--ai-cmd-alias", "codex", "--log-dir", logs, "-n", "1")
    assert code == 0, err
    readings = [(e["window"], e["utilization"]) for e in session_events(logs) if e["event"] == "window"]
    assert readings == [("five_hour", 0.42), ("seven_day", 0.84)]
    assert "5h 42% · 7d 84%" in status(logs)[1]


def test_codex_without_a_rollout_file_reads_nothing_and_says_nothing(workspace, agent, capfd, tmp_path,
                                                                      monkeypatch):
    monkeypatch.setenv("CODEX_HOME", str(tmp_path / "nowhere"))
    fake_cli(tmp_path, monkeypatch, "codex")
    agent.script({"actions": [{"out": codex_run('{"type":"thread.started","thread_id":"019a0000-abcd"}')}]})
    logs = tmp_path / "logs"
    code, _, err = run_main(capfd, "build", "--ai-cmd-alias", "codex", "--log-dir", logs, "-n", "1")
    assert code == 0 and "WARNING" not in err, err
    assert not [e for e in session_events(logs) if e["event"] == "window"]


@pytest.mark.parametrize("loop,words", [
    ({"reserve": {"weekly": 0.3}}, "loop.reserve: has an unknown key 'weekly'"),
    ({"reserve": {"seven_day": 1}}, "loop.reserve: seven_day must be below 1"),
    ({"reserve": {"seven_day": -0.1}}, "loop.reserve: seven_day must be >= 0"),
    ({"reserve": {"seven_day": "30%"}}, "loop.reserve: seven_day must be a number"),
    ({"reserve": 0.3}, "loop.reserve: must be a mapping like {seven_day: 0.3}"),
    ({"pace": "fast"}, "loop.pace: must be one of off, even, not 'fast'"),
])
def test_bad_reserve_and_pace_settings_are_refused_with_their_place(workspace, agent, capfd, loop, words):
    write_config(workspace, {"loop": loop})
    code, _, err = run_main(capfd, "build", "--ai-cmd", agent.cmd, "-n", "1")
    assert code == 2 and agent.calls == 0
    assert "rooda-config.json:" in err and words in err, err


def test_the_pace_flag_is_checked_by_its_rule(workspace, agent, capfd):
    code, _, err = run_main(capfd, "build", "--ai-cmd", agent.cmd, "--pace", "fast")
    assert code == 2 and agent.calls == 0 and "--pace must be off or even, not 'fast'" in err


def test_doctor_and_the_start_say_when_the_agent_cannot_report_windows(workspace, agent, capfd, tmp_path,
                                                                      monkeypatch):
    write_config(workspace, {"loop": {"reserve": {"seven_day": 0.3}}})
    fake_cli(tmp_path, monkeypatch, "gemini")
    code, out, err = run_main(capfd, "doctor", "build", "--ai-cmd-alias", "gemini")
    assert "warning  reserve and pace do nothing: gemini reports no subscription windows (claude and codex do)" \
        in out + err
    fake_cli(tmp_path, monkeypatch, "claude")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test")
    code, out, err = run_main(capfd, "doctor", "build", "--ai-cmd-alias", "claude")
    assert "reserve and pace do nothing: claude is logged in with ANTHROPIC_API_KEY, an API key" in out + err
    agent.script({"actions": [{"out": events_line(OK_RESULT)}]})
    code, _, err = run_main(capfd, "build", "--ai-cmd-alias", "claude", "-n", "1", "--no-verify-baseline")
    assert code == 0 and err.count("reserve and pace do nothing") == 1
    monkeypatch.delenv("ANTHROPIC_API_KEY")
    monkeypatch.setenv("CLAUDE_CODE_OAUTH_TOKEN", "subscriber")
    code, out, err = run_main(capfd, "doctor", "build", "--ai-cmd-alias", "claude")
    assert "ok       windows: seven_day 30% kept" in out + err and "do nothing" not in out + err


def test_the_status_line_shows_the_windows_while_the_agent_works():
    reader = type("Reading", (rooda.Reader,), {
        "events": 3, "tool_calls": 2, "activity": lambda self: ("thinking", "", time.monotonic()),
        "windows": [("five_hour", (0.46, None, None, None), 1.0), ("seven_day", (0.81, None, None, None), 2.0)]})()
    line, heartbeat = rooda.Activity("agent", reader=reader, label="2/5").lines()
    assert "iteration 2/5 · " in line and "5h 46% · 7d 81%" in line and "5h 46% · 7d 81%" in heartbeat
    # Codex's readings come after its iteration: the run's last ones show until then,
    # and a fresh reading of the stream wins over them.
    quiet = type("Quiet", (rooda.Reader,), {"events": 1, "activity": lambda self: ("thinking", "", time.monotonic())})()
    line, _ = rooda.Activity("agent", reader=quiet, label="3/5", windows={"seven_day": (0.84, None, None, None)}).lines()
    assert "7d 84%" in line
    line, _ = rooda.Activity("agent", reader=reader, label="3/5", windows={"five_hour": (0.1, None, None, None)}).lines()
    assert "5h 46% · 7d 81%" in line


def test_status_during_a_reserve_hold_names_the_iteration_it_holds_back(workspace, agent, tmp_path):
    # A subprocess held before iteration 2 (its reading remembered, the reserve reached
    # after iteration 1's own reading): `status` from another process says what it waits
    # for and which iteration starts then; Ctrl+C ends the wait at once.
    logs = tmp_path / "logs"
    write_config(workspace, {"loop": {"reserve": {"five_hour": 0.5}}})
    agent.script(claude_windows(0.6, 0.2, 2 * HOUR, DAY))
    proc = start_rooda(agent, "-n", "3", "--ai-format", "claude", "--log-dir", logs, "--no-verify-baseline",
                       cwd=workspace)
    await_event(logs, "limit", timeout=30)
    said = status(logs)[1]
    assert "waiting for a window to reset (reserve) until " in said and "iteration 2/3 starts then" in said
    assert "windows     5h 60% · 7d 20%" in said
    took, err = interrupt(proc)
    assert proc.returncode == -2 and agent.calls == 1  # (rooda dies of the signal, SPEC 5)
    assert "Interrupted by SIGINT while waiting for a window to reset (reserve) (1 iteration completed" in err


def test_a_reading_is_logged_at_the_moment_it_came(workspace, agent, capfd, tmp_path):
    # Two responses half a second apart: each window event has its own reading's time
    # (the report draws them over the night), though all are written as the iteration ends.
    first, second = (claude_windows(used, 0.2, HOUR, DAY)["actions"][0]["out"].splitlines()[1] for used in (0.3, 0.4))
    agent.script({"actions": [{"out": first + "\n"}, {"sleep": 0.5}, {"out": events_line(
        json.loads(second), dict(OK_RESULT, result="more"))}]})
    logs = tmp_path / "logs"
    build(capfd, agent, logs, "-n", "1")
    events = session_events(logs)
    moments = [rooda.parse_iso_time(e["time"]) for e in events if e["event"] == "window" and e["window"] == "five_hour"]
    assert len(moments) == 2 and moments[1] - moments[0] >= 0.45


def test_without_logs_nothing_is_remembered_and_no_file_here_is_read(workspace, agent, capfd, tmp_path):
    (workspace / "windows.json").write_text(json.dumps({"seven_day": [0.99, 9e9, None, None]}))
    write_config(workspace, {"loop": {"reserve": {"seven_day": 0.3}, "on_limit": "stop"}})
    agent.script({"actions": [{"out": events_line(OK_RESULT)}]})
    code, _, err = run_main(capfd, "build", "--ai-cmd", agent.cmd, "--ai-format", "claude", "--no-log", "-n", "1",
                            "--no-verify-baseline")
    assert code == 0 and agent.calls == 1 and "Subscription windows" not in err, err


def test_the_commit_gate_leaves_the_remembered_windows_out(workspace, agent, capfd, tmp_path):
    # The log directory inside the repository and not ignored: the session files and
    # windows.json (with a leftover of an interrupted write) stay out of every commit.
    from conftest import commits, git, make_repo
    make_repo(workspace)
    write_config(workspace, {"loop": {"git": {"commit": True}}})
    git(workspace, "add", "-A")
    git(workspace, "commit", "-q", "-m", "config")
    logs = workspace / "logs"
    logs.mkdir()
    (logs / "windows.json.4242.tmp").write_text("{")
    agent.script(dict(claude_windows(0.3, 0.2, HOUR, DAY), actions=[{"write_file": "work.txt", "text": "w"}] +
                      claude_windows(0.3, 0.2, HOUR, DAY)["actions"]))
    code, err = build(capfd, agent, logs, "-n", "1")
    assert code == 0 and (logs / "windows.json").exists() and "untracked" not in err, err
    assert commits(workspace)[0].startswith("build 1")
    assert git(workspace, "ls-files").split() == ["README", "rooda-config.json", "work.txt"]
