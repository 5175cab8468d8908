#!/usr/bin/env python3
"""What rooda.py costs to load (`make size`; SPEC 17, revisions 4 and 5).

Per part (a part starts at a `# ==== N. Name ====` line; what comes before part 1 is a
row of its own) and in all: lines, tokens and compile milliseconds. Tokens are the
tokenize module's, every one but COMMENT, NEWLINE, NL, INDENT, DEDENT, ENCODING and
ENDMARKER: docstrings count; comments cost nothing to compile and do not (rev 5), nor do
line breaks, so neither rewrapping a line nor explaining it changes the count.
Compile time is the best of several compile() calls: a part on its own text, the total
on the whole file. Then the lines over 110 characters and the token budget.

tests/test_size.py holds rooda.py to the budget through count_tokens and long_lines
below (one counter); it never asserts a time. Standard library only.
"""
import io
import os
import re
import sys
import time
import tokenize

ROODA = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "rooda.py")
# SPEC 17 rev 6: at most 78,000 at the end of revision 6. Only SPEC 17 moves this number;
# a change that cannot fit says so in its closing note, never here.
BUDGET_TOKENS = 78000
MAX_COLUMNS = 110       # SPEC 17: no line over 110 characters
COMPILE_ROUNDS = 7
PART = re.compile(r"^# ==== (\d+\. .*?) =+\s*$")
UNCOUNTED = {tokenize.COMMENT, tokenize.NEWLINE, tokenize.NL, tokenize.INDENT, tokenize.DEDENT, tokenize.ENCODING,
             tokenize.ENDMARKER}


def token_lines(source):
    """The line each counted token starts on, one entry per token."""
    return [token.start[0] for token in tokenize.generate_tokens(io.StringIO(source).readline)
            if token.type not in UNCOUNTED]


def count_tokens(source):
    """rooda.py's size in the budget's unit: the counted tokens of source."""
    return len(token_lines(source))


def long_lines(source, limit=MAX_COLUMNS):
    """The numbers of the lines longer than limit characters."""
    return [number for number, line in enumerate(source.splitlines(), 1) if len(line) > limit]


def parts(source):
    """(name, first line, the part's text) in file order; lines count from 1."""
    lines = source.splitlines(keepends=True)
    starts = [(0, "(before part 1)")]
    for index, line in enumerate(lines):
        match = PART.match(line)
        if match:
            starts.append((index, match.group(1)))
    if starts[1:] and starts[1][0] == 0:
        starts.pop(0)
    bounds = [index for index, _ in starts[1:]] + [len(lines)]
    return [(name, first + 1, "".join(lines[first:end])) for (first, name), end in zip(starts, bounds)]


def compile_ms(text, rounds=COMPILE_ROUNDS):
    """The best of `rounds` compile() calls of text, in milliseconds (None if it does not
    compile on its own)."""
    best = None
    for _ in range(rounds):
        started = time.perf_counter()
        try:
            compile(text, ROODA, "exec", dont_inherit=True)
        except SyntaxError:
            return None
        took = (time.perf_counter() - started) * 1000
        best = took if best is None else min(best, took)
    return best


def main(path=ROODA):
    with open(path, encoding="utf-8") as stream:
        source = stream.read()
    counted = token_lines(source)
    rows = []
    for name, first, text in parts(source):
        lines = len(text.splitlines())
        tokens = sum(1 for line in counted if first <= line < first + lines)
        rows.append((name, lines, tokens, compile_ms(text)))
    rows.append(("all", len(source.splitlines()), len(counted), compile_ms(source)))
    width = max(len(name) for name, _, _, _ in rows)
    print("%-*s %7s %8s %11s" % (width, os.path.basename(path), "lines", "tokens", "compile ms"))
    for name, lines, tokens, took in rows:
        if name == "all":
            print("-" * (width + 29))
        print("%-*s %7s %8s %11s" % (width, name, "{:,}".format(lines), "{:,}".format(tokens),
                                     "-" if took is None else "%.1f" % took))
    print("lines over %d characters: %d" % (MAX_COLUMNS, len(long_lines(source))))
    print("budget: {:,} of {:,} tokens ({:.1f} %); {:,} left".format(
        len(counted), BUDGET_TOKENS, 100.0 * len(counted) / BUDGET_TOKENS, BUDGET_TOKENS - len(counted)))
    print("(python %s; compile: the best of %d calls, never a pass or fail)"
          % (sys.version.split()[0], COMPILE_ROUNDS))


if __name__ == "__main__":
    main(*sys.argv[1:])
