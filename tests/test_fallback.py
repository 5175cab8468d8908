"""When one agent runs out, another CLI takes over (SPEC 23, issue 45): fake `claude`,
`codex` and `gemini` on PATH replay the CLIs' recorded streams (tests/agent-streams);
which CLI made each call is recorded (FakeAgent.cli). Most tests go through the command
line; those that need hours to pass run in-process on an injected clock."""
import json
import os
import re
import signal
import subprocess
import sys
import time

import pytest

import rooda
from test_limits import usage_limit_resetting_in
from conftest import (STREAMS, ends, fake_cli, progress_lines, replay, run_main, run_rooda, session_events,
                      status, status_json, write_config)


@pytest.fixture
def clis(tmp_path, monkeypatch, workspace, agent):
    """The fake agent as `claude`, `codex` and `gemini` on PATH, each with a subscription's
    login (no API key): which one ran a call is agent.cli(n)."""
    for name in ("claude", "codex", "gemini"):
        fake_cli(tmp_path, monkeypatch, name)
    for key in ("ANTHROPIC_API_KEY", "OPENAI_API_KEY", "CODEX_API_KEY", "GEMINI_API_KEY"):
        monkeypatch.delenv(key, raising=False)
    return agent


def cli(workspace, agent, *args):
    """rooda.py as a subprocess in the project: (exit code, stdout, stderr)."""
    done = run_rooda(*args, cwd=str(workspace), env=agent.env)
    return done.returncode, done.stdout.decode(), done.stderr.decode()


def limit_in(seconds, workspace, name="limit"):
    """Claude meeting its 5-hour limit (claude-stream-usage-limit.jsonl), its reset `seconds`
    ahead."""
    return usage_limit_resetting_in(seconds, workspace, "%s-%d" % (name, seconds))


def windows_at(workspace, seven_day):
    """A Claude run (claude-stream-windows-warning-7d.jsonl) that did work, said no marker,
    and read its 7-day window at `seven_day`, resetting in a day."""
    lines = []
    with open(os.path.join(STREAMS, "claude-stream-windows-warning-7d.jsonl")) as stream:
        for line in stream:
            event = json.loads(line)
            info = event.get("rate_limit_info", {})
            for window in [info] + list(info.get("unifiedWindows", {}).values()):
                window["resetsAt"] = int(time.time() + 86400)
            if "seven_day" in info.get("unifiedWindows", {}):
                info["unifiedWindows"]["seven_day"]["utilization"] = info["utilization"] = seven_day
            if event.get("type") == "result":
                event["result"] = "did a step"
            lines.append(json.dumps(event).replace("<promise>SUCCESS</promise>", ""))
    path = workspace / "windows.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return {"actions": [{"out_file": str(path)}]}


def working(text="did a step"):
    """A Codex run that did work and said no marker: the iteration succeeds, the run goes on."""
    return {"actions": [{"out": json.dumps({"type": "item.completed", "item": {
        "id": "item_1", "type": "agent_message", "text": text}}) + "\n" + json.dumps(
        {"type": "turn.completed", "usage": {"input_tokens": 10, "output_tokens": 2}}) + "\n"}]}


def called(agent):
    return [agent.cli(n) for n in range(1, agent.calls + 1)]


def events_named(events, name):
    return [event for event in events if event["event"] == name]


@pytest.fixture
def clock(monkeypatch):
    """An injected clock: time.time() runs `offset` ahead of the real one; every wait the
    loop asks for passes at once and moves it on by that much (recorded in clock.waits),
    and each agent run takes clock.per_run seconds (20 minutes unless a test says)."""
    class Clock:
        offset, per_run = 0.0, 1200.0
        waits = []

    real_time, real_step = time.time, rooda._Run.run_agent_step

    def waited(self, seconds, ticker=None):
        Clock.waits.append(seconds)
        Clock.offset += max(seconds, 0)

    def step(run, attempt):
        try:
            real_step(run, attempt)
        finally:
            Clock.offset += Clock.per_run

    Clock.waits = []
    monkeypatch.setattr(time, "time", lambda: real_time() + Clock.offset)
    monkeypatch.setattr(rooda.SignalGuard, "wait", waited)
    monkeypatch.setattr(rooda._Run, "run_agent_step", step)
    return Clock


# --- the switch: a limit, and the same iteration runs again with the next agent ---------------

