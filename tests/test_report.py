"""The morning report (SPEC 19, revisions 4 and 5): `report` reads the sessions a night left
-- made here by the fake agent for real, in one log directory two repositories share: a
commit, a verify failure, a usage limit waited out, an agent FAILURE whose explanation
holds markup, window readings, a reserve, and an interrupted session -- and tells them as
text, JSON and one self-contained page, in SPEC 19's order: every figure is checked
against the .jsonl, the page parsed, the next commands run for real, and the page drawn
by a real browser where one is installed. The scale checks read nights made by
tests/nights.py (hours of night, 1,000 iterations, 20 loops)."""
import html.parser
import json
import os
import re
import shutil
import struct
import subprocess
import sys
import time
import zlib

import pytest

import rooda
from conftest import OK_RESULT, ROODA, events_line, git, interrupt, make_repo, replay, run_main, run_rooda, say, \
    start_rooda, status, write_config
from nights import long_session, many_sessions, picture_night

EXPLANATION = 'the <b>payments</b> key & "the rest" is missing <script>alert(1)</script>'


def windows(five_hour, seven_day):
    """A Claude rate_limit_event holding these windows' readings."""
    resets = {"five_hour": time.time() + 4 * 3600, "seven_day": time.time() + 3 * 86400}
    return {"type": "rate_limit_event", "rate_limit_info": {"status": "allowed", "unifiedWindows": {
        name: {"utilization": used, "resetsAt": resets[name]} for name, used in (("five_hour", five_hour),
                                                                                  ("seven_day", seven_day))}}}


def night(workspace, agent, tmp_path, capfd, waits):
    """A night in one log directory: in the project, a run of five attempts (a commit, a
    verify failure, a limit waited out, an agent FAILURE, a commit) and one interrupted;
    in another repository, a run of one attempt."""
    logs = tmp_path / "logs"
    make_repo(workspace)
    write_config(workspace, {"loop": {"verify": "test ! -e broken", "git": {"commit": True},
                                      "reserve": {"seven_day": 0.2}}})
    git(workspace, "add", "-A")
    git(workspace, "commit", "-qm", "config")
    worked = dict(OK_RESULT, total_cost_usd=0.25)
    agent.script(
        {"actions": [{"write_file": "a.txt", "text": "a"}, {"out": events_line(say("Add a"), windows(0.2, 0.4),
                                                                               worked)}]},
        {"actions": [{"write_file": "broken", "text": "x"}, {"out": events_line(say("Break it"), OK_RESULT)}]},
        replay("claude-stream-usage-limit.jsonl", 1),
        {"actions": [{"remove": "broken"}, {"out": events_line(say("<promise>FAILURE</promise> " + EXPLANATION),
                                                               dict(OK_RESULT, total_cost_usd=0.05))}]},
        {"actions": [{"write_file": "b.txt", "text": "b"}, {"out": events_line(say("Add b"), windows(0.5, 0.45),
                                                                               worked)}]},
        {"actions": [{"touch": "started"}, {"wait_for": "never"}]},
        {"actions": [{"out": events_line(say("other <promise>SUCCESS</promise>"), worked)}]})
    code, _, err = run_main(capfd, "build", "-n", "4", "--ai-cmd", agent.cmd, "--ai-format", "claude",
                            "--log-dir", logs)
    assert code == 0 and agent.calls == 5, err
    proc = start_rooda(agent, "-n", "1", "--ai-format", "claude", "--log-dir", logs, cwd=workspace)
    agent.wait_for("started", timeout=30)
    interrupt(proc)
    other = tmp_path / "other"
    other.mkdir()
    make_repo(other)
    done = run_rooda("build", "-n", "1", "--ai-cmd", agent.cmd, "--ai-format", "claude", "--log-dir", logs,
                     cwd=str(other), env=agent.env)
    assert done.returncode == 0, done.stderr
    return logs


def report(logs, *args, cwd):
    done = run_rooda("report", "--log-dir", logs, *args, cwd=str(cwd))
    assert "Traceback" not in done.stderr.decode(), done.stderr.decode()
    return done


