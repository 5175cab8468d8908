"""SignalScanner: signals found as bytes across reads, with the echo guard of SPEC 5."""
import pytest

from rooda import SignalScanner, classify_outcome

SIGNALS = {"SUCCESS": ["<promise>SUCCESS</promise>"], "FAILURE": ["<promise>FAILURE</promise>"]}
PROMPT = ("# OODA Loop Iteration\n\n## ACT\nWhen done, write <promise>SUCCESS</promise> on its own line.\n"
          "If blocked, write <promise>FAILURE</promise> on its own line.\n")


def scan(*chunks, prompt=PROMPT, stream="stdout"):
    scanner = SignalScanner(SIGNALS, prompt)
    for chunk in chunks:
        scanner.feed(stream, chunk)
    return scanner.finish()


def test_a_bare_signal_line_counts():
    assert scan(b"work\n<promise>SUCCESS</promise>\n") == {"SUCCESS"}


def test_a_signal_inside_a_sentence_counts():
    assert scan(b"All done: <promise>SUCCESS</promise> thanks\n") == {"SUCCESS"}


@pytest.mark.parametrize("cut", range(1, len(b"<promise>SUCCESS</promise>")))
def test_a_signal_split_across_reads_counts(cut):
    signal = b"<promise>SUCCESS</promise>"
    assert scan(b"text " + signal[:cut], signal[cut:] + b"\n") == {"SUCCESS"}


def test_a_signal_split_into_single_bytes_counts():
    data = b"x\n<promise>FAILURE</promise>"
    assert scan(*[data[i:i + 1] for i in range(len(data))]) == {"FAILURE"}


def test_a_signal_without_a_final_newline_counts():
    assert scan(b"<promise>SUCCESS</promise>") == {"SUCCESS"}


def test_an_echoed_prompt_line_does_not_count():
    echo = b"When done, write <promise>SUCCESS</promise> on its own line.\n"
    assert scan(b"You asked me:\n" + echo) == frozenset()


def test_an_echoed_prompt_line_with_crlf_and_indent_does_not_count():
    assert scan(b"   If blocked, write <promise>FAILURE</promise> on its own line.  \r\n") == frozenset()


def test_an_echo_split_across_reads_does_not_count():
    echo = b"When done, write <promise>SUCCESS</promise> on its own line.\n"
    assert scan(echo[:10], echo[10:30], echo[30:]) == frozenset()


def test_a_bare_signal_always_counts_even_if_the_prompt_has_it_alone():
    prompt = "Print this when done:\n<promise>SUCCESS</promise>\n"
    assert scan(b"<promise>SUCCESS</promise>\n", prompt=prompt) == {"SUCCESS"}


def test_a_line_that_only_resembles_the_prompt_line_counts():
    assert scan(b"When done, write <promise>SUCCESS</promise> on its own line. Done!\n") == {"SUCCESS"}


def test_signals_on_both_streams_are_kept_apart_and_both_found():
    scanner = SignalScanner(SIGNALS, PROMPT)
    scanner.feed("stdout", b"<promise>SUCC")
    scanner.feed("stderr", b"noise\n")
    scanner.feed("stdout", b"ESS</promise>\n")
    scanner.feed("stderr", b"<promise>FAILURE</promise>\n")
    assert scanner.finish() == {"SUCCESS", "FAILURE"}


def test_a_signal_interleaved_between_streams_does_not_combine():
    scanner = SignalScanner(SIGNALS, PROMPT)
    scanner.feed("stdout", b"<promise>SUCC")
    scanner.feed("stderr", b"ESS</promise>\n")
    assert scanner.finish() == frozenset()


def test_invalid_utf8_and_nul_around_the_signal():
    assert scan(b"\xff\xfe\x00<promise>SUCCESS</promise>\x00\xc3\n") == {"SUCCESS"}


def test_a_signal_at_the_end_of_a_huge_line_counts_and_memory_stays_small():
    scanner = SignalScanner(SIGNALS, PROMPT)
    block = b"x" * 65536
    for _ in range(64):  # 4 MiB without a newline
        scanner.feed("stdout", block)
        assert len(scanner.streams["stdout"].line) <= scanner.cap
    scanner.feed("stdout", b"<promise>SUCCESS</promise>\n")
    assert scanner.finish() == {"SUCCESS"}


def test_custom_signals():
    scanner = SignalScanner({"SUCCESS": ["<promise>COMPLETE</promise>", "ALL DONE"], "FAILURE": []}, "")
    scanner.feed("stdout", b"ALL DONE\n")
    assert scanner.finish() == {"SUCCESS"}


@pytest.mark.parametrize("exit_code,signals,timed_out,verified,expected", [
    (0, [], None, None, "success"),
    (0, ["SUCCESS"], None, None, "completed"),
    (0, ["FAILURE"], None, None, "failure"),
    (1, [], None, None, "failure"),
    (1, ["SUCCESS"], None, None, "completed"),
    (1, ["FAILURE"], None, None, "failure"),
    (0, ["SUCCESS", "FAILURE"], None, None, "completed"),
    (143, [], "timeout", None, "timeout"),
    (143, ["SUCCESS"], "timeout", None, "completed"),
    (0, ["SUCCESS"], None, False, "rejected"),
    (0, [], None, False, "failure"),
    (0, ["SUCCESS"], None, True, "completed"),
])
def test_outcome_matrix(exit_code, signals, timed_out, verified, expected):
    assert classify_outcome(exit_code, signals, timed_out, verified)[0] == expected


def test_an_error_that_rooda_s_own_stop_provoked_is_a_timeout():
    """Claude Code reports an error when rooda stops it for time (seen with 2.1.197)."""
    assert classify_outcome(1, [], "timeout", reported_error=True) == ("timeout", "timeout")
    assert classify_outcome(1, [], None, reported_error=True) == ("failure", "error")


def best_of(runs, action):
    import time
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        action()
        times.append(time.perf_counter() - started)
    return min(times)


def test_the_echo_guard_setup_is_linear_in_the_prompt():
    """A 10 MB prompt with thousands of lines quoting a signal must not take seconds."""
    line = "Print <promise>SUCCESS</promise> when the task is done. " + "x" * 500 + "\n"
    small, large = line * 1000, line * 8000
    signals = {"SUCCESS": ["<promise>SUCCESS</promise>"], "FAILURE": ["<promise>FAILURE</promise>"]}

    calls = iter(range(1000))

    def setup(prompt):
        # A new prompt each call: the scanner remembers the last prompt's echo lines, and a
        # hit (the same string) would time nothing but noise.
        return lambda: SignalScanner(signals, prompt + str(next(calls)))
    # 8x the prompt: linear is 8x the time, quadratic 64x. The bound sits far from both,
    # so a busy machine (2 cores, other work) does not make it flake.
    ratio = best_of(5, setup(large)) / best_of(5, setup(small))
    assert ratio < 24, "8x the prompt took %.1fx the time (quadratic?)" % ratio
