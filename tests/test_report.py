"""The morning report (SPEC 19): `report` reads the sessions a night left -- made here by
the fake agent for real: a verify failure, an agent FAILURE with its explanation, a
commit, a usage-limit wait and an interrupted session -- and tells them as text, JSON
and one self-contained HTML page; every figure is checked against the .jsonl."""
import html.parser
import json
import os
import shutil
import struct
import subprocess
import zlib

import pytest

import rooda
from conftest import (OK_RESULT, events_line, interrupt, make_repo, replay, run_main, run_rooda, say,
                      session_events, start_rooda, write_config)

EXPLANATION = "the <b>payments</b> API key is missing & I cannot test <script>alert(1)</script>"


def night(workspace, agent, tmp_path, capfd, waits):
    """Two sessions in one log directory: a run of five attempts (a commit, a verify
    failure, a limit waited out, an agent FAILURE, a commit), then one interrupted."""
    logs = tmp_path / "logs"
    make_repo(workspace)
    write_config(workspace, {"loop": {"verify": "test ! -e broken", "git": {"commit": True},
                                      "verify_baseline": False}})
    worked = dict(OK_RESULT, total_cost_usd=0.25)
    agent.script(
        {"actions": [{"write_file": "a.txt", "text": "a"}, {"out": events_line(say("Add a"), worked)}]},
        {"actions": [{"write_file": "broken", "text": "x"}, {"out": events_line(say("Break it"), OK_RESULT)}]},
        replay("claude-stream-usage-limit.jsonl", 1),
        {"actions": [{"remove": "broken"}, {"out": events_line(
            say("<promise>FAILURE</promise> " + EXPLANATION), dict(OK_RESULT, total_cost_usd=0.05))}]},
        {"actions": [{"write_file": "b.txt", "text": "b"}, {"out": events_line(say("Add b"), worked)}]},
        {"actions": [{"touch": "started"}, {"wait_for": "never"}]})
    code, _, err = run_main(capfd, "build", "-n", "4", "--ai-cmd", agent.cmd, "--ai-format", "claude",
                            "--log-dir", logs)
    assert code == 0 and agent.calls == 5, err
    proc = start_rooda(agent, "-n", "1", "--ai-format", "claude", "--log-dir", logs, cwd=workspace)
    agent.wait_for("started", timeout=30)
    interrupt(proc)
    return logs


def report(logs, *args, cwd=None):
    done = run_rooda("report", "--log-dir", logs, *args, cwd=cwd)
    assert "Traceback" not in done.stderr.decode(), done.stderr.decode()
    return done


def events_of(logs):
    """Each session's events, oldest session first."""
    paths = [p for p in os.listdir(logs) if p.endswith(".jsonl") and not p.endswith("-agent.jsonl")]
    sessions = [[json.loads(line) for line in open(os.path.join(logs, p))] for p in paths]
    return sorted(sessions, key=lambda events: events[0]["time"])  # (two may start in one second)


