"""Agent output formats (SPEC 12): the real structured output of six CLIs, replayed
through the fake agent with the exit code each CLI gave, must give the right outcome,
signals, reason and usage. The expected figures were read off the samples by hand."""
import json
import os
import subprocess
import sys

import pytest

import rooda
from conftest import (OK_RESULT, ROODA, STREAMS, ends, events_line, progress_lines, replay, run_build, run_main,
                      say, session_events, write_config)



def run_stream(capfd, agent, steps, agent_format, *args):
    """Run `build` on the replayed streams: (exit code, stdout, stderr, jsonl events)."""
    agent.script(*steps)
    return run_build(capfd, agent, "--ai-format", agent_format, *args)


def usage(**known):
    """An iteration's usage as iteration_end reports it: the figures, and whether partial."""
    figures = dict.fromkeys(rooda.USAGE_FIELDS, None)
    figures.update(partial=False, **known)
    return figures


# --- good runs: the outcome and the usage of each CLI --------------------------------------

GOOD_RUNS = [
    ("claude.jsonl", "claude", usage(model="claude-opus-4-8[1m]", input_tokens=39210, output_tokens=20,
                                     cache_read_tokens=0, cache_write_tokens=0, cost_usd=0.19655,
                                     turns=2, tool_calls=1)),
    ("claude-stream-api-retry.jsonl", "claude",
     usage(model="claude-opus-4-8[1m]", input_tokens=39056, output_tokens=11, cache_read_tokens=0,
           cache_write_tokens=0, cost_usd=0.195555, turns=1, tool_calls=0)),
    ("codex.jsonl", "codex", usage(input_tokens=20378, cache_read_tokens=0, cache_write_tokens=0,
                                   output_tokens=24, tool_calls=1)),
    ("gemini.jsonl", "gemini", usage(model="gemini-3.5-flash-lite, gemini-3.8-flash", input_tokens=25333,
                                     output_tokens=36, cache_read_tokens=0, tool_calls=1)),
    ("copilot.jsonl", "copilot", usage(model="stub-model", turns=2, tool_calls=1)),
    ("opencode.jsonl", "opencode", usage(input_tokens=15661, output_tokens=24, cache_read_tokens=0,
                                         cache_write_tokens=0, cost_usd=0, turns=2, tool_calls=1)),
    ("qwen.jsonl", "claude", usage(model="stub-model", input_tokens=39841, output_tokens=24,
                                   cache_read_tokens=0, turns=2, tool_calls=1)),
]


@pytest.mark.parametrize("sample,agent_format,expected", GOOD_RUNS, ids=[r[0] for r in GOOD_RUNS])
def test_a_good_run_of_each_cli_completes_with_its_usage(workspace, agent, capfd, sample,
                                                         agent_format, expected):
    code, _, err, events = run_stream(capfd, agent, [replay(sample)], agent_format, "-n", "3")
    assert code == 0 and agent.calls == 1, err
    [end] = ends(events)
    assert end["outcome"] == "completed" and end["signals"] == ["SUCCESS"]
    assert end["usage"] == expected
    totals = dict(expected)
    del totals["partial"]  # (an iteration's usage is partial or not; the run's totals are sums)
    assert events[-1]["usage"] == totals  # one iteration
    assert "WARNING" not in err


def test_the_progress_line_and_the_closing_line_carry_tokens_and_cost(workspace, agent, capfd):
    code, _, err, _ = run_stream(capfd, agent, [replay("claude.jsonl")], "claude")
    lines = progress_lines(err)
    assert "Iteration 1/10 completed in D (completed) · 39.2k tokens · $0.20" in lines
    assert lines[-1] == "Completed: agent signalled SUCCESS (1 iteration, total: D) · 39.2k tokens · $0.20"


# --- signals come only from the assistant's text ----------------------------------------------

def test_a_signal_in_a_tool_result_does_not_complete_a_structured_run(workspace, agent, capfd):
    """claude-stream.jsonl: the marker is in a file the agent read and in a Bash echo,
    never in its own text."""
    code, _, err, events = run_stream(capfd, agent, [replay("claude-stream.jsonl")],
                                      "claude", "-n", "1")
    assert code == 0
    [end] = ends(events)
    assert end["outcome"] == "success" and end["signals"] == []
    assert end["usage"] == usage(model="claude-opus-4-8[1m]", input_tokens=78733, output_tokens=40,
                                 cache_read_tokens=0, cache_write_tokens=0, cost_usd=0.39466500000000004,
                                 turns=4, tool_calls=3)
    assert progress_lines(err)[-1].startswith("Reached max iterations: 1")


