"""The iteration loop of seed 000 / SPEC 5, driven in-process with the fake agent."""
import pytest

import rooda

from conftest import progress_lines, run_build, run_main, write_config

OK = {}
FAIL = {"exit": 1}
SUCCESS_SIGNAL = {"actions": [{"out": "done\n<promise>SUCCESS</promise>\n"}]}
FAILURE_SIGNAL = {"actions": [{"out": "blocked\n<promise>FAILURE</promise>\n"}]}


# --- the outcome matrix: one test per row -----------------------------------------

def test_exit_0_without_signal_is_success_and_the_loop_goes_on(workspace, agent, capfd):
    agent.script(OK)
    code, _, err, _ = run_build(capfd, agent, "-n", "2")
    assert code == 0 and agent.calls == 2
    assert "Iteration 1/2 completed in D (success)" in progress_lines(err)


def test_exit_0_with_success_signal_completes(workspace, agent, capfd):
    agent.script(SUCCESS_SIGNAL)
    code, _, err, _ = run_build(capfd, agent, "-n", "5")
    assert code == 0 and agent.calls == 1
    assert progress_lines(err)[-1] == "Completed: agent signalled SUCCESS (1 iteration, total: D)"


def test_exit_0_with_failure_signal_counts_as_failure(workspace, agent, capfd):
    agent.script(FAILURE_SIGNAL, OK)
    code, _, err, _ = run_build(capfd, agent, "-n", "2")
    assert code == 0
    lines = progress_lines(err)
    assert "Iteration 1/2 completed in D (failure, consecutive: 1/3)" in lines
    assert "Iteration 2/2 completed in D (success)" in lines


def test_nonzero_exit_without_signal_counts_as_failure(workspace, agent, capfd):
    agent.script(FAIL, OK)
    code, _, err, _ = run_build(capfd, agent, "-n", "2")
    assert code == 0
    assert "Iteration 1/2 completed in D (failure, consecutive: 1/3)" in progress_lines(err)


def test_nonzero_exit_with_success_signal_completes_because_the_signal_wins(workspace, agent, capfd):
    agent.script(dict(SUCCESS_SIGNAL, exit=7))
    code, _, err, _ = run_build(capfd, agent, "-n", "5")
    assert code == 0 and agent.calls == 1
    assert "Iteration 1/5 completed in D (completed)" in progress_lines(err)


def test_nonzero_exit_with_failure_signal_counts_as_failure(workspace, agent, capfd):
    agent.script(dict(FAILURE_SIGNAL, exit=3), OK)
    code, _, err, _ = run_build(capfd, agent, "-n", "2")
    assert "Iteration 1/2 completed in D (failure, consecutive: 1/3)" in progress_lines(err)


def test_success_beats_failure_when_both_appear(workspace, agent, capfd):
    agent.script({"actions": [{"out": "<promise>FAILURE</promise>\n<promise>SUCCESS</promise>\n"}]})
    code, _, err, _ = run_build(capfd, agent, "-n", "5")
    assert code == 0 and agent.calls == 1
    assert "Completed: agent signalled SUCCESS" in progress_lines(err)[-1]


def test_signal_on_stderr_counts(workspace, agent, capfd):
    agent.script({"actions": [{"err": "<promise>SUCCESS</promise>\n"}]})
    code, _, _, _ = run_build(capfd, agent, "-n", "5")
    assert code == 0 and agent.calls == 1


# --- failure threshold ------------------------------------------------------------

def test_consecutive_failures_abort_with_exit_1(workspace, agent, capfd):
    agent.script(FAIL)
    code, _, err, _ = run_build(capfd, agent, "-n", "10")
    assert code == 1 and agent.calls == 3
    assert progress_lines(err)[-1] == \
        "ERROR: Aborting after 3 consecutive failures (3 iterations completed, total: D)"


def test_a_success_resets_the_consecutive_failures(workspace, agent, capfd):
    agent.script(FAIL, FAIL, OK, FAIL, FAIL, OK)
    code, _, err, _ = run_build(capfd, agent, "-n", "6")
    assert code == 0 and agent.calls == 6
    lines = progress_lines(err)
    assert "Iteration 4/6 completed in D (failure, consecutive: 1/3)" in lines
    assert lines[-2:] == ["Reached max iterations: 6 (total: D)",
                          "WARNING: 4 of 6 iterations failed; the last: exit 1, (it printed nothing)"]