def sessions_of(logs):
    """Each session's events, oldest first."""
    paths = [p for p in os.listdir(logs) if p.endswith(".jsonl") and not p.endswith("-agent.jsonl")]
    return sorted(([json.loads(line) for line in open(os.path.join(logs, p))] for p in paths),
                  key=lambda events: (events[0]["time"], events[0]["cwd"]))


@pytest.fixture
def logs(workspace, agent, tmp_path, capfd, waits):
    return night(workspace, agent, tmp_path, capfd, waits)


def test_the_json_report_has_every_attempt_as_the_jsonl_tells_it(logs, workspace):
    done = report(logs, "--all", "--json", cwd=workspace)
    first, second, third = [json.loads(line) for line in done.stdout.decode().splitlines()]
    events = sessions_of(logs)[0]
    ends = [e for e in events if e["event"] == "iteration_end"]
    assert [a["iteration"] for a in first["attempts"]] == [e["iteration"] for e in ends] == [1, 2, 3, 3, 4]
    assert [a["outcome"] for a in first["attempts"]] == ["success", "failure", "limited", "failure", "success"]
    assert [(a["cause"], a["reason"]) for a in first["attempts"]] == [(e["cause"], e["reason"]) for e in ends]
    assert first["attempts"][3]["cause"] == "agent" and EXPLANATION in first["attempts"][3]["reason"]
    assert [a["cost_usd"] for a in first["attempts"]] == [(e["usage"] or {}).get("cost_usd") for e in ends]
    assert [a["seconds"] for a in first["attempts"]] == [e["seconds"] for e in ends]
    assert first["worked_seconds"] == round(sum(e["seconds"] for e in ends), 3)
    commits = [e for e in events if e["event"] == "commit"]
    assert [c["hash"] for c in first["commits"]] == [c["hash"] for c in commits] and len(commits) == 2
    assert first["attempts"][0]["commit"]["subject"] == "build 1: Add a"
    [limit] = [e for e in events if e["event"] == "limit"]
    assert first["waits"][0]["kind"] == "limit" and first["waited_seconds"] == first["waits"][0]["seconds"]
    assert [(r[1], r[2]) for r in first["readings"]] == [(e["window"], e["utilization"]) for e in events
                                                         if e["event"] == "window"]
    assert first["reserve"] == {"seven_day": 0.2} and first["next"] == ""
    end = events[-1]
    assert (first["status"], first["exit_code"], first["reason"]) == (end["status"], end["exit_code"], end["reason"])
    assert second["status"] == "interrupted" and second["next"].endswith(
        "rooda.py resume %s --log-dir %s" % (os.path.basename(second["session"])[:-6], logs))
    assert third["cwd"].endswith("other")


def test_the_text_tells_the_night_at_a_glance_then_each_session(logs, workspace, monkeypatch):
    monkeypatch.setenv("COLUMNS", "100")
    text = report(logs, "--all", cwd=workspace).stdout.decode()
    assert "\033[" not in text  # (no colour off a terminal)
    lines = text.splitlines()
    spent = sum((e.get("usage") or {}).get("cost_usd") or 0 for events in sessions_of(logs) for e in events
                if e["event"] == "iteration_end")
    assert lines[0].startswith("Total: 3 sessions · 7 attempts (3 succeeded, 2 failed, 1 limited, 1 interrupted)")
    assert " ".join(lines[:2]).replace("  ", " ").endswith("· $%.2f · 2 commits" % spent), lines[:2]
    glance_row = next(index for index, line in enumerate(lines)
                      if line.startswith("COMPLETED   build in %s · " % workspace))
    assert "verify: passing before → passing after" in text
    assert any(line.startswith("INTERRUPTED ") for line in lines)
    assert "            next: cd %s " % workspace in text
    # the table: a reason wraps under its own column, never to column 0
    row = next(index for index, line in enumerate(lines) if line.lstrip().startswith("3 ") and "agent:" in line)
    column = lines[row].index("agent:")
    assert lines[row + 1].startswith(" " * column) and lines[row + 1][column] != " "
    assert any(line.lstrip().startswith("1 ") and "build 1: Add a" in line for line in lines)
    # (SPEC 19 rev 4 and 6, issue 43, 18: every line fitted; the windows' first and last readings;
    # tokens beside cost; each session's status word and reason; its commits after its attempts)
    assert max(map(len, lines)) <= 100
    assert "            windows: 5h 20% → 50%, 7d 40% → 45%" in lines
    assert "tokens · $" in lines[glance_row] + lines[glance_row + 1]
    assert "            why: success signal" in lines
    assert "· COMPLETED: success signal #" in " ".join(text.split())  # (its table's header follows)
    commits = lines.index("  commits:")
    assert lines[commits + 1].strip().endswith("build 1: Add a") and lines[commits + 2].strip().endswith(
        "build 4: Add b")
    monkeypatch.setenv("COLUMNS", "60")
    narrow = report(logs, "--all", cwd=workspace).stdout.decode().splitlines()
    assert [line for line in narrow if len(line) > 60 and len(line.split()) > 2] == []  # (a path stays whole)
    assert commands(narrow) == commands(lines) and len(commands(lines)) == 1