def test_a_limit_switches_to_the_next_agent_which_runs_the_same_iteration_again(clis, workspace, tmp_path):
    clis.script(limit_in(3600, workspace), replay("codex.jsonl"))
    write_config(workspace, {"loop": {"notify": "echo \"$ROODA_EVENT $ROODA_SWITCH_FROM $ROODA_SWITCH_TO\""
                                                " >> notified", "notify_on": ["switch", "session_end"]}})
    logs = tmp_path / "logs"
    code, _, err = cli(workspace, clis, "build", "-n", "1", "--ai-cmd-alias", "claude", "--fallback", "codex",
                       "--log-dir", logs)
    assert code == 0 and called(clis) == ["claude", "codex"], err
    lines = progress_lines(err)
    assert lines[1].startswith("Agent: claude -p ") and lines[1].endswith("(preset claude, --ai-cmd-alias);"
                                                                           " then codex"), lines
    assert "Iteration 1/1 completed in D (limited) · 29.3k tokens · $0.09" in lines
    switch = [line for line in lines if line.startswith("Switching to codex: ")]
    assert len(switch) == 1 and re.match(r"Switching to codex: claude is limited \(five_hour\) until \S+",
                                         switch[0]), lines
    assert lines.count("Iteration 1/1 starting...") == 2  # (the same iteration, not a use of the cap)
    events = session_events(logs)
    assert events[0]["agents"] == ["claude", "codex"]
    assert [e["agent"] for e in events_named(events, "iteration_start")] == ["claude", "codex"]
    assert [e["outcome"] for e in ends(events)] == ["limited", "completed"]
    [moved] = events_named(events, "switch")
    assert (moved["from"], moved["to"], moved["why"], moved["wait"], moved["kind"]) == (
        "claude", "codex", "is limited (five_hour)", "limit", "five_hour")
    assert 3600 <= rooda.parse_iso_time(moved["until"]) - time.time() <= 3630 + 5
    # The next prompt says which agent made the attempt before, when another runs it.
    assert "another agent CLI" not in clis.prompt(1)
    assert "The last attempt was made by another agent CLI (claude); its work is in the files." in clis.prompt(2)
    assert (workspace / "notified").read_text().splitlines() == ["switch claude codex", "session_end  "]


def test_status_names_the_agent_now_and_each_held_one_with_why_and_until(clis, workspace, tmp_path):
    clis.script(limit_in(3600, workspace), replay("codex.jsonl"))
    logs = tmp_path / "logs"
    code, _, err = cli(workspace, clis, "build", "-n", "1", "--ai-cmd-alias", "claude", "--fallback", "codex",
                       "--log-dir", logs)
    assert code == 0, err
    summary = status_json(logs)
    assert summary["agent"] == "codex"
    [held] = summary["held"]
    assert (held["agent"], held["why"], held["wait"]) == ("claude", "is limited (five_hour)", "limit")
    _, out, _ = status(logs)
    assert re.search(r"^agent +codex; held: claude is limited \(five_hour\) until \S+", out, re.M), out
    log = (logs / os.path.basename(summary["session"]).replace(".jsonl", ".log")).read_text()
    assert re.search(r"^Switching to codex: claude is limited \(five_hour\) until ", log, re.M)
    # The report: each attempt's agent, and the glance's counts by agent.
    done = run_rooda("report", "--log-dir", logs, "--json", cwd=str(workspace))
    [report] = [json.loads(line) for line in done.stdout.decode().splitlines()]
    assert [a["agent"] for a in report["attempts"]] == ["claude", "codex"]
    text = run_rooda("report", "--log-dir", logs, cwd=str(workspace), env={"COLUMNS": "120"}).stdout.decode()
    assert "claude 1, codex 1 attempts" in text, text
    assert re.search(r"limited .* claude · limit \(rate_limit\): You've hit", text) and re.search(r"completed .* codex", text), text
    page = run_rooda("report", "--log-dir", logs, "--html", "-", cwd=str(workspace)).stdout.decode()
    assert "<title>#1 claude limited, " in page and "<title>#1 codex completed, " in page
    assert "claude 1, codex 1 attempts" in page


# --- coming back: the preferred agent as soon as its hold ends -------------------------------

