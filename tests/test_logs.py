"""Session logs (SPEC 8): the .log for people and the .jsonl event stream."""
import glob
import json
import os
import re
import signal
import stat
import subprocess
import time

from conftest import ends, interrupt, run_main, session_events, start_rooda, write_config

ISO = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")
EVENT_FIELDS = {
    "session_start": {"version", "procedure", "agent", "agents", "max_iterations", "failure_threshold",
                      "cwd", "pid", "boot", "pidns", "log", "argv"},
    "iteration_start": {"iteration", "agent", "prompt_sha256", "prompt_bytes", "fragments"},
    "gate": {"gate", "command", "exit_code", "seconds", "line", "counts"},  # (line, counts: verify's)
    "iteration_end": {"iteration", "seconds", "exit_code", "signal", "signals", "outcome",
                      "consecutive_failures", "verify", "head_before", "head_after", "output_bytes",
                      "reason", "cause", "error_kind", "restored", "kept_versions", "set_aside", "kept", "usage",
                      "verdict", "feedback", "said", "needs", "assumptions", "denied"},
    "limit": {"wait", "kind", "message", "resets_at", "wait_seconds"},
    "session_end": {"status", "resumable", "reason", "iterations", "succeeded", "failed", "seconds", "exit_code",
                    "usage"},
}


def logs_in(directory):
    return sorted(glob.glob(os.path.join(str(directory), "session-*.log")))


def test_a_run_writes_a_log_and_a_jsonl_with_exactly_the_spec_events(workspace, agent, capfd, tmp_path):
    log_dir = tmp_path / "session-logs"
    agent.script({"actions": [{"out": "agent says hello\n"}], "exit": 1},
                 {"actions": [{"out": "all done\n<promise>SUCCESS</promise>\n"}]})
    code, _, err = run_main(capfd, "build", "-n", "3", "--ai-cmd", agent.cmd, "--log-dir", log_dir,
                            "--verify", "echo verifier-output", "--no-verify-baseline")
    assert code == 0
    [log] = logs_in(log_dir)
    assert re.search(r"session-\d{8}-\d{6}\.log$", log)
    stream = session_events(log_dir)
    assert [e["event"] for e in stream] == [
        "session_start", "iteration_start", "gate", "iteration_end",
        "iteration_start", "gate", "iteration_end", "session_end"]
    for event in stream:
        assert set(event) == EVENT_FIELDS[event["event"]] | {"event", "time"}, event["event"]
        assert ISO.match(event["time"])
    start, first_start, _, first_end, _, gate, second_end, end = stream
    assert start["procedure"] == "build" and start["max_iterations"] == 3
    assert start["agent"][1].endswith("fake_agent.py") and start["pid"] > 0
    assert start["failure_threshold"] == 3 and start["log"] == log
    assert first_start["iteration"] == 1 and len(first_start["prompt_sha256"]) == 64
    assert first_start["prompt_bytes"] == len(agent.prompt(1).encode())
    assert "prompts/act/signals.md" in " ".join(first_start["fragments"])
    assert first_end["outcome"] == "failure" and first_end["exit_code"] == 1
    assert first_end["verify"] == "pass"  # verify runs after every iteration but timeouts
    assert gate == dict(gate, gate="verify", command="echo verifier-output", exit_code=0)
    assert second_end["signals"] == ["SUCCESS"] and second_end["verify"] == "pass"
    assert second_end["outcome"] == "completed" and second_end["consecutive_failures"] == 0
    assert second_end["output_bytes"] == len("all done\n<promise>SUCCESS</promise>\n")
    assert second_end["head_before"] is None and second_end["head_after"] is None  # not in git
    assert end == dict(end, status="completed", iterations=2, exit_code=0)
    assert "Log: %s" % os.path.relpath(log) in err or "Log: %s" % log in err