def commands(lines):
    """The `next:` commands of a text report, each whole again (a command wrapped goes on
    after a backslash)."""
    found = []
    for index, line in enumerate(lines):
        if line.strip().startswith("next: cd "):
            found.append(line.split("next: ", 1)[1])
            while found[-1].endswith(" \\"):
                index += 1
                found[-1] = found[-1][:-1] + lines[index].strip()
    return [" ".join(command.split()) for command in found]


def test_the_next_command_works_when_copied(logs, workspace, agent, tmp_path):
    [line] = [line for line in report(logs, "--all", cwd=tmp_path).stdout.decode().splitlines()
              if line.strip().startswith("next: cd ")]
    agent.script({"actions": [{"out": events_line(say("<promise>SUCCESS</promise>"), OK_RESULT)}]})
    done = subprocess.run(["sh", "-c", line.split("next: ", 1)[1]], env=dict(os.environ, **agent.env),
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=60)
    assert done.returncode == 0, done.stderr.decode()  # (from elsewhere, the log directory not the default)
    assert b"Resuming procedure: build" in done.stderr


def test_a_session_named_by_its_path_from_elsewhere_gets_a_next_command_that_works(logs, agent, tmp_path):
    # (it said `resume <name>` without its --log-dir; and with no log directory here, exit 1)
    interrupted = [s for s in sessions_of(logs) if s[-1].get("status") == "interrupted"][0][0]["log"][:-4]
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    done = run_rooda("report", str(logs / (os.path.basename(interrupted) + ".jsonl")), cwd=str(elsewhere))
    assert done.returncode == 0, done.stderr
    [line] = [line for line in done.stdout.decode().splitlines() if line.strip().startswith("next: cd ")]
    assert "--log-dir" in line
    agent.script({"actions": [{"out": events_line(say("<promise>SUCCESS</promise>"), OK_RESULT)}]})
    resumed = subprocess.run(["sh", "-c", line.split("next: ", 1)[1]], env=dict(os.environ, **agent.env),
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=60)
    assert resumed.returncode == 0 and b"Resuming procedure: build" in resumed.stderr, resumed.stderr


def test_without_a_name_status_report_and_resume_mean_this_repositorys_newest(logs, workspace, tmp_path):
    newest_here = sessions_of(logs)[1][0]["log"][:-4]
    assert json.loads(report(logs, "--json", cwd=workspace).stdout)["session"].startswith(newest_here)
    assert json.loads(run_rooda("status", "--json", "--log-dir", logs, cwd=str(workspace)).stdout)[
        "session"].startswith(newest_here)  # (the other repository's session is newer)
    other = json.loads(report(logs, "--json", cwd=tmp_path / "other").stdout)
    assert other["cwd"].endswith("other")
    elsewhere = json.loads(report(logs, "--json", cwd=tmp_path).stdout)  # (none ran here: the newest of all)
    assert elsewhere["cwd"].endswith("other")