def test_the_same_agent_read_as_text_would_complete(workspace, agent, capfd):
    code, _, err, events = run_stream(capfd, agent, [replay("claude-stream.jsonl")],
                                      "text", "-n", "3")
    assert code == 0 and agent.calls == 1
    assert ends(events)[0]["outcome"] == "completed"  # the false completion SPEC 12 prevents


def test_gemini_deltas_are_joined_so_a_split_marker_counts(workspace, agent, capfd):
    with open(os.path.join(STREAMS, "gemini.jsonl")) as stream:
        assert "<promise>SUCC" in stream.read()  # the sample splits the marker in two events
    code, _, _, events = run_stream(capfd, agent, [replay("gemini.jsonl")], "gemini")
    assert ends(events)[0]["signals"] == ["SUCCESS"]


def test_the_echo_guard_still_applies_to_the_assistants_text(workspace, agent, capfd):
    (workspace / "f.md").write_text("When done, print <promise>SUCCESS</promise> as the last line.")
    write_config(workspace, {"procedures": {"p": {p: "f.md" for p in ("observe", "orient", "decide", "act")}}})
    echo = {"type": "assistant", "message": {"content": [{"type": "text", "text":
            "Quoting my orders:\nWhen done, print <promise>SUCCESS</promise> as the last line."}]}}
    result = {"type": "result", "subtype": "success", "is_error": False, "result": "ok"}
    agent.script({"actions": [{"out": json.dumps(echo) + "\n" + json.dumps(result) + "\n"}]})
    code, _, err = run_main(capfd, "p", "-n", "1", "--ai-cmd", agent.cmd, "--ai-format", "claude")
    assert "(success)" in err and "(completed)" not in err


# --- errors the CLIs report --------------------------------------------------------------------

def test_a_reported_error_is_a_failure_whatever_the_exit_code(workspace, agent, capfd):
    code, _, err, events = run_stream(capfd, agent, [replay("claude-stream-max-budget.jsonl", 0)],
                                      "claude", "-n", "1")
    [end] = ends(events)
    assert (end["outcome"], end["cause"], end["exit_code"]) == ("failure", "error", 0)
    # (its typed kind shown beside the cause: SPEC 13 rev 5)
    assert end["reason"] == "error (error_max_budget_usd): Reached maximum budget ($0.0001)"
    assert end["error_kind"] == "error_max_budget_usd"
    assert "  error (error_max_budget_usd): Reached maximum budget ($0.0001)" in err


def test_an_interrupted_claude_run_is_a_failure_with_its_diagnostic(workspace, agent, capfd):
    code, _, _, events = run_stream(capfd, agent, [replay("claude-stream-sigint.jsonl", 1)],
                                    "claude", "-n", "1")
    [end] = ends(events)
    assert end["outcome"] == "failure"
    assert end["reason"] == "error (error_during_execution): [ede_diagnostic] result_type=user" \
        " last_content_type=n/a stop_reason=tool_use"
    assert end["usage"]["cost_usd"] == 0.09789


def test_claude_exiting_0_without_a_result_is_a_failure(workspace, agent, capfd):
    """Claude Code interrupted during a model call prints nothing more and exits 0."""
    with open(os.path.join(STREAMS, "claude-stream.jsonl")) as stream:
        cut = "".join(stream.readlines()[:3])
    (workspace / "cut.jsonl").write_text(cut)
    agent.script({"actions": [{"out_file": str(workspace / "cut.jsonl")}]})
    code, _, err = run_main(capfd, "build", "-n", "1", "--ai-cmd", agent.cmd, "--ai-format", "claude")
    assert "Iteration 1/1 completed in D (failure, consecutive: 1/3) · 19.5k tokens (partial)" \
        in progress_lines(err)
    assert "  error: the agent ended without its closing result event" in err