def test_the_json_report_has_every_attempt_as_the_jsonl_tells_it(workspace, agent, tmp_path, capfd, waits):
    logs = night(workspace, agent, tmp_path, capfd, waits)
    done = report(logs, "--all", "--json", cwd=workspace)
    assert done.returncode == 0
    first, second = [json.loads(line) for line in done.stdout.decode().splitlines()]
    events, later = events_of(logs)
    ends = [e for e in events if e["event"] == "iteration_end"]
    assert [a["iteration"] for a in first["attempts"]] == [e["iteration"] for e in ends] == [1, 2, 3, 3, 4]
    assert [a["outcome"] for a in first["attempts"]] == ["success", "failure", "limited", "failure", "success"]
    assert [(a["cause"], a["reason"]) for a in first["attempts"]] == [(e["cause"], e["reason"]) for e in ends]
    assert first["attempts"][1]["reason"].startswith("verify exit 1")
    assert first["attempts"][3]["cause"] == "agent" and EXPLANATION in first["attempts"][3]["reason"]
    assert [a["cost_usd"] for a in first["attempts"]] == [(e["usage"] or {}).get("cost_usd") for e in ends]
    assert [a["seconds"] for a in first["attempts"]] == [e["seconds"] for e in ends]
    assert first["worked_seconds"] == round(sum(e["seconds"] for e in ends), 3)
    assert first["outcomes"] == {"success": 2, "failure": 2, "limited": 1}
    assert first["causes"] == {"verify": 1, "agent": 1, "limit": 1}
    commits = [e for e in events if e["event"] == "commit"]
    assert [c["hash"] for c in first["commits"]] == [c["hash"] for c in commits] and len(commits) == 2
    assert first["attempts"][0]["commit"]["subject"] == "build 1: Add a"
    assert first["attempts"][4]["commit"]["hash"] == commits[1]["hash"]
    limit = [e for e in events if e["event"] == "limit"][0]
    assert first["waits"][0]["kind"] == "limit" and first["waits"][0]["started"] == limit["time"]
    assert first["waited_seconds"] == {"limit": first["waits"][0]["seconds"]}  # (the injected wait: at once)
    assert first["last_verify"]["result"] == "pass" and first["baseline"] is None
    end = events[-1]
    assert (first["status"], first["exit_code"], first["reason"]) == (end["status"], end["exit_code"],
                                                                     end["reason"])
    assert first["usage"]["cost_usd"] == end["usage"]["cost_usd"] and first["next"] is None
    assert first["procedure"] == "build" and first["cwd"] == str(workspace) and first["skipped_lines"] == 0
    assert second["status"] == "interrupted" and second["next"].startswith("resume session-")
    assert second["attempts"][0]["outcome"] == "interrupted" and second["ended"] == later[-1]["time"]


def test_the_text_report_tells_the_night_and_what_to_run_next(workspace, agent, tmp_path, capfd, waits):
    logs = night(workspace, agent, tmp_path, capfd, waits)
    done = report(logs, "--all", cwd=workspace)
    text = done.stdout.decode()
    assert done.returncode == 0 and "\033[" not in text  # (no colour off a terminal)
    assert "status      completed, exit 0: max iterations" in text
    assert "iterations  5 attempts: failure 2, limited 1, success 2; causes: agent 1, limit 1, verify 1" in text
    assert "verify      passing at the last iteration" in text
    assert "time        worked " in text and "waited " in text and "(limit " in text
    lines = text.splitlines()
    row = [line for line in lines if line.split()[:1] == ["2"] and "failure" in line][0]
    assert "verify exit 1" in row and "$0.10" in row
    assert any(line.split()[:1] == ["1"] and "build 1: Add a" in line for line in lines)
    assert sum("  commit " in line for line in lines) == 2
    assert "next        python3 " in text and "rooda.py resume session-" in text
    assert "details     " in text and ".log" in text
    spent = sum((e.get("usage") or {}).get("cost_usd") or 0 for events in events_of(logs) for e in events
                if e["event"] == "iteration_end")
    assert "2 sessions · 6 attempts (2 succeeded, 2 failed) · worked " in text
    assert "· $%.2f · 2 commits" % spent in text
    newest = report(logs, cwd=workspace).stdout.decode()  # (the default: the newest session)
    assert "interrupted" in newest and "max iterations" not in newest


def test_sessions_are_chosen_by_name_and_by_age(workspace, agent, tmp_path, capfd, waits):
    logs = night(workspace, agent, tmp_path, capfd, waits)
    first = os.path.basename(events_of(logs)[0][0]["log"])[:-4]
    done = report(logs, first, "--json")
    assert [json.loads(line)["status"] for line in done.stdout.decode().splitlines()] == ["completed"]
    assert len(report(logs, "--since", "1h", "--json").stdout.decode().splitlines()) == 2
    assert report(logs, "--since", "2999-01-01", "--json").stdout == b""
    bad = report(logs, "--since", "yesterday")
    assert bad.returncode == 2 and "--since must be an age (12h, 2d, 90m) or a time" in bad.stderr.decode()
    assert report(logs, "no-such-session").returncode == 1
    assert report(tmp_path / "nothing-here").returncode == 1
    both = report(logs, "--json", "--html", "-")
    assert both.returncode == 2 and "choose one" in both.stderr.decode()