def test_the_preferred_agent_comes_back_as_soon_as_its_limit_resets(clis, workspace, tmp_path, capfd, clock):
    # Claude's limit resets 50 minutes from now; each attempt takes 20 (the injected clock):
    # claude's ends at 20, codex runs iterations 1 and 2, claude (first in the order) 3.
    clis.script(limit_in(3000, workspace), working(), working(), replay("claude.jsonl"))
    logs = tmp_path / "logs"
    code, _, err = run_main(capfd, "build", "-n", "5", "--ai-cmd-alias", "claude", "--fallback", "codex,gemini",
                            "--log-dir", logs)
    assert code == 0 and called(clis) == ["claude", "codex", "codex", "claude"], err
    assert clock.waits == []  # (no wait at all: another agent was free every time)
    lines = progress_lines(err)
    assert "Switching to claude: claude's hold has ended" in lines, lines
    events = session_events(logs)
    back = events_named(events, "switch")[-1]
    assert (back["from"], back["to"], back["why"], back["back"], back["until"]) == (
        "codex", "claude", "gives way: claude's hold has ended", True, None)
    assert [(e["iteration"], e["agent"]) for e in events_named(events, "iteration_start")] == [
        (1, "claude"), (1, "codex"), (2, "codex"), (3, "claude")]
    # Claude is told that codex made the attempt before (after a success too).
    assert "The last attempt was made by another agent CLI (codex)" in clis.prompt(4)
    assert "another agent CLI" not in clis.prompt(3)  # (codex after codex)


def test_the_order_is_kept_the_first_free_agent_takes_over(clis, workspace, tmp_path, capfd, clock):
    codex_limit = replay("codex-error-usage-limit-429.jsonl", 1)
    clis.script(limit_in(7200, workspace), codex_limit, replay("gemini.jsonl"))
    code, _, err = run_main(capfd, "build", "-n", "1", "--ai-cmd-alias", "claude", "--fallback", "codex,gemini",
                            "--log-dir", tmp_path / "logs")
    assert code == 0 and called(clis) == ["claude", "codex", "gemini"], err
    lines = progress_lines(err)
    assert [line.split(":")[0] for line in lines if line.startswith("Switching")] == [
        "Switching to codex", "Switching to gemini"]


# --- every agent held --------------------------------------------------------------------------

def test_every_agent_limited_waits_once_for_the_earliest_reset(clis, workspace, tmp_path, capfd, clock):
    write_config(workspace, {"ai_cmd_aliases": {"claude2": {"command": "gemini --yolo", "format": "claude"}}})
    clock.per_run = 0
    clis.script(limit_in(7200, workspace), limit_in(600, workspace, "second"), replay("claude.jsonl"))
    logs = tmp_path / "logs"
    code, _, err = run_main(capfd, "build", "-n", "1", "--ai-cmd-alias", "claude", "--fallback", "claude2",
                            "--log-dir", logs)
    assert code == 0 and called(clis) == ["claude", "gemini", "gemini"], err
    assert len(clock.waits) == 1 and 600 <= clock.waits[0] <= 630 + 5  # (the earliest, with its margin)
    lines = progress_lines(err)
    held = [line for line in lines if line.startswith("Every agent is held: ")]
    assert len(held) == 1 and "claude is limited (five_hour) until" in held[0] and \
        "claude2 is limited (five_hour) until" in held[0], lines
    events = session_events(logs)
    assert [e["to"] for e in events_named(events, "switch")] == ["claude2", None]
    assert events_named(events, "limit")[-1]["wait_seconds"] >= 600


def test_on_limit_stop_still_switches_and_stops_with_4_when_every_agent_is_limited(clis, workspace, tmp_path):
    clis.script(limit_in(3600, workspace), replay("codex-error-usage-limit-429.jsonl", 1))
    write_config(workspace, {"loop": {"on_limit": "stop"}})
    code, _, err = cli(workspace, clis, "build", "--ai-cmd-alias", "claude", "--fallback", "codex",
                       "--log-dir", tmp_path / "logs")
    assert code == 4 and called(clis) == ["claude", "codex"], err
    assert any(line.startswith("Switching to codex: claude is limited") for line in progress_lines(err))
    assert "on_limit is stop" in err