def test_a_run_cut_short_after_a_cli_notice_gives_that_notice_as_the_reason(workspace, agent, capfd):
    """codex retries in `error` events; if it then dies, its last retry is the only clue --
    here a stream that kept disconnecting, an outage (SPEC 15)."""
    lines = [{"type": "thread.started", "thread_id": "t"}, {"type": "turn.started"},
             {"type": "error", "message": "Reconnecting... 5/5 (stream disconnected before completion)"}]
    (workspace / "cut.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    agent.script({"actions": [{"out_file": str(workspace / "cut.jsonl")}], "exit": 1})
    write_config(workspace, {"loop": {"outage_wait": 0}})
    code, _, err = run_main(capfd, "build", "-n", "1", "--ai-cmd", agent.cmd, "--ai-format", "codex")
    assert code == 4 and "Iteration 1/1 completed in D (unavailable)" in progress_lines(err)
    assert "  outage: Reconnecting... 5/5 (stream disconnected before completion)" in err


def test_codex_warnings_in_error_items_are_not_failures(workspace, agent, capfd):
    code, _, err, events = run_stream(capfd, agent, [replay("codex.jsonl")], "codex", "-v")
    assert ends(events)[0]["outcome"] == "completed"


def test_the_log_gives_only_the_token_counts_the_cli_reported(workspace, agent, capfd):
    code, _, _, events = run_stream(capfd, agent, [replay("gemini.jsonl")], "gemini")
    with open(events[0]["log"]) as stream:  # Gemini reports no cache writes: not "cache write 0"
        assert "\nTokens: 25369 (input 25333, output 36, cache read 0)\n" in stream.read()


# --- what people see: readable lines, never JSON; the raw stream kept -------------------------

def test_verbose_and_the_log_are_readable_and_the_raw_lines_are_kept(workspace, agent, capfd):
    code, out, err, events = run_stream(capfd, agent, [replay("claude-stream.jsonl")],
                                        "claude", "-n", "1", "-v")
    assert not [line for line in out.splitlines() if line.lstrip().startswith("{")]
    assert "Reading the notes first." in out
    assert "→ Read: /tmp/cc-inv/q1sj/repo/NOTES.md" in out  # recorded in another directory
    assert "→ Bash: echo 'bash says <promise>SUCCESS</promise>'; cat out.txt" in out
    assert "usage: 4 turns · 3 tool calls · 78.8k tokens · $0.39 · claude-opus-4-8[1m]" in out
    log = events[0]["log"]
    with open(log) as stream:
        text = stream.read()
    assert "→ Bash: " in text and '{"type"' not in text
    assert "Model: claude-opus-4-8[1m]\nAPI Requests: 4\nTokens: 78773" in text
    assert "Cost: $0.3947" in text
    with open(log[:-4] + "-agent.jsonl", "rb") as stream:
        raw = stream.read()
    with open(os.path.join(STREAMS, "claude-stream.jsonl"), "rb") as stream:
        assert raw == stream.read()


def test_a_failed_tool_result_is_shown_with_its_first_line(workspace, agent, capfd):
    code, out, _, _ = run_stream(capfd, agent, [replay("claude-stream-sigint.jsonl", 1)],
                                 "claude", "-n", "1", "-v")
    assert "→ Bash: sleep 31.5; echo done > after.txt" in out
    assert "  ✗ The user doesn't want to proceed with this tool use." in out


def test_a_stream_with_no_event_of_its_format_is_judged_as_text_with_a_warning(workspace, agent, capfd):
    agent.script({"actions": [{"out": "plain words\n<promise>SUCCESS</promise>\n"}]})
    code, out, err = run_main(capfd, "build", "-n", "3", "-v", "--ai-cmd", agent.cmd, "--ai-format", "codex")
    assert code == 0 and agent.calls == 1
    assert "held no codex events; it was judged as text" in err
    assert "Completed: agent signalled SUCCESS" in err and "plain words" in out


def test_a_line_that_is_not_json_is_the_clis_own_text(workspace, agent, capfd):
    with open(os.path.join(STREAMS, "codex.jsonl")) as stream:
        lines = stream.read()
    (workspace / "mixed.jsonl").write_text("Reading prompt from stdin...\n" + lines)
    agent.script({"actions": [{"out_file": str(workspace / "mixed.jsonl")}]})
    code, out, err = run_main(capfd, "build", "-n", "2", "-v", "--ai-cmd", agent.cmd, "--ai-format", "codex")
    assert code == 0 and "Reading prompt from stdin..." in out


def test_a_line_over_16_mib_is_dropped_with_one_warning(workspace, agent, capfd, tmp_path):
    big = tmp_path / "big.jsonl"
    with open(str(big), "w") as stream:
        stream.write('{"type":"user","message":{"content":"%s"}}\n' % ("x" * (17 << 20)))
        stream.write('{"type":"user","message":{"content":"%s"}}\n' % ("y" * (17 << 20)))
        with open(os.path.join(STREAMS, "claude.jsonl")) as sample:
            stream.write(sample.read())
    agent.script({"actions": [{"out_file": str(big)}]})
    code, _, err = run_main(capfd, "build", "-n", "1", "--ai-cmd", agent.cmd, "--ai-format", "claude")
    assert code == 0 and "Completed: agent signalled SUCCESS" in err
    assert err.count("the agent wrote a line over 16 MiB; it was dropped") == 1


def test_memory_stays_flat_on_a_huge_structured_line(workspace, agent):
    script = ("import sys; w = sys.stdout.write; w('{\"type\":\"user\",\"x\":\"'); "
              "[w('z' * 65536) for _ in range(3200)]; w('\"}\\n'); "
              "w('{\"type\":\"assistant\",\"message\":{\"content\":[{\"type\":\"text\",\"text\":"
              "\"<promise>SUCCESS</promise>\"}]}}\\n{\"type\":\"result\",\"is_error\":false}\\n')")
    proc = subprocess.Popen([sys.executable, ROODA, "build", "-n", "1", "-q", "--no-log", "--ai-format",
                             "claude", "--ai-cmd", "%s -c \"%s\"" % (sys.executable, script)],
                            cwd=str(workspace), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    _, status, resources = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status) if hasattr(os, "waitstatus_to_exitcode") else status >> 8
    err = proc.stderr.read().decode()
    assert proc.returncode == 0, err
    assert resources.ru_maxrss < 120 * 1024, "peak RSS %d KiB for a 200 MB line" % resources.ru_maxrss


# --- formats, presets and precedence ---------------------------------------------------------

def test_the_format_comes_from_flag_procedure_loop_alias_then_preset(workspace, capfd):
    config = rooda.load_config()
    assert rooda.resolve_agent(config, None, "claude -p", None).format == "text"
    assert rooda.resolve_agent(config, None, "claude -p --output-format stream-json --verbose").format == "claude"
    assert rooda.resolve_agent(config, None, None, "qwen").format == "claude"
    assert rooda.resolve_agent(config, None, None, "claude", "text").format == "text"
    write_config(workspace, {"loop": {"ai_format": "gemini"},
                             "ai_cmd_aliases": {"mine": {"command": "my-agent --json", "format": "codex",
                                                         "env": {"MY_TOKEN": "x"}}},
                             "procedures": {"build": {"ai_format": "copilot"}}})
    config = rooda.load_config()
    assert rooda.resolve_agent(config, "build", None, "mine").format == "copilot"
    assert rooda.resolve_agent(config, None, None, "mine").format == "gemini"
    write_config(workspace, {"ai_cmd_aliases": {"mine": {"command": "my-agent --json", "format": "codex",
                                                         "env": {"MY_TOKEN": "x"}}}})
    mine = rooda.resolve_agent(rooda.load_config(), None, None, "mine")
    assert (mine.format, mine.env, mine.argv) == ("codex", {"MY_TOKEN": "x"}, ["my-agent", "--json"])


def test_max_cost_stops_the_run_once_the_summed_cost_reaches_it(workspace, agent, capfd):
    code, _, err, events = run_stream(capfd, agent, [replay("claude-stream.jsonl")], "claude",
                                      "-n", "10", "--max-cost", "0.5")
    assert code == 0 and agent.calls == 2
    assert progress_lines(err)[-1] == \
        "Completed: cost budget of $0.50 reached (2 iterations, total: D) · 157.5k tokens · $0.79"
    assert events[-1]["status"] == "completed" and events[-1]["usage"]["cost_usd"] == pytest.approx(0.78933)


@pytest.mark.parametrize("agent_format", ["text", "codex", "gemini", "copilot"])
def test_max_cost_with_a_format_that_reports_no_cost_is_a_warning(workspace, agent, capfd, agent_format):
    code, _, err = run_main(capfd, "build", "-n", "1", "--ai-cmd", agent.cmd, "--ai-format", agent_format,
                            "--max-cost", "5")
    assert "WARNING: max_cost is set, but the agent's output (%s format) reports no cost" % agent_format in err


def test_the_reader_counts_tool_calls_and_shortens_paths_under_the_working_directory(workspace):
    shown = []
    def scanner():
        return rooda.SignalScanner({"SUCCESS": ["<promise>SUCCESS</promise>"]}, "")
    reader = rooda.EventReader("claude", scanner(), rooda.TextReader(scanner(), None, None, None, 65536),
                               shown.append, None, None, None, "/tmp/cc-inv/q1sj/repo", lambda message: None)
    with open(os.path.join(STREAMS, "claude-stream.jsonl"), "rb") as stream:
        data = stream.read()
    for start in range(0, len(data), 1000):  # reads that cut lines anywhere
        reader.feed(data[start:start + 1000])
    assert (reader.tool_calls, reader.last_tool) == (3, "Bash: echo 'bash says <promise>SUCCESS</promise>';"
                                                        " cat out.txt")
    text = b"".join(shown).decode()
    assert "→ Read: NOTES.md\n→ Write: out.txt\n" in text


# --- found running the real CLIs through rooda ------------------------------------------

@pytest.mark.parametrize("decode,event,expected", [
    (rooda.decode_codex, {"type": "turn.completed", "usage": {"input_tokens": 20000, "cached_input_tokens": 15000,
                                                            "output_tokens": 30}},
     {"input_tokens": 5000, "cache_read_tokens": 15000, "output_tokens": 30}),
    (rooda.decode_gemini, {"type": "result", "status": "success", "stats": {
        "total_tokens": 27238, "input_tokens": 27200, "output_tokens": 38, "cached": 13600}},
     {"input_tokens": 13600, "cache_read_tokens": 13600, "output_tokens": 38}),
    (rooda.decode_claude, {"type": "result", "is_error": False, "result": "ok", "usage": {   # Qwen Code
        "input_tokens": 41000, "output_tokens": 111, "cache_read_input_tokens": 20543, "total_tokens": 41111}},
     {"input_tokens": 20457, "cache_read_tokens": 20543, "output_tokens": 111}),
    (rooda.decode_claude, {"type": "result", "is_error": False, "result": "ok", "usage": {   # Claude Code
        "input_tokens": 100, "output_tokens": 10, "cache_read_input_tokens": 5000}},
     {"input_tokens": 100, "cache_read_tokens": 5000, "output_tokens": 10}),
])
def test_cached_input_tokens_are_counted_once(decode, event, expected):
    [(kind, figures, _, _)] = [e for e in decode(event) if e[0] == rooda.EV_USAGE]
    assert {key: figures.get(key) for key in expected} == expected
    assert rooda.total_tokens(figures) == sum(expected.values())


def test_no_blank_line_before_the_usage_line_after_deltas(workspace, agent, capfd):
    code, out, _, _ = run_stream(capfd, agent, [replay("gemini.jsonl")], "gemini", "-v")
    assert "<promise>SUCCESS</promise>\nusage: " in out


def test_an_error_said_twice_is_shown_once(workspace, agent, capfd):
    write_config(workspace, {"loop": {"on_limit": "stop"}})
    code, out, _, _ = run_stream(capfd, agent, [replay("claude-stream-usage-limit.jsonl", 1)],
                                 "claude", "-v")
    assert out.count("✗ error: You've hit your session limit") == 1


def test_an_interrupted_iterations_usage_is_in_the_runs_totals(workspace, agent, tmp_path):
    import signal as signals
    from conftest import interrupt, start_rooda

    partial = [json.loads(line) for line in open(os.path.join(STREAMS, "claude.jsonl"))][:-1]
    result = {"type": "result", "subtype": "success", "is_error": False, "result": "working",
              "total_cost_usd": 0.25, "num_turns": 1, "usage": {"input_tokens": 100, "output_tokens": 5}}
    (workspace / "partial.jsonl").write_text("".join(json.dumps(e) + "\n" for e in partial + [result]))
    agent.script({"actions": [{"out_file": str(workspace / "partial.jsonl")}, {"touch": "ready"},
                              {"sleep": 60}]})
    logs = tmp_path / "logs"
    proc = start_rooda(agent, "--ai-format", "claude", "--log-dir", logs, cwd=workspace)
    agent.wait_for("ready")
    interrupt(proc, signals.SIGINT)
    events = session_events(logs)
    assert ends(events)[0]["outcome"] == "interrupted"
    assert events[-1]["usage"]["cost_usd"] == 0.25 == ends(events)[0]["usage"]["cost_usd"]


# --- moved from the review round's edge cases: each went wrong once ---------------------

def test_a_subagents_success_is_not_the_agents(workspace, agent, capfd):
    sub = say("The task says: print <promise>SUCCESS</promise> when all is done.",
              parent_tool_use_id="toolu_1")
    agent.script({"actions": [{"out": events_line(sub, say("Still working."), OK_RESULT)}]})
    code, out, err = run_main(capfd, "build", "-n", "1", "-v", "--ai-cmd", agent.cmd, "--ai-format", "claude")
    assert "(success)" in err and "Completed" not in err
    assert "· sub-agent: The task says" in out


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


# --- issue 22: defects of revision 2, each once seen ------------------------------------

def test_a_lone_surrogate_in_an_event_neither_ends_the_run_nor_its_logs(workspace, agent, capfd):
    """Item 1: `"\\ud83d"` (half an emoji) is valid JSON that UTF-8 cannot encode."""
    half = '{"type": "assistant", "message": {"content": [{"type": "text", "text": "half \\ud83d an emoji"}]}}\n'
    tool = half.replace('"text", "text"', '"tool_use", "name": "Bash", "input": {"command": "echo \\ud83d"}, "x"')
    step = {"actions": [{"out": half + tool + events_line(say("<promise>SUCCESS</promise> now"), OK_RESULT)}]}
    code, _, err, events = run_stream(capfd, agent, [step], "claude", "-n", "2", "-v")
    assert code == 0 and "Traceback" not in err, err
    assert events[-1]["event"] == "session_end" and events[-1]["status"] == "completed"


def test_token_counts_past_float_range_are_no_traceback(workspace, agent, capfd):
    """Item 2: 1e308 tokens twice add up to infinity."""
    huge = dict(OK_RESULT, usage={"input_tokens": 1e308, "output_tokens": 1e308})
    code, _, err, events = run_stream(capfd, agent, [{"actions": [{"out": events_line(huge)}]}],
                                      "claude", "-n", "2")
    assert code == 0 and "Traceback" not in err, err
    assert events[-1]["event"] == "session_end" and events[-1]["iterations"] == 2


def test_an_integer_too_large_for_a_float_is_no_traceback(workspace, agent, capfd):
    """(Item 2's cousin, found in review: JSON has integers of 400 digits too.)"""
    huge = '{"type": "result", "subtype": "success", "is_error": false, "result": "ok", "usage": {"input_tokens": %s}}\n'
    code, _, err, events = run_stream(capfd, agent, [{"actions": [{"out": huge % ("9" * 400)}]}],
                                      "claude", "-n", "2")
    assert code == 0 and "Traceback" not in err, err
    assert events[-1]["event"] == "session_end" and events[-1]["iterations"] == 2


def test_ten_iterations_of_ten_cents_reach_a_one_dollar_budget(workspace, agent, capfd):
    """Item 6: the float sum of ten 0.1s is 0.9999999999999999, which ran an eleventh."""
    ten_cents = {"actions": [{"out": events_line(say("part"), dict(OK_RESULT, total_cost_usd=0.1))}]}
    code, _, err, events = run_stream(capfd, agent, [ten_cents], "claude", "-n", "20",
                                      "--max-cost", "1")
    assert code == 0 and agent.calls == 10, err
    assert "Completed: cost budget of $1.00 reached (10 iterations" in err
    assert events[-1]["usage"]["cost_usd"] == 1.0


@pytest.mark.parametrize("sample,judged", [("gemini.jsonl", "success"), ("copilot.jsonl", "completed")])
def test_another_clis_stream_read_as_claude_is_text_with_a_warning(workspace, agent, capfd, sample,
                                                                   judged):
    """Item 15: any `{"type": "result"}` line passed for Claude output; the SUCCESS in
    copilot's stream was never seen."""
    code, _, err, events = run_stream(capfd, agent, [replay(sample)], "claude", "-n", "1")
    assert "WARNING: the agent's output held no claude events; it was judged as text" in err
    assert [e["outcome"] for e in events if e["event"] == "iteration_end"] == [judged]


def test_a_megabyte_heredoc_command_is_shown_from_a_bounded_prefix(workspace, agent, capfd,
                                                                  monkeypatch):
    """Item 18: shlex.split is quadratic on one long token; a 1 MB heredoc stalled the loop."""
    import shlex

    command = "/bin/bash -lc \"cat > big.txt <<'EOF'\n%s\nEOF\"" % ("x" * (1 << 20))
    item = {"type": "item.started", "item": {"id": "1", "type": "command_execution", "command": command,
                                             "status": "in_progress"}}
    split, lengths = shlex.split, []
    monkeypatch.setattr(shlex, "split", lambda text, *a, **k: lengths.append(len(text)) or split(text, *a, **k))
    code, _, err, _ = run_stream(capfd, agent, [{"actions": [{"out": events_line(item)}]}], "codex",
                                 "-n", "1")
    assert lengths and max(lengths) <= 65536, lengths
    assert "Traceback" not in err