def test_sessions_are_chosen_by_name_and_by_age_and_an_empty_choice_says_so(logs, workspace):
    first = os.path.basename(sessions_of(logs)[0][0]["log"])[:-4]
    assert [json.loads(line)["status"] for line in report(logs, first, "--json", cwd=workspace).stdout.decode()
            .splitlines()] == ["completed"]
    assert len(report(logs, "--since", "1h", "--json", cwd=workspace).stdout.decode().splitlines()) == 3
    empty = report(logs, "--since", "2999-01-01", cwd=workspace)
    assert empty.returncode == 1 and empty.stdout == b"" and len(empty.stderr.decode().splitlines()) == 1
    assert b"no session in" in empty.stderr
    bad = report(logs, "--since", "yesterday", cwd=workspace)
    assert bad.returncode == 2 and "--since must be an age (12h, 2d, 90m) or a time" in bad.stderr.decode()
    assert report(logs, "no-such-session", cwd=workspace).returncode == 1
    both = report(logs, "--json", "--html", "-", cwd=workspace)
    assert both.returncode == 2 and "choose one" in both.stderr.decode()


class Page(html.parser.HTMLParser):
    """What a browser would fetch or run from a page, its text, and its SVG shapes."""

    def __init__(self):
        super().__init__()
        self.tags, self.fetched, self.text, self.attributes, self.svgs = [], [], [], [], []
        self.open, self.chart = [], False

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        self.open.append(tag)
        if tag == "svg":  # (a chart; the legend's swatches are not)
            self.chart = ("role", "img") in attrs
            self.svgs += [[]] * self.chart
        elif self.chart:
            self.svgs[-1].append(tag)
        for name, value in attrs:
            self.attributes.append(value or "")
            if name in ("src", "href", "xlink:href", "srcset", "action") or (name == "style" and "url(" in value):
                self.fetched.append((tag, name, value))

    def handle_endtag(self, tag):
        self.chart = self.chart and tag != "svg"
        while self.open and self.open.pop() != tag:
            pass

    def handle_data(self, data):
        self.text.append(data)


def test_the_page_is_self_contained_escaped_and_has_every_chart(logs, workspace, tmp_path):
    done = report(logs, "--all", "--html", tmp_path / "night.html", cwd=workspace)
    assert done.returncode == 0 and done.stdout == b""
    text = (tmp_path / "night.html").read_text()
    page = Page()
    page.feed(text)
    assert "script" not in page.tags and not page.fetched and "@import" not in text
    assert EXPLANATION in "".join(page.text)  # (its text, not its tags)
    assert "<b>payments" not in text and "&lt;script&gt;alert(1)&lt;/script&gt;" in text
    assert not any("<" in value or '"' in value for value in page.attributes if "payments" in value)
    timeline, cost, windows_chart = page.svgs[:3]
    # a bar per attempt and per wait, a hatch on each failure, dots on the wait (and the patterns' own)
    assert timeline.count("rect") == 7 + 1 + 2 + 1 + 1 and timeline.count("title") == 8
    assert "polyline" in cost and windows_chart.count("polyline") == 2 + 1  # (5h, 7d, and the reserve)
    assert 'stroke-dasharray="6 4"' in text  # the reserve, dashed
    assert "Total: 3 sessions" in text and text.index("Total:") < text.index("<svg")  # the glance first
    for word in ("success", "failure", "limited", "interrupted", "waited: limit"):
        assert word in text.split('class=legend')[1][:3000], word  # the legend names what is drawn
    assert text.count("<tr") == 1 + 3 + 1 + 5 + 1 + 1 + 1 + 1  # the glance, then each session's table
    assert "build 1: Add a" in text and "@media print" in text
    assert report(logs, "--all", "--html", "-", cwd=workspace).stdout.decode().startswith("<!DOCTYPE html>")


def test_small_and_running_cases(workspace, agent, tmp_path):
    logs = tmp_path / "logs"
    agent.script({"actions": [{"touch": "started"}, {"wait_for": "go"}, {"out": "done\n"}]})
    proc = start_rooda(agent, "-n", "1", "--log-dir", logs, cwd=workspace)
    agent.wait_for("started")
    text = report(logs, cwd=workspace).stdout.decode()
    assert "RUNNING" in text and "None" not in text, text
    page = report(logs, "--html", "-", cwd=workspace).stdout.decode()
    assert "running" in page and "None" not in page
    open(os.path.join(agent.state, "go"), "w").close()
    proc.communicate(timeout=30)
    text = report(logs, cwd=workspace).stdout.decode()
    assert text.startswith("Total: 1 session · 1 attempt (1 succeeded)")