def test_every_failing_iteration_says_why_in_an_indented_line(workspace, agent, capfd):
    agent.script({"actions": [{"out": "working\nKeyError: 'schema'\n"}], "exit": 1},
                 {}, {"actions": [{"write_file": "green", "text": ""}]})
    code, _, err, _ = run_build(capfd, agent, "-n", "3", "--no-verify-baseline", "--verify",
                       "test -f green || { echo 'E   assert 3 == 4'; exit 2; }")
    assert code == 0
    lines = err.splitlines()
    first = [i for i, line in enumerate(lines) if "Iteration 1/3 completed" in line][0]
    assert lines[first + 1] == "  verify exit 2: E   assert 3 == 4"  # the verifier's reason leads
    assert progress_lines(err)[-1] == \
        "WARNING: 2 of 3 iterations failed; the last: verify exit 2, E   assert 3 == 4"


def test_the_agents_reason_is_its_last_line_and_never_the_bare_marker(workspace, agent, capfd):
    agent.script({"actions": [{"out": "working\nKeyError: 'schema'\n"}], "exit": 1},
                 {"actions": [{"out": "blocked on the schema\n<promise>FAILURE</promise>\n"}]}, OK)
    code, _, err, _ = run_build(capfd, agent, "-n", "3")
    lines = err.splitlines()
    assert "  exit 1: KeyError: 'schema'" in lines
    assert "  agent: blocked on the schema" in lines
    assert progress_lines(err)[-2:] == [
        "Reached max iterations: 3 (total: D)",
        "WARNING: 2 of 3 iterations failed; the last: agent, blocked on the schema"]


def test_failure_threshold_flag(workspace, agent, capfd):
    agent.script(FAIL)
    code, _, _, _ = run_build(capfd, agent, "-n", "10", "--failure-threshold", "2")
    assert code == 1 and agent.calls == 2


def test_cap_1_threshold_1_failing_iteration_aborts(workspace, agent, capfd):
    agent.script(FAIL)
    code, _, err, _ = run_build(capfd, agent, "-n", "1", "--failure-threshold", "1")
    assert code == 1
    assert progress_lines(err)[-1].startswith("ERROR: Aborting after 1 consecutive failures")


def test_cap_1_succeeding_iteration_completes(workspace, agent, capfd):
    agent.script(OK)
    code, _, err, _ = run_build(capfd, agent, "-n", "1")
    assert code == 0
    assert progress_lines(err)[0] == "Starting procedure: build (max 1 iteration)"


# --- max-iterations precedence: --max-iterations > --unlimited > positional >
# --- procedure default_max_iterations > loop.default_max_iterations > built-in 5

@pytest.fixture
def precedence_config(workspace, agent):
    """A workspace config with a loop default of 6 and a procedure default of 3."""
    import rooda

    shipped = rooda.load_config().data["procedures"]["build"]
    phases = {phase: [f["path"] for f in shipped[phase]] for phase in ("observe", "orient", "decide", "act")}
    write_config(workspace, {
        "loop": {"default_max_iterations": 6},
        "procedures": {
            "with-default": dict(phases, default_max_iterations=3),
            "without-default": dict(phases),
        },
    })
    agent.script(OK)
    return agent


def test_max_iterations_flag_beats_everything(precedence_config, capfd):
    code, _, _ = run_main(capfd, "with-default", "4", "--unlimited", "--max-iterations", "2",
                          "--ai-cmd", precedence_config.cmd)
    assert code == 0 and precedence_config.calls == 2


def test_unlimited_beats_positional_and_config(precedence_config, capfd):
    precedence_config.script(OK, OK, OK, OK, OK, OK, OK, SUCCESS_SIGNAL)
    code, _, err = run_main(capfd, "with-default", "4", "--unlimited", "--ai-cmd", precedence_config.cmd)
    assert code == 0 and precedence_config.calls == 8
    lines = progress_lines(err)
    assert lines[0] == "Starting procedure: with-default (unlimited)"
    assert "Iteration 8 starting..." in lines


def test_positional_beats_procedure_default(precedence_config, capfd):
    code, _, _ = run_main(capfd, "with-default", "4", "--ai-cmd", precedence_config.cmd)
    assert code == 0 and precedence_config.calls == 4


def test_procedure_default_beats_loop_default(precedence_config, capfd):
    code, _, _ = run_main(capfd, "with-default", "--ai-cmd", precedence_config.cmd)
    assert code == 0 and precedence_config.calls == 3


def test_loop_default_beats_builtin(precedence_config, capfd):
    code, _, _ = run_main(capfd, "without-default", "--ai-cmd", precedence_config.cmd)
    assert code == 0 and precedence_config.calls == 6


