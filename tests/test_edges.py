"""Edge cases found by reviewing the structured-output, limit and status work: each test
is a case that went wrong once (a traceback, a wrong outcome, a slow exit)."""
import json
import os
import signal
import subprocess
import sys

import rooda
from conftest import ROODA, progress_lines, run_main, run_rooda, write_config


def events_line(*events):
    return "".join(json.dumps(event) + "\n" for event in events)


OK_RESULT = {"type": "result", "subtype": "success", "is_error": False, "result": "done",
             "total_cost_usd": 0.1, "num_turns": 1, "usage": {"input_tokens": 10, "output_tokens": 2}}


SUCCESS_STEP = {"actions": [{"out": "done\n<promise>SUCCESS</promise>\n"}]}


def say(text, **more):
    return dict({"type": "assistant", "message": {"content": [{"type": "text", "text": text}]}}, **more)


# --- limits and credentials ------------------------------------------------------------

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


def test_a_subagents_success_is_not_the_agents(workspace, agent, capfd):
    sub = say("The task says: print <promise>SUCCESS</promise> when all is done.",
              parent_tool_use_id="toolu_1")
    agent.script({"actions": [{"out": events_line(sub, say("Still working."), OK_RESULT)}]})
    code, out, err = run_main(capfd, "build", "-n", "1", "-v", "--ai-cmd", agent.cmd, "--ai-format", "claude")
    assert "(success)" in err and "Completed" not in err
    assert "· sub-agent: The task says" in out


# --- hostile or odd structured output ------------------------------------------------------

def test_deeply_nested_or_infinite_json_never_ends_the_run(workspace, agent, capfd):
    strange = {"type": "result", "subtype": "success", "is_error": True, "api_error_status": 1e999,
               "num_turns": 1e999, "result": "boom"}
    agent.script({"actions": [{"out": "[" * 100000 + "\n" + json.dumps(strange).replace(
        "Infinity", "1e999") + "\n"}], "exit": 1}, {})
    code, out, err = run_main(capfd, "build", "-n", "2", "--ai-cmd", agent.cmd, "--ai-format", "claude")
    assert code == 0 and agent.calls == 2 and "Traceback" not in err
    assert "Iteration 1/2 completed in D (failure, consecutive: 1/3)" in progress_lines(err)


def test_the_reason_of_a_structured_failure_is_the_agents_words_not_the_usage_line(workspace, agent, capfd):
    agent.script({"actions": [{"out": events_line(say("Blocked: no database.\n<promise>FAILURE</promise>"),
                                                  OK_RESULT)}]})
    code, _, err = run_main(capfd, "build", "-n", "1", "--ai-cmd", agent.cmd, "--ai-format", "claude")
    assert "  agent: Blocked: no database." in err.splitlines()


def test_the_feedback_tail_of_a_structured_agent_is_bounded(workspace, agent, capfd):
    write_config(workspace, {"loop": {"max_output_buffer": 4096}})
    agent.script({"actions": [{"out": events_line(say("x" * 200000), {"type": "result", "is_error": True,
                                                                      "result": "failed"})}], "exit": 1}, {})
    run_main(capfd, "build", "-n", "2", "--ai-cmd", agent.cmd, "--ai-format", "claude")
    section = agent.prompt(2).split("## PREVIOUS ITERATION")[1].split("## OBSERVE")[0]
    assert len(section) < 3000


# --- closed and slow streams ---------------------------------------------------------------

def test_verbose_with_stdout_closed_warns_once_and_goes_on(workspace, agent):
    agent.script({"actions": [{"out": "hello\n"}]})
    proc = subprocess.run([sys.executable, ROODA, "build", "-n", "2", "-v", "--no-log", "--ai-cmd", agent.cmd],
                          cwd=str(workspace), env=dict(os.environ, **agent.env), stdout=subprocess.DEVNULL,
                          stderr=subprocess.PIPE, timeout=60, preexec_fn=lambda: os.close(1))
    err = proc.stderr.decode()
    assert proc.returncode == 0 and "Traceback" not in err, err
    assert err.count("stdout is closed; agent output is no longer shown") == 1


def test_a_signal_in_the_last_moment_of_a_run_still_ends_it_as_interrupted(workspace, agent, capfd,
                                                                          monkeypatch):
    """SIGTERM after the last iteration's checks, as the run closes: not lost, not "Completed"."""
    agent.script(SUCCESS_STEP)
    info = rooda.Progress.info

    def info_then_signal(progress, message):
        info(progress, message)
        if message.startswith("Iteration 1/1 completed"):
            os.kill(os.getpid(), signal.SIGTERM)  # rooda's own handler records it
    monkeypatch.setattr(rooda.Progress, "info", info_then_signal)
    code, _, err = run_main(capfd, "build", "-n", "1", "--ai-cmd", agent.cmd)
    assert code == 143, err
    assert "Interrupted by SIGTERM between iterations (1 iteration completed" in err
    assert "Completed" not in err


def test_prompt_from_a_closed_stdin_is_one_clear_error(workspace, agent):
    proc = subprocess.run([sys.executable, ROODA, "prompt", "-", "--ai-cmd", agent.cmd], cwd=str(workspace),
                          env=dict(os.environ, **agent.env), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          timeout=30, preexec_fn=lambda: os.close(0))
    assert proc.returncode == 2 and b"prompt -: standard input is closed" in proc.stderr
    assert b"Traceback" not in proc.stderr


# --- the library and status ----------------------------------------------------------------

def test_run_agent_in_another_directory_leaves_the_callers_alone(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    seen = []
    rooda.run_agent(["pwd"], "", cwd="/", on_stdout=seen.append)
    assert b"".join(seen) == b"/\n" and os.getcwd() == str(tmp_path)


def test_status_survives_lines_of_the_wrong_shape(workspace, tmp_path):
    logs = tmp_path / "logs"
    logs.mkdir()
    lines = [{"event": "session_start", "time": "2026-11-24T10:00:00.000Z", "pid": "x", "max_iterations": "y"},
             {"event": "iteration_end", "time": "2026-11-24T10:05:00.000Z", "outcome": "success", "usage": [1]},
             {"event": 7, "time": "2026-11-24T10:06:00.000Z"},
             ["not", "an", "object"],
             {"event": "iteration_end", "time": "not a time"}]
    (logs / "session-20261124-100000.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    proc = run_rooda("status", "--json", "--log-dir", str(logs), cwd=str(workspace))
    assert proc.returncode == 0 and b"Traceback" not in proc.stderr, proc.stderr
    summary = json.loads(proc.stdout.decode())
    assert summary["skipped_lines"] == 3 and summary["state"] == "killed" and summary["iterations"] == 1
    assert summary["elapsed_seconds"] == 300.0  # a killed run lasted until its last event
    ended = lines[:2] + [{"event": "session_end", "time": "2026-11-24T10:07:00.000Z", "iterations": None,
                          "seconds": "long", "status": "completed", "exit_code": 0}]
    (logs / "session-20261124-100000.jsonl").write_text("".join(json.dumps(line) + "\n" for line in ended))
    proc = run_rooda("status", "--log-dir", str(logs), cwd=str(workspace))
    assert proc.returncode == 0 and b"ended: completed, exit code 0" in proc.stdout, proc.stderr