def test_a_long_session_is_summarised_per_run_and_reported_in_time(tmp_path):
    path = long_session(str(tmp_path / "logs"))
    started = time.monotonic()
    done = run_rooda("report", "--log-dir", tmp_path / "logs", cwd=str(tmp_path))
    text = done.stdout.decode()
    assert done.returncode == 0 and "success ×" not in text  # (failures every four: no run is long)
    rows = [line for line in text.splitlines() if re.match(r" *\d+(–\d+)?  \d\d:\d\d:\d\d ", line)]
    assert len(rows) == 1000 and time.monotonic() - started < 30
    page = run_rooda("report", "--log-dir", tmp_path / "logs", "--html", "-", cwd=str(tmp_path)).stdout
    assert len(page) < 2e6
    lines = open(path).read().splitlines()  # a session of plain successes is summed per run
    plain = [line for line in lines if '"failure"' not in line and '"commit"' not in line]
    plain = [line.replace('"reason": null', '"reason": null') for line in plain]
    with open(path, "w") as stream:
        stream.write("\n".join(plain) + "\n")
    text = run_rooda("report", "--log-dir", tmp_path / "logs", cwd=str(tmp_path)).stdout.decode()
    assert "success ×" in text and len(text.splitlines()) < 50, text[:2000]


def test_twenty_sessions_make_a_glance_of_twenty_rows(tmp_path):
    many_sessions(str(tmp_path / "logs"))
    page = run_rooda("report", "--all", "--log-dir", tmp_path / "logs", "--html", "-", cwd=str(tmp_path))
    text = page.stdout.decode()
    glance = text.split("<section class=glance>")[1].split("</section>")[0]
    assert glance.count("<tr>") == 21 and text.count('<svg viewBox="0 0 1000') == 2  # (one timeline; the cost)
    lanes = text.split('<svg viewBox="0 0 1000')[1].split("</svg>")[0]
    assert all("repo%02d" % index in lanes for index in range(20))


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


def screenshot(page, shot, width=1200, height=1500):
    subprocess.run([chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                    "--disable-background-networking", "--disable-component-update", "--disable-sync",
                    "--hide-scrollbars", "--no-first-run", "--user-data-dir=%s" % (shot.parent / "profile"),
                    "--window-size=%d,%d" % (width, height), "--screenshot=%s" % shot, "file://%s" % page],
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=120)
    return png_pixels(shot)


@pytest.mark.skipif(chromium() is None, reason="no chromium here (apt-get install chromium; .ci/run does)")
def test_a_real_browser_draws_the_outcomes_in_their_colours(tmp_path):
    picture_night(str(tmp_path / "logs"))
    run_rooda("report", "--all", "--log-dir", tmp_path / "logs", "--html", tmp_path / "night.html",
              cwd=str(tmp_path))
    width, height, pixels = screenshot(tmp_path / "night.html", tmp_path / "night.png")
    assert (width, height) == (1200, 1500)
    colors = set(pixels)
    for outcome in ("success", "completed", "failure", "timeout", "limited", "interrupted"):
        want = tuple(int(rooda.OUTCOME_LOOK[outcome][i:i + 2], 16) for i in (1, 3, 5))
        assert any(all(abs(a - b) <= 8 for a, b in zip(pixel, want)) for pixel in colors), outcome


# A page that lays the report out in a frame 420 px wide (a phone; headless Chromium lays a
# window out at 500 px at least) and says in the DOM how wide it is and what passes its edge.
PHONE = """<!DOCTYPE html><html><body style="margin:0"><iframe id=f src="night.html"
style="width:420px;height:900px;border:0"></iframe><script>
document.getElementById("f").onload = function () {
  var page = this.contentDocument, wide = [page.documentElement.scrollWidth];
  page.querySelectorAll("body *").forEach(function (e) {
    if (e.getBoundingClientRect().right > 420.5 && !e.closest(".chart")) wide.push(e.tagName);
  });
  document.body.setAttribute("data-wide", wide.join(" "));
};</script></body></html>"""