def test_an_auth_error_holds_its_agent_for_the_rest_of_the_session(clis, workspace, tmp_path, capfd, clock):
    clis.script(replay("claude-error-auth-401.jsonl", 1), working(), working(), replay("codex.jsonl"))
    logs = tmp_path / "logs"
    code, _, err = run_main(capfd, "build", "-n", "5", "--ai-cmd-alias", "claude", "--fallback", "codex",
                            "--log-dir", logs)
    # Hours pass (the clock), and claude is never tried again: only the person can lift it.
    assert code == 0 and called(clis) == ["claude", "codex", "codex", "codex"], err
    lines = progress_lines(err)
    assert any(re.match(r"Iteration 1/5 completed in D \(auth: claude is held for the session\)", line)
               for line in lines), lines
    assert "Switching to codex: claude cannot authenticate (for the session)" in lines
    assert "consecutive" not in err  # (no failure)
    [moved] = events_named(session_events(logs), "switch")
    assert (moved["why"], moved["until"], moved["wait"]) == ("cannot authenticate", None, None)


def test_every_agent_held_for_the_session_exits_2_naming_each_and_how_to_go_on(clis, workspace, tmp_path):
    clis.script(replay("claude-error-auth-401.jsonl", 1), replay("codex-error-unauthorized-401.jsonl", 1))
    logs = tmp_path / "logs"
    code, _, err = cli(workspace, clis, "build", "--ai-cmd-alias", "claude", "--fallback", "codex",
                       "--log-dir", logs)
    assert code == 2 and called(clis) == ["claude", "codex"], err
    [closing] = [line for line in progress_lines(err) if line.startswith("ERROR: ")]
    assert closing.startswith("ERROR: every agent is held: claude cannot authenticate: ")
    assert "; claude needs ANTHROPIC_API_KEY" in closing and "; codex cannot authenticate: unexpected status" \
        " 401 Unauthorized" in closing and "; codex needs OPENAI_API_KEY" in closing, closing
    assert re.search(r"; then: cd \S+ && \S+ \S+rooda.py resume session-\S+ --log-dir \S+$", closing), closing
    assert session_events(logs)[-1]["status"] == "error"


def test_a_login_and_a_limit_are_waited_as_a_limit_exit_4_with_on_limit_stop(clis, workspace, tmp_path):
    clis.script(replay("claude-error-auth-401.jsonl", 1), replay("codex-error-usage-limit-429.jsonl", 1))
    write_config(workspace, {"loop": {"on_limit": "stop"}})
    code, _, err = cli(workspace, clis, "build", "--ai-cmd-alias", "claude", "--fallback", "codex",
                       "--log-dir", tmp_path / "logs")
    assert code == 4 and called(clis) == ["claude", "codex"], err


def test_an_outage_holds_its_agent_only_once_rooda_retried_it(clis, workspace, tmp_path, capfd, clock):
    outage = replay("claude-error-overloaded-529.jsonl", 1)
    clis.script(outage, outage, replay("codex.jsonl"))
    logs = tmp_path / "logs"
    code, _, err = run_main(capfd, "build", "--ai-cmd-alias", "claude", "--fallback", "codex", "--log-dir", logs)
    assert code == 0 and called(clis) == ["claude", "claude", "codex"], err
    assert len(clock.waits) == 1  # (the first retry, of claude itself)
    assert "Switching to codex: claude is unavailable until" in err


def test_a_cli_that_cannot_start_is_a_failure_of_that_agent_not_a_hold(clis, workspace, tmp_path):
    clis.script({"actions": [{"err": "exec: claude-real: not found\n"}], "exit": 127}, replay("claude.jsonl"))
    code, _, err = cli(workspace, clis, "build", "--ai-cmd-alias", "claude", "--fallback", "codex",
                       "--log-dir", tmp_path / "logs")
    assert code == 0 and called(clis) == ["claude", "claude"], err
    assert "Switching" not in err and "consecutive: 1/3" in err


def test_a_reserve_on_the_agents_own_windows_hands_over_at_once(clis, workspace, tmp_path):
    # Claude's 7-day window is at 81% (claude-stream-windows-warning-7d): with 20% kept, the
    # next iteration goes to codex at once -- codex's windows are its own, none read.
    clis.script(windows_at(workspace, 0.81), working())
    write_config(workspace, {"loop": {"reserve": {"seven_day": 0.2}}})
    logs = tmp_path / "logs"
    code, _, err = cli(workspace, clis, "build", "-n", "2", "--ai-cmd-alias", "claude", "--fallback", "codex",
                       "--log-dir", logs)
    assert code == 0 and called(clis) == ["claude", "codex"], err
    assert any(line.startswith("Switching to codex: claude keeps its reserve (seven_day ")
               for line in progress_lines(err)), err
    windows = events_named(session_events(logs), "window")
    assert windows and {event["agent"] for event in windows} == {"claude"}