def test_a_line_that_does_not_parse_is_skipped_and_said(workspace, agent, tmp_path, capfd, waits):
    logs = night(workspace, agent, tmp_path, capfd, waits)
    newest = events_of(logs)[-1][0]["log"][:-4] + ".jsonl"
    with open(newest, "a") as stream:
        stream.write('{"event": "iteration_end", "time": \n{not json\n')
    text = report(logs).stdout.decode()
    assert "skipped     2 lines that did not parse" in text and "interrupted" in text


class Page(html.parser.HTMLParser):
    """What a browser would fetch or run from a page, and its text."""

    def __init__(self):
        super().__init__()
        self.tags, self.fetched, self.text, self.titles, self.styles = [], [], [], [], []
        self.open = []

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        self.open.append(tag)
        for name, value in attrs:
            if name in ("src", "href", "xlink:href", "srcset", "action") or (name == "style" and "url(" in value):
                self.fetched.append((tag, name, value))

    def handle_endtag(self, tag):
        while self.open and self.open.pop() != tag:
            pass

    def handle_data(self, data):
        (self.titles if self.open[-1:] == ["title"] else self.styles if self.open[-1:] == ["style"]
         else self.text).append(data)


def test_the_html_page_is_self_contained_escaped_and_charted(workspace, agent, tmp_path, capfd, waits):
    logs = night(workspace, agent, tmp_path, capfd, waits)
    done = report(logs, "--all", "--html", tmp_path / "night.html", cwd=workspace)
    assert done.returncode == 0 and done.stdout == b""
    page_text = (tmp_path / "night.html").read_text()
    page = Page()
    page.feed(page_text)
    assert "script" not in page.tags and not page.fetched
    assert "url(" not in "".join(page.styles) and "@import" not in "".join(page.styles)
    assert EXPLANATION in "".join(page.text + page.titles)  # (its text, not its tags)
    assert "<b>payments</b>" not in page_text and "&lt;script&gt;alert(1)&lt;/script&gt;" in page_text
    assert page.tags.count("svg") >= 3  # a timeline and the cost of each session that cost
    bars = [t for t in page.titles if t.startswith("#")]
    assert "#2 failure: verify exit 1" in " ".join(bars) and any(t.startswith("waited for limit") for t in page.titles)
    assert page.tags.count("section") == 2 and "build 1: Add a" in page_text
    assert report(logs, "--html", "-").stdout.decode().startswith("<!DOCTYPE html>")


def test_the_windows_are_charted_when_known(workspace, agent, tmp_path, capfd):
    logs = tmp_path / "logs"
    windows = {"type": "rate_limit_event", "rate_limit_info": {"status": "allowed", "unifiedWindows": {
        "five_hour": {"utilization": 0.41, "resetsAt": 9e9}, "seven_day": {"utilization": 0.63, "resetsAt": 9e9}}}}
    agent.script({"actions": [{"out": events_line(windows, OK_RESULT)}]})
    run_main(capfd, "build", "-n", "1", "--ai-cmd", agent.cmd, "--ai-format", "claude", "--log-dir", logs)
    page_text = report(logs, "--html", "-").stdout.decode()
    assert "Subscription windows" in page_text and "5h 41%" in page_text and "7d 63%" in page_text
    text = report(logs).stdout.decode()
    assert "windows     5h 41% → 41% · 7d 63% → 63%" in text


def chromium():
    return next((shutil.which(name) for name in ("chromium", "chromium-browser", "google-chrome")
                 if shutil.which(name)), None)