@pytest.mark.skipif(chromium() is None, reason="no chromium here (apt-get install chromium; .ci/run does)")
def test_on_a_phone_nothing_but_the_timeline_scrolls_sideways(tmp_path):
    # (at a true 420 px the page was 469 wide: a long ref in the attempts table, the legends)
    logs = tmp_path / "logs"
    picture_night(str(logs))
    [first] = sorted(logs.glob("session-*.jsonl"))[:1]
    ref = "refs/rooda/attempts/session-20261127-220000-with-a-rather-long-name/4"
    with open(first, "a") as stream:
        stream.write(json.dumps({"event": "iteration_end", "time": "2026-11-28T01:30:00.000Z", "iteration": 7,
                                 "outcome": "failure", "cause": "worse", "seconds": 60, "set_aside": ref,
                                 "reason": "worse: verify passing (18 run) → failing; set aside as " + ref}) + "\n")
    run_rooda("report", "--all", "--log-dir", logs, "--html", tmp_path / "night.html", cwd=str(tmp_path))
    (tmp_path / "phone.html").write_text(PHONE)
    dom = subprocess.run([chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                          "--disable-background-networking", "--disable-component-update", "--disable-sync",
                          "--no-first-run", "--allow-file-access-from-files", "--virtual-time-budget=5000",
                          "--user-data-dir=%s" % (tmp_path / "profile"), "--dump-dom",
                          "file://%s" % (tmp_path / "phone.html")], stdout=subprocess.PIPE,
                         stderr=subprocess.DEVNULL, timeout=120).stdout.decode()
    [wide] = re.findall(r'data-wide="([^"]*)"', dom)
    width, *past = wide.split()
    assert int(width) <= 420 and past == [], wide  # (the page's width, and what passes the frame's edge)


def test_the_agents_own_commits_are_counted_as_commits(workspace, tmp_path):
    # Agents that commit themselves (git: commit off) made "0 commits" of a night of work.
    logs = tmp_path / "logs"
    make_repo(workspace)
    before = git(workspace, "rev-parse", "HEAD")
    script = tmp_path / "committing-agent"
    script.write_text("#!/bin/sh\ncat >/dev/null\necho work >> work.txt\ngit add work.txt\n"
                      "git commit -qm 'the work'\necho done\n")
    script.chmod(0o755)
    done = run_rooda("build", "-n", "2", "--ai-cmd", str(script), "--log-dir", logs, cwd=str(workspace))
    assert done.returncode == 0, done.stderr
    session = json.loads(report(logs, "--json", cwd=workspace).stdout)
    assert [commit["subject"][:18] for commit in session["commits"]] == ["the agent's (HEAD "] * 2
    assert session["commits"][0]["subject"].startswith("the agent's (HEAD %s → " % before[:7])
    assert "· 2 commits" in report(logs, cwd=workspace).stdout.decode()