# --- resume keeps the holds ----------------------------------------------------------------

def test_resume_goes_on_with_the_next_agent_while_the_first_is_still_held(clis, workspace, tmp_path):
    clis.script(limit_in(3600, workspace), {"actions": [{"touch": "codex-runs"}, {"wait_for": "never"}]},
                working(), working())
    logs = tmp_path / "logs"
    env = dict(os.environ, **clis.env)
    proc = subprocess.Popen([sys.executable, rooda.__file__, "build", "-n", "3", "--ai-cmd-alias", "claude",
                             "--fallback", "codex", "--log-dir", str(logs)], cwd=str(workspace), env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        clis.wait_for("codex-runs")
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=20)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode in (130, -signal.SIGINT), err
    code, _, err = cli(workspace, clis, "resume", "--log-dir", logs)
    assert code == 0 and called(clis) == ["claude", "codex", "codex", "codex", "codex"], err
    assert "Switching to codex: claude is limited (five_hour) until" in err
    events = session_events(logs)
    assert [e["agent"] for e in events_named(events, "iteration_start")][-3:] == ["codex"] * 3


# --- bad input: one line, exit 2, before any agent runs ----------------------------------------

@pytest.mark.parametrize("args, config, said", [
    (["--fallback", "codx"], None, "--fallback codx names no agent: codx is neither a preset nor an"
                                   " ai_cmd_aliases name; did you mean 'codex'?"),
    (["--fallback", "codex,"], None, "--fallback has an empty name in 'codex,'"),
    (["--fallback", "claude"], None, "--fallback claude runs claude twice (the run's own agent): rooda"
                                     " switches between providers' CLIs, never between accounts of one"),
    (["--fallback", "codex,codex"], None, "runs codex twice"),
    ([], {"loop": {"fallback": "codex"}}, "rooda-config.json:1:11: loop.fallback: must be a list of agents'"
                                          " names"),
    ([], {"loop": {"fallback": ["codex", ""]}}, "loop.fallback: must be a list of agents' names"),
    ([], {"procedures": {"build": {"fallback": ["gemini"]}}, "loop": {"verdict": "schema"}},
     "needs an agent CLI with a schema flag"),
])
def test_a_bad_fallback_is_one_line_and_exit_2_before_any_agent_runs(clis, workspace, args, config, said):
    if config:
        (workspace / "rooda-config.json").write_text(json.dumps(config))
    code, _, err = cli(workspace, clis, "build", "--ai-cmd-alias", "claude", *args)
    assert code == 2 and clis.calls == 0, err
    assert said in err, err
    assert "Traceback" not in err


def test_a_fallback_whose_program_is_missing_is_refused_before_any_agent_runs(clis, workspace, tmp_path):
    os.unlink(str(tmp_path / "cli-bin" / "gemini"))
    code, _, err = cli(workspace, clis, "build", "--ai-cmd-alias", "claude", "--fallback", "codex,gemini")
    assert code == 2 and clis.calls == 0 and "agent program 'gemini' not found on PATH" in err, err


def test_doctor_checks_every_agent_in_the_list(clis, workspace, tmp_path):
    os.unlink(str(tmp_path / "cli-bin" / "gemini"))
    code, out, err = cli(workspace, clis, "doctor", "--fallback", "codex,gemini")
    text = out + err
    assert code != 0 and "agent program 'gemini' not found on PATH" in text, text
    assert re.search(r"codex exec", text) and re.search(r"claude (-p|--print)", text), text


def test_a_login_and_an_outage_held_are_waited_as_a_limit(clis, workspace, tmp_path, capfd, clock):
    # (SPEC 23: holds of mixed kinds are waited as a limit -- on_limit: stop stops then, exit 4)
    clis.script(replay("claude-error-auth-401.jsonl", 1), replay("codex-error-unavailable-503.jsonl", 1),
                replay("codex-error-unavailable-503.jsonl", 1))
    write_config(workspace, {"loop": {"on_limit": "stop"}})
    code, _, err = run_main(capfd, "build", "--ai-cmd-alias", "claude", "--fallback", "codex",
                            "--log-dir", tmp_path / "logs")
    assert code == 4 and called(clis) == ["claude", "codex", "codex"], err
    assert "Every agent is held: claude cannot authenticate (for the session), codex is unavailable until" in err