def png_pixels(path):
    """(width, height, the RGB pixels) of an 8-bit RGB or RGBA PNG, decoded with zlib alone."""
    data = open(path, "rb").read()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    at, chunks, header = 8, [], None
    while at < len(data):
        size, kind = struct.unpack(">I4s", data[at:at + 8])
        body = data[at + 8:at + 8 + size]
        header = body if kind == b"IHDR" else header
        chunks += [body] if kind == b"IDAT" else []
        at += 12 + size
    width, height, depth, color = struct.unpack(">IIBB", header[:10])
    assert depth == 8 and color in (2, 6)
    step = 3 if color == 2 else 4
    raw, rows, previous = zlib.decompress(b"".join(chunks)), [], bytearray(width * step)
    for y in range(height):
        line = raw[y * (width * step + 1):(y + 1) * (width * step + 1)]
        kind, row = line[0], bytearray(line[1:])
        for x in range(len(row)):
            left = row[x - step] if x >= step else 0
            up, corner = previous[x], previous[x - step] if x >= step else 0
            if kind == 1:
                row[x] = (row[x] + left) & 255
            elif kind == 2:
                row[x] = (row[x] + up) & 255
            elif kind == 3:
                row[x] = (row[x] + (left + up) // 2) & 255
            elif kind == 4:
                guess = left + up - corner
                best = min((abs(guess - left), 0, left), (abs(guess - up), 1, up), (abs(guess - corner), 2, corner))
                row[x] = (row[x] + best[2]) & 255
        rows.append(row)
        previous = row
    return width, height, [tuple(row[x:x + 3]) for row in rows for x in range(0, len(row), step)]


@pytest.mark.skipif(chromium() is None, reason="no chromium here (make test-browser installs none; see README)")
def test_a_real_browser_draws_the_page(workspace, agent, tmp_path, capfd, waits):
    logs = night(workspace, agent, tmp_path, capfd, waits)
    report(logs, "--all", "--html", tmp_path / "night.html", cwd=workspace)
    shot = tmp_path / "night.png"
    subprocess.run([chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                    "--disable-background-networking", "--hide-scrollbars", "--no-first-run",
                    "--user-data-dir=%s" % (tmp_path / "profile"), "--window-size=1000,1400",
                    "--screenshot=%s" % shot, "file://%s" % (tmp_path / "night.html")],
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=120)
    width, height, pixels = png_pixels(shot)
    assert (width, height) == (1000, 1400)
    colors = set(pixels)
    assert len(colors) > 20  # text and charts, not a blank page
    green, red = rooda.OUTCOME_COLORS["success"][1], "#e53935"
    for hex_color in (green, red):  # the timeline's bars are drawn in the outcomes' colours
        want = tuple(int(hex_color[i:i + 2], 16) for i in (1, 3, 5))
        assert any(all(abs(a - b) <= 8 for a, b in zip(pixel, want)) for pixel in colors), hex_color


def test_the_readmes_xargs_recipe_runs_three_loops_into_one_log_directory(tmp_path, agent):
    # The README's recipe as it is written, with HOME in a scratch directory: ~/src holds
    # three repositories, ~/tools/rooda this rooda; the fake agent says SUCCESS at once.
    from conftest import ROOT, git
    readme = open(os.path.join(ROOT, "README.md")).read()
    recipe = readme.split("**On one machine**")[1].split("```sh\n")[1].split("```")[0].splitlines()
    assert len(recipe) == 3 and recipe[0].startswith("ls -d ~/src/*/ | xargs -P 2")
    home = tmp_path / "home"
    for name in ("alpha", "beta", "gamma"):
        repo = home / "src" / name
        repo.mkdir(parents=True)
        git(repo, "init", "-q")
    (home / "tools" / "rooda").mkdir(parents=True)
    os.symlink(os.path.join(ROOT, "rooda.py"), home / "tools" / "rooda" / "rooda.py")
    agent.script({"actions": [{"out": "did it <promise>SUCCESS</promise>\n"}]})
    env = dict(os.environ, HOME=str(home), ROODA_LOOP_AI_CMD=agent.cmd, **agent.env)
    ran = [subprocess.run(["sh", "-c", line], cwd=str(tmp_path), env=env, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, timeout=120) for line in recipe]
    assert [done.returncode for done in ran] == [0, 0, 0], [done.stderr for done in ran]
    rows = ran[1].stdout.decode().splitlines()
    assert sorted(row.rsplit("  in ", 1)[1] for row in rows) == [str(home / "src" / n) for n in ("alpha", "beta", "gamma")]
    assert len(rows) == 3 and all(" completed " in row for row in rows)  # (the agents share a call counter)
    page = (home / "night.html").read_text()
    assert page.count("<section>") == 3 and all("in %s" % (home / "src" / n) in page for n in ("alpha", "beta", "gamma"))