def test_the_human_log_has_header_output_gates_footer_and_summary(workspace, agent, capfd, tmp_path):
    agent.script({"actions": [{"out": "working on it\n"}, {"err": "a warning\n"}]})
    run_main(capfd, "build", "-n", "2", "--ai-cmd", agent.cmd, "--log-dir", tmp_path / "l",
             "--verify", "echo checked-by-verify")
    [log] = logs_in(tmp_path / "l")
    with open(log) as stream:
        text = stream.read()
    assert text.startswith("=" * 80 + "\nROODA SESSION\n")
    assert "Procedure: build\n" in text and "Max Iterations: 2\n" in text
    assert "ITERATION 1\n" in text and "ITERATION 2 COMPLETE\n" in text
    assert "working on it\n" in text and "a warning\n" in text
    assert "--- verify: echo checked-by-verify ---\nchecked-by-verify\n" in text
    assert "Outcome: success\n" in text
    summary = text.split("SESSION SUMMARY\n", 1)[1]
    assert "Total Iterations: 2\nSuccessful: 2\nFailed: 0\n" in summary
    assert "Exit Reason: Reached max iterations: 2" in summary and "Exit Code: 0\n" in summary


def test_logs_are_private_and_never_overwrite_an_earlier_session(workspace, agent, capfd, tmp_path):
    log_dir = tmp_path / "l"
    log_dir.mkdir()
    now = time.time()
    for offset in range(0, 4):  # take this second's name (and the next ones')
        name = time.strftime("session-%Y%m%d-%H%M%S", time.localtime(now + offset))
        (log_dir / (name + ".log")).write_text("earlier session\n")
    run_main(capfd, "build", "-n", "1", "--ai-cmd", agent.cmd, "--log-dir", log_dir)
    logs = logs_in(log_dir)
    fresh = [path for path in logs if open(path).read() != "earlier session\n"]
    assert len(fresh) == 1 and re.search(r"-2\.log$", fresh[0])
    for path in (fresh[0], fresh[0][:-4] + ".jsonl"):
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o600


def test_no_log_writes_nothing_and_log_dir_is_relative_to_cwd(workspace, agent, capfd, monkeypatch):
    monkeypatch.delenv("ROODA_LOOP_LOG_DIR")
    code, _, err = run_main(capfd, "build", "-n", "1", "--ai-cmd", agent.cmd, "--no-log")
    assert code == 0 and "Log:" not in err
    run_main(capfd, "build", "-n", "1", "--ai-cmd", agent.cmd, "--log-dir", "my-logs")
    assert len(logs_in(workspace / "my-logs")) == 1


def test_an_unwritable_log_directory_exits_2_before_the_first_iteration(workspace, agent, capfd):
    (workspace / "a-file").write_text("")
    code, _, err = run_main(capfd, "build", "--ai-cmd", agent.cmd, "--log-dir", "a-file/logs")
    assert code == 2 and agent.calls == 0
    assert err.startswith("rooda: error: cannot create the log directory a-file/logs: ")
    assert "--no-log" in err


def test_log_dir_from_the_workspace_config_resolves_against_that_file(workspace, agent, capfd, monkeypatch):
    monkeypatch.delenv("ROODA_LOOP_LOG_DIR")
    (workspace / "conf").mkdir()
    write_config(workspace / "conf", {"loop": {"log_dir": "../runs"}})
    run_main(capfd, "build", "-n", "1", "--ai-cmd", agent.cmd, "--config", "conf/rooda-config.json")
    assert len(logs_in(workspace / "runs")) == 1


def test_a_run_killed_with_sigkill_leaves_a_jsonl_whose_every_line_parses(workspace, agent, tmp_path):
    log_dir = tmp_path / "l"
    agent.script({"actions": [{"out": "x" * 100000}, {"touch": "ready"}, {"sleep": 60}]})
    proc = start_rooda(agent, "--log-dir", log_dir, cwd=workspace, stdout=subprocess.DEVNULL)
    agent.wait_for("ready")
    try:
        interrupt(proc, signal.SIGKILL)
    finally:
        os.killpg(agent.pid(1), signal.SIGKILL)  # rooda could not clean up after SIGKILL
    [log] = logs_in(log_dir)
    with open(log[:-4] + ".jsonl") as stream:
        lines = stream.read().splitlines()
    assert [json.loads(line)["event"] for line in lines] == ["session_start", "iteration_start"]
    with open(log) as stream:
        assert "x" * 100000 in stream.read()  # the output up to the kill is there