def test_builtin_default_is_5(workspace, agent, capfd):
    import rooda

    shipped = rooda.load_config().data["procedures"]["build"]
    write_config(workspace, {"procedures": {"bare": {
        phase: [f["path"] for f in shipped[phase]] for phase in ("observe", "orient", "decide", "act")}}})
    code, _, err = run_main(capfd, "bare", "--ai-cmd", agent.cmd)
    assert code == 0 and agent.calls == 5
    assert progress_lines(err)[0] == "Starting procedure: bare (max 5 iterations)"


def test_zero_means_unlimited_positional_and_flag(workspace, agent, capfd):
    agent.script(OK, OK, SUCCESS_SIGNAL)
    code, _, err = run_main(capfd, "build", "0", "--ai-cmd", agent.cmd)
    assert code == 0 and agent.calls == 3
    assert progress_lines(err)[0] == "Starting procedure: build (unlimited)"


def test_iteration_mode_unlimited_in_procedure(workspace, agent, capfd):
    import rooda

    shipped = rooda.load_config().data["procedures"]["build"]
    phases = {phase: [f["path"] for f in shipped[phase]] for phase in ("observe", "orient", "decide", "act")}
    write_config(workspace, {"procedures": {"forever": dict(phases, iteration_mode="unlimited",
                                                            default_max_iterations=2)}})
    agent.script(OK, OK, OK, SUCCESS_SIGNAL)
    code, _, _ = run_main(capfd, "forever", "--ai-cmd", agent.cmd)
    assert code == 0 and agent.calls == 4


def test_shipped_build_default_is_10(workspace, agent, capfd):
    agent.script(SUCCESS_SIGNAL)
    code, _, err, _ = run_build(capfd, agent)
    assert code == 0
    assert progress_lines(err)[0] == "Starting procedure: build (max 10 iterations)"


# --- progress lines: seed 000's examples, apart from the clock ------------------------

def test_progress_lines_of_example_1_limited(workspace, agent, capfd):
    agent.script(OK)
    code, out, err, _ = run_build(capfd, agent, "--max-iterations", "3")
    assert code == 0 and out == ""
    assert progress_lines(err) == [
        "Starting procedure: build (max 3 iterations)",
        "Agent: %s (from --ai-cmd)" % agent.cmd,
        "Iteration 1/3 starting...",
        "Iteration 1/3 completed in D (success)",
        "Iteration 2/3 starting...",
        "Iteration 2/3 completed in D (success)",
        "Iteration 3/3 starting...",
        "Iteration 3/3 completed in D (success)",
        "Reached max iterations: 3 (total: D)",
    ]


def test_progress_lines_of_example_2_abort(workspace, agent, capfd):
    agent.script(OK, OK, OK, FAIL)
    code, _, err, _ = run_build(capfd, agent, "--max-iterations", "10")
    assert code == 1
    lines = progress_lines(err)
    assert lines[2:] == [
        "Iteration 1/10 starting...",
        "Iteration 1/10 completed in D (success)",
        "Iteration 2/10 starting...",
        "Iteration 2/10 completed in D (success)",
        "Iteration 3/10 starting...",
        "Iteration 3/10 completed in D (success)",
        "Iteration 4/10 starting...",
        "Iteration 4/10 completed in D (failure, consecutive: 1/3)",
        "Iteration 5/10 starting...",
        "Iteration 5/10 completed in D (failure, consecutive: 2/3)",
        "Iteration 6/10 starting...",
        "Iteration 6/10 completed in D (failure, consecutive: 3/3)",
        "ERROR: Aborting after 3 consecutive failures (6 iterations completed, total: D)",
    ]


def test_progress_lines_of_example_6_unlimited_with_recovery(workspace, agent, capfd):
    agent.script(OK, OK, FAIL, OK, SUCCESS_SIGNAL)
    code, _, err, _ = run_build(capfd, agent, "--unlimited")
    assert code == 0
    lines = progress_lines(err)
    assert lines[0] == "Starting procedure: build (unlimited)"
    assert lines[6:10] == [
        "Iteration 3 starting...",
        "Iteration 3 completed in D (failure, consecutive: 1/3)",
        "Iteration 4 starting...",
        "Iteration 4 completed in D (success)",
    ]
    assert lines[-1] == "Completed: agent signalled SUCCESS (5 iterations, total: D)"


def test_quiet_prints_nothing_on_success(workspace, agent, capfd):
    agent.script({"actions": [{"out": "agent chatter\n"}]}, SUCCESS_SIGNAL)
    code, out, err, _ = run_build(capfd, agent, "-n", "3", "--quiet")
    assert (code, out, err) == (0, "", "")