def test_odd_lines_of_a_session_file_are_no_traceback(tmp_path):
    # (an unknown outcome, a null status, a reason that is a number, a list for a kind: each
    # was a traceback in report)
    logs = tmp_path / "logs"
    logs.mkdir()
    at = "2026-11-28T01:00:%02d.000Z"
    events = [{"event": "session_start", "time": at % 0, "procedure": "build", "pid": 0, "cwd": str(tmp_path)},
              {"event": "iteration_end", "time": at % 1, "iteration": 1, "outcome": "weird", "reason": 5},
              {"event": "iteration_end", "time": at % 2, "iteration": 2, "reason": ["x"], "error_kind": 7},
              {"event": "iteration_end", "time": at % 3, "iteration": 3, "outcome": "failure", "reason": 5},
              {"event": "limit", "time": at % 4, "kind": ["five_hour"], "wait_seconds": 5},
              {"event": "window", "time": at % 5, "window": "five_hour", "utilization": 0.5, "resets_at": None},
              {"event": "session_end", "time": at % 9, "status": None, "reason": 3, "exit_code": "x"}]
    (logs / "session-20261128-010000.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    for args in ((), ("--json",), ("--html", "-")):
        done = report(logs, *args, cwd=tmp_path)
        assert done.returncode == 0 and done.stdout, done.stderr
    assert "2 of no known outcome" in report(logs, cwd=tmp_path).stdout.decode()


def test_no_field_of_a_log_reaches_a_terminal_raw_and_no_length_is_a_traceback(tmp_path):
    # (issue 43, 15 and 16: an agent that appends to its own session file sent OSC escapes
    # to the person's terminal through `report` and `status --all`; `seconds: 1e308` was an
    # OverflowError in `report` and its page)
    logs = tmp_path / "logs"
    logs.mkdir()
    at = "2026-11-28T01:00:%02d.000Z"
    osc = "\x1b]52;c;aGVsbG8=\x07"
    events = [{"event": "session_start", "time": at % 0, "procedure": "build" + osc, "pid": 0,
               "cwd": str(tmp_path) + osc},
              {"event": "iteration_end", "time": at % 2, "iteration": 1, "outcome": "failure", "reason": "x" + osc,
               "seconds": 1e308, "set_aside": "refs/rooda/x" + osc},
              {"event": "session_end", "time": at % 9, "status": "error\x1b[2J", "reason": "r" + osc, "exit_code": 2}]
    (logs / "session-20261128-010000.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    for args in ((), ("--html", "-"), ("--markdown", "-")):
        done = report(logs, *args, cwd=tmp_path)
        assert done.returncode == 0 and b"\x1b" not in done.stdout, (args, done.stdout[-500:], done.stderr)
    said = run_rooda("status", "--all", "--log-dir", logs, cwd=str(tmp_path)).stdout
    assert b"error" in said and b"\x1b" not in said
    assert b"\x1b" not in run_rooda("status", "--log-dir", logs, cwd=str(tmp_path)).stdout


def test_the_markdown_report_is_the_glance_and_each_sessions_table_for_a_ci_summary(tmp_path):
    picture_night(str(tmp_path / "logs"))
    done = run_rooda("report", "--all", "--log-dir", tmp_path / "logs", "--markdown", "-", cwd=str(tmp_path))
    text = done.stdout.decode()
    assert done.returncode == 0 and text.startswith("## rooda: the night of "), done.stderr
    rows = [line for line in text.splitlines() if line.startswith("| **")]
    assert [row.split("|")[1].strip() for row in rows] == ["**completed**", "**aborted**", "**limited**",
                                                              "**interrupted**"]
    assert all(row.count(" | ") == 7 for row in rows)  # (a `|` in a log's text does not break a row)
    assert "`cd /home/me/src/docs && python3 " in rows[2]  # (what to run next, as code)
    assert text.count("| # | start | length | outcome | cost | reason, or commit |") == 4
    written = tmp_path / "summary.md"
    assert run_rooda("report", "--all", "--log-dir", tmp_path / "logs", "--markdown", written,
                     cwd=str(tmp_path)).returncode == 0 and written.read_text() == text


def test_the_legends_name_only_what_is_drawn_and_an_interrupted_bar_is_not_done(tmp_path):
    # (issue 43, 21: an interrupted bar's tooltip said `done`; the windows' legend named a
    # dashed reserve line when no reserve was set)
    logs = tmp_path / "logs"
    picture_night(str(logs))
    page = run_rooda("report", "--all", "--log-dir", logs, "--html", "-", cwd=str(tmp_path)).stdout.decode()
    [interrupted] = [title for title in re.findall(r"<title>([^<]*)</title>", page) if "interrupted" in title]
    assert "done" not in interrupted and interrupted.startswith("#2 interrupted, ")
    assert "dashed: the reserve kept" in page
    for path in logs.glob("session-*.jsonl"):  # the same night without a reserve
        path.write_text("".join(line for line in path.read_text().splitlines(True) if '"reserve"' not in line))
    page = run_rooda("report", "--all", "--log-dir", logs, "--html", "-", cwd=str(tmp_path)).stdout.decode()
    assert "Subscription windows" in page and "dashed" not in page


def test_status_says_which_directory_the_session_ran_in(tmp_path):
    # (issue 43, 17: in a repository where no loop ran, `status` showed another's session and
    # never said so)
    logs = tmp_path / "logs"
    picture_night(str(logs))
    said = run_rooda("status", "--log-dir", logs, cwd=str(tmp_path)).stdout.decode()
    assert "\nran in      /home/me/src/shop\n" in said, said