def test_an_interrupted_run_ends_its_jsonl_with_status_interrupted(workspace, agent, tmp_path):
    log_dir = tmp_path / "l"
    agent.script({"actions": [{"touch": "ready"}, {"sleep": 60}]})
    proc = start_rooda(agent, "--log-dir", log_dir, cwd=workspace, stdout=subprocess.DEVNULL)
    agent.wait_for("ready")
    interrupt(proc)
    [log] = logs_in(log_dir)
    stream = session_events(log_dir)
    assert stream[-2]["event"] == "iteration_end" and stream[-2]["outcome"] == "interrupted"
    assert stream[-1] == dict(stream[-1], event="session_end", status="interrupted", exit_code=130)
    with open(log) as human:
        assert "Exit Reason: Interrupted by SIGINT during iteration 1" in human.read()


def test_head_before_and_after_inside_git(workspace, agent, capfd, tmp_path):
    for args in (["init", "-q"], ["config", "user.name", "t"], ["config", "user.email", "t@t"],
                 ["commit", "-q", "--allow-empty", "-m", "start"]):
        subprocess.run(["git"] + args, cwd=str(workspace), check=True)
    run_main(capfd, "build", "-n", "1", "--ai-cmd", agent.cmd, "--log-dir", tmp_path / "l")
    [end] = ends(session_events(tmp_path / "l"))
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=str(workspace), stdout=subprocess.PIPE,
                          check=True).stdout.decode().strip()
    assert end["head_before"] == end["head_after"] == head


def test_a_full_disk_is_one_warning_and_leaves_whole_jsonl_lines(workspace, agent, tmp_path):
    """RLIMIT_FSIZE makes every write past 40 KB fail, as a full disk would."""
    import resource
    import sys

    from conftest import ROODA

    logs = tmp_path / "full"
    agent.script({"actions": [{"out_bytes": 30000, "line": 100}]})

    def small_disk():
        resource.setrlimit(resource.RLIMIT_FSIZE, (40000, 40000))

    proc = subprocess.run([sys.executable, ROODA, "build", "-n", "3", "--ai-cmd", agent.cmd, "--log-dir",
                           str(logs)], cwd=str(workspace), env=dict(os.environ, **agent.env),
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, preexec_fn=small_disk, timeout=60)
    err = proc.stderr.decode()
    assert proc.returncode == 0 and agent.calls == 3, err  # the loop went on
    assert err.count("cannot write the session log (File too large); logging stops here") == 1
    assert re.search(r"\] Log: .*session-\d{8}-\d{6}\.log \(incomplete: File too large\)\n", err)
    [log] = logs_in(logs)
    with open(log[:-4] + ".jsonl", "rb") as stream:
        raw = stream.read()
    assert raw.endswith(b"\n")
    assert all(json.loads(line) for line in raw.splitlines())  # every line whole


def test_a_jsonl_line_cut_short_by_a_full_disk_is_taken_back(tmp_path):
    import sys

    from conftest import ROOT

    code = r'''
import resource, sys
sys.path.insert(0, sys.argv[1])
import rooda
log = rooda.SessionLog(sys.argv[2], "logs")
warnings = []
log.warn = warnings.append
log.event("session_start", procedure="build")
resource.setrlimit(resource.RLIMIT_FSIZE, (log.jsonl_size + 100, log.jsonl_size + 100))
log.event("iteration_start", fragments=["x" * 500])   # would cross the limit mid-line
log.event("iteration_end", iteration=1)                # logging has stopped: not written
print(len(warnings), log.problem)
'''
    done = subprocess.run([sys.executable, "-c", code, ROOT, str(tmp_path / "logs")],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=30)
    assert done.returncode == 0, done.stderr
    assert done.stdout.decode().split()[0] == "1"
    [log] = logs_in(tmp_path / "logs")
    with open(log[:-4] + ".jsonl", "rb") as stream:
        lines = stream.read().splitlines(keepends=True)
    assert [json.loads(line)["event"] for line in lines] == ["session_start"]
    assert lines[-1].endswith(b"\n")