def test_quiet_still_prints_the_abort_error(workspace, agent, capfd):
    agent.script(FAIL)
    code, out, err, _ = run_build(capfd, agent, "-n", "5", "-q")
    assert code == 1 and out == ""
    assert [line for line in progress_lines(err)] == [
        "ERROR: Aborting after 3 consecutive failures (3 iterations completed, total: D)"]


def test_without_verbose_agent_output_is_not_shown(workspace, agent, capfd):
    agent.script({"actions": [{"out": "SECRET-STDOUT\n"}, {"err": "SECRET-STDERR\n"}]})
    code, out, err, _ = run_build(capfd, agent, "-n", "1")
    assert "SECRET" not in out + err


def test_verbose_shows_agent_stdout_and_stderr_on_their_streams(workspace, agent, capfd):
    agent.script({"actions": [{"out": "to-stdout\n"}, {"err": "to-stderr\n"}]})
    code, out, err, _ = run_build(capfd, agent, "-n", "1", "--verbose")
    assert code == 0
    assert out == "to-stdout\n"
    assert "to-stderr\n" in err


def test_each_iteration_is_a_fresh_process(workspace, agent, capfd):
    agent.script(OK)
    run_build(capfd, agent, "-n", "3")
    pids = {agent.pid(call) for call in (1, 2, 3)}
    assert len(pids) == 3


def test_time_budget_stops_as_completed(workspace, agent, capfd):
    agent.script({"actions": [{"sleep": 0.3}]})
    code, _, err, _ = run_build(capfd, agent, "-u", "--max-time", "0.5")
    assert code == 0
    assert 2 <= agent.calls <= 3
    assert progress_lines(err)[-1].endswith(" iterations, total: D)")
    assert "] Completed: time budget of 0.5s reached (" in err


def test_iteration_timeout_is_a_failure_named_timeout(workspace, agent, capfd):
    agent.script({"actions": [{"sleep": 30}]})
    code, _, err, _ = run_build(capfd, agent, "-n", "1", "--timeout", "0.3")
    assert code == 0
    assert "Iteration 1/1 completed in D (timeout, consecutive: 1/3)" in progress_lines(err)


def test_idle_timeout_stops_a_silent_agent(workspace, agent, capfd):
    agent.script({"actions": [{"out": "thinking\n"}, {"sleep": 30}]})
    code, _, err, _ = run_build(capfd, agent, "-n", "1", "--idle-timeout", "0.3", "--failure-threshold", "1")
    assert code == 1
    assert "(timeout, consecutive: 1/1)" in err
    assert "no output for" in err


def test_success_seen_before_a_timeout_still_completes(workspace, agent, capfd):
    agent.script({"actions": [{"out": "<promise>SUCCESS</promise>\n"}, {"sleep": 30}]})
    code, _, err, _ = run_build(capfd, agent, "-n", "3", "--timeout", "0.5")
    assert code == 0 and agent.calls == 1
    assert "Completed: agent signalled SUCCESS" in progress_lines(err)[-1]


# --- delay and backoff (lower bounds only: a busy machine can only make gaps longer) ----

def test_delay_pauses_between_iterations(workspace, agent, capfd):
    agent.script(OK)
    code, _, _, _ = run_build(capfd, agent, "-n", "2", "--delay", "0.4")
    assert code == 0
    assert agent.started(2) - agent.started(1) >= 0.4


def test_backoff_multiplies_the_delay_per_consecutive_failure(workspace, agent, capfd):
    write_config(workspace, {"loop": {"delay": 0.2, "backoff": 3}})
    agent.script(FAIL, FAIL, OK)
    code, _, _, _ = run_build(capfd, agent, "-n", "3")
    assert agent.started(2) - agent.started(1) >= 0.2 * 3       # after 1 failure
    assert agent.started(3) - agent.started(2) >= 0.2 * 3 ** 2  # after 2 failures


# --- small utilities that the progress lines and the delay depend on ------------------

def test_durations_round_to_the_unit_they_show():
    assert rooda.format_duration(59.94) == "59.9s"
    assert rooda.format_duration(59.96) == "1m00s"
    assert rooda.format_duration(119.6) == "2m00s"
    assert rooda.format_duration(3723.2) == "1h02m03s"


def test_the_backoff_delay_is_capped_without_overflowing():
    assert rooda.backoff_delay(2, 2, 3) == 16
    assert rooda.backoff_delay(1, 1e308, 50) == rooda.BACKOFF_CAP_SECONDS
    assert rooda.backoff_delay(0.5, 1, 10 ** 6) == 0.5
