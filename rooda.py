#!/usr/bin/env python3
"""rooda.py - run an AI coding agent in an OODA loop until the work is done.

Each iteration assembles a prompt from four phase files (observe, orient, decide,
act) chosen by a named procedure -- or one prompt file, the Ralph loop -- pipes it to
an agent CLI (claude, codex, gemini, ...) started as a fresh process, reads what the
agent says, decides the iteration's outcome, and stops on success, a cap, repeated
failure, a stuck detector, a budget or a signal -- leaving no process behind.

One file, standard library only, CPython 3.8 or newer: copy it with prompts/ and
rooda-config.json into a repository (``python3 rooda.py vendor DIR``, which copies the
README.md that documents it too) and run ``python3 rooda.py build``. The README beside
this file is the manual: settings, agents, exit codes, logs, recipes.

Public names (``__all__``): main, load_config, load_yaml, assemble_prompt, run_agent,
classify_outcome, SignalScanner, RoodaError, UsageError, ConfigError. They are what a
vendoring repository may import; their signatures may still change between minor
versions (the command line and the log formats are the stable interface).

Parts, bottom-up, and what each owns. A function's body uses only names defined above
it, except `command_resume`, which hands the resumed run back to `dispatch` (the one
cycle); annotations may name a later class (the run plan, an iteration under way).
   1. Header and constants   paths, phases, commands, outcome / cause / status words
   2. Errors                 RoodaError and its kinds; Interrupted
   3. Utilities              formatters, did-you-mean, Record, and the module-level caches
   4. YAML subset loader     rooda-config.yml without PyYAML
   5. Agent CLIs             the catalogue: one row per CLI (command, format and decoder,
                             logins, pitfalls, its own limit / auth / billing / outage words)
   6. Settings               one row per setting: default, check, env and flag forms, help
   7. Configuration          files, tiers, merging, provenance, Go rooda configs, the agent
   8. Prompt                 fragments, templates, PREVIOUS ITERATION, assembly
   9. Processes              signals, process groups, spawning, supervising a child
  10. Reading output         promise signals, readers, usage, what is under way (Activity);
                             what a verifier printed (test counts) and its result (Verified)
  11. Outcomes and causes    why an iteration ended, in words; provider trouble and waits;
                             the table of stops
  12. Session files          their names, the writer (.log, .jsonl, live file), the one
                             reader of a session's events (status, report, resume)
  13. Gates and git          verify, done_when, requires, stuck, HEAD, commit and push
  14. Keeping the work honest  the test-count guard, protected paths, keep: better (Keeper)
  15. Reporting              progress lines, status line, heartbeats, notify
  16. The loop               the plan, the state, one iteration in steps, run_loop
  17. The morning report     `report`: the night as text, JSON and one page with its charts
  18. Command line           argparse, plan_run, the checks before a run (doctor's too), the
                             commands, status, main
"""
from __future__ import annotations

import sys

if sys.version_info < (3, 8):  # before anything that could fail on an old interpreter
    sys.stderr.write("rooda: error: Python 3.8 or newer is required\n")
    sys.exit(2)

import collections
import json
import os
import re
import signal
import stat
import time
from types import MappingProxyType  # (a table row's read-only mapping)

# Licence: MIT. The version lives here and nowhere else (the Makefile and --version read it).
__version__ = "0.2.0"

__all__ = [
    "main", "load_config", "load_yaml", "assemble_prompt", "run_agent", "classify_outcome",
    "SignalScanner", "RoodaError", "UsageError", "ConfigError", "__version__",
]

TYPE_CHECKING = False
if TYPE_CHECKING:  # annotations only; never imported at run time (start-up cost)
    from typing import (Any, Callable, Dict, Iterable, List, Mapping, NoReturn, Optional, Sequence,
                        TextIO, Tuple)
    Sink = Callable[[bytes], None]              # where bytes go: a reader, a terminal, a log
    Check = Callable[[object], Optional[str]]   # a setting's rule: what is wrong, or None
    # The shapes the annotations repeat, by what they hold.
    Fields = Dict[str, Any]                     # named values: usage, a summary, an event read back
    Env = Dict[str, str]                        # an environment's variables (and what is set in one)
    Environ = Mapping[str, str]                 # an environment as it is read
    Positions = Dict[tuple, Tuple[int, int]]    # a config file's keys: key path -> (line, col)
    Where = Tuple[str, Optional[str], Optional[int]]  # where a value came from: (tier, file, line)
    Doing = Tuple[str, str, float]              # what is under way: (kind, detail, since)
    Readings = Dict[str, tuple]                 # the subscription windows' last readings, by window
    Usage = Mapping[str, Any]                   # an agent's usage figures (USAGE_FIELDS), as read
    Reported = Tuple[str, Optional[int], Tuple[str, ...]]  # an error the CLI said: (message, status, kinds)
    Limited = Tuple[str, Optional[str], Optional[float]]   # a limit it said: (kind, message, resets_at)
    Reason = Tuple[str, str]                    # a cause in words: ("exit 1", "<its telling line>")
    Say = Callable[[str], None]                 # where a warning goes (Progress.warn)
    Lines = List[Tuple[str, str, str]]          # the checks' lines: (level, topic, words)
    RunGit = Callable[..., "GitResult"]         # how the git helpers run git (GateRunner.git)


# ==== 1. Header and constants =========================================

# Where rooda.py lives: the shipped config, prompts/ and the built-in log_dir resolve here.
# The real path: through a symlink (`ln -s .../rooda.py ~/bin/rooda`) it is still the
# directory that holds prompts/ and rooda-config.json, not the link's.
ROODA_DIR = os.path.dirname(os.path.realpath(__file__))
SHIPPED_CONFIG = os.path.join(ROODA_DIR, "rooda-config.json")  # the procedures (tier "shipped")
# The shipped fragment that asks for the promise markers, and the one that asks for a
# schema verdict in its place with `verdict: schema` (SPEC 21 rev 5).
MARKERS_PROMPT = os.path.join(ROODA_DIR, "prompts", "act", "signals.md")
VERDICT_PROMPT = os.path.join(ROODA_DIR, "prompts", "act", "verdict.md")
# File names a workspace (or global) config may have, in the order they are looked for.
CONFIG_NAMES = ("rooda-config.json", "rooda-config.yml", "rooda-config.yaml")
PHASES = ("observe", "orient", "decide", "act")  # the four OODA phases, in prompt order
# How much a run says on stderr (-q, default, -v), and SPEC 2's --log-level words (the Go rooda's).
QUIET, NORMAL, VERBOSE = 0, 1, 2
VERBOSITY = ("quiet", "normal", "verbose")  # (their names, as `config` shows them)
LOG_LEVELS = {"debug": VERBOSE, "info": NORMAL, "warn": QUIET, "error": QUIET}
# The commands: (fewest words, most words, usage, the options it takes -- `run`: those of a
# run, for a command that plans one -- of which an option no other command takes is its
# alone). Anything else is a procedure; dispatch calls each command's function.
COMMANDS = {
    "run": (1, 2, "run <procedure> [max_iterations] [options]", "run"),
    "prompt": (1, 2, "prompt <file|-> [max_iterations] [options]", "run"),
    "list": (0, 0, "list", "--config"),
    "info": (1, 1, "info <procedure>", "run"),
    "config": (0, 2, "config [<procedure>] [--json]", "run --json"),
    "doctor": (0, 1, "doctor [<procedure>]", "run"),
    "status": (0, 1, "status [SESSION] [--all] [--json] [--log-dir DIR]", "--all --json --log-dir --config"),
    "report": (0, 10000, "report [SESSION...] [--all] [--since WHEN] [--json | --html FILE|- |"
               " --markdown FILE|-] [--log-dir DIR]",
               "--all --json --since --html --markdown --log-dir --config"),
    "resume": (0, 1, "resume [SESSION] [--answer TEXT|@FILE] [options]", "run --answer"),
    "vendor": (1, 1, "vendor <dir> [--force]", "--force"),
}
RESERVED_WORDS = tuple(COMMANDS) + ("help", "version")  # no procedure may take their names
# Iteration outcomes (SPEC 5, the outcome matrix): a provider's limit or outage is
# waited out and the iteration runs again; a signal ends one as interrupted.
SUCCESS, COMPLETED, FAILURE, TIMEOUT, REJECTED = "success", "completed", "failure", "timeout", "rejected"
LIMITED, UNAVAILABLE, OUTCOME_INTERRUPTED = "limited", "unavailable", "interrupted"
# Outcomes that count as a failure towards the threshold and get `, consecutive: x/y`.
FAILING_OUTCOMES = (FAILURE, TIMEOUT, REJECTED)
# Why an iteration did not succeed (SPEC 15), in the order in which the first that
# applies is its cause: the provider's part first (auth and billing stop the run, a limit
# or an outage is waited out), then the iteration's own.
CAUSE_AUTH, CAUSE_BILLING, CAUSE_LIMIT, CAUSE_OUTAGE = "auth", "billing", "limit", "outage"
CAUSE_PROTECTED, CAUSE_TIMEOUT, CAUSE_AGENT, CAUSE_ERROR = "protected", "timeout", "agent", "error"
CAUSE_WORSE, CAUSE_VERIFY, CAUSE_GIT, CAUSE_EXIT = "worse", "verify", "git", "exit"
CAUSE_ACCEPT = "accept"  # (SPEC 22 rev 6: a check whose output the agent never sees, right after verify)
# A typed error kind no retry fixes (a model that does not exist, a CLI too old): the run
# stops at once, exit 2, saying what to do (SPEC 13 rev 5).
CAUSE_FATAL = "fatal"
# The causes that stop the run at once (exit 2): no failure, no use of the cap; `resume`
# runs the iteration again once the account, the login or the model is fixed.
STOPPING_CAUSES = (CAUSE_AUTH, CAUSE_BILLING, CAUSE_FATAL)
PROVIDER_CAUSES = (CAUSE_AUTH, CAUSE_BILLING, CAUSE_LIMIT, CAUSE_OUTAGE)
# The subscription windows agents report (SPEC 18): how `status` names each, and its
# length in seconds.
WINDOWS = {"five_hour": ("5h", 5 * 3600), "seven_day": ("7d", 7 * 86400),
           "seven_day_overage_included": ("7d+", 7 * 86400)}
GATE_VERIFY, GATE_DONE_WHEN, GATE_GIT, GATE_ACCEPT = "verify", "done_when", "git", "accept"  # in the logs
# How a run ended (the .jsonl's session_end.status); STOPS gives each its exit code.
STATUS_COMPLETED, STATUS_ABORTED, STATUS_STUCK, STATUS_ERROR = "completed", "aborted", "stuck", "error"
STATUS_INTERRUPTED, STATUS_LIMITED, STATUS_UNAVAILABLE = "interrupted", "limited", "unavailable"
SIGNAL_SUCCESS, SIGNAL_FAILURE = "SUCCESS", "FAILURE"  # promise signal kinds, as the .jsonl has them
READ_SIZE = 65536  # bytes per os.read of the agent's pipes and per os.write of the prompt
READS_PER_WAKEUP = 16  # reads of one pipe per wake-up of the selector, at most (a burst)
# The capacity asked for the agent's output pipes (Linux F_SETPIPE_SZ; 0: leave it).
PIPE_BUFFER_BYTES = 1 << 20
# After the agent exits, how long output from leftover children is still read before
# the group is terminated (a background child holding stdout must not stall the loop).
DRAIN_SECONDS = 0.3
GROUP_POLL_SECONDS = 0.02  # how often a process group is probed while it empties
# After SIGKILL, how long to wait for the pipes to close before abandoning them (a
# process in uninterruptible sleep, or one that escaped the group, may hold them).
KILL_WAIT_SECONDS = 2.0
# How long processes killed with SIGKILL are waited for, so that what they leave behind
# is found (an escaped process's own children are adopted only once it has died).
KILL_SETTLE_SECONDS = 1.0
BACKOFF_CAP_SECONDS = 300.0  # the longest back-off delay between failing iterations
FEEDBACK_TAIL_BYTES = 2048  # bytes of the previous iteration's output in the next prompt (SPEC 4)
# The most of an agent's or its CLI's text one line shows: a reason, an excerpt, a message.
REASON_CHARS = 200
# What an attempt may leave for the person (SPEC 24): its refused actions and assumptions
# kept, each at most; the most of a person's answer the next prompt gets.
DENIED_MOST, ASSUMPTIONS_MOST, ANSWER_BYTES = 20, 20, 8192
# Largest prompt passed as one argument with {prompt} (ARG_MAX is often 128 KiB per arg).
PROMPT_ARG_LIMIT = 128 * 1024
MIN_OUTPUT_BUFFER = 1024  # the smallest max_output_buffer (the Go rooda's floor, SPEC 3 rev 2)
DEFAULT_MAX_ITERATIONS = 5  # the cap when no tier sets one
# The only two tokens replaced in an agent command: the path of a temporary file with
# the prompt, and the prompt itself as one argument (SPEC 7).
PROMPT_FILE_TOKEN = "{prompt_file}"
PROMPT_TOKEN = "{prompt}"


# ==== 2. Errors =======================================================

class RoodaError(Exception):
    """A mistake or a failed precondition that ends rooda with a message and an exit code."""

    exit_code = 2


class UsageError(RoodaError):
    """The command line is wrong (exit 2)."""


class ConfigError(RoodaError):
    """One or more problems in configuration files, each located as precisely as known:
    (path, line, column, message, source line), line and column 1-based or None."""

    def __init__(self, message: str, path: str | None = None, line: int | None = None,
                 col: int | None = None, source: str | None = None) -> None:
        super().__init__(message)
        self.problems = [(path, line, col, message, source)]

    @classmethod
    def collect(cls, problems: List[tuple]) -> "ConfigError":
        """One error for many problems, in file and line order."""
        ordered = sorted(problems, key=lambda p: (str(p[0]), p[1] or 0, p[2] or 0))
        error = cls(ordered[0][3])
        error.problems = ordered
        return error

    def lines(self) -> List[str]:
        """The report: `path:line:col: message`, then the offending line and a caret."""
        out = []
        for path, line, col, message, source in self.problems:
            where = [str(part) for part in (path, line, col) if part is not None]
            out.append("%s: %s" % (":".join(where), message) if where else message)
            if source is not None and col is not None:
                out += ["  " + source.rstrip("\n"), "  " + " " * (col - 1) + "^"]
        return out

    def __str__(self) -> str:
        return "\n".join(self.lines())


class Interrupted(Exception):
    """SIGINT, SIGTERM or SIGHUP arrived: the run stops at once, starting nothing new.
    Not an error: the run ends as interrupted and rooda dies of the same signal."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


# ==== 3. Utilities ====================================================
# The formatters several parts share, small helpers, and the immutable Record. The
# module-level caches are in the "internal state" block at the end of this part.

def format_duration(seconds: float) -> str:
    """45.2s under a minute, then 2m16s, then 1h02m03s (as progress lines say it)."""
    if round(seconds, 1) < 60:
        return "%.1fs" % max(seconds, 0.0)
    whole = int(round(seconds))  # 59.96 is 1m00s, not 0m59s
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    return "%dh%02dm%02ds" % (hours, minutes, secs) if hours else "%dm%02ds" % (minutes, secs)


def format_budget(seconds: float) -> str:
    """A configured span in its shortest exact words: 30m, 1h, 90s, 1m30s, 2.5s."""
    if seconds != int(seconds):
        return "%gs" % seconds
    whole = int(seconds)
    parts = []
    for unit, size in (("h", 3600), ("m", 60), ("s", 1)):
        count, whole = divmod(whole, size)
        if count:
            parts.append("%d%s" % (count, unit))
    return "".join(parts) or "0s"


def format_bytes(count: float) -> str:
    """812 B, 45.2 KB, 3.1 MB, 1.2 GB."""
    for unit in ("B", "KB", "MB", "GB"):
        if count < 1000 or unit == "GB":
            return ("%d %s" if unit == "B" else "%.1f %s") % (count, unit)
        count /= 1000.0
    return "%d B" % count


def format_count(count: float) -> str:
    """940, 24.1k, 3.2M."""
    if count < 1000:
        return "%d" % count
    if count < 1000000:
        return "%.1fk" % (count / 1000)
    return "%.1fM" % (count / 1000000)


def format_cost(usd: float) -> str:
    """$0.31, $12.40; below a cent with its significant digits."""
    return "$%.2f" % usd if usd >= 0.01 or usd == 0 else "$%.4f" % usd


def iso_time(moment: float | None = None) -> str:
    """ISO 8601 UTC with milliseconds: 2026-11-22T10:00:00.123Z."""
    moment = time.time() if moment is None else moment
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(moment)) + ".%03dZ" % (int(moment * 1000) % 1000)


def parse_iso_time(text: object) -> float | None:
    """The epoch of an iso_time text (read back from a .jsonl), or None. (datetime, not
    strptime: `status --all` reads a time per line, and strptime took most of its time.)"""
    import datetime
    match = re.match(r"(\d{4})-(\d\d)-(\d\d)T(\d\d):(\d\d):(\d\d)(\.\d\d\d)?", text) \
        if isinstance(text, str) else None
    if not match:
        return None
    year, month, day, hour, minute, second = (int(field) for field in match.groups()[:6])
    try:
        moment = datetime.datetime(year, month, day, hour, minute, second, tzinfo=datetime.timezone.utc)
    except ValueError:  # a month 13, a 31st of June
        return None
    return moment.timestamp() + float(match.group(7) or 0)


def clock_words(moment: float, now: float) -> str:
    """A moment for a person, in local time: 21:03, or Nov 26 19:04 when a day or more away."""
    return time.strftime("%H:%M" if abs(moment - now) < 20 * 3600 else "%b %d %H:%M", time.localtime(moment))


def local_time(moment: float | None = None) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(moment))


def backoff_delay(delay: float, backoff: float, failures: int) -> float:
    """delay x backoff^failures, capped at BACKOFF_CAP_SECONDS (never an overflow)."""
    pause = float(delay)
    for _ in range(failures):
        if pause >= BACKOFF_CAP_SECONDS:
            break
        pause *= backoff
    return min(pause, BACKOFF_CAP_SECONDS)


def closest(word: str, choices: Iterable[str]) -> str | None:
    """The choice closest to word when one is close enough (difflib), else None."""
    import difflib
    close = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    return close[0] if close else None


def did_you_mean(word: str, choices: Iterable[str]) -> str:
    """`; did you mean 'x'?` when a choice is close to word, else an empty string."""
    near = closest(word, choices)
    return "; did you mean '%s'?" % near if near else ""


def _type_name(value: object) -> str:
    """How a config value's type is named in messages."""
    if value is None:
        return "null"
    return {bool: "a boolean", int: "a number", float: "a number", str: "a string",
            list: "a list", dict: "a mapping"}.get(type(value), type(value).__name__)


def _scalar_text(value: object) -> str:
    """A scalar as text, the way a config file spells it (true, 3, 2.5)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _tee(*sinks: Sink | None) -> Sink | None:
    """One sink that feeds all the given ones (None for none)."""
    present = [sink for sink in sinks if sink]
    if len(present) < 2:
        return present[0] if present else None

    def both(chunk: bytes) -> None:
        for sink in present:
            sink(chunk)
    return both


def telling_line(text: str) -> str:
    """The line that says what went wrong: the last non-blank one that is not a `hint:`
    (git ends its reports with hints, which hid the reason); when that is a generic
    `fatal:`, the `error:` line before it says more and leads. At most REASON_CHARS characters."""
    lines = [line.strip() for line in text.splitlines()
             if line.strip() and not line.strip().startswith("hint:")]
    if not lines:
        return ""
    last = lines[-1]
    if last.startswith("fatal:"):
        errors = [line for line in lines[:-1] if line.startswith("error:")]
        if errors:
            last = "%s; %s" % (errors[-1], last)
    return last[:REASON_CHARS]


# An escape sequence (CSI, OSC to its BEL or ST, or one of two characters), or another
# control character but a tab or a newline.
_CONTROLS = re.compile(r"\x1b(?:\[[0-?]*[ -/]*[@-~]?|\][^\x07\x1b\n]*(?:\x07|\x1b\\)?|[^\n]?)"
                       r"|[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def clean(text: str) -> str:
    """Text from an agent or its CLI as rooda shows it anywhere (SPEC 14): escape sequences
    dropped, other control characters blanked, so that it cannot retitle the terminal,
    write the clipboard or hide text; a NUL never reaches an argument or a variable."""
    return _CONTROLS.sub(lambda found: "" if found.group().startswith("\x1b") else " ", text)


def _flat(text: object) -> str:
    """Text from an agent kept whole but safe (a verdict's explanation, its next step):
    cleaned, its lines and blanks run together, at most FEEDBACK_TAIL_BYTES characters."""
    return " ".join(clean(text).split())[:FEEDBACK_TAIL_BYTES] if isinstance(text, str) else ""


def _one_line(text: object, limit: int = 160) -> str:
    """The first non-blank line of a text, cut to `limit` characters, cleaned."""
    if not isinstance(text, str):
        return ""
    for line in text.splitlines():
        if line.strip():
            line = clean(line).strip()[:limit]
            return line if len(line) < limit else line[:limit - 1] + "…"
    return ""


class _suppress:
    """`with _suppress(OSError): ...` ignores those errors: contextlib.suppress, whose import
    would cost start-up."""

    def __init__(self, *kinds: type) -> None:
        self.kinds = kinds

    def __enter__(self) -> None:
        pass

    def __exit__(self, kind: type | None, *rest: object) -> bool:
        return kind is not None and issubclass(kind, self.kinds)


def _number(value: object) -> float | None:
    """A finite JSON number that fits a float, else None (JSON parsers accept 1e999, which is
    infinite, and an integer of 400 digits)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    with _suppress(OverflowError):
        return value if abs(float(value)) < float("inf") else None  # (NaN fails the test too)
    return None


def _finite(text: str, kind: type = float) -> Any:
    """A JSON number rooda could have written, as `kind`: 1e400, Infinity and a 400-digit
    integer (which parse) are not."""
    value = float(text)
    if value != value or abs(value) == float("inf"):
        raise ValueError(text)
    return value if kind is float else kind(text)


def _decode(data: bytes) -> str:
    """Bytes from a child or a file as text: UTF-8, what is not replaced."""
    return data.decode("utf-8", "replace")


def _last_line(output: bytes, markers: Sequence[str]) -> str:
    """An output's last non-blank line that is not a bare promise marker, cut to REASON_CHARS."""
    for line in reversed(_decode(output).splitlines()):
        line = clean(line).strip()
        if line and line not in markers:
            return line[:REASON_CHARS]
    return ""


def _mapping(value: object) -> dict:
    """A decoded JSON value as a mapping ({} when it is something else): CLIs change
    their events, and a decoder must never fail on a field of an unexpected type."""
    return value if isinstance(value, dict) else {}


def _list(value: object) -> list:
    return value if isinstance(value, list) else []


def _typed(value: object, kind: type) -> Any:
    """A decoded JSON value when it is a `kind`, else None."""
    return value if isinstance(value, kind) else None


class _Tail:
    """The last `size` bytes of a stream, kept as the chunks that came (not copies)."""

    def __init__(self, size: int) -> None:
        self.size, self.held = size, 0
        self.chunks: "collections.deque[bytes]" = collections.deque()

    def __call__(self, chunk: bytes) -> None:
        self.chunks.append(chunk)
        self.held += len(chunk)
        while self.held - len(self.chunks[0]) >= self.size:
            self.held -= len(self.chunks.popleft())

    def bytes(self) -> bytes:
        return b"".join(self.chunks)[-self.size:]


class Ticker:
    """A callback due every `interval` seconds, fired by whatever the loop is waiting in
    (the agent's selector, a gate, a delay) -- never per output chunk, so the status line
    and the heartbeats cost nothing on the hot path."""

    def __init__(self, interval: float, callback: Callable[[], None]) -> None:
        self.interval, self.callback = interval, callback
        self.due = time.monotonic() + interval

    def fire_if_due(self, now: float) -> None:
        if now >= self.due:
            self.due = now + self.interval
            self.callback()


def plural(count: int, word: str) -> str:
    """`1 iteration`, `2 iterations`."""
    return "%d %s%s" % (count, word, "" if count == 1 else "s")


def read_text(path: str, what: str) -> str:
    """A file's text (UTF-8, undecodable bytes replaced) or a RoodaError naming `what`."""
    try:
        with open(path, "rb") as stream:
            return _decode(stream.read())
    except FileNotFoundError:
        raise RoodaError("%s not found: %s" % (what, path)) from None
    except IsADirectoryError:
        raise RoodaError("%s is a directory, not a file: %s" % (what, path)) from None
    except OSError as exc:
        raise RoodaError("cannot read %s %s: %s" % (what, path, exc.strerror)) from None


def signal_name(signum: int) -> str:
    """SIGINT for 2, or `signal N` for a number Python has no name for."""
    try:
        return signal.Signals(signum).name
    except ValueError:
        return "signal %d" % signum


def _located(path: str, line: int | None) -> str:
    """`rooda-config.yml:12`, or the path alone when the line is not known."""
    return "%s:%d" % (path, line) if line else path


def _display_path(path: str, cwd: str) -> str:
    """A path as short as it can be said: relative to cwd when below it."""
    relative = os.path.relpath(path, cwd)
    return path if relative.startswith("..") else relative


class Record:
    """A small immutable record: its fields are the class's annotations (a base class's
    first), and a field given a value in the class body has that default. The first
    fields may be given in order (a table's row: `Setting("delay", 0, _Number(0))`).

    The records of this module are classes like this one rather than dataclasses:
    importing dataclasses costs about 9 ms of start-up (it imports inspect), a quarter of
    the start-up budget (SPEC 11)."""

    _fields: Tuple[str, ...] = ()

    def __init_subclass__(cls) -> None:
        own = [name for name in cls.__dict__.get("__annotations__", {}) if name not in cls._fields]
        # (a list or a mapping as a default would be one object shared by every record)
        assert not any(isinstance(cls.__dict__.get(name), (list, dict, set)) for name in own), cls
        cls._fields = cls._fields + tuple(own)

    def __init__(self, *given: object, **values: object) -> None:
        values.update(zip(self._fields, given))
        for name in self._fields:
            if name in values:
                value = values.pop(name)
            elif hasattr(type(self), name):
                value = getattr(type(self), name)
            else:
                raise TypeError("%s: missing field %s" % (type(self).__name__, name))
            object.__setattr__(self, name, value)
        if values:
            raise TypeError("%s: unknown fields %s" % (type(self).__name__, sorted(values)))

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError("%s is immutable" % type(self).__name__)

    def replace(self, **changes: object) -> Any:
        """A copy with some fields changed."""
        fields = {name: getattr(self, name) for name in self._fields}
        fields.update(changes)
        return type(self)(**fields)

    def __repr__(self) -> str:
        inner = ", ".join("%s=%r" % (name, getattr(self, name)) for name in self._fields)
        return "%s(%s)" % (type(self).__name__, inner)


# -- internal state --------------------------------------------------------------------
# Every module-level cache, in one place (a reader who suspects stale data looks here);
# the run's other shared state is the helper processes (_HELPERS, part 9) and its mark
# ROODA_RUN in the environment (command_run). Files and what was read from them are
# remembered by path with the stat signature they were read under: a prompt is assembled
# afresh every iteration and HEAD read twice, but an unchanged file need not be read
# again (git replaces a ref by renaming a new file over it, so a new inode says it changed).
_FILE_CACHE: Dict[Tuple[str, str], Tuple[tuple, Any]] = {}
_HEADS: Dict[str, Tuple[tuple, str | None]] = {}  # HEAD per git dir, by its files' signatures
_PROGRAMS: Dict[Tuple[str, str], str | None] = {}  # a program's path, by its name and PATH (_spawn)
_LAST_ECHOES: List[Any] = [None]    # the last prompt's echo lines (SignalScanner)
_SUBREAPER: bool | None = None   # whether rooda became a child subreaper (Linux)
_FATAL_SIGNAL: int | None = None  # a signal that ended the run: re-raised at exit


def stat_signature(path: str) -> tuple | None:
    try:
        info = os.stat(path)
    except OSError:
        return None
    return (info.st_ino, info.st_mtime_ns, info.st_ctime_ns, info.st_size)


def cached_read(kind: str, path: str, read: Callable[[str], Any]) -> Any:
    """read(path), remembered until the file's stat signature changes."""
    signature = stat_signature(path)
    cached = _FILE_CACHE.get((kind, path))
    if signature is not None and cached is not None and cached[0] == signature:
        return cached[1]
    value = read(path)
    if signature is not None:
        _FILE_CACHE[(kind, path)] = (signature, value)
    return value


# ==== 4. YAML subset loader ===========================================
# rooda reads rooda-config.yml without PyYAML; load_yaml's docstring is the grammar.

_YAML_UNSUPPORTED = "are not supported by rooda's YAML subset"
_YAML_ESCAPES = {"0": "\0", "a": "\a", "b": "\b", "t": "\t", "\t": "\t", "n": "\n", "v": "\v", "f": "\f",
                 "r": "\r", "e": "\x1b", " ": " ", '"': '"', "/": "/", "\\": "\\", "N": "\x85", "_": "\xa0",
                 "L": "\u2028", "P": "\u2029"}
_YAML_HEX_ESCAPES = {"x": 2, "u": 4, "U": 8}
# What the subset refuses where a node starts, by its first character, and the hint
# (`self.refuse(*_YAML_REFUSED[char], ...)`: the same words wherever it stands).
_YAML_REFUSED = {"&": ("anchors (&name)", "repeat the value or use rooda-config.json"),
                 "*": ("aliases (*name)", "repeat the value or use rooda-config.json"),
                 "!": ("tags (!tag)", "remove the tag; quote the value to make it a string")}


def _is_item(text: str) -> bool:
    """Whether a line's content (after its indentation) is a sequence item."""
    return text == "-" or text.startswith("- ")


def _yaml_plain_value(text: str) -> object:
    """A plain scalar typed by the YAML 1.2 core schema."""
    if text in ("", "~", "null", "Null", "NULL"):
        return None
    if text in ("true", "True", "TRUE"):
        return True
    if text in ("false", "False", "FALSE"):
        return False
    if re.fullmatch(r"[-+]?[0-9]+", text):
        return int(text, 10)
    if re.fullmatch(r"0o[0-7]+|0x[0-9a-fA-F]+", text):
        return int(text, 0)
    if re.fullmatch(r"[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?", text):
        return float(text)
    if re.fullmatch(r"[-+]?\.(inf|Inf|INF)|\.(nan|NaN|NAN)", text):
        return float(text.replace(".", ""))  # Python's float reads inf and nan in every case
    return text


class YamlSubsetParser:
    """Parses one document of the subset; `positions` maps key paths to (line, col)."""

    def __init__(self, text: str, path: str) -> None:
        if text.startswith("\ufeff"):
            text = text[1:]
        self.path = path
        self.lines = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
        self.index = 0
        self.positions: Positions = {}

    # -- errors and line helpers ----------------------------------------------------

    def error(self, message: str, index: int, col: int) -> "NoReturn":
        source = self.lines[index] if 0 <= index < len(self.lines) else None
        raise ConfigError(message, self.path, index + 1, col + 1, source)

    def refuse(self, what: str, hint: str, index: int, col: int) -> "NoReturn":
        self.error("%s %s; %s" % (what, _YAML_UNSUPPORTED, hint), index, col)

    def indent_of(self, index: int) -> int:
        line = self.lines[index]
        indent = len(line) - len(line.lstrip(" "))
        if line[indent:indent + 1] == "\t":
            self.error("tab in indentation; indent with spaces", index, indent)
        return indent

    def is_blank(self, index: int) -> bool:
        stripped = self.lines[index].strip(" \t")
        return not stripped or stripped.startswith("#")

    def next_content(self) -> int | None:
        """The index of the next line with content (skipping blanks and comments)."""
        while self.index < len(self.lines) and self.is_blank(self.index):
            self.index += 1
        return self.index if self.index < len(self.lines) else None

    # -- document ---------------------------------------------------------------------

    def parse(self) -> object:
        start = self.next_content()
        if start is None:
            return None
        line = self.lines[start]
        if line.startswith("%"):
            self.refuse("directives (%YAML, %TAG)", "remove the line", start, 0)
        if line.rstrip() == "---" or line.startswith("--- "):
            rest = line[3:].strip()
            if rest and not rest.startswith("#"):
                self.error("put the document on the line after '---'", start, 4)
            self.index += 1
            start = self.next_content()
            if start is None:
                return None
        if self.indent_of(start) != 0:
            self.error("the document must start at column 1", start, self.indent_of(start))
        value = self.parse_block(0, ())
        end = self.next_content()
        if end is not None:
            text = self.lines[end].rstrip()
            if text == "---" or text.startswith("--- "):
                self.refuse("several documents", "keep one (a single leading '---' is fine)", end, 0)
            if text == "...":
                self.index += 1
                following = self.next_content()
                if following is None:
                    return value
                self.refuse("several documents", "keep one", following, 0)
            self.error("unexpected text at this indentation", end, self.indent_of(end))
        return value

    # -- blocks -----------------------------------------------------------------------

    def parse_block(self, indent: int, key_path: tuple) -> object:
        """The node that starts on the current line, at `indent`."""
        index = self.index
        content = self.lines[index][indent:]
        if _is_item(content):
            return self.parse_sequence(indent, key_path)
        if self.split_key(index, indent) is not None:
            return self.parse_mapping(indent, key_path)
        self.index += 1
        return self.parse_inline(content, index, indent, indent - 1)

    def next_in_block(self, indent: int, what: str) -> int | None:
        """The next content line of the block at `indent`, None where the block ends; a
        line indented deeper is an error (`what` names the block's lines)."""
        index = self.next_content()
        if index is None:
            return None
        current = self.indent_of(index)
        if current < indent:
            return None
        if current > indent:
            self.error("unexpected indentation (the %s start at column %d)"
                       % (what, indent + 1), index, current)
        return index

    def parse_mapping(self, indent: int, key_path: tuple) -> dict:
        result = {}
        while True:
            index = self.next_in_block(indent, "keys of this mapping")
            if index is None:
                break
            line = self.lines[index]
            if line.rstrip() in ("---", "..."):
                break
            content = line[indent:]
            if _is_item(content):
                self.error("a sequence item where a key was expected", index, indent)
            split = self.split_key(index, indent)
            if split is None:
                self.error("expected 'key: value'", index, indent)
            key, rest, rest_col = split
            path = key_path + (key,)
            if key in result:
                self.error("duplicate key '%s' (first defined on line %d)"
                           % (key, self.positions[path][0]), index, indent)
            self.positions[path] = (index + 1, indent + 1)
            self.index = index + 1
            result[key] = self.parse_value(rest, index, rest_col, indent, path)
        return result

    def parse_sequence(self, indent: int, key_path: tuple) -> list:
        items: list = []
        while True:
            index = self.next_in_block(indent, "items of this sequence")
            if index is None:
                break
            line = self.lines[index]
            content = line[indent:]
            if not _is_item(content):
                break  # e.g. the next key after `key:` and a sequence at the key's indentation
            item_path = key_path + (len(items),)
            self.positions[item_path] = (index + 1, indent + 1)
            after = content[1:]
            spaces = len(after) - len(after.lstrip(" "))
            if after[spaces:spaces + 1] == "\t":
                self.error("tab after '-'; use spaces", index, indent + 1 + spaces)
            rest = after[spaces:]
            item_col = indent + 1 + spaces
            if not rest or rest.startswith("#"):
                self.index = index + 1
                items.append(self.parse_nested(indent, item_path))
            elif _is_item(rest) or self.split_key(index, item_col) is not None:
                # `- key: v` or `- - x`: blank the dash, so the item is a block at item_col
                # whose later lines align with its first (columns in errors stay true).
                self.lines[index] = line[:indent] + " " * (item_col - indent) + rest
                self.index = index
                items.append(self.parse_block(item_col, item_path))
            else:
                self.index = index + 1
                items.append(self.parse_inline(rest, index, item_col, indent))
        return items

    def parse_nested(self, parent_indent: int, key_path: tuple,
                     allow_same_indent_sequence: bool = False) -> object:
        """The block below a `key:` or `-` with nothing after it; None when there is none."""
        index = self.next_content()
        if index is None:
            return None
        current = self.indent_of(index)
        content = self.lines[index][current:]
        if current > parent_indent:
            return self.parse_block(current, key_path)
        if allow_same_indent_sequence and current == parent_indent and _is_item(content):
            return self.parse_sequence(current, key_path)
        return None

    def parse_value(self, rest: str, index: int, col: int, parent_indent: int, key_path: tuple) -> object:
        """The value after `key:`: on the same line, or the block below it."""
        if not rest or rest.startswith("#"):
            return self.parse_nested(parent_indent, key_path, allow_same_indent_sequence=True)
        if _is_item(rest):
            self.error("a sequence cannot start on its key's line; put '- item' on the"
                       " next line", index, col)
        return self.parse_inline(rest, index, col, parent_indent)

    # -- values on one line -------------------------------------------------------------

    def parse_inline(self, text: str, index: int, col: int, parent_indent: int) -> object:
        """A value that starts at line `index`, column `col`; self.index is past its line."""
        first = text[:1]
        if first in _YAML_REFUSED:
            self.refuse(*_YAML_REFUSED[first], index, col)
        if first in ("|", ">"):
            return self.parse_block_scalar(text, index, col, parent_indent)
        if first in ("[", "{", '"', "'"):  # a closed value: only a comment may follow it
            flow = first in "[{"
            value, end = self.parse_flow(text, index, col) if flow else self.parse_quoted(text, 0, index, col)
            self.expect_end(text, end, index, col, "the closing bracket" if flow else "the quoted string")
            return value
        if first in ("@", "`", "%"):
            self.error("'%s' cannot start a plain value; quote the value" % first, index, col)
        if text.startswith("? ") or text == "?":
            self.refuse("complex keys (? key)", "use a plain or quoted key", index, col)
        plain = self.plain_text(text, index, col)
        # A plain scalar may continue on more-indented lines (folded with spaces).
        parts = [plain]
        while self.index < len(self.lines):
            following = self.index
            if self.is_blank(following):
                if self.lines[following].strip(" \t").startswith("#"):
                    break
                # a blank line inside a multi-line plain scalar is a line break
                lookahead = following
                while lookahead < len(self.lines) and not self.lines[lookahead].strip(" \t"):
                    lookahead += 1
                if lookahead >= len(self.lines) or self.is_blank(lookahead) or \
                        self.indent_of(lookahead) <= parent_indent:
                    break
                parts.append("\n" * (lookahead - following))
                self.index = lookahead
                continue
            current = self.indent_of(following)
            if current <= parent_indent:
                break
            continuation = self.lines[following][current:]
            if self.split_key(following, current) is not None or continuation.startswith("- "):
                self.error("unexpected indentation (is a key missing its value, or a"
                           " value over-indented?)", following, current)
            parts.append(self.plain_text(continuation, following, current))
            self.index = following + 1
        if len(parts) == 1:
            return _yaml_plain_value(plain)
        folded = parts[0]
        for part in parts[1:]:  # a blank line is a line break; else a space joins the lines
            folded += part if part.startswith("\n") or folded.endswith("\n") else " " + part
        return folded

    def plain_text(self, text: str, index: int, col: int) -> str:
        """A plain scalar's text on one line: up to a comment; ': ' inside is an error."""
        value = text.split(" #", 1)[0].rstrip(" \t")
        colon = value.find(": ")
        if colon >= 0 or value.endswith(":"):
            at = colon if colon >= 0 else len(value) - 1
            self.error("': ' inside a plain value; quote the value", index, col + at)
        return value

    def expect_end(self, text: str, end: int, index: int, col: int, what: str) -> None:
        """Only blanks, or a comment after a blank, may follow a closed value."""
        rest = text[end:]
        stripped = rest.lstrip(" \t")
        if stripped and not (stripped.startswith("#") and stripped != rest):
            self.error("unexpected text after %s" % what, index, col + end + len(rest) - len(stripped))

    def parse_quoted(self, text: str, start: int, index: int, col: int) -> Tuple[str, int]:
        """A quoted scalar at text[start]; (value, index after the closing quote)."""
        quote = text[start]
        position = start + 1
        out: List[str] = []
        while position < len(text):
            char = text[position]
            if char == quote and (quote == '"' or text[position + 1:position + 2] != "'"):
                return "".join(out), position + 1
            if char == quote:  # '' inside single quotes is one quote
                out.append("'")
                position += 2
                continue
            if char == "\\" and quote == '"':
                code = text[position + 1:position + 2]
                if code in _YAML_ESCAPES:
                    out.append(_YAML_ESCAPES[code])
                    position += 2
                    continue
                if code in _YAML_HEX_ESCAPES:
                    digits = text[position + 2:position + 2 + _YAML_HEX_ESCAPES[code]]
                    with _suppress(ValueError):  # (the error is raised outside: no chained ValueError)
                        if len(digits) == _YAML_HEX_ESCAPES[code]:
                            out.append(chr(int(digits, 16)))
                            position += 2 + len(digits)
                            continue
                    self.error("invalid escape '\\%s%s' in a double-quoted string"
                               % (code, digits), index, col + position)
                self.error("unknown escape sequence '\\%s' in a double-quoted string"
                           % code, index, col + position)
            out.append(char)
            position += 1
        self.error("unterminated quoted string (a quoted string must end on its line;"
                   " use | for multi-line text)", index, col + start)

    def parse_flow(self, text: str, index: int, col: int) -> Tuple[object, int]:
        """A one-line flow collection of scalars; (value, index after its bracket)."""
        opening = text[0]
        closing = "]" if opening == "[" else "}"
        items: list = []
        mapping = {}
        position = 1

        def skip_spaces(at: int) -> int:
            while at < len(text) and text[at] in " \t":
                at += 1
            return at

        def scalar(at: int, stops: str) -> Tuple[object, int, bool]:
            at = skip_spaces(at)
            if at >= len(text):
                self.refuse("multi-line flow collections", "close the bracket on the same"
                            " line, or use block style ('- item')", index, col)
            char = text[at]
            if char in "[{":
                self.refuse("nested flow collections", "use block style", index, col + at)
            if char in _YAML_REFUSED:
                self.refuse(*_YAML_REFUSED[char], index, col + at)
            if char in "\"'":
                value, end = self.parse_quoted(text, at, index, col)
                return value, skip_spaces(end), True
            end = at
            while end < len(text) and text[end] not in stops:
                if text[end] == "#" and end > 0 and text[end - 1] in " \t":
                    break
                if text[end] == ":" and opening == "{" and text[end + 1:end + 2] in (" ", ",", "}", ""):
                    break
                end += 1
            raw = text[at:end].rstrip(" \t")
            return _yaml_plain_value(raw) if raw else None, end, bool(raw)

        while True:
            position = skip_spaces(position)
            if position >= len(text) or text[position] == "#":
                self.refuse("multi-line flow collections", "close the bracket on the same"
                            " line, or use block style ('- item')", index, col)
            if text[position] == closing:
                position += 1
                break
            if opening == "[":
                value, position, present = scalar(position, ",]")
                if not present:
                    self.error("empty entry in a flow sequence", index, col + position)
                items.append(value)
            else:
                key, position, present = scalar(position, ",}:")
                if not present:
                    self.error("empty key in a flow mapping", index, col + position)
                if text[position:position + 1] != ":":
                    self.error("expected 'key: value' in a flow mapping", index, col + position)
                key = _scalar_text(key)  # (a string as it is)
                if key in mapping:
                    self.error("duplicate key '%s'" % key, index, col + position)
                value, position, _ = scalar(position + 1, ",}")
                mapping[key] = value
            position = skip_spaces(position)
            if text[position:position + 1] == ",":
                position += 1
            elif text[position:position + 1] not in ("", "#", closing):  # (those: at the loop's top)
                self.error("expected ',' or '%s'" % closing, index, col + position)
        return (items if opening == "[" else mapping), position

    def parse_block_scalar(self, header: str, index: int, col: int, parent_indent: int) -> str:
        """A literal (|) or folded (>) block scalar; its lines follow the header's line."""
        style = header[0]
        indicators = header[1:].split("#", 1)[0].rstrip(" \t")
        chomp = "clip"
        for char in indicators:
            if char in "-+" and chomp == "clip":
                chomp = "strip" if char == "-" else "keep"
            elif char.isdigit():
                self.refuse("indentation indicators (|2)", "indent the text consistently", index, col)
            else:
                self.error("unexpected '%s' after '%s'" % (char, style), index, col)
        lines = []
        block_indent = None
        position = index + 1
        while position < len(self.lines):
            line = self.lines[position]
            stripped = line.strip(" ")
            if not stripped:
                lines.append(line[block_indent:] if block_indent and len(line) > block_indent else "")
                position += 1
                continue
            current = len(line) - len(line.lstrip(" "))
            if block_indent is None and current <= parent_indent:
                break
            if line[current:current + 1] == "\t" and (block_indent is None or current < block_indent):
                self.error("tab in indentation; indent with spaces", position, current)
            if block_indent is None:
                block_indent = current
            elif current < block_indent:
                break
            lines.append(line[block_indent:])
            position += 1
        trailing = 0
        while lines and lines[-1] == "":
            lines.pop()
            trailing += 1
        # Blank lines after the block that belong to the document, not the scalar, were
        # counted too; only `keep` uses the count, as YAML does.
        self.index = position
        if style == "|":
            text = "\n".join(lines)
        else:
            text, previous, empties = "", None, 0
            for line in lines:
                if line == "":
                    empties += 1
                    continue
                if not previous:
                    text += "\n" * empties + line
                else:  # a lone break between two lines not more indented folds into a space
                    normal = not previous.startswith((" ", "\t")) and not line.startswith((" ", "\t"))
                    text += ("\n" * (empties + (0 if normal else 1)) or " ") + line
                previous, empties = line, 0
        if not lines:
            return "\n" * trailing if chomp == "keep" else ""
        return text + {"strip": "", "clip": "\n", "keep": "\n" * (trailing + 1)}[chomp]

    def split_key(self, index: int, col: int) -> Tuple[str, str, int] | None:
        """(key, the rest after ':', its column) when the text at col is `key: ...`."""
        text = self.lines[index][col:]
        if not text:
            return None
        if text.startswith("? ") or text == "?":
            self.refuse("complex keys (? key)", "use a plain or quoted key", index, col)
        if text[0] in "\"'":
            try:
                key, end = self.parse_quoted(text, 0, index, col)
            except ConfigError:
                return None
            after = text[end:]
            stripped = after.lstrip(" ")
            if not stripped.startswith(":") or stripped[1:2] not in ("", " ", "\t"):
                return None
            rest_start = end + (len(after) - len(stripped)) + 1
        else:
            if text[0] in "[{#&*!|>%@`-" and not (text[0] == "-" and text[1:2] not in (" ", "")):
                if text[0] in _YAML_REFUSED and ":" in text:
                    self.refuse(*_YAML_REFUSED[text[0]], index, col)
                return None
            colon = re.search(r":(?=[ \t]|$)", text)  # the first ':' that ends a key
            comment = text.find(" #")
            if colon is None or 0 <= comment < colon.start():
                return None
            position = colon.start()
            key = text[:position].rstrip(" \t")
            if not key:
                return None
            if key == "<<":
                self.refuse("merge keys (<<)", "repeat the keys", index, col)
            rest_start = position + 1
        rest = text[rest_start:]
        value = rest.lstrip(" \t")
        return key, value if value.startswith(("|", ">")) else value.rstrip(" \t"), \
            col + rest_start + len(rest) - len(value)


def load_yaml(text: str, path: str = "<string>") -> object:
    r"""Parse a document of rooda's YAML subset; a ConfigError at path:line:col otherwise.

    The subset, line-oriented:

      document   one, with an optional leading `---` (and an optional final `...`)
      mapping    `key: value` lines at one indentation; a key is plain or quoted
      sequence   `- item` lines at one indentation, also at the key's own indentation
                 (`key:` then `- a`); an item may be a mapping (`- path: x` and more
                 keys aligned below `path`) or a nested block
      flow       `[a, b]` and `{k: v}` on one line, of scalars only
      scalars    plain (may continue on more-indented lines, folded with spaces),
                 'single' ('' is a quote), "double" (escapes \n \t \" \\ \xHH \uHHHH
                 \UHHHHHHHH \0 \a \b \e \f \r \v \/ \<space> \N \_ \L \P), on one line;
                 block scalars | |- |+ > >- >+
      comments   `#` at the start of a line or after a space
      types      YAML 1.2 core schema for plain scalars: null ~ Null NULL and empty;
                 true/false in three spellings; decimal, 0x and 0o integers; floats
                 with .inf and .nan. yes/no/on/off stay strings. Keys are strings.

    Refused by name, with a hint: anchors, aliases, tags, merge keys (<<), multi-line
    flow collections, nested flow collections, complex keys (?), several documents,
    directives, indentation indicators. Tabs in indentation and duplicate keys are
    errors. Every error is a ConfigError at path:line:col."""
    return YamlSubsetParser(text, path).parse()


# ==== 5. Agent CLIs ===================================================
# Everything rooda knows about one agent CLI is one row of AGENT_CLIS below: its preset
# command and environment, the flags of its structured output mode, its login, its
# known pitfalls, and its own words for limits and failed credentials. How a structured
# format is read is a decoder registered under the format's name: it turns one decoded
# JSON object into rooda's events. A new CLI is a row (and a decoder when its format is
# new); every other list of CLIs, presets or formats is derived from these two tables.

# Events are tuples, their kind first (cheap to make: a busy agent emits thousands),
# made by the constructors below.
EV_TEXT, EV_TOOL, EV_TOOL_RESULT, EV_USAGE = "text", "tool", "tool_result", "usage"
EV_LIMIT, EV_ERROR, EV_NOTICE, EV_RETRY, EV_RESULT = "limit", "error", "notice", "retry", "result"
EV_WINDOW, EV_SESSION, EV_DENIED = "window", "session", "denied"
# The usage figures rooda keeps (SPEC 8 `usage`), each None until the agent reports it.
USAGE_FIELDS = ("model", "input_tokens", "output_tokens", "cache_read_tokens",
                "cache_write_tokens", "cost_usd", "turns", "tool_calls")
# Tool arguments that say most about a call, in the order they are looked for.
_TELLING_ARGUMENTS = ("command", "cmd", "file_path", "filePath", "path", "absolute_path",
                      "notebook_path", "pattern", "url", "query", "description", "prompt", "questions")


def text_event(text: object, delta: bool = False) -> tuple:
    """Assistant text (delta: a chunk of a longer text, joined to the next one)."""
    return (EV_TEXT, str(text or ""), delta)


def tool_event(name: object, detail: str) -> tuple:
    """A tool call and its most telling argument."""
    return (EV_TOOL, str(name or "tool"), detail)


def tool_result_event(output: object, failed: bool, exit_code: object = None,
                      message: object = None) -> tuple:
    """A tool's result: its size, and for a failure (a non-zero exit code is one) its first
    line and exit code."""
    output, code = str(output or ""), exit_code if isinstance(exit_code, int) else None
    failed = failed or bool(code)
    return (EV_TOOL_RESULT, len(output), failed, _one_line(message or output) if failed else "", code)


def usage_event(figures: Usage, how: str = "set", key: object = None) -> tuple:
    """Usage figures, the unknown ones left out: the iteration's ("set"), a step's to sum
    over it ("add"), or a message's while the run goes on ("partial", per message `key`:
    they stand in for the run's when its run-ending event never comes)."""
    return (EV_USAGE, {name: value for name, value in figures.items() if value is not None}, how, key)


def _epoch(value: object) -> float | None:
    """A moment a CLI gave in epoch seconds, or None for what is not one (nanoseconds,
    1e17, 1e308: no clock or calendar can say them)."""
    epoch = _number(value)
    return epoch if epoch is not None and 0 < epoch < 1e11 else None


def limit_event(kind: object, message: str | None, resets_at: object) -> tuple:
    """A provider usage or rate limit: its kind (a short word, cleaned), the CLI's words,
    and when it resets (an epoch, or None)."""
    return (EV_LIMIT, _one_line(str(kind), 60) or "rate_limit", message, _epoch(resets_at))


def error_event(message: object, status: object = None, *kinds: object) -> tuple:
    """An error the CLI reports: its message ("error" when it gives none), the HTTP status
    (else the one it names), and its typed kinds, finest first (SPEC 13 rev 5: Claude's
    `api_error` then `error`, Copilot's `errorType`, ...): short words, cleaned."""
    message = str(message or "error")
    if isinstance(status, bool) or not isinstance(status, int) or not 100 <= status <= 599:
        named = re.search(r"(?<![\d.:])(4\d\d|5\d\d)(?![\d.:])", message)  # `401`, `(429)`, `status: 429`
        status = int(named.group(1)) if named else None
    return (EV_ERROR, message, status, tuple(_one_line(kind, 60) for kind in kinds if isinstance(kind, str)
                                             and kind.strip()))


def notice_event(message: str, own: bool = True) -> tuple:
    """Retries and warnings: shown, never a failure. Not `own` (a sub-agent's words, which
    may quote a limit message): shown only, never what the CLI said of its end."""
    return (EV_NOTICE, message, own)


def retry_words(what: str, attempt: object, most: object = None) -> str:
    """A retry, the CLI's or rooda's own, in one wording (issue 42): `HTTP 529 overloaded ·
    attempt 3/10`, `in 2m · attempt 2`."""
    if not attempt:
        return what
    return "%s · attempt %s%s" % (what, attempt, "/%s" % most if most else "")


def retry_event(status: object, error: object, attempt: object, most: object) -> tuple:
    """The CLI retries a model call of its own (until its next event)."""
    return (EV_RETRY, retry_words("%s%s" % ("HTTP %s " % status if status else "", error or "error"), attempt,
                                  most))


def result_event(ok: bool, text: str | None = None, answer: object = None) -> tuple:
    """The run-ending event, with the final text and the object a schema asked for."""
    return (EV_RESULT, ok, text, answer)


def window_reading(used: object, resets: object, status: object = None, threshold: object = None
                   ) -> tuple | None:
    """A subscription window's reading (SPEC 18) as rooda keeps it, from a CLI, a session
    file or windows.json -- (utilization, resets_at, status, threshold): a fraction (it
    may pass 1, not 100), an epoch, a short word, a fraction -- or None when its
    utilisation is not one. The one shape of a reading, and its one check."""
    used, threshold = _number(used), _number(threshold)
    if used is None or not 0 <= used <= 100:
        return None
    return (used, _epoch(resets), _one_line(status, 40) or None,
            threshold if threshold is not None and 0 <= threshold <= 100 else None)


def window_event(name: str, reading: Mapping[str, Any]) -> tuple:
    """A subscription window's reading in Claude's words (utilization, resetsAt, status,
    surpassedThreshold)."""
    return (EV_WINDOW, name, window_reading(reading.get("utilization"), reading.get("resetsAt"),
                                            reading.get("status"), reading.get("surpassedThreshold")))


def session_event(session: object) -> tuple:
    """The CLI's own id of the run (Codex's thread: where its windows are written)."""
    return (EV_SESSION, session if isinstance(session, str) else "")


def _tool_detail(arguments: object) -> str:
    """The most telling argument of a tool call: command, path, pattern, URL, query."""
    for key in _TELLING_ARGUMENTS:
        value = _mapping(arguments).get(key)
        if isinstance(value, list) and value and all(isinstance(part, str) for part in value):
            value = " ".join(value)
        if isinstance(value, list) and value and all(isinstance(part, dict) for part in value):
            value = " ".join(str(part.get("question") or "") for part in value)  # (AskUserQuestion's)
        if isinstance(value, str) and value.strip():
            return _one_line(value)
    return ""


def denied_event(tool: object, arguments: object) -> tuple:
    """An action the CLI refused the agent (SPEC 24): the tool, and a short form of its
    input -- its most telling argument, else the input itself ("": the call's, if known)."""
    detail = _tool_detail(arguments)
    if not detail and arguments:
        detail = _one_line(json.dumps(arguments, ensure_ascii=False, default=str), 120)
    return (EV_DENIED, _one_line(str(tool or "tool"), 60), detail)


def _unwrap_shell(command: object) -> str:
    """`/bin/bash -lc "pytest -q"` as `pytest -q`: the script, not its wrapper."""
    import shlex
    if isinstance(command, list):
        argv = [str(part) for part in command]
    elif isinstance(command, str):
        try:  # a bounded prefix: shlex is quadratic on one long token (a 1 MB heredoc)
            argv = shlex.split(command[:4096])
        except ValueError:
            return _one_line(command)
    else:
        return ""
    shell = len(argv) == 3 and os.path.basename(argv[0]) in ("bash", "sh", "zsh") and argv[1] in ("-c", "-lc")
    return _one_line(argv[2] if shell else " ".join(argv))


def _text_of(content: object) -> str:
    """A tool result's content: a string, or a list of {type: text, text} blocks."""
    if isinstance(content, str):
        return content
    return "\n".join(block["text"] for block in _list(content)
                     if isinstance(block, dict) and isinstance(block.get("text"), str))


class AgentFormat(Record):
    """One structured output format: its decoder (one JSON object -> a list of events, or
    None for an object that is not an event of the format), and whether the format
    reports a cost."""

    decode: Callable[[dict], list | None]
    reports_cost: bool = False


# The structured formats by name, each registered by its decoder's @output_format.
OUTPUT_FORMATS: Dict[str, AgentFormat] = {}


def output_format(name: str, **options: Any) -> Callable:
    """Register the decorated function as the decoder of the format `name`."""
    def register(decode: Callable[[dict], list | None]) -> Callable[[dict], list | None]:
        OUTPUT_FORMATS[name] = AgentFormat(decode=decode, **options)
        return decode
    return register


def _claude_tokens(usage: dict) -> Fields:
    """The token counts of Claude's `usage`, by rooda's names."""
    return {"input_tokens": _number(usage.get("input_tokens")),
            "output_tokens": _number(usage.get("output_tokens")),
            "cache_read_tokens": _number(usage.get("cache_read_input_tokens")),
            "cache_write_tokens": _number(usage.get("cache_creation_input_tokens"))}


def _claude_result(event: dict) -> list:
    """Claude's run-ending `result`: usage, cost and model, then the verdict."""
    usage = _mapping(event.get("usage"))
    figures = dict(_claude_tokens(usage), cost_usd=_number(event.get("total_cost_usd")),
                   turns=_number(event.get("num_turns")))
    models = event.get("modelUsage")
    if isinstance(models, dict) and models:
        figures["model"] = ", ".join(models)
    # Qwen Code writes this shape with the cached tokens inside input_tokens (its
    # total_tokens says so); Claude Code keeps them apart.
    total = _number(usage.get("total_tokens"))
    if total is not None and figures["input_tokens"] is not None and figures["cache_read_tokens"] and \
            figures["input_tokens"] + (figures["output_tokens"] or 0) == total:
        figures["input_tokens"] -= figures["cache_read_tokens"]
    events = [usage_event(figures)] + [denied_event(denial.get("tool_name"), denial.get("tool_input"))
                                       for denial in map(_mapping, _list(event.get("permission_denials")))]
    final = _typed(event.get("result"), str)
    if event.get("is_error") is True:
        message = final or "; ".join(str(e) for e in _list(event.get("errors"))) or \
            str(event.get("subtype") or "error")
        return events + [error_event(message, event.get("api_error_status"), event.get("api_error"),
                                     event.get("api_error_type"), event.get("subtype")), result_event(False)]
    if final is not None and final.startswith("[API Error"):
        # Qwen Code reports a failed request as a successful result (exit 0).
        return events + [error_event(final), result_event(False)]
    return events + [result_event(True, final, event.get("structured_output"))]


@output_format("claude", reports_cost=True)
def decode_claude(event: dict) -> list | None:
    """Claude Code `-p --output-format stream-json --verbose` (also Qwen Code, Amp)."""
    kind, message = event.get("type"), _mapping(event.get("message"))
    blocks = [b for b in _list(message.get("content")) if isinstance(b, dict)]
    if kind == "assistant":
        texts = [b["text"] for b in blocks if b.get("type") == "text" and isinstance(b.get("text"), str)]
        if event.get("error"):  # a synthetic message that carries an API error, and its kinds
            return [error_event(" ".join(texts) or str(event["error"]), event.get("api_error_status"),
                                event.get("api_error"), event.get("error"), event.get("api_error_type"))]
        usage = _mapping(message.get("usage"))
        key = _typed(message.get("id"), str)  # (a dict's key)
        events: list = [usage_event(_claude_tokens(usage), "partial", key)] if usage else []
        for block in blocks:
            if block.get("type") == "text" and isinstance(block.get("text"), str):
                if event.get("parent_tool_use_id"):
                    # A sub-agent's words (Task tool): shown, but not the agent's verdict.
                    events.append(notice_event("sub-agent: " + _one_line(block["text"]), own=False))
                else:
                    events.append(text_event(block["text"]))
            elif block.get("type") == "tool_use":
                events.append(tool_event(block.get("name"), _tool_detail(block.get("input"))))
        return events
    if kind == "user":
        results = [(_text_of(block.get("content")), block.get("is_error") is True) for block in blocks
                   if block.get("type") == "tool_result"]
        # (a tool a headless run has not, AskUserQuestion: a refused action, SPEC 24)
        missing = [re.search(r"No such tool available: ([\w.-]*\w)", text) for text, bad in results if bad]
        return [tool_result_event(text, failed) for text, failed in results] + [
            denied_event(found.group(1), None) for found in missing if found]
    if kind == "system" and "subtype" in event:
        subtype = event.get("subtype")
        if subtype == "init" and isinstance(event.get("model"), str):
            return [usage_event({"model": event["model"]})]
        if subtype == "api_retry":
            return [retry_event(event.get("error_status"), event.get("error"), event.get("attempt"),
                                event.get("max_retries"))]
        return []
    if kind == "rate_limit_event":
        info = _mapping(event.get("rate_limit_info"))
        # Every window's reading; the top level describes the limiting window alone, and
        # only when one is not plainly allowed: read only without unifiedWindows (SPEC 18).
        windows = _mapping(info.get("unifiedWindows")) or {info.get("rateLimitType"): info}
        events = [window_event(name, _mapping(reading)) for name, reading in windows.items()
                  if name in WINDOWS]
        events = [event for event in events if event[2]]
        if info.get("status") == "rejected":
            return events + [limit_event(info.get("rateLimitType") or "rate_limit", None,
                                         info.get("resetsAt"))]
        if info.get("status") == "allowed_warning":
            used = _number(info.get("utilization"))
            return events + [notice_event("approaching the %s usage limit%s" % (
                info.get("rateLimitType") or "provider's",
                " (%.0f%% used)" % (used * 100) if used is not None else ""))]
        return events
    if kind == "result" and ("is_error" in event or "subtype" in event):  # (gemini's and
        return _claude_result(event)                                     # copilot's have neither)
    if kind == "stream_event":
        return []
    return None


@output_format("codex")
def decode_codex(event: dict) -> list | None:
    """Codex `exec --json`."""
    kind, item = event.get("type"), _mapping(event.get("item"))
    item_type = item.get("type")
    if kind == "thread.started":
        return [session_event(event.get("thread_id"))]
    if kind in ("turn.started", "item.updated"):
        return []
    if kind == "item.started":
        return [tool_event("shell", _unwrap_shell(item.get("command")))] \
            if item_type == "command_execution" else []
    if kind == "item.completed" and item.get("status") == "declined":  # (refused: SPEC 24)
        return [denied_event(item_type, {"command": _unwrap_shell(item.get("command"))} if
                             item_type == "command_execution" else item)]
    if kind == "item.completed":
        if item_type == "agent_message":
            return [text_event(item.get("text"))]
        if item_type == "command_execution":
            return [tool_result_event(item.get("aggregated_output"), item.get("status") == "failed",
                                      item.get("exit_code"))]
        if item_type == "file_change":
            paths = [str(change.get("path")) for change in _list(item.get("changes"))
                     if isinstance(change, dict) and change.get("path")]
            return [tool_event("edit", ", ".join(paths))]
        if item_type == "mcp_tool_call":
            return [tool_event(item.get("tool") or "mcp", str(item.get("server") or ""))]
        if item_type == "web_search":
            return [tool_event("web_search", _one_line(item.get("query")))]
        if item_type == "error":  # a warning (e.g. unknown model metadata), not a failure
            return [notice_event(_one_line(item.get("message")))]
        return []
    if kind == "turn.completed":
        usage = _mapping(event.get("usage"))
        # input_tokens counts the cached ones too (OpenAI's usage); rooda's does not. A
        # turn is not one model request, so no `turns`.
        cached = _number(usage.get("cached_input_tokens"))
        written = _number(usage.get("cache_write_input_tokens"))
        total_input = _number(usage.get("input_tokens"))
        return [usage_event({"input_tokens": None if total_input is None else
                             max(total_input - (cached or 0) - (written or 0), 0),
                             "cache_read_tokens": cached, "cache_write_tokens": written,
                             "output_tokens": _number(usage.get("output_tokens"))}, how="add"),
                result_event(True)]
    if kind == "turn.failed":
        return [error_event(str(_mapping(event.get("error")).get("message") or "the turn failed")),
                result_event(False)]
    if kind == "error":
        # Also sent for retried stream errors; turn.failed decides. The last one explains
        # a run that ends without it (see failure_reason).
        return [notice_event(str(event.get("message") or "error"))]
    return None


# Where a CLI keeps its files when its variable is not set (`$CODEX_HOME/auth.json`).
CLI_HOMES = {"CODEX_HOME": "~/.codex"}


def home_path(where: str, env: Environ) -> str:
    """A CLI's file: `~/...`, or `$CODEX_HOME/...` -- the variable, else its default."""
    if where.startswith("$"):
        name, _, rest = where[1:].partition("/")
        return os.path.join(os.path.expanduser(env.get(name) or CLI_HOMES.get(name, "~")), rest)
    return os.path.expanduser(where)


def codex_rollout(thread: str, env: Environ) -> Tuple[Readings, tuple]:
    """What Codex left in its session rollout file after an iteration (`exec --json` prints
    neither): the windows, from its last `token_count` (SPEC 18), and the typed kind of the
    error its task ended with, `task_complete`'s `error.codex_error_info` -- a word, or
    {word: {http_status_code: N}} -- as (kind, status), or () (SPEC 13 rev 5). A file
    format, not a contract: best effort, and nothing when it is not there."""
    import glob
    home = home_path("$CODEX_HOME", env)
    limits: dict = {}
    kind: tuple = ()
    with _suppress(OSError, ValueError):  # (no such file: max() of nothing)
        found = glob.glob(os.path.join(glob.escape(home), "sessions", "*", "*", "*",
                                       "rollout-*-%s.jsonl" % glob.escape(thread)))
        with open(max(found), "rb") as stream:
            for line in stream:
                with _suppress(ValueError, RecursionError):
                    payload = _mapping(_mapping(json.loads(line)).get("payload"))
                    if payload.get("type") == "token_count":
                        limits = _mapping(payload.get("rate_limits"))
                    if payload.get("type") == "task_complete":
                        info = _mapping(payload.get("error")).get("codex_error_info")
                        named = _mapping(info)
                        word = next(iter(named), None) if named else info
                        status = _mapping(named.get(word)).get("http_status_code") if named else None
                        kind = (word, status) if isinstance(word, str) and word else ()
    readings = {}
    for limit in map(_mapping, limits.values()):  # primary, secondary: 300 and 10080 minutes long
        name = {"300": "five_hour", "10080": "seven_day"}.get(str(limit.get("window_minutes")))
        used = _number(limit.get("used_percent"))
        reading = window_reading(used / 100, limit.get("resets_at")) if used is not None else None
        if name and reading:
            readings[name] = reading
    return readings, kind


@output_format("gemini")
def decode_gemini(event: dict) -> list | None:
    """Gemini CLI `-o stream-json`."""
    kind = event.get("type")
    if kind == "init":
        model = event.get("model")
        return [usage_event({"model": model})] if isinstance(model, str) and model != "auto" else []
    if kind == "message":
        if event.get("role") == "assistant":
            return [text_event(event.get("content"), bool(event.get("delta")))]
        return []  # the user's prompt, echoed back: never scanned
    if kind == "tool_use":
        return [tool_event(event.get("tool_name"), _tool_detail(event.get("parameters")))]
    if kind == "tool_result":
        failed = event.get("status") not in ("success", None)
        return [tool_result_event(event.get("output"), failed, None,
                                  _mapping(event.get("error")).get("message"))]
    if kind == "error":
        return [notice_event(_one_line(event.get("message")))]
    if kind == "result" and ("stats" in event or "status" in event):
        stats = _mapping(event.get("stats"))
        models = [name for name, figures in _mapping(stats.get("models")).items()
                  if isinstance(figures, dict) and figures.get("total_tokens")]
        cached = _number(stats.get("cached"))
        total_input = _number(stats.get("input_tokens"))  # the cached ones included
        events = [usage_event({"input_tokens": None if total_input is None else
                               max(total_input - (cached or 0), 0),
                               "output_tokens": _number(stats.get("output_tokens")),
                               "cache_read_tokens": cached, "model": ", ".join(models) or None})]
        if event.get("status") != "error":
            return events + [result_event(True)]
        error = _mapping(event.get("error"))
        return events + [error_event(error.get("message"), None, error.get("type")), result_event(False)]
    return None


@output_format("copilot")
def decode_copilot(event: dict) -> list | None:
    """GitHub Copilot CLI `--output-format json`."""
    kind, data = event.get("type"), _mapping(event.get("data"))
    if kind == "assistant.message":
        events = []
        if isinstance(data.get("model"), str):
            events.append(usage_event({"model": data["model"]}))
        if isinstance(data.get("content"), str) and data["content"]:
            events.append(text_event(data["content"]))
        return events
    if kind == "tool.execution_start":
        return [tool_event(data.get("toolName"), _tool_detail(data.get("arguments")))]
    if kind == "tool.execution_complete":
        return [tool_result_event(_mapping(data.get("result")).get("content"), data.get("success") is False,
                                  _mapping(data.get("shellExecution")).get("exitCode"))]
    if kind == "session.error":
        return [error_event(data.get("message"), data.get("statusCode"),
                            data.get("errorType"))]
    if kind == "assistant.turn_retry":
        return [retry_event(None, data.get("reason"), None, None)]
    if kind == "assistant.turn_end":
        return [usage_event({"turns": 1}, how="add")]
    if kind == "result":
        return [result_event(event.get("exitCode") in (0, None))]
    if isinstance(kind, str) and kind.split(".")[0] in ("session", "assistant", "model", "tool", "user"):
        return []
    return None


@output_format("opencode", reports_cost=True)
def decode_opencode(event: dict) -> list | None:
    """OpenCode `run --format json`."""
    kind, part = event.get("type"), _mapping(event.get("part"))
    if kind == "text":
        return [text_event(part.get("text"))]
    if kind == "tool_use":
        state = _mapping(part.get("state"))
        events: list = [tool_event(part.get("tool"), _tool_detail(state.get("input")))]
        if state.get("status") in ("completed", "error"):
            events.append(tool_result_event(state.get("output") or state.get("error"),
                                            state.get("status") == "error",
                                            _mapping(state.get("metadata")).get("exit")))
        return events
    if kind == "step_finish":
        tokens = _mapping(part.get("tokens"))
        cache = _mapping(tokens.get("cache"))
        events = [usage_event({"input_tokens": _number(tokens.get("input")),
                               "output_tokens": _number(tokens.get("output")),
                               "cache_read_tokens": _number(cache.get("read")),
                               "cache_write_tokens": _number(cache.get("write")),
                               "cost_usd": _number(part.get("cost")), "turns": 1}, how="add")]
        return events + [result_event(True)] if part.get("reason") == "stop" else events
    if kind == "error":
        error = _mapping(event.get("error"))
        data = _mapping(error.get("data"))
        return [error_event(data.get("message") or error.get("name"),
                            data.get("statusCode"), error.get("name"))]
    if kind in ("step_start", "reasoning"):
        return []
    return None


class AgentCLI(Record):
    """One agent CLI: everything rooda knows about it (SPEC 9, 12, 13, 17)."""

    name: str
    # The preset: the CLI's documented unattended form with tools auto-approved and the
    # prompt on stdin, or in {prompt_file} / {prompt} where the CLI cannot read stdin;
    # where its structured mode was checked against the real CLI, the preset uses it.
    command: str
    env: Env | None = None
    aliases: Tuple[str, ...] = ()      # other names (the Go rooda calls kiro-cli `kiro`)
    stream_format: str = "text"        # the format its structured mode prints
    stream_flags: Tuple[Tuple[str, str | None], ...] = ()  # (flag, value) that turn it on
    login: str = ""                    # what it needs to authenticate (the message when it cannot)
    # Where `doctor` looks for its credentials (a variable, or a file under ~) and who pays
    # with each: (where, who pays) pairs.
    credentials: Tuple[Tuple[str, str], ...] = ()
    budget_flag: str = ""              # its own spending cap for one run (max_cost passes what is left)
    # Its flag that makes the answer an object of a JSON schema (`verdict: schema`): the
    # schema as text, or (schema_file) in a file.
    schema_flag: str = ""
    schema_file: bool = False
    windows: bool = False              # it reports the subscription windows (SPEC 18)
    provider_file: str = os.devnull    # its config, whose providers may name their key (`env_key`)
    # What reads the files it left after an iteration, given its run's id and environment:
    # ({window: reading}, (error kind, HTTP status) or ()) -- Codex's rollout file.
    rollout: Callable[[str, Environ], Tuple[Readings, tuple]] | None = None
    # Its typed error kinds (SPEC 13 rev 5): the cause of SPEC 15 each is ("": the HTTP
    # status it names decides; CAUSE_FATAL: no retry fixes it), and what to do about a
    # kind where the cause's own hint would not say it (every fatal kind has one).
    kinds: Mapping[str, str] = MappingProxyType({})
    advice: Mapping[str, str] = MappingProxyType({})
    stop_signal: int = signal.SIGTERM  # what ends it well (SIGTERM, kill_grace, SIGKILL otherwise)
    # Known traps, for `doctor`: (level, applies(argv, env, in a git repository), message).
    pitfalls: Tuple[Tuple[str, Callable[[Sequence[str], Environ, bool], bool], str], ...] = ()
    # Its own messages, read in a failed iteration's last 2 KB of text: (cause, regex) --
    # a limit's kind is the regex's first group -- or (cause, regex, the limit's kind).
    words: Tuple[Tuple[str, ...], ...] = ()
    auth_exit_codes: Tuple[int, ...] = ()  # exit codes that mean "cannot authenticate"
    # Its project settings the next iteration's CLI reads (`protect`'s :agent, SPEC 22 rev 6):
    # a file, or a directory whole (a trailing /).
    settings: Tuple[str, ...] = ()

    def logins(self, env: Environ) -> List[Tuple[str, str]]:
        """Where it finds credentials, and who pays with each: its own, then the variables
        the providers of its config file name (Codex's `env_key`, issue 43)."""
        found: List[Tuple[str, str]] = []
        with _suppress(OSError):
            with open(home_path(self.provider_file, env), "rb") as stream:
                found = [(key, "the API billing of the provider that names it (%s)" % self.provider_file)
                         for key in re.findall(r'(?m)^\s*env_key\s*=\s*"(\w+)"', _decode(stream.read()))]
        return found + list(self.credentials)

    def paid_by(self, env: Environ) -> Tuple[str, str] | None:
        """The first of its credentials found here, and who pays with it."""
        for where, who in self.logins(env):
            if os.path.exists(home_path(where, env)) if where[:1] in "~$" else env.get(where):
                return where, who
        return None

    def api_key(self, env: Environ) -> str:
        """The variable of the API key it is logged in with here (an API key has no
        subscription windows, SPEC 18); "" for another login."""
        paid = self.paid_by(env)
        return paid[0] if paid and paid[0].endswith("API_KEY") else ""


def _kinds(**causes: str) -> Dict[str, str]:
    """A row's typed error kinds, by cause: `_kinds(auth="a b", limit="c")`."""
    return {kind: cause.replace("by_status", "") for cause, kinds in causes.items() for kind in kinds.split()}


# What to do about a model no account may use (SPEC 13 rev 5), for the rows' `advice`.
_NO_SUCH_MODEL = "choose a model that exists and that the account may use (the agent command's --model)"


# The catalogue, in auto-detection order (SPEC 3); the README's preset table shows each
# row's command and what it needs.
AGENT_CLIS = (
    AgentCLI(
        "claude",
        command="claude -p --dangerously-skip-permissions --output-format stream-json --verbose",
        stream_format="claude", stream_flags=(("--output-format", "stream-json"),),
        login="ANTHROPIC_API_KEY (or CLAUDE_CODE_OAUTH_TOKEN), or run `claude` once and /login",
        credentials=(("ANTHROPIC_API_KEY",
                      "API billing (the Anthropic Console account), not the Claude subscription"),
                     ("CLAUDE_CODE_OAUTH_TOKEN", "the Claude subscription of `claude setup-token`"),
                     ("~/.claude/.credentials.json", "the account `claude` /login signed in")),
        budget_flag="--max-budget-usd", schema_flag="--json-schema", windows=True,
        settings=(".claude/settings.json", ".claude/settings.local.json", ".claude/hooks/"),
        # Claude Code 2.1.332's `error`, its finer `api_error`, the API's `api_error_type`.
        kinds=_kinds(auth="authentication_failed oauth_org_not_allowed account_on_hold verification_required"
                          " cloud_credential_error", billing="billing_error model_requires_usage_credits",
                     limit="rate_limit usage_limit_reached rate_limit_error",
                     outage="overloaded server_error connection_failed stream_idle_timeout overloaded_error"
                            " api_error", error="invalid_request max_output_tokens message_over_context_limit"
                                                " safety_monitor_blocked",
                     fatal="model_not_found claude_code_version_too_old api_key_auth_disabled"),
        advice={"model_not_found": _NO_SUCH_MODEL, "claude_code_version_too_old": "update Claude Code"
                " (npm install -g @anthropic-ai/claude-code)", "api_key_auth_disabled": "the organisation"
                " allows no API keys: log in with `claude` /login instead, or ask its admin",
                "oauth_org_not_allowed": "the organisation allows no subscription login here: use an API"
                " key (ANTHROPIC_API_KEY), or ask its admin"},
        # On SIGTERM during a tool, Claude Code 2.1.197 kills the tool and asks the model
        # for its next turn (measured: two more requests and a file written after Ctrl+C);
        # SIGINT ends the turn and the tools.
        stop_signal=signal.SIGINT,
        pitfalls=(
            ("error", lambda argv, env, repo: hasattr(os, "geteuid") and os.geteuid() == 0 and
             env.get("IS_SANDBOX") != "1" and "skip-permissions" in " ".join(argv),
             "claude refuses --dangerously-skip-permissions as root; run as another user, or set"
             " IS_SANDBOX=1 inside a sandbox"),
            ("warning", lambda argv, env, repo: True,
             "claude exits 0 even when tools were denied; a `verify` gate checks the work itself")),
        words=(
            (CAUSE_LIMIT, r"You(?:'|’)ve hit your ((?:[\w'-]+ )*?limit)\b"),
            (CAUSE_LIMIT, r"You(?:'|’)re out of (usage credits)"),
            (CAUSE_LIMIT, r"Your org is out of (usage)"),
            (CAUSE_LIMIT, r"API Error: Request rejected \(429\)", "rate limit"),
            (CAUSE_LIMIT, r"API Error: Server is temporarily limiting requests", "rate limit"),
            (CAUSE_BILLING, r"Credit balance is too low"),
            (CAUSE_OUTAGE, r"API Error: (?:Repeated )?(?:5\d\d|529)\b|API Error: Connection error"),
            (CAUSE_AUTH, r"Invalid API key · Fix external API key"),
            (CAUSE_AUTH, r"Please run /login"),
            (CAUSE_AUTH, r"OAuth token has expired"),
            (CAUSE_AUTH, r"invalid x-api-key"))),
    AgentCLI(
        "codex",
        command="codex exec --dangerously-bypass-approvals-and-sandbox --skip-git-repo-check"
                " --color never --json -",
        stream_format="codex", stream_flags=(("--json", None),),
        schema_flag="--output-schema", schema_file=True, windows=True, rollout=codex_rollout,
        provider_file="$CODEX_HOME/config.toml", settings=(".codex/",),
        # Codex 0.171.0's `codex_error_info` (in its rollout file, not on stdout).
        kinds=_kinds(auth="unauthorized", limit="usage_limit_exceeded", outage="internal_server_error"
                     " server_overloaded", error="context_window_exceeded bad_request sandbox_error",
                     by_status="http_connection_failed response_too_many_failed_attempts"
                               " response_stream_failed response_stream_disconnected",
                     fatal="model_not_found"),
        advice={"model_not_found": _NO_SUCH_MODEL},
        login="OPENAI_API_KEY, or `codex login`",
        credentials=(("CODEX_API_KEY", "API billing (the OpenAI Platform account)"),
                     ("OPENAI_API_KEY", "API billing (the OpenAI Platform account)"),
                     ("$CODEX_HOME/auth.json", "the ChatGPT plan or API key of `codex login`")),
        pitfalls=(("error", lambda argv, env, repo: "--skip-git-repo-check" not in argv and not repo,
                   "codex exec exits 1 outside a git repository without --skip-git-repo-check"),),
        words=(
            (CAUSE_LIMIT, r"You(?:'|’)ve hit your ((?:[\w'-]+ )*?limit)\b"),
            (CAUSE_BILLING, r"\bQuota exceeded\. Check your plan and billing details"),
            (CAUSE_LIMIT, r"exceeded retry limit, last status: 429", "rate limit"),
            (CAUSE_OUTAGE, r"stream disconnected|unexpected status 5\d\d\b|experiencing high demand"),
            (CAUSE_AUTH, r"unexpected status 401 Unauthorized"),
            (CAUSE_AUTH, r"Incorrect API key provided"))),
    AgentCLI(
        "gemini", command="gemini --yolo --skip-trust -o stream-json",
        stream_format="gemini", stream_flags=(("-o", "stream-json"), ("--output-format", "stream-json")),
        settings=(".gemini/settings.json",),
        login="GEMINI_API_KEY (or GOOGLE_API_KEY / Vertex AI settings), or run `gemini` once to log in",
        credentials=(("GEMINI_API_KEY", "the API key's Google project"),
                     ("GOOGLE_API_KEY", "the API key's Google project"),
                     ("GOOGLE_APPLICATION_CREDENTIALS", "Vertex AI (the Google Cloud project)"),
                     ("~/.gemini/oauth_creds.json", "the Google account `gemini` logged in")),
        pitfalls=(("warning", lambda argv, env, repo: "--skip-trust" not in argv and
                   env.get("GEMINI_CLI_TRUST_WORKSPACE") != "true",
                   "gemini exits 55 in an untrusted folder; add --skip-trust or set"
                   " GEMINI_CLI_TRUST_WORKSPACE=true"),),
        words=(
            (CAUSE_LIMIT, r"You have exhausted your (daily quota)"),
            (CAUSE_AUTH, r"API key not valid"),
            (CAUSE_AUTH, r"API_KEY_INVALID")),
        auth_exit_codes=(41,)),  # "no usable auth"
    AgentCLI(
        "copilot",
        command="copilot --allow-all-tools --no-ask-user --no-auto-update -s --output-format json",
        stream_format="copilot", stream_flags=(("--output-format", "json"),),
        login="GH_TOKEN or GITHUB_TOKEN (COPILOT_PROVIDER_API_KEY with your own provider), or"
              " `copilot` then /login",
        credentials=(("COPILOT_GITHUB_TOKEN", "the GitHub account's Copilot plan"),
                     ("GH_TOKEN", "the GitHub account's Copilot plan"),
                     ("GITHUB_TOKEN", "the GitHub account's Copilot plan"),
                     ("COPILOT_PROVIDER_API_KEY", "your own model provider")),
        kinds=_kinds(auth="authentication", billing="insufficient_quota", limit="rate_limit"),
        pitfalls=(("error", lambda argv, env, repo: "-p" in argv or "--prompt" in argv,
                   "copilot ignores stdin when -p is given; drop -p"),)),
    AgentCLI(
        "cursor-agent", command="cursor-agent -p --force --trust --output-format text {prompt}",
        login="CURSOR_API_KEY, or `cursor-agent login`",
        credentials=(("CURSOR_API_KEY", "the Cursor account"),),
        pitfalls=(("warning", lambda argv, env, repo: not env.get("CURSOR_API_KEY"),
                   "cursor-agent without CURSOR_API_KEY waits for a browser login"),
                  ("warning", lambda argv, env, repo: "--trust" not in argv,
                   "cursor-agent refuses an untrusted folder with exit 0; add --trust"))),
    AgentCLI(
        "kiro-cli", command="kiro-cli chat --no-interactive --trust-all-tools", aliases=("kiro",),
        login="KIRO_API_KEY", credentials=(("KIRO_API_KEY", "the Kiro account"),),
        pitfalls=(("warning", lambda argv, env, repo: not env.get("KIRO_API_KEY"),
                   "kiro-cli runs headless only with KIRO_API_KEY (Pro plans)"),)),
    AgentCLI(
        "amp", command="amp --dangerously-allow-all -x",
        stream_format="claude", stream_flags=(("--stream-json", None),), login="AMP_API_KEY",
        credentials=(("AMP_API_KEY", "the Amp account"),),
        pitfalls=(("error", lambda argv, env, repo: not env.get("AMP_API_KEY"),
                   "amp without AMP_API_KEY waits forever for a login; set AMP_API_KEY"),)),
    AgentCLI(
        "opencode", command="opencode run --auto --format json", settings=("opencode.json",),
        stream_format="opencode", stream_flags=(("--format", "json"),),
        login="the provider's key, from `opencode auth login`",
        credentials=(("~/.local/share/opencode/auth.json", "the providers of `opencode auth login`"),),
        pitfalls=(("warning", lambda argv, env, repo: "--auto" not in argv,
                   "opencode without --auto rejects permission requests silently"),)),
    AgentCLI(
        "qwen", command="qwen --yolo -o stream-json", settings=(".qwen/settings.json",),
        stream_format="claude", stream_flags=(("-o", "stream-json"), ("--output-format", "stream-json")),
        login="OPENAI_API_KEY (with OPENAI_BASE_URL), or `qwen` then /auth",
        credentials=(("OPENAI_API_KEY", "the OpenAI-compatible provider's API billing"),
                     ("~/.qwen/oauth_creds.json", "the Qwen account `qwen` logged in")),
        words=((CAUSE_AUTH, r"\[API Error: 401\b"),
               (CAUSE_OUTAGE, r"\[API Error: (?:Connection error|5\d\d\b)"))),
    AgentCLI(
        "goose", command="goose run --no-session -q -i -", env={"GOOSE_MODE": "auto"},
        login="the provider's API key, from `goose configure`",
        pitfalls=(("warning", lambda argv, env, repo: sys.platform.startswith("linux") and
                   not env.get("GOOSE_DISABLE_KEYRING") and not env.get("DBUS_SESSION_BUS_ADDRESS"),
                   "goose needs a keyring; on headless Linux set GOOSE_DISABLE_KEYRING=1 and the"
                   " provider's API key"),)),
    AgentCLI(
        "aider", command="aider --message-file {prompt_file} --yes-always --no-pretty --no-stream"
                         " --no-check-update --no-analytics --no-show-model-warnings",
        login="OPENAI_API_KEY or ANTHROPIC_API_KEY (or the model's provider key)",
        credentials=(("OPENAI_API_KEY", "API billing (OpenAI)"),
                     ("ANTHROPIC_API_KEY", "API billing (Anthropic)")),
        pitfalls=(("warning", lambda argv, env, repo: True,
                   "aider exits 0 after API failures and never runs shell commands itself; use a"
                   " `verify` gate"),)),
)
# How an agent's output may be read (SPEC 12): `text`, or a format a decoder registered;
# every row's format is one of them.
AGENT_FORMATS = ("text",) + tuple(OUTPUT_FORMATS)
assert all(cli.stream_format in AGENT_FORMATS for cli in AGENT_CLIS), "a row names an unregistered format"
# The presets by name, and their other names.
PRESETS = {cli.name: cli for cli in AGENT_CLIS}
PRESET_ALIASES = {alias: cli.name for cli in AGENT_CLIS for alias in cli.aliases}
# What `protect`'s :agent covers: every CLI's project settings (a fallback agent's too).
AGENT_SETTINGS = tuple(path for cli in AGENT_CLIS for path in cli.settings)


def infer_format(argv: Sequence[str]) -> str | None:
    """The format a known CLI's own flags ask for (`claude ... --output-format
    stream-json` is `claude`), or None."""
    cli = PRESETS.get(os.path.basename(argv[0]) if argv else "")
    if not cli:
        return None
    for flag, value in cli.stream_flags:
        for index, part in enumerate(argv):
            if part == "%s=%s" % (flag, value) or (
                    part == flag and (value is None or argv[index + 1:index + 2] == [value])):
                return cli.stream_format
    return None


def preset_format(cli: AgentCLI) -> str:
    """The format a preset's own command prints (its structured mode, where it uses it)."""
    return infer_format(cli.command.split()) or "text"


# The verdict an agent returns through its CLI's schema flag (SPEC 21): nothing else.
VERDICT_STATUSES = ("success", "failure", "continue")
VERDICT_SCHEMA = {
    "type": "object", "additionalProperties": False,
    # (every property required, as strict schemas -- Codex's -- want: an empty one is null or [])
    "required": ["status", "summary", "explanation", "next_step", "needs", "assumptions"],
    "properties": {"status": {"type": "string", "enum": list(VERDICT_STATUSES)},
                   "summary": {"type": "string", "maxLength": REASON_CHARS},
                   "explanation": {"type": "string"},
                   "next_step": {"type": ["string", "null"]},
                   "needs": {"type": ["string", "null"]},  # (SPEC 24: what only the person can do)
                   "assumptions": {"type": "array", "items": {"type": "string"}}}}
VERDICT_OPTIONAL = ("needs", "assumptions")  # (a verdict without them is still one: SPEC 24)


def verdict_problem(given: object) -> str:
    """What makes an object not a verdict of VERDICT_SCHEMA, checked here (Codex does not
    say it validated it); "" for a good one."""
    if not isinstance(given, dict):
        return "not a JSON object"
    odd = sorted((set(given) ^ set(VERDICT_SCHEMA["required"])) - set(VERDICT_OPTIONAL))  # type: ignore
    if odd:
        return "%s %s" % ("unknown" if odd[0] in given else "no", _one_line(repr(odd[0]), 60))
    if given["status"] not in VERDICT_STATUSES:
        return "status %s" % _one_line(repr(given["status"]), 60)
    summary = given["summary"]
    if not isinstance(summary, str) or len(summary) > REASON_CHARS or "\n" in summary:
        return "summary not one line of at most %d characters" % REASON_CHARS
    if not isinstance(given["explanation"], str) or not isinstance(given["next_step"], (str, type(None))):
        return "explanation or next_step not text"
    assumptions = given.get("assumptions", [])
    if not isinstance(given.get("needs"), (str, type(None))) or not isinstance(assumptions, list) or \
            not all(isinstance(said, str) for said in assumptions):
        return "needs or assumptions not text"
    return ""


# ==== 6. Settings =====================================================
# Every loop setting is one row of SETTINGS: its key, built-in default, check, whether a
# procedure may set it too, and its command-line option. The built-in tier, both
# schemas, the ROODA_LOOP_* tier, the argparse options, the plan of a run and the
# `config` / `info` listings are all derived from it. A check returns an error message,
# or None when the value is acceptable; a check that can read a flag's text has `parse`.

class _Number:
    """The rule of a number setting: finite, whole or not, at least (or above) a minimum,
    null allowed or not -- one set of words for a config value and for a flag."""

    def __init__(self, minimum: float, above: bool = False, whole: bool = False,
                 nullable: bool = False, unit: str = "") -> None:
        self.minimum, self.above, self.whole, self.nullable = minimum, above, whole, nullable
        self.bound = "%s %g" % (">" if above else ">=", minimum)
        self.kind = " of ".join(filter(None, ("a number", unit)))
        if whole:
            self.kind = "a whole number %s" % self.bound

    def __call__(self, value: object) -> str | None:
        if value is None and self.nullable:
            return None
        if isinstance(value, bool) or not isinstance(value, int if self.whole else (int, float)):
            return "must be %s, not %s" % (self.kind, _type_name(value))
        if _number(value) is None:  # nan, inf
            return "must be a finite %s" % self.kind[2:]
        if value < self.minimum or (self.above and value == self.minimum):
            return "must be %s%s" % (self.bound, ", got %d" % value if self.whole else "")
        return None

    def parse(self, option: str, text: str) -> float:
        """A flag's value, or a UsageError in the flag's words."""
        value: float | None = None
        for kind in (int, float) if not self.whole else (int,):
            with _suppress(ValueError):
                value = kind(text)
                break
        if value is None or self(value) is not None:
            raise UsageError("%s must be %s %s, not '%s'" % (
                option, "a whole number" if self.whole else "a number", self.bound, text))
        return value


class _Names:
    """A list of agents' names (`fallback`): a list of non-empty words; `--fallback a,b`."""

    def __call__(self, value: object) -> str | None:
        fine = isinstance(value, list) and all(isinstance(name, str) and name.strip() for name in value)
        return None if fine else "must be a list of agents' names (presets or ai_cmd_aliases)"

    def parse(self, option: str, text: str) -> List[str]:
        names = text.split(",")
        if not all(name.strip() for name in names):
            raise UsageError("%s has an empty name in '%s'; give the agents as codex,gemini" % (option, text))
        return [name.strip() for name in names]


class _Choice:
    """One of a few words (null too, when nullable), with "did you mean"."""

    def __init__(self, *choices: str, nullable: bool = False) -> None:
        self.choices, self.nullable = choices, nullable

    def __call__(self, value: object) -> str | None:
        if value in self.choices or (value is None and self.nullable):
            return None
        hint = did_you_mean(value, self.choices) if isinstance(value, str) else ""
        return "must be one of %s, not %r%s" % (", ".join(self.choices), value, hint)

    def parse(self, option: str, text: str) -> str:
        if text in self.choices:
            return text
        raise UsageError("%s must be %s or %s, not '%s'%s" % (
            option, ", ".join(self.choices[:-1]), self.choices[-1], text, did_you_mean(text, self.choices)))


def _v_bool(value: object) -> str | None:
    return None if isinstance(value, bool) else "must be true or false, not %s" % _type_name(value)


def _v_str(value: object) -> str | None:
    return None if isinstance(value, str) else "must be a string, not %s" % _type_name(value)


def _v_optional(check: Check) -> Check:
    """null is always fine (it unsets the key); anything else must pass `check`."""
    return lambda value: None if value is None else check(value)


def _v_command(value: object) -> str | None:
    fine = value is None or (isinstance(value, str) and value.strip())
    return None if fine else "must be a non-empty command string"


def _v_env(value: object) -> str | None:
    if not isinstance(value, dict):
        return "must be a mapping of variable names to strings, not %s" % _type_name(value)
    for name, setting in value.items():
        if not name or "=" in name:
            return "has an invalid variable name %r" % name
        if not isinstance(setting, (str, int, float, bool)):
            return "variable %s must be a string, not %s" % (name, _type_name(setting))
    return None


def _v_mapping(example: str, fields: Dict[str, Check]
               ) -> Check:
    """A mapping with known keys, each checked by its own validator."""
    def check(value: object) -> str | None:
        if not isinstance(value, dict):
            return "must be a mapping like %s" % example
        for key, setting in value.items():
            if key not in fields:
                return "has an unknown key '%s'%s" % (key, did_you_mean(key, fields))
            problem = fields[key](setting)
            if problem:
                return "%s %s" % (key, problem)
        return None
    return check


def _v_strings(value: object) -> str | None:
    fine = isinstance(value, list) and value and all(isinstance(s, str) and s.strip() for s in value)
    return None if fine else "must be a non-empty list of non-empty strings"


def _v_list(check: Check) -> Check:
    """A list whose every item passes `check`."""
    def each(value: object) -> str | None:
        if not isinstance(value, list):
            return "must be a list, not %s" % _type_name(value)
        return next((problem for problem in map(check, value) if problem), None)
    return each


def _v_message(value: object) -> str | None:
    """A commit message template: a subject, and no misspelt placeholder (other braces stay)."""
    if not isinstance(value, str) or not value.strip():
        return "must be a non-empty string"
    names = ("procedure", "iteration", "summary")
    typos = [name for name in re.findall(r"\{(\w+)\}", value) if name not in names and closest(name, names)]
    return "has no placeholder {%s}%s (they are {procedure}, {iteration} and {summary})" % (
        typos[0], did_you_mean(typos[0], names)) if typos else None


def _v_fraction(value: object) -> str | None:
    """A part of a subscription window kept for the person: from 0 to below 1."""
    return _Number(0)(value) or (None if value < 1 else  # type: ignore[operator]
                                 "must be below 1 (the part kept, 0.3 for 30%)")


def _v_patterns(value: object) -> str | None:
    """Paths and globs in the run directory (`protect`), or `:rooda`, `:agent`."""
    if not isinstance(value, list) or not all(isinstance(p, str) and p.strip() for p in value):
        return "must be a list of paths or globs (or :rooda, :agent)"
    if any(os.path.isabs(p) or ".." in p.split("/") for p in value):
        return "must name paths inside the directory rooda runs in (relative, no ..)"
    return None


def _v_paths(value: object) -> str | None:
    fine = isinstance(value, list) and all(isinstance(p, str) and p for p in value)
    return None if fine else "must be a list of paths"


class Setting(Record):
    """One loop setting (SPEC 3)."""

    key: str
    default: Any
    check: Check
    procedure: bool = False         # a procedure may set it too (its own value wins)
    flag: str | None = None      # the command-line option that overrides both
    metavar: str = "S"
    help: str = ""
    scalar: bool = True             # a ROODA_LOOP_<KEY> variable can set it


# The rules several rows share: a limit in seconds (null: none), a pause or grace, a
# positive span, a count of at least one.
_SECONDS = _Number(0, above=True, nullable=True, unit="seconds")
_PAUSE, _SPAN = _Number(0, unit="seconds"), _Number(0, above=True, unit="seconds")
_COUNT = _Number(1, whole=True)
SETTINGS = (
    Setting("default_max_iterations", DEFAULT_MAX_ITERATIONS, _COUNT,
            procedure=True),
    Setting("iteration_mode", "max-iterations", _Choice("max-iterations", "unlimited"),
            procedure=True),
    Setting("failure_threshold", 3, _COUNT, procedure=True,
            flag="--failure-threshold", metavar="N", help="consecutive failures before aborting (default 3)"),
    Setting("iteration_timeout", None, _SECONDS, procedure=True, flag="--timeout",
            help="wall-clock limit per iteration, seconds"),
    Setting("idle_timeout", None, _SECONDS, procedure=True, flag="--idle-timeout",
            help="stop an iteration after S seconds without agent output"),
    Setting("max_time", None, _SECONDS, procedure=True, flag="--max-time",
            help="time budget for the whole run, seconds"),
    Setting("max_cost", None, _Number(0, above=True, nullable=True, unit="US dollars"),
            procedure=True, flag="--max-cost", metavar="USD",
            help="cost budget for the whole run, from the agent's reported cost"),
    Setting("delay", 0, _PAUSE, flag="--delay",
            help="pause between iterations (multiplied by backoff per failure)"),
    Setting("backoff", 1, _Number(1)),
    Setting("kill_grace", 5, _PAUSE),
    Setting("gate_timeout", 600, _SPAN),
    Setting("ai_cmd", None, _v_command, procedure=True, flag="--ai-cmd", metavar="CMD",
            help="the agent command (split like a shell would, never run by one)"),
    Setting("ai_cmd_alias", None, _v_optional(_v_str), procedure=True,
            flag="--ai-cmd-alias", metavar="NAME",
            help="a named agent preset (claude, codex, gemini, copilot, ...)"),
    Setting("fallback", [], _Names(), procedure=True, scalar=False, flag="--fallback", metavar="A,B",
            help="the agents that take over, in order, when the agent is held by a limit, an outage or its"
                 " account (SPEC 23)"),
    Setting("ai_format", None, _Choice(*AGENT_FORMATS, nullable=True), procedure=True,
            flag="--ai-format", metavar="NAME",
            help="how to read the agent's output: " + ", ".join(AGENT_FORMATS)),
    Setting("env", {}, _v_env, procedure=True, scalar=False),
    Setting("show_ai_output", False, _v_bool),
    Setting("feedback", True, _v_bool),
    Setting("log_dir", "logs", _v_str),
    Setting("max_output_buffer", 65536, _Number(MIN_OUTPUT_BUFFER, whole=True),
            procedure=True),
    Setting("log_level", "info", _Choice(*LOG_LEVELS),
            flag="--log-level", metavar="LEVEL",
            help="the Go rooda's flag: debug = --verbose, warn/error = --quiet"),
    Setting("log_timestamp_format", "time", _v_str),
    Setting("signals", {"success": ["<promise>SUCCESS</promise>"],
                        "failure": ["<promise>FAILURE</promise>"]}, scalar=False,
            check=_v_mapping("{success: [...], failure: [...]}",
                             {"success": _v_strings, "failure": _v_strings})),
    Setting("on_limit", "wait", _Choice("wait", "stop")),
    Setting("limit_wait", 43200, _SPAN),
    Setting("heartbeat", 300, _PAUSE),
    Setting("outage_wait", 3600, _PAUSE),
    Setting("on_failure_signal", "retry", _Choice("retry", "stop"), procedure=True),
    Setting("keep_awake", True, _v_bool),
    Setting("notify", None, _v_command),
    Setting("notify_on", ["session_end"], scalar=False, check=_v_list(
        _Choice("session_end", "iteration_end", "wait", "switch"))),
    Setting("verify", None, _v_command, procedure=True, flag="--verify", metavar="CMD",
            help="quality gate after each iteration (sh -c); a failure rejects the agent's SUCCESS claim"),
    Setting("accept", None, _v_command, procedure=True, flag="--accept", metavar="CMD",
            help="a check after verify passed a SUCCESS whose output the agent never sees (sh -c)"),
    Setting("verdict", "markers", _Choice("markers", "schema"), procedure=True),
    Setting("reserve", {}, scalar=False, check=_v_mapping(
        "{seven_day: 0.3}", dict.fromkeys(WINDOWS, _v_fraction))),
    Setting("pace", "off", _Choice("off", "even"), flag="--pace", metavar="off|even",
            help="even: spend each subscription window no faster than it elapses"),
    Setting("protect", [":rooda", ":agent"], _v_patterns, procedure=True, scalar=False),
    Setting("test_counts", "guard", _Choice("guard", "off"), procedure=True),
    Setting("keep", "all", _Choice("all", "better"), procedure=True, flag="--keep", metavar="all|better",
            help="better: set aside (under a git ref) an attempt that makes verify worse"),
    Setting("verify_baseline", True, _v_bool, procedure=True, flag="--no-verify-baseline",
            help="skip verify's run before iteration 1 (it says what the agent starts from)"),
    Setting("done_when", None, _v_command, procedure=True, flag="--done-when",
            metavar="CMD", help="queue check before each iteration: exit 0 stops (nothing left)"),
    Setting("stuck", None, scalar=False, procedure=True, check=_v_optional(_v_mapping(
        "{same_error: 3, no_change: 2}",
        {"same_error": _COUNT, "no_change": _COUNT}))),
    Setting("git", None, scalar=False, procedure=True, check=_v_optional(_v_mapping(
        "{commit: true, push: false, message: '...'}",
        {"commit": _v_bool, "push": _v_bool, "message": _v_message}))),
)
SETTING = {setting.key: setting for setting in SETTINGS}
# Tier 1, "built-in": every other tier overrides these.
BUILTIN_LOOP = {setting.key: setting.default for setting in SETTINGS}
LOOP_SCHEMA = {setting.key: setting.check for setting in SETTINGS}
# A procedure's own keys, and the loop settings it may set. Its phases were checked when
# the file's fragment paths were resolved.
PROCEDURE_SCHEMA = dict({"display": _v_str, "summary": _v_str, "description": _v_str,
                         "requires": _v_paths, "requires_hint": _v_str},
                        **{setting.key: setting.check for setting in SETTINGS if setting.procedure},
                        **{phase: lambda value: None for phase in PHASES})


_V_ALIAS_MAPPING = _v_mapping("{command: '...', format: claude, env: {...}}", {
    "command": _v_command, "format": _Choice(*AGENT_FORMATS), "env": _v_env})


def _v_alias(value: object) -> str | None:
    """An agent alias: a command string, or {command, format, env} (the Go rooda's form)."""
    if isinstance(value, dict):
        if not value.get("command"):
            return "needs a 'command' (a mapping like {command: '...', format: claude, env: {...}})"
        return _V_ALIAS_MAPPING(value)
    return _v_command(value) if value is not None else None


# ==== 7. Configuration ================================================
# Tiers, lowest first (SPEC 3): built-in -> shipped (rooda-config.json beside rooda.py)
# -> global -> workspace (./rooda-config.* or --config) -> env (ROODA_LOOP_*) -> flag (the
# command line, applied when a run is planned). Mappings are deep-merged key by key,
# lists replaced, null unsets (the key falls back to its built-in default). Relative
# paths are resolved against the file that names them before merging, so where a value
# came from never changes its meaning; provenance is kept per key for `config` and for
# error messages. A procedure's phases name fragments: a file, inline `content`, or a
# `builtin:` path (a shipped prompt, or a Go rooda built-in name mapped onto the shipped
# fragment that does the same job), resolved once, when their layer is read.

def dotted(key_path: Sequence[object]) -> str:
    """('procedures', 'build', 'observe', 1) -> procedures.build.observe[1]"""
    text = ""
    for part in key_path:
        if isinstance(part, int):
            text += "[%d]" % part
        else:
            text += ("." if text else "") + str(part)
    return text


def _resolve_path(base: str, path: str) -> str:
    """A configured path (~ expanded) resolved against `base`, the directory it is relative to."""
    return os.path.normpath(os.path.join(base, os.path.expanduser(path)))


def _check_keys(values: dict, schema: Mapping[str, Check], where: tuple,
                report: Callable[[tuple, str], None]) -> None:
    """Each value by its key's rule in `schema`; a key the schema lacks is unknown."""
    for key, value in values.items():
        check = schema.get(key)
        problem = check(value) if check else "unknown key%s" % did_you_mean(key, schema)
        if problem:
            report(where + (key,), problem)


def validate_config(data: dict, report: Callable[[tuple, str], None]) -> None:
    """Check the merged data against the schema; report(key_path, message) per problem."""
    sections = ("loop", "ai_cmd_aliases", "procedures")
    for key in data:
        if key not in sections:
            report((key,), "unknown key%s" % did_you_mean(key, sections))
        elif not isinstance(data[key], dict):
            report((key,), "must be a mapping, not %s" % _type_name(data[key]))
    _check_keys(_mapping(data.get("loop")), LOOP_SCHEMA, ("loop",), report)
    for name, command in _mapping(data.get("ai_cmd_aliases")).items():
        problem = _v_alias(command)
        if problem:
            report(("ai_cmd_aliases", name), problem)
    for name, procedure in _mapping(data.get("procedures")).items():
        where = ("procedures", name)
        if name in RESERVED_WORDS:
            report(where, "'%s' is a command and cannot name a procedure" % name)
        if not isinstance(procedure, dict):
            report(where, "must be a mapping, not %s" % _type_name(procedure))
            continue
        _check_keys(procedure, PROCEDURE_SCHEMA, where, report)
        # A phase may be empty or absent (the Go rooda allows it), the procedure not.
        if not any(procedure.get(phase) for phase in PHASES):
            report(where, "has no fragment in any phase; give observe, orient, decide or act at least one")


# The Go rooda's built-in fragments -- `builtin:fragments/<phase>/<name>.md`, the 57 names
# its 16 built-in procedures use -- by the shipped fragment (prompts/<phase>/) that does
# the same job: per phase, each fragment and the Go names it stands for, read as name ->
# fragment. A phase lists a fragment once. The table is printed in the README ("Configs
# written for the Go rooda").
GO_BUILTIN_FRAGMENTS = {phase: {name: shipped for shipped, names in table.items() for name in names.split()}
                        for phase, table in {
    "observe": {
        "agents-md": "study_agents_md",
        "repository": "scan_repo_structure detect_build_system",
        "tracker": "detect_work_tracking query_work_tracking",
        "specs": "study_specs",
        "code": "study_impl",
        "plan": "study_task_details study_draft_plan",
        "request": "study_task_input",
        "checks": "run_tests run_lints verify_commands",
    },
    "orient": {
        "agents-drift": "compare_detected_vs_documented compare_documented_vs_actual identify_drift",
        "quality-criteria": "evaluate_against_quality_criteria",
        "task": "understand_task_requirements",
        "feature": "understand_feature_requirements",
        "fix": "understand_bug_root_cause",
        "affected": "search_codebase identify_affected_files identify_affected_specs identify_affected_code",
        "spec-quality": "identify_spec_deficiencies",
        "plan-vs-tracker": "parse_plan_tasks map_to_work_tracking_format",
        "spec-to-impl": "identify_specified_but_not_implemented",
        "impl-to-spec": "identify_implemented_but_not_specified",
        "refactor": "identify_structural_issues identify_duplication understand_refactor_request",
        "impl-quality": "identify_code_smells identify_complexity_issues",
        "chore": "identify_maintenance_needs understand_chore_request",
    },
    "decide": {
        "agents-sync": "determine_sections_to_update",
        "signal": "decide_signal",
        "task": "pick_task",
        "impl-changes": "plan_implementation_approach",
        "plan": "break_down_into_tasks prioritize_tasks",
        "findings": "prioritize_findings prioritize_gaps_by_impact identify_issues categorize_drift_severity",
        "publish": "determine_import_strategy",
    },
    "act": {
        "write-agents-md": "write_agents_md",
        "commit": "commit_changes",
        "signals": "emit_signal",
        "implement": "modify_files run_tests update_work_tracking",
        "publish-plan": "create_work_items update_draft_plan_status",
        "write-report": "write_audit_report write_gap_report",
        "write-draft-plan": "write_draft_plan",
    }}.items()}
# What a Go name's fragment needs that the Go config cannot say.
GO_FRAGMENT_PARAMETERS = {
    "write-report": {"report": "that AGENTS.md names for audit reports (else audits/report.md)"},
}


def _resolve_builtin(target: str) -> Tuple[str, Dict[str, str] | None, bool]:
    """A `builtin:` path as (file, default parameters, whether it is a Go built-in name):
    `builtin:prompts/act/signals.md` is the shipped file itself; `builtin:fragments/<phase>/
    <name>.md` a Go rooda name from GO_BUILTIN_FRAGMENTS (or a shipped file so named).
    A name neither knows is a ValueError that proposes the nearest one."""
    name, prompts = target[len("builtin:"):].lstrip("/"), os.path.join(ROODA_DIR, "prompts")
    if name.startswith("prompts/"):
        return os.path.join(prompts, name[len("prompts/"):]), None, False
    rest = name[len("fragments/"):] if name.startswith("fragments/") else name
    phase, _, file_name = rest.partition("/")
    stem = file_name[:-3] if file_name.endswith(".md") else file_name
    table = GO_BUILTIN_FRAGMENTS.get(phase, {})
    if stem in table:
        parameters = dict(GO_FRAGMENT_PARAMETERS.get(table[stem]) or {}) or None
        return os.path.join(prompts, phase, table[stem] + ".md"), parameters, True
    if os.path.isfile(os.path.join(prompts, rest)):
        return os.path.join(prompts, rest), None, False
    if phase not in PHASES:
        raise ValueError("%s: no such built-in fragment (they are builtin:fragments/<phase>/<name>.md"
                         " with a phase of %s)" % (target, ", ".join(PHASES)))
    folder = os.path.join(prompts, phase)
    shipped = [f[:-3] for f in sorted(os.listdir(folder)) if f.endswith(".md")] \
        if os.path.isdir(folder) else []
    near = closest(stem, list(table) + shipped)
    raise ValueError("%s: no such built-in fragment%s" % (
        target, "; did you mean 'builtin:fragments/%s/%s.md'?" % (phase, near) if near else ""))


def _parameter_text(value: object) -> str:
    """A fragment parameter as the text that replaces {{.name}}; a list is comma-joined, null is empty."""
    if value is None:
        return ""
    if isinstance(value, list):
        return ", ".join(_scalar_text(item) for item in value)
    return _scalar_text(value)


def _resolve_fragments(value: object, base: str, key_path: tuple, report: Callable) -> object:
    """A phase value in its canonical form: a list of {path} / {content} fragments.

    Accepts a bare path (the Go rooda's v0.1 form), a list of paths, and a list of
    {path, parameters} / {content} items; an empty list is an empty phase. Relative
    paths resolve against `base`, the directory of the file that names them; `builtin:`
    names resolve to prompts/ beside rooda.py, Go rooda names through its table (a
    shipped fragment that two Go names share is listed once)."""
    items = value if isinstance(value, list) else [value]
    fragments = []
    for index, item in enumerate(items):
        where = key_path + (index,) if isinstance(value, list) else key_path
        if isinstance(item, str):
            item = {"path": item}
        if not isinstance(item, dict):
            report(where, "must be a path or a mapping with 'path' or 'content', not %s" % _type_name(item))
            continue
        for key in item:
            if key not in ("path", "content", "parameters"):
                report(where + (key,), "unknown key%s" % did_you_mean(key, ("path", "content", "parameters")))
        if ("path" in item) == ("content" in item):
            report(where, "needs exactly one of 'path' and 'content'")
            continue
        fragment: dict = {}
        defaults = None
        if "path" in item:
            target = item["path"]
            if not isinstance(target, str) or not target.strip():
                report(where + ("path",), "must be a non-empty string")
                continue
            if target.startswith("builtin:"):
                try:
                    path, defaults, from_go = _resolve_builtin(target)
                except ValueError as exc:
                    report(where + ("path",), str(exc))
                    fragments.append({"path": target})  # reported: the phase is not "empty"
                    continue
                if from_go and any(f.get("path") == path for f in fragments):
                    continue  # two Go names, one shipped fragment: it is said once
            else:
                path = _resolve_path(base, target)
            fragment["path"] = path
        else:
            if not isinstance(item["content"], str):
                report(where + ("content",), "must be a string, not %s" % _type_name(item["content"]))
                continue
            fragment["content"] = item["content"]
        parameters = item.get("parameters")
        if parameters is not None:
            wrong = [name for name, v in parameters.items() if v is not None and
                     not isinstance(v, (str, int, float, bool, list))] if isinstance(parameters, dict) else []
            if not isinstance(parameters, dict) or wrong:
                report(where + ("parameters",) + tuple(wrong[:1]), "must be a text, a number, a boolean or a"
                       " list" if wrong else "must be a mapping of names to values")
                continue
            defaults = dict(defaults or {}, **{str(k): _parameter_text(v) for k, v in parameters.items()})
        if defaults:
            fragment["parameters"] = defaults
        fragments.append(fragment)
    return fragments


TIER_BUILTIN, TIER_SHIPPED, TIER_GLOBAL = "built-in", "shipped", "global"
TIER_WORKSPACE, TIER_ENV, TIER_FLAG = "workspace", "env", "flag"
ENV_PREFIX = "ROODA_LOOP_"  # the env tier's variables


class Config(Record):
    """The merged configuration; `provenance` maps key paths (tuples) to (tier, file,
    line, column) of the value in force, `sources` keeps each file's lines for carets."""

    data: dict
    provenance: Dict[tuple, Tuple[str, str | None, int | None, int | None]]
    sources: Dict[str, List[str]]
    files: List[Tuple[str, str]]
    warnings: List[str]             # `file:line:col: warning: ...` (the Go rooda's old keys)

    def loop(self, key: str) -> Any:
        """A loop setting, falling back to the built-in default when a tier unset it."""
        return self.data.get("loop", {}).get(key, BUILTIN_LOOP.get(key))

    def procedure(self, name: str) -> dict:
        """A procedure's settings, or a UsageError that proposes the closest name."""
        procedures = self.data.get("procedures", {})
        if name not in procedures:
            hint = did_you_mean(name, procedures)
            if not hint and procedures:
                hint = " (see 'python3 rooda.py list')"
            raise UsageError("unknown procedure '%s'%s" % (name, hint))
        return procedures[name]

    def origin(self, key_path: tuple) -> Tuple[str, str | None, int | None, int | None]:
        """(tier, file, line, col) of a key, or of its nearest ancestor that has one."""
        path = tuple(key_path)
        while path:
            if path in self.provenance:
                return self.provenance[path]
            path = path[:-1]
        return (TIER_BUILTIN, None, None, None)

    def where(self, key_path: tuple) -> Where:
        """(tier, file, line) of a key's value."""
        return self.origin(key_path)[:3]

    def problem(self, key_path: tuple, message: str) -> tuple:
        """A ConfigError problem located at the key: `file:line:col: key.path: message`."""
        tier, path, line, col = self.origin(key_path)
        lines = self.sources.get(path) if path else None
        source = lines[line - 1] if lines and line and line <= len(lines) else None
        return (path or "<%s>" % tier, line, col, "%s: %s" % (dotted(key_path), message), source)


def _json_positions(text: str) -> Positions:
    """(line, col) of every key and list item of a valid JSON text, by key path."""
    import bisect
    starts = [0] + [match.end() for match in re.finditer("\n", text)]
    positions = {}
    stack: List[list] = []  # [kind, path, current key or index, expecting a key]

    def where(offset: int) -> Tuple[int, int]:
        line = bisect.bisect_right(starts, offset)
        return line, offset - starts[line - 1] + 1

    for match in re.finditer(r'"(?:[^"\\]|\\.)*"|[{}\[\]:,]|[^\s{}\[\]:,"]+', text):
        token = match.group()
        top: list = stack[-1] if stack else []
        here = top[1] + (top[2],) if top else ()  # the path of a value that starts here
        if top and top[0] == "array" and token not in ("]", ","):
            positions[here] = where(match.start())
        if token in ("{", "["):
            stack.append(["object" if token == "{" else "array", here, 0 if token == "[" else None, True])
        elif token in ("}", "]"):
            stack.pop()
        elif token == ",":
            if top[0] == "object":
                top[3] = True
            else:
                top[2] += 1
        elif token == ":":
            top[3] = False
        elif top and top[0] == "object" and top[3] and token.startswith('"'):
            top[2] = json.loads(token)
            positions[top[1] + (top[2],)] = where(match.start())
    return positions


def parse_config_text(text: str, shown: str, is_yaml: bool
                      ) -> Tuple[dict, Positions, List[str]]:
    """Config text (JSON, or the YAML subset) as a mapping, its key positions and lines."""
    lines = text.splitlines()
    if is_yaml:
        parser = YamlSubsetParser(text, shown)
        data = parser.parse()
        positions = parser.positions
    else:
        def reject_duplicates(pairs: List[Tuple[str, object]]) -> dict:
            result = {}
            for key, value in pairs:
                if key in result:
                    raise ConfigError("duplicate key '%s'" % key, shown)
                result[key] = value
            return result

        try:
            data = json.loads(text, object_pairs_hook=reject_duplicates) if text.strip() else None
        except json.JSONDecodeError as exc:
            source = lines[exc.lineno - 1] if exc.lineno <= len(lines) else ""
            message = exc.msg[0].lower() + exc.msg[1:]
            raise ConfigError(message, shown, exc.lineno, exc.colno, source) from None
        except RecursionError:
            raise ConfigError("nested too deeply", shown) from None
        positions = _json_positions(text)
    if data is None:
        data = {}  # an empty file configures nothing
    if not isinstance(data, dict):
        raise ConfigError("the top level must be a mapping, not %s" % _type_name(data), shown,
                          1, 1, lines[0] if lines else None)
    return data, positions, lines


def read_config_file(path: str, shown: str) -> Tuple[dict, Positions, List[str]]:
    """A config file's data, the positions of its keys, and its lines (for carets)."""
    try:
        with open(path, "rb") as stream:
            raw = stream.read()
    except OSError as exc:
        raise ConfigError("cannot read config file: %s" % (exc.strerror or exc), shown) from None
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = raw[:exc.start].count(b"\n") + 1
        raise ConfigError("not valid UTF-8 (byte 0x%02x)" % raw[exc.start], shown, line,
                          exc.start - raw.rfind(b"\n", 0, exc.start)) from None
    return parse_config_text(text, shown, path.endswith((".yml", ".yaml")))


def _find_config(directory: str) -> str | None:
    """The config file in a directory, None without one; two of them are ambiguous."""
    found = [name for name in CONFIG_NAMES if os.path.isfile(os.path.join(directory, name))]
    if len(found) > 1:
        raise ConfigError("ambiguous configuration: both %s exist; keep one"
                          % " and ".join(found), os.path.join(directory, found[0]))
    return os.path.join(directory, found[0]) if found else None


def global_config_dir(environ: Environ) -> str:
    """$ROODA_CONFIG_HOME, else $XDG_CONFIG_HOME/rooda, else ~/.config/rooda (%APPDATA%\\rooda on Windows)."""
    if environ.get("ROODA_CONFIG_HOME"):
        return environ["ROODA_CONFIG_HOME"]
    if os.name == "nt" and environ.get("APPDATA"):
        return os.path.join(environ["APPDATA"], "rooda")
    if environ.get("XDG_CONFIG_HOME"):
        return os.path.join(environ["XDG_CONFIG_HOME"], "rooda")
    return os.path.join(os.path.expanduser("~"), ".config", "rooda")


def _upgrade_settings(settings: dict, key_path: tuple, warn: Callable) -> dict:
    """The Go rooda's spellings in a loop or procedure mapping, in today's words: an empty
    ai_cmd / ai_cmd_alias means "not set here" (the tier below shows through), and v0.1's
    default_iterations is default_max_iterations (its 0 meaning unlimited)."""
    settings = dict(settings)
    for key in ("ai_cmd", "ai_cmd_alias"):
        if settings.get(key) == "":
            del settings[key]
    if "default_iterations" in settings:
        count = settings.pop("default_iterations")
        warn(key_path + ("default_iterations",), "default_iterations is the Go rooda v0.1 name;"
             " read as default_max_iterations%s" % (" (0: iteration_mode unlimited)" if count == 0 else ""))
        if count == 0 and not isinstance(count, bool):  # (false is a mistake, reported below)
            settings.setdefault("iteration_mode", "unlimited")
        else:
            settings.setdefault("default_max_iterations", count)
    return settings


def _prepare_layer(raw: dict, base: str, report: Callable, warn: Callable) -> dict:
    """One file's data with its relative paths resolved against `base` (its directory),
    and the Go rooda's older keys read as today's (with a deprecation warning each)."""
    layer = dict(raw)
    if "ai_tools" in layer:
        warn(("ai_tools",), "ai_tools is the Go rooda v0.1 name; read as ai_cmd_aliases")
        tools = layer.pop("ai_tools")
        if isinstance(tools, dict) and isinstance(layer.get("ai_cmd_aliases", {}), dict):
            layer["ai_cmd_aliases"] = dict(tools, **layer.get("ai_cmd_aliases", {}))
    loop = layer.get("loop")
    if isinstance(loop, dict):
        loop = _upgrade_settings(loop, ("loop",), warn)
        if isinstance(loop.get("log_dir"), str):
            loop["log_dir"] = _resolve_path(base, loop["log_dir"])
        layer["loop"] = loop
    procedures = layer.get("procedures")
    if isinstance(procedures, dict):
        resolved = {}
        for name, procedure in procedures.items():
            if isinstance(procedure, dict):
                procedure = _upgrade_settings(procedure, ("procedures", name), warn)
                for phase in PHASES:
                    if procedure.get(phase) is not None:
                        procedure[phase] = _resolve_fragments(
                            procedure[phase], base, ("procedures", name, phase), report)
            resolved[name] = procedure
        layer["procedures"] = resolved
    return layer


def _env_layer(environ: Environ, cwd: str, report: Callable) -> dict:
    """The env tier: ROODA_LOOP_<KEY> for each scalar loop setting (a relative
    ROODA_LOOP_LOG_DIR is taken from the current directory, like --log-dir)."""
    loop = {}
    scalars = [setting.key for setting in SETTINGS if setting.scalar]
    for name, raw in sorted(environ.items()):
        if not name.startswith(ENV_PREFIX):
            continue
        key = name[len(ENV_PREFIX):].lower()
        if key not in scalars:
            near = closest(key, scalars)
            hint = "; did you mean %s%s?" % (ENV_PREFIX, near.upper()) if near else ""
            report(("loop", key), "%s cannot set %s, which is not one value: set it in a config file" % (
                name, key) if key in SETTING else "%s is not a loop setting%s" % (name, hint))
            continue
        text = raw.strip()
        value = _yaml_plain_value(text)  # (typed as the same word in a YAML file is)
        if SETTING[key].check is _v_bool and text in ("1", "0"):
            value = text == "1"
        if key == "log_dir" and isinstance(value, str):
            value = _resolve_path(cwd, value)
        loop[key] = value
    return {"loop": loop} if loop else {}


def _forget(provenance: dict, path: tuple) -> None:
    for stale in [p for p in provenance if p[:len(path)] == path and len(p) > len(path)]:
        del provenance[stale]


def _copy(value: object) -> object:
    if isinstance(value, dict):
        return {k: _copy(v) for k, v in value.items()}
    return [_copy(v) for v in value] if isinstance(value, list) else value


def _record_children(value: dict, path: tuple, origin: Callable, provenance: dict) -> None:
    """Provenance for the keys inside a mapping that arrived whole (lists stay one value)."""
    for key, child in value.items():
        provenance[path + (key,)] = origin(path + (key,))
        if isinstance(child, dict):
            _record_children(child, path + (key,), origin, provenance)


def _merge(into: dict, layer: dict, origin: Callable[[tuple], tuple], provenance: dict,
           prefix: tuple = ()) -> None:
    """Deep-merge `layer` into `into`: mappings key by key, lists replaced, null unsets."""
    for key, value in layer.items():
        path = prefix + (key,)
        if isinstance(value, dict) and isinstance(into.get(key), dict):
            if provenance.get(path, (TIER_BUILTIN,))[0] == TIER_BUILTIN:  # (a file is where to look)
                provenance[path] = origin(path)
            _merge(into[key], value, origin, provenance, path)
            continue
        if isinstance(into.get(key), dict):  # only a replaced or unset mapping has stale children
            _forget(provenance, path)
        provenance[path] = origin(path)
        if value is None:
            into.pop(key, None)
        else:
            into[key] = _copy(value)
            if isinstance(value, dict):
                _record_children(value, path, origin, provenance)


def config_files(config_path: str | None, cwd: str, environ: Environ) -> List[Tuple[str, str]]:
    """The config files in tier order: [(tier, absolute path)], each loaded once."""
    found = []
    if os.path.isfile(SHIPPED_CONFIG):
        found.append((TIER_SHIPPED, SHIPPED_CONFIG))
    global_file = _find_config(global_config_dir(environ))  # (None when the directory is not there)
    if global_file:
        found.append((TIER_GLOBAL, global_file))
    workspace: str | None
    if config_path is not None:
        named = os.path.join(cwd, os.path.expanduser(config_path))
        if not os.path.exists(named):
            raise ConfigError("config file not found", config_path)
        if os.path.isdir(named):
            raise ConfigError("config path is a directory, not a file", config_path)
        workspace = named
    else:
        workspace = _find_config(cwd)
    if workspace is not None:
        found.append((TIER_WORKSPACE, workspace))
    unique: List[Tuple[str, str]] = []
    for tier, path in found:  # the same file in two tiers is loaded once, as the lower
        if not any(os.path.samefile(path, seen) for _, seen in unique):
            unique.append((tier, path))
    return unique


def load_config(config_path: str | None = None, cwd: str | None = None,
                environ: Environ | None = None) -> Config:
    """Load and merge the tiers below `flag` (`config_path`: --config), then validate the
    result once; all problems are raised together."""
    cwd = cwd or os.getcwd()
    variables: Environ = os.environ if environ is None else environ
    data: dict = {}
    provenance: dict = {}
    sources = {}
    files = []
    problems = []
    warnings = []
    builtin = {"loop": _copy(BUILTIN_LOOP), "procedures": {},
               "ai_cmd_aliases": {name: cli.command for name, cli in PRESETS.items()}}
    _merge(data, builtin, lambda path: (TIER_BUILTIN, None, None, None), provenance)

    for tier, path in config_files(config_path, cwd, variables):
        shown = _display_path(path, cwd)
        raw, positions, lines = read_config_file(path, shown)
        sources[shown] = lines

        # (called only while this file is merged: they read this iteration's variables)
        def origin(key_path: tuple) -> tuple:
            return (tier, shown) + positions.get(key_path, (None, None))

        def report(key_path: tuple, message: str) -> None:
            _, shown, line, col = origin(key_path)
            source = lines[line - 1] if line and line <= len(lines) else None
            problems.append((shown, line, col, "%s: %s" % (dotted(key_path), message), source))

        def warn(key_path: tuple, message: str) -> None:
            where = ":".join(str(part) for part in origin(key_path)[1:] if part is not None)
            warnings.append("%s: warning: %s" % (where, message))

        layer = _prepare_layer(raw, os.path.dirname(path), report, warn)
        _merge(data, layer, origin, provenance)
        files.append((tier, shown))

    def env_origin(key_path: tuple) -> tuple:
        return (TIER_ENV, ENV_PREFIX + str(key_path[-1]).upper() if len(key_path) > 1 else "environment",
                None, None)

    def env_report(key_path: tuple, message: str) -> None:
        problems.append(("environment", None, None, message, None))

    _merge(data, _env_layer(variables, cwd, env_report), env_origin, provenance)
    config = Config(data, provenance, sources, files, warnings)
    validate_config(data, lambda key_path, message: problems.append(config.problem(key_path, message)))
    if problems:
        raise ConfigError.collect(problems)
    return config


class AgentCommand(Record):
    """The agent to run: its command (a template with {prompt_file} / {prompt}), its
    environment, where it came from, and how its output is read (SPEC 12)."""

    argv: List[str]
    env: Env
    source: str                     # where it came from, for people ("preset claude, found on PATH")
    origin: Where  # and as Config.where says it
    preset: str | None
    format: str

    @property
    def cli(self) -> AgentCLI | None:
        """Its catalogue row: the preset's, or that of the CLI its command names."""
        return PRESETS.get(self.preset or os.path.basename(self.argv[0]))

    @property
    def name(self) -> str:
        """How the logs and the progress lines name it (SPEC 23): its preset, else its program."""
        return self.preset or os.path.basename(self.argv[0])

    def display(self) -> str:
        import shlex
        return " ".join(shlex.quote(part) if part not in (PROMPT_FILE_TOKEN, PROMPT_TOKEN)
                        else part for part in self.argv)


def _split_command(command: str, origin: str) -> List[str]:
    import shlex
    try:
        argv = shlex.split(command)
    except ValueError as exc:
        raise ConfigError("cannot parse the agent command from %s: %s" % (origin, exc)) from None
    if not argv:
        raise ConfigError("the agent command from %s is empty" % origin)
    return argv


def _which(program: str) -> str | None:
    import shutil
    return shutil.which(program)


def alias_definition(aliases: Mapping[str, Any], name: str) -> Tuple[str, str, Env, str | None] | None:
    """(name, command, environment, format) of an alias -- a command string, or a mapping
    {command, format, env} -- or None. A preset unchanged keeps its own env and format."""
    if name not in aliases and name in PRESET_ALIASES:
        name = PRESET_ALIASES[name]
    value = aliases.get(name)
    if value is None:
        return None
    if isinstance(value, dict):
        env = {key: _scalar_text(setting) for key, setting in (value.get("env") or {}).items()}
        return name, value["command"], env, value.get("format")
    preset = PRESETS.get(name)
    if preset is not None and value == preset.command:
        return name, value, dict(preset.env or {}), preset_format(preset)
    return name, value, {}, None


def resolve_agent(config: Config, procedure_name: str | None, ai_cmd: str | None = None,
                  ai_cmd_alias: str | None = None, ai_format: str | None = None
                  ) -> AgentCommand | None:
    """The agent command by SPEC 3's precedence, and its output format by the same one
    (--ai-format > procedure > loop > the alias's `format` > the preset's > the CLI's own
    flags > text); None when nothing names an agent and no preset's program is on PATH."""
    aliases = config.data.get("ai_cmd_aliases", {})
    procedure = config.data.get("procedures", {}).get(procedure_name, {})
    chosen_format = ai_format or procedure.get("ai_format") or config.loop("ai_format")

    def agent(argv: List[str], env: Env, source: str, origin: tuple, preset: str | None,
              own_format: str | None) -> AgentCommand:
        return AgentCommand(argv, env, source, origin, preset,
                            chosen_format or own_format or infer_format(argv) or "text")

    def from_alias(name: str, said: str, origin: tuple) -> AgentCommand:
        found = alias_definition(aliases, name)
        if found is None:
            raise UsageError("unknown agent preset '%s' (from %s)%s" % (
                name, said, did_you_mean(name, list(aliases) + list(PRESET_ALIASES))
                or "; known presets: " + ", ".join(sorted(aliases))))
        name, command, env, own_format = found
        return agent(_split_command(command, "ai_cmd_aliases." + name), env,
                     "preset %s, %s" % (name, said), origin, name, own_format)

    keys = ("ai_cmd", "ai_cmd_alias")
    choices = [(key, value, flag, (TIER_FLAG, flag, None)) for key, value, flag in zip(
        keys, (ai_cmd, ai_cmd_alias), ("--ai-cmd", "--ai-cmd-alias"))] + [
        (key, procedure.get(key), "procedure %s %s" % (procedure_name, key),
         config.where(("procedures", procedure_name, key))) for key in keys] + [
        (key, config.loop(key), "loop." + key, config.where(("loop", key))) for key in keys]
    for key, value, said, origin in choices:
        if value is not None:  # an explicit "" on the command line is a mistake to report
            if key == "ai_cmd_alias":
                return from_alias(value, said, origin)
            return agent(_split_command(value, said), {}, "from " + said, origin, None, None)
    for name in PRESETS:
        found = alias_definition(aliases, name)
        if found and _which(_split_command(found[1], "ai_cmd_aliases." + name)[0]):
            return from_alias(name, "found on PATH", (TIER_BUILTIN, "found on PATH", None))
    return None


def fallback_agents(config: Config, names: Sequence[str]) -> List[AgentCommand]:
    """The agents of `fallback` (SPEC 23), in order, each as its preset or alias says (its own
    format too); a name neither knows is left out (the checks before a run say it)."""
    found = []
    for name in names:
        alias = alias_definition(config.data.get("ai_cmd_aliases", {}), name)
        if alias:
            argv = _split_command(alias[1], "ai_cmd_aliases." + alias[0])
            found.append(AgentCommand(argv, alias[2], "fallback", (TIER_BUILTIN, None, None), alias[0],
                                      alias[3] or infer_format(argv) or "text"))
    return found


def no_agent_error() -> RoodaError:
    names = ", ".join(PRESETS)
    return RoodaError("no agent found: none of the presets' programs (%s) is on PATH; install"
                      " one, or choose with --ai-cmd-alias NAME or --ai-cmd 'COMMAND'" % names)


def check_agent_program(agent: AgentCommand) -> None:
    """Exit 2 before the first iteration when the agent's program cannot be started."""
    program = agent.argv[0]
    if os.sep in program or (os.altsep and os.altsep in program):
        if not (os.path.isfile(program) and os.access(program, os.X_OK)):
            raise RoodaError("agent program '%s' not found or not executable; fix the path, or"
                             " choose another agent with --ai-cmd / --ai-cmd-alias" % program)
    elif _which(program) is None:
        raise RoodaError("agent program '%s' not found on PATH; install it, or choose another"
                         " agent with --ai-cmd / --ai-cmd-alias" % program)


def windows_owner(agent: AgentCommand, env: Environ) -> str:
    """Whose the windows' readings are (SPEC 18): the CLI (or the format of a command of
    one's own) and the kind of login -- an API key's has none, a subscription's are its."""
    cli = agent.cli
    login = "api key" if cli and cli.api_key(env) else "subscription"
    return "%s %s" % (cli.name if cli else agent.format, login)


def agent_argv(argv: Sequence[str], cli: AgentCLI | None, budget_left: float | None,
               verdict: bool) -> Tuple[List[str], str | None]:
    """An iteration's agent command: with `budget_left` (max_cost), the CLI's budget flag
    with what is left, to the cent below -- one runaway iteration cannot spend far past it
    (SPEC 16; at least a cent: Claude refuses 0.00); with `verdict`, its schema flag with
    VERDICT_SCHEMA (SPEC 21), in a file where the CLI reads one: the file is the second
    value, to remove after the iteration."""
    argv, path = list(argv), None
    if budget_left is not None and cli and cli.budget_flag:
        argv += [cli.budget_flag, "%.2f" % (max(int(round(max(budget_left, 0) * 100, 6)), 1) / 100)]
    if verdict and cli and cli.schema_flag:
        schema = json.dumps(VERDICT_SCHEMA)
        if cli.schema_file:
            import tempfile
            handle, path = tempfile.mkstemp(prefix="rooda-schema-", suffix=".json")
            with os.fdopen(handle, "w") as stream:
                stream.write(schema)
        at = len(argv) - (argv[-1:] == ["-"])  # before a closing `-` (the prompt on stdin)
        argv[at:at] = [cli.schema_flag, path or schema]
    return argv, path


# ==== 8. Prompt =======================================================
# The prompt of SPEC 4, assembled afresh before each iteration from the fragments as
# they are now (a changed file is read again), or the prompt file of `prompt <file>`.

def _apply_parameters(text: str, parameters: Dict[str, str], where: str) -> str:
    """Replace the Go rooda's {{.name}} / {{ .name }} placeholders in a fragment. One
    without a parameter is an error, and so is any other Go template action ({{range}},
    {{if}}, ...): rooda does not run templates, and passing one to the agent as text would
    change the prompt silently. Go's own escape, a quoted string ({{"{{"}}), is its text."""
    if "{{" not in text:
        return text

    def substitute(match: "re.Match[str]") -> str:
        action = match.group(0)
        literal = re.fullmatch(r'\{\{\s*("(?:[^"\\]|\\.)*")\s*\}\}', action)
        if literal:
            return str(json.loads(literal.group(1)))
        placeholder = re.fullmatch(r"\{\{\s*\.([A-Za-z_][A-Za-z0-9_]*)\s*\}\}", action)
        if not placeholder:
            construct = re.match(r"\{\{-?\s*(\w*)", action)
            raise ConfigError("the Go template action %s is not supported: rooda replaces only"
                              " {{.name}} placeholders (write the %s out in the fragment)" % (
                                  action[:60], "'%s'" % construct.group(1) if construct and
                                  construct.group(1) else "construct"), where)
        name = placeholder.group(1)
        if name not in parameters:
            raise ConfigError("placeholder {{.%s}} has no parameter%s" % (
                name, did_you_mean(name, parameters)), where)
        return parameters[name]

    return re.sub(r"\{\{.*?\}\}", substitute, text, flags=re.S)


def read_fragments(fragments: Sequence[dict], phase: str) -> List[str]:
    """The texts of a phase's fragments, as they are now (files may change between
    iterations; a changed file is read again)."""
    texts = []
    for fragment in fragments:
        if "path" in fragment:
            text = cached_read("fragment", fragment["path"],
                               lambda path: read_text(path, phase + " fragment"))
            where = fragment["path"]
        else:
            text = fragment["content"]
            where = "%s fragment (inline content)" % phase
        texts.append(_apply_parameters(text, fragment.get("parameters") or {}, where).strip())
    return texts


def assemble_prompt(phases: Dict[str, List[str]], context: Sequence[str] = (),
                    previous: str | None = None) -> str:
    """The prompt of SPEC 4: a title, CONTEXT and PREVIOUS ITERATION when given, the phases."""
    parts = ["# OODA Loop Iteration"]
    if context:
        parts.append("## CONTEXT\n" + "\n\n".join(context))
    if previous:
        parts.append("## PREVIOUS ITERATION\n" + previous)
    for phase in PHASES:
        if phase in phases and phases[phase] == [] and any(phases.values()):
            continue  # a phase with no fragment at all (a Go rooda config may leave one out)
        parts.append("## %s\n%s" % (phase.upper(), "\n\n".join(t for t in phases.get(phase, ()) if t)))
    return "\n\n".join(parts) + "\n"


def _quoted(feedback: bytes, source: str, markers: Sequence[str]) -> str:
    """The tail of an output for the next prompt, its signal strings replaced by a mention
    (an agent that echoes the section back does not repeat the previous claim)."""
    text = clean(_decode(feedback[-FEEDBACK_TAIL_BYTES:]))
    for marker in markers:
        text = text.replace(marker, "[signal %s]" % (re.sub(r"</?\w+>", "", marker).strip() or "marker"))
    text = text.strip("\n")
    if not text.strip():
        return "It printed nothing."
    return "The last %d bytes of %s output:\n\n%s" % (len(text.encode("utf-8")), source, text)


class Told(Record):
    """What the next prompt is told of the last iteration counted (SPEC 15, 21): how it
    ended and why (its cause, and the reason as the logs give it), the agent's own
    explanation, the output that says most and whose it is, and its verdict's next step.
    Made by the loop from an iteration, and by `resume` from the iteration_end it logged."""

    number: int
    outcome: str
    exit_code: int
    cause: str | None = None
    reason: str = ""
    explanation: str = ""
    feedback: bytes = b""
    source: str = "the agent's"
    next_step: str | None = None

    def describe(self, markers: Sequence[str]) -> str:
        """The PREVIOUS ITERATION section: a failure's how, why and output tail, then the
        next step its verdict named; "" when there is nothing to tell."""
        said = ""
        if self.outcome in FAILING_OUTCOMES:
            said = "Iteration %d ended in %s (exit code %d)." % (self.number, self.outcome, self.exit_code)
            if self.reason:
                said += "\nWhy: " + self.reason
                if self.explanation and self.cause != CAUSE_AGENT:
                    said += "\nThe agent's own explanation: " + self.explanation
            said += {CAUSE_PROTECTED: "\nThose paths are protected (rooda's own files, the agent CLIs'"
                                      " settings, git's hooks and configuration, what you hid from git, and"
                                      " those the run names): they were put back as they were; do the work"
                                      " without them.",
                     CAUSE_WORSE: "\nIts work is kept under that ref (`git diff <ref>^ <ref>` shows it) and"
                                  " the work tree is back to the best state so far: do better from here."
                     }.get(self.cause or "", "")
            if self.cause != CAUSE_ACCEPT:  # (its output never reaches the agent)
                said += ("\n" if self.reason else " ") + _quoted(self.feedback, self.source, markers)
        if self.next_step:
            said = said + "\n\n" if said else "Iteration %d says the work is not done yet.\n" % self.number
            said += "Its next step, in its own words: " + self.next_step
        return said


class Baseline(Record):
    """What verify said before iteration 1 (SPEC 20): a failure is iteration 1's PREVIOUS
    ITERATION, and the first of same_error's identical failures."""

    command: str
    exit_code: int
    line: str                       # its telling line
    output: bytes = b""             # its tail (none when `resume` read it back from the logs)
    fingerprint: str | None = None  # of its failure (verify_fingerprint), when it printed one

    def describe(self, markers: Sequence[str]) -> str:
        if not self.exit_code:
            return ""
        return "Before this run, verify failed (exit %d): %s.\n%s" % (self.exit_code, self.line, _quoted(
            self.output or self.line.encode(), "the verifier's (`%s`)" % self.command, markers))


def signal_markers(signals: Mapping[str, Sequence[str]]) -> List[str]:
    """Every promise marker of a plan's signals, success and failure alike."""
    return [marker for markers in signals.values() for marker in markers]


def build_prompt(plan: RunPlan, previous: Told | Baseline | None, left: Sequence[str] = (),
                 agent_before: str = "", answer: Fields | None = None) -> str:
    """The prompt of the next iteration, with fragments read afresh; `previous`: what it is
    told of the last (or of verify's baseline), `left`: what an attempt cut short left
    uncommitted (`git status --porcelain` lines), `agent_before`: the agent of the last
    attempt when another runs this one (SPEC 23), `answer`: the person's answer to its
    question, given once (SPEC 24)."""
    told = ""
    if answer:
        told = "The person answered your question \"%s\": %s" % (answer["question"], answer["answer"]) \
            if answer["question"] else "The person says: " + answer["answer"]
    if plan.prompt_file is not None or plan.prompt_text is not None:
        # The Ralph loop `cat PROMPT.md | agent`: the file as it is now, every iteration.
        text = read_text(plan.prompt_file, "prompt file") if plan.prompt_file is not None \
            else plan.prompt_text or ""
        context = list(plan.context) + [told] if told else plan.context
        return ("## CONTEXT\n%s\n\n%s" % ("\n\n".join(context), text)) if context else text
    phases = {phase: read_fragments(plan.fragments[phase], phase) for phase in PHASES}
    feedback = previous.describe(signal_markers(plan.signals)) if plan.feedback and previous else ""
    if told:  # (first: what the person said is what the agent waited for)
        feedback = told + ("\n\n" + feedback if feedback else "")
    if plan.feedback and agent_before:
        feedback = "The last attempt was made by another agent CLI (%s); its work is in the files.%s" % (
            agent_before, "\n\n" + feedback if feedback else "")
    if plan.feedback and left:  # (SPEC 16 rev 4: the agent builds on them instead of redoing them)
        feedback = (feedback + "\n\n" if feedback else "") + "The last attempt was cut short and left these" \
            " uncommitted changes; build on them rather than redo them:\n" + "\n".join(left)
    return assemble_prompt(phases, plan.context, feedback or None)


def prompt_sources(plan: RunPlan) -> List[Tuple[str, str]]:
    """Where a run's prompt comes from, as (name, text): standard input, the prompt file,
    or each fragment (a path, or a phase's inline content) -- the .jsonl's `fragments`."""
    if plan.prompt_text is not None:
        return [("(standard input)", plan.prompt_text)]
    if plan.prompt_file is not None:
        return [(_display_path(plan.prompt_file, plan.cwd), read_text(plan.prompt_file, "prompt file"))]
    return [(_display_path(fragment["path"], plan.cwd) if "path" in fragment else phase + " (inline content)",
             text) for phase in PHASES
            for fragment, text in zip(plan.fragments[phase], read_fragments(plan.fragments[phase], phase))]


def bare_signal_lines(plan: RunPlan) -> str:
    """Where the prompt has a promise marker alone on a line (the Go rooda's signal
    fragment does; an agent that echoes its prompt would read as SUCCESS), in one phrase
    naming the fragments and their lines; "" when it has none."""
    markers, found = set(signal_markers(plan.signals)), []
    for where, text in prompt_sources(plan):
        numbers = [str(number) for number, line in enumerate(text.splitlines(), 1) if line.strip() in markers]
        if numbers:
            found.append("%s line%s %s" % (where, "s" if len(numbers) > 1 else "", ", ".join(numbers)))
    return "; ".join(found)


# ==== 9. Processes ====================================================
# Handlers only record; the loop acts. The agent runs in its own session; one selector
# loop (the shape of CPython's subprocess._communicate) writes the prompt to its stdin as
# the pipe accepts it while stdout and stderr are read in 64 KiB chunks, so neither side
# can block the other; a wake-up fd carries SIGINT/SIGTERM/SIGHUP and SIGCHLD into it.
# Where selectors cannot watch pipes (Windows) a thread per pipe feeds a bounded queue
# instead. The child's whole group is ended at the end (its stop signal, grace, KILL);
# on Linux rooda is a child subreaper, so that descendants that escaped the group with
# setsid are found and terminated too.

def _signal_group(pgid: int, signum: int) -> None:
    """Send a signal to a process group; on Windows, terminate the process itself."""
    with _suppress(OSError):
        if hasattr(os, "killpg"):
            os.killpg(pgid, signum)
        else:
            os.kill(pgid, signal.SIGTERM)  # TerminateProcess: Windows has no groups to signal


class SignalGuard:
    """Records SIGINT, SIGTERM and SIGHUP while the loop runs, and wakes it for them, for
    SIGCHLD and for Ctrl+Z (SIGTSTP) through a pipe (signal.set_wakeup_fd). Handlers only
    record; the loop acts."""

    signum: int | None = None   # the first interrupting signal
    count = 0                      # interrupting signals so far
    stop_requested = False         # Ctrl+Z: stop the agent's group, then ourselves
    wake_fd: int | None = None  # readable when a signal arrived
    _write_fd: int | None = None
    _saved_wakeup: int | None = None

    def __init__(self) -> None:
        self._saved: list = []

    def __enter__(self) -> "SignalGuard":
        read_fd, write_fd = os.pipe()
        os.set_blocking(read_fd, False)
        os.set_blocking(write_fd, False)
        try:
            self._saved_wakeup = signal.set_wakeup_fd(write_fd, warn_on_full_buffer=False)
        except ValueError:  # not the main thread: no handlers, the loop still works
            os.close(read_fd)
            os.close(write_fd)
            return self
        self.wake_fd, self._write_fd = read_fd, write_fd
        # SIGCHLD's handler only makes it write to the wake-up fd; it does nothing else.
        for name, handler, stays_ignored in (
                ("SIGINT", self._record, True), ("SIGTERM", self._record, False),
                ("SIGHUP", self._record, True), ("SIGCHLD", lambda signum, frame: None, False),
                ("SIGTSTP", self._record_stop, True)):
            signum = getattr(signal, name, None)
            if signum is None or (stays_ignored and signal.getsignal(signum) == signal.SIG_IGN):
                continue  # nohup, a script's `&` job: ignored it was, ignored it stays
            self._saved.append((signum, signal.signal(signum, handler)))
        return self

    def _record_stop(self, signum: int, frame: object) -> None:
        self.stop_requested = True

    def how_to_stop(self) -> str:
        """What stops a wait (SPEC 16): Ctrl+C where it reaches rooda (a terminal, SIGINT
        not inherited ignored), else a kill."""
        terminal = os.isatty(0) or os.isatty(2)
        handled = any(signum == signal.SIGINT for signum, _ in self._saved)
        return "Ctrl+C stops." if terminal and handled else "kill -TERM %d stops." % os.getpid()

    def suspend(self, groups: Iterable[int]) -> float:
        """Ctrl+Z: stop the children's groups (they run in sessions of their own, so the
        terminal's SIGTSTP never reaches them), then rooda itself; on `fg` (SIGCONT),
        continue them. Returns the seconds spent stopped, which no timeout counts."""
        self.stop_requested = False
        groups = list(groups)
        for group in groups:
            _signal_group(group, signal.SIGSTOP)
        begun = time.monotonic()
        # SIGSTOP, not SIGTSTP: the kernel discards SIGTSTP in an orphaned process group.
        os.kill(os.getpid(), signal.SIGSTOP)
        for group in groups:
            _signal_group(group, signal.SIGCONT)
        return time.monotonic() - begun

    def _record(self, signum: int, frame: object) -> None:
        if self.signum is None:
            self.signum = signum
        self.count += 1

    def drain(self) -> None:
        """Empty the wake-up pipe (its bytes only say that something happened)."""
        if self.wake_fd is None:
            return
        with _suppress(BlockingIOError, InterruptedError):
            while os.read(self.wake_fd, 512):
                pass

    def wait(self, seconds: float, ticker: Ticker | None = None) -> None:
        """Sleep up to `seconds`, returning early on an interrupting signal; Ctrl+Z stops
        rooda meanwhile, and the ticker fires on its schedule."""
        import selectors
        deadline = time.monotonic() + seconds
        with selectors.DefaultSelector() as selector:
            if self.wake_fd is not None:
                selector.register(self.wake_fd, selectors.EVENT_READ)
            while self.signum is None:
                now = time.monotonic()
                if ticker:
                    ticker.fire_if_due(now)
                remaining = deadline - now
                if remaining <= 0:
                    return
                pause = min(remaining, ticker.due - now if ticker else remaining, 86400.0)
                if self.wake_fd is None:
                    time.sleep(min(max(pause, 0.0), 0.1))
                else:
                    selector.select(max(pause, 0.0))
                    self.drain()
                if self.stop_requested:
                    self.suspend(())  # a wait is for a moment in time: it does not move

    def __exit__(self, *exc_info: object) -> None:
        for signum, handler in reversed(self._saved):
            signal.signal(signum, handler)
        self._saved = []
        if self.wake_fd is not None:
            signal.set_wakeup_fd(self._saved_wakeup if self._saved_wakeup is not None else -1)
            os.close(self.wake_fd)
            if self._write_fd is not None:
                os.close(self._write_fd)
            self.wake_fd = self._write_fd = None


def _group_alive(pgid: int) -> bool:
    """Whether any process of the group exists (zombies included: reap them first)."""
    if not hasattr(os, "killpg"):
        return False  # Windows: the caller asks the process itself
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def become_subreaper() -> bool:
    """On Linux, adopt orphaned descendants (PR_SET_CHILD_SUBREAPER), so that a process
    that escaped the agent's group with setsid becomes our child and can be terminated.
    Elsewhere, or when prctl fails, False: the group kill is all there is."""
    global _SUBREAPER
    if _SUBREAPER is None:
        _SUBREAPER = False
        if sys.platform.startswith("linux") and os.environ.get("ROODA_NO_SUBREAPER") != "1":
            with _suppress(OSError, AttributeError):
                import ctypes
                libc = ctypes.CDLL(None, use_errno=True)
                _SUBREAPER = libc.prctl(36, 1, 0, 0, 0) == 0  # 36: PR_SET_CHILD_SUBREAPER
    return _SUBREAPER


def _children() -> set:
    """Our children's pids (Linux /proc; an empty set where that cannot be read).

    Children we start and orphans we adopt as subreaper hang off the main thread (the
    thread-group leader), so its list is read first; the other threads' lists only
    when it cannot be read."""
    pid = os.getpid()
    with _suppress(OSError):
        with open("/proc/%d/task/%d/children" % (pid, pid), "rb") as stream:
            return {int(child) for child in stream.read().split()}
    pids: set = set()
    with _suppress(OSError):
        for task in os.listdir("/proc/self/task"):
            with open("/proc/self/task/%s/children" % task, "rb") as stream:
                pids.update(int(child) for child in stream.read().split())
    return pids


def _reap(pids: Iterable[int]) -> None:
    for pid in pids:
        with _suppress(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)


def _adopted(exclude: Iterable[int] = ()) -> set:
    """Our children that live in another session than ours: an agent's (or a gate's)
    descendants that we adopted as subreaper. A host program's own children share our
    session, so a library caller's processes are never taken for escapees."""
    own = os.getsid(0)
    found = set()
    for pid in _children().difference(exclude):
        with _suppress(OSError):
            if os.getsid(pid) != own:
                found.add(pid)
    return found


def _terminate_escapees(own_pids: Iterable[int], grace: float, guard: SignalGuard | None = None) -> None:
    """Terminate descendants that left the agent's group and were adopted by us (a
    signal to rooda meanwhile cuts the grace short: SIGKILL at once)."""
    for _ in range(3):  # an escapee's own children are adopted when it dies: a few rounds
        escapees = _adopted(own_pids)
        if not escapees:
            return
        groups = set()
        for pid in escapees:
            with _suppress(ProcessLookupError):
                groups.add(os.getpgid(pid))
        targets = [g for g in groups if g != os.getpgrp()]

        def send(signum: int) -> None:  # to their groups, and to each escapee that leads none
            for group in targets:
                _signal_group(group, signum)
            for pid in escapees - groups:
                with _suppress(ProcessLookupError):
                    os.kill(pid, signum)
        send(signal.SIGTERM)
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline:
            # Every adopted child, not only the escapees: one that outlived its parent is
            # ours now, and its zombie would keep the group "alive" for the whole grace.
            _reap(escapees | _adopted(own_pids))
            if not (_children() & escapees) and not any(_group_alive(g) for g in targets):
                break
            if guard and guard.signum is not None:
                deadline = 0.0  # interrupted: no grace
                continue
            time.sleep(GROUP_POLL_SECONDS)
        else:
            send(signal.SIGKILL)
            # Dying of SIGKILL takes a moment (longer for a big process). Only once an
            # escapee is dead are its own escaped children adopted, for the next round to
            # find: without this wait a tool's `setsid server &` outlived an interruption.
            settle = time.monotonic() + KILL_SETTLE_SECONDS
            while True:
                _reap(escapees | _adopted(own_pids))
                if not (_children() & escapees) or time.monotonic() >= settle:
                    break
                time.sleep(GROUP_POLL_SECONDS)
        _reap(escapees)


class AgentResult(Record):
    """How one run of a child (the agent, a gate, git) ended."""

    exit_code: int                  # shell convention: 128 + N when killed by signal N
    killed_by: str | None = None  # the name of the POSIX signal that killed it
    timed_out: str | None = None  # "timeout" | "idle"
    interrupted: int | None = None  # the signal (to rooda) that interrupted the run
    seconds: float = 0.0
    output: bytes = b""             # a gate's last 8 KiB
    counts: Fields | None = None    # a gate's test counts (SPEC 22), read from its whole output


class _Spawned:
    """A child os.posix_spawn started: its pid (and process group), and the part of
    Popen's interface rooda uses (poll, wait, returncode)."""

    returncode: int | None = None

    def __init__(self, pid: int) -> None:
        self.pid = pid

    def poll(self) -> int | None:
        """The exit status (negative: killed by that signal) once the child is gone."""
        if self.returncode is None:
            try:
                pid, status = os.waitpid(self.pid, os.WNOHANG)
            except ChildProcessError:  # (reaped elsewhere: its status is lost)
                pid, status = self.pid, signal.SIGKILL
            if pid:
                self.returncode = -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)
        return self.returncode

    def wait(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while self.poll() is None and time.monotonic() < deadline:
            time.sleep(0.005)


# Signals CPython ignores for itself and a child must not inherit ignored: with SIGPIPE
# ignored, `yes | head -1` in the agent's tools never ends (Popen resets the same pair).
_RESET_SIGNALS = tuple(getattr(signal, name) for name in ("SIGPIPE", "SIGXFSZ") if hasattr(signal, name))


def _spawn(argv: List[str], use_stdin: bool, env: Env | None,
           cwd: str | None) -> Tuple[Any, int | None, int, int]:
    """Start argv in its own session with pipes for stdin (or /dev/null), stdout and
    stderr; returns the child and our ends (stdin write end or None, stdout, stderr). The
    child gets the default SIGPIPE and SIGXFSZ; a SIGHUP or SIGINT that rooda inherited
    as ignored (nohup, `&`) stays ignored (SPEC 7).

    os.posix_spawn (vfork and exec) costs about a third less than subprocess.Popen per
    iteration (make bench, row 2), given the program's path: found once per PATH, not by
    posix_spawnp's failed exec in each PATH directory before it, every iteration (that
    cost revision 5 up to 450 us an iteration). Popen does what it cannot: another
    directory, another PATH, no posix_spawn (Windows)."""
    import subprocess
    stdin_read, stdin_write = os.pipe() if use_stdin else (os.open(os.devnull, os.O_RDONLY), None)
    out_read, out_write = os.pipe()
    err_read, err_write = os.pipe()
    theirs = (stdin_read, out_write, err_write)
    here = cwd is None and (env or os.environ).get("PATH") == os.environ.get("PATH")
    try:
        if here and hasattr(os, "posix_spawn") and os.environ.get("ROODA_SPAWN") != "popen":
            key = (argv[0], os.environ.get("PATH", ""))
            if key not in _PROGRAMS:
                _PROGRAMS[key] = _which(argv[0])
            actions = [(os.POSIX_SPAWN_DUP2, fd, target) for target, fd in enumerate(theirs)]
            pid = os.posix_spawn(_PROGRAMS[key] or argv[0], argv, os.environ if env is None else env,
                                 setsid=True, file_actions=actions, setsigdef=_RESET_SIGNALS)
            child: Any = _Spawned(pid)
        else:
            child = subprocess.Popen(argv, stdin=stdin_read, stdout=out_write, stderr=err_write, cwd=cwd,
                                     env=env, start_new_session=os.name != "nt",
                                     creationflags=getattr(subprocess, "CREATE_NEW_PROCESS_GROUP", 0))
    except OSError as exc:
        for fd in theirs + (stdin_write, out_read, err_read):
            if fd is not None:
                os.close(fd)
        raise RoodaError("cannot start agent '%s': %s" % (argv[0], exc.strerror or exc)) from None
    for fd in theirs:
        os.close(fd)
    return child, stdin_write, out_read, err_read


class _SelectorPump:
    """The agent's pipes in one selector: the prompt written as stdin accepts it, stdout
    and stderr read in 64 KiB chunks, and the signal wake-up fd (SIGCHLD included)."""

    def __init__(self, stdin_fd: int | None, out_fd: int, err_fd: int, prompt: bytes,
                 guard: SignalGuard | None) -> None:
        import selectors
        self.selector = selectors.DefaultSelector()
        self.guard = guard
        self.readers: Dict[int, str] = {}
        for name, fd in (("stdout", out_fd), ("stderr", err_fd)):
            os.set_blocking(fd, False)
            if PIPE_BUFFER_BYTES:  # a larger pipe lets a fast agent go on writing while we pass it on
                with _suppress(ImportError, OSError):
                    import fcntl
                    fcntl.fcntl(fd, 1031, PIPE_BUFFER_BYTES)  # F_SETPIPE_SZ (Linux)
            self.readers[fd] = name
            self.selector.register(fd, selectors.EVENT_READ, name)
        self.stdin_fd = stdin_fd
        self.stdin_view: memoryview | None = None
        if stdin_fd is not None:
            if prompt:
                os.set_blocking(stdin_fd, False)
                self.stdin_view = memoryview(prompt)
                self.selector.register(stdin_fd, selectors.EVENT_WRITE, "stdin")
            else:
                self.close_stdin()
        wake_fd = guard.wake_fd if guard else None
        if wake_fd is not None:
            self.selector.register(wake_fd, selectors.EVENT_READ, "wake")
        self.needs_polling = wake_fd is None  # no SIGCHLD wake-up: poll for the agent's exit

    def streams_open(self) -> bool:
        return bool(self.readers)

    def read(self, timeout: float | None) -> List[Tuple[str, bytes]]:
        """Output that arrived within `timeout` as (stream, chunk); b"" marks the end."""
        arrived = []
        for key, _ in self.selector.select(timeout):
            if key.data == "wake":
                if self.guard:
                    self.guard.drain()
            elif key.data == "stdin" and self.stdin_view is not None:
                try:
                    written = os.write(key.fd, self.stdin_view[:READ_SIZE])
                except (BlockingIOError, InterruptedError):
                    continue
                except OSError:
                    self.close_stdin()  # the agent does not read its stdin: fine
                    continue
                self.stdin_view = self.stdin_view[written:]
                if not self.stdin_view:
                    self.close_stdin()
            else:
                # Read until the pipe is empty (at most READS_PER_WAKEUP chunks), so that
                # a fast agent costs one select per burst, not one per chunk.
                for _ in range(READS_PER_WAKEUP):
                    try:
                        chunk = os.read(key.fd, READ_SIZE)
                    except (BlockingIOError, InterruptedError):
                        break
                    arrived.append((key.data, chunk))
                    if not chunk:
                        self.selector.unregister(key.fd)
                        os.close(key.fd)
                        del self.readers[key.fd]
                        break
                    if len(chunk) < READ_SIZE:
                        break
        return arrived

    def close_stdin(self) -> None:
        if self.stdin_fd is not None:
            if self.stdin_view is not None:
                self.selector.unregister(self.stdin_fd)
            os.close(self.stdin_fd)
            self.stdin_fd, self.stdin_view = None, None

    def close(self) -> None:
        self.close_stdin()
        for fd in list(self.readers):
            self.selector.unregister(fd)
            os.close(fd)
        self.readers.clear()
        self.selector.close()


class _ThreadPump:
    """The same with a thread per pipe, each closing its pipe end at end of file, where
    selectors cannot watch pipes (Windows; ROODA_THREADED_IO=1 tests it on POSIX)."""

    def __init__(self, stdin_fd: int | None, out_fd: int, err_fd: int, prompt: bytes,
                 guard: SignalGuard | None) -> None:
        import queue
        import threading
        # Bounded, so that a fast agent waits for us (backpressure) instead of filling
        # memory: at most 2 x READS_PER_WAKEUP chunks in flight.
        self.queue: "queue.Queue[Tuple[str, bytes]]" = queue.Queue(maxsize=2 * READS_PER_WAKEUP)
        self.empty = queue.Empty
        self.open_streams = 2
        self.needs_polling = True
        for name, fd in (("stdout", out_fd), ("stderr", err_fd)):
            threading.Thread(target=self._read, args=(name, fd), daemon=True).start()
        if stdin_fd is not None:
            threading.Thread(target=self._write, args=(stdin_fd, prompt), daemon=True).start()

    def _read(self, name: str, fd: int) -> None:
        try:
            while True:
                chunk = os.read(fd, READ_SIZE)
                self.queue.put((name, chunk))
                if not chunk:
                    break
        except OSError:
            self.queue.put((name, b""))
        finally:
            os.close(fd)

    @staticmethod
    def _write(fd: int, prompt: bytes) -> None:
        try:
            view = memoryview(prompt)
            while view:
                view = view[os.write(fd, view[:READ_SIZE]):]
        except OSError:
            pass  # the agent does not read its stdin (or has gone): fine
        finally:
            os.close(fd)

    def streams_open(self) -> bool:
        return self.open_streams > 0

    def read(self, timeout: float | None) -> List[Tuple[str, bytes]]:
        arrived = []
        with _suppress(self.empty):
            arrived.append(self.queue.get(timeout=0.05 if timeout is None else min(timeout, 0.05)))
            while len(arrived) < 2 * READS_PER_WAKEUP:
                arrived.append(self.queue.get_nowait())
        self.open_streams -= sum(1 for _, chunk in arrived if not chunk)
        return arrived

    def close_stdin(self) -> None:
        pass  # the writer ends by itself: when done, or with EPIPE once the agent is gone

    def close(self) -> None:
        pass  # readers still blocked (a pipe held by an unkillable process) are daemons


# The guardian: rooda's one helper that outlives it, and only to end what rooda started.
# It reads the process groups rooda starts ("pgid signum") and ends ("pgid 0") from a pipe whose
# other end only rooda holds; end-of-file means rooda is gone -- killed without a chance
# to clean up (SIGKILL, the OOM killer; SPEC 16) or finished. Then it ends those groups
# (each with its stop signal) and, on Linux, any process that carries this run's ROODA_RUN
# mark in its environment (what escaped a group with setsid; SIGTERM), then SIGKILL
# `kill_grace` later.
_GUARDIAN = r"""
import os, signal, sys, time
from contextlib import suppress
for name in ("SIGINT", "SIGHUP", "SIGTERM", "SIGTSTP"):
    signal.signal(getattr(signal, name), signal.SIG_IGN)
mark, grace, groups = ("ROODA_RUN=" + sys.argv[1]).encode(), float(sys.argv[2]), {}
notify = sys.argv[3:4] != [""] and __import__("json").loads(sys.argv[3])
for line in sys.stdin:
    if line == "end\n":  # rooda ended well: nothing to do
        sys.exit(0)
    if line.startswith("{"):  # what the notify is told, as of the run's last event
        notify and notify["env"].update(__import__("json").loads(line))
        continue
    group, stop = map(int, line.split())
    groups[group] = stop
    if not stop:
        del groups[group]
def left():
    found = []
    for name in os.listdir("/proc") if os.path.isdir("/proc") else ():
        with suppress(OSError, ValueError), open("/proc/%s/environ" % name, "rb") as stream:
            if name.isdigit() and int(name) != os.getpid() and mark in stream.read().split(b"\0") \
                    and os.getpgid(int(name)) not in groups:  # (a group's own get its signal)
                found.append((os.kill, int(name), signal.SIGTERM))
    for group, stop in groups.items():
        with suppress(OSError):
            os.killpg(group, 0)
            found.append((os.killpg, group, stop))
    return found
for last in (False, True):
    targets, deadline = left(), time.monotonic() + (0 if last else grace)
    for kill, target, stop in targets:
        with suppress(OSError):
            kill(target, signal.SIGKILL if last else stop)
    while targets and time.monotonic() < deadline:
        time.sleep(0.1)
        for group in [group for group, stop in groups.items() if stop != signal.SIGTERM]:
            state = b"Z"  # its leader's: gone (or a zombie nobody reaps yet) once it went on its signal
            with suppress(OSError):
                os.kill(group, 0)
                state = b"?"
                with open("/proc/%d/stat" % group, "rb") as stream:
                    state = stream.read().rsplit(b")", 1)[1].split()[0]
            if state == b"Z":  # what it left gets SIGTERM
                groups[group] = signal.SIGTERM
                with suppress(OSError):
                    os.killpg(group, signal.SIGTERM)
        targets = left()
if notify:  # rooda died: its notify is told, bounded (SPEC 16 rev 4)
    import subprocess
    with suppress(Exception):
        child = subprocess.Popen(["sh", "-c", notify["cmd"]], env=dict(os.environ, **notify["env"]),
                                 stdin=subprocess.DEVNULL, start_new_session=True)
        try:
            child.wait(5)
        except subprocess.TimeoutExpired:
            os.killpg(child.pid, signal.SIGKILL)
"""


class _Helpers:
    """rooda's own helpers for a run: the guardian, and the keep-awake hold (SPEC 16). They
    run in rooda's session -- the escapee sweep takes only other sessions' processes, so it
    leaves them alone -- in a process group of their own, so that Ctrl+C on the terminal
    reaches rooda alone; each ends when rooda's end of its stdin pipe closes (caffeinate
    watches rooda's pid instead)."""

    guardian: Any = None

    def __init__(self) -> None:
        self.procs: List[Any] = []

    def start(self, argv: List[str]) -> Any:
        import subprocess
        try:
            proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                                    stderr=subprocess.DEVNULL, bufsize=0, preexec_fn=os.setpgrp)
        except OSError:
            return None
        self.procs.append(proc)
        return proc

    def watch(self, pgid: int, stop_signal: int | None) -> None:
        """Tell the guardian of a group rooda started, and its stop signal (None: it has ended)."""
        self.procs = [proc for proc in self.procs if proc.poll() is None]  # (a keep-awake that failed)
        if self.guardian:
            try:
                self.guardian.stdin.write(b"%d %d\n" % (pgid, stop_signal or 0))
            except OSError:
                self.guardian = None  # it is gone: nothing more to tell it

    def tell(self, fields: Env) -> None:
        """What the guardian's notify is told should rooda die now (SPEC 16 rev 5)."""
        if self.guardian:
            with _suppress(OSError):
                self.guardian.stdin.write(json.dumps(fields).encode() + b"\n")

    def stop(self) -> None:
        with _suppress(Exception):
            self.guardian.stdin.write(b"end\n")  # (an end of file alone would mean rooda died)
        for proc in self.procs:
            with _suppress(Exception):  # (a helper slow to go is left to end by itself)
                proc.stdin.close()
                proc.wait(0.5)
        self.procs, self.guardian = [], None


def keep_awake_command() -> List[str] | None:
    """The command that holds off idle and system sleep while rooda runs, where the platform
    has one that needs no privileges (SPEC 16); None elsewhere."""
    if sys.platform == "darwin" and _which("caffeinate"):
        return ["caffeinate", "-i", "-w", str(os.getpid())]
    if _which("systemd-inhibit"):
        return ["systemd-inhibit", "--what=idle:sleep", "--who=rooda", "--why=an agent loop is running",
                "--mode=block", "cat"]
    return None


_HELPERS = _Helpers()


class Limits(Record):
    """How long a child may run: in all, and without output (None: no limit); and how it
    ends when it must: its stop signal, then SIGKILL `grace` seconds later."""

    timeout: float | None = None
    idle: float | None = None
    grace: float = 5.0
    after_signal: bool = False      # it may start although a signal came (notify then)
    stop_signal: int = signal.SIGTERM


class _Supervision:
    """One child from its start to its end (CPython's Popen._communicate, with more to
    do): its pipes pumped to the sinks, its timeouts enforced, and its process group
    ended (its stop signal, grace, KILL) when it must end. The state lives on self, and one method,
    `due`, says what is due next and when -- used both to act and to sleep until then.

    As subreaper we adopt the child's orphans; those that die must be reaped here, or
    their zombies would keep the group alive for the whole grace period."""

    exited_at: float | None = None   # when the child itself was seen to exit
    term_at: float | None = None     # when the stop signal went to the group
    kill_at: float | None = None     # when SIGKILL went to the group
    swept = False                       # escapees holding our pipes were ended
    timed_out: str | None = None     # "timeout" | "idle"
    interrupted: int | None = None   # the signal that interrupted the run

    def __init__(self, child: Any, pump: Any, sinks: Dict[str, Sink | None],
                 guard: SignalGuard | None, limits: Limits, ticker: Ticker | None,
                 seen_signals: int) -> None:
        self.child, self.pump, self.sinks, self.guard, self.ticker = child, pump, sinks, guard, ticker
        # (A CLI whose stop signal is SIGINT handles it itself, even where it started with
        # SIGINT ignored -- a script's `&` -- as Claude Code 2.1.197 was seen to.)
        self.stop_signal = limits.stop_signal
        _HELPERS.watch(child.pid, self.stop_signal)
        self.timeout, self.idle, self.grace = limits.timeout, limits.idle, limits.grace
        self.subreaper, self.seen_signals = become_subreaper(), seen_signals
        self.started = self.last_output = time.monotonic()

    def group_alive(self) -> bool:
        child = self.child
        if os.name == "nt":
            return child.returncode is None  # no process groups to probe
        if not _group_alive(child.pid):
            return False  # the common case: one syscall, no /proc
        if self.subreaper and child.returncode is not None:
            _reap(_adopted((child.pid,)))
            return _group_alive(child.pid)
        return True

    def terminate(self, now: float) -> None:
        self.pump.close_stdin()
        self.term_at = now
        _signal_group(self.child.pid, self.stop_signal if self.child.returncode is None else signal.SIGTERM)

    def kill(self, now: float) -> None:
        self.kill_at = now
        _signal_group(self.child.pid, signal.SIGKILL)

    def due(self) -> Tuple[float, str]:
        """(when, what) is due next: "abandon" the pipes, "kill", "terminate", or end the
        child for its "timeout" or "idle" limit; (inf, "") when nothing is."""
        if self.kill_at is not None:
            return self.kill_at + KILL_WAIT_SECONDS, "abandon"
        if self.term_at is not None:
            return self.term_at + self.grace, "kill"
        if self.exited_at is not None:
            return self.exited_at + DRAIN_SECONDS, "terminate"  # its children hold the pipes
        limits = [(float("inf"), "")]
        if self.timeout is not None:
            limits.append((self.started + self.timeout, "timeout"))
        if self.idle is not None:
            limits.append((self.last_output + self.idle, "idle"))
        return min(limits, key=lambda limit: limit[0])

    def step(self) -> bool:
        """Look, act on what is due, and wait for output; True when the child is done."""
        child, guard, now = self.child, self.guard, time.monotonic()
        if child.returncode is None and child.poll() is not None:
            self.exited_at = now
            if self.term_at is not None and self.stop_signal != signal.SIGTERM:
                # Its stop signal was the CLI's own: what it leaves (a tool's `cmd &`, with
                # SIGINT ignored) is ended as leftovers are.
                _signal_group(child.pid, signal.SIGTERM)
        if guard and guard.count != self.seen_signals:
            self.seen_signals = guard.count
            self.interrupted = self.interrupted or guard.signum
            if self.term_at is None:
                self.terminate(now)
            elif self.kill_at is None:
                self.kill(now)  # a second signal during the grace period kills at once
        pipes_open = self.pump.streams_open()
        if self.exited_at is not None and not pipes_open:
            if not self.group_alive():
                return True
            if self.term_at is None:
                self.terminate(now)  # leftovers that do not hold our pipes
        elif self.exited_at is not None and self.term_at is not None and self.subreaper \
                and not self.swept and not self.group_alive():
            # The group is gone yet the pipes are held: by descendants that left the group
            # (setsid), now adopted by us. Terminate them rather than wait.
            self.swept = True
            _terminate_escapees((child.pid,), self.grace, guard)
            return False
        when, what = self.due()
        if now >= when:
            if what == "abandon":
                return True  # something unkillable holds the pipes: give up on them
            if what == "kill":
                self.kill(now)
            else:
                self.timed_out = what if what in ("timeout", "idle") else None
                self.terminate(now)
            return False
        self.pump_output(now, when, pipes_open)
        return False

    def pump_output(self, now: float, when: float, pipes_open: bool) -> None:
        """Wait for output until `when` (or the ticker, or a short poll while a group
        empties: its members' deaths send us no event unless adopted), and pass it on."""
        timeout = when - now
        if self.ticker:
            self.ticker.fire_if_due(now)
            timeout = min(timeout, self.ticker.due - now)
        if self.term_at is not None or (self.exited_at is not None and not pipes_open):
            timeout = min(timeout, GROUP_POLL_SECONDS)
        if self.pump.needs_polling and self.exited_at is None:
            timeout = min(timeout, 0.05)
        # (select refuses a timeout past about 2**31 ms: a day is as good as forever)
        arrived = self.pump.read(None if timeout == float("inf") else min(max(timeout, 0.0), 86400.0))
        if self.guard and self.guard.stop_requested:
            # Ctrl+Z: the group stops with us; the time stopped counts toward no timeout.
            alive = self.child.returncode is None or self.group_alive()
            self.shift(self.guard.suspend([self.child.pid] if alive else []))
        for name, chunk in arrived:
            sink = self.sinks[name]
            if chunk and sink:
                sink(chunk)
        if arrived:
            self.last_output = time.monotonic()

    def shift(self, paused: float) -> None:
        """Every moment the deadlines count from moves on by the time spent stopped."""
        self.started += paused
        self.last_output += paused
        for name in ("exited_at", "term_at", "kill_at"):
            if getattr(self, name) is not None:
                setattr(self, name, getattr(self, name) + paused)

    def run(self) -> AgentResult:
        try:
            while not self.step():
                pass
        finally:
            self.pump.close()
            if self.child.returncode is None:
                _signal_group(self.child.pid, signal.SIGKILL)
                with _suppress(Exception):  # (TimeoutExpired: an unkillable child must not hang rooda)
                    self.child.wait(KILL_WAIT_SECONDS)
        if self.subreaper:
            _terminate_escapees({self.child.pid}, self.grace, self.guard)
        _HELPERS.watch(self.child.pid, None)
        code = self.child.returncode if self.child.returncode is not None else -signal.SIGKILL
        return AgentResult(exit_code=128 - code if code < 0 else code,
                           killed_by=signal_name(-code) if code < 0 else None,
                           timed_out=self.timed_out, interrupted=self.interrupted,
                           seconds=time.monotonic() - self.started)


def _refuse_nul(argv: Sequence[str], env: Env | None) -> None:
    """A NUL byte cannot cross exec(): name where it is instead of failing in the spawn."""
    for index, part in enumerate(argv):
        if "\0" in part:
            raise RoodaError("argument %d of the command %r contains a NUL byte, which cannot be"
                             " passed to a program; remove it" % (index, argv[0]))
    for name, value in (env or {}).items():
        if "\0" in name or "\0" in value:
            raise RoodaError("the environment variable %s contains a NUL byte; remove it from"
                             " the config's env" % name.replace("\0", "\\0"))


def _enter(cwd: str) -> str | None:
    """Where to spawn a child that must run in `cwd`: None for right here (no chdir),
    else cwd (Popen changes into it). When our own directory was deleted and made again
    at the same path -- an agent that re-creates the project -- we move into the new one."""
    try:
        there = os.stat(cwd)
    except FileNotFoundError:
        raise RoodaError("the working directory %s no longer exists (removed during the run?)"
                         % cwd) from None
    here = os.stat(".")  # works on a deleted directory we are still in
    if (here.st_dev, here.st_ino) == (there.st_dev, there.st_ino):
        return None
    try:
        current: str | None = os.getcwd()
    except FileNotFoundError:
        current = None  # deleted under us
    if current is None or current == os.path.abspath(cwd):
        os.chdir(cwd)
        return None
    return cwd


def run_agent(argv: Sequence[str], prompt: str, *, env: Env | None = None,
              cwd: str | None = None, on_stdout: Sink | None = None,
              on_stderr: Sink | None = None,
              guard: SignalGuard | None = None, limits: Limits = Limits(),
              ticker: Ticker | None = None) -> AgentResult:
    """Run a program once (the agent, a gate, git), its output passed to the sinks as it
    arrives, and return how it ended; no process of its group survives.

    The prompt goes to stdin, unless the command holds {prompt_file} (a temporary file
    with the prompt, removed afterwards) or {prompt} (the text as one argument); then
    stdin is /dev/null."""
    argv = list(argv)
    _refuse_nul(argv, env)
    if "\0" in prompt and any(PROMPT_TOKEN in part for part in argv):
        raise RoodaError("the prompt contains a NUL byte (a UTF-16 --context file?), which"
                         " cannot be passed as an argument with {prompt}; use {prompt_file}"
                         " in the agent command, or remove it")
    if cwd is not None:
        cwd = _enter(cwd)
    prompt_bytes = prompt.encode("utf-8")
    prompt_path = None
    use_stdin = not any(PROMPT_FILE_TOKEN in part or PROMPT_TOKEN in part for part in argv)
    if any(PROMPT_FILE_TOKEN in part for part in argv):
        import tempfile
        handle, prompt_path = tempfile.mkstemp(prefix="rooda-prompt-", suffix=".md")
        with os.fdopen(handle, "wb") as stream:
            stream.write(prompt_bytes)
        argv = [part.replace(PROMPT_FILE_TOKEN, prompt_path) for part in argv]
    argv = [part.replace(PROMPT_TOKEN, prompt) for part in argv]
    # A signal that came before the start stops the run: nothing new is started after it
    # (SPEC 7) -- unless the caller says this runs after one (`notify` at an interruption).
    # One that comes from now on is seen by the supervision, which kills at once.
    seen_signals = guard.count if guard else 0
    try:
        if guard and guard.signum is not None and not limits.after_signal:
            return AgentResult(exit_code=128 + guard.signum, interrupted=guard.signum)
        child, stdin_fd, out_fd, err_fd = _spawn(argv, use_stdin, env, cwd)
        threaded = os.name == "nt" or os.environ.get("ROODA_THREADED_IO") == "1"
        pump = (_ThreadPump if threaded else _SelectorPump)(
            stdin_fd, out_fd, err_fd, prompt_bytes if use_stdin else b"", guard)
        return _Supervision(child, pump, {"stdout": on_stdout, "stderr": on_stderr}, guard, limits,
                            ticker, seen_signals).run()
    finally:
        if prompt_path is not None:
            with _suppress(OSError):
                os.unlink(prompt_path)


# ==== 10. Reading output ==============================================
# What one iteration's output means to the loop. Promise signals are found in bytes,
# across read boundaries, with the echo guard of SPEC 5. TextReader passes bytes through
# as they come; EventReader splits a structured stream into lines, turns them into events
# with the format's decoder, scans only the assistant's text, renders readable lines for
# --verbose and the .log (never JSON), and counts tool calls and usage. Both end in a
# StreamReport; the loop never sees a format.

class _StreamLines:
    """The scanner's state for one stream: the open line (or its tail) and its signals."""

    __slots__ = ("line", "overflow", "pending")

    def __init__(self) -> None:
        self.line = b""          # bytes since the last newline (only the seam when overflowed)
        self.overflow = False    # the open line is longer than any line the guard compares
        self.pending: set = set()  # signal kinds seen in the open line


class SignalScanner:
    """Finds promise signals in an agent's output, as bytes, across read boundaries.

    Echo guard (SPEC 5): a line (split on newline, surrounding blanks stripped) that
    contains a signal does not count when the same line appears in the prompt and is
    longer than the bare signal; a line that is only the signal always counts. Memory
    is bounded: of an open line only as much is kept as the guard can compare."""

    def __init__(self, signals: Dict[str, Sequence[str]], prompt: str) -> None:
        self.markers = [(marker.encode("utf-8"), kind) for kind, strings in signals.items()
                        for marker in strings]
        self.bare = {marker for marker, _ in self.markers}
        key = (prompt, tuple(self.markers))
        cached = _LAST_ECHOES[0]
        if cached is not None and cached[0] == key:
            self.echoes = cached[1]  # the same prompt as the last iteration
        else:
            self.echoes = self._prompt_echoes(prompt)
            _LAST_ECHOES[0] = (key, self.echoes)
        self.first_bytes = {marker[:1] for marker in self.bare}
        longest = max((len(m) for m in self.bare), default=1)
        self.seam = longest - 1
        # An open line longer than this cannot equal a prompt line (padding aside).
        self.cap = max([len(line) for line in self.echoes] + [longest]) + 256
        self.found: set = set()
        self.streams: Dict[str, _StreamLines] = {}

    def _prompt_echoes(self, prompt: str) -> frozenset:
        """The prompt's lines (stripped) that hold a signal and are more than the signal."""
        echoes = set()
        text = prompt.encode("utf-8")
        for marker in self.bare:  # only the prompt lines that hold a signal matter
            position = text.find(marker)
            while position >= 0:
                # Slice out only this line: linear in the prompt, however many lines quote it.
                end = text.find(b"\n", position)
                end = len(text) if end < 0 else end
                line = text[text.rfind(b"\n", 0, position) + 1:end].strip()
                if line not in self.bare:
                    echoes.add(line)
                position = text.find(marker, max(position + len(marker), end))
        return frozenset(echoes)

    def feed(self, stream: str, chunk: bytes) -> None:
        state = self.streams.get(stream)
        if state is None:
            state = self.streams[stream] = _StreamLines()
        if not state.pending and not self._may_hold_signal(state.line, chunk):
            # Fast path, almost every chunk: keep only the open line's start.
            newline = chunk.rfind(b"\n")
            if newline >= 0:
                state.line, state.overflow = chunk[newline + 1:], False
            else:
                state.line += chunk
            self._cap(state)
            return
        parts = (state.line + chunk).split(b"\n")
        for index, part in enumerate(parts):
            kinds = {kind for marker, kind in self.markers if marker in part}
            overflow = index == 0 and state.overflow
            if index == 0:
                kinds |= state.pending
            if index < len(parts) - 1:
                if kinds:
                    self._judge(part, kinds, overflow)
            else:
                state.line, state.overflow, state.pending = part, overflow, kinds
                self._cap(state)

    def finish(self) -> frozenset:
        """Judge the lines left open at end of output; the signal kinds found."""
        for state in self.streams.values():
            if state.pending:
                self._judge(state.line, state.pending, state.overflow)
            state.line, state.pending = b"", set()
        return frozenset(self.found)

    def _may_hold_signal(self, line: bytes, chunk: bytes) -> bool:
        if self.seam and line:  # a signal split across the previous read and this one
            seam = line[-self.seam:] + chunk[:self.seam]
            if any(marker in seam for marker, _ in self.markers):
                return True
        # A one-byte search is a memchr, several times faster than a marker search:
        # most chunks hold none of the markers' first bytes and are done here.
        for first in self.first_bytes:
            if first in chunk:
                return any(marker in chunk for marker, _ in self.markers)
        return False

    def _cap(self, state: _StreamLines) -> None:
        if len(state.line) > self.cap:
            state.line = state.line[-self.seam:] if self.seam else b""
            state.overflow = True

    def _judge(self, line: bytes, kinds: set, overflow: bool) -> None:
        if not overflow:
            stripped = line.strip()
            if stripped not in self.bare and stripped in self.echoes:
                return  # the agent quoted its prompt
        self.found |= kinds


MAX_EVENT_LINE = 16 * 1024 * 1024  # a longer structured line is dropped, with one warning
# Bytes of the CLI's own text (non-JSON lines, stderr) read for limit messages (SPEC 13).
LIMIT_SCAN_BYTES = 2048


QUIET_SECONDS = 30.0  # a text agent silent this long is "quiet" on the status line (SPEC 14)


def windows_words(used: Mapping[str, float]) -> str:
    """`5h 46% · 7d 81%`: the subscription windows' last utilisation (SPEC 18), by window."""
    return " · ".join("%s %d%%" % (WINDOWS[name][0], round(part * 100))
                      for name, part in sorted(used.items()) if name in WINDOWS)


def activity_words(kind: str, detail: str, seconds: float) -> str:
    """What the agent is doing, as the status line, the heartbeat and `status` say it:
    `→ Bash: pytest -q · 12s`, `thinking · 8s`, `retrying: HTTP 529 overloaded · attempt
    3/10`, `quiet 2m10s`, `provider unavailable · 2m left`."""
    detail = clean(detail)
    if kind == "tool":
        return "→ %s · %s" % (detail, format_duration(seconds))
    if kind == "retrying":
        return "retrying: " + detail
    if kind == "quiet":
        return "quiet " + format_duration(seconds)
    if kind == "wait":  # (its moment is the wait's end: `seconds` counts up to it from below 0)
        return "%s · %s left" % (detail, format_duration(max(-seconds, 0)))
    return "%s · %s" % (detail or kind, format_duration(seconds))  # thinking; a step: `verify: make test`


class StreamReport(Record):
    """What the loop needs of one iteration's output, whatever its format."""

    signals: frozenset              # SUCCESS / FAILURE from the assistant's text (or raw bytes)
    tail: bytes                     # readable output for PREVIOUS ITERATION and the reason
    own_text: bytes                 # the last bytes of the CLI's own text: limit messages
    output_bytes: int
    error: Reported | None = None
    limit: Limited | None = None
    cut_short: bool = False         # events of the format, but no run-ending one
    usage: Fields | None = None
    notice: str | None = None    # the last retry or warning the CLI reported
    said: str = ""                  # the agent's last words (text: the output's tail)
    last_text: str = ""             # its final message (text: the last non-empty line)
    answer: object = None           # the object a schema flag asked for, where the CLI says it apart
    denied: Tuple[Tuple[str, str], ...] = ()  # the actions the CLI refused: (tool, short input)


class Reader:
    """What the loop and Activity may ask of any reader of an agent's output; a text
    reader has no events, tool calls or token counts."""

    events, tool_calls, last_tool, output_bytes, session = 0, 0, "", 0, ""
    windows: Sequence[tuple] = ()  # the windows' readings (name, reading, when), in order (SPEC 18)
    on_stdout: Sink
    on_stderr: Sink

    def activity(self) -> Doing | None:
        raise NotImplementedError

    def tokens(self) -> int | None:
        return None

    def finish(self) -> StreamReport:
        raise NotImplementedError


class TextReader(Reader):
    """A text agent: its bytes go through unchanged (verbose, log), scanned for signals
    as they come; the last `tail_bytes` of them are kept."""

    def __init__(self, scanner: SignalScanner, show_out: Sink | None,
                 show_err: Sink | None, log: Sink | None,
                 tail_bytes: int) -> None:
        self.scanner, self.tail, self.output_bytes = scanner, _Tail(tail_bytes), 0
        self.last_output = time.monotonic()

        def sink(stream: str, show: Sink | None) -> Sink:
            def take(chunk: bytes) -> None:
                self.output_bytes += len(chunk)
                self.last_output = time.monotonic()
                scanner.feed(stream, chunk)
                self.tail(chunk)
                if show:
                    show(chunk)
            return take
        self.on_stdout = sink("stdout", _tee(show_out, log))
        self.on_stderr = sink("stderr", _tee(show_err, log))

    def activity(self) -> Doing | None:
        """(kind, detail, since): `quiet` once nothing came for QUIET_SECONDS, else None."""
        quiet = time.monotonic() - self.last_output >= QUIET_SECONDS
        return ("quiet", "", self.last_output) if quiet else None

    def finish(self) -> StreamReport:
        tail = self.tail.bytes()
        said = _decode(tail[-8192:])
        return StreamReport(signals=self.scanner.finish(), tail=tail, own_text=tail[-LIMIT_SCAN_BYTES:],
                            output_bytes=self.output_bytes, said=said,
                            last_text=_last_line(tail[-8192:], [m.decode() for m in self.scanner.bare]))


def total_tokens(usage: Usage) -> int | None:
    """Input, output and cache tokens together; None when the agent reported none (or
    only counts past any float)."""
    known = [float(usage[name]) for name in ("input_tokens", "output_tokens", "cache_read_tokens",
                                             "cache_write_tokens") if _number(usage.get(name)) is not None]
    total = sum(known)
    return int(total) if known and _number(total) is not None else None


def usage_record(usage: Usage) -> Fields:
    """Usage as the .jsonl has it: every field of USAGE_FIELDS, None where unknown."""
    return {name: usage.get(name) for name in USAGE_FIELDS}


def describe_usage(usage: Usage, tool_calls: int | None = None,
                   brief: bool = False) -> List[str]:
    """Usage in words, only the parts that are known: `4 turns`, `78.8k tokens`, `$0.39`
    (brief: tokens and cost only)."""
    parts = []
    if usage.get("turns") and not brief:
        parts.append(plural(int(usage["turns"]), "turn"))
    if tool_calls and not brief:
        parts.append(plural(tool_calls, "tool call"))
    tokens = total_tokens(usage)
    if tokens is not None:
        parts.append("%s tokens" % format_count(tokens))
    if usage.get("cost_usd") is not None:
        parts.append(format_cost(usage["cost_usd"]))
    if usage.get("model") and not brief:
        parts.append(str(usage["model"]))
    return parts


def add_usage(totals: Fields, usage: Usage) -> None:
    """Add usage figures into totals: numbers summed (money to the nano-dollar, so that ten
    iterations of $0.10 make $1.00 exactly; a sum past any float is left as it was), the
    model the latest one named."""
    for name, value in usage.items():
        if name == "model":
            if value:
                totals[name] = value
        elif _number(value) is not None:
            total = totals.get(name, 0) + value
            if _number(total) is not None:
                totals[name] = round(total, 9) if name == "cost_usd" else total


class EventReader(Reader):
    """A structured agent: JSON lines in, events out (SPEC 12)."""

    pending_size = 0
    dropping = False               # inside a line over MAX_EVENT_LINE
    dropped = 0                    # lines over MAX_EVENT_LINE
    undecodable = 0                # JSON the decoder could not make sense of
    error: Reported | None = None
    limit: Limited | None = None
    ended: bool | None = None   # the run-ending event: ok or not
    notice: str | None = None
    last_text = ""                 # its last message (for a commit's summary)
    answer: object = None          # the object its schema flag asked for (Claude)
    in_delta = False               # the last event was a chunk of a longer text
    text_open = False              # the last text shown did not end its line
    own_text = b""

    def __init__(self, agent_format: str, scanner: SignalScanner, fallback: TextReader, show_out: Sink | None,
                 show_err: Sink | None, log: Sink | None, raw: Sink | None, cwd: str, warn: Say) -> None:
        self.format, self.format_name = OUTPUT_FORMATS[agent_format], agent_format
        # The assistant's text is scanned by `scanner`; the raw bytes by `fallback`, whose verdict
        # stands when not one line was an event of the format (a wrong format must not hide SUCCESS).
        self.scanner, self.fallback, self.warn = scanner, fallback, warn
        self.loads, self.raw = json.loads, raw
        self.show, self.show_err = _tee(show_out, log), _tee(show_err, log)
        self.cwd = cwd.rstrip(os.sep) + os.sep
        self.pending: List[bytes] = []      # the open line, when it spans reads
        self.usage: Fields = {}
        self.partial: Dict[object, dict] = {}  # usage per message, until the run's comes
        self.said = _Tail(8192)             # the assistant's words (for its explanation)
        self.windows: List[tuple] = []
        self.denied: List[Tuple[str, str]] = []  # the actions the CLI refused (SPEC 24), each once
        self.doing = ("thinking", "", time.monotonic())  # (kind, detail, since): activity_words
        self.rendered = _Tail(fallback.tail.size)  # the readable lines: reasons come from here
        self.on_stdout, self.on_stderr = self.feed, self.feed_stderr

    @property
    def output_bytes(self) -> int:  # type: ignore[override]
        return self.fallback.output_bytes

    def activity(self) -> Doing | None:
        return self.doing if self.events else self.fallback.activity()

    def tokens(self) -> int | None:
        """The iteration's tokens so far: the CLI's count, else its messages' (partial)."""
        partial = sum(total_tokens(figures) or 0 for figures in self.partial.values())
        return total_tokens(self.usage) or partial or None

    # -- input ----------------------------------------------------------------------

    def feed(self, chunk: bytes) -> None:
        """Standard output: whole lines are decoded, the open one kept (bounded)."""
        self.fallback.on_stdout(chunk)
        if self.raw:
            self.raw(chunk)
        start = 0
        while True:
            end = chunk.find(b"\n", start)
            if end < 0:
                if start < len(chunk):
                    self._hold(chunk[start:] if start else chunk)
                return
            if self.dropping:
                self.dropping = False        # the end of a line that was too long
            elif self.pending:
                self.pending.append(chunk[start:end])
                size = self.pending_size + end - start
                line = b"".join(self.pending) if size <= MAX_EVENT_LINE else b""
                self.pending, self.pending_size = [], 0
                if line:
                    self._line(line)
                else:
                    self._dropped()
            else:
                self._line(chunk[start:end])
            start = end + 1

    def feed_stderr(self, chunk: bytes) -> None:
        """Standard error: no CLI here writes JSON to it -- the CLI's own text."""
        self.fallback.on_stderr(chunk)
        if self.show_err is not None:
            self.show_err(chunk)
        self.own_text = (self.own_text + chunk)[-LIMIT_SCAN_BYTES:]

    def _hold(self, piece: bytes) -> None:
        if self.dropping:
            return
        self.pending.append(piece)
        self.pending_size += len(piece)
        if self.pending_size > MAX_EVENT_LINE:
            self.pending, self.pending_size, self.dropping = [], 0, True
            self._dropped()

    def _dropped(self) -> None:
        self.dropped += 1
        if self.dropped == 1:
            self.warn("the agent wrote a line over %d MiB; it was dropped (its events are"
                      " lost, the raw stream file keeps it)" % (MAX_EVENT_LINE >> 20))

    def _line(self, line: bytes) -> None:
        if not line or line.isspace():  # (no strip: a line may be 16 MiB)
            return
        try:
            event = self.loads(line)
        except (ValueError, RecursionError):  # not JSON (invalid UTF-8, 100,000 `[`)
            event = None
        if not isinstance(event, dict):
            self._own_text(line)
            return
        try:
            events = self.format.decode(event)
        except (TypeError, ValueError, AttributeError, KeyError, OverflowError) as exc:
            # An event shaped like none seen so far must not end the run: it is shown as
            # the CLI's text and said once.
            if not self.undecodable:
                self.warn("an event of the agent's output could not be read as %s (%s); it is"
                          " shown as text" % (self.format_name, exc))
            self.undecodable += 1
            self._own_text(line)
            return
        if events is None:
            return  # an event type this format does not know: ignored
        self.events += 1
        for event in events:
            self._apply(event)

    def _own_text(self, line: bytes) -> None:
        """A line that is not JSON: the CLI's own words (shown, logged, read for limits)."""
        self.own_text = (self.own_text + line + b"\n")[-LIMIT_SCAN_BYTES:]
        self._show(_decode(line))

    # -- events -----------------------------------------------------------------------

    def _apply(self, event: tuple) -> None:
        kind, delta = event[0], False
        if kind == EV_TEXT:
            _, text, delta = event
            if not text:
                return
            data = text.encode("utf-8", "replace")  # (JSON may hold half an emoji: "\ud83d")
            # Deltas are chunks of one text: joined as they are, so that a marker split
            # across two of them is still found; whole texts are lines of their own.
            self.scanner.feed("assistant", data if delta else b"\n" + data + b"\n")
            self.said(data if delta else data + b"\n")
            self.last_text = self.last_text + text if delta and self.in_delta else text
            self.limit = None  # the model answered: a limit hit before was recovered from
            self.doing = ("thinking", "", time.monotonic())
            self._show(text, partial=delta)
        elif kind == EV_TOOL:
            self.tool_calls += 1
            self.limit = None
            detail = event[2].replace(self.cwd, "") if event[2] else ""
            self.last_tool = clean("%s: %s" % (event[1], detail) if detail else event[1])
            self.doing = ("tool", self.last_tool, time.monotonic())
            self._show("→ " + self.last_tool)
        elif kind == EV_TOOL_RESULT:
            _, _, failed, said, code = event
            self.doing = ("thinking", "", time.monotonic())
            if failed:
                self._show("  ✗ %s%s" % ("exit %d: " % code if code is not None else "", said or "failed"))
        elif kind == EV_USAGE:
            _, figures, how, key = event
            if how == "partial":
                self.partial[key] = figures
            elif how == "add":
                add_usage(self.usage, figures)
            else:
                self.usage.update(figures)
        elif kind == EV_LIMIT:
            self.limit = event[1:]
        elif kind == EV_WINDOW:
            self.windows.append(event[1:] + (time.time(),))  # (logged with the moment it came)
        elif kind == EV_SESSION:
            self.session = event[1]
        elif kind == EV_DENIED:  # (with the call's argument when the refusal did not say it)
            refused = (event[1], event[2] or self.last_tool.partition(clean(event[1]) + ": ")[2])
            if refused not in self.denied and len(self.denied) < DENIED_MOST:
                self.denied.append(refused)
        elif kind == EV_ERROR:
            _, message, status, kinds = event
            if self.error is None or self.error[0] != message:
                self._show("  ✗ error: " + _one_line(message, 400))
            else:  # Claude says it twice (its message, then its result): the kinds of both, first said first
                status, kinds = self.error[1] if status is None else status, self.error[2] + kinds
            self.error = (message, status, tuple(dict.fromkeys(kinds)))
        elif kind == EV_NOTICE:
            self.notice = event[1] if event[2] else self.notice
            self._show("  · " + _one_line(event[1], 400))
        elif kind == EV_RETRY:
            self.notice = activity_words("retrying", event[1], 0)  # (one wording of a retry)
            self.doing = ("retrying", event[1], time.monotonic())
            self._show("  · " + self.notice)
        elif kind == EV_RESULT:
            _, self.ended, text, self.answer = event
            if self.ended:
                self.error = None  # the run ended well: an error it reported before was not its end
            if self.ended and text:
                data = text.encode("utf-8", "replace")
                self.scanner.feed("assistant", b"\n" + data + b"\n")
                if not self.last_text:
                    self.said(data)
                    self.last_text = text
                    self._show(text)
        self.in_delta = delta

    def _show(self, text: str, partial: bool = False) -> None:
        """A readable line (or a chunk of one, for deltas) to --verbose and the .log."""
        if not partial:
            text = ("\n" if self.text_open else "") + text.rstrip("\n") + "\n"
            self.text_open = False
        elif text:
            self.text_open = not text.endswith("\n")
        self._emit(text.encode("utf-8", "replace"))

    def _emit(self, data: bytes) -> None:
        if self.show:
            self.show(data)
        self.rendered(data)

    # -- end --------------------------------------------------------------------------

    def finish(self) -> StreamReport:
        if self.pending and not self.dropping:
            line = b"".join(self.pending)
            self.pending, self.pending_size = [], 0
            self._line(line)
        if self.events == 0:
            # Nothing of the declared format came: judge the output as text (SPEC 12).
            if self.fallback.output_bytes:
                self.warn("the agent's output held no %s events; it was judged as text (is"
                          " --ai-format / ai_format right for this agent?)" % self.format_name)
            return self.fallback.finish()
        if self.text_open:  # the assistant's last words did not end their line
            self._emit(b"\n")
            self.text_open = False
        tail = self.rendered.bytes()  # the reasons come from here
        closing = describe_usage(self.usage, self.tool_calls)  # what the CLI reported, nothing invented
        if closing:
            self._show("usage: " + " · ".join(closing))
        if self.ended is None and self.partial and total_tokens(self.usage) is None:
            for figures in self.partial.values():  # cut short: what the messages carried
                add_usage(self.usage, figures)
        self.usage.setdefault("tool_calls", self.tool_calls)
        usage = usage_record(self.usage)
        usage["partial"] = self.ended is None and total_tokens(self.usage) is not None
        return StreamReport(signals=self.scanner.finish(), tail=tail, own_text=self.own_text,
                            output_bytes=self.fallback.output_bytes, error=self.error,
                            limit=self.limit, cut_short=self.ended is None,
                            usage=usage, notice=self.notice, last_text=self.last_text, answer=self.answer,
                            said=_decode(self.said.bytes()), denied=tuple(self.denied))


def make_reader(plan: RunPlan, agent_format: str, prompt: str, sinks: Tuple[Any, Any, Any],
                raw: Sink | None, warn: Say) -> Reader:
    """How an iteration's output is read: as text, or as events of the format; `sinks`:
    where its stdout, its stderr and the log's copy go."""
    def scanner() -> SignalScanner:
        return SignalScanner({SIGNAL_SUCCESS: plan.signals["success"],
                              SIGNAL_FAILURE: plan.signals["failure"]}, prompt)
    if agent_format not in OUTPUT_FORMATS:
        return TextReader(scanner(), *sinks, tail_bytes=plan.max_output_buffer)
    # The reader's own scanner sees only the agent's answer text (SPEC 12), so a marker
    # inside a tool's output is not a promise; the raw bytes are the fallback's.
    fallback = TextReader(scanner(), None, None, None, plan.max_output_buffer)
    return EventReader(agent_format, scanner(), fallback, *sinks, raw, plan.cwd, warn)


def left_behind(cli: AgentCLI | None, session: str, env: Environ, report: StreamReport
                ) -> Tuple[List[tuple], StreamReport]:
    """What the CLI left in its files after an iteration (Codex's rollout): its window
    readings, as of now, and the report with the typed kind of the error it reported
    (its HTTP status too, where the stream had none)."""
    if not (cli and cli.rollout and session):
        return [], report
    windows, kind = cli.rollout(session, env)
    if kind and report.error:
        status = kind[1] if isinstance(kind[1], int) else report.error[1]
        report = report.replace(error=error_event(report.error[0], status, kind[0], *report.error[2])[1:])
    return [(name, reading, time.time()) for name, reading in windows.items()], report


def usage_suffix(usage: Usage | None) -> str:
    """` · 24.1k tokens · $0.31` for a progress line: only the parts the agent reported."""
    if not usage or (not total_tokens(usage) and not usage.get("cost_usd")):
        return ""  # nothing reported, or nothing spent (a request refused at a limit)
    return "".join(" · " + part for part in describe_usage(usage, brief=True)) + \
        (" (partial)" if usage.get("partial") else "")


def _usage_log_lines(usage: Usage) -> str:
    """Seed 002's "if available" footer lines: Model, API Requests, Tokens, Cost."""
    lines = []
    if usage.get("model"):
        lines.append("Model: %s" % usage["model"])
    if usage.get("turns"):
        lines.append("API Requests: %d" % usage["turns"])
    tokens = total_tokens(usage)
    if tokens is not None:  # the parts the CLI reported: an unknown count is not a 0
        parts = ["%s %d" % (words, usage[name]) for name, words in (
            ("input_tokens", "input"), ("output_tokens", "output"),
            ("cache_read_tokens", "cache read"), ("cache_write_tokens", "cache write"))
            if usage.get(name) is not None]
        lines.append("Tokens: %d (%s)%s" % (tokens, ", ".join(parts),
                                            " (partial)" if usage.get("partial") else ""))
    if usage.get("tool_calls"):
        lines.append("Tool Calls: %d" % usage["tool_calls"])
    if usage.get("cost_usd") is not None:
        lines.append("Cost: $%.4f" % usage["cost_usd"])
    return "".join(line + "\n" for line in lines)


class Activity:
    """What is under way (SPEC 14), the one owner of its words whatever shows them: the
    status line, the heartbeat and the live file `status` reads. A step (a gate or git:
    kind `step`; a wait: kind `wait`, its `since` the wait's end) or, with `reader`, the
    agent of iteration `label`, whose reader says what it does."""

    def __init__(self, kind: str, detail: str = "", since: float | None = None,
                 reader: Reader | None = None, label: str = "", windows: Readings | None = None
                 ) -> None:
        self.kind, self.detail, self.reader, self.label = kind, detail, reader, label
        self.windows = windows or {}  # the run's last readings (Codex's come after its iteration)
        self.since = time.monotonic() if since is None else since

    def doing(self) -> Doing | None:
        return self.reader.activity() if self.reader else (self.kind, self.detail, self.since)

    def lines(self) -> Tuple[str, str]:
        """(status line, heartbeat line): `iteration 3/10 · 2m13s · 14 tool calls · → Bash:
        pytest -q · 12s`, `verify: make test · 12s`, `usage limit (five_hour) · 2h left`."""
        now, reader, doing = time.monotonic(), self.reader, self.doing()
        what = [activity_words(doing[0], doing[1], now - doing[2])] if doing else []
        if not reader:
            spent = format_duration(abs(now - self.since))
            return what[0], ("%s%s: %s left" % (self.detail[0].upper(), self.detail[1:], spent)
                             if self.kind == "wait" else "%s still running (%s)" % (self.detail, spent))
        figures = [format_duration(now - self.since), plural(reader.tool_calls, "tool call") if reader.events
                   else "%s output" % format_bytes(reader.output_bytes)]
        known = dict(self.windows, **{name: reading for name, reading, _ in reader.windows})
        if known:
            figures.append(windows_words({name: reading[0] for name, reading in known.items()}))
        last = reader.last_tool if reader.events and (not doing or doing[0] != "tool") else ""
        return (" · ".join(["iteration " + self.label] + figures + what),
                "Iteration %s still running (%s)" % (self.label, ", ".join(
                    figures + what + (["last: → " + last] if last else []))))

    def record(self) -> Fields:
        """The live file's fields: the activity with its wall-clock moment, and the agent's
        figures so far."""
        doing, reader = self.doing(), self.reader
        record: Fields = {}
        if doing is not None:
            record["activity"] = [doing[0], doing[1], round(time.time() - time.monotonic() + doing[2], 3)]
        if reader and reader.events:
            record.update(tool_calls=reader.tool_calls, last_tool=reader.last_tool, tokens=reader.tokens())
        elif reader:
            record["output_bytes"] = reader.output_bytes
        return record


# -- what a verifier's output says (SPEC 20, 22) -------------------------------------------

# The summary lines of the test runners SPEC 22 names, each with its counts as `N word`
# (`items`; unittest's `failures=1`, go's one word a line) and, where the runner's total
# includes the skipped tests, that `total`. Every line one verify printed is summed; go's
# own lines only where it ran verbose (`=== RUN`: without -v it prints a test's line only
# when it fails, which is no count of the tests run, SPEC 22 rev 6) and not where gotestsum
# said them again; the plain `N passed, N failed` only where no runner's line was found.
_COUNT_LINES = (
    ("gotestsum", r"^DONE (?P<total>\d+) tests?(?P<items>(?:, \d+ \w+)*) in "),
    ("pytest", r"^=* ?(?P<items>(?:\d+ \w+(?:, )?)+|no tests ran) in [\d.]+s\b"),
    ("unittest", r"^Ran (?P<total>\d+) tests? in [\d.]+s *\n(?: *\n)?(?:OK|FAILED)"
                 r"(?: \((?P<items>[^)]*)\))?"),
    ("go", r"^ *--- (?P<items>PASS|FAIL|SKIP): "),
    ("cargo", r"^test result: \w+\. (?P<items>\d+ passed; \d+ failed; \d+ ignored; \d+ measured;"
              r" \d+ filtered)"),
    ("jest", r"^Tests: +(?P<items>.*?),? (?P<total>\d+) total"),
    ("vitest", r"^ *Tests +(?P<items>[^(\n]*?) *\((?P<total>\d+)\)"),
    ("plain", r"\b(?P<items>\d+ (?:passed|failed), \d+ (?:passed|failed))\b"))
# Their words: tests that failed, and that did not run to a result of their own (a test
# marked to fail is not one that passes: xfailed counts with skipped, SPEC 22 rev 6).
_FAILED_WORDS = {"failed", "fail", "failure", "failures", "error", "errors"}
_SKIPPED_WORDS = {"skipped", "skip", "deselected", "ignored", "filtered", "todo", "xfailed",
                  "expected failures"}
_RAN_WORDS = _FAILED_WORDS | {"passed", "pass", "xpassed", "measured", "unexpected successes"}


# The lines a runner's summary may be on (each of _COUNT_LINES' passes, and go's `=== RUN`):
# a verify's whole output is kept to these, not to its 8 KiB tail, which holds fewer
# `--- PASS` lines the longer the tests' names are (a rename would look like a drop).
_COUNT_HINT = re.compile(rb"\d+ (?:tests?|passed|failed)|no tests ran| in [\d.]+ ?s\b|\b(?:OK|FAILED)\b|"
                         rb"--- (?:PASS|FAIL|SKIP): |^=== RUN |test result: |Tests[: ]")


class CountedLines:
    """A gate's stream kept to its _COUNT_HINT lines, the whole stream through (the last
    4 MiB of them at most): where test_counts reads."""

    def __init__(self) -> None:
        self.partial, self.lines = b"", _Tail(4 << 20)

    def __call__(self, chunk: bytes) -> None:
        *whole, partial = (self.partial + chunk).split(b"\n")
        self.partial = partial[-4096:]  # (a summary is short: a line with no end past this is none)
        for line in whole:
            if _COUNT_HINT.search(line):
                self.lines(line + b"\n")

    def text(self) -> bytes:
        return self.lines.bytes() + self.partial


def test_counts(output: bytes) -> Fields | None:
    """The tests a verifier ran (passed, failed and errors), failed, and skipped, from the
    summary lines its runner printed (SPEC 22): {"run", "skipped", "failed"}, or None when
    it printed none."""
    text, counts = clean(_decode(output)), {"run": 0, "skipped": 0, "failed": 0}
    found: set = set()
    verbose_go = re.search(r"^=== RUN ", text, re.M) is not None
    for runner, pattern in _COUNT_LINES:
        if (runner == "go" and ("gotestsum" in found or not verbose_go)) or (runner == "plain" and found):
            continue
        for match in re.finditer(pattern, text, re.M):
            found.add(runner)
            items = re.sub(r"([a-z][a-z ]*)=(\d+)", r"\2 \1", (match.group("items") or "").lower())
            said: Dict[str, int] = collections.Counter()
            for number, word in re.findall(r"(\d+) ([a-z]+(?: [a-z]+)?)", items) or [("1", items)]:
                said[word] += int(number)
            skipped = sum(said[word] for word in _SKIPPED_WORDS)
            total = match.groupdict().get("total")
            counts["run"] += int(total) - skipped if total else sum(said[word] for word in _RAN_WORDS)
            counts["skipped"] += skipped
            counts["failed"] += sum(said[word] for word in _FAILED_WORDS)
    return counts if found else None


class Verified(Record):
    """A verify run as the guards weigh it and everything words it (SPEC 20, 22): its exit
    code, its telling line, and -- where its runner printed them -- the tests it ran,
    failed and skipped. The one record of a verify result: the loop's, a session read
    back (status --json shows it as_json), the best state kept."""

    exit_code: int
    line: str = ""
    counts: Fields | None = None   # {"run", "skipped", "failed"}

    @classmethod
    def of(cls, check: AgentResult) -> "Verified":
        return cls(check.exit_code, _last_line(check.output, ()), check.counts)

    @classmethod
    def read(cls, fields: object) -> "Verified | None":
        """A verify result from a `gate` event or status --json's record; None for what is
        not one."""
        fields = _mapping(fields)
        counts = {key: value for key, value in _mapping(fields.get("counts")).items()
                  if key in ("run", "skipped", "failed") and _typed(value, int) is not None}
        if _typed(fields.get("exit_code"), int) is None or isinstance(fields["exit_code"], bool):
            return None
        return cls(fields["exit_code"], _one_line(fields.get("line"), REASON_CHARS),
                   counts if len(counts) == 3 else None)

    def worse_than(self, best: "Verified") -> str:
        """The figure that makes this result worse than `best`'s (SPEC 22: it fails where the
        best passed, or -- counts on both sides -- fails more tests, runs fewer, or skips
        more), as words (`4 run where 5 ran`); "" when none does."""
        if best.exit_code == 0 and self.exit_code:
            return "failing where it passed"
        for key, sign, words in (("failed", 1, "%d failed where %d did"), ("run", -1, "%d run where %d ran"),
                                 ("skipped", 1, "%d skipped where %d were")):
            if self.counts and best.counts and (self.counts[key] - best.counts[key]) * sign > 0:
                return words % (self.counts[key], best.counts[key])
        return ""

    def words(self) -> str:
        """`passing (12 run)`, `failing (3 failed of 12 run, 1 skipped)`, or, without
        counts, `passing` and `failing (<its telling line>)`."""
        counts, said = self.counts, "passing" if self.exit_code == 0 else "failing"
        if counts:
            failed = "%d failed of " % counts["failed"] if counts["failed"] else ""
            skipped = ", %d skipped" % counts["skipped"] if counts["skipped"] else ""
            return "%s (%s%d run%s)" % (said, failed, counts["run"], skipped)
        if self.exit_code:
            return "%s (%s)" % (said, _one_line(self.line, 100) or "exit %d" % self.exit_code)
        return said

    def as_json(self) -> Fields:
        """As `status --json` and `report --json` show it."""
        return {"result": "pass" if self.exit_code == 0 else "fail", "exit_code": self.exit_code,
                "line": self.line, "counts": self.counts}


# ==== 11. Outcomes and causes =========================================
# Why an iteration ended and what the run does next (SPEC 5, 13, 15): the outcome and
# the one cause of an iteration that did not succeed, the provider's part in it (bad
# credentials, an account that cannot pay, a limit, an outage), and the closing line of
# each way a run stops. Structured events say what the provider did directly; in text,
# the CLIs' own messages are read, but only when the iteration failed and only in the
# last 2 KB, so that a message a tool printed earlier never counts.

def classify_outcome(exit_code: int, signals: Iterable[str], timed_out: str | None = None,
                     verified: bool | None = None, reported_error: bool = False,
                     cut_short: bool = False, trouble: str | None = None,
                     git_failed: bool = False, protected: bool = False,
                     worse: bool = False, accepted: bool | None = None) -> Tuple[str, str | None]:
    """The outcome matrix of SPEC 5 and the cause of SPEC 15, whole: (outcome, cause).

    The provider's trouble comes first (a limit or an outage is waited out, not failed);
    an error the CLI itself reports and a failed commit are failures whatever was said;
    then output signals win over the exit code. The cause of an outcome that is not a
    success is the first that applies: the provider's, timeout, agent (it signalled
    FAILURE), error, verify, accept (SPEC 22 rev 6), git, exit."""
    signals = set(signals)
    if trouble:
        outcome = {CAUSE_LIMIT: LIMITED, CAUSE_OUTAGE: UNAVAILABLE}.get(trouble, FAILURE)
    elif (reported_error and not timed_out) or git_failed or protected or worse:  # (timeout: rooda's stop)
        outcome = FAILURE
    elif SIGNAL_SUCCESS in signals:
        outcome = REJECTED if verified is False or accepted is False else COMPLETED
    elif timed_out:
        outcome = TIMEOUT
    elif cut_short or exit_code != 0 or SIGNAL_FAILURE in signals or verified is False:
        outcome = FAILURE
    else:
        return SUCCESS, None
    if outcome == COMPLETED:
        return outcome, None
    for cause, applies in ((trouble, trouble is not None), (CAUSE_PROTECTED, protected),
                           (CAUSE_TIMEOUT, timed_out), (CAUSE_AGENT, SIGNAL_FAILURE in signals),
                           (CAUSE_ERROR, reported_error or cut_short), (CAUSE_WORSE, worse),
                           (CAUSE_VERIFY, verified is False), (CAUSE_ACCEPT, accepted is False),
                           (CAUSE_GIT, git_failed)):
        if applies:
            return outcome, cause
    return outcome, CAUSE_EXIT


def explanation(text: str, markers: Sequence[str]) -> str:
    """What the agent said about its FAILURE: the words on the marker's line besides the
    marker, else the last non-empty line before it (SPEC 15); "" without a marker."""
    lines = text.splitlines()
    for index in range(len(lines) - 1, -1, -1):
        if any(marker in lines[index] for marker in markers):
            words = lines[index]
            for marker in markers:
                words = words.replace(marker, " ")
            words = words.strip(" \t-:—.")
            earlier = [line.strip() for line in lines[:index] if line.strip()]
            return _one_line(words or (earlier[-1] if earlier else ""), REASON_CHARS)
    return ""


LIMIT_MARGIN_SECONDS = 30  # added to a known reset time (the CLIs print it cut to the minute)
# Waits when the reset time is unknown: 1, 2, 4 ... minutes, doubling per consecutive
# limited attempt, capped here; an outage is retried the same way, capped lower.
LIMIT_BACKOFF_START = 60
LIMIT_BACKOFF_CAP = 1800
OUTAGE_BACKOFF_CAP = 900
RESET_PAST_TOLERANCE = 300  # a time of day this far past is the same minute today, not tomorrow
# What the provider did, in words, as (cause, regex[, the limit's kind] -- without it, the
# regex's first group). The CLIs' own (their rows' `words`) are read in a failed text
# agent's last 2 KB. The API wordings added to them are too common in ordinary output (a
# web app's failing tests say "429 Too Many Requests", a test runner "Connection error")
# to be read there; they classify only an error a structured CLI reports.
_CLI_WORDS = tuple({entry: None for cli in AGENT_CLIS for entry in cli.words})
_API_WORDS = _CLI_WORDS + (
    (CAUSE_AUTH, r"\b401\b|authentication_failed|Authentication failed|\bUnauthorized\b|Not logged in"),
    (CAUSE_BILLING, r"insufficient_quota|exceeded your current quota|payment required|\b402\b"
                    r"|credit balance is too low|billing_error"),
    (CAUSE_LIMIT, r"\b(rate limit) (?:exceeded|reached)"),
    (CAUSE_LIMIT, r"\b429\b[^\n]{0,40}\b(?:Too Many Requests|RESOURCE_EXHAUSTED|rate.?limit)", "rate limit"),
    (CAUSE_OUTAGE, r"(?:status|API Error:?|HTTP)\W{0,3}(?:5\d\d)\b|overloaded|internal server error"
                   r"|service unavailable|bad gateway|gateway timeout|connection (?:error|refused|reset)"
                   r"|ECONN(?:REFUSED|RESET)|ETIMEDOUT|fetch failed|stream disconnected"))
# A window's limit in a CLI's words, by the name its stream gives the window: one name per
# window whatever the mode (SPEC 13 rev 5; Claude's `session limit` was its 5-hour one).
LIMIT_WINDOWS = {"5-hour limit": "five_hour", "session limit": "five_hour", "weekly limit": "seven_day"}
_MONTHS = ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec")


def _time_zone(name: str | None) -> Any:
    """The zone a CLI named for its reset time; None for local time (also where this
    Python has no zoneinfo, 3.8, or does not know the name)."""
    import datetime
    if not name:
        return None
    if name.strip().upper() in ("UTC", "GMT", "Z"):
        return datetime.timezone.utc
    try:
        import zoneinfo  # type: ignore[import-not-found]
        return zoneinfo.ZoneInfo(name.strip())
    except Exception:  # ImportError on 3.8, an unknown or malformed name
        return None


def parse_reset_time(message: str, now: float) -> float | None:
    """When a limit resets, as an epoch, from the CLI's words: `resets 9:03pm (UTC)`,
    `resets Nov 26, 7:04pm (America/New_York)`, `try again at 7:32 PM` (local time), `try
    again at Nov 27th, 2026 12:16 PM`. A bare time of day is its next occurrence (on the
    night clocks go back, the repeated hour's second pass counts); one up to 5 minutes
    past is this minute."""
    import datetime
    relative = re.search(r"try again in (\d+(?:\.\d+)?)\s*(s|sec|seconds?|m|min|minutes?|h|hours?)\b",
                         message, re.IGNORECASE)
    if relative:
        unit = relative.group(2).lower()[0]
        return now + float(relative.group(1)) * {"s": 1, "m": 60, "h": 3600}[unit]
    match = re.search(
        r"(?:resets(?: at)?|try again (?:at|after))\s+(?:(?P<month>[A-Za-z]{3})[a-z]*\.?\s+"
        r"(?P<day>\d{1,2})(?:st|nd|rd|th)?,?\s+(?:(?P<year>\d{4}),?\s+)?(?:at\s+)?)?(?P<hour>\d{1,2})"
        r"(?::(?P<minute>\d\d))?\s*(?P<half>[ap]\.?m\.?)?(?:\s*\((?P<zone>[^)]+)\))?", message, re.IGNORECASE)
    if not match or (match.group("minute") is None and match.group("half") is None):
        return None
    hour, minute = int(match.group("hour")), int(match.group("minute") or 0)
    half = (match.group("half") or "").lower().replace(".", "")
    if half:
        if not 1 <= hour <= 12:
            return None
        hour = hour % 12 + (12 if half == "pm" else 0)
    month = match.group("month")
    if hour > 23 or minute > 59 or (month and month.lower() not in _MONTHS):
        return None
    current = datetime.datetime.fromtimestamp(now, _time_zone(match.group("zone")))
    try:
        moment = current.replace(hour=hour, minute=minute, second=0, microsecond=0)
        if month:
            moment = moment.replace(month=_MONTHS.index(month.lower()) + 1, day=int(match.group("day")))
            if match.group("year"):
                moment = moment.replace(year=int(match.group("year")))
            elif moment.timestamp() < now - 180 * 86400:  # "Jan 2" seen in late December
                moment = moment.replace(year=moment.year + 1)
            return moment.timestamp()
    except ValueError:  # Feb 30
        return None
    for day in (0, 1):
        for fold in (0, 1):  # a time of the hour that repeats when the clocks go back: both passes
            candidate = (moment + datetime.timedelta(days=day)).replace(fold=fold)
            if candidate.timestamp() >= now - RESET_PAST_TOLERANCE:
                return candidate.timestamp()
    return None


def provider_words(text: str, words: Sequence[Tuple[str, ...]] = _API_WORDS
                   ) -> Tuple[str | None, str, str]:
    """(cause, the limit's kind, the line) of the first trouble a text announces, in SPEC
    15's order -- auth, billing, limit, outage -- or (None, "", ""). A billing message
    that names a reset time, or a CLI's own limit words beside it, is a limit."""
    for cause in PROVIDER_CAUSES:
        for own, pattern, *kind in words:
            match = re.search(pattern, text, re.IGNORECASE) if own == cause else None
            if not match:
                continue
            if cause == CAUSE_BILLING and (parse_reset_time(text, time.time()) is not None or any(
                    own == CAUSE_LIMIT and re.search(pattern, text, re.I)
                    for own, pattern, *_ in _CLI_WORDS)):
                break
            line = next((line.strip()[:REASON_CHARS] for line in reversed(text.splitlines())
                         if re.search(pattern, line, re.IGNORECASE)), telling_line(text))
            if not kind:
                kind = [match.group(1).lower() if match.groups() else ""]
            return cause, LIMIT_WINDOWS.get(kind[0], kind[0]), line
    return None, "", ""


def limit_wait_seconds(resets_at: float | None, attempt: int, now: float,
                       cause: str = CAUSE_LIMIT) -> float:
    """How long to wait for the provider: until a limit's reset plus a margin when it is
    known, else 1, 2, 4 ... minutes (attempt 1, 2, 3 ...), capped at 30 (15 for an outage)."""
    if resets_at is not None:
        return max(resets_at - now, 0.0) + LIMIT_MARGIN_SECONDS
    cap = OUTAGE_BACKOFF_CAP if cause == CAUSE_OUTAGE else LIMIT_BACKOFF_CAP
    return float(min(LIMIT_BACKOFF_START * 2 ** min(attempt - 1, 16), cap))


class ProviderTrouble(Record):
    """What the provider did to an iteration (SPEC 13, 15): its cause, and the CLI's words."""

    kind: str                       # CAUSE_AUTH | CAUSE_BILLING | CAUSE_LIMIT | CAUSE_OUTAGE
    message: str                    # the CLI's own words
    limit: str = ""                 # a limit's kind: five_hour, session limit, rate limit
    resets_at: float | None = None  # when a limit resets (epoch), if known
    advice: str = ""                # what to do, when no retry fixes it (CAUSE_FATAL)


def account_words(trouble: ProviderTrouble, kind: str | None, cli: AgentCLI | None, env: Environ,
                  who: str = "the agent") -> str:
    """Why a run stops for the agent's account (auth, billing, a fatal kind: exit 2,
    resumable), or holds `who` for the session (SPEC 23): the CLI's words, then what to do
    -- the kind's own advice, else the cause's."""
    said = _one_line(trouble.message, 300).rstrip(". ")  # (";" follows)
    if trouble.kind == CAUSE_FATAL:
        return "%s cannot go on: %s (%s); %s" % (who, said, kind, trouble.advice)
    if trouble.kind == CAUSE_BILLING:
        paid = cli.paid_by(env) if cli else None
        return "%s's account cannot pay: %s; %s" % (who, said, "who pays: %s (%s found here); add credit"
                                                    " there, or use another login" % paid[::-1] if paid
                                                    else "add credit to the account the agent uses")
    hint = "check the agent's credentials (API key or login)"
    if cli:
        hint = "%s needs %s" % (cli.name, " or ".join([key for key, _ in cli.logins(env)
                                                      if key not in dict(cli.credentials)] + [cli.login]))
    return "%s cannot authenticate: %s; %s" % (who, said, trouble.advice or hint)


def typed_kind(report: StreamReport, cli: AgentCLI | None) -> Tuple[str | None, str | None]:
    """The typed kind of the error an iteration's CLI reported, as it gave it, and the cause
    its catalogue row gives that kind (SPEC 13 rev 5): the first kind the row knows, else
    the first given, whose cause is None -- as if absent: the wording decides. (None, None)
    without one."""
    kinds = report.error[2] if report.error else ()
    for kind in kinds:
        if cli and kind in cli.kinds:
            return kind, cli.kinds[kind]
    return (kinds[0] if kinds else None), None


# The causes an HTTP status in a CLI's reported error means (SPEC 13, 15); 5xx: an outage.
HTTP_CAUSES = {401: CAUSE_AUTH, 402: CAUSE_BILLING, 429: CAUSE_LIMIT}


def find_provider_trouble(report: StreamReport, exit_code: int, success_said: bool, now: float,
                          cli: AgentCLI | None) -> ProviderTrouble | None:
    """The provider's trouble that ended an iteration, or None: from the structured
    events of a run that ended badly (an error -- its typed kind first, then its HTTP
    status and words --, no closing event, a non-zero exit), then, for a failed
    iteration that did not say SUCCESS, from the last 2 KB of the CLI's own text (and
    its exit code)."""
    if exit_code == 0 and report.error is None and not report.cut_short:
        return None
    limit_kind, said, resets = report.limit or ("", None, None)
    if report.error is not None:
        message, status, _ = report.error
        kind, typed = typed_kind(report, cli)
        by_status = HTTP_CAUSES.get(status or 0)
        if status and 500 <= status <= 599:
            by_status = CAUSE_OUTAGE
        cause, words, _ = provider_words(message)
        if typed == "" and by_status is None:
            typed = None  # (a kind its HTTP status decides, given none: as if absent)
        if typed is not None:  # a kind its row knows: its words may drift, its kinds do not
            cause = typed or by_status
        elif by_status in (CAUSE_AUTH, CAUSE_BILLING):
            cause = by_status
        elif cause is None:
            cause = CAUSE_LIMIT if report.limit else by_status
        if cause == CAUSE_LIMIT:
            return ProviderTrouble(cause, message, limit=limit_kind or words or "rate limit",
                                   resets_at=resets or parse_reset_time(message, now))
        if cause in PROVIDER_CAUSES or cause == CAUSE_FATAL:
            return ProviderTrouble(cause, message, advice=cli.advice.get(str(kind), "") if cli else "")
        if typed is not None:
            return None  # (an error of the iteration's own, as its kind says)
    elif report.limit is not None:
        return ProviderTrouble(CAUSE_LIMIT, limit=limit_kind, resets_at=resets,
                               message=said or "the provider refused the request (%s limit)" % limit_kind)
    elif report.cut_short and report.notice:  # its last retry is what the CLI said of its end
        cause, kind, _ = provider_words(report.notice, _CLI_WORDS)
        if cause is not None:
            return ProviderTrouble(cause, report.notice, limit=kind)
    if success_said:
        return None
    text = _decode(report.own_text)
    if cli and exit_code in cli.auth_exit_codes:
        return ProviderTrouble(CAUSE_AUTH, telling_line(text) or "exit %d" % exit_code)
    cause, kind, line = provider_words(text, _CLI_WORDS)
    if cause is None:
        return None
    return ProviderTrouble(cause, line, limit=kind,
                           resets_at=parse_reset_time(text, now) if cause == CAUSE_LIMIT else None)


# The ways a run stops (SPEC 5, 13): the status it ends with, its exit code (None: 128 +
# the signal that interrupted it) and its closing line, filled in from the run's
# figures. The reason words of the log summary and session_end are kept apart.
STOP_SUCCESS, STOP_CAP, STOP_TIME, STOP_COST = "success", "cap", "time", "cost"
STOP_DONE_WHEN, STOP_ABORTED, STOP_HELP, STOP_STUCK = "done_when", "aborted", "help", "stuck"
STOP_ERROR, STOP_ACCOUNT = "error", "account"  # (the agent cannot authenticate or pay: resumable)
STOP_LIMITED, STOP_UNAVAILABLE, STOP_HELD, STOP_INTERRUPTED = "limited", "unavailable", "held", "interrupted"


class Stop(Record):
    """One way a run stops: its status (session_end, `status`), exit code (None: 128 + the
    signal's number), closing line (formatted by _closing_line), how that line is said
    (the Progress method: info, error or always), and whether `resume` may go on with it."""

    status: str
    exit_code: int | None
    words: str
    level: str = "error"
    resumable: bool = False


STOPS = {
    STOP_SUCCESS: Stop(STATUS_COMPLETED, 0, "Completed: agent signalled SUCCESS ({done}, total: {total})",
                       "info"),
    STOP_CAP: Stop(STATUS_COMPLETED, 0, "Reached max iterations: {cap} (total: {total})", "info"),
    STOP_TIME: Stop(STATUS_COMPLETED, 0, "Completed: time budget of {max_time} reached ({done}, total:"
                    " {total})", "info"),
    STOP_COST: Stop(STATUS_COMPLETED, 0, "Completed: cost budget of {max_cost} reached ({done}, total:"
                    " {total})", "info"),
    STOP_DONE_WHEN: Stop(STATUS_COMPLETED, 0, "Completed: done_when reports nothing left to do ({done},"
                         " total: {total})", "info"),
    STOP_ABORTED: Stop(STATUS_ABORTED, 1, "Aborting after {failures} consecutive failures ({done} completed,"
                       " total: {total})"),
    STOP_HELP: Stop(STATUS_ABORTED, 1, "The agent asked for help ({done} completed, total: {total})"),
    STOP_STUCK: Stop(STATUS_STUCK, 3, "Stuck: {reason} ({done} completed, total: {total})"),
    STOP_LIMITED: Stop(STATUS_LIMITED, 4, "Stopped at a {reason} ({done} completed, total: {total})",
                       resumable=True),
    STOP_UNAVAILABLE: Stop(STATUS_UNAVAILABLE, 4, "Stopped: {reason} ({done} completed, total: {total})",
                           resumable=True),
    STOP_HELD: Stop(STATUS_LIMITED, 4, "Stopped: {reason} ({done} completed, total: {total})",
                    resumable=True),
    STOP_ERROR: Stop(STATUS_ERROR, 2, "{reason}"),
    STOP_ACCOUNT: Stop(STATUS_ERROR, 2, "{reason}", resumable=True),
    STOP_INTERRUPTED: Stop(STATUS_INTERRUPTED, None, "Interrupted by {signal} {when} ({done} completed,"
                           " total: {total})", "always", True),
}


def verify_words(check: AgentResult | None) -> Reason:
    """A failed verify as a reason: ("verify exit 1", "<its telling line>")."""
    assert check
    return "verify exit %d" % check.exit_code, _last_line(check.output, ()) or "(it printed nothing)"


def cause_words(attempt: _Attempt, plan: RunPlan, markers: Sequence[str]) -> Reason:
    """The cause of an iteration in words (SPEC 15): ("agent", "<its explanation>"),
    ("verify exit 2", "<its last line>"), ("timeout", "no output for 10m"), ("exit 1",
    "<its last line>"); `markers` are left out of a quoted line."""
    result, report, cause = attempt.result, attempt.report, attempt.cause
    assert result and report
    if cause == CAUSE_VERIFY:
        return ("verify", attempt.drop) if attempt.drop else verify_words(attempt.check)
    if cause == CAUSE_PROTECTED:
        # (with --no-log, where the agent's versions are; else beside the logs, in the .jsonl)
        return "protected", "the agent changed %s; restored; its versions in %s" % (
            ", ".join(attempt.restored), attempt.kept_versions)  # (wherever the reason shows: issue 43)
    if cause == CAUSE_WORSE:
        return "worse", attempt.worse
    if cause == CAUSE_ACCEPT:  # (and nothing of what it printed: SPEC 22 rev 6)
        return "accept", "the acceptance check failed (exit %s)" % attempt.accepted
    if cause == CAUSE_GIT:
        return "git", (attempt.git_problem or "")[:REASON_CHARS]
    if cause == CAUSE_TIMEOUT:
        return "timeout", ("no output for %s" % format_budget(plan.idle_timeout or 0)
                           if result.timed_out == "idle" else
                           "time limit of %s reached" % format_budget(plan.iteration_timeout or 0))
    if cause == CAUSE_AGENT:
        return "agent", attempt.explanation or "the agent signalled FAILURE (and said nothing else)"
    kind, cli = attempt.error_kind, attempt.agent.cli
    if kind and cli and cli.kinds.get(kind) == "" and report.error and report.error[1]:
        kind = "HTTP %d" % report.error[1]  # (a kind its HTTP status decides reads as that status: issue 43)
    kind = " (%s)" % kind if kind else ""  # (`outage (server_error)`: SPEC 13)
    if attempt.trouble:
        return (cause or "") + kind, _one_line(attempt.trouble.message, REASON_CHARS)
    # The CLI's last notice (codex's `error` event, a retry message) often says why a run
    # ended badly when nothing else does.
    notice = "; its last notice: " + _one_line(report.notice, 160) if report.notice else ""
    if cause == CAUSE_ERROR:
        return "error" + kind, _one_line(report.error[0], REASON_CHARS) if report.error is not None else \
            "the agent ended without its closing result event (interrupted, or it crashed)" + notice
    head = "exit %d" % result.exit_code if not result.killed_by else "killed by %s" % result.killed_by
    return head, _last_line(report.tail, markers) or "(it printed nothing)" + notice


# The kinds of wait (SPEC 13, 15, 18): a usage limit and an outage are waited out and the
# attempt they ended runs again; a reserve or the pace holds the next iteration back.
WAIT_LIMIT, WAIT_OUTAGE, WAIT_RESERVE, WAIT_PACE = "limit", "outage", "reserve", "pace"


class WaitKind(Record):
    """One kind of wait, in words: the status line's (`%s`: the wait's name), the
    announcement's, what it waits for (the closing line of an interrupted wait, `status`),
    what happens at its end; how the run stops when it may not wait (a key of STOPS);
    whether it holds an iteration back before it starts (else an attempt runs again); and
    what it says of an agent it holds when another takes over (SPEC 23)."""

    doing: str
    said: str
    waiting_for: str
    lets_go: str
    stop: str
    held: str
    holds: bool = False


WAIT_KINDS = {
    WAIT_LIMIT: WaitKind("usage limit (%s)", "Usage limit reached (%s)", "a usage limit to reset",
                         "it resets", STOP_LIMITED, "is limited (%s)"),
    WAIT_OUTAGE: WaitKind("provider unavailable", "Provider unavailable", "the provider to come back",
                          "", STOP_UNAVAILABLE, "is unavailable"),
    WAIT_RESERVE: WaitKind("reserve reached", "Reserve reached", "a window to reset (reserve)",
                           "it resets", STOP_HELD, "keeps its reserve (%s)", True),
    WAIT_PACE: WaitKind("ahead of pace", "Ahead of pace", "the pace to allow the next iteration",
                        "the pace allows more", STOP_HELD, "is ahead of pace (%s)", True)}


class Wait(Record):
    """A wait before the next attempt (SPEC 13, 15, 18), the one place one is worded: its
    kind, its name in the logs (a limit's window or kind: five_hour, rate limit; else the
    kind), the CLI's words or the hold's figures, until when, how long, and -- once
    bounded (bound_wait) -- the bound it would pass, when the run must stop instead."""

    kind: str
    name: str
    message: str
    until: float | None = None      # the reset, or when the hold lets go (epoch); None: not said
    seconds: float = 0.0
    beyond: str | None = None
    attempt: int = 1                # the provider's consecutive stops so far (an outage's retries)

    @property
    def row(self) -> WaitKind:
        return WAIT_KINDS[self.kind]

    def words(self) -> str:
        """The message as a wait says it: one line, no closing stop (a ";" follows); an
        outage's first sentence."""
        if self.kind == WAIT_OUTAGE:
            return _one_line(self.message.split(". ")[0], 100).rstrip(". ")
        return _one_line(self.message, REASON_CHARS).rstrip(". ")

    def doing(self) -> str:
        """The status line's words: `usage limit (five_hour)`, `reserve reached`."""
        return self.row.doing.replace("%s", self.name)

    def held(self) -> str:
        """What it says of an agent it holds (SPEC 23): `is limited (seven_day)`, `keeps its
        reserve (seven_day 81% used, 20% kept)`."""
        return self.row.held.replace("%s", self.message if self.row.holds else self.name)

    def announce(self, now: float) -> str:
        """`Usage limit reached (five_hour): <message>; waiting until 21:03 (2h14m).`"""
        head = "%s: %s; " % (self.row.said.replace("%s", self.name), self.words())
        if self.kind == WAIT_OUTAGE:
            return head + "retrying %s." % retry_words("in " + format_budget(round(self.seconds)),
                                                       self.attempt)
        unsaid = "%s, the provider did not say when it resets" % format_budget(round(self.seconds))
        return head + "waiting until %s (%s)." % (clock_words(now + self.seconds, now), format_duration(
            self.seconds) if self.until is not None else unsaid)

    def reason(self, now: float) -> str:
        """Why the run stopped instead (the closing line, session_end): `usage limit
        (five_hour): <message>; it resets at 21:03 (on_limit is stop)` -- a moment, never a
        time from now, which `status` read hours later would get wrong (it says its own)."""
        when, until = "", self.until
        if self.row.lets_go and until is None:
            when = "; the provider did not say when it resets"
        elif self.row.lets_go and until is not None:
            when = "; %s at %s" % (self.row.lets_go, clock_words(until, now))
        return "%s: %s%s (%s)" % (self.doing(), self.words(), when, self.beyond)


def provider_wait(trouble: ProviderTrouble) -> Wait:
    """The wait a limit or an outage asks for (SPEC 13, 15)."""
    if trouble.kind == CAUSE_OUTAGE:
        return Wait(WAIT_OUTAGE, WAIT_OUTAGE, trouble.message)
    return Wait(WAIT_LIMIT, trouble.limit, trouble.message, trouble.resets_at)


def bound_wait(wait: Wait, plan: RunPlan, attempt: int, waited: float, elapsed: float, now: float,
               seconds: float | None = None) -> Wait:
    """How long a wait lasts -- the `attempt`-th in a row, the first `waited` seconds ago,
    `elapsed` seconds into the run; `seconds` when a hold said it (SPEC 23) -- and the
    bound it would pass, when the run must stop instead: on_limit, limit_wait or
    outage_wait, max_time (SPEC 13, 15, 18)."""
    outage = wait.kind == WAIT_OUTAGE
    if seconds is None:
        seconds = limit_wait_seconds(wait.until, attempt, now, CAUSE_OUTAGE if outage else CAUSE_LIMIT)
    bound, budget = ("outage_wait", plan.outage_wait) if outage else ("limit_wait", plan.limit_wait)
    beyond = None
    if plan.max_time is not None and elapsed + seconds > plan.max_time:
        beyond = "beyond the time budget (%s)" % format_budget(plan.max_time)
    if waited + seconds > budget:
        beyond = "beyond %s (%s)" % (bound, format_budget(budget))
    if plan.on_limit == "stop" and not outage:
        beyond = "on_limit is stop"
    return wait.replace(seconds=seconds, beyond=beyond, attempt=attempt)


def window_hold(windows: Readings, plan: RunPlan, now: float) -> Wait | None:
    """What holds the run before an iteration (SPEC 18), and when it lets go: a window
    whose latest reading reached `1 - reserve`, until its reset; with `pace: even`, one
    that used more than `1 - reserve` of the part of it elapsed, until that part catches
    up (never past the reset). A reading whose reset passed, or was never said, holds
    nothing: it cannot be waited out."""
    for name, (used, resets, _, _) in sorted(windows.items()):
        if resets is None or resets <= now or used is None:
            continue
        kept, length = plan.reserve.get(name, 0), WINDOWS[name][1]
        if kept and used + kept >= 1 - 1e-9:  # (exactly at 1 - reserve holds: 1 - 0.18 is 0.8200000000000001)
            return Wait(WAIT_RESERVE, WAIT_RESERVE, "%s %d%% used, %d%% kept" % (
                name, round(used * 100), round(kept * 100)), resets)
        elapsed = min(max(1 - (resets - now) / length, 0), 1)
        if plan.pace == "even" and used > (1 - kept) * elapsed:
            catches_up = resets - length * (1 - used / (1 - kept))
            return Wait(WAIT_PACE, WAIT_PACE, "%s %d%% used at %d%% of the window%s" % (
                name, round(used * 100), elapsed * 100, ", %d%% kept" % round(kept * 100) if kept else ""),
                min(resets, catches_up))
    return None


def take_verdict(attempt: _Attempt, cli: AgentCLI | None) -> str:
    """The schema verdict is the iteration's signal (SPEC 21): success, failure or continue,
    its summary the commit's, its explanation and next step the next prompt's. Returns
    why there is none ("" when there is): the markers in the agent's words decide then."""
    report = attempt.report
    assert report and cli
    given, problem = report.answer, "none came"
    if given is None and cli.schema_file:  # (Codex: its final message is the object)
        problem = "its final message is not JSON"
        with _suppress(ValueError, RecursionError):
            given = json.loads(report.last_text)
    attempt.verdict, problem = given, problem if given is None else verdict_problem(given)
    verdict: Fields = given if isinstance(given, dict) else {}
    if report.error is not None and "error_max_structured_output_retries" in report.error[2]:
        attempt.explanation = _one_line(report.error[0], REASON_CHARS)  # (an `agent` failure)
        attempt.report = report.replace(signals=frozenset([SIGNAL_FAILURE]), error=None)
        return ""
    if not problem:
        signal = {"success": SIGNAL_SUCCESS, "failure": SIGNAL_FAILURE}.get(verdict["status"])
        attempt.report = report.replace(signals=frozenset([signal] if signal else []),
                                        last_text=verdict["summary"] or report.last_text)
        # (the agent's words: cleaned and bounded before they reach a terminal, a notify or a prompt)
        attempt.explanation = _flat(verdict["explanation"])
        attempt.next_step = _flat(verdict["next_step"]) or None
    return problem


def for_the_person(verdict: object, words: str, prompt: str) -> Tuple[str | None, List[str]]:
    """What an attempt leaves for the person (SPEC 24): what only they can do or decide,
    and what it decided on its own -- its verdict's `needs` and `assumptions`, else its
    words' lines that begin `NEEDS:` and `ASSUMED:` (not the prompt's own, echoed) --,
    each one line, cleaned and bounded."""
    given = _mapping(verdict)
    needs, assumed = given.get("needs"), _list(given.get("assumptions"))
    if not set(VERDICT_OPTIONAL) & set(given):
        own = set(prompt.splitlines())
        lines = [line.strip() for line in words.splitlines() if line not in own]
        asked = [line[len("NEEDS:"):] for line in lines if line.startswith("NEEDS:")]
        needs, assumed = asked[-1] if asked else None, [line[len("ASSUMED:"):] for line in lines
                                                        if line.startswith("ASSUMED:")]
    kept = [_one_line(said, REASON_CHARS) for said in assumed]
    return _one_line(needs, REASON_CHARS) or None, list(dict.fromkeys(filter(None, kept)))[:ASSUMPTIONS_MOST]


# ==== 12. Session files ===============================================
# A session's files (SPEC 8), named, written and read here alone: `.log` for people,
# `.jsonl` for programs and, with a structured format, `-agent.jsonl`, the agent's raw
# lines; opened with O_APPEND and written with one os.write per piece, so each event is
# on disk as it happens and a .jsonl line is whole or absent. A failed write is one
# warning, then logging stops and the loop goes on. The reader (`status`, `resume`)
# takes a session back from its events, skipping what does not parse.

RULE, THIN_RULE = "=" * 80, "-" * 80


def _namespace() -> Tuple[str | None, int | None]:
    """This boot's id and this process's pid namespace (Linux; None elsewhere)."""
    boot = pidns = None
    with _suppress(OSError):
        with open("/proc/sys/kernel/random/boot_id") as stream:
            boot = stream.read().strip()
        pidns = os.stat("/proc/self/ns/pid").st_ino
    return boot, pidns


class SessionFiles:
    """The names of one session's files (SPEC 8), the only place they are made or taken
    apart: `<base>.log` for people, `<base>.jsonl` for programs, `<base>-agent.jsonl` the
    agent's raw lines, `<base>-live.json` what it does now; the base is
    `session-<stamp>`, `-2`, `-3` ... for a second run in the same second."""

    BASE = r"session-(\d{8}-\d{6})(?:-\d+)?"
    GLOB = "session-[0-9]*"     # the git pathspec that keeps them out of commits
    SUFFIXES = (".log", ".jsonl", "-agent.jsonl", "-live.json")
    WINDOWS_FILE = "windows.json"  # beside them: the subscription windows' last readings (SPEC 18)

    def __init__(self, directory: str, base: str) -> None:
        self.directory, self.base = directory, base
        path = os.path.join(directory, base)
        self.log, self.jsonl, self.agent, self.live = (path + suffix for suffix in self.SUFFIXES)

    @classmethod
    def of(cls, path: str) -> SessionFiles | None:
        """The session a path names: one of its files, or its base; None if none."""
        directory, name = os.path.split(path)
        found = re.match(r"(%s)(%s)?$" % (cls.BASE, "|".join(map(re.escape, cls.SUFFIXES))), name)
        return cls(directory, found.group(1)) if found else None


def _replace_json(path: str, record: object) -> None:
    """A small file replaced whole, so that a reader never sees half of it (several runs
    may share it); 0600, as the .jsonl: a tool's command line may hold a token."""
    with _suppress(OSError):
        flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC
        with os.fdopen(os.open("%s.%d.tmp" % (path, os.getpid()), flags, 0o600), "w") as stream:
            json.dump(record, stream)
        os.replace("%s.%d.tmp" % (path, os.getpid()), path)


def _read_file(path: str) -> str | None:
    """A small text file's content, None when it cannot be read."""
    with _suppress(OSError):
        with open(path, "rb") as stream:
            return _decode(stream.read())
    return None


def _read_json(path: str) -> Fields:
    """A small JSON file rooda wrote (windows.json, a live file, vendor's manifest) as a
    mapping; {} when it is missing, unreadable or not one."""
    try:
        with open(path) as stream:
            return _mapping(json.load(stream))
    except (OSError, ValueError, RecursionError):
        return {}


def remembered_windows(directory: str | None, owner: str, now: float) -> Readings:
    """The readings of the windows that runs in this log directory remembered for the
    same CLI and kind of login (`owner`), those whose reset lies ahead: iteration 1 is
    judged before it spends (SPEC 18); another CLI's or login's windows are not this run's
    to keep (issue 36). None with --no-log: nothing is remembered then."""
    saved = _mapping(_read_json(os.path.join(directory, SessionFiles.WINDOWS_FILE)).get(owner)) \
        if directory else {}
    found = {name: window_reading(*reading) for name, reading in saved.items()
             if name in WINDOWS and isinstance(reading, list) and len(reading) == 4}
    return {name: reading for name, reading in found.items() if reading and (reading[1] or 0) > now}


def lock_session(path: str) -> int:
    """A session's .jsonl opened to append to and locked: one rooda at a time goes on with a
    session, and `resume` takes the lock before it reads what the session did (issue 36: a
    second `resume` read it as resumable while the first completed it)."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | getattr(os, "O_CLOEXEC", 0))
    with _suppress(ImportError):  # (no fcntl on Windows)
        import fcntl
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            raise RoodaError("%s is in use by another rooda (a run, or another resume of it); one goes"
                             " on with a session at a time" % os.path.basename(path)) from None
    return fd


class SessionLog:
    """The session files of one run; every method writes at once."""

    warn: Say | None = None                    # set by the loop: one warning
    problem: str | None = None                 # why logging stopped
    live: Fields | None = None                 # what the live file holds

    def __init__(self, directory: str, shown_directory: str, agent_stream: bool = False,
                 resume: str | None = None, locked: int | None = None) -> None:
        """New files, named by the time; or, with `resume` (a session's base name), that
        session's own files, appended to (`locked`: its .jsonl, as lock_session opened it)."""
        try:
            os.makedirs(directory, exist_ok=True)
        except OSError as exc:
            raise RoodaError("cannot create the log directory %s: %s; choose another with"
                             " --log-dir, or run with --no-log" % (shown_directory, exc.strerror)) from None
        stamp = resume or time.strftime("session-%Y%m%d-%H%M%S")
        flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND | getattr(os, "O_CLOEXEC", 0) | \
            (0 if resume else os.O_EXCL)
        for attempt in range(1, 1000):
            base = stamp if attempt == 1 else "%s-%d" % (stamp, attempt)
            names = [base + suffix for suffix in SessionFiles.SUFFIXES[:3 if agent_stream else 2]]
            opened = []
            try:
                for name in names:
                    opened.append(locked if locked is not None and name == names[1] else
                                  os.open(os.path.join(directory, name), flags, 0o600))
            except FileExistsError:
                for fd, name in zip(opened, names):
                    os.close(fd)
                    os.unlink(os.path.join(directory, name))
                continue
            except OSError as exc:
                raise RoodaError("cannot write session logs in %s: %s; choose another directory"
                                 " with --log-dir, or run with --no-log"
                                 % (shown_directory, exc.strerror)) from None
            self.log_fd, self.jsonl_fd = opened[0], opened[1]
            try:  # one rooda at a time writes a session: a second `resume` of it is refused
                import fcntl
                fcntl.flock(self.jsonl_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except ImportError:
                pass  # (no fcntl on Windows)
            except OSError:
                for fd in opened:
                    os.close(fd)
                raise RoodaError("%s is in use by another rooda (a run, or another resume of it); one"
                                 " goes on with a session at a time" % names[1]) from None
            self.jsonl_size = os.fstat(self.jsonl_fd).st_size
            self.agent_fd: int | None = opened[2] if agent_stream else None
            self.files = SessionFiles(directory, base)
            self.path = self.files.log
            self.shown = os.path.join(shown_directory, names[0])
            return
        raise RoodaError("cannot find a free session log name in %s" % shown_directory)

    def _failed(self, exc: OSError) -> None:
        self.problem = exc.strerror or str(exc)
        if self.warn is not None:
            self.warn("cannot write the session log (%s); logging stops here, the loop goes on"
                      % self.problem)

    def _write_all(self, fd: int | None, data: bytes) -> None:
        if self.problem is not None or fd is None:
            return
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
        except OSError as exc:
            self._failed(exc)

    def write(self, data: bytes) -> None:
        """Output for the .log (the agent's as it comes, rendered for people)."""
        self._write_all(self.log_fd, data)

    def write_agent_stream(self, data: bytes) -> None:
        """The agent's raw structured lines, as they came."""
        self._write_all(self.agent_fd, data)

    def write_live(self, record: Fields) -> None:
        """What the run is doing now, beside its .jsonl (not in it: the .jsonl stays the
        events of SPEC 8), replaced whole so that a reader never sees half of it; only
        when it changed (the ticker calls this once a second)."""
        if self.problem is None and record != self.live:
            self.live = record
            _replace_json(self.files.live, record)  # (best effort: `status` then shows the events alone)

    def remember_windows(self, windows: Readings, owner: str) -> None:
        """The windows' last readings, for the next run in this log directory of the same
        CLI and login (SPEC 18); other owners' readings are kept as they were."""
        if self.problem is None:
            path = os.path.join(self.files.directory, SessionFiles.WINDOWS_FILE)
            saved = _read_json(path)
            saved[owner] = windows
            _replace_json(path, saved)

    def text(self, text: str) -> None:
        self.write(text.encode("utf-8", "replace"))

    def event(self, name: str, **fields: object) -> None:
        """One .jsonl line, whole or not at all: a short write (a full disk) is cut back."""
        if self.problem is not None:
            return
        record: Dict[str, object] = {"event": name, "time": iso_time()}
        record.update(fields)
        line = (json.dumps(record, ensure_ascii=False, default=str) + "\n").encode("utf-8", "replace")
        try:
            written = os.write(self.jsonl_fd, line)
            if written != len(line):
                os.ftruncate(self.jsonl_fd, self.jsonl_size)
                raise OSError(28, "No space left on device (a line was cut short)")
            self.jsonl_size += written
        except OSError as exc:
            self._failed(exc)

    # -- the shapes: the .log for people (the Go rooda's), SPEC 8's events for programs --

    def session_start(self, plan: "RunPlan", agent: "AgentCommand", started_wall: float,
                      resumed: Fields | None = None) -> None:
        """The session's header and its session_start event -- or, resumed, its
        session_resume event with what the session carries over (SPEC 16)."""
        cap = plan.max_iterations
        self.text("%s\nROODA SESSION%s\n%s\nVersion: %s\nProcedure: %s\nAgent: %s\nOutput Format: %s\n"
                  "Max Iterations: %s\nFailure Threshold: %d\nWorking Directory: %s\nStart Time: %s\n%s\n\n"
                  % (RULE, " RESUMED" if resumed else "", RULE, __version__, plan.procedure, agent.display(),
                     agent.format, "unlimited" if cap is None else cap, plan.failure_threshold, plan.cwd,
                     local_time(started_wall), RULE))
        boot, pidns = _namespace()  # (a pid means this process only in this boot and namespace)
        if resumed:
            self.event("session_resume", pid=os.getpid(), boot=boot, pidns=pidns, argv=plan.argv,
                       iterations=resumed["iterations"], seconds=round(resumed["seconds"], 3),
                       usage=resumed["usage"] or None, **resumed.get("answer") or {})  # (SPEC 24)
        else:  # (a prompt read from stdin is kept for `resume`: stdin will not hold it again)
            self.event("session_start", version=__version__, procedure=plan.procedure, agent=list(agent.argv),
                       agents=[agent.name] + [each.name for each in plan.fallbacks],  # (SPEC 23: the order)
                       max_iterations=cap, failure_threshold=plan.failure_threshold, cwd=plan.cwd,
                       pid=os.getpid(), boot=boot, pidns=pidns, log=self.path, argv=plan.argv,
                       **({"reserve": plan.reserve} if plan.reserve else {}),
                       **({"prompt": plan.prompt_text} if plan.prompt_text is not None else {}))

    def iteration_start(self, number: int, procedure: str, prompt: str, fragments: List[str],
                        agent: str) -> None:
        import hashlib
        data = prompt.encode("utf-8")
        self.text("%s\nITERATION %d\n%s\nProcedure: %s\nAgent: %s\nStart Time: %s\n%s\n" % (
            RULE, number, RULE, procedure, agent, local_time(), THIN_RULE))
        self.event("iteration_start", iteration=number, agent=agent, prompt_bytes=len(data),
                   prompt_sha256=hashlib.sha256(data).hexdigest(), fragments=fragments)

    def wait(self, wait: Wait) -> None:
        """A wait's `limit` event (wait_seconds: 0 when the run stops instead; a hold's
        message: what holds, and its figures)."""
        held = "%s: %s" % (wait.doing(), wait.message)
        self.event("limit", wait=wait.kind, kind=wait.name, message=held if wait.row.holds else wait.message,
                   resets_at=iso_time(wait.until) if wait.until else None,
                   wait_seconds=0 if wait.beyond else round(wait.seconds, 1))

    def iteration_end(self, **fields: Any) -> None:
        """The iteration's footer and its iteration_end event, from the event's fields."""
        reason = fields["reason"]
        self.text("\n%s\nITERATION %d COMPLETE\nEnd Time: %s\nDuration: %s\n%sExit Code: %d\n"
                  "Outcome: %s\n%s%s\n\n" % (
                      THIN_RULE, fields["iteration"], local_time(), format_duration(fields["seconds"]),
                      _usage_log_lines(fields["usage"] or {}), fields["exit_code"], fields["outcome"],
                      "Cause: %s\nReason: %s\n" % (fields["cause"], reason) if reason else "", RULE))
        self.event("iteration_end", **fields)

    def gate_start(self, gate: str, command: str) -> None:
        self.text("--- %s: %s ---\n" % (gate, command))

    def gate_end(self, gate: str, command: str, exit_code: int, seconds: float, **more: object) -> None:
        """`more`: a verify's telling `line` and test counts, `baseline: true` for its run
        before iteration 1 (SPEC 20), `again: true` for keep: better's second run."""
        self.text("--- %s exited %d after %s ---\n" % (gate, exit_code, format_duration(seconds)))
        self.event("gate", gate=gate, command=command, exit_code=exit_code, seconds=round(seconds, 3), **more)

    def session_end(self, state: "LoopState", summary: str) -> None:
        cost = state.usage.get("cost_usd")
        self.text("%s\nSESSION SUMMARY\n%s\nTotal Iterations: %d\nSuccessful: %d\nFailed: %d\n"
                  "Total Duration: %s\n%sExit Reason: %s\nExit Code: %d\n%s\n" % (
                      RULE, RULE, state.finished, state.finished - state.failures, state.failures,
                      format_duration(state.elapsed()), "Total Cost: $%.4f\n" % cost if cost is not None
                      else "", summary, state.exit_code(), RULE))
        self.event("session_end", status=state.status, resumable=STOPS[state.stop].resumable if state.stop
                   else False, reason=state.reason, iterations=state.finished,
                   succeeded=state.finished - state.failures, failed=state.failures,
                   seconds=round(state.elapsed(), 3), exit_code=state.exit_code(),
                   usage=usage_record(state.usage) if state.usage else None)
        with _suppress(OSError):
            os.unlink(self.files.live)  # ended: session_end says the rest

    def close(self) -> None:
        for fd in (self.log_fd, self.jsonl_fd, self.agent_fd):
            if fd is not None:
                with _suppress(OSError):
                    os.close(fd)

    def where(self) -> str:
        """The closing `Log:` line's words: the path, and what went wrong with it."""
        if self.problem is not None:
            return "%s (incomplete: %s)" % (self.shown, self.problem)
        if not os.path.exists(self.path):
            return "%s (removed during the run)" % self.shown
        return self.shown


def note_windows(windows: Readings, readings: Sequence[tuple], log: SessionLog | None,
                 owner: str, agent: str) -> None:
    """Readings of the subscription windows, (name, reading, when) in order (SPEC 18), into
    the last ones of an agent's (SPEC 23: each its own): one that moved (its whole percent,
    reset, status or threshold) is a `window` event at the moment it came; the last are
    remembered for the next run here."""
    moved = False
    for name, (used, resets, status, threshold), seen in readings:
        old = windows.get(name)
        if old is None or (round(old[0] * 100),) + old[1:] != (round(used * 100), resets, status, threshold):
            moved, windows[name] = True, (used, resets, status, threshold)
            if log is not None:
                log.event("window", time=iso_time(seen), agent=agent, window=name, utilization=used,
                          status=status, threshold=threshold, resets_at=iso_time(resets) if resets else None)
    if log is not None and moved:
        log.remember_windows(windows, owner)


# What `status` says of a session: its rooda runs, is stopped (Ctrl+Z), ended (it wrote
# session_end), or died (its pid is gone or a zombie, and no session_end: SIGKILL, a
# crash, a power cut).
RUN_RUNNING, RUN_STOPPED, RUN_ENDED, RUN_DIED = "running", "stopped", "ended", "died"
# Of a session, `status --all` reads the first line and what its last bytes hold.
STATUS_TAIL_BYTES = 65536


def _process_state(pid: object, started: float | None, where: Tuple[object, object] = (None, None)
                   ) -> str | None:
    """The state letter of the rooda that wrote a session (R, S, T for stopped, Z for a
    zombie), "?" where it cannot be read, or None when that process is gone. A process
    with that pid is not it when it started after the session's latest start, or more
    than a minute before it, or in another boot or pid namespace (`where`, as recorded):
    a container's PID 1 seen from the host, a reused pid (SPEC 14 rev 4)."""
    if not isinstance(pid, int) or isinstance(pid, bool) or pid <= 0:
        return None
    if any(mine and theirs and mine != theirs for mine, theirs in zip(_namespace(), where)):
        return None
    try:
        os.kill(pid, 0)
    except PermissionError:
        pass  # alive, and another user's
    except (OverflowError, OSError):
        return None
    try:
        with open("/proc/%d/stat" % pid, "rb") as stream:
            fields = stream.read().rsplit(b")", 1)[1].split()
        with open("/proc/stat", "rb") as stream:
            boot = int(next(line for line in stream if line.startswith(b"btime")).split()[1])
    except (OSError, ValueError, IndexError, StopIteration):
        return "?"  # no /proc (macOS): alive is all that is known
    began = boot + int(fields[19]) / os.sysconf("SC_CLK_TCK")
    if started is not None and not started - 60 <= began <= started + 2:
        return None
    return fields[0].decode()


def _read_session(path: str, whole: bool) -> Tuple[List[bytes], bool]:
    """A session's lines -- all of them, or its first line and what its last
    STATUS_TAIL_BYTES hold -- and whether that is the whole file."""
    with open(path, "rb") as stream:
        first = stream.readline()
        start = stream.tell()
        size = os.fstat(stream.fileno()).st_size
        if not whole and size - start > STATUS_TAIL_BYTES:
            stream.seek(size - STATUS_TAIL_BYTES)
            tail = stream.read().rstrip(b"\n").split(b"\n")[1:]  # (the first is cut)
            # An ended session says in its session_end all that `status --all` shows.
            ended = False
            with _suppress(ValueError, RecursionError):  # (whatever the JSON spacing)
                ended = bool(tail) and _mapping(json.loads(tail[-1])).get("event") == "session_end"
            return [first] + (tail[-1:] if ended else tail), False
        return [first] + stream.read().split(b"\n"), True


def _last_seen(files: SessionFiles, last_event: float) -> float:
    """When a session that died last showed life: its last event, or the last write to its
    .log (the agent's output) or live activity file, whichever came later."""
    seen = [last_event]
    for path in (files.log, files.live):
        with _suppress(OSError):
            seen.append(os.stat(path).st_mtime)
    return max(seen)


def _live_activity(files: SessionFiles, now: float) -> Fields:
    """What a running session's agent is doing now, from its live activity file."""
    live = _read_json(files.live)
    doing = _list(live.get("activity"))
    found: Fields = {}
    if len(doing) == 3 and _number(doing[2]) is not None:
        found["activity"] = activity_words(str(doing[0]), str(doing[1]), now - doing[2])
    elif _number(live.get("output_bytes")) is not None:
        found["activity"] = "%s output" % format_bytes(live["output_bytes"])
    for key in ("tool_calls", "tokens"):
        if _number(live.get(key)) is not None:
            found[key] = int(live[key])
    if live.get("last_tool") and not str(found.get("activity", "")).startswith("→"):
        found["activity"] = "%s (last: → %s)" % (found.get("activity") or "", live["last_tool"])
    return found


def resume_command(files: SessionFiles, cwd: str) -> str:
    """`resume` as it works when copied (SPEC 19 rev 5): in the directory the session ran
    in, with this rooda, and its log directory unless that is the default."""
    import shlex
    own = ""
    if os.path.realpath(files.directory) != os.path.realpath(os.path.join(ROODA_DIR, "logs")):
        own = " --log-dir " + shlex.quote(files.directory)
    return "cd %s && python3 %s resume %s%s" % (shlex.quote(cwd), shlex.quote(_display_path(
        os.path.join(ROODA_DIR, "rooda.py"), cwd)), files.base, own)


# What `status --json` says of a session (the README lists them): SessionReader's summary.
SUMMARY_FIELDS = (
    "session procedure state status exit_code reason pid started iteration max_iterations iterations"
    " successes failures limited unavailable elapsed_seconds usage last_event last_event_time waiting_until"
    " waiting_for waiting activity tool_calls tokens consecutive_failures argv cwd skipped_lines baseline"
    " last_verify resumable last_failure windows resets_at kept kept_verify set_aside restored agent"
    " held needs").split()


class SessionReader:
    """A session's .jsonl read back (SPEC 8, 14, 19): the one reader `status`, `report` and
    `resume` share. Each event that parses goes to its `on_<event>` method, its time parsed
    once; a line that does not parse, or has not the shape rooda writes, is skipped and
    counted, never a traceback. With `whole` false only the first line and the file's tail
    are read (`status --all`: what is not there is unknown). With `detail` (`report`,
    `resume`) it keeps what `status` needs not: each attempt, wait, window reading and
    commit, the prompt read from stdin, and what the next attempt is told of."""

    begun = last_at = ended = prompt = ran = None  # (ran: the agent of the last attempt begun)
    answered = False  # (a resume brought the person's answer, not yet told to an attempt)
    previous: Told | Baseline | None = None  # what the next attempt is told of (resume)
    carried = 0.0
    where: Tuple[object, object] = (None, None)  # the boot and pid namespace of its latest run

    def __init__(self, path: str, now: float, whole: bool = True, detail: bool = False) -> None:
        self.path, self.now, self.whole, self.detail = path, now, whole, detail
        self.files = SessionFiles.of(path) or SessionFiles(*os.path.split(path))
        self.summary: Fields = dict.fromkeys(SUMMARY_FIELDS)
        self.summary.update(session=path, iterations=0, successes=0, failures=0, limited=0, unavailable=0,
                            consecutive_failures=0 if whole else None, skipped_lines=0,
                            set_aside=[], restored=0)  # (SPEC 22: refs of the attempts set aside)
        self.usage: Fields = {}
        self.windows: Dict[object, Readings] = {}  # each agent's (SPEC 23; None: a log before rev 6)
        self.held: Dict[object, Fields] = {}  # what holds an agent (SPEC 23), by its name
        # The person's part (SPEC 24): the open question, an account's stop, what was refused, assumed.
        self.needs: Tuple[str, object] | None = None
        self.account: str | None = None
        self.denied: Dict[tuple, Fields] = {}
        self.assumed: Dict[str, Fields] = {}
        self.events: List[Fields] = []   # (detail) the events, each with `at`, its epoch
        self.attempts: List[Fields] = []
        self.waits: List[Fields] = []
        self.readings: List[tuple] = []
        self.commits: Dict[object, Fields] = {}  # by iteration: a commit comes before its iteration's end
        self.reserve: Fields = {}
        self.open_wait: float | None = None      # the last wait's bound, while no event has come since

    def read(self) -> Fields:
        """The summary (status --json's fields), once every line is read."""
        lines, self.read_whole = _read_session(self.path, self.whole)
        summary = self.summary
        for raw in lines:
            if not raw.strip():
                continue
            try:
                event = json.loads(raw, parse_float=_finite, parse_constant=_finite,
                                   parse_int=lambda text: _finite(text, int))
                name, at = event["event"], parse_iso_time(event["time"])
                if not isinstance(name, str) or at is None:
                    raise ValueError(name)
                self.take(name, event, at)
            except (ValueError, KeyError, TypeError, RecursionError, OverflowError, AttributeError):
                summary["skipped_lines"] += 1
        self.finish()
        return summary

    def take(self, name: str, event: Fields, at: float) -> None:
        summary, wait = self.summary, _number(event.get("wait_seconds"))
        self.close_wait(at)
        summary["waiting_until"] = summary["waiting_for"] = summary["waiting"] = None
        if name == "limit" and wait:  # (its kind of wait in a field of its own since rev 6: before, a limit)
            summary["waiting_until"], summary["waiting_for"] = iso_time(at + wait), event.get("kind")
            summary["waiting"] = event["wait"] if event.get("wait") in WAIT_KINDS else WAIT_LIMIT
        handler = getattr(self, "on_" + name, None)
        if handler:
            handler(event, at)
        summary["last_event"], summary["last_event_time"], self.last_at = name, event["time"], at
        if self.detail:
            self.events.append(dict(event, at=at))

    def on_session_start(self, event: Fields, at: float) -> None:
        self.summary.update(procedure=str(event.get("procedure")), started=event["time"],
                            max_iterations=_typed(event.get("max_iterations"), int),
                            argv=_typed(event.get("argv"), list), cwd=_typed(event.get("cwd"), str))
        self.reserve = _mapping(event.get("reserve"))
        self.prompt = _typed(event.get("prompt"), str)
        order = [clean(name) for name in _list(event.get("agents")) if isinstance(name, str)]  # (SPEC 23)
        self.summary["agent"] = order[0] if order else None
        self.on_session_resume(event, at)

    def on_session_resume(self, event: Fields, at: float) -> None:
        self.ended, self.where = None, (event.get("boot"), event.get("pidns"))
        self.answered = bool(event.get("answer"))  # (SPEC 24: once an attempt is told, it is answered)
        self.summary["pid"] = _typed(event.get("pid"), int)
        self.begun, self.carried = at, _number(event.get("seconds")) or 0.0  # (what a resume carries)

    def on_iteration_start(self, event: Fields, at: float) -> None:
        self.summary["iteration"] = _typed(event.get("iteration"), int) or self.summary["iteration"]
        agent = _typed(event.get("agent"), str)
        self.summary["agent"] = self.ran = agent and clean(agent)
        self.held.pop(self.ran, None)  # (it runs: nothing holds it)
        if self.answered:  # (what waited on the person is theirs no more)
            self.needs, self.denied, self.answered = None, {}, False

    def on_switch(self, event: Fields, at: float) -> None:
        """Another agent took over (SPEC 23), or none could: what holds the one before."""
        named = [clean(name) if isinstance(name, str) else None
                 for name in (event.get("from"), event.get("to"))]
        if named[0] and not event.get("back"):
            self.held[named[0]] = {"agent": named[0], "why": _one_line(event.get("why"), REASON_CHARS),
                                   "until": parse_iso_time(event.get("until")) and event["until"],
                                   "wait": _typed(event.get("wait"), str),
                                   "kind": _typed(event.get("kind"), str)}
        self.summary["agent"] = named[1] or named[0]
        self.held.pop(named[1], None)

    def on_iteration_end(self, event: Fields, at: float) -> None:
        summary, outcome, number = self.summary, event.get("outcome"), event.get("iteration")
        if outcome in (LIMITED, UNAVAILABLE):
            summary[outcome] += 1
        elif outcome in (SUCCESS, COMPLETED):
            summary["successes"] += 1
        elif outcome in FAILING_OUTCOMES and event.get("cause") not in STOPPING_CAUSES:  # (no failure)
            summary["failures"] += 1
            summary["last_failure"] = _typed(event.get("reason"), str)
        counted = outcome not in (LIMITED, UNAVAILABLE, OUTCOME_INTERRUPTED)
        if counted:  # (the tail: its number)
            summary["iterations"] = number if isinstance(number, int) and not self.read_whole else \
                summary["iterations"] + 1
            summary["consecutive_failures"] = _typed(event.get("consecutive_failures"), int) or 0
        add_usage(self.usage, _mapping(event.get("usage")))
        summary["restored"] += bool(event.get("restored"))
        if isinstance(event.get("set_aside"), str):  # (the tree is the best state's again)
            summary["set_aside"].append(clean(event["set_aside"]))
            summary["last_verify"] = summary["kept_verify"] or summary["baseline"]
        if isinstance(event.get("kept"), str):  # (the best state, and what verify said of it)
            summary["kept"], summary["kept_verify"] = event["kept"], summary["last_verify"]
        if self.detail and isinstance(number, int):
            self.attempt(event, number, at)
        self.for_the_person(event, number, outcome)
        if counted and isinstance(number, int) and event.get("cause") not in STOPPING_CAUSES:
            # (what the next attempt is told of: the last counted; the account's stop was no attempt's)
            source, text = map(str, _list(event.get("feedback")) or ("the agent's", ""))
            self.previous = Told(number, str(outcome), _typed(event.get("exit_code"), int) or 0,
                                 _typed(event.get("cause"), str), str(event.get("reason") or ""),
                                 feedback=text.encode("utf-8"), source=source,
                                 next_step=_typed(_mapping(event.get("verdict")).get("next_step"), str))

    def attempt(self, event: Fields, number: int, at: float) -> None:
        """(detail) An attempt as `report` tells it, with its commit (rooda's, else HEAD's move)."""
        usage, seconds = _mapping(event.get("usage")), _number(event.get("seconds")) or 0.0
        seconds = max(min(seconds, at - (self.begun or at)), 0.0)  # (1e308 is no length: issue 43, 16)
        before, head = (clean(str(event.get(key)))[:12] for key in ("head_before", "head_after"))
        if number not in self.commits and event.get("head_before") and event.get("head_after") and \
                before != head:
            self.commits[number] = {"hash": head, "subject": "the agent's (HEAD %s → %s)" % (
                before[:7], head[:7])}
        self.attempts.append({"iteration": number, "at": at - seconds, "seconds": seconds,
                              "outcome": clean(str(event.get("outcome"))),
                              "cause": _typed(event.get("cause"), str),
                              "reason": _one_line(event.get("reason"), 1000) or None,
                              "commit": self.commits.get(number), "cost_usd": _number(usage.get("cost_usd")),
                              "set_aside": _typed(event.get("set_aside"), str),
                              "said": _one_line(event.get("said"), REASON_CHARS) or None,
                              "agent": self.summary["agent"],  # (SPEC 23: whose attempt it was)
                              "error_kind": _one_line(event.get("error_kind"), 60) or None})

    def for_the_person(self, event: Fields, number: object, outcome: object) -> None:
        """What an attempt left for the person (SPEC 24): a question open until a SUCCESS or an answer."""
        needs = _one_line(event.get("needs"), REASON_CHARS)
        if needs or outcome == COMPLETED:
            self.needs = (needs, number) if needs else None
        if event.get("cause") in STOPPING_CAUSES:
            self.account = _one_line(event.get("reason"), 1000)
        for refused in map(_mapping, _list(event.get("denied"))):  # (each once)
            words = (_one_line(refused.get("tool"), 60), _one_line(refused.get("input"), REASON_CHARS))
            self.denied.setdefault(words, {"tool": words[0], "input": words[1], "iteration": number})
        for said in filter(None, [_one_line(said, REASON_CHARS) for said in _list(event.get("assumptions"))]):
            self.assumed.setdefault(said, {"assumption": said, "iteration": number})

    def on_gate(self, event: Fields, at: float) -> None:
        said = Verified.read(event) if event.get("gate") == GATE_VERIFY else None
        if said:
            self.summary["baseline" if event.get("baseline") else "last_verify"] = said
        if said and event.get("baseline") and said.exit_code:  # (what iteration 1 is told of)
            self.previous = Baseline(str(event.get("command")), said.exit_code, said.line)

    def on_commit(self, event: Fields, at: float) -> None:
        self.commits[event.get("iteration")] = {"hash": clean(str(event.get("hash")))[:12],
                                                "subject": _one_line(event.get("message"))}

    def on_limit(self, event: Fields, at: float) -> None:
        """A wait, or the stop instead: when the last limit resets; (detail) how long it lasted."""
        self.summary["resets_at"] = parse_iso_time(event.get("resets_at")) and event["resets_at"]
        wait = _number(event.get("wait_seconds"))
        if self.detail and wait:
            self.waits.append({"kind": self.summary["waiting"], "at": at, "seconds": 0.0})
            self.open_wait = wait

    def close_wait(self, at: float) -> None:
        """(detail) A wait lasted as long as it said, or until the next event (Ctrl+C)."""
        if self.open_wait is not None:
            self.waits[-1]["seconds"] = round(max(min(self.open_wait, at - self.waits[-1]["at"]), 0), 3)
            self.open_wait = None

    def on_window(self, event: Fields, at: float) -> None:
        reading = window_reading(event.get("utilization"), parse_iso_time(event.get("resets_at")),
                                 event.get("status"), event.get("threshold"))
        agent = _typed(event.get("agent"), str)
        if reading and event.get("window") in WINDOWS:
            self.windows.setdefault(agent and clean(agent), {})[event["window"]] = reading
            self.readings.append((at, event["window"], min(reading[0], 1), reading[1],
                                  agent and clean(agent)))

    def on_session_end(self, event: Fields, at: float) -> None:
        self.ended = event

    def finish(self) -> None:
        """What the events left to say: how it ended (or that it runs, or died), its usage."""
        summary, ended, usage = self.summary, self.ended, self.usage
        self.close_wait(self.now)
        if not self.read_whole:  # only what the tail holds: the counts from session_end, else unknown
            summary.update(successes=None, failures=None, limited=None, unavailable=None)
            usage = {}
        if ended is not None:
            summary.update(state=RUN_ENDED, status=_typed(ended.get("status"), str) or "?",
                           exit_code=_typed(ended.get("exit_code"), int),
                           reason=_typed(ended.get("reason"), str),
                           resumable=_typed(ended.get("resumable"), bool),
                           elapsed_seconds=_number(ended.get("seconds")))
            for key, field in (("iterations", "iterations"), ("successes", "succeeded"),
                               ("failures", "failed")):
                if isinstance(ended.get(field), int):
                    summary[key] = ended[field]
            usage = _mapping(ended.get("usage")) or usage
        else:
            process = _process_state(summary["pid"], self.begun, self.where)
            alive = process not in (None, "Z", "X")
            summary["state"] = RUN_RUNNING if alive else RUN_DIED
            if process in ("T", "t"):
                summary["state"] = RUN_STOPPED
            if self.begun is not None:  # a run that died lasted until its last sign of life
                lasted_until = self.now if alive else _last_seen(self.files, self.last_at or self.begun)
                summary["elapsed_seconds"] = round(self.carried + lasted_until - self.begun, 3)
            if alive:
                summary.update(_live_activity(self.files, self.now))
            elif summary["state"] == RUN_DIED:  # (what is known of its death; not a failure before it)
                summary.update(resumable=True, reason="killed or crashed: no session_end; the last event %s"
                               " at %s" % (summary["last_event"], summary["last_event_time"]))
        summary["usage"] = usage_record(usage) if usage else None
        # (the agent's now: SPEC 23, each its own; a log before it has them under None)
        windows = self.windows.get(summary["agent"]) or self.windows.get(None) or {}
        summary["windows"] = {name: {"utilization": used, "resets_at": iso_time(resets) if resets else None,
                                     "status": status, "threshold": threshold}
                              for name, (used, resets, status, threshold) in windows.items()}
        summary["needs"] = self.needs[0] if self.needs else None
        summary["held"] = [hold for hold in self.held.values()
                           if hold["until"] is None or (parse_iso_time(hold["until"]) or 0) > self.now]


def summarize_session(path: str, now: float | None = None, whole: bool = True) -> Fields:
    """One session's state from its .jsonl (and live activity file), as `status` shows it:
    running, stopped, ended or died, how far, why it ended, what it cost."""
    return SessionReader(path, time.time() if now is None else now, whole).read()


def verify_course(summary: Mapping[str, Any]) -> str:
    """What verify said before iteration 1 and at the last iteration (SPEC 20): `failing
    (3 failed of 13 run) before → passing (13 run) after`; "" when it never ran."""
    last = " after" if summary["baseline"] else " at the last iteration"
    return " → ".join(summary[key].words() + words for key, words in (
        ("baseline", " before"), ("last_verify", last)) if summary[key])


def as_json(value: object) -> str:
    """A summary or a report as one JSON line: its verify results as status --json shows them."""
    return json.dumps(value, ensure_ascii=False, default=Verified.as_json)


def _first_event(path: str) -> Fields:
    """A session's first event (its session_start), {} when it cannot be read."""
    try:
        with open(path, "rb") as stream:
            return _mapping(json.loads(stream.readline()))
    except (OSError, ValueError, RecursionError):
        return {}


def session_started(path: str) -> float:
    """When a session began: the time of its first line (0 when it cannot be read)."""
    return parse_iso_time(_first_event(path).get("time")) or 0.0


def find_sessions(directory: str, shown: str, named: str | None = None) -> List[str]:
    """The .jsonl of the session named -- a path to one of its files, a file name, or its
    stamp (`20261124-120000`, a `-2` suffix included) -- or else every session of
    `directory`, newest first by start time (whatever time zone wrote their names). Only
    regular files count (a FIFO named like one would hang the reader)."""
    if named is not None:  # ("" names no session: it is not "every session")
        for candidate in (named, os.path.join(directory, named), os.path.join(directory, "session-" + named)):
            files = SessionFiles.of(candidate)
            if files and os.path.isfile(files.jsonl):
                return [os.path.abspath(files.jsonl)]  # (resume hands its directory on)
        raise RoodaError("no such session: %s (in %s)" % (named, shown))
    if not os.path.isdir(directory):
        raise RoodaError("no log directory at %s (no run has written logs there; --log-dir DIR names"
                         " another)" % shown)
    try:
        sessions = [os.path.join(directory, name) for name in os.listdir(directory)]
    except OSError as exc:
        raise RoodaError("cannot read the log directory %s: %s" % (shown, exc.strerror)) from None
    sessions = sorted((path for path in sessions if path.endswith(".jsonl") and os.path.isfile(path)
                       and getattr(SessionFiles.of(path), "jsonl", None) == path),
                      key=lambda path: (session_started(path), path), reverse=True)
    if not sessions:
        raise RoodaError("no session logs in %s" % shown)
    return sessions


# ==== 13. Gates and git ===============================================
# The opt-in gates of the Ralph variants (SPEC 6): verify (a quality gate after each
# iteration), done_when (a queue check before each), requires (paths), stuck detection
# (same error, no change) and git (commit, push). Gate and git commands run like the
# agent -- own session, bounded by gate_timeout, killed on interruption -- so a slow hook
# never outlives rooda. They are trusted like a Makefile: they come from the user's
# config. HEAD, read before and after every iteration, comes from the repository's own
# files: starting git twice per iteration was most of rooda's overhead in a repository.

# Default commit message: {procedure}, {iteration} (1-based) and {summary} (the first line
# of the agent's final message) are replaced.
DEFAULT_COMMIT_MESSAGE = "{procedure} {iteration}: {summary}"
# What to do when git has no identity to commit with (every commit would fail).
GIT_IDENTITY_HINT = "set it with: git config user.name 'Your Name' and git config user.email you@example.com"


class Gates(Record):
    """What a run's gates need beyond the flat settings (verify, done_when, gate_timeout
    are read as plan.<key>): the procedure's `requires`, and the `stuck` and `git`
    mappings read once, with their defaults."""

    requires: List[str]
    requires_hint: str              # `; <the procedure's hint>`, to follow what is missing (or "")
    same_error: int | None = None
    no_change: int | None = None
    commit: bool = False
    push: bool = False
    message: str = DEFAULT_COMMIT_MESSAGE

    def need_git(self) -> bool:
        return bool(self.commit or self.push or self.no_change)


def error_fingerprint(output: bytes) -> str:
    """What makes two failures 'the same error': the last 2 KB of output with numbers,
    hex ids, timestamps and temporary paths masked, blanks collapsed."""
    import hashlib
    import tempfile
    text = _decode(output[-4 * FEEDBACK_TAIL_BYTES:])  # masks shorten it
    roots = sorted({tempfile.gettempdir(), "/tmp", "/var/folders", "/private/var/folders"}, key=len,
                   reverse=True)
    masks = [(r"\d{4}-\d\d-\d\d[T ]\d\d:\d\d(:\d\d)?(\.\d+)?(Z|[+-]\d\d:?\d\d)?", "<time>"),
             (r"\b\d\d?:\d\d(:\d\d)?(\.\d+)?\b", "<time>")] + [
        (re.escape(root) + r"[/\\][^\s'\":,)]*", "<tmp>") for root in roots] + [
        (r"\b0x[0-9a-fA-F]+\b", "<hex>"),
        (r"\b(?=[0-9a-f]*\d)(?=[0-9a-f]*[a-f])[0-9a-f]{7,64}\b", "<hex>"),
        (r"\d+(\.\d+)?", "<n>"), (r"\s+", " ")]
    for pattern, mask in masks:
        text = re.sub(pattern, mask, text)
    return hashlib.sha256(text.strip()[-FEEDBACK_TAIL_BYTES:].encode("utf-8")).hexdigest()


def error_excerpt(output: bytes, lines: int = 5) -> List[str]:
    """The last few non-blank lines of an output, for a person."""
    text = _decode(output)
    return [clean(line).rstrip()[:REASON_CHARS] for line in text.splitlines() if line.strip()][-lines:]


_OBJECT_ID_LENGTHS = (40, 64)  # commit ids: SHA-1 (40 hex digits) or SHA-256 (64)
# Refs that live in a linked worktree's own git directory, not in the common one.
_PER_WORKTREE_REFS = ("refs/bisect/", "refs/worktree/", "refs/rewritten/")


def git_environment() -> Env:
    """Git that never waits for a person: no prompts, no editor, ssh in batch mode."""
    return dict(os.environ, GIT_TERMINAL_PROMPT="0", GIT_EDITOR="true",
                GIT_SSH_COMMAND=os.environ.get("GIT_SSH_COMMAND") or "ssh -o BatchMode=yes")


class GitResult(Record):
    """One git command: its exit code, output and whether a signal interrupted it."""

    exit_code: int
    out: str
    err: str
    interrupted: int | None

    def message(self) -> str:
        """git's telling line: the last one that is not a `hint:` (a hook's report
        included), else its exit code."""
        return telling_line(self.err + "\n" + self.out) or "exit %d" % self.exit_code


def git(args: Sequence[str], cwd: str, *, timeout: float = 60.0,
        env: Env | None = None, guard: SignalGuard | None = None,
        kill_grace: float = 5.0, echo_out: Sink | None = None,
        echo_err: Sink | None = None, ticker: Ticker | None = None, stdin: str = "") -> GitResult:
    """Run git like a gate (own process group, timeout, the guard's signals); its output
    is also passed to the echo sinks (verbose, log). Exit 127 when git is missing."""
    out: List[bytes] = []
    err: List[bytes] = []
    try:
        result = run_agent(["git"] + list(args), stdin, env=env or git_environment(), cwd=cwd,
                           guard=guard, on_stdout=_tee(out.append, echo_out),
                           on_stderr=_tee(err.append, echo_err), ticker=ticker,
                           limits=Limits(timeout=timeout, grace=kill_grace))
    except RoodaError as exc:
        return GitResult(exit_code=127, out="", err=str(exc), interrupted=None)
    error = _decode(b"".join(err))
    if result.timed_out:
        error += "\ngit %s: no answer within %s; stopped" % (args[0], format_budget(timeout))
    return GitResult(exit_code=result.exit_code, out=_decode(b"".join(out)),
                     err=error, interrupted=result.interrupted)


class GitRepository(Record):
    """Where a work tree's repository keeps HEAD (git_dir) and the refs (common_dir:
    the same directory, except in a linked worktree)."""

    top: str
    git_dir: str
    common_dir: str
    reftable: bool                  # refs in a reftable: only git can read them


def find_repository(cwd: str) -> Tuple[GitRepository | None, str]:
    """The repository of cwd, or None and why: "" when cwd is simply not in one, else
    git's own reason (dubious ownership, a broken .git, no git at all)."""
    result = git(["rev-parse", "--show-toplevel", "--absolute-git-dir", "--git-common-dir"], cwd)
    lines = result.out.splitlines()
    if result.exit_code != 0 or len(lines) < 3:
        reason = " ".join(line.strip() for line in result.err.splitlines() if line.strip())
        if result.exit_code == 127:
            return None, "git is not installed (%s)" % reason
        if "not a git repository" in reason.lower() or not reason:
            return None, ""  # simply not in one
        return None, "git cannot use the repository of %s: %s" % (cwd, reason)
    common = os.path.normpath(os.path.join(cwd, lines[2]))
    return GitRepository(top=lines[0], git_dir=lines[1], common_dir=common,
                         reftable=os.path.isdir(os.path.join(common, "reftable"))), ""


def _parse_packed_refs(path: str) -> Dict[str, str]:
    refs = {}
    with _suppress(OSError):
        with open(path, "rb") as stream:
            for line in _decode(stream.read()).splitlines():
                parts = line.split(" ", 1)
                if len(parts) == 2 and not line.startswith(("#", "^")):
                    refs[parts[1].strip()] = parts[0]
    return refs


def _read_head_files(repo: GitRepository, watched: List[Tuple[str, tuple | None]]) -> str | None:
    """read_head's work; `watched` collects the files the answer depends on (emptied when
    git had to be asked: that answer is not cached)."""
    if not repo.reftable:
        with _suppress(OSError, UnicodeDecodeError):
            head = os.path.join(repo.git_dir, "HEAD")
            watched.append((head, stat_signature(head)))
            with open(head, "rb") as stream:
                value = stream.read().decode("ascii").strip()
            for _ in range(5):  # a symbolic ref may point at another one
                if not value.startswith("ref:"):
                    if len(value) in _OBJECT_ID_LENGTHS and all(c in "0123456789abcdef" for c in value):
                        return value
                    break
                name = value[4:].strip()
                ref = os.path.join(repo.git_dir if name.startswith(_PER_WORKTREE_REFS) else repo.common_dir,
                                   name)
                packed_path = os.path.join(repo.common_dir, "packed-refs")
                watched += [(ref, stat_signature(ref)), (packed_path, stat_signature(packed_path))]
                try:
                    with open(ref, "rb") as stream:
                        value = stream.read().decode("ascii").strip()
                except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
                    value = cached_read("packed-refs", packed_path, _parse_packed_refs).get(name)
                    if value is None:
                        return None  # an unborn branch: no commit yet
    del watched[:]
    result = git(["rev-parse", "-q", "--verify", "HEAD"], repo.top)
    return result.out.strip() if result.exit_code == 0 else None


def read_head(repo: GitRepository) -> str | None:
    """HEAD's commit id from the repository's files (HEAD, loose refs, packed-refs), as
    `git rev-parse HEAD` would say it; None on an unborn branch. Where the files cannot
    say (a reftable, something unexpected), git is asked."""
    cached = _HEADS.get(repo.git_dir)
    if cached is not None and all(stat_signature(path) == signature for path, signature in cached[0]):
        return cached[1]
    watched: List[Tuple[str, tuple | None]] = []
    value = _read_head_files(repo, watched)
    if watched:
        _HEADS[repo.git_dir] = (tuple(watched), value)
    return value


def session_log_pathspecs(repo: GitRepository, log_dir: str | None) -> List[str]:
    """Pathspecs of rooda's own session logs in the log directory, when it is inside the
    repository: the only files a git gate leaves out (SPEC 6), wherever the directory
    is and whether or not it is ignored."""
    if not log_dir:
        return []
    relative = os.path.relpath(os.path.realpath(log_dir), os.path.realpath(repo.top))
    if relative == ".." or relative.startswith(".." + os.sep):
        return []
    escaped = re.sub(r"([*?\[\\])", r"\\\1", relative.replace(os.sep, "/"))
    prefix = "" if relative == "." else escaped + "/"
    suffixes = sorted({name.rsplit(".", 1)[1] for name in SessionFiles.SUFFIXES})
    return [":(top,glob)%s%s" % (prefix, name) for name in [SessionFiles.WINDOWS_FILE + "*"] + [
        "%s.%s" % (SessionFiles.GLOB, suffix) for suffix in suffixes]]


def stage_everything(run_git: RunGit, repo: GitRepository, log_dir: str | None,
                     env: Env | None = None, lenient: bool = False) -> str | None:
    """`git add -A`, then rooda's session logs taken out of the index again (adding them
    with an exclude pathspec fails when the log directory is git-ignored, the layout
    `vendor` creates). git's message when it failed, else None. `lenient` (keep: better's
    snapshots): what git cannot add (a nested repository with no commit) is left out."""
    result = run_git(["add", "-A", "--ignore-errors"] if lenient else ["add", "-A"], env=env)
    if result.exit_code != 0 and not lenient:
        return "git add failed: " + result.message()
    specs = session_log_pathspecs(repo, log_dir)
    if specs:
        result = run_git(["rm", "-r", "-f", "--cached", "-q", "--ignore-unmatch", "--"] + specs, env=env)
        if result.exit_code != 0:
            return "git rm --cached (rooda's session logs) failed: " + result.message()
    return None


def worktree_tree(run_git: RunGit, repo: GitRepository, log_dir: str | None,
                  adjust: Callable[[Env], None] | None = None) -> Tuple[str | None, str | None]:
    """(tree, None) of the whole work tree, untracked files included, ignored ones and
    rooda's logs left out -- a tree built in a scratch copy of the index (`adjust` may
    change it first, given git's environment for it) -- or (None, git's message) when git
    failed: the no_change fingerprint and keep: better's states."""
    import shutil
    import tempfile
    handle, scratch = tempfile.mkstemp(prefix="rooda-index-")
    os.close(handle)
    try:
        index = os.path.join(repo.git_dir, "index")
        if os.path.isfile(index):
            shutil.copy2(index, scratch)  # cached hashes kept; its mtime too: racily clean entries stay so
        else:
            os.unlink(scratch)
        env = git_environment()
        env["GIT_INDEX_FILE"] = scratch
        problem = stage_everything(run_git, repo, log_dir, env, adjust is not None)
        if problem:
            return None, problem
        if adjust:
            adjust(env)
        result = run_git(["write-tree"], env=env)
        if result.exit_code != 0:
            return None, "git write-tree failed: " + result.message()
        return result.out.strip(), None
    finally:
        if os.path.exists(scratch):
            os.unlink(scratch)


def untracked_files(run_git: RunGit, repo: GitRepository | None,
                    log_dir: str | None) -> List[str]:
    """Untracked files that are not ignored, rooda's session files left out: what `git add
    -A` would sweep into the first commit (a `nohup.out`, a scratch file)."""
    if not repo:
        return []
    result = run_git(["ls-files", "--others", "--exclude-standard", "--full-name", "-z"])
    top = os.path.realpath(repo.top)
    logs = os.path.relpath(os.path.realpath(log_dir or top), top).replace(os.sep, "/")
    own = re.compile(("" if logs == "." else re.escape(logs) + "/") + "(%s|%s)" % (
        SessionFiles.BASE, re.escape(SessionFiles.WINDOWS_FILE)))  # (windows.json and its .tmp, mid-write)
    return [name for name in result.out.split("\0") if name and not own.match(name)]


def commit_and_push(run_git: RunGit, repo: GitRepository, gates: Gates,
                    message: Sequence[str], log_dir: str | None) -> Tuple[str | None, Fields]:
    """The git gate after a successful iteration: commit what `git add` really staged
    (not what `git status` shows: showUntrackedFiles=no and dirty submodules distort
    it) with `message` (its paragraphs), then push whenever the branch is ahead of its
    upstream, so that a push that failed once is retried. (git's own message when
    something failed, else None; what was done: hash, files, message, pushed)."""
    done: Fields = {}
    if gates.commit:
        problem = stage_everything(run_git, repo, log_dir)
        if problem:
            return problem, done
        staged = run_git(["diff", "--cached", "--name-only", "-z"])
        if staged.exit_code != 0:
            return "git diff --cached failed: " + staged.message(), done
        files = [name for name in staged.out.split("\0") if name]
        if files:
            # verbatim: a summary that starts with `#` is no comment (commit.cleanup=strip)
            result = run_git(["commit", "-q", "--cleanup=verbatim"] + [
                part for paragraph in message for part in ("-m", paragraph)])
            if result.exit_code != 0:
                text = result.message()
                if any(word in result.err for word in ("user.name", "user.email", "identity")):
                    text += " (%s)" % GIT_IDENTITY_HINT
                return "git commit failed: " + text, done
            # (what the commit holds, read from it: a hook may have added to it, SPEC 22 rev 6)
            held = run_git(["show", "--name-only", "--format=", "-z", "HEAD"]).out.split("\0")
            done = {"hash": (read_head(repo) or "")[:7], "files": len([name for name in held if name]),
                    "message": message[0]}
    if gates.push and read_head(repo) is not None:
        upstream = run_git(["rev-parse", "--abbrev-ref", "--symbolic-full-name", "@{u}"])
        target = upstream.out.strip() if upstream.exit_code == 0 else ""
        if target:
            ahead = run_git(["rev-list", "--count", "@{u}..HEAD"])
            if ahead.exit_code == 0 and ahead.out.strip() == "0":
                return None, done
            result = run_git(["push", "-q"])
        else:
            branch = run_git(["symbolic-ref", "--short", "-q", "HEAD"]).out.strip()
            if not branch:
                return "git push failed: HEAD is detached; check out a branch to push", done
            remotes = run_git(["remote"]).out.split()
            if not remotes:
                return "git push failed: the repository has no remote to push to", done
            remote = "origin" if "origin" in remotes else remotes[0]
            target = "%s/%s" % (remote, branch)
            result = run_git(["push", "-q", "-u", remote, branch])
        if result.exit_code != 0:
            return "git push failed: " + result.message(), done
        done["pushed"] = target
    return None, done


def commit_identity(run_git: RunGit) -> Tuple[str | None, str]:
    """Who git commits as here (`Name <email>`), or None and git's reason."""
    result = run_git(["var", "GIT_COMMITTER_IDENT"])
    return (result.out.rsplit(">", 1)[0] + ">", "") if result.exit_code == 0 else (None, result.message())


def missing_requires(plan: RunPlan) -> str:
    """The paths a procedure requires that are missing (SPEC 6), in words; "" when none is."""
    missing = [path for path in plan.gates.requires if not os.path.exists(os.path.join(plan.cwd, path))]
    if not missing:
        return ""
    return "procedure %s requires %s, which %s missing%s" % (
        plan.procedure, ", ".join(missing), "is" if len(missing) == 1 else "are", plan.gates.requires_hint)


def gate_trouble(result: AgentResult, timeout: float) -> str:
    """Why a gate command could not run at all -- exit 126 or 127, a signal, its timeout --
    as opposed to saying "not yet" or failing (SPEC 6, 20); "" when it ran."""
    # `python3 -m pytest` without pytest exits 1, saying only that: a tool that is missing.
    missing = re.match(r"\S*python[\d.]*: No module named \S+$", _last_line(result.output, ()))
    if result.timed_out:
        return "did not finish within %s" % format_budget(timeout)
    if result.killed_by:
        return "was killed by %s" % result.killed_by
    if result.exit_code in (126, 127) or missing:
        return "exited %d (it cannot run)" % result.exit_code
    return ""


# Words a gate command may start with that are the shell's own, not a program on PATH.
SHELL_WORDS = set("cd test [ [[ if for while until case ! exec export set true false . source eval command"
                  " builtin time exit return : { ( echo printf pwd read wait trap shift unset ulimit umask"
                  " type hash kill local getopts".split())


def missing_program(command: str, cwd: str) -> str:
    """What is wrong with the program a gate command runs, as the agent's is checked
    (SPEC 16 rev 5: `pyhton3: not found on PATH`); "" when it is there, or when the shell
    decides (its own words, a construct, a variable)."""
    import shlex
    try:
        words = shlex.split(command)
    except ValueError:
        return ""
    program = next((word for word in words if not re.match(r"[A-Za-z_]\w*=", word)), "")
    if not program or program in SHELL_WORDS or re.search(r"[$`;|&(){}<>*?~]", program):
        return ""
    if "/" in program:
        found = os.access(os.path.join(cwd, program), os.X_OK)
        return "" if found else "%s: not found, or not executable" % program
    return "" if _which(program) else "%s: not found on PATH" % program


def cannot_run(gate: str, command: str, result: AgentResult, timeout: float) -> str:
    """Why a gate that cannot run stops the run before the agent spends (SPEC 6, 20)."""
    excerpt = error_excerpt(result.output, 3)
    return "%s command `%s` %s%s" % (gate, command, gate_trouble(result, timeout),
                                     ": " + " | ".join(excerpt) if excerpt else "")


def verify_fingerprint(output: bytes) -> str:
    """What makes two verifier failures the same error (SPEC 15): its cause and its output."""
    return error_fingerprint(b"%s\n%s" % (CAUSE_VERIFY.encode(), output))


def commit_message(plan: RunPlan, session: str, number: int, label: str, report: StreamReport,
                   carried: Sequence[str] = ()) -> List[str]:
    """A commit's subject from the template (SPEC 16: {procedure}, {iteration} and {summary},
    the first line of the agent's final message without its markers), what earlier attempts
    left in the tree that it carries (`carried`: `2 (protected)`, issue 43), and the
    trailers that tell runs apart and say what the commit cost."""
    text = report.last_text
    for marker in signal_markers(plan.signals):
        text = text.replace(marker, "")
    summary = _one_line(text, 72) or "iteration %d" % number
    subject = plan.gates.message.replace("{procedure}", plan.procedure)
    subject = subject.replace("{iteration}", str(number)).replace("{summary}", summary)
    usage = ", ".join(describe_usage(report.usage or {}, brief=True)) or "not reported"
    trailers = "Rooda-Session: %s\nRooda-Iteration: %s\nRooda-Usage: %s" % (session, label, usage)
    if not carried:
        return [subject, trailers]
    many = "s" if len(carried) > 1 else ""
    return [subject, "It also carries the work that iteration%s %s left uncommitted." % (
        many, " and ".join(carried)), trailers]


LONG_GATE_SECONDS = 10.0  # a gate that runs longer is announced when it ends, passed or not


class GateRunner:
    """The commands a run runs besides the agent -- its gates, git and `notify` -- each
    under the run's guard and bounded, shown on the status line while it runs and
    logged; and what the gates decide of the run (verify's baseline, stuck). Without a
    guard, progress or log (doctor, the checks before a run) git runs plain."""

    def __init__(self, plan: RunPlan, guard: SignalGuard | None = None,
                 progress: Progress | None = None, log: SessionLog | None = None,
                 out: Outlet | None = None, err: Outlet | None = None) -> None:
        self.plan, self.guard, self.progress, self.log = plan, guard, progress, log
        verbose = plan.verbosity >= VERBOSE
        self.stdout_sink = out.write if verbose and out is not None else None
        self.stderr_sink = err.write if verbose and err is not None else None
        self.log_sink = log.write if log else None
        # How commits and set-aside refs name this run: its session, else its start (--no-log).
        self.session = log.files.base if log else time.strftime("run-%Y%m%d-%H%M%S")

    def step(self, what: str) -> Ticker | None:
        """A gate or git step begins: `verify: make test · 12s` on the status line."""
        return self.progress.begin(Activity("step", what)) if self.progress else None

    def end_step(self) -> None:
        if self.progress:
            self.progress.end()

    def shell(self, command: str, limits: Limits, env: Env | None = None, ticker: Ticker | None = None,
              on_output: Sink | None = None, on_stderr: Sink | None = None) -> AgentResult:
        """Run a gate (or `notify`) command with `sh -c` in the run directory under the run's
        guard, stdin empty; the result keeps the last 8 KiB of its output."""
        tail = _Tail(FEEDBACK_TAIL_BYTES * 4)
        result = run_agent(["sh", "-c", command], "", env=env, cwd=self.plan.cwd, guard=self.guard,
                           limits=limits, on_stdout=_tee(tail, on_output), on_stderr=_tee(tail, on_stderr),
                           ticker=ticker)
        return result.replace(output=tail.bytes())

    def gate(self, gate: str, command: str, run: str = "") -> AgentResult:
        """Run a gate, showing its output in verbose mode and logging it; announced when
        it takes long or fails (SPEC 5 rev 2), and always as verify's `baseline` (SPEC 20).
        A verify's test counts are read from its whole output (SPEC 22). `run`: "baseline",
        or "again" -- keep: better's second run, to confirm a worse result -- each so
        named in the event, the log and the terminal."""
        plan, progress = self.plan, self.progress
        assert progress
        shown = gate + " (again, to confirm)" if run == "again" else gate
        if self.log:
            self.log.gate_start(shown, command)
        ticker, counted = self.step("%s: %s" % (shown, _one_line(command, 60))), CountedLines()
        shown_out, shown_err = (None, None) if gate == GATE_ACCEPT else (self.stdout_sink, self.stderr_sink)
        try:  # (accept's output goes to the log alone: not even -v shows it, SPEC 22 rev 6)
            result = self.shell(command, Limits(timeout=plan.gate_timeout, grace=plan.kill_grace),
                                ticker=ticker, on_output=_tee(shown_out, self.log_sink, counted),
                                on_stderr=_tee(shown_err, self.log_sink, counted))
        finally:
            self.end_step()
        if result.interrupted is not None:  # (no result: an interrupted baseline is no baseline)
            if self.log:
                self.log.text("--- %s interrupted by %s ---\n" % (gate, signal_name(result.interrupted)))
            raise Interrupted(result.interrupted)
        said = ""
        if gate == GATE_VERIFY:
            result = result.replace(counts=test_counts(counted.text()))
            said = _last_line(result.output, ())
        if self.log:  # (a verify's telling line and test counts, SPEC 20 and 22)
            more: Dict[str, object] = {run: True} if run else {}
            if gate == GATE_VERIFY:
                more.update(line=said, counts=result.counts)
            self.log.gate_end(gate, command, result.exit_code, result.seconds, **more)
        said = ": " + said if said else ""
        if result.timed_out:
            progress.warn("%s: `%s` did not finish within %s and was stopped"
                          % (gate, command, format_budget(plan.gate_timeout)))
        elif run == "baseline":
            if not gate_trouble(result, plan.gate_timeout):  # (else the run stops, saying why)
                progress.info("verify passes before iteration 1" if result.exit_code == 0 else
                              "verify fails before iteration 1 (exit %d)%s" % (result.exit_code, said))
        elif gate in (GATE_VERIFY, GATE_ACCEPT) and result.exit_code != 0:
            progress.info("%s: %s failed (exit %d) in %s%s" % (
                shown, _one_line(command, 80), result.exit_code, format_duration(result.seconds), said))
        elif result.seconds >= LONG_GATE_SECONDS:  # (a verify or accept gate that got here passed)
            verdict = "says done" if result.exit_code == 0 else "says not yet (exit %d)" % result.exit_code
            if gate in (GATE_VERIFY, GATE_ACCEPT):
                verdict = "passed"
            progress.info("%s: %s %s in %s" % (
                shown, _one_line(command, 80), verdict, format_duration(result.seconds)))
        return result

    def baseline(self, state: LoopState) -> None:
        """verify once before iteration 1 (SPEC 20): what the agent starts from, its test
        counts what verify is held to; a failing one is what iteration 1 is told of and the
        first of same_error's. A RoodaError when it cannot run at all (the run stops before
        the agent spends)."""
        plan = self.plan
        state.step = "while verify ran before iteration 1"
        result = self.gate(GATE_VERIFY, plan.verify, "baseline")
        state.step = ""
        if gate_trouble(result, plan.gate_timeout):
            raise RoodaError(cannot_run(GATE_VERIFY, plan.verify, result, plan.gate_timeout))
        failed = result.exit_code and result.output.strip()
        fingerprint = verify_fingerprint(result.output) if failed else None
        state.baseline = baseline = Baseline(plan.verify, result.exit_code, verify_words(result)[1],
                                             result.output, fingerprint)
        state.counts = (result.counts, "before iteration 1") if result.counts else None
        if result.exit_code:
            state.previous, state.fingerprint = baseline, baseline.fingerprint
            state.same_error = int(baseline.fingerprint is not None)

    def git(self, args: List[str], env: Env | None = None, stdin: str = "", finish: bool = False
            ) -> GitResult:
        """A git command of the run, under its guard and gate_timeout (`finish`: not cut by
        a signal -- a restore ends what it began). A commit or a push (what runs hooks
        and changes something) is a gate, shown in verbose mode and logged with its
        output; the plumbing around it (add, diff, ...) is logged only when it fails, with
        git's output."""
        plan, log = self.plan, self.log
        import shlex  # (shown as a shell would take it: a message has newlines)
        record, shown = args[0] in ("commit", "push"), "git " + " ".join(map(shlex.quote, args))
        if record and log:
            log.gate_start(GATE_GIT, shown)
        started = time.monotonic()
        ticker = self.step("git: " + args[0])  # a slow hook keeps the line going
        try:
            result = git(args, plan.cwd, timeout=plan.gate_timeout, env=env, kill_grace=plan.kill_grace,
                         guard=None if finish else self.guard, ticker=ticker, stdin=stdin,
                         echo_out=_tee(self.stdout_sink, self.log_sink) if record else None,
                         echo_err=_tee(self.stderr_sink, self.log_sink) if record else None)
        finally:
            self.end_step()
        if record and log:
            log.gate_end(GATE_GIT, shown, result.exit_code, time.monotonic() - started)
        elif result.exit_code != 0 and args[0] in ("add", "rm", "write-tree") and log:
            log.text("--- git: %s ---\n%s%s--- git exited %d ---\n" % (
                shown, result.out, result.err, result.exit_code))
        if result.interrupted is not None:
            raise Interrupted(result.interrupted)
        return result

    def fingerprint(self) -> str | None:
        """The no_change fingerprint of the work tree; None, with a warning that quotes
        git, when git failed (a failure is never "unchanged", SPEC 6)."""
        assert self.plan.repo and self.progress
        tree, problem = worktree_tree(self.git, self.plan.repo, self.plan.log_dir)
        if problem:
            self.progress.warn("stuck.no_change: %s; this iteration is not counted" % problem)
        return tree and "%s:%s" % (read_head(self.plan.repo) or "-", tree)

    def uncommitted(self) -> List[str]:
        """What the work tree holds that is not committed, rooda's session logs left out
        (`git status --porcelain` lines, at most 20); [] outside git or when git fails."""
        plan = self.plan
        if not plan.repo:
            return []
        found = self.git(["status", "--porcelain", "--untracked-files=all", "--", "."] + [
            ":(exclude," + spec[2:] for spec in session_log_pathspecs(plan.repo, plan.log_dir)])
        return [line for line in found.out.splitlines() if line.strip() and not found.exit_code][:20]

    def stuck(self, state: LoopState, attempt: _Attempt) -> str | None:
        """The stuck detectors of SPEC 6, after the outcome: why the run is stuck, or None."""
        gates, feedback = self.plan.gates, attempt.feedback
        if gates.same_error:
            # The same error is the same cause with the same evidence (SPEC 15): the
            # verifier's output, else the reason -- three different explanations of a
            # FAILURE are not the same error. A failure that printed nothing has no error to
            # compare: it resets the count, so silent failures abort, not "stick".
            verify = attempt.cause == CAUSE_VERIFY
            evidence = feedback if verify else ("%s: %s" % (attempt.reason or ("", ""))).encode()
            if attempt.outcome in FAILING_OUTCOMES and feedback.strip() and evidence.strip():
                # (verify's own line too: verify_fingerprint is this for a verify failure)
                fingerprint = error_fingerprint(("%s\n" % attempt.cause).encode() + evidence)
                state.same_error = state.same_error + 1 if fingerprint == state.fingerprint else 1
                state.fingerprint = fingerprint
            else:
                state.same_error, state.fingerprint = 0, None
            if state.same_error >= gates.same_error:
                state.stuck_excerpt = error_excerpt(feedback) if verify else []
                return "same error in %d consecutive failures" % state.same_error
        if gates.no_change and attempt.tree_before is not None:
            after = self.fingerprint()
            if after is None:
                return None  # git failed: said so, and not counted either way
            state.unchanged = state.unchanged + 1 if after == attempt.tree_before else 0
            if state.unchanged >= gates.no_change:
                return "no change in %s" % plural(state.unchanged, "iteration")
        return None


# ==== 14. Keeping the work honest ====================================
# SPEC 22: what an agent may not do to the night's work, checked deterministically, and
# nothing lost. The test counts a verify run is held to (test_counts: guard), the paths
# the agent may not change put back (protect), and the best state kept with a worse
# attempt set aside under a git ref (keep: better, the Keeper).

def counts_drop(held: Tuple[Fields, str] | None, said: Verified) -> str:
    """What a verify run's test counts fell below (SPEC 22): the counts it is held to and
    since when (before iteration 1, or the first read), against its own: `passed with 9
    tests run where 12 ran before iteration 1`; "" when nothing fell."""
    if not held:
        return ""
    counts, (before, since) = said.counts, held
    verb = "passed" if said.exit_code == 0 else "failed"
    if counts is None:
        return "printed no test counts where it printed %d run %s" % (before["run"], since)
    if counts["run"] < before["run"]:
        return "%s with %s run where %d ran %s" % (verb, plural(counts["run"], "test"), before["run"], since)
    if counts["skipped"] > before["skipped"]:
        skipped = plural(counts["skipped"], "test")
        return "%s with %s skipped where %d were %s" % (verb, skipped, before["skipped"], since)
    return ""


# git's configuration that runs programs or changes what git sees (SPEC 22 rev 6): guarded
# as a protected file is, whenever `protect` is not empty.
GUARDED_GIT_KEYS = (r"^(core\.(hookspath|fsmonitor|excludesfile|attributesfile)|"
                    r"(filter|diff|merge)\..*\.(clean|smudge|process|textconv|command|driver))$")


def clear_way(cwd: str, path: str, clear: bool = True) -> str:
    """Where `path` (relative to the run directory) is, safe to write or remove (SPEC 22 rev
    6): never through a link. What stands on its way that is a link or not a directory is
    moved aside (`.rooda-moved`) to write it, or (not `clear`) makes it "" -- as does a path
    that leads out of the run directory."""
    here = os.path.normpath(os.path.join(cwd, path))
    if not here.startswith(os.path.join(cwd, "")):
        return ""
    folder = cwd
    for part in path.split("/")[:-1]:
        folder = os.path.join(folder, part)
        if os.path.islink(folder) or (os.path.lexists(folder) and not os.path.isdir(folder)):
            if not clear:
                return ""
            os.replace(folder, folder + ".rooda-moved")
    return here


class GitSettings:
    """git's configuration keys that run programs or change what git sees (SPEC 22 rev 6:
    GUARDED_GIT_KEYS), in its config file (`path`, from the run directory; "" outside git):
    as they stood before an iteration, and set back after it when the agent changed them."""

    def __init__(self, cwd: str, path: str, run_git: RunGit) -> None:
        self.path, self.where, self.run_git = path, os.path.join(cwd, path), run_git
        self.then: Tuple[tuple | None, str] = ((), "")  # the file's signature, the keys' values

    def read(self) -> str:
        """The guarded keys and their values, as `git config` lists them."""
        return self.run_git(["config", "--local", "--null", "--get-regexp", GUARDED_GIT_KEYS],
                            finish=True).out

    def changed(self) -> bool:
        return bool(self.path) and stat_signature(self.where) != self.then[0]

    def record(self) -> None:
        if self.changed():
            self.then = (stat_signature(self.where), self.read())

    def restore(self, keep_in: str) -> Tuple[str, ...]:
        """The keys set back as they were, the agent's kept in `keep_in`; (its file) when
        they changed, else ()."""
        now = self.read() if self.changed() else self.then[1]
        if now == self.then[1]:
            return ()
        os.makedirs(keep_in, exist_ok=True)
        with open(os.path.join(keep_in, "git-config"), "w") as stream:  # (`key value` lines: git's)
            stream.write("".join(entry.replace("\n", " ", 1) + "\n" for entry in now.split("\0") if entry))
        pairs = [tuple(entry.split("\n", 1)) for source in (now, self.then[1])
                 for entry in source.split("\0") if entry]
        for key in {pair[0] for pair in pairs}:
            self.run_git(["config", "--local", "--unset-all", key], finish=True)
        for key, *value in [tuple(entry.split("\n", 1)) for entry in self.then[1].split("\0") if entry]:
            self.run_git(["config", "--local", "--add", key] + (value or [""]), finish=True)
        self.then = (stat_signature(self.where), self.then[1])
        return (self.path,)


def listed_files(cwd: str, top: str, listed: Dict[str, tuple], logs: str, hooks: str) -> Iterable[str]:
    """The files (and links) under a protected directory, from the run directory; a
    directory's listing (kept in `listed`) read again only when the directory changed: a
    scan is each side of every iteration. Not into `.git` nor the log directory; not git's
    sample `hooks`, which never run (one renamed to run changes its directory)."""
    pending = [top]
    while pending:
        folder = pending.pop()
        try:
            info = os.lstat(os.path.join(cwd, folder))
            if not stat.S_ISDIR(info.st_mode):
                continue
            signature = (info.st_mtime_ns, info.st_ctime_ns, info.st_ino)
            seen = listed.get(folder)
            if not seen or seen[0] != signature:
                with os.scandir(os.path.join(cwd, folder)) as entries:
                    seen = listed[folder] = (signature, [(entry.name, entry.is_dir(follow_symlinks=False))
                                                         for entry in entries])
        except OSError:
            continue
        here = folder + "/" if folder else ""
        for name, is_dir in seen[1]:
            if not is_dir and not (folder == hooks and name.endswith(".sample")):
                yield here + name
            elif is_dir and name != ".git" and here + name + "/" != logs:
                pending.append(here + name)


class ProtectedPaths:
    """The paths the agent may not change (SPEC 22 `protect`): `:rooda` -- rooda's own
    directory when it lies inside the run directory (less the log directory), or its own
    files where that is the run directory itself, and every file rooda would read from
    there (the config names, the prompt and fragment files, a --context file) whether it
    exists or not --, `:agent` (the agent CLIs' project settings), the paths and globs given
    (`*`, `?`, `**` any depth), and git's own hooks, info/exclude and the configuration that
    runs programs. Before an iteration their content is recorded as copies in a private
    directory (never in memory); after it, what the agent created, changed or deleted is put
    back exactly, its versions kept first. Decided by the filesystem, not by rules the agent
    can write: only what git ignored before the agent ran, by the ignore rules as they stood
    then, is left alone; nothing is written or removed through a link, nor outside the run
    directory (but in git's own directory)."""

    since = 0                                    # when the attempt began (record), in ns

    def __init__(self, plan: RunPlan, run_git: RunGit) -> None:
        import posixpath
        import tempfile
        self.cwd, self.run_git, self.repo = plan.cwd, run_git, plan.repo
        # The log directory as a path from here ("" where it lies elsewhere): compared as text,
        # not resolved per file (a scan each side of every iteration).
        self.logs = _display_path(os.path.realpath(plan.log_dir or os.devnull), os.path.realpath(self.cwd))
        self.logs = "" if os.path.isabs(self.logs) else self.logs.replace(os.sep, "/") + "/"
        self.copies = tempfile.mkdtemp(prefix="rooda-protected-") if plan.protect else ""  # (files/: copies)
        self.seen: Dict[str, tuple] = {}     # path (relative) -> its signature when copied
        self.ignored: Dict[str, bool] = {}   # path -> whether git ignored it before the agent (asked once)
        self.rules: Dict[str, str] = {}      # the ignore files above the protected ones: their text then
        self.signatures: list = []           # ... and their stat signatures (read again when they change)
        self.listed: Dict[str, tuple] = {}   # a protected directory's listing, by its stat signature
        self.files: set = set()              # paths: single files, and those found in the walks
        self.trees: set = set()              # directories protected whole
        self.roots: set = set()              # where the globs are looked for
        self.git: Tuple[str, ...] = ("", "", "")  # git's hooks, info/exclude and config, from here
        globs = []
        for pattern in (posixpath.normpath(pattern) for pattern in plan.protect):  # (`./tests/**/`)
            wild = re.split(r"[*?]", pattern)
            if pattern == ":rooda":
                own = _display_path(ROODA_DIR, self.cwd)
                if own == ".":  # (rooda run from its own directory: its files, not the project)
                    self.files.update(["rooda.py", "rooda-config.json"])
                    self.trees.add("prompts")
                elif not os.path.isabs(own):
                    self.trees.add(own)
                read = list(plan.config_files + plan.context_files + CONFIG_NAMES) + [
                    plan.prompt_file or os.devnull] + [
                    f["path"] for items in plan.fragments.values() for f in items if "path" in f]
                self.files.update(path for path in (_display_path(os.path.join(self.cwd, path), self.cwd)
                                                    for path in read) if not path.startswith((os.sep, "..")))
            elif pattern == ":agent":
                for path in AGENT_SETTINGS:
                    (self.trees if path.endswith("/") else self.files).add(path.rstrip("/"))
            elif len(wild) > 1:
                globs.append("".join({"**/": "(?:.*/)?", "**": ".*", "*": "[^/]*", "?": "[^/]"}.get(
                    part, re.escape(part)) for part in re.split(r"(\*\*/?|\*|\?)", pattern)))
                self.roots.add(os.path.dirname(wild[0]))
            else:  # (a file, or a directory whole)
                self.files.add(pattern)
                self.trees.add(pattern)
        self.globs = re.compile("(?:%s)\\Z" % "|".join(globs or ["(?!)"]))
        self.prefix = ""
        if self.repo and plan.protect:  # git's own (SPEC 22 rev 6), where git says they are from here
            said = run_git(["rev-parse", "--git-path", "hooks", "--git-path", "info/exclude", "--git-path",
                            "config"]).out.split("\n")
            self.git = tuple(_display_path(os.path.join(self.cwd, path), self.cwd) for path in said[:3])
            self.trees.add(self.git[0])
            self.files.add(self.git[1])
            self.prefix = os.path.relpath(self.cwd, self.repo.top).replace(os.sep, "/") + "/"
        self.settings = GitSettings(self.cwd, self.git[2], run_git)
        # The ignore files above what is protected, from the repository's top (what git reads).
        self.above = sorted({"/".join(parts[:index] + [".gitignore"]) for path in self.trees | self.roots |
                             self.files for parts in [posixpath.normpath(self.prefix + path).split("/")[:-1]]
                             for index in range(len(parts) + 1) if ".." not in parts[:index]})

    def scan(self) -> Dict[str, tuple]:
        """The protected files now, by path, with their signatures (lstat: a link, or a
        directory where a file was, is one too; a link is never followed)."""
        found: Dict[str, tuple] = {}
        for top in sorted(self.trees | self.roots):
            if os.path.islink(os.path.join(self.cwd, top)):
                self.files.add(top)  # (a directory the agent made a link: a link, not what it leads to)
                continue
            found_here = listed_files(self.cwd, top, self.listed, self.logs, self.git[0])
            self.files.update(path for path in found_here if top in self.trees or self.globs.match(path))
        # (each path from the run directory's descriptor, without a join: a scan each side of
        # every iteration, in the loop's own time -- make bench row 2)
        where = os.open(self.cwd, os.O_RDONLY) if os.lstat in os.supports_dir_fd else None
        try:
            for path in self.files:
                try:
                    info = os.lstat(path, dir_fd=where) if where is not None else \
                        os.lstat(os.path.join(self.cwd, path))
                except OSError:
                    continue
                logs = self.logs and path.startswith(self.logs)  # (the log directory is not rooda's)
                if not logs and not (stat.S_ISDIR(info.st_mode) and path in self.trees):
                    found[path] = (info.st_mode, info.st_size, info.st_mtime_ns, info.st_ctime_ns,
                                   info.st_ino)
        finally:
            if where is not None:
                os.close(where)
        return found

    @staticmethod
    def copy(source: str, copy: str) -> None:
        """A file (a link as a link) copied with its metadata, its directories made."""
        import shutil
        os.makedirs(os.path.dirname(copy), exist_ok=True)
        shutil.copy2(source, copy, follow_symlinks=False)

    def record(self) -> None:
        """Before an iteration: a copy of each protected file that changed since the last,
        which of them git ignores now, the ignore rules above them and git's guarded
        configuration as they stand."""
        now = self.scan()
        asked = [path for path in now if path not in self.ignored
                 and not path.startswith(self.git[0] or "\0")]
        if asked and self.repo:  # (git says which are ignored, once each: they are not rooda's to guard)
            said = self.run_git(["check-ignore", "-z", "--stdin"], stdin="\0".join(asked) + "\0", finish=True)
            self.ignored.update(dict.fromkeys(asked, False), **dict.fromkeys(said.out.split("\0"), True))
        for path, signature in now.items():
            copied = stat.S_ISREG(signature[0]) or stat.S_ISLNK(signature[0])
            if self.seen.get(path) != signature and copied and not self.ignored.get(path):
                copy = os.path.join(self.copies, "files", path.replace("../", "^/"))
                with _suppress(FileNotFoundError):
                    os.unlink(copy)
                self.copy(os.path.join(self.cwd, path), copy)
        if self.repo:
            signatures = [stat_signature(os.path.join(self.repo.top, path)) for path in self.above]
            if signatures != self.signatures:
                self.rules = {path: text for path in self.above
                              for text in [_read_file(os.path.join(self.repo.top, path))] if text is not None}
                self.signatures = signatures
            self.settings.record()
        self.seen, self.since = now, time.time_ns()

    def ignored_before(self, paths: List[str]) -> set:
        """Of the paths the agent made, those git's ignore rules as they stood before it ran
        ignore -- asked of git in a scratch work tree that holds those rules, never its own."""
        import shutil
        import tempfile
        if not (paths and self.repo):
            return set()
        shadow = tempfile.mkdtemp(prefix="rooda-rules-")
        try:
            for path, text in self.rules.items():
                os.makedirs(os.path.dirname(os.path.join(shadow, path)), exist_ok=True)
                with open(os.path.join(shadow, path), "w") as stream:
                    stream.write(text)
            said = self.run_git(["--work-tree=" + shadow, "check-ignore", "--no-index", "-z", "--stdin"],
                                stdin="".join(self.prefix + path + "\0" for path in paths), finish=True)
            return {path[len(self.prefix):] for path in said.out.split("\0")}
        finally:
            shutil.rmtree(shadow, ignore_errors=True)

    def restore(self, keep_in: str) -> Tuple[str, ...]:
        """After an iteration: what the agent created, changed or deleted put back exactly as
        it was, its versions kept first in `keep_in` (nothing lost, even if rooda is killed
        midway) -- a FIFO or other special file removed, nothing kept; a directory or a link
        where a file or a directory was moved into `keep_in` whole; git's guarded keys set
        back. The paths, sorted."""
        import filecmp
        now, changed = self.scan(), []
        for path in sorted(set(now) | set(self.seen)):
            if now.get(path) == self.seen.get(path) or self.ignored.get(path):
                continue
            here = os.path.join(self.cwd, path)
            copy = os.path.join(self.copies, "files", path.replace("../", "^/"))
            if not (path in now and path in self.seen and now[path][0] == self.seen[path][0] and
                    stat.S_ISREG(now[path][0]) and filecmp.cmp(here, copy, shallow=False)):
                changed.append(path)
        # git's own first: the rules a file the agent made is judged by are then as they were
        own = [path for path in changed if self.git[0] and path.startswith(self.git[:2])]
        hid = self.ignored_now() if own or self.settings.changed() else set()
        settings = self.settings.restore(keep_in)
        self.put_back(own, keep_in)
        # What the attempt made and hid with the rules it wrote (info/exclude, core.excludesFile),
        # visible again now they are put back: put back too (a conftest.py it hid: SPEC 22 rev 6).
        visible = hid - self.ignored_now() if hid else set()
        hidden = [path.rstrip("/") for path in sorted(visible) if self.made_now(path)]
        self.put_back(hidden, keep_in)
        changed = [path for path in changed if path not in own]
        made = self.ignored_before([path for path in changed if path not in self.seen])
        changed = [path for path in changed if path not in made]  # (a test run's __pycache__/ stays)
        self.put_back(changed, keep_in)
        return tuple(sorted(own + hidden + changed)) + settings

    def ignored_now(self) -> set:
        """The untracked paths here git ignores now (a directory whole: `dir/`)."""
        listed = self.run_git(["ls-files", "-z", "--others", "--ignored", "--exclude-standard",
                               "--directory"], finish=True)
        return set(listed.out.split("\0")) - {""}

    def made_now(self, path: str) -> bool:
        """Whether the attempt made or changed a path (its change time is the attempt's)."""
        return (stat_signature(os.path.join(self.cwd, path)) or (0, 0, 0))[2] >= self.since

    def put_back(self, paths: List[str], keep_in: str) -> None:
        """Each path as it was, the agent's version kept first in `keep_in`."""
        try:
            for path in paths:  # the agent's versions first: kept (a directory moved whole), a FIFO gone
                here, keep = self.at(path, False), os.path.join(keep_in, path.replace("../", "^/"))
                if here and os.path.isdir(here) and not os.path.islink(here):
                    os.makedirs(os.path.dirname(keep), exist_ok=True)
                    os.replace(here, keep)
                elif here and (os.path.isfile(here) or os.path.islink(here)):
                    self.copy(here, keep)
                elif here and os.path.lexists(here):
                    os.unlink(here)
            for path in paths:  # each put back whole: a copy beside it, renamed over it
                copy = os.path.join(self.copies, "files", path.replace("../", "^/"))
                here = self.at(path, path in self.seen and os.path.lexists(copy))
                if here and path in self.seen and os.path.lexists(copy):
                    self.copy(copy, here + ".rooda-restore")
                    os.replace(here + ".rooda-restore", here)
                elif here and os.path.lexists(here) and not os.path.isdir(here):  # (made by the agent: kept)
                    os.unlink(here)
        except OSError as exc:  # (a full disk: the run stops, saying so)
            raise RoodaError("cannot put back the protected %s: %s" % (exc.filename, exc.strerror)) from None

    def at(self, path: str, clear: bool = True) -> str:
        """Where a protected path is, safe to write (`clear`) or remove (clear_way); git's
        own files are where git keeps them."""
        if path.startswith(self.git[:2]) and self.git[0]:
            return os.path.join(self.cwd, path)
        return clear_way(self.cwd, path, clear)

    def uncommit(self, paths: Sequence[str], before: str | None, warn: Say) -> None:
        """A protected change the agent committed itself (it moved HEAD) undone on the branch
        too, by a commit of rooda's that puts the paths back -- else `git stash` would bring
        it back, and the next success commit the revert under its own subject (issue 43)."""
        mine = [path for path in paths if not path.startswith(self.git) or not self.git[0]]
        since = self.run_git(["diff", "--name-only", before or "HEAD", "HEAD", "--"] + mine, finish=True).out
        if since.strip() or not before:  # (on a branch born in the attempt, every commit is its)
            message = "rooda: put back %s (protected paths the agent changed and committed)" % ", ".join(mine)
            for args in (["add", "-A", "--"] + mine, ["commit", "-q", "--only", "-m", message, "--"] + mine):
                done = self.run_git(args, finish=True)
                if done.exit_code:
                    warn("the agent committed a change to protected paths, and rooda could not undo it on the"
                         " branch: git %s: %s" % (args[0], done.message()))
                    return

    def close(self) -> None:
        """The copies go when the run ends; the agent's versions (--no-log) stay."""
        import shutil
        if self.copies:
            shutil.rmtree(os.path.join(self.copies, "files"), ignore_errors=True)
            with _suppress(OSError):
                os.rmdir(self.copies)  # (only when nothing of the agent's is in it)


def recovery(ref: str) -> List[Tuple[str, str]]:
    """How to look at an attempt set aside and bring it back (SPEC 22 rev 6): (what, the
    command). Its ref's parent is the state it was judged against: the diff is exactly
    what it did, and a cherry-pick brings exactly that onto today's tree."""
    return [("see what it did", "git diff %s^ %s" % (ref, ref)),
            ("bring it back", "git cherry-pick -n %s" % ref)]


class Best(Record):
    """The best state so far under keep: better (SPEC 22): the work tree as a commit (the
    commit itself when git.commit made one), the index as a tree of its own, its verify
    result (None: not known -- the next judged attempt sets it), and HEAD then (None: an
    unborn branch)."""

    commit: str
    index: str
    result: Verified | None
    head: str | None


class Keeper:
    """keep: better (SPEC 22), its one owner: the best state so far -- the tree before
    iteration 1, then after each attempt kept -- under refs/rooda/best/<session>, and its
    verify result; whether an attempt's result is worse (confirmed by a second run before
    anything moves), the set-aside that keeps a worse attempt under its own ref and puts
    the tree back without harm, and the words for both. The loop asks it; nothing else
    reads the setting. A ref that exists is never moved or overwritten: its own names are
    the first free ones (`-2`, `-3`, ...)."""

    BETTER = "better"               # the setting's word for it: nothing else compares it
    ref = ""                        # refs/rooda/best/<session> (or the first free name)

    def __init__(self, plan: RunPlan, run_git: RunGit, session: str) -> None:
        self.plan, self.run_git, self.session = plan, run_git, session
        self.best: Best | None = None

    @classmethod
    def wanted(cls, plan: RunPlan) -> bool:
        return plan.keep == cls.BETTER

    @classmethod
    def needs(cls, plan: RunPlan, repo: GitRepository | None) -> str:
        """What keep: better lacks to run here, for the checks before a run; "" when nothing."""
        if not cls.wanted(plan):
            return ""
        if not plan.verify:
            return "needs verify: it keeps what verify says is no worse"
        return "" if repo else "needs a git repository (run 'git init', or keep: all)"

    def plumb(self, args: List[str], env: Env | None = None, stdin: str = "") -> str:
        """A git command keep: better cannot do without: its output, or a RoodaError with
        git's words -- the run stops rather than lose or mix up work. Paths are literal."""
        result = self.run_git(args, dict(env or git_environment(), GIT_LITERAL_PATHSPECS="1"), stdin=stdin,
                              finish=True)
        if result.exit_code != 0:
            raise RoodaError("keep: better: git %s failed: %s" % (args[0], result.message()))
        return result.out

    def create(self, name: str, commit: str) -> str:
        """`name`, or the first free one after it, made to hold `commit` (never moved)."""
        for ref in [name] + ["%s-%d" % (name, n) for n in range(2, 100)]:
            if self.run_git(["update-ref", ref, commit, ""], finish=True).exit_code == 0:
                return ref
        raise RoodaError("keep: better: no free ref for %s" % name)

    def start(self, baseline: Verified | None, resumed: Fields | None) -> None:
        """The best state before iteration 1 (the tree as it is, with verify's baseline) or,
        resumed, the session's kept one with what verify said of it -- or, when none is
        left (it never kept one, or git lost it), the tree as it is with a result not known."""
        kept = (resumed or {}).get("kept")
        if kept and self.run_git(["cat-file", "-e", kept + "^{commit}"], finish=True).exit_code == 0:
            said = self.plumb(["log", "-1", "--format=%(trailers:key=Rooda-Index,valueonly)%x00"
                               "%(trailers:key=Rooda-Head,valueonly)%x00%T", kept]).split("\0")
            index, head = said[0].strip() or said[2].strip(), said[1].strip() or kept  # (a commit of its own)
            self.best = Best(kept, index, (resumed or {}).get("kept_verify"), None if head == "-" else head)
        else:
            self.keep("before iteration 1", None if resumed else baseline)
        assert self.best
        self.ref = self.create("refs/rooda/best/" + self.session, self.best.commit)

    def worse(self, said: Verified) -> str:
        """The figure that makes a verify result worse than the best state's (SPEC 22); ""."""
        return said.worse_than(self.best.result) if self.best and self.best.result else ""

    def set_aside_if_worse(self, number: int, confirmed: Verified) -> Tuple[str, str | None]:
        """A worse result confirmed by verify's second run: the attempt set aside (its
        reason and ref); ("", None) when the second run is no worse (a flaky test sets no
        work aside)."""
        figure = self.worse(confirmed)
        if not figure or not self.best or not self.best.result:
            return "", None
        ref = self.set_aside(number, self.best)
        return "verify %s → %s: %s; set aside as %s (%s brings it back)" % (
            self.best.result.words(), confirmed.words(), figure, ref, recovery(ref)[1][1]), ref

    def keep(self, label: str, said: Verified | None) -> str:
        """An attempt kept (not set aside), or the tree before iteration 1: the best state from
        now on, its verify result `said` -- none where verify did not judge it (a protected
        path put back, a timeout): the next judged attempt sets it (issue 43). Its commit."""
        repo = self.plan.repo
        assert repo
        tree, index, head = self.snapshot(), self.plumb(["write-tree"]).strip(), read_head(repo)
        if head and tree == index and self.plumb(["rev-parse", head + "^{tree}"]).strip() == tree:
            commit = head  # (git.commit made it, and nothing else is in the tree: the commit itself)
        else:
            commit = self.commit_tree(tree, "rooda: the best state, %s\n\nRooda-Index: %s\nRooda-Head: %s" % (
                label, index, head or "-"), head)
        self.best = Best(commit, index, said, head)
        if self.ref:
            self.plumb(["update-ref", self.ref, commit])
        return commit

    def snapshot(self, drop: Sequence[str] = (), add: Sequence[str] = ()) -> str:
        """The work tree as it is (tracked and untracked files, not ignored ones nor rooda's
        logs) as a tree: less `drop`, with `add` though ignored."""
        repo = self.plan.repo
        assert repo

        def adjust(env: Env) -> None:
            for args, paths in ((["rm", "--cached", "-q", "--ignore-unmatch"], drop), (["add", "-f"], add)):
                if paths:
                    self.plumb(args + ["--pathspec-from-file=-", "--pathspec-file-nul"], env,
                               "".join(path + "\0" for path in paths))
        tree, problem = worktree_tree(self.run_git, repo, self.plan.log_dir, adjust)
        if tree is None:
            raise RoodaError("keep: better: " + str(problem))
        return tree

    def commit_tree(self, tree: str, message: str, parent: str | None) -> str:
        env = dict(git_environment(), GIT_AUTHOR_NAME="rooda", GIT_AUTHOR_EMAIL="rooda@localhost",
                   GIT_COMMITTER_NAME="rooda", GIT_COMMITTER_EMAIL="rooda@localhost")  # (rooda's own objects)
        parents = ["-p", parent] if parent else []
        return self.plumb(["commit-tree", tree, "-m", message] + parents, env).strip()

    def hidden(self, best: Best, tree: str) -> Tuple[List[str], List[str]]:
        """Where the attempt changed the ignore rules (SPEC 22 rev 6: the best state's decide):
        the files it added that the best state's rules ignore (a person's `.env`: not its to
        take), and those it hid that they do not (its own, set aside with it)."""
        rules = self.plumb(["ls-tree", "-r", "-z", "--full-name", best.commit]).split("\0")
        rules = [entry for entry in rules if entry.endswith(("\t.gitignore", "/.gitignore"))]
        if rules == [entry for entry in self.plumb(["ls-tree", "-r", "-z", "--full-name", tree]).split("\0")
                     if entry.endswith(("\t.gitignore", "/.gitignore"))]:
            return [], []  # (the same rules: what git said is what they say)
        import shutil
        import tempfile
        shadow = tempfile.mkdtemp(prefix="rooda-rules-")
        try:
            for entry in rules:
                blob, path = entry.split(None, 3)[2], entry.split("\t", 1)[1]
                os.makedirs(os.path.dirname(os.path.join(shadow, path)), exist_ok=True)
                with open(os.path.join(shadow, path), "w") as stream:
                    stream.write(self.plumb(["cat-file", "blob", blob]))
            added = self.plumb(["diff", "--name-only", "-z", "--relative", "--diff-filter=A", best.commit,
                                tree])
            ignored = self.plumb(["ls-files", "-z", "--others", "--ignored", "--exclude-standard",
                                  "--directory"])
            top = self.plan.repo.top  # type: ignore[union-attr]
            prefix = os.path.relpath(self.plan.cwd, top).replace(os.sep, "/") + "/"
            prefix = "" if prefix == "./" else prefix
            asked = [path for path in added.split("\0") + ignored.split("\0") if path]
            said = self.run_git(["--work-tree=" + shadow, "check-ignore", "--no-index", "-z", "--stdin"],
                                stdin="".join(prefix + path + "\0" for path in asked), finish=True).out
            out = {path[len(prefix):] for path in said.split("\0")}
            return ([path for path in added.split("\0") if path and path in out],
                    [path for path in ignored.split("\0") if path and path not in out])
        finally:
            shutil.rmtree(shadow, ignore_errors=True)

    def set_aside(self, number: int, best: Best) -> str:
        """An attempt worse than the best state (SPEC 22, rev 6): its whole work tree (by the
        best state's ignore rules) kept as a commit on the best state under refs/rooda/
        attempts/<session>/<iteration>, the agent's own commits under refs/rooda/commits/...,
        then what it changed under the run directory put back to the best state -- the
        files it added removed (they are in the ref), no other file rewritten, nothing
        through a link, submodules and files git is told to leave alone left as they are --
        and the branch it moved put back. The refs come first: killed midway, nothing is
        lost. Returns the attempt's ref."""
        repo, plan = self.plan.repo, self.plan
        assert repo
        drop, hidden = self.hidden(best, self.snapshot())  # (what the attempt's own rules showed or hid)
        commit = self.commit_tree(self.snapshot(drop, hidden), "rooda: attempt %d set aside (its verify"
                                  " result was worse)" % number, best.commit)
        ref = self.create("refs/rooda/attempts/%s/%d" % (self.session, number), commit)
        head = read_head(repo)
        if head != best.head and head:  # the agent committed: its commits kept, its branch put back
            self.create("refs/rooda/commits/%s/%d" % (self.session, number), head)
            self.plumb(["update-ref", "-m", "rooda: attempt %d set aside" % number, "HEAD"] +
                       ([best.head] if best.head else ["-d"]))  # (an unborn branch is unborn again)
        changed = self.plumb(["diff", "--name-status", "-z", "--no-renames", "--relative", best.commit,
                              commit]).split("\0")
        added = [path for status, path in zip(changed[::2], changed[1::2]) if status == "A"]
        for path in sorted(added, reverse=True):
            here = clear_way(plan.cwd, path, False)
            if here and os.path.lexists(here) and not os.path.isdir(here):  # (a nested repository stays)
                os.unlink(here)
            folder = os.path.dirname(here or plan.cwd)
            while folder.startswith(os.path.join(plan.cwd, "")) and not os.listdir(folder):  # (its folders)
                os.rmdir(folder)
                folder = os.path.dirname(folder)
        others = [path for status, path in zip(changed[::2], changed[1::2]) if status != "A"]
        staged = self.plumb(["diff", "--cached", "--name-only", "-z", "--relative", best.index]).split("\0")
        for source, where, paths in ((best.commit, "--worktree", others),
                                     (best.index, "--staged", others + staged)):
            if any(paths):
                self.plumb(["restore", "--source=" + source, where, "--no-recurse-submodules",
                            "--pathspec-from-file=-", "--pathspec-file-nul"],
                           stdin="".join(path + "\0" for path in paths if path))
        return ref


# ==== 15. Reporting ===================================================
# What a run tells people on stderr (SPEC 5, 14): `[HH:MM:SS]` progress lines, reason
# lines, and a status line on a terminal (redrawn once a second, erased before any other
# line) or heartbeat lines off one -- all through an Outlet, a writer thread per stream,
# so a reader that stops reading never blocks the loop.

OUTLET_BUFFER_BYTES = 8 << 20  # output held for a reader that is not reading, then dropped
# At the end of a run, how long a stalled reader is waited for before it is given up.
OUTLET_STALL_SECONDS = 2.0
STATUS_LINE_SECONDS = 1.0  # between redraws of the status line
ERASE_LINE = "\r\033[K"  # back to the start of the line, and erase it


class Outlet:
    """One of rooda's own output streams during a run, written by a thread of its own."""

    size = 0                       # bytes queued or being written
    closing = False
    broken = False                 # the reader went away for good (EPIPE)
    dropped = 0                    # bytes dropped since the reader last read
    on_trouble: Say | None = None
    logged = True                  # a session log keeps what is dropped here

    def __init__(self, stream: TextIO, name: str) -> None:
        import threading
        self.stream, self.name = stream, name
        try:
            stream.flush()
            self.fd: int | None = stream.fileno()
            self.tty = os.isatty(self.fd)
        except (AttributeError, OSError, ValueError):
            self.fd, self.tty = None, False  # e.g. an in-memory stream: written directly
        self.chunks: "collections.deque[bytes]" = collections.deque()
        self.lock = threading.Condition()
        self.thread: threading.Thread | None = None

    def write(self, data: bytes) -> None:
        if self.stream is None:  # started with the stream closed (`>&-`)
            if not self.broken and self.on_trouble:
                self.on_trouble("%s is closed; agent output is no longer shown (the loop goes on)"
                                % self.name)
            self.broken = True
            return
        if self.fd is None:
            with _suppress(OSError, ValueError):
                buffer = getattr(self.stream, "buffer", None)
                if buffer is not None:
                    buffer.write(data)
                else:
                    self.stream.write(_decode(data))
                self.stream.flush()
            return
        trouble = None
        with self.lock:
            if self.broken:
                return
            if self.size + len(data) > OUTLET_BUFFER_BYTES:
                if not self.dropped:
                    trouble = ("%s is not being read; output is dropped from it until it is%s"
                               % (self.name, " (the session log keeps everything)" if self.logged
                                  else " (with --no-log it is lost)"))
                self.dropped += len(data)
            else:
                self.chunks.append(data)
                self.size += len(data)
                if not self.thread:
                    import threading
                    self.thread = threading.Thread(target=self._drain, daemon=True)
                    self.thread.start()
                self.lock.notify()
        if trouble and self.on_trouble:
            self.on_trouble(trouble)

    def _drain(self) -> None:
        assert self.fd is not None
        while True:
            with self.lock:
                while not self.chunks and not self.closing:
                    self.lock.wait()
                if not self.chunks:
                    return
                chunk = self.chunks.popleft()
            error = None
            try:
                view = memoryview(chunk)
                while view:
                    try:
                        view = view[os.write(self.fd, view):]
                    except BlockingIOError:  # a parent made the pipe non-blocking: wait
                        import select
                        select.select([], [self.fd], [], 1.0)
            except OSError as exc:
                error = exc
            with self.lock:
                self.size -= len(chunk)
                if error is not None:
                    self.broken = True
                    self.chunks.clear()
                    self.size = 0
                elif self.dropped and not self.chunks:
                    note = "\n[rooda: %s of output not shown here%s]\n" % (
                        format_bytes(self.dropped), "; the session log has it" if self.logged else "")
                    self.dropped = 0
                    self.chunks.append(note.encode())
                    self.size += len(note)
                self.lock.notify_all()
            if error is not None:
                if self.on_trouble:
                    self.on_trouble("%s is closed; agent output is no longer shown (the loop goes on)"
                                    % self.name)
                return

    def close(self, stall: float = OUTLET_STALL_SECONDS, limit: float | None = None) -> None:
        """Write out what is queued, unless the reader has stalled for `stall` seconds or
        `limit` seconds have passed (an interrupted run must be gone within a second)."""
        with self.lock:
            self.closing = True
            self.lock.notify_all()
            size, since = self.size, time.monotonic()
            deadline = since + limit if limit is not None else None
            while self.size and not self.broken and self.thread:
                self.lock.wait(0.05)
                now = time.monotonic()
                if deadline is not None and now >= deadline:
                    break
                if self.size != size:
                    size, since = self.size, now
                elif now - since > stall:
                    break  # nobody reads it: the log has everything


def _terminal_width(fd: int | None) -> int:
    """The terminal's columns, else $COLUMNS, else 80 (a new pseudo-terminal says 0)."""
    try:
        columns = os.get_terminal_size(2 if fd is None else fd).columns
    except OSError:
        columns = 0
    if columns <= 0:
        try:
            columns = int(os.environ.get("COLUMNS", "0"))
        except ValueError:
            columns = 0
    return columns if columns > 0 else 80


def _fit(text: str, columns: int) -> str:
    """A status line cut to fit in `columns` terminal columns (SPEC 14 rev 4): the tool's
    detail gives way first (to 20 columns), then the tool count, then the rest of the
    detail, then the end, each with an ellipsis --
    so the iteration, the elapsed time and the tool's timer stay, and the line changes
    every second. A CJK character or an emoji takes two columns, a combining mark none
    (len() would let the line wrap)."""
    import unicodedata

    def width(line: str) -> int:
        return sum(1 + (unicodedata.east_asian_width(char) in "WF") for char in line
                   if not unicodedata.combining(char))

    def cut(line: str, room: int) -> str:
        while width(line) > max(room, 1) - 1:
            line = line[:-1]
        return line + "…"
    for drop, floor in ((False, 20), (True, 8)):  # (the tool count goes when the detail gets short)
        parts = text.split(" · ")
        if drop and len(parts) > 3:
            del parts[2]
        for index, part in enumerate(parts):
            over = width(" · ".join(parts)) - columns
            if part.startswith("→ ") and over > 0:
                parts[index] = cut(part, max(width(part) - over, floor))
        if width(" · ".join(parts)) <= columns:
            return " · ".join(parts)
    return cut(" · ".join(parts), columns)


class Progress:
    """The loop's progress lines on stderr, each `[HH:MM:SS] message` in local time, and
    what is under way (SPEC 14): a status line on a terminal that can erase a line,
    redrawn once a second; else a heartbeat line when `heartbeat` seconds passed since
    the last line printed, whatever step (agent, gate, git, wait) is under way. One
    ticker, fired by whatever the loop waits in, drives both. Quiet prints only ERROR
    lines, warnings and the interruption line."""

    activity: Activity | None = None
    on_tick: Callable[[], None] | None = None  # the run's live activity file

    def __init__(self, err: Outlet, verbosity: int = NORMAL, color: bool = False,
                 heartbeat: float = 0, ticking: bool = False) -> None:
        import threading
        self.err, self.verbosity, self.color = err, verbosity, color
        # A terminal that can erase a line; TERM=dumb (or none) is treated as no terminal.
        terminal = err.tty and os.environ.get("TERM", "dumb") != "dumb"
        # The status line: neither quiet nor verbose (the agent's own output would tear
        # it); heartbeat lines: anywhere else, unless quiet.
        self.live = terminal and verbosity == NORMAL
        self.heartbeat = heartbeat if not terminal and verbosity >= NORMAL else 0
        # `ticking`: something else wants the tick too (the run's live activity file).
        wanted = self.live or self.heartbeat or ticking
        self.ticker = Ticker(STATUS_LINE_SECONDS, self._tick) if wanted else None
        self.last_line, self.drawn = time.monotonic(), False
        # Reentrant: a warning from the outlet (its reader stopped) may come while a line
        # is being written under this lock, by the same thread.
        self.lock = threading.RLock()

    # -- lines ------------------------------------------------------------------------

    def _emit(self, text: str) -> None:
        with self.lock:
            if self.drawn:
                text = ERASE_LINE + text
                self.drawn = False
            self.err.write(text.encode("utf-8", "replace"))

    def always(self, message: str) -> None:
        """A progress line whatever the verbosity (the interruption line)."""
        self.last_line = time.monotonic()
        self._emit("[%s] %s\n" % (time.strftime("%H:%M:%S"), message))

    def _paint(self, text: str, code: str) -> str:
        return "\033[%sm%s\033[0m" % (code, text) if self.color else text

    def info(self, message: str) -> None:
        if self.verbosity >= NORMAL:
            self.always(message)

    def indented(self, text: str, even_quiet: bool = False) -> None:
        """A line under the previous one, no clock (a failing iteration's reason)."""
        if self.verbosity >= NORMAL or even_quiet:
            self._emit(text + "\n")

    def warn(self, message: str) -> None:
        self.always(self._paint("WARNING:", "33") + " " + message)

    def error(self, message: str) -> None:
        self.always(self._paint("ERROR:", "31") + " " + message)

    def outcome(self, outcome: str) -> str:
        code = {SUCCESS: "32", COMPLETED: "32", LIMITED: "33", UNAVAILABLE: "33"}.get(outcome, "31")
        return self._paint(outcome, code)

    # -- the activity under way -------------------------------------------------------------

    def begin(self, activity: Activity) -> Ticker | None:
        """A step starts (the agent, a gate, git, a wait). Returns the ticker whoever
        waits must fire."""
        self.activity = activity
        return self.ticker

    def end(self) -> None:
        self.activity = None
        with self.lock:
            if self.drawn:
                self.err.write(ERASE_LINE.encode())
                self.drawn = False

    def _tick(self) -> None:
        if self.on_tick:
            self.on_tick()
        if not self.activity:
            return
        status, beat = self.activity.lines()
        if self.live:
            text = _fit(status, _terminal_width(self.err.fd) - 1)
            with self.lock:
                self.err.write((ERASE_LINE + text).encode("utf-8", "replace"))
                self.drawn = True
        elif self.heartbeat and time.monotonic() - self.last_line >= self.heartbeat:
            self.info(beat)


def _same_file(first: TextIO, second: TextIO) -> bool:
    try:
        one, two = os.fstat(first.fileno()), os.fstat(second.fileno())
    except (AttributeError, OSError, ValueError):
        return False
    return (one.st_dev, one.st_ino) == (two.st_dev, two.st_ino)


def notify_env(plan: RunPlan, log: SessionLog | None, event: str, status: str, reason: str,
               iteration: object = "", iterations: object = "", cost: float | None = None,
               exit_code: str = "") -> Env:
    """What a `notify` command is told (SPEC 16): the ROODA_* variables of an event, for
    the run's own calls and for the guardian's should rooda die."""
    return {"ROODA_EVENT": event, "ROODA_STATUS": status, "ROODA_EXIT_CODE": exit_code,
            "ROODA_REASON": reason,
            "ROODA_PROCEDURE": plan.procedure, "ROODA_ITERATION": str(iteration or ""),
            "ROODA_ITERATIONS": str(iterations), "ROODA_COST_USD": "" if cost is None else "%.2f" % cost,
            "ROODA_LOG": log.path if log else "", "ROODA_SESSION": log.files.jsonl if log else ""}


class Notify:
    """The `notify` command at each event of notify_on (SPEC 16), run like a gate; and what
    the guardian tells it should rooda die now, killed without a chance to say so itself."""

    def __init__(self, plan: RunPlan, gates: GateRunner, log: SessionLog | None,
                 progress: Progress, guard: SignalGuard) -> None:
        self.plan, self.gates, self.log, self.progress, self.guard = plan, gates, log, progress, guard

    def guardian(self, state: LoopState, during: int | None, when: str) -> None:
        """The figures the death notify would give as of this moment (SPEC 16 rev 5)."""
        if self.plan.notify:
            _HELPERS.tell(notify_env(self.plan, self.log, "session_end", "died",
                                     "rooda was killed or crashed " + when, during or state.finished,
                                     state.finished, state.usage.get("cost_usd")))

    def __call__(self, event: str, status: str, reason: str, iteration: int | None, state: LoopState,
                 exit_code: str = "", **more: str) -> None:
        """Run it for `event` (`more`: ROODA_WAIT_KIND, ROODA_WAIT_UNTIL of a wait), cleaned
        text all: bounded (30 s, 5 s once a signal came: a second one ends it), its failure
        one warning that changes nothing else."""
        plan = self.plan
        if not plan.notify or event not in plan.notify_on:
            return
        told = dict(notify_env(plan, self.log, event, status, reason, iteration, state.finished,
                               state.usage.get("cost_usd"), exit_code), **more)
        # (cleaned and bounded: an agent's 128 KiB explanation must not keep the command from starting)
        env = dict(os.environ, **{name: clean(value)[:FEEDBACK_TAIL_BYTES] for name, value in told.items()})
        late = self.guard.signum is not None
        limits = Limits(timeout=5 if late else 30, grace=1, after_signal=late)
        result = self.gates.shell(plan.notify, limits, env)
        if result.exit_code != 0:
            said = telling_line(_decode(result.output))
            self.progress.warn("notify: `%s` %s%s" % (_one_line(plan.notify, 80), "did not finish in time"
                               if result.timed_out else "exited %d" % result.exit_code, said and ": " + said))


# ==== 16. The loop ====================================================
# One _Run per run. before_iteration is SPEC 5's checklist, in its order. An iteration
# is a few steps a reader can hold: begin (prompt, HEAD, the log's header), run the
# agent, judge (provider trouble, verify, the outcome, git), count (the counters),
# announce (progress lines, the log's footer, notify), and decide what comes next (a wait, a stop, or the
# next iteration). run_loop opens and closes the session.

class RunPlan(Record):
    """Everything a run needs, resolved from the configuration and the command line:
    `prompt_file` for `prompt <file>` (read afresh each iteration), `prompt_text` for
    `prompt -` (read once); `log_dir` None with --no-log; `repo` None outside git or when
    nothing needs it."""

    procedure: str
    fragments: Dict[str, List[dict]]
    context: List[str]
    max_iterations: int | None
    signals: Dict[str, List[str]]
    agent: AgentCommand | None
    env: Env
    fallbacks: List[AgentCommand]  # `fallback`'s agents, in order (SPEC 23)
    verbosity: int
    color: bool
    cwd: str
    settings: Fields        # every row of SETTINGS, read as plan.<key>
    sources: Dict[str, Where]  # where each came from
    gates: Gates
    log_dir: str | None
    prompt_file: str | None
    prompt_text: str | None
    argv: Tuple[str, ...] = ()      # rooda's own command line (for `resume`)
    config_files: Tuple[str, ...] = ()  # the config files it read (`protect`'s :rooda)
    context_files: Tuple[str, ...] = ()  # the --context files it reads (:rooda too)
    repo: GitRepository | None = None

    def __getattr__(self, name: str) -> Any:
        """A setting by its key: plan.delay, plan.max_cost."""
        settings = self.__dict__.get("settings")
        if settings is None or name not in settings:
            raise AttributeError(name)
        return settings[name]


class LoopState:
    """The loop's mutable state: counters, the stop, and what the next iteration needs."""

    # Iterations finished (the next is finished + 1), of them failed, and failed in a row.
    finished = failures = consecutive_failures = 0
    stop: str | None = None     # how the run stopped: a key of STOPS
    reason = ""                    # why, in words (the log summary, session_end)
    previous: Told | Baseline | None = None  # what the next prompt is told of
    interrupted_by: int | None = None
    interrupted_during: int | None = None
    same_error = 0                 # consecutive failures with one fingerprint
    fingerprint: str | None = None
    unchanged = 0                  # consecutive iterations that changed nothing
    last_reason: Reason | None = None  # ("exit 1", "API Error: ...")
    waits = 0                      # consecutive attempts the provider stopped
    waits_since: float | None = None  # when the first of them ended
    waiting: Wait | None = None    # the wait under way (a signal may come during it)
    step = ""                      # a step between iterations a signal may come during, in words
    cut_short = False              # the last attempt was: a limit, an outage, a timeout, a death
    baseline: Baseline | None = None  # what verify said before iteration 1 (SPEC 20)
    resumed: Fields | None = None  # what a session resumed carries over (SPEC 16)
    uncommitted: List[str] = []    # since the last commit, what earlier attempts left: `2 (protected)`
    agent_before = ""              # the agent of the last attempt, named to the next when another runs it
    answer: Fields | None = None   # the person's answer a resume brought, for the next prompt (SPEC 24)
    counts: tuple | None = None    # the test counts a verify is held to, and since when (SPEC 22)

    def __init__(self) -> None:
        self.started, self.started_wall = time.monotonic(), time.time()
        self.stuck_excerpt: List[str] = []
        self.usage: Fields = {}     # the run's totals of what the agent reported

    @property
    def status(self) -> str:
        return STOPS[self.stop].status if self.stop else "running"

    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def exit_code(self) -> int:
        code = STOPS[self.stop].exit_code if self.stop else None
        return 128 + (self.interrupted_by or signal.SIGINT) if code is None else code


class _Attempt:
    """One iteration under way: what its steps found, in the order they found it."""

    prompt = ""
    head_before: str | None = None
    tree_before: str | None = None
    result: AgentResult | None = None
    report: StreamReport | None = None
    trouble: ProviderTrouble | None = None
    check: AgentResult | None = None    # verify's run
    verified: bool | None = None
    git_problem: str | None = None
    outcome = ""
    cause: str | None = None
    reason: Reason | None = None  # the cause in words: ("exit 1", "<its line>")
    explanation = ""                       # the agent's own, when it signalled FAILURE
    needs: str | None = None               # what only the person can do or decide (SPEC 24)
    assumptions: List[str] = []            # what it decided on its own
    error_kind: str | None = None          # the typed kind of the error its CLI reported
    restored: Tuple[str, ...] = ()         # the protected paths put back (SPEC 22), and where
    kept_versions: str | None = None       # the agent's versions of them went
    drop = worse = ""                      # what its verifier's counts and result said (SPEC 22)
    set_aside: str | None = None           # the ref it was set aside under, or
    kept: str | None = None                # the best state's commit after it
    accepted: int | None = None            # the acceptance check's exit code (SPEC 22 rev 6)
    verdict: object = None                 # its schema verdict, as it gave it
    next_step: str | None = None        # what the verdict says comes next
    feedback, source = b"", "the agent's"  # what the next prompt quotes, whose

    def __init__(self, number: int, label: str, agent: AgentCommand) -> None:
        self.number, self.label, self.agent = number, label, agent  # (the agent that runs it: SPEC 23)
        self.started = time.monotonic()
        self.commit: Fields = {}            # what the git gate committed and pushed

    def told(self) -> Told:
        """What the next prompt is told of this iteration."""
        return Told(self.number, self.outcome, self.result.exit_code if self.result else 0, self.cause,
                    "%s: %s" % self.reason if self.reason else "", self.explanation, self.feedback,
                    self.source, self.next_step)


def _agent_env(plan: RunPlan, agent: AgentCommand) -> Env:
    """The agent's environment, all but ROODA_ITERATION (built once per run)."""
    # (CLAUDECODE out: a nested Claude Code session would refuse to start)
    env = {name: value for name, value in os.environ.items() if name != "CLAUDECODE"}
    env.update(agent.env, **plan.env)
    env["ROODA_PROCEDURE"] = plan.procedure
    env["ROODA_MAX_ITERATIONS"] = "" if plan.max_iterations is None else str(plan.max_iterations)
    return env


class Hold(Record):
    """Why an agent cannot go on now (SPEC 23), and until when: a wait's (a limit, an
    outage, a reserve, the pace) until it ends; a stop only the person can lift (auth,
    billing) for the session, `ends` None, with its words and what to do."""

    why: str                  # `is limited (five_hour)`, `cannot authenticate`
    ends: float | None = None  # (epoch)
    wait: Wait | None = None
    words: str = ""           # a session-long hold's: the stop's reason, should every agent have one


# What an agent the account stops is said to do when another takes over (SPEC 23).
ACCOUNT_HELD = {CAUSE_AUTH: "cannot authenticate", CAUSE_BILLING: "cannot pay", CAUSE_FATAL: "cannot go on"}


class Agents:
    """The run's agents (SPEC 23): its own, then `fallback`'s, in order, each with its
    environment, the owner of its windows and its last readings of them (SPEC 18, kept per
    owner); which one runs now, and what holds the others."""

    def __init__(self, plan: RunPlan) -> None:
        assert plan.agent
        self.commands = [plan.agent] + plan.fallbacks
        self.envs = [_agent_env(plan, each) for each in self.commands]
        self.owners = [windows_owner(each, env) for each, env in zip(self.commands, self.envs)]
        self.readings: List[Readings] = [{} for _ in self.commands]
        self.holds: Dict[int, Hold] = {}
        self.now = 0
        self.fallback = len(self.commands) > 1  # (one agent: the waits and stops of SPEC 13-18 alone)

    @property
    def agent(self) -> AgentCommand:
        return self.commands[self.now]

    @property
    def env(self) -> Env:
        return self.envs[self.now]

    @property
    def windows(self) -> Readings:
        return self.readings[self.now]

    @property
    def owner(self) -> str:
        return self.owners[self.now]

    def resume(self, held: Sequence[Fields], now: float) -> None:
        """The holds a resumed session had that have not ended (SPEC 23); one only the
        person could lift is lifted: running `resume` is the person saying it is fixed
        (if it is not, the agent meets it again at once and is held again)."""
        for hold in held:
            index, kind = self.index(hold.get("agent")), hold.get("wait")
            ends = parse_iso_time(hold.get("until"))
            if index is not None and ends is not None and ends > now and kind in WAIT_KINDS:
                why = str(hold.get("why"))
                self.holds[index] = Hold(why, ends, Wait(str(kind), str(hold.get("kind") or kind), why, ends))

    def index(self, name: object) -> int | None:
        return next((index for index, each in enumerate(self.commands) if each.name == name), None)

    def free(self, now: float) -> int | None:
        """The first agent in the order whose hold has ended, or that has none (None: every
        agent is held); the holds that ended go."""
        for index, hold in list(self.holds.items()):
            if hold.ends is not None and hold.ends <= now:
                del self.holds[index]
        return next((index for index in range(len(self.commands)) if index not in self.holds), None)

    def first_free(self) -> Hold | None:
        """The hold that ends first, as the one wait of SPEC 17 waits it: as a limit when the
        holds are of mixed kinds. None when every hold is the person's to lift."""
        waits = [hold for hold in self.holds.values() if hold.wait and hold.ends is not None]
        if not waits:
            return None
        first = min(waits, key=lambda hold: hold.ends or 0)
        kinds = {hold.wait.kind if hold.wait else CAUSE_AUTH for hold in self.holds.values()}  # (logins too)
        return first.replace(wait=first.wait.replace(kind=WAIT_LIMIT)) if len(kinds) > 1 and first.wait \
            else first

    def held(self, index: int, now: float) -> str:
        """`claude is limited (five_hour) until 21:03`, `codex cannot authenticate (for the session)`."""
        hold = self.holds[index]
        until = " until " + clock_words(hold.ends, now) if hold.ends is not None else " (for the session)"
        return "%s %s%s" % (self.commands[index].name, hold.why, until)

    def words(self) -> str:
        """Why the run stops when every hold is the person's to lift (exit 2): each one's."""
        return "every agent is held: " + "; ".join(hold.words for _, hold in sorted(self.holds.items()))


class _Run:
    """One run of the loop: the plan, its state, and where output goes."""

    during: int | None = None   # the iteration under way (for "interrupted during")
    cost_unknown_said = verdict_said = False

    def __init__(self, plan: RunPlan, progress: Progress, guard: SignalGuard,
                 log: SessionLog | None, out: Outlet | None = None,
                 err: Outlet | None = None) -> None:
        self.plan, self.progress, self.guard, self.log = plan, progress, guard, log
        self.agents = Agents(plan)
        self.state = LoopState()
        self.gates = GateRunner(plan, guard, progress, log, out, err)
        self.protected = ProtectedPaths(plan, self.gates.git) if plan.protect else None
        self.keeper = Keeper(plan, self.gates.git, self.gates.session) if Keeper.wanted(plan) else None
        self.notify = Notify(plan, self.gates, log, progress, guard)
        self.markers = signal_markers(plan.signals)
        if log:  # what is under way, for `status` in another terminal
            progress.on_tick = lambda: log.write_live(dict(
                pid=os.getpid(), iteration=self.during,
                **(progress.activity.record() if progress.activity else {})))
        self.fragment_names = [name for name, _ in prompt_sources(plan)]  # (the same every iteration)

    # -- waits and stops ---------------------------------------------------------------

    def checkpoint(self) -> None:
        """Stop at once when a signal has arrived: nothing new is started after it."""
        if self.guard.signum is not None:
            raise Interrupted(self.guard.signum)

    def wait(self, seconds: float, what: str) -> None:
        """Wait (a delay, a limit, an outage): `what · 2m13s left` counting down on the
        terminal, heartbeats off it; cut short by a signal."""
        ticker = self.progress.begin(Activity("wait", what, time.monotonic() + seconds))
        try:
            self.guard.wait(seconds, ticker)
        finally:
            self.progress.end()
        self.checkpoint()

    def stop(self, stop: str, reason: str) -> bool:
        """The run stops, for `reason` (the words of the log's summary); False, for the loop's `while`."""
        self.state.stop, self.state.reason = stop, reason
        return False

    def interrupted(self, signum: int, during: int | None) -> None:
        self.state.interrupted_by, self.state.interrupted_during = signum, during
        self.stop(STOP_INTERRUPTED, "interrupted by %s" % signal_name(signum))

    def before_iteration(self) -> bool:
        """SPEC 5's checks before an iteration, in order; False when the loop must stop."""
        plan, state = self.plan, self.state
        self.during = None
        self.checkpoint()
        # The threshold first, so that a cap of 1 with a threshold of 1 aborts (SPEC 5).
        if state.consecutive_failures >= plan.failure_threshold:
            return self.stop(STOP_ABORTED, "%d consecutive failures" % state.consecutive_failures)
        if plan.max_iterations is not None and state.finished >= plan.max_iterations:
            return self.stop(STOP_CAP, "max iterations")
        if plan.max_time is not None and state.elapsed() >= plan.max_time:
            return self.stop(STOP_TIME, "time budget")
        if plan.max_cost is not None and state.usage.get("cost_usd", 0) >= plan.max_cost:
            return self.stop(STOP_COST, "cost budget")
        if plan.done_when:
            result = self.gates.gate(GATE_DONE_WHEN, plan.done_when)
            if result.exit_code == 0:
                return self.stop(STOP_DONE_WHEN, "done_when")
            # 0 is done and every other exit "not yet" (make test exits 2, cargo test 101,
            # pytest 5): only a command that cannot run, or was killed, is an error.
            if gate_trouble(result, plan.gate_timeout):
                return self.stop(STOP_ERROR, cannot_run(GATE_DONE_WHEN, plan.done_when, result,
                                                        plan.gate_timeout))
        missing = missing_requires(plan)
        if missing:
            return self.stop(STOP_ERROR, missing)
        if plan.verify and plan.verify_baseline and state.baseline is None:
            self.gates.baseline(state)
        if self.keeper and self.keeper.best is None:
            said, counts = state.baseline, state.counts[0] if state.counts else None
            self.keeper.start(Verified(said.exit_code, said.line, counts) if said else None, state.resumed)
        if state.finished and plan.delay and not state.waits:
            pause = backoff_delay(plan.delay, plan.backoff, state.consecutive_failures)
            following = state.finished + 1
            if pause >= 1:
                self.progress.info("Waiting %s before iteration %d"
                                   % (format_budget(round(pause, 1)), following))
            self.wait(pause, "waiting before iteration %d" % following)
        if self.agents.fallback:
            return self.take_over(state.finished + 1)
        # After any wait, judged again: another window may hold too (issue 36). The same hold
        # twice means no time passed (a clock that jumped back): the iteration goes on.
        hold, held = window_hold(self.agents.windows, plan, time.time()), None
        while hold is not None and (hold.message, hold.until) != held:
            if not self.hold(hold, state.finished + 1):
                return False
            held = (hold.message, hold.until)
            hold = window_hold(self.agents.windows, plan, time.time())
        return True

    # -- when an agent runs out: another takes over (SPEC 23) ---------------------------

    def take_over(self, number: int) -> bool:
        """Before an attempt, the first agent in the order not held -- the run's own first: the
        preferred CLI comes back as soon as its hold ends --, its windows judged (a reserve
        or the pace holds it, and the next takes over at once); with every agent held, one
        wait until the first is free, or exit 2 when every hold is the person's to lift."""
        agents = self.agents
        while True:
            index = agents.free(time.time())
            if index is None:
                if not self.all_held(number):
                    return False
                continue
            if index != agents.now:
                self.switch(index)
            hold = window_hold(agents.windows, self.plan, time.time())
            if hold is None:
                return True
            agents.holds[index] = Hold(hold.held(), time.time() + bound_wait(
                hold, self.plan, 1, 0, 0, time.time()).seconds, hold)

    def give_way(self, hold: Hold, number: int) -> bool:
        """The agent now is held: the first of the order not held runs the attempt again."""
        self.agents.holds[self.agents.now] = hold
        return self.take_over(number)

    def all_held(self, number: int) -> bool:
        """Every agent is held: one wait until the first is free -- its bounds and on_limit as
        any wait's (SPEC 17) --, or exit 2 when every hold is the person's to lift."""
        agents, now = self.agents, time.time()
        self.switch(None)
        first = agents.first_free()
        if first is None or first.wait is None or first.ends is None:
            return self.stop(STOP_ACCOUNT, agents.words() + self.resume_hint())
        self.progress.info("Every agent is held: %s." % ", ".join(
            agents.held(index, now) for index in sorted(agents.holds)))
        return self.hold(first.wait, number, first.ends - now)

    def switch(self, index: int | None) -> None:
        """Another agent takes over, or none can (`index` None): said on the terminal, in the
        log (`switch`: from, to, why and until) and to notify."""
        agents, now = self.agents, time.time()
        before, held = agents.agent, agents.now in agents.holds
        to = agents.commands[index].name if index is not None else None
        # (coming back: the one it comes back from is not held, it gives way)
        hold = agents.holds.get(agents.now) or Hold("gives way: %s's hold has ended" % to)
        why = agents.held(agents.now, now) if held else "%s's hold has ended" % to
        line = "Switching to %s: %s" % (to, why)
        if index is not None:
            agents.now = index
            self.state.waits, self.state.waits_since = 0, None  # (its own waits from here)
            self.progress.info(line)
        if self.log:
            self.log.text(line + "\n" if index is not None else "")
            self.log.event("switch", to=to, why=hold.why, back=not held, **{
                "from": before.name, "until": iso_time(hold.ends) if hold.ends else None,
                "wait": hold.wait.kind if hold.wait else None, "kind": hold.wait.name if hold.wait else None})
        self.notify("switch", "running", why, self.state.finished + 1, self.state,
                    ROODA_SWITCH_FROM=before.name, ROODA_SWITCH_TO=to or "")

    def resume_hint(self) -> str:
        """How to go on once the person fixed what stopped the run."""
        return "; then: " + resume_command(self.log.files, self.plan.cwd) if self.log else ""

    # -- one iteration ------------------------------------------------------------------

    def iteration(self) -> bool:
        """Run one iteration and its gates; False when the loop must stop."""
        attempt = self.begin()
        try:
            self.run_agent_step(attempt)
            self.judge(attempt)
        except Interrupted:
            try:
                self.put_back(attempt)  # (protected paths before rooda exits: SPEC 22)
            finally:  # (a restore that failed is said as the run's end; the attempt is logged still)
                self.log_end(attempt, OUTCOME_INTERRUPTED)
            raise
        if attempt.outcome in (LIMITED, UNAVAILABLE):
            return self.wait_out_provider(attempt)
        self.count(attempt)
        self.announce(attempt)
        return self.next_step(attempt)

    def begin(self) -> _Attempt:
        """The prompt, HEAD and the work tree before the agent runs; the log's header."""
        plan, log = self.plan, self.log
        number = self.state.finished + 1
        cap = plan.max_iterations
        agent, state = self.agents.agent, self.state
        attempt = _Attempt(number, "%d/%d" % (number, cap) if cap is not None else "%d" % number, agent)
        # What an attempt cut short (a limit, an outage, a timeout, a death) left uncommitted.
        left = self.gates.uncommitted() if state.cut_short else []
        state.cut_short = False
        before = state.agent_before if state.agent_before not in ("", agent.name) else ""
        prompt = build_prompt(plan, state.previous, left, before, state.answer)
        state.agent_before, state.answer = agent.name, None  # (the person's answer: once)
        size = len(prompt.encode("utf-8"))
        if any(PROMPT_TOKEN in part for part in agent.argv) and size > PROMPT_ARG_LIMIT:
            raise RoodaError("the prompt (%d bytes) is too long to pass as one argument with"
                             " {prompt}; use {prompt_file} in the agent command instead" % size)
        # HEAD is read when a git gate or the log needs it; else no git at all.
        attempt.head_before = read_head(plan.repo) if plan.repo else None
        attempt.tree_before = self.gates.fingerprint() if plan.gates.no_change else None
        if self.protected:
            self.protected.record()
        self.checkpoint()
        self.during = number  # from here, an interruption is "during iteration N"
        self.notify.guardian(self.state, number, "during iteration %d" % number)
        attempt.started = time.monotonic()
        attempt.prompt = prompt
        self.progress.info("Iteration %s starting..." % attempt.label)
        if log:
            log.iteration_start(number, plan.procedure, prompt, self.fragment_names, agent.name)
        return attempt

    def run_agent_step(self, attempt: _Attempt) -> None:
        """The agent, once; its output read and its usage counted (spent whatever happens
        next, an interruption included)."""
        plan, label, started, agents = self.plan, attempt.label, attempt.started, self.agents
        sinks = (self.gates.stdout_sink, self.gates.stderr_sink, self.gates.log_sink)
        reader = make_reader(plan, attempt.agent.format, attempt.prompt, sinks,
                             self.log.write_agent_stream if self.log else None, self.progress.warn)
        env = dict(agents.env, ROODA_ITERATION=str(attempt.number))
        cli = attempt.agent.cli
        left = None if plan.max_cost is None else plan.max_cost - self.state.usage.get("cost_usd", 0)
        argv, schema = agent_argv(attempt.agent.argv, cli, left, plan.verdict == "schema")
        ticker = self.progress.begin(Activity("agent", since=started, reader=reader, label=label,
                                              windows=agents.windows))
        try:
            attempt.result = result = run_agent(
                argv, attempt.prompt, env=env, cwd=plan.cwd, on_stdout=reader.on_stdout,
                on_stderr=reader.on_stderr, guard=self.guard, ticker=ticker,
                limits=Limits(timeout=plan.iteration_timeout, idle=plan.idle_timeout, grace=plan.kill_grace,
                              stop_signal=cli.stop_signal if cli else signal.SIGTERM))
        finally:
            self.progress.end()
            if schema:
                with _suppress(OSError):
                    os.unlink(schema)
        readings, attempt.report = left_behind(cli, reader.session, env, reader.finish())
        report = attempt.report
        note_windows(agents.windows, list(reader.windows) + readings, self.log, agents.owner,
                     attempt.agent.name)
        if report.usage:
            add_usage(self.state.usage, report.usage)
        if result.interrupted is not None:
            raise Interrupted(result.interrupted)

    def judge(self, attempt: _Attempt) -> None:
        """The outcome and its cause: the provider's trouble first (a limit beats a SUCCESS
        said before it: the iteration runs again and says so again if it was done; verify
        does not judge work the provider cut off), then verify, then git."""
        plan = self.plan
        cli = attempt.agent.cli
        problem = take_verdict(attempt, cli) if plan.verdict == "schema" else ""
        if problem and not self.verdict_said:
            self.verdict_said = True
            self.progress.warn("iteration %d: no verdict from the agent (%s); its promise markers, if any,"
                               " decide instead" % (attempt.number, problem))
        result, report = attempt.result, attempt.report
        assert result and report
        attempt.feedback, attempt.error_kind = report.tail, typed_kind(report, cli)[0]
        attempt.trouble = trouble = find_provider_trouble(
            report, result.exit_code, SIGNAL_SUCCESS in report.signals, time.time(), cli)
        self.put_back(attempt)  # (what the agent did to protected paths is undone before anything judges it)
        if not trouble and not attempt.restored and plan.verify and not result.timed_out:
            self.verify(attempt)
        if plan.accept and SIGNAL_SUCCESS in report.signals and attempt.verified is not False and not (
                trouble or attempt.restored or attempt.set_aside or result.timed_out):  # (SPEC 22 rev 6)
            attempt.accepted = self.gates.gate(GATE_ACCEPT, plan.accept).exit_code

        def classify(git_failed: bool = False) -> None:
            attempt.outcome, attempt.cause = classify_outcome(
                result.exit_code, report.signals, result.timed_out, attempt.verified,
                reported_error=report.error is not None, cut_short=report.cut_short,
                trouble=trouble.kind if trouble else None, git_failed=git_failed,
                protected=bool(attempt.restored), worse=bool(attempt.set_aside),
                accepted=None if attempt.accepted is None else attempt.accepted == 0)
        classify()
        git = plan.gates.commit or plan.gates.push
        if git and attempt.outcome in (SUCCESS, COMPLETED) and plan.repo:
            message = commit_message(plan, self.gates.session, attempt.number, attempt.label, report,
                                     self.state.uncommitted)
            attempt.git_problem, attempt.commit = commit_and_push(self.gates.git, plan.repo, plan.gates,
                                                                  message, plan.log_dir)
            if attempt.git_problem:
                classify(git_failed=True)
                attempt.feedback, attempt.source = attempt.git_problem.encode("utf-8"), "git's"
        if self.keeper and not attempt.set_aside and attempt.outcome not in (LIMITED, UNAVAILABLE):
            attempt.kept = self.keeper.keep("after iteration %d" % attempt.number,
                                            Verified.of(attempt.check) if attempt.check else None)
        attempt.needs, attempt.assumptions = for_the_person(attempt.verdict, report.said, attempt.prompt)
        if SIGNAL_FAILURE in report.signals and not attempt.explanation:  # (what it needs, else its words)
            attempt.explanation = attempt.needs or explanation(report.said, plan.signals["failure"])
        if attempt.cause is not None:
            attempt.reason = cause_words(attempt, plan, self.markers)
            baseline = self.state.baseline
            if attempt.cause == CAUSE_VERIFY and baseline and baseline.fingerprint is not None and \
                    baseline.fingerprint == verify_fingerprint(attempt.feedback):
                attempt.reason = (attempt.reason[0], attempt.reason[1] + " (as before iteration 1)")

    def verify(self, attempt: _Attempt) -> None:
        """verify after an iteration (SPEC 6), and what SPEC 22 asks of its result: with
        test_counts: guard, a SUCCESS whose verifier ran fewer tests (or skipped more, or
        printed no counts) than it did before iteration 1 is rejected, any other such drop
        said; with keep: better, a result worse than the best state's, confirmed by a second
        run, sets the attempt aside and puts the tree back."""
        plan, state = self.plan, self.state
        assert attempt.report and plan.verify
        attempt.check = check = self.gates.gate(GATE_VERIFY, plan.verify)
        said = Verified.of(check)
        attempt.verified = check.exit_code == 0
        drop = counts_drop(state.counts if plan.test_counts == "guard" else None, said)
        if said.counts and not state.counts:  # (without a baseline, the first counts read stand in for it)
            state.counts = (said.counts, "at iteration %d" % attempt.number)
        if drop and attempt.verified and SIGNAL_SUCCESS in attempt.report.signals:
            attempt.verified, attempt.drop = False, drop  # (no completion: cause verify)
        elif drop:
            self.progress.warn("iteration %d: verify %s" % (attempt.number, drop))
        if self.keeper and self.keeper.worse(said):
            again = self.gates.gate(GATE_VERIFY, plan.verify, "again")  # (a flaky test sets no work aside)
            confirmed = Verified.of(again)
            attempt.worse, attempt.set_aside = self.keeper.set_aside_if_worse(attempt.number, confirmed)
            if not attempt.set_aside:  # (kept: a drop of its counts rejected a SUCCESS, as it would have)
                attempt.check, attempt.verified = again, again.exit_code == 0 and not attempt.drop
        if not attempt.verified:
            attempt.feedback, attempt.source = attempt.check.output, "the verifier's (`%s`)" % plan.verify

    def put_back(self, attempt: _Attempt) -> None:
        """The protected paths the agent changed, put back (SPEC 22) once an attempt ends, its
        versions kept where no test runner or commit finds them (git's own directory, a
        hidden one beside the logs, or a private one) under a name no attempt had yet."""
        plan, log = self.plan, self.log
        if not self.protected or attempt.restored:
            return
        where = os.path.join(self.protected.copies, "agent")
        if plan.repo or log:
            where = os.path.join(plan.repo.git_dir if plan.repo else log.files.directory,  # type: ignore
                                 "rooda", "%s-protected" % self.gates.session)
        kept = next(path for n in range(1, 1000) for path in [os.path.join(where, "%d%s" % (
            attempt.number, "-%d" % n if n > 1 else ""))] if not os.path.lexists(path))
        attempt.restored = self.protected.restore(kept)
        attempt.kept_versions = kept if attempt.restored else None
        if attempt.restored and plan.repo and read_head(plan.repo) != attempt.head_before:
            self.protected.uncommit(attempt.restored, attempt.head_before, self.progress.warn)

    def count(self, attempt: _Attempt) -> None:
        """The iteration in the loop's counters (state only). One the account stopped is no
        failure and no use of the cap: the run stops, and a `resume` runs it again."""
        state = self.state
        state.cut_short = attempt.outcome == TIMEOUT  # (what it left is named to the next one)
        if attempt.cause in STOPPING_CAUSES:
            return
        state.finished = attempt.number
        state.waits, state.waits_since = 0, None
        if attempt.outcome in FAILING_OUTCOMES:
            state.consecutive_failures += 1
            state.failures += 1
            state.last_reason = attempt.reason
        else:
            state.consecutive_failures = 0
        if "hash" in attempt.commit:
            state.uncommitted = []
        elif self.plan.gates.commit and attempt.outcome in FAILING_OUTCOMES and not attempt.set_aside:
            state.uncommitted = state.uncommitted + ["%d (%s)" % (attempt.number, attempt.cause)]
        self.notify.guardian(state, None, "after iteration %d" % attempt.number)

    def announce(self, attempt: _Attempt) -> None:
        """The iteration's progress lines, warnings, log footer and `notify` (no counter
        changes)."""
        plan, progress, number = self.plan, self.progress, attempt.number
        result, report, outcome = attempt.result, attempt.report, attempt.outcome
        assert result and report
        detail = progress.outcome(outcome)
        if attempt.cause in STOPPING_CAUSES:  # (no failure: the account stops the run, or holds its agent)
            held = "the run stops"
            if self.agents.fallback:
                held = "%s is held for the session" % attempt.agent.name
            detail = "%s: %s" % (progress.outcome(attempt.cause), held)
        elif outcome in FAILING_OUTCOMES:
            detail += ", consecutive: %d/%d" % (self.state.consecutive_failures, plan.failure_threshold)
        self.completed(attempt, detail)
        if attempt.reason is not None:
            progress.indented("  %s: %s" % attempt.reason)
            if attempt.verified is False and attempt.cause != CAUSE_VERIFY:
                progress.indented("  %s: %s" % verify_words(attempt.check))
        if result.timed_out == "idle":
            progress.warn("iteration %d: no output for %s; the agent was stopped"
                          % (number, format_budget(plan.idle_timeout or 0)))
        elif result.timed_out:
            progress.warn("iteration %d: time limit of %s reached; the agent was stopped"
                          % (number, format_budget(plan.iteration_timeout or 0)))
        if outcome == REJECTED:
            why = "verify " + attempt.drop if attempt.drop else "verify (`%s`) failed" % plan.verify
            progress.warn("iteration %d: the agent signalled SUCCESS but %s; the claim is rejected"
                          % (number, why))
        done = attempt.commit
        if done:  # `  git: committed 1a2b3c4 (3 files) · pushed to origin/main`, and its event
            said = ["committed %s (%s)" % (done["hash"], plural(done["files"], "file"))] if "hash" in done \
                else []
            progress.indented("  git: " + " · ".join(said + ["pushed to " + done[key] for key in ["pushed"]
                                                             if key in done]))
        if self.log and "hash" in done:
            self.log.event("commit", iteration=number, hash=done["hash"], files=done["files"],
                           pushed="pushed" in done, message=done["message"])
        if plan.max_cost is not None and report.usage is not None and not report.cut_short and \
                report.usage.get("cost_usd") is None and not self.cost_unknown_said:
            self.cost_unknown_said = True
            progress.warn("iteration %d: the agent reported no cost, so max_cost cannot be"
                          " checked against it" % number)
        self.log_end(attempt, outcome)

    def completed(self, attempt: _Attempt, detail: str) -> None:
        """`Iteration 3/10 completed in 2m13s (failure, consecutive: 1/3) · 41.2k tokens`."""
        assert attempt.report
        self.progress.info("Iteration %s completed in %s (%s)%s" % (
            attempt.label, format_duration(time.monotonic() - attempt.started), detail,
            usage_suffix(attempt.report.usage)))

    def next_step(self, attempt: _Attempt) -> bool:
        """What the iteration means for the run: a stop, or on to the next one."""
        state, trouble = self.state, attempt.trouble
        if trouble and trouble.kind in STOPPING_CAUSES:  # (and how to go on once it is fixed)
            if self.agents.fallback:  # (SPEC 23: held for the session; another takes over)
                return self.give_way(Hold(ACCOUNT_HELD[trouble.kind], words=account_words(
                    trouble, attempt.error_kind, attempt.agent.cli, self.agents.env, attempt.agent.name)),
                    attempt.number)
            return self.stop(STOP_ACCOUNT, account_words(trouble, attempt.error_kind, attempt.agent.cli,
                                                         self.agents.env) + self.resume_hint())
        state.previous = attempt.told()
        if attempt.cause == CAUSE_AGENT and self.plan.on_failure_signal == "stop":
            return self.stop(STOP_HELP, "the agent signalled FAILURE: " + attempt.reason[1]
                             if attempt.reason else "the agent signalled FAILURE")
        stuck = self.gates.stuck(state, attempt)
        if stuck:
            return self.stop(STOP_STUCK, stuck)
        if attempt.outcome == COMPLETED:
            return self.stop(STOP_SUCCESS, "success signal")
        return True

    def wait_out_provider(self, attempt: _Attempt) -> bool:
        """An iteration the provider stopped at a limit (SPEC 13) or an outage (SPEC 15):
        not a failure, not a use of the cap. Wait it out and run the iteration again -- or
        stop with exit 4 when that would take longer than the run may wait."""
        state, trouble = self.state, attempt.trouble
        assert trouble and attempt.report and attempt.reason
        state.waits, state.cut_short = state.waits + 1, True
        self.completed(attempt, self.progress.outcome(attempt.outcome))
        self.progress.indented("  %s: %s" % attempt.reason)
        self.log_end(attempt, attempt.outcome)
        state.last_reason = attempt.reason
        wait, now = provider_wait(trouble), time.time()
        # (SPEC 23: a limit holds its agent at once, an outage once rooda's first retry failed too)
        if self.agents.fallback and (wait.kind == WAIT_LIMIT or state.waits > 1):
            ends = now + bound_wait(wait, self.plan, state.waits, 0, 0, now).seconds
            return self.give_way(Hold(wait.held(), ends, wait), attempt.number)
        return self.hold(wait, attempt.number)

    def hold(self, wait: Wait, number: int, seconds: float | None = None) -> bool:
        """Wait out a limit, an outage, a reserve or the pace (SPEC 13, 15, 18), or `seconds`
        until the first agent is free (SPEC 23), counted down and interruptible -- or stop
        with exit 4 when the wait would pass what the run may wait (limit_wait, outage_wait,
        max_time) or on_limit says stop."""
        state = self.state
        state.waits_since = state.waits_since or time.monotonic()
        now = time.time()
        wait = bound_wait(wait, self.plan, max(state.waits, 1), time.monotonic() - state.waits_since,
                          state.elapsed(), now, seconds)
        if self.log is not None:
            self.log.wait(wait)
        if wait.beyond is not None:
            return self.stop(wait.row.stop, wait.reason(now))
        self.progress.info("%s %s" % (wait.announce(now), self.guard.how_to_stop()))
        state.waiting = wait
        self.notify("wait", STOPS[wait.row.stop].status, "%s: %s" % (wait.kind, wait.words()), number, state,
                    ROODA_WAIT_KIND=wait.name, ROODA_WAIT_UNTIL=iso_time(now + wait.seconds))
        self.wait(wait.seconds, wait.doing())
        state.waiting = None
        return True

    def log_end(self, attempt: _Attempt, outcome: str) -> None:
        """The iteration's footer in the .log and its iteration_end event (and `notify`), with
        its reason (none when interrupted: the reason is the last thing judge finds)."""
        result, report = attempt.result, attempt.report
        reason = "%s: %s" % attempt.reason if attempt.reason else None
        if outcome != OUTCOME_INTERRUPTED:
            self.notify("iteration_end", outcome, reason or "", attempt.number, self.state)
        if not self.log or not result or not report:
            return  # (interrupted before the agent started: no iteration to end)
        repo, verify = self.plan.repo, None
        if attempt.verified is not None:
            verify = "pass" if attempt.verified else "fail"
        self.log.iteration_end(
            iteration=attempt.number, seconds=round(time.monotonic() - attempt.started, 3),
            exit_code=result.exit_code, signal=result.killed_by, signals=sorted(report.signals),
            outcome=outcome, consecutive_failures=self.state.consecutive_failures, verify=verify,
            head_before=attempt.head_before, head_after=read_head(repo) if repo else None,
            output_bytes=report.output_bytes, reason=reason, cause=attempt.cause,
            error_kind=attempt.error_kind, restored=list(attempt.restored) or None,
            kept_versions=attempt.kept_versions, set_aside=attempt.set_aside, kept=attempt.kept,
            usage=dict(report.usage) if report.usage else None, verdict=attempt.verdict,
            said=_one_line(report.last_text, REASON_CHARS) or None,  # (its last words, for the morning)
            needs=attempt.needs, assumptions=attempt.assumptions or None,  # (the person's part: SPEC 24)
            denied=[{"tool": tool, "input": detail} for tool, detail in report.denied] or None,
            # What the next prompt quotes, and whose it is: a `resume` tells the next attempt too.
            feedback=[attempt.source, clean(_decode(attempt.feedback[-FEEDBACK_TAIL_BYTES:]))]
            if outcome in FAILING_OUTCOMES else None)


def _closing_line(state: LoopState, plan: RunPlan) -> str:
    """The closing progress line (also the log's exit reason), from the table of stops,
    with the run's total usage when the agent reported any."""
    stop, when = state.stop or STOP_SUCCESS, state.step or "between iterations"
    if state.interrupted_during is not None:
        when = "during iteration %d" % state.interrupted_during
    if state.waiting:
        when = "while waiting for " + state.waiting.row.waiting_for
    words = STOPS[stop].words.format(
        done=plural(state.finished, "iteration"), total=format_duration(state.elapsed()),
        reason=state.reason, failures=state.consecutive_failures, cap=plan.max_iterations or 0,
        max_time=format_budget(plan.max_time or 0), max_cost=format_cost(plan.max_cost or 0),
        signal=signal_name(state.interrupted_by or signal.SIGINT), when=when)
    return words + usage_suffix(state.usage)


def _report_end(state: LoopState, plan: RunPlan, progress: Progress) -> str:
    """The closing line, said at its stop's level (a Progress method's name), with what
    explains it; returned for the log and session_end."""
    line = _closing_line(state, plan)
    level = STOPS[state.stop or STOP_SUCCESS].level
    getattr(progress, level)(line)
    if level == "error":
        if state.last_reason and state.stop not in (STOP_ERROR, STOP_ACCOUNT) and (
                state.consecutive_failures or state.stop in (STOP_LIMITED, STOP_UNAVAILABLE)):
            progress.indented("  %s: %s" % state.last_reason, even_quiet=True)
        for excerpt in state.stuck_excerpt:
            progress.indented("  | " + excerpt, even_quiet=True)
    elif state.stop == STOP_CAP and state.failures and state.last_reason:
        progress.warn("%d of %s failed; the last: %s, %s" % (
            state.failures, plural(state.finished, "iteration"), *state.last_reason))
    return line


def run_loop(plan: RunPlan, progress: Progress, guard: SignalGuard, log: SessionLog | None = None,
             out: Outlet | None = None, err: Outlet | None = None,
             resumed: Fields | None = None, warnings: Sequence[str] = ()) -> LoopState:
    """Iterate until a stop condition; the returned state says how it ended. `resumed`:
    what a session carries over when it goes on (SPEC 16) -- iterations, failures,
    usage, the seconds its runs took."""
    run = _Run(plan, progress, guard, log, out, err)
    state, agents = run.state, run.agents
    cap = "unlimited" if plan.max_iterations is None else "max " + plural(plan.max_iterations, "iteration")
    if resumed:
        state.finished, state.failures = resumed["iterations"], resumed["failures"]
        state.consecutive_failures, state.usage = resumed["consecutive_failures"], dict(resumed["usage"])
        said = resumed.get("baseline")  # (none yet: it runs now)
        state.baseline = Baseline(plan.verify or "", said.exit_code, said.line) if said else None
        state.counts = (said.counts, "before iteration 1") if said and said.counts else None
        state.resumed = resumed  # (the best state goes on, SPEC 22: the Keeper starts from it)
        state.previous, state.cut_short = resumed.get("previous"), True
        state.agent_before, state.answer = resumed.get("agent_before") or "", resumed.get("answer")
        agents.resume(resumed.get("held") or [], time.time())
        state.started -= resumed["seconds"]
        progress.info("Resuming procedure: %s (%s; %s done, %s so far)" % (
            plan.procedure, cap, plural(state.finished, "iteration"), format_duration(resumed["seconds"])))
    else:
        progress.info("Starting procedure: %s (%s)" % (plan.procedure, cap))
    progress.info("Agent: %s (%s)%s" % (agents.agent.display(), agents.agent.source, "".join(
        "; then " + each.name for each in plan.fallbacks)))
    for warning in warnings:  # (the checks before the run: SPEC 17 rev 6's one registry)
        progress.warn(warning)
    if log:
        log.warn = progress.warn
        log.session_start(plan, agents.agent, state.started_wall, resumed)
    run.notify.guardian(state, run.during, "after iteration %d" % state.finished if state.finished
                        else "before iteration 1")
    # What runs here saw of the windows, while their reset lies ahead: iteration 1 is
    # judged on it (SPEC 18), and `status` shows it.
    for each, (owner, windows) in enumerate(zip(agents.owners, agents.readings)):
        note_windows(windows, [(name, reading, time.time()) for name, reading in remembered_windows(
            plan.log_dir, owner, time.time()).items()], log, owner, agents.commands[each].name)
        if windows:
            progress.info("Subscription windows%s: %s (the last readings here)" % (
                " of " + agents.commands[each].name if agents.fallback else "",
                windows_words({name: reading[0] for name, reading in windows.items()})))
    try:
        while run.before_iteration() and run.iteration():
            pass
    except Interrupted as exc:
        run.interrupted(exc.signum, run.during)
    except RoodaError as exc:  # e.g. a fragment that disappeared mid-run
        run.stop(STOP_ERROR, str(exc))
    finally:
        if run.protected:
            run.protected.close()  # (its copies go, whatever ended the run)
    if guard.signum is not None and state.status != STATUS_INTERRUPTED:
        run.interrupted(guard.signum, None)  # it came as the run ended: no result overrides it
    if state.answer:  # (SPEC 24: it never reached an agent -- the question stays open)
        progress.warn("the answer reached no agent: the run stopped before an iteration began; resume"
                      " again with --answer (and a higher -n where the cap was reached)")
    closing = _report_end(state, plan, progress)
    if log:
        log.session_end(state, closing)
        progress.info("Log: %s" % log.where())
    run.notify("session_end", state.status, state.reason, state.interrupted_during or state.finished, state,
               str(state.exit_code()))
    return state


# ==== 17. The morning report ==========================================
# `report` (SPEC 19): what a night's sessions did, read from their .jsonl through the
# session reader, built for the person who opens it at 8 am, in SPEC 19's order: the night
# at a glance (a labelled total; a row per session, with what to run next), one timeline of
# every session on one time axis, the cost and the windows on that axis, then each
# session's attempts as a table -- as text, as JSON, or as one self-contained page (inline
# CSS and SVG, no script, nothing fetched) where colour is never the only cue.

# How the page shows an outcome, a wait and a status: a colour of the Okabe-Ito palette
# (told apart by colour-blind readers too); a failure's bar is hatched as well, a wait's
# dotted, and every colour and pattern is named in a legend. A status not named here is
# amber: one that `resume` goes on with.
OUTCOME_LOOK = {SUCCESS: "#009e73", COMPLETED: "#00694d", FAILURE: "#d55e00", TIMEOUT: "#e69f00",
                REJECTED: "#cc79a7", LIMITED: "#f0e442", UNAVAILABLE: "#56b4e9",
                OUTCOME_INTERRUPTED: "#8c8c8c"}
WAIT_LOOK = {WAIT_LIMIT: "#f0e442", WAIT_OUTAGE: "#56b4e9", WAIT_RESERVE: "#0072b2", WAIT_PACE: "#9ecae1"}
STATUS_LOOK = dict(dict.fromkeys((STATUS_ABORTED, STATUS_STUCK, STATUS_ERROR, RUN_DIED), "#b3301a"),
                   **{STATUS_COMPLETED: "#00694d", RUN_RUNNING: "#0072b2"})
# What became of attempts, good to bad, in words: by their outcomes (a set-aside one apart),
# and the pattern its bar has on the page. The total, the glance and the legend count this way.
TALLY = (("succeeded", (SUCCESS, COMPLETED), ""), ("failed", FAILING_OUTCOMES, "hatch"),
         ("set aside", (), "aside"), ("limited", (LIMITED,), ""), ("unavailable", (UNAVAILABLE,), ""),
         ("interrupted", (OUTCOME_INTERRUPTED,), ""), ("stopped", (), ""),
         ("of no known outcome", (), "hatch"))
LONG_SESSION = 200  # attempts past which a session's table keeps what went wrong and sums the rest
REASON_COLUMN = 47  # where the text table's last column starts (a long reason wraps under it)


def next_words(report: Fields, directory: str) -> str:
    """What to run next (SPEC 19 rev 5): for a resumable session, `resume` as it works when
    copied -- in the directory it ran in, with this rooda and its log directory unless
    that is the default -- (with `--answer` when it asks a question: SPEC 24); for one that
    aborted, got stuck or stopped in error, the log to read and why; nothing for one that
    completed or runs."""
    files = SessionFiles.of(report["session"])
    if report["state"] in (RUN_RUNNING, RUN_STOPPED) or not files:
        return ""
    if report["resumable"] or report["needs"]:
        return resume_command(SessionFiles(directory, files.base), report["cwd"] or ".") + (
            ' --answer "…"' if report["needs"] else "")
    if report["status"] in (STATUS_ABORTED, STATUS_STUCK, STATUS_ERROR):
        return "read %s%s" % (files.log, "; the last failure: " + report["last_failure"] if
                              report["last_failure"] else "")
    return ""


def session_report(path: str, now: float) -> Fields:
    """A session as `report` tells it: its summary (as `status --json` has it) and, from
    the session reader's detail, its attempts, waits, window readings, reserve, commits,
    and what to run next (a command that works when copied)."""
    reader = SessionReader(path, now, detail=True)
    report, attempts = reader.read(), reader.attempts
    first = (reader.events or [{}])[0]
    report.update(attempts=attempts, waits=reader.waits, readings=reader.readings,
                  commits=list(reader.commits.values()), reserve=reader.reserve or {},
                  log=reader.files.log, at=first.get("at") or now,
                  ended=reader.events[-1]["at"] if reader.events else now,
                  worked_seconds=round(sum(attempt["seconds"] for attempt in attempts), 3),
                  waited_seconds=round(sum(wait["seconds"] for wait in reader.waits), 3))
    # What went wrong by the CLIs' own kinds (SPEC 13 rev 5): `server_error ×2, rate_limit ×1`.
    report["error_kinds"] = dict(collections.Counter(a["error_kind"] for a in attempts if a["error_kind"] and
                                                     a["outcome"] not in (SUCCESS, COMPLETED)).most_common())
    report["next"] = next_words(report, os.path.dirname(path))  # (its own folder: one named from elsewhere)
    # The person's part (SPEC 24): what waits on them -- an open question and how to answer
    # it, an account's stop, refused actions -- and what was decided without them.
    asked = reader.needs
    report["waiting_on_you"] = {
        "needs": {"text": asked[0], "iteration": asked[1], "answer": report["next"]} if asked else None,
        "account": reader.account and (report["reason"] if report["status"] == STATUS_ERROR
                                       else reader.account),
        "denied": list(reader.denied.values())}
    report["decided_without_you"] = list(reader.assumed.values())
    return report


def fate(attempt: Fields) -> tuple:
    """What became of an attempt: its row of TALLY."""
    if attempt["set_aside"]:
        return TALLY[2]
    if attempt["cause"] in STOPPING_CAUSES:  # (the account stopped the run: no failure, SPEC 15)
        return TALLY[-2]
    return next((row for row in TALLY if attempt["outcome"] in row[1]), TALLY[-1])


def agents_of(report: Fields) -> Dict[str, int]:
    """A session's attempts by agent (SPEC 23), in the order they first ran: {} when one
    agent made them all (nothing to tell apart)."""
    counts = collections.Counter(attempt.get("agent") or "?" for attempt in report["attempts"])
    return dict(counts) if len(counts) > 1 else {}


def commit_label(attempt: Fields) -> str:
    """An attempt's commit as a table or a tooltip names it: `1a2b3c4 build 3: add the parser`."""
    done = attempt["commit"]
    return "%s %s" % (done["hash"][:7], done["subject"]) if done else ""


def tally(attempts: Sequence[Fields]) -> str:
    """`6 succeeded, 5 failed, 1 set aside, 1 limited`: attempts by what became of them."""
    counts = collections.Counter(fate(attempt)[0] for attempt in attempts)
    return ", ".join("%d %s" % (counts[word], word) for word, _, _ in TALLY if counts[word])


def report_total(reports: Sequence[Fields]) -> str:
    """`Total: 4 sessions · 13 attempts (6 succeeded, 5 failed, 1 set aside) · worked 1h13m ·
    waited 1h00m · $3.24 · 6 commits` (SPEC 19 rev 5)."""
    attempts = [attempt for report in reports for attempt in report["attempts"]]
    return "Total: %s · %s (%s) · worked %s · waited %s · %s · %s" % (
        plural(len(reports), "session"), plural(len(attempts), "attempt"), tally(attempts) or "none",
        format_duration(sum(r["worked_seconds"] for r in reports)),
        format_duration(sum(r["waited_seconds"] for r in reports)),
        format_cost(sum(a["cost_usd"] or 0 for a in attempts)),
        plural(sum(len(r["commits"]) for r in reports), "commit"))


def glance(report: Fields) -> Fields:
    """A session's row of the night at a glance, in words: where it ran, its procedure,
    start and length, status (and why, unless it completed), attempts by outcome, cost,
    commits, restorations, failures by kind, the verifier before → after, what to run next."""
    started, status = report["at"], report["status"] if report["state"] == RUN_ENDED else report["state"]
    home, where = os.path.expanduser("~"), clean(report["cwd"] or "?")
    # (a stopped session's story: the agent's last words beside what to run next, SPEC 19 rev 6)
    said = [a["said"] for a in report["attempts"] if a["said"]][-1:] if status != STATUS_COMPLETED else []
    readings: Dict[str, List[str]] = {}
    several = len({reading[4] for reading in report["readings"]}) > 1  # (each agent's own: SPEC 23)
    agents = ", ".join("%s %d" % pair for pair in agents_of(report).items())
    for _, window, used, _, agent in report["readings"]:
        named = "%s %s" % (agent, WINDOWS[window][0]) if several else WINDOWS[window][0]
        readings.setdefault(named, []).append("%d%%" % round(used * 100))
    return {"where": "~" + where[len(home):] if where.startswith(home + os.sep) else where,
            "procedure": clean(str(report["procedure"])), "status": status,
            "when": "%s (%s)" % (time.strftime("%b %d %H:%M", time.localtime(started)),
                                 format_duration(report["ended"] - started)),
            "why": _one_line(report["reason"] or report["activity"] or "", 300),
            "said": _one_line(said[0], 300) if said else "",
            "attempts": tally(report["attempts"]) or "none",
            "agents": agents and agents + " attempts",  # (`claude 4, codex 7 attempts`: SPEC 23)
            "cost": " · ".join(describe_usage(report["usage"] or {}, brief=True)) or "-",
            "windows": ", ".join("%s %s" % (name, " → ".join(dict.fromkeys([seen[0], seen[-1]])))
                                 for name, seen in sorted(readings.items())),
            "commits": plural(len(report["commits"]), "commit"),  # (set aside: in the tally)
            "guarded": "%d restored" % report["restored"] if report["restored"] else "",
            "kinds": ", ".join("%s ×%d" % pair for pair in report["error_kinds"].items()),
            "verify": verify_course(report), "next": report["next"]}


def attempt_rows(report: Fields) -> List[List[str]]:
    """A session's attempts as rows -- number, start, length, outcome, cost, and its reason
    or commit --; past LONG_SESSION attempts, a run of plain ones of one outcome is one row
    (`12–340`, `success ×329`), what went wrong, its commits and set-asides each their own."""
    rows: List[List[str]] = []
    run: List[Fields] = []  # plain attempts of one outcome (and agent), not yet written
    several = bool(agents_of(report))  # (each attempt's agent named: SPEC 23)

    def row(attempts: List[Fields]) -> List[str]:
        first = attempts[0]
        cost = [a["cost_usd"] for a in attempts if a["cost_usd"] is not None]
        many = len(attempts) > 1
        numbers = str(first["iteration"])
        if many:
            numbers = "%d–%d" % (first["iteration"], attempts[-1]["iteration"])
        return [numbers,
                time.strftime("%H:%M:%S", time.localtime(first["at"])),
                format_duration(sum(a["seconds"] for a in attempts)),
                "%s ×%d" % (first["outcome"], len(attempts)) if many else first["outcome"],
                format_cost(sum(cost)) if cost else "-",
                " · ".join(filter(None, (first.get("agent") if several else None,
                                         first["reason"] or commit_label(first))))]
    long = len(report["attempts"]) > LONG_SESSION
    for attempt in report["attempts"] + [{"outcome": None}]:  # (the last: an end that flushes the run)
        plain = long and not (attempt.get("reason") or attempt.get("commit") or attempt.get("set_aside"))
        kind = (attempt["outcome"], attempt.get("agent"))
        if run and (not plain or (run[0]["outcome"], run[0].get("agent")) != kind):
            rows.append(row(run))
            run = []
        if plain and attempt["outcome"]:
            run.append(attempt)
        elif attempt["outcome"]:
            rows.append(row([attempt]))
    return rows


def the_persons_part(report: Fields) -> Tuple[List[Tuple[str, str]], List[str]]:
    """A session's part of Waiting on you -- (words, a command to run or "") -- and of
    Decided without you, in words (SPEC 24)."""
    waiting, lines = report["waiting_on_you"], []
    if waiting["needs"]:
        asked = waiting["needs"]
        lines.append(("#%s asks: %s" % (asked["iteration"], asked["text"]), asked["answer"]))
    if waiting["account"]:
        lines.append(("its account stopped it: " + waiting["account"], ""))
    lines += [("#%s was refused %s%s" % (refused["iteration"], refused["tool"], ": " + refused["input"]
                                         if refused["input"] else ""), "") for refused in waiting["denied"]]
    return lines, ["#%s %s" % (said["iteration"], said["assumption"])
                   for said in report["decided_without_you"]]


def persons_sections(reports: Sequence[Fields]) -> List[Tuple[str, List[Tuple[str, list]]]]:
    """Waiting on you and Decided without you (SPEC 24): each with its sessions' lines, a
    session without any left out, a section without any sessions too."""
    parts = [(report, the_persons_part(report)) for report in reports]
    named = [("%s in %s · %s" % (glance(report)["procedure"], glance(report)["where"],
                                 os.path.basename(report["session"])), part) for report, part in parts]
    return [(title, rows) for title, rows in (
        ("Waiting on you", [(name, part[0]) for name, part in named if part[0]]),
        ("Decided without you", [(name, [(said, "") for said in part[1]])
                                 for name, part in named if part[1]]))
        if rows]


def _md(text: str) -> str:
    """Text from a log as a Markdown table's cell: markup escaped, `|` and line breaks kept
    from breaking the row."""
    from html import escape
    return " ".join(escape(text, False).replace("|", "\\|").replace("`", "\\`").split())


def report_markdown(reports: Sequence[Fields], now: float) -> str:
    """The report in GitHub-flavoured Markdown (SPEC 19 rev 6), for a CI job's summary or a
    pull request: the total, the glance, and each session's attempts as a table."""
    first = min([r["at"] for r in reports] or [now])
    out = ["## rooda: the night of %s" % time.strftime("%a %b %d, %H:%M", time.localtime(first)), "",
           "**%s**" % _md(report_total(reports)), "",
           "| status | where | procedure | started (length) | attempts | cost, commits | verify | next |",
           "|---|---|---|---|---|---|---|---|"]
    for report in reports:
        row = {key: _md(value) for key, value in glance(report).items()}
        out.append("| **%s** | %s | %s | %s | %s | %s, %s | %s | %s |" % (
            row["status"], row["where"], row["procedure"], row["when"],
            "<br>".join(filter(None, (row["attempts"], row["agents"]))), row["cost"],
            row["commits"], row["verify"] or "-", "<br>".join(filter(None, (
                "`%s`" % glance(report)["next"] if row["next"].startswith("cd ") else row["next"], row["why"],
                "_%s_" % row["said"] if row["said"] else "")))))
    for title, sessions in persons_sections(reports):  # (SPEC 24: right after the glance)
        out += ["", "### " + title, ""]
        for name, rows in sessions:
            out.append("- **%s**" % _md(name))
            out += ["  - %s%s" % (_md(words), " — `%s`" % command if command else "")
                    for words, command in rows]
    for report in reports:
        row = glance(report)
        head = (_md(os.path.basename(report["session"])), _md(row["procedure"]), _md(row["where"]))
        out += ["", "### %s · %s in %s · %s" % (head + (row["status"].upper(),)), "",
                "| # | start | length | outcome | cost | reason, or commit |", "|---:|---|---:|---|---:|---|"]
        out += ["| %s |" % " | ".join(map(_md, cells)) for cells in attempt_rows(report)]
        out += ["\nSet aside: `%s` (%s)" % (ref, "; ".join("%s: `%s`" % pair for pair in recovery(ref)))
                for ref in report["set_aside"]]
    return clean("\n".join(out) + "\n")


def _fill(text: str, columns: int, first: str, indent: int | None = None, cut: bool = True) -> List[str]:
    """A text after `first` wrapped to `columns`, its later lines under its own column (that
    of the text, or `indent`), never column 0; a word longer than a line is cut (unless not
    `cut`: a command's path stays whole)."""
    import textwrap
    indent = len(first) if indent is None else indent
    lines = textwrap.wrap(text, max(columns, indent + 20), initial_indent=first,
                          subsequent_indent=" " * indent, break_on_hyphens=False, break_long_words=cut)
    return lines or [first]


def _command_lines(text: str, columns: int, first: str) -> List[str]:
    """What to run, after `first`: a command wrapped is continued with a backslash, so that
    it still works when copied (words that are no command wrap as words)."""
    command = text.startswith("cd ")
    lines = _fill(text, columns - 2, first, cut=not command)
    go_on = " \\" if command else ""
    return [line + go_on for line in lines[:-1]] + lines[-1:]


def report_text(reports: Sequence[Fields], columns: int = 100) -> str:
    """The report for a person on a terminal or in a file (SPEC 19): the total and the glance
    of each session, then each session's attempts, commits and set-asides -- every line
    fitted to `columns`, a long one wrapped under its own column."""
    out = _fill(report_total(reports), columns, "", 7) + [""]
    for report in reports:
        row = glance(report)
        out += _fill(" · ".join(filter(None, ("%s in %s" % (row["procedure"], row["where"]), row["when"],
                                              row["attempts"], row["agents"], row["cost"], row["commits"],
                                              row["guarded"]))),
                     columns, "%-11s " % row["status"].upper())
        for key, words in (("why", "why"), ("said", "last words"), ("kinds", "kinds"), ("verify", "verify"),
                           ("windows", "windows")):
            if row[key]:
                out += _fill(row[key], columns, "            %s: " % words)
        if row["next"]:
            out += _command_lines(row["next"], columns, "            next: ")
    for title, sessions in persons_sections(reports):  # (SPEC 24: right after the glance)
        out += ["", title.upper()]
        for name, rows in sessions:
            out += _fill(name, columns, "  ", 4)
            for words, command in rows:
                out += _fill(words, columns, "    ", 6) + (
                    _command_lines(command, columns, "      answer: ") if command else [])
    for report in reports:
        row = glance(report)
        why = ": " + row["why"] if row["why"] else ""
        head = (os.path.basename(report["session"]), row["procedure"], row["where"], row["status"].upper(),
                why)
        out += [""] + _fill("%s · %s in %s · %s%s" % head, columns, "", 4)
        narrow = columns < REASON_COLUMN + 20  # (no room beside the figures: the reason goes below them)
        out.append("    #     start    length  outcome       cost  reason, or commit")
        if narrow:
            out[-1:] = ["    #     start    length  outcome       cost", "      reason, or commit"]
        for cells in attempt_rows(report):
            figures = "%5s  %8s  %8s  %-11s %6s  " % tuple(cells[:5])
            if narrow and cells[5]:
                out += [figures] + _fill(cells[5], columns, " " * 6)
            else:
                out += _fill(cells[5], columns, figures)
        if report["commits"]:
            out.append("  commits:")
            out += [line for a in report["attempts"] if a["commit"]
                    for line in _fill(commit_label(a), columns, "    ", 12)]
        for ref in report["set_aside"]:
            out += _fill("%s (%s)" % (ref, "; ".join("%s: %s" % pair for pair in recovery(ref))), columns,
                         "  set aside: ", 4)
        if report["skipped_lines"]:
            out.append("  %s of the session file did not parse" % plural(report["skipped_lines"], "line"))
    return clean("".join(line.rstrip() + "\n" for line in out))


# The page's style: the glance first, and on page 1 when printed; real tables that wrap a
# long reason in its own cell; badges and bars that say their word as well as their colour.
REPORT_STYLE = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",sans-serif;margin:1.5em auto;max-width:1180px;
padding:0 1em;color:#1f1f1f;background:#fff}h1{font-size:1.4em;margin:0}
h2{font-size:1.1em;margin:1.6em 0 .4em}h3{font-size:1em;margin:.8em 0 .2em}.person li{margin:.2em 0}
p.total{font-weight:600;margin:.3em 0 1em}table{border-collapse:collapse;width:100%;margin:.3em 0}
td,th{text-align:left;vertical-align:top;padding:.25em .5em;border-bottom:1px solid #e3e3e3;
overflow-wrap:anywhere}th{font-weight:600;color:#444;overflow-wrap:normal}
.num{text-align:right;white-space:nowrap}.word{overflow-wrap:normal}
.badge{display:inline-block;padding:0 .45em;border-radius:3px;color:#fff;font-weight:600;font-size:.85em;
white-space:nowrap}code{font-size:.9em;overflow-wrap:anywhere}.muted{color:#666}tr.bad td{background:#fff4ee}
table.att{table-layout:fixed}svg{width:100%;height:auto;display:block}.legend span{margin-right:1.1em;
white-space:nowrap}.legend svg{display:inline;width:1.1em;height:.8em;vertical-align:-.05em}
details{margin:.6em 0}
summary{cursor:pointer;font-weight:600}.pr{display:none}.chart{overflow-x:auto}.chart svg{min-width:640px}
@media (max-width:700px){.wide,.glance td.wide{display:none}.glance table,.glance tr,.glance td{display:block}
.legend span{white-space:normal;display:inline-block}table.att col{width:auto!important}
.glance tr:first-child{display:none}.glance tr{border-bottom:1px solid #ccc;padding:.3em 0}
.glance td{border:0;padding:.05em .3em;text-align:left}table.att{table-layout:auto}}
@media print{body{max-width:none;margin:0;font-size:10.5px}.glance td:last-child{width:36%}.pr{display:block}
tr,svg,p.total{break-inside:avoid}
h2{break-after:avoid}section.glance{break-after:page}}
"""
# The patterns bars are marked with: a hatch (it went wrong), a cross (set aside), dots (a wait).
SVG_PATTERNS = ('<defs><pattern id="hatch" width="6" height="6" patternUnits="userSpaceOnUse" '
                'patternTransform="rotate(45)"><rect width="2.5" height="6" fill="#000" opacity=".35"/>'
                '</pattern><pattern id="aside" width="6" height="6" patternUnits="userSpaceOnUse"><path '
                'd="M0 0L6 6M6 0L0 6" stroke="#000" stroke-width="1.3" opacity=".5"/></pattern><pattern '
                'id="dots" width="5" height="5" patternUnits="userSpaceOnUse"><circle cx="2.5" cy="2.5" '
                'r="1.1" fill="#000" opacity=".35"/></pattern></defs>')


def _swatch(color: str, mark: str = "") -> str:
    """A legend's sample of a colour and its pattern."""
    return '<svg viewBox="0 0 12 9" aria-hidden="true"><rect width="12" height="9" fill="%s"/>%s</svg>' % (
        color, '<rect width="12" height="9" fill="url(#%s)"/>' % mark if mark else "")


def _ticks(first: float, last: float) -> List[Tuple[float, str]]:
    """Labelled moments on a time axis: whole seconds, minutes or hours, at most eight; the
    date where a tick falls on another day than the first."""
    span = max(last - first, 1)
    step = next((step for step in (1, 5, 10, 30, 60, 300, 900, 1800, 3600, 7200, 10800, 21600, 43200)
                 if span / step <= 8), 86400)
    moment, ticks = (first // step + 1) * step, []
    while moment < last:
        day = "%b %d " if time.localtime(moment)[:3] != time.localtime(first)[:3] else ""
        words = time.strftime(day + ("%H:%M:%S" if step < 60 else "%H:%M"), time.localtime(moment))
        ticks.append((moment, words))
        moment += step
    return ticks


def _tag(name: str, cells: Iterable[Any], more: str = "") -> str:
    """A table row of cells (`td` or `th`), each its markup, or (its class, its markup)."""
    pairs = [cell if isinstance(cell, tuple) else ("", cell) for cell in cells]
    return "<tr%s>%s</tr>" % (more, "".join("<%s%s>%s</%s>" % (
        name, " class=" + kind if kind else "", text, name) for kind, text in pairs))


class TimeAxis:
    """The page's charts on one time axis, from `first` to `last` (epoch): 840 units after
    150 for the lanes' labels, ticks labelled; shares (0 to 1) up a chart 160 high."""

    left, width = 150.0, 840.0

    def __init__(self, first: float, last: float) -> None:
        self.first, self.last = first, last

    def x(self, moment: float) -> float:
        return self.left + (moment - self.first) / (self.last - self.first) * self.width

    @staticmethod
    def y(part: float) -> float:
        return 130 - part * 120

    def chart(self, label: str, height: float, shapes: Iterable[str]) -> str:
        from html import escape
        axis = "".join('<line x1="%.1f" x2="%.1f" y1="0" y2="%.1f" stroke="#ddd"/><text x="%.1f" y="%.1f" '
                       'font-size="11" text-anchor="middle" fill="#555">%s</text>' % (
                           self.x(t), self.x(t), height - 14, self.x(t), height - 2, escape(words))
                       for t, words in _ticks(self.first, self.last))
        return '<div class=chart><svg viewBox="0 0 1000 %.0f" role="img" aria-label="%s">%s%s%s</svg></div>' \
            % (height, escape(label, True), SVG_PATTERNS, axis, "".join(shapes))

    def bar(self, lane: float, start: float, seconds: float, color: str, mark: str, words: str,
            said: str = "") -> str:
        """A bar in a lane, its tooltip `words`, labelled `said` where it is wide enough."""
        from html import escape
        at, wide = self.x(start), max(self.x(start + seconds) - self.x(start), 1.5)
        label = '<text x="%.1f" y="%.1f" font-size="10">%s</text>' % (at + 2, lane + 13, escape(said)) \
            if said and wide > 7 * len(said) else ""
        hatch = '<rect x="%.1f" y="%.1f" width="%.1f" height="18" fill="url(#%s)"/>' % (at, lane, wide, mark)
        return '<g><title>%s</title><rect x="%.1f" y="%.1f" width="%.1f" height="18" fill="%s"/>%s%s</g>' % (
            escape(words), at, lane, wide, color, hatch if mark else "", label)

    def line(self, points: Sequence[Tuple[float, float]], color: str, dashed: bool = False) -> str:
        """A polyline through (moment, share) points."""
        return '<polyline points="%s" fill="none" stroke="%s" stroke-width="%s"%s/>' % (
            " ".join("%.1f,%.1f" % (self.x(at), self.y(part)) for at, part in points), color,
            1 + (not dashed), ' stroke-dasharray="6 4"' * dashed)

    def scale(self, labels: Iterable[Tuple[float, str]]) -> List[str]:
        """The left scale: a line across and its label at each share."""
        from html import escape
        return ['<line x1="%.1f" x2="%.1f" y1="%.1f" y2="%.1f" stroke="#ccc"/><text x="%.1f" y="%.1f" '
                'font-size="11" fill="#555">%s</text>' % (self.left, self.left + self.width, self.y(part),
                                                          self.y(part), self.left - 45, self.y(part) + 4,
                                                          escape(words)) for part, words in labels]


def _glance_html(reports: Sequence[Fields], first: float) -> List[str]:
    """The night at a glance: the title, the total, a row per session."""
    from html import escape
    out = ["<section class=glance><h1>rooda: the night of %s</h1>" % escape(time.strftime(
        "%a %b %d, %H:%M", time.localtime(first))),
        '<p class="total">%s</p><table>' % escape(report_total(reports)),
        _tag("th", ("status", "where, procedure", "started (length)", "attempts", ("num", "cost, commits"),
                    ("wide", "verify before → after"), "next"))]
    for report in reports:
        row = {key: escape(value) for key, value in glance(report).items()}
        out.append(_tag("td", ('<span class=badge style="background:%s">%s</span>' % (
            STATUS_LOOK.get(row["status"], "#a05a00"), row["status"]),  # (a status word escapes as itself)
            "%s<br><span class=muted>%s</span>" % (row["where"], row["procedure"]), row["when"],
            row["attempts"] + "".join("<br><span class=muted>%s</span>" % row[key]
                                      for key in ("agents", "guarded", "kinds") if row[key]),
            ("num", "%s<br>%s" % (row["cost"], row["commits"])), ("wide", row["verify"] or "-"),
            "<br>".join(filter(None, ("<code>%s</code>" % row["next"] if row["next"] else "",
                                      "<span class=muted>%s</span>" % row["why"] if row["why"] else "",
                                      "<q>%s</q>" % row["said"] if row["said"] else ""))))))
    return out + ["</table></section>"]


def _persons_html(reports: Sequence[Fields]) -> List[str]:
    """Waiting on you and Decided without you (SPEC 24): per session, a list."""
    from html import escape
    out = []
    for title, sessions in persons_sections(reports):
        out.append("<section class=person><h2>%s</h2>" % title)
        out += ["<h3>%s</h3><ul>%s</ul>" % (escape(name), "".join(
            "<li>%s%s</li>" % (escape(words), "<br><code>%s</code>" % escape(command) if command else "")
            for words, command in rows)) for name, rows in sessions]
        out.append("</section>")
    return out


def _timeline_html(reports: Sequence[Fields], axis: TimeAxis) -> List[str]:
    """One timeline of the night: a lane per session, attempts coloured, labelled and
    hatched by outcome, waits dotted by kind; its legend; printed, the failures listed."""
    from html import escape
    lanes, attempts = [], [a for r in reports for a in r["attempts"]]
    for index, report in enumerate(reports):
        lane, several = 4 + index * 24, bool(agents_of(report))  # (each bar names its agent: SPEC 23)
        name = "%s · %s" % (os.path.basename(report["cwd"] or "?"), report["procedure"])
        lanes.append('<text x="0" y="%d" font-size="11">%s</text>' % (lane + 13, escape(name[:40])))
        lanes += [axis.bar(lane, wait["at"], wait["seconds"], WAIT_LOOK[wait["kind"]], "dots",
                           "waited for %s, %s" % (WAIT_KINDS[wait["kind"]].waiting_for,
                                                  format_duration(wait["seconds"])))
                  for wait in report["waits"]]
        for a in report["attempts"]:
            said = " ".join(filter(None, [a["outcome"] + ",", format_duration(a["seconds"]), commit_label(a),
                                          a["reason"] or ""]))
            label = " ".join(filter(None, ("#%d" % a["iteration"], a.get("agent") if several else None)))
            lanes.append(axis.bar(lane, a["at"], a["seconds"], OUTCOME_LOOK.get(a["outcome"], "#d55e00"),
                                  fate(a)[2], "%s %s" % (label, said), label))
    fates = collections.Counter((fate(a)[0], a["outcome"]) for a in attempts)
    waited = collections.Counter(wait["kind"] for report in reports for wait in report["waits"])
    legend = ["<span>%s %d: %s</span>" % (
        word, sum(n for (seen, _), n in fates.items() if seen == word), " ".join(
            "%s %s" % (_swatch(OUTCOME_LOOK.get(outcome, "#d55e00"), pattern), escape(outcome))
            for seen, outcome in sorted(fates) if seen == word)) for word, _, pattern in TALLY
        if any(seen == word for seen, _ in fates)]  # (counted as the total counts: one way)
    legend += ["<span>%s waited: %s %d</span>" % (_swatch(WAIT_LOOK[kind], "dots"), kind, waited[kind])
               for kind in WAIT_LOOK if waited[kind]]
    return ["<h2>The night</h2>",
            axis.chart("Timeline: each session's attempts and waits", len(reports) * 24 + 26, lanes),
            "<p class=legend>%s<span>hatched: it went wrong; crossed: set aside; dotted: a wait</span></p>"
            % "".join(legend),
            "<ol class=pr>%s</ol>" % "".join("<li>#%d %s: %s</li>" % (
                a["iteration"], escape(a["outcome"]), escape(a["reason"] or ""))
                for a in attempts if a["outcome"] in FAILING_OUTCOMES)]


def _cost_html(reports: Sequence[Fields], axis: TimeAxis) -> List[str]:
    """The cumulative cost on the night's axis, a step up at each attempt's end."""
    spent = sorted((a["at"] + a["seconds"], a["cost_usd"]) for r in reports for a in r["attempts"]
                   if a["cost_usd"])
    if not spent:
        return []
    most, points = sum(cost for _, cost in spent), [(axis.first, 0.0)]
    for moment, cost in spent:
        points += [(moment, points[-1][1]), (moment, points[-1][1] + cost / most)]
    return ["<h2>Cost, in all (%s)</h2>" % format_cost(most), axis.chart(
        "Cumulative cost over the night", 160, [axis.line(points + [(axis.last, 1.0)], "#0072b2")] +
        axis.scale((share, format_cost(most * share)) for share in (0, 0.5, 1)))]


def _windows_html(reports: Sequence[Fields], axis: TimeAxis) -> List[str]:
    """The windows' utilisation on the night's axis: steps (a reading holds until the
    next, or drops to 0 at its window's reset), the reserve dashed in its window's colour."""
    readings = sorted((reading for report in reports for reading in report["readings"]), key=lambda r: r[0])
    kept = {name: part for report in reports for name, part in report["reserve"].items() if _number(part)}
    if not readings:
        return []
    # A line per window -- and per agent, where several read theirs (SPEC 23) --, each its colour.
    lanes = sorted({(reading[4] or "", reading[1]) for reading in readings})
    agents = sorted({agent for agent, _ in lanes})
    several, palette = len(agents) > 1, ("#d55e00", "#0072b2", "#cc79a7", "#e69f00", "#009e73", "#56b4e9")
    colors = {(agent, name): palette[(agents.index(agent) * 3 + sorted(WINDOWS).index(name)) % 6]
              for agent, name in lanes}
    lines = axis.scale((part, "%d%%" % (part * 100)) for part in (0, 0.5, 1))
    for (agent, name), color in colors.items():
        mine = [(at, used, resets) for at, window, used, resets, who in readings
                if (who or "", window) == (agent, name)]
        points: List[Tuple[float, float]] = []
        for (at, used, resets), after in zip(mine, [m[0] for m in mine[1:]] + [axis.last]):
            points += [(at, used), (min(after, resets or after), used)]
            if resets and resets < after:
                points += [(resets, 0), (after, 0)]
        if mine:
            lines.append(axis.line(points, color))
        if mine and kept.get(name):
            lines.append(axis.line([(axis.first, 1 - kept[name]), (axis.last, 1 - kept[name])], color, True))
    dashed = "<span>dashed: the reserve kept, in its window's colour</span>" if kept else ""
    return ["<h2>Subscription windows</h2>", axis.chart("Windows' utilisation over the night", 160, lines),
            "<p class=legend>%s%s</p>" % ("".join(
                "<span>%s %s%s</span>" % (_swatch(color), agent + " " if several else "", WINDOWS[name][0])
                for (agent, name), color in colors.items()), dashed)]


def _sessions_html(reports: Sequence[Fields]) -> List[str]:
    """Each session's attempts as a table (a long reason wraps in its cell), its
    set-aside refs and how to look at one and take it back."""
    from html import escape
    out = ["<h2>Each session</h2>"]
    kinds = ("num", "wide", "num", "word", "num", "")  # (the columns' classes)
    for report in reports:
        row = glance(report)
        said = "%s · %s in %s · %s" % (row["status"], row["procedure"], row["where"],
                                       os.path.basename(report["session"]))
        out.append("<details open><summary>%s</summary><table class=att>%s%s" % (escape(said), "".join(
            "<col style=width:%s>" % size for size in ("5em", "6em", "6em", "9em", "5em", "auto")),
            _tag("th", zip(kinds, ("#", "start", "length", "outcome", "cost", "reason, or commit")))))
        out += [_tag("td", zip(kinds, map(escape, cells)),
                     " class=bad" if cells[3] in FAILING_OUTCOMES else "") for cells in attempt_rows(report)]
        out += ["</table>"] + ["<p>set aside: <code>%s</code> — %s</p>" % (escape(ref), "; ".join(
            "%s: <code>%s</code>" % (what, escape(command)) for what, command in recovery(ref)))
            for ref in report["set_aside"]] + ["</details>"]
    return out


def report_html(reports: Sequence[Fields], now: float) -> str:
    """The morning page (SPEC 19 rev 5), in its order: the glance (a labelled total, a row
    per session with a status badge and what to run next), one timeline of the night,
    the cumulative cost and the windows on its axis, then each session's attempts as a
    table. Every text from a log is escaped wherever it lands."""
    from html import escape
    first = min([r["at"] for r in reports] or [now])
    axis = TimeAxis(first, max([r["ended"] for r in reports] + [first + 1]))
    out = _glance_html(reports, first) + _persons_html(reports) + _timeline_html(reports, axis) + \
        _cost_html(reports, axis) + _windows_html(reports, axis) + _sessions_html(reports)
    names = ", ".join(sorted({os.path.basename(r["cwd"] or "?") for r in reports}))
    title = "rooda report: %s, %s" % (names[:80], time.strftime("%b %d", time.localtime(first)))
    return clean('<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><meta name="viewport" '
                 'content="width=device-width, initial-scale=1"><title>%s</title><style>%s</style></head>'
                 '<body>\n%s\n<p class=muted>rooda %s, %s</p></body></html>\n' % (
                     escape(title), REPORT_STYLE, "\n".join(out), __version__, local_time(now)))


# ==== 18. Command line and commands ===================================
# argparse for SPEC 2's command line, plan_run (settings by precedence, with where each
# came from), one function per command, and main. Each command returns an exit code;
# only main turns errors into messages.

USAGE = "\n       ".join("python3 rooda.py " + usage for usage in (
    ["<procedure> [max_iterations] [options]"] + [usage for _, _, usage, _ in COMMANDS.values()]
    + ["help | version | --help | --version"]))
DESCRIPTION = """\
Run an AI coding agent in an OODA loop: each iteration pipes a prompt assembled
from the procedure's observe/orient/decide/act fragments (or one prompt file) to a
fresh agent process and stops when the agent prints <promise>SUCCESS</promise>, the
cap is reached, or too many iterations fail in a row."""
EPILOG = """\
exit codes: 0 completed, 1 aborted after repeated failures (or the agent asked for help),
2 usage, config or precondition error (an agent that cannot authenticate or pay
included), 3 stuck, 4 stopped by the provider (a usage limit, an outage), 128+N
interrupted by signal N (130 for Ctrl+C).

examples:
  python3 rooda.py prompt PROMPT.md 20            # the Ralph loop: one prompt file, up to 20 times
  python3 rooda.py build                          # the build procedure, its default cap
  python3 rooda.py build 3 --ai-cmd-alias claude  # three iterations with Claude Code
  python3 rooda.py plan --dry-run                 # show the prompt, run nothing
  python3 rooda.py build -u -v -c @notes.md       # until done, streaming, with context
  python3 rooda.py build --ai-cmd 'my-agent --yes' --timeout 1800
  python3 rooda.py build -u --done-when 'make test'   # test until green
  python3 rooda.py build -u --max-cost 20 --max-time 28800   # overnight, with budgets
  python3 rooda.py status                         # how the newest run is doing
  python3 rooda.py resume                         # go on with it after Ctrl+C, a reboot or a limit
  python3 rooda.py config build                   # each setting and where it came from
  python3 rooda.py doctor build                   # preflight before a night alone
  python3 rooda.py vendor ~/src/myapp             # install into ~/src/myapp/.rooda/
"""


def _parse_count(text: str, what: str) -> int:
    """A cap: a whole number >= 0, 0 meaning unlimited."""
    try:
        value = int(text, 10)
    except ValueError:
        value = -1
    if value < 0:
        raise UsageError("%s must be a whole number >= 0 (0 means unlimited), not '%s'" % (what, text))
    return value


def _parse_since(text: str) -> float:
    """--since: an age (12h, 2d, 90m, 30s) or a local time (2026-11-27T20:00), as an epoch."""
    age = re.match(r"(\d+(?:\.\d+)?)([smhd])$", text)
    if age:
        return time.time() - float(age.group(1)) * {"s": 1, "m": 60, "h": 3600, "d": 86400}[age.group(2)]
    for form in ("%Y-%m-%dT%H:%M:%S", "%Y-%m-%dT%H:%M", "%Y-%m-%d"):
        with _suppress(ValueError, OverflowError):
            return time.mktime(time.strptime(text, form))
    raise UsageError("--since must be an age (12h, 2d, 90m) or a time (2026-11-27T20:00), not '%s'" % text)


def _usage_message(message: str) -> str:
    """argparse's own message in rooda's words: "needs a value", "exclude each other"."""
    needs = re.match(r"argument (\S+): expected one argument$", message)
    if needs:
        return "option %s needs a value" % needs.group(1)
    clash = re.match(r"argument (\S+): not allowed with argument (\S+)$", message)
    if clash:
        return "%s and %s exclude each other" % tuple(sorted(
            (part.split("/")[-1] for part in clash.groups()), key=lambda o: o != "--verbose"))
    return message


def build_parser() -> Any:
    """The command line of SPEC 2 on argparse: one parser, options before or after the
    words (parse_intermixed_args), the words dispatched by `dispatch`; a setting's option
    comes from its row of SETTINGS, its value checked by the setting's own rule."""
    import argparse

    class Parser(argparse.ArgumentParser):
        def error(self, message: str) -> "NoReturn":  # type: ignore[override]
            raise UsageError(_usage_message(message))

    def typed(option: str, parse: Callable[[str, str], Any] | None) -> Callable[[str], Any]:
        return str if parse is None else lambda text: parse(option, text)

    parser = Parser(prog="python3 rooda.py", usage=USAGE, description=DESCRIPTION, epilog=EPILOG,
                    add_help=False, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("words", nargs="*", help=argparse.SUPPRESS)
    run = parser.add_argument_group("run options (before or after the procedure)")
    run.add_argument("-n", "--max-iterations", metavar="N",
                     type=lambda text: _parse_count(text, "--max-iterations"),
                     help="cap the iterations (0 means unlimited)")
    run.add_argument("-u", "--unlimited", action="store_true",
                     help="no cap (--max-iterations wins when both are given)")
    run.add_argument("-d", "--dry-run", action="store_true",
                     help="print the assembled prompt once and run nothing")
    run.add_argument("-c", "--context", metavar="TEXT", action="append", default=[],
                     help="add context to the prompt; @FILE reads a file, @@ a literal @ (repeatable)")
    loudness = run.add_mutually_exclusive_group()
    loudness.add_argument("-v", "--verbose", action="store_true",
                          help="stream the agent's output (readable, never raw JSON) and the gates'")
    loudness.add_argument("-q", "--quiet", action="store_true",
                          help="print only errors, warnings and interruptions")
    for phase in PHASES:
        run.add_argument("--" + phase, metavar="FILE",
                         help="replace the %s phase's fragments for this run" % phase)
    run.add_argument("--config", metavar="PATH", help="the workspace config (default ./rooda-config.json)")
    for setting in SETTINGS:
        if setting.flag and setting.check is _v_bool:  # a switch: its flag turns the setting off
            run.add_argument(setting.flag, dest=setting.key, action="store_const", const=False,
                             help=setting.help)
        elif setting.flag:
            run.add_argument(setting.flag, dest=setting.key, metavar=setting.metavar, help=setting.help,
                             type=typed(setting.flag, getattr(setting.check, "parse", None)))
    logs = parser.add_argument_group("logs and output")
    logs.add_argument("--log-dir", metavar="DIR",
                      help="where the session logs go (default: logs/ beside rooda.py)")
    logs.add_argument("--no-log", action="store_true", help="write no session logs")
    logs.add_argument("--color", metavar="WHEN", default="auto",
                      type=typed("--color", _Choice("auto", "always", "never").parse),
                      help="auto (default), always or never")
    other = parser.add_argument_group("options of the other commands")
    other.add_argument("--json", action="store_true", help="config, status, report: print JSON")
    other.add_argument("--all", action="store_true", help="status, report: every session")
    other.add_argument("--since", metavar="WHEN", type=_parse_since,
                       help="report: the sessions started since 12h, 2d, 90m or 2026-11-27T20:00")
    other.add_argument("--html", metavar="FILE", help="report: one page with charts, to FILE (- for stdout)")
    other.add_argument("--markdown", metavar="FILE", help="report: GitHub-flavoured Markdown, to FILE (- for"
                       " stdout), for a CI job's summary")
    other.add_argument("--answer", metavar="TEXT", help="resume: the person's answer to the agent's question,"
                       " given to the next prompt once (@FILE reads a file)")
    other.add_argument("--force", action="store_true",
                       help="vendor: replace edited files (each kept as <file>.orig)")
    other.add_argument("-h", "--help", action="store_true", help="show this help")
    other.add_argument("-V", "--version", action="store_true", help="print the version")
    return parser


# The options some commands alone take, and those commands.
COMMAND_OPTIONS = {option: tuple(name for name, row in COMMANDS.items() if option in row[3].split())
                   for row in COMMANDS.values() for option in row[3].split()
                   if option not in ("run", "--config", "--log-dir")}


def parse_args(argv: Sequence[str]) -> Any:
    """The parsed command line: `command` (the first word), its `words`, the options."""
    parser = build_parser()
    options, extra = parser.parse_known_intermixed_args(list(argv))
    command = options.words[0] if options.words else None
    for word in extra:
        if word.startswith("-") and word != "-":
            name = word.split("=", 1)[0]
            takes = COMMANDS.get(command or "", (0, 0, "", "run"))[3].split()
            known = takes if "run" not in takes else [  # "did you mean" only what the command takes
                o for action in parser._actions for o in action.option_strings if o.startswith("--") and
                command in COMMAND_OPTIONS.get(o, (command,))]
            raise UsageError("unknown option '%s'%s" % (name, did_you_mean(name, known)))
        options.words.append(word)
    words = options.words
    options.command, options.words = (words[0], words[1:]) if words else (None, [])
    options.parser, options.argv = parser, list(argv)
    return options


def resolve_max_iterations(options: Any, positional: str | None, procedure_name: str,
                           config: Config, prompt: bool = False) -> Tuple[int | None, tuple]:
    """SPEC 2's precedence: --max-iterations > --unlimited > positional > the procedure's
    default (or iteration_mode) > loop's default (or iteration_mode) > 5. 0 is unlimited.
    `prompt <file>` defaults to 1 (one ad-hoc run) instead of the config.
    Returns the cap (None: unlimited) and where it came from."""
    if options.max_iterations is not None:
        return options.max_iterations or None, (TIER_FLAG, "--max-iterations", None)
    if options.unlimited:
        return None, (TIER_FLAG, "--unlimited", None)
    if positional is not None:
        return _parse_count(positional, "max_iterations") or None, (TIER_FLAG, "max_iterations", None)
    if prompt:
        return 1, (TIER_BUILTIN, "prompt", None)
    procedure = config.procedure(procedure_name)
    own = ("procedures", procedure_name)
    if procedure.get("iteration_mode") == "unlimited":
        return None, config.where(own + ("iteration_mode",))
    if procedure.get("default_max_iterations") is not None:
        return procedure["default_max_iterations"], config.where(own + ("default_max_iterations",))
    if procedure.get("iteration_mode") != "max-iterations" and config.loop("iteration_mode") == "unlimited":
        return None, config.where(("loop", "iteration_mode"))
    return config.loop("default_max_iterations"), config.where(("loop", "default_max_iterations"))


def _read_context(values: Sequence[str], cwd: str) -> List[str]:
    """--context values: inline text, @FILE read from cwd, @@ for a literal @."""
    texts = []
    for value in values:
        if not value.strip():
            raise UsageError("--context needs some text (or @FILE); an empty one would add an empty section")
        if value.startswith("@@"):
            texts.append(value[1:])
        elif value.startswith("@"):
            texts.append(read_text(os.path.join(cwd, os.path.expanduser(value[1:])), "context file").strip())
        else:
            texts.append(value)
    return texts


def _use_color(option: str, stream: TextIO) -> bool:
    if option == "always":
        return True
    if option == "never" or os.environ.get("NO_COLOR") or os.environ.get("TERM", "dumb") == "dumb":
        return False
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


def _resolve_settings(options: Any, config: Config, procedure_name: str
                      ) -> Tuple[Fields, Dict[str, tuple]]:
    """Every setting of SETTINGS and where it came from: its flag beats the procedure's
    own value (where a procedure may set it), which beats the loop setting of any tier."""
    procedure = config.data.get("procedures", {}).get(procedure_name, {})
    values: Fields = {}
    sources: Dict[str, tuple] = {}
    for setting in SETTINGS:
        given = getattr(options, setting.key, None) if setting.flag else None
        if given is not None:
            # The row's own rule, as for the same value in a file (`--verify ""` included).
            problem = setting.check(given)
            if problem:
                raise UsageError("%s %s" % (setting.flag, problem))
            values[setting.key], sources[setting.key] = given, (TIER_FLAG, setting.flag, None)
        elif setting.procedure and procedure.get(setting.key) is not None:
            values[setting.key] = procedure[setting.key]
            sources[setting.key] = config.where(("procedures", procedure_name, setting.key))
        else:
            values[setting.key] = config.loop(setting.key)
            sources[setting.key] = config.where(("loop", setting.key))
    return values, sources


def plan_run(options: Any, config: Config, procedure_name: str,
             positional: str | None, prompt_file: str | None = None) -> RunPlan:
    """Resolve everything a run needs, and where each setting came from (`sources`).
    With `prompt_file` (`prompt <file|->`) there is no procedure: the file's text is the
    prompt, the gates come from flags and the loop settings, and the cap defaults to 1
    (then the failure threshold too, so that one failed ad-hoc run exits 1)."""
    procedure = config.procedure(procedure_name) if prompt_file is None else {}
    cwd = os.getcwd()
    # (`prompt <file>` plans under the name `prompt`, which no procedure may take: it finds none)
    settings, sources = _resolve_settings(options, config, procedure_name)
    fragments = {}
    for phase in PHASES if prompt_file is None else ():
        override = getattr(options, phase)
        if override == "":
            raise UsageError("--%s needs a file; an empty value names none" % phase)
        if override:
            fragments[phase] = [{"path": os.path.join(cwd, override)}]
            sources[phase] = (TIER_FLAG, "--" + phase, None)
        else:
            fragments[phase] = procedure.get(phase) or []
            sources[phase] = config.where(("procedures", procedure_name, phase))
    if settings["verdict"] == "schema":  # (the prompt asks for the verdict where it asked for the markers)
        fragments = {phase: [dict(f, path=VERDICT_PROMPT) if f.get("path") == MARKERS_PROMPT else f
                             for f in items] for phase, items in fragments.items()}
    if options.verbose or options.quiet or options.log_level:
        flag, verbosity = "--log-level", LOG_LEVELS.get(options.log_level, NORMAL)
        if options.quiet:
            flag, verbosity = "--quiet", QUIET
        if options.verbose:
            flag, verbosity = "--verbose", VERBOSE
        sources["verbosity"] = (TIER_FLAG, flag, None)
    else:
        verbosity = VERBOSE if settings["show_ai_output"] else LOG_LEVELS.get(settings["log_level"], NORMAL)
        sources["verbosity"] = sources["show_ai_output" if settings["show_ai_output"] else "log_level"]
    signals = dict(BUILTIN_LOOP["signals"], **config.loop("signals"))  # (a tier may unset one kind)
    env = {name: _scalar_text(value) for scope in (config.loop("env"), procedure.get("env") or {})
           for name, value in scope.items()}  # the procedure's variables over the loop's
    max_iterations, sources["max_iterations"] = resolve_max_iterations(
        options, positional, procedure_name, config, prompt=prompt_file is not None)
    agent = resolve_agent(config, procedure_name, options.ai_cmd, options.ai_cmd_alias, options.ai_format)
    sources["agent"] = agent.origin if agent else (TIER_BUILTIN, None, None)
    gates = Gates(  # (the mappings' keys and types were checked with the config)
        requires=list(procedure.get("requires") or ()),
        requires_hint="; " + procedure["requires_hint"] if procedure.get("requires_hint") else "",
        **(settings["stuck"] or {}), **(settings["git"] or {}))
    if options.no_log:
        log_dir, sources["log_dir"] = None, (TIER_FLAG, "--no-log", None)
    elif options.log_dir:
        log_dir = os.path.join(cwd, os.path.expanduser(options.log_dir))
        sources["log_dir"] = (TIER_FLAG, "--log-dir", None)
    else:
        log_dir = os.path.join(ROODA_DIR, settings["log_dir"])  # built-in: beside rooda.py
    if prompt_file is not None and max_iterations == 1 and options.failure_threshold is None:
        settings["failure_threshold"] = 1
        sources["failure_threshold"] = (TIER_BUILTIN, "prompt, one iteration", None)
    prompt_text = None
    if prompt_file == "-" and getattr(options, "prompt_text", None) is not None:
        prompt_text = options.prompt_text  # (a resumed session's: stdin is not read again)
    elif prompt_file == "-":
        # Read once, before anything runs: every iteration gets the same text.
        if sys.stdin is None:
            raise UsageError("prompt -: standard input is closed; pipe the prompt in, or name a file")
        prompt_text = _decode(sys.stdin.buffer.read())
        if not prompt_text.strip():
            raise UsageError("prompt -: nothing arrived on standard input")
    return RunPlan(
        procedure=procedure_name, fragments=fragments, context=_read_context(options.context, cwd),
        max_iterations=max_iterations, signals=signals, agent=agent, env=env, verbosity=verbosity,
        fallbacks=fallback_agents(config, settings["fallback"]),
        color=_use_color(options.color, sys.stderr), cwd=cwd, sources=sources, gates=gates,
        log_dir=log_dir, settings=settings, argv=tuple(getattr(options, "argv", ())),
        config_files=tuple(os.path.join(cwd, shown) for _, shown in config.files),
        context_files=tuple(os.path.join(cwd, os.path.expanduser(value[1:])) for value in options.context
                            if value.startswith("@") and not value.startswith("@@")),
        prompt_file=os.path.join(cwd, prompt_file) if prompt_file not in (None, "-") else None,
        prompt_text=prompt_text)


def _plain_fragments(fragments: object, cwd: str) -> object:
    """Fragment lists as their paths (relative to cwd when below it) or inline content."""
    if not isinstance(fragments, list):
        return fragments
    shown = []
    for fragment in fragments:
        if isinstance(fragment, dict) and "path" in fragment:
            path = _display_path(fragment["path"], cwd)
            fragment = path if len(fragment) == 1 else dict(fragment, path=path)
        shown.append(fragment)
    return shown


def plan_listing(plan: RunPlan, cwd: str) -> List[Tuple[str, object, tuple]]:
    """A run's resolved settings as `config` and `info` list them: (key, value, where)."""
    rows: List[Tuple[str, object]] = [("max_iterations", plan.max_iterations)]
    rows += [(setting.key, plan.settings[setting.key]) for setting in SETTINGS if setting.key not in
             ("default_max_iterations", "iteration_mode", "log_level", "show_ai_output", "log_dir")]
    rows += [("verbosity", VERBOSITY[plan.verbosity]),
             ("agent", plan.agent.display() if plan.agent else None),
             ("log_dir", _display_path(plan.log_dir, cwd) if plan.log_dir else None)]
    rows += [(phase, _plain_fragments(plan.fragments[phase], cwd))
             for phase in PHASES if phase in plan.fragments]
    return [(key, value, plan.sources[key]) for key, value in rows]


def _silence_stdout() -> None:
    """Point stdout at /dev/null so that the interpreter's final flush stays quiet."""
    with _suppress(OSError, ValueError, AttributeError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)


def write_stdout(text: str) -> None:
    """Write to stdout; a reader that went away (`| head -1`) is not an error."""
    try:
        sys.stdout.write(text)
        sys.stdout.flush()
    except BrokenPipeError:
        _silence_stdout()


def load_config_saying_warnings(options: Any) -> Config:
    """load_config for a command: its warnings (the Go rooda's old keys) on stderr."""
    config = load_config(options.config)
    for warning in config.warnings:
        sys.stderr.write(warning + "\n")
    return config


# -- the checks before a run -----------------------------------------------------------
# One registry of checks (pycodestyle's shape): `doctor` prints every line of every check;
# a run's start makes the same checks, refuses (exit 2, before any agent runs) on the first
# error and says the warnings of those that say them there -- so what `doctor` calls an
# error is what the run refuses (SPEC 17 rev 6). A line is (level, topic, words); a
# setting's problem is a `config` error, named where the setting was set.

OK, WARNING, ERROR = "ok", "warning", "error"  # doctor's levels


class Preflight(Record):
    """What the checks are given: the plan and the config it came from, the agent's
    environment, the repository here (or git's reason why none)."""

    plan: RunPlan
    config: Config
    env: Env
    repo: GitRepository | None
    why: str                        # git's reason when it cannot use the repository ("": none here)
    resuming: bool = False          # a session goes on (what it left is not a stranger's)

    def setting(self, key: str, problem: str) -> Tuple[str, str, str]:
        """A setting's problem as a config error, named where it was set: `--keep better
        needs verify: ...`, or `rooda-config.json:3:5: loop.keep: better needs verify: ...`."""
        plan = self.plan
        tier, flag, _ = plan.sources[key]
        value = _parameter_text(plan.settings[key]).replace(", ", ",")  # (a list as its flag gives it)
        if tier == TIER_FLAG:
            return ERROR, "config", "%s %s %s" % (flag, value, problem)
        own = ("procedures", plan.procedure, key)
        procedure = self.config.data.get("procedures", {}).get(plan.procedure, {})
        path = own if procedure.get(key) is not None else ("loop", key)
        where, line, col, message, _ = self.config.problem(path, "%s %s" % (value, problem))
        return ERROR, "config", ":".join(str(part) for part in (where, line, col) if part) + ": " + message


def _check_procedure(pre: Preflight) -> Lines:
    """Its fragments (or prompt file) and a --context file readable; no bare marker."""
    plan, what = pre.plan, "procedure %s" % pre.plan.procedure
    try:
        count = len(prompt_sources(plan))
        build_prompt(plan, None)
    except RoodaError as exc:
        return [(ERROR, what, str(exc))]
    lines: Lines = [(OK, what, "%d fragments readable" % count)]
    bare = bare_signal_lines(plan)
    if bare:
        lines.append((WARNING, "prompt", "a promise marker alone on a line (%s): an agent that echoes its"
                                         " prompt would read as done; put it inside a sentence" % bare))
    return lines


def _check_windows(plan: RunPlan, cli: AgentCLI | None, env: Environ) -> Lines:
    """What reserve and pace can do with this agent (SPEC 18): only a subscription's
    windows can be spared, and only some CLIs report them."""
    if not plan.reserve and plan.pace == "off":
        return []
    if cli and not cli.windows:  # (a command rooda does not know may be claude inside)
        return [(WARNING, "", "reserve and pace do nothing: %s reports no subscription windows (%s do)" % (
            cli.name, " and ".join(row.name for row in AGENT_CLIS if row.windows)))]
    key = cli.api_key(env) if cli else ""
    if cli and key:
        return [(WARNING, "", "reserve and pace do nothing: %s is logged in with %s, an API key, which has no"
                              " subscription windows" % (cli.name, key))]
    kept = ", ".join("%s %d%% kept" % (name, round(part * 100))
                     for name, part in sorted(plan.reserve.items()))
    return [(OK, "windows", "%s%s" % (kept or "no reserve", "; pace even" if plan.pace == "even" else ""))]


def _check_agent(pre: Preflight) -> Lines:
    """The agents' programs -- the run's own, then `fallback`'s (SPEC 23: each a provider's
    CLI, none twice) --, what verdict: schema, max_cost and the windows can do with them
    (SPEC 16, 18, 21)."""
    plan, agent = pre.plan, pre.plan.agent
    if not agent:
        return [(ERROR, "agent", str(no_agent_error()))]
    lines: Lines = []
    agents = [agent] + plan.fallbacks
    for each in agents:
        try:
            check_agent_program(each)
            lines.append((OK, "agent", "%s (%s)" % (each.display(), each.source)))
        except RoodaError as exc:
            lines.append((ERROR, "agent", str(exc)))
        lines += _check_windows(plan, each.cli, dict(pre.env, **each.env))
    known = [alias_definition(pre.config.data.get("ai_cmd_aliases", {}), name) for name in plan.fallback]
    aliases = list(PRESETS) + list(pre.config.data.get("ai_cmd_aliases", {}))
    lines += [pre.setting("fallback", "names no agent: %s is neither a preset nor an ai_cmd_aliases"
                                      " name%s" % (name, did_you_mean(name, aliases)))
              for name, found in zip(plan.fallback, known) if not found]
    programs = [os.path.basename(each.argv[0]) for each in agents]
    for program in sorted(set(programs)):
        own = " (the run's own agent)" if programs[0] == program else ""
        if programs.count(program) > 1:
            lines.append(pre.setting("fallback", "runs %s twice%s: rooda switches between providers' CLIs,"
                                                 " never between accounts of one" % (program, own)))
    without = [each.cli.name if each.cli else "this one" for each in agents
               if not (each.cli and each.cli.schema_flag)]
    if plan.verdict == "schema" and without:
        lines.append(pre.setting("verdict", "needs an agent CLI with a schema flag (%s), not %s" % (", ".join(
            row.name for row in AGENT_CLIS if row.schema_flag), " or ".join(without))))
    cli = agent.cli
    if plan.max_cost is not None and not getattr(OUTPUT_FORMATS.get(agent.format), "reports_cost", False):
        lines.append((WARNING, "", "max_cost is set, but the agent's output (%s format) reports no cost: the"
                                   " budget cannot be enforced; use --max-time as well" % agent.format))
    elif plan.max_cost is not None and not (cli and cli.budget_flag):
        who = agent.preset or "this agent"
        lines.append((WARNING, "", "max_cost is checked between iterations: %s has no spending cap of its"
                                   " own, so one iteration can spend past it" % who))
    elif plan.max_cost or plan.max_time:  # (SPEC 16 rev 4: what the night will do)
        lines.append((OK, "budget", "; ".join(filter(None, (
            plan.max_time and "max_time %s" % format_budget(plan.max_time),
            plan.max_cost and "max_cost %s, and each iteration gets %s with what is left" % (
                format_cost(plan.max_cost), cli.budget_flag if cli else ""))))))
    return lines


def _check_cli(pre: Preflight) -> Lines:
    """Each agent CLI's known pitfalls, and who pays (SPEC 16): the first of its credentials
    found here."""
    plan, lines = pre.plan, []
    for agent in ([plan.agent] if plan.agent else []) + plan.fallbacks:
        cli, env = agent.cli, dict(pre.env, **agent.env)
        if not cli:
            continue
        lines += [(level, "agent", message) for level, applies, message in cli.pitfalls
                  if applies(agent.argv, env, pre.repo is not None)
                  and not (plan.verify and "`verify`" in message)]  # (that advice is taken)
        paid = cli.paid_by(env)
        if paid:
            lines.append((OK, "credentials", "%s found; who pays: %s" % paid))
        elif cli.credentials:
            lines.append((WARNING, "credentials", "none of %s found; %s needs %s%s" % (
                ", ".join(where for where, _ in cli.logins(env)), cli.name, cli.login,
                " (on macOS a login kept in the keychain is not seen here)"
                if sys.platform == "darwin" else "")))
    return lines


def _check_timeouts(pre: Preflight) -> Lines:
    plan, agent = pre.plan, pre.plan.agent
    if plan.iteration_timeout is None and plan.idle_timeout is None:
        return [(WARNING, "", "no iteration timeout: an agent that hangs (network retries, a login prompt)"
                              " stalls the loop; set --timeout or loop.iteration_timeout")]
    if plan.idle_timeout is None or not agent or agent.format != "text":
        return []
    better = preset_format(agent.cli) if agent.cli else "text"
    fix = "the %s preset as shipped prints its structured output (format %s), which avoids it" % (
        agent.cli.name, better) if agent.cli and better != "text" else "prefer --timeout"
    return [(WARNING, "", "idle timeout with a text agent: some CLIs (claude -p among them) print nothing"
                          " until they finish, so a busy iteration looks idle; " + fix)]


def _check_gates(pre: Preflight) -> Lines:
    """The gates' programs, as the agent's is checked (SPEC 16 rev 5), and what verify
    and notify will do; what `requires` names."""
    plan, lines = pre.plan, []
    for gate, command in ((GATE_VERIFY, plan.verify), (GATE_DONE_WHEN, plan.done_when),
                          (GATE_ACCEPT, plan.accept)):
        missing = command and missing_program(command, plan.cwd)  # (before the night, not at its start)
        if missing:
            lines.append((ERROR, gate, missing))
    if plan.verify and not lines:
        lines.append((OK, "verify", "`%s` after each iteration%s" % (_one_line(plan.verify, 80), (
            ", and once before iteration 1 to say what the agent starts from (--no-verify-baseline skips it)")
            if plan.verify_baseline else "")))
    if plan.notify:
        lines.append((OK, "notify", "`%s` at %s%s" % (_one_line(plan.notify, 80), ", ".join(plan.notify_on), (
            " (and, should rooda die, the guardian runs it with ROODA_STATUS=died)"
            if "session_end" in plan.notify_on else ""))))
    missing = missing_requires(plan)
    if missing:
        lines.append((ERROR, "requires", missing))
    return lines


def _check_guards(pre: Preflight) -> Lines:
    """SPEC 22: what is protected and its size, the test counts the last baseline here
    printed (what verify is held to), and what keep: better needs."""
    plan, lines = pre.plan, []
    if plan.protect:
        guarded = ProtectedPaths(plan.replace(repo=pre.repo), GateRunner(plan).git)
        found = guarded.scan()
        guarded.close()
        size = sum(signature[1] for signature in found.values())
        lines.append((WARNING if size > 50e6 else OK, "protect", "%s (%s, %s)%s" % (
            ", ".join(plan.protect), plural(len(found), "file"), format_bytes(size),
            "; over 50 MB: each changed one is copied before an iteration" if size > 50e6 else "")))
        for member, what in ((":rooda", "rooda's own files"), (":agent", "the agent CLIs' settings")):
            if member not in plan.protect:
                lines.append((WARNING, "protect", "the list leaves out %s: the agent may change %s" % (
                    member, what)))
        for pattern in plan.protect:
            alone = plan.replace(settings=dict(plan.settings, protect=[pattern]))
            if pattern[:1] != ":" and not ProtectedPaths(alone, GateRunner(plan).git).scan():
                lines.append((WARNING, "protect", "%s matches no file here (a path relative to where rooda"
                                                  " runs)" % pattern))
    else:
        lines.append((WARNING, "protect", "off (protect: []): rooda's own files, the agents' settings and"
                                          " git's hooks are the agent's to change, and nothing is put back"))
    if plan.verify and plan.test_counts == "guard":
        baseline = None
        with _suppress(RoodaError, OSError):
            baseline = summarize_session(find_sessions(plan.log_dir or "", "")[0])["baseline"]
        counts = baseline and baseline.counts
        stand_in = "" if plan.verify_baseline else ", and without a baseline the first counts stand in"
        lines.append((OK, "test counts", "the last baseline here printed %d run, %d skipped: a SUCCESS whose"
                                         " verify runs fewer or skips more is rejected" % (
                                             counts["run"], counts["skipped"]) if counts else
                      "no baseline here has printed any yet (a runner's summary line: pytest, unittest, go,"
                      " cargo, Jest, Vitest); without, nothing is compared" + stand_in))
    needs = Keeper.needs(plan, pre.repo)
    if needs:
        lines.append(pre.setting("keep", needs))
    elif Keeper.wanted(plan):
        lines.append((OK, "keep", "better: an attempt that makes verify worse is set aside under"
                                  " refs/rooda/attempts/<session>/<iteration> and the tree put back"))
    return lines


def _check_git(pre: Preflight) -> Lines:
    """git for the gates that need it (SPEC 6, 16): the repository, who commits, where a push
    goes, and what the first commit would sweep in."""
    plan, repo, gates = pre.plan, pre.repo, pre.plan.gates
    if not gates.need_git():
        said = "repository %s" % repo.top if repo else "not a repository (no gate needs one)"
        if pre.why:
            return [(WARNING, "git", "%s (no gate needs git; the logs will not record HEAD)" % pre.why)]
        return [(OK, "git", said)]
    if not repo:
        wanted = [name for name, on in (("git.commit", gates.commit), ("git.push", gates.push),
                                        ("stuck.no_change", gates.no_change)) if on]
        them = "it" if len(wanted) == 1 else "them"
        why = "but " + pre.why if pre.why else "and %s is not in one (run 'git init', or turn %s off)" % (
            plan.cwd, them)
        return [(ERROR, "config", "procedures.%s: %s need%s a git repository, %s" % (
            plan.procedure, " and ".join(wanted), "s" if len(wanted) == 1 else "", why))]
    run_git = GateRunner(plan).git
    who, why = commit_identity(run_git) if gates.commit else ("", "")
    lines: Lines = [(OK, "git", "repository %s%s" % (repo.top, ", committing as " + who if who else ""))]
    if who is None:  # (each iteration's work would fail to commit)
        lines = [(ERROR, "git", "git.commit is on, but git has no identity to commit with here (%s); %s" % (
            why, GIT_IDENTITY_HINT))]
    if gates.push:
        remote = run_git(["remote", "-v"]).out.split()
        lines.append((OK, "git", "pushing to %s (%s)" % tuple(remote[:2])) if remote else
                     (ERROR, "git", "git.push is on but the repository has no remote"))
    untracked = untracked_files(run_git, repo, plan.log_dir) if gates.commit and not pre.resuming else []
    if untracked:
        lines.append((WARNING, "git", "git.commit is on and these untracked files would be committed with the"
                                      " agent's work: %s; add them to .gitignore, or move them"
                                      % ", ".join(untracked[:10])))
    return lines


def _check_here(pre: Preflight) -> Lines:
    """What holds the machine awake, and where the logs go (doctor's alone: the run
    finds out for itself)."""
    plan, lines = pre.plan, []
    awake, works = keep_awake_command() if plan.keep_awake else None, False
    if awake:  # does it hold here? (systemd-inhibit fails at once without a system bus)
        with _suppress(RoodaError):
            held = awake[:-1] + ["true"] if awake[0] != "caffeinate" else ["caffeinate", "-i", "true"]
            works = run_agent(held, "", limits=Limits(timeout=10)).exit_code == 0
    if not plan.keep_awake:
        lines.append((OK, "keep-awake", "off (keep_awake: false)"))
    elif awake and works:
        lines.append((OK, "keep-awake", "%s holds off sleep while a run goes on" % awake[0]))
    else:
        lines.append((WARNING, "keep-awake", "unavailable (%s); keep the machine awake some other way" % (
            "%s does not work here" % awake[0] if awake else "no systemd-inhibit")))
    if plan.log_dir is None:
        return lines + [(OK, "logs", "off (--no-log)")]
    shown = _display_path(plan.log_dir, plan.cwd)
    try:
        import tempfile
        os.makedirs(plan.log_dir, exist_ok=True)
        tempfile.TemporaryFile(dir=plan.log_dir).close()
        return lines + [(OK, "logs", "%s is writable" % shown)]
    except OSError as exc:
        return lines + [(ERROR, "logs", "%s is not writable (%s); use --log-dir or --no-log" % (
            shown, exc.strerror))]


# The checks, in doctor's order, and what a run's start does with each: refuses on an
# error and says its warnings (START), refuses on an error alone (ERRORS), or leaves it
# to doctor (None: the run finds out for itself, or it is advice).
START, ERRORS = "start", "errors"
PREFLIGHT = ((_check_procedure, START), (_check_agent, START), (_check_cli, ERRORS),
             (_check_timeouts, None), (_check_gates, ERRORS), (_check_guards, ERRORS), (_check_git, START),
             (_check_here, None))


def preflight(pre: Preflight, at_start: bool, checks: Sequence[tuple] = PREFLIGHT) -> Lines:
    """The lines of the checks before a run: all of them (doctor), or what a run's start
    makes of them (its warnings, its errors)."""
    lines = []
    for check, start in checks:
        if at_start and start is None:
            continue
        lines += [line for line in check(pre) if not at_start or line[0] == ERROR or (
            line[0] == WARNING and start == START)]
    return lines


def command_run(options: Any, procedure_name: str, positional: str | None,
                prompt_file: str | None = None) -> int:
    """Run a procedure's loop (or `prompt <file>`), or with --dry-run print its first prompt;
    `options.resumed`: a session to go on with (`resume`)."""
    global _FATAL_SIGNAL
    resumed = getattr(options, "resumed", None)
    config = load_config_saying_warnings(options)
    plan = plan_run(options, config, procedure_name, positional, prompt_file)
    repo, why = find_repository(plan.cwd)
    pre = Preflight(plan, config, dict(os.environ), repo, why, resumed is not None)
    said = preflight(pre, at_start=True)  # (exit 2 before any agent runs: what doctor calls an error)
    for level, topic, message in said:
        if level == ERROR and (topic == "config" or not options.dry_run):  # (--dry-run: a config's, issue 36)
            raise (ConfigError if topic == "config" else RoodaError)(message)
    if options.dry_run:
        agent = plan.agent.display() if plan.agent else "(no agent found)"
        sys.stderr.write("[DRY RUN] Procedure: %s\n[DRY RUN] Would execute with: %s\n"
                         % (procedure_name, agent))
        sys.stderr.flush()
        write_stdout(build_prompt(plan, None))
        return 0
    assert plan.agent
    if not (plan.gates.need_git() or plan.log_dir or Keeper.wanted(plan)):
        repo = None  # (nothing needs git: no HEAD is read)
    plan = plan.replace(repo=repo)
    log = None
    if plan.log_dir is not None:
        structured = any(each.format != "text" for each in [plan.agent] + plan.fallbacks)
        log = SessionLog(plan.log_dir, _display_path(plan.log_dir, plan.cwd), structured,
                         resumed["session"] if resumed else None, resumed["lock"] if resumed else None)
    err = Outlet(sys.stderr, "stderr")
    # One writer when both are the same terminal or file: two threads would interleave the
    # agent's lines and the progress lines out of order.
    out = err if _same_file(sys.stdout, sys.stderr) else Outlet(sys.stdout, "stdout")
    progress = Progress(err, plan.verbosity, plan.color, plan.heartbeat, ticking=log is not None)
    out.on_trouble = err.on_trouble = progress.warn
    out.logged = err.logged = log is not None
    guard = SignalGuard()
    # The run's mark, in the environment of everything it starts: the guardian finds by it
    # what escaped a group when rooda itself was killed (SPEC 16).
    saved = os.environ.get("ROODA_RUN")
    os.environ["ROODA_RUN"] = "%d-%d" % (os.getpid(), time.time() * 1000)
    if os.name != "nt":
        died = notify_env(plan, log, "session_end", "died", "rooda was killed or crashed")
        told = json.dumps({"cmd": plan.notify, "env": died}) if "session_end" in plan.notify_on else ""
        _HELPERS.guardian = _HELPERS.start([sys.executable, "-S", "-c", _GUARDIAN, os.environ["ROODA_RUN"],
                                            str(plan.kill_grace), told if plan.notify else ""])
    awake = keep_awake_command() if plan.keep_awake else None
    if awake:
        _HELPERS.start(awake)  # where it fails at once (no system bus), a no-op: it is gone
    try:
        with guard:
            state = run_loop(plan, progress, guard, log, out, err, resumed,
                             [message for level, _, message in said if level == WARNING])
    finally:
        _HELPERS.stop()
        if saved is None:
            os.environ.pop("ROODA_RUN", None)
        else:
            os.environ["ROODA_RUN"] = saved
        if log:
            log.close()
        # An interrupted run must be gone within a second, whatever its readers do.
        limit = 0.3 if guard.signum is not None else None
        for outlet in {out, err}:
            outlet.close(limit=limit)
    # A signal that came as the run ended (its closing notify) still ends rooda by it.
    signum = state.interrupted_by if state.status == STATUS_INTERRUPTED else guard.signum
    if signum is not None:
        _FATAL_SIGNAL = signum
        return 128 + signum
    return state.exit_code()


def _leaves(value: Any, path: tuple = ()) -> Iterable[Tuple[tuple, Any]]:
    """The settings of a config tree: scalars, lists and empty mappings, by key path."""
    if isinstance(value, dict) and value:
        for key, child in value.items():
            yield from _leaves(child, path + (key,))
    else:
        yield path, value


def command_config(options: Any, procedure_name: str | None) -> int:
    """Every resolved setting with the tier and file it came from (SPEC 2 `config`)."""
    config = load_config_saying_warnings(options)
    cwd = os.getcwd()
    rows = []

    def add(key_path: tuple, value: object) -> None:
        tier, path, line, _ = config.origin(key_path)
        if key_path and key_path[-1] in PHASES:
            value = _plain_fragments(value, cwd)
        rows.append((dotted(key_path), value, tier, path, line))

    in_use = None
    if procedure_name is not None:
        plan = plan_run(options, config, procedure_name, options.words[1] if len(options.words) > 1 else None)
        in_use = plan.agent.preset if plan.agent else None
    for key_path, value in _leaves(config.data):
        # With a procedure: only its own settings and its agent's alias.
        wanted = {"procedures": procedure_name, "ai_cmd_aliases": in_use}
        if procedure_name is None or key_path[0] not in wanted or key_path[1] == wanted[key_path[0]]:
            add(key_path, value)
    for key, default in BUILTIN_LOOP.items():  # unset by a `null`: the default applies
        if key not in config.data.get("loop", {}):
            add(("loop", key), default)
    if procedure_name is not None:
        rows += [("run." + key, value, *where) for key, value, where in plan_listing(plan, cwd)]

    if options.json:
        report = {key: {"value": value, "tier": tier, "file": path} for key, value, tier, path, _ in rows}
        write_stdout(json.dumps(report, indent=2, ensure_ascii=False) + "\n")
        return 0
    files = ["  %-9s  %s" % (tier, path) for tier, path in config.files] or ["  (none)"]
    out = ["files, lowest tier first:"] + files + [""]
    width = max(len(key) for key, *_ in rows)
    for key, value, tier, path, number in rows:
        where = "  (%s)" % _located(path, number) if path else ""
        out.append("%-9s  %-*s  %s%s" % (tier, width, key, json.dumps(value, ensure_ascii=False), where))
    write_stdout("\n".join(out) + "\n")
    return 0


def command_list(options: Any) -> int:
    """`list`: one line per procedure, `name  summary`, names padded to one column."""
    procedures = load_config_saying_warnings(options).data.get("procedures", {})
    width = max([len(name) for name in procedures] + [0])
    write_stdout("".join("%-*s  %s\n" % (width, name, (settings.get("summary") or "").strip())
                         for name, settings in sorted(procedures.items())))
    return 0


def _wrap(text: str) -> str:
    import textwrap
    return textwrap.fill(" ".join(text.split()), 88, initial_indent="  ", subsequent_indent="  ")


def command_info(options: Any, name: str) -> int:
    """`info <procedure>`: what it is, its fragments, its gates and its resolved settings."""
    config = load_config_saying_warnings(options)
    procedure = config.procedure(name)
    plan = plan_run(options, config, name, None)
    cwd = os.getcwd()
    tier, where, line = config.where(("procedures", name))
    out = ["%s — %s" % (name, procedure.get("display") or name)]
    if procedure.get("summary"):
        out.append(_wrap(procedure["summary"]))
    if procedure.get("description"):
        out += ["", _wrap(procedure["description"])]
    out += ["", "defined in: %s (%s)" % (_located(where or "rooda.py", line), tier), "", "phases:"]
    for phase in PHASES:
        out.append("  %s" % phase)
        for fragment in plan.fragments[phase]:
            if "path" in fragment:
                params = ", ".join("%s=%s" % item for item in (fragment.get("parameters") or {}).items())
                out.append("    %s%s%s" % (_display_path(fragment["path"], cwd), params and "  " + params,
                                           "" if os.path.isfile(fragment["path"]) else "   (missing!)"))
            else:
                out.append("    (content) %s" % _one_line(fragment["content"], 71))
    if plan.gates.requires:
        out += ["", "requires: %s%s" % (", ".join(plan.gates.requires), plan.gates.requires_hint)]
    out += ["", "settings for a run (value, then where it comes from):"]
    for key, value, (tier, path, line) in plan_listing(plan, cwd):
        if key not in PHASES:
            shown = json.dumps(value)
            if value is None or isinstance(value, (str, bool, int, float)):
                shown = "none" if value is None else _scalar_text(value)
            where = " " + _located(path, line) if path else ""
            out.append("  %-20s %-40s %s%s" % (key, shown, tier, where))
    write_stdout("\n".join(out) + "\n")
    return 0


def command_doctor(options: Any, name: str | None) -> int:
    """`doctor [procedure]`: the checks before a run, one line each -- the run's start makes
    the same --; without a procedure, the config and the agent. Exit 2 on any error."""
    lines: Lines = []
    config = None
    try:
        config = load_config(options.config)
    except ConfigError as exc:
        lines = [(ERROR, "config", line) for line in exc.lines()]
    if config:
        lines.append((OK, "config", "valid (%s)" % (", ".join("%s %s" % pair for pair in config.files) or
                                                    "built-in")))
        lines += [(WARNING, "config", warning.replace(": warning: ", ": ", 1)) for warning in config.warnings]
        try:  # (no procedure named: the agent a plain run would use)
            plan = plan_run(options, config, name or "prompt", None, None if name else os.devnull)
            pre = Preflight(plan, config, dict(os.environ), *find_repository(plan.cwd))
            lines += preflight(pre, False, PREFLIGHT if name else PREFLIGHT[1:3])
        except RoodaError as exc:
            lines.append((ERROR, "procedure %s" % name, str(exc)))
    width = max(len(level) for level, _, _ in lines)
    write_stdout("".join("%-*s  %s\n" % (width, level, "%s: %s" % (topic, words) if topic else words)
                         for level, topic, words in lines))
    return 2 if any(level == ERROR for level, _, _ in lines) else 0


# What `vendor` copies: the vendoring unit of SPEC 1.
VENDOR_DIR = ".rooda"
VENDOR_MANIFEST = "manifest.json"


def _sha256(path: str) -> str:
    import hashlib
    with open(path, "rb") as stream:
        return hashlib.sha256(stream.read()).hexdigest()


def command_vendor(options: Any, directory: str) -> int:
    """`vendor <dir>`: install rooda into <dir>/.rooda/, refusing to overwrite edits."""
    import shutil
    target = os.path.join(os.path.abspath(directory), VENDOR_DIR)
    shown = os.path.join(directory, VENDOR_DIR)
    if not os.path.isdir(directory):
        raise RoodaError("vendor: %s is not a directory" % directory)
    if os.path.lexists(target) and not os.path.isdir(target):
        raise RoodaError("vendor: %s exists and is not a directory; move it out of the way first" % shown)
    if os.path.realpath(target) == os.path.realpath(ROODA_DIR):
        raise RoodaError("vendor: %s is this copy of rooda itself" % target)
    manifest_path = os.path.join(target, VENDOR_MANIFEST)
    old: Dict[str, str] = _mapping(_read_json(manifest_path).get("files"))
    # rooda.py, its config, prompts/** and the README: a locked-down machine has no web,
    # and the documentation must travel with the code it documents.
    vendored = ["rooda.py", "rooda-config.json"] + [
        os.path.relpath(os.path.join(folder, name), ROODA_DIR)
        for folder, _, names in os.walk(os.path.join(ROODA_DIR, "prompts")) for name in names] + [
        name for name in ("README.md",) if os.path.isfile(os.path.join(ROODA_DIR, name))]
    new = {rel: _sha256(os.path.join(ROODA_DIR, rel)) for rel in sorted(vendored)}
    actions = {}       # relative path -> "new" | "update" | "same"
    edited = []             # changed since they were vendored (or not rooda's)
    for rel, digest in new.items():
        dest = os.path.join(target, rel)
        current = _sha256(dest) if os.path.exists(dest) else None
        actions[rel] = "new" if current is None else "update"
        if current == digest:
            actions[rel] = "same"
        if current not in (None, digest, old.get(rel)):
            edited.append(rel)
    stale = [rel for rel in old if rel not in new and os.path.isfile(os.path.join(target, rel))]
    edited += [rel for rel in stale if _sha256(os.path.join(target, rel)) != old[rel]]
    if edited and not options.force:
        names = ", ".join(os.path.join(VENDOR_DIR, rel) for rel in edited)
        raise RoodaError("vendor: refusing to overwrite %s: edited since it was vendored (or not"
                         " vendored by rooda); keep your changes elsewhere, or run again with"
                         " --force (which keeps each edited file as <file>.orig)" % names)
    try:
        for rel in [rel for rel, action in actions.items() if action != "same"]:
            dest = os.path.join(target, rel)
            os.makedirs(os.path.dirname(dest), exist_ok=True)
            if rel in edited:  # --force: the user's version survives beside the new one
                shutil.copy2(dest, dest + ".orig")
            shutil.copy2(os.path.join(ROODA_DIR, rel), dest)
        for rel in stale:
            path = os.path.join(target, rel)
            if rel in edited:
                os.replace(path, path + ".orig")
            else:
                os.unlink(path)
        ignore = os.path.join(target, ".gitignore")
        if not os.path.exists(ignore):  # once: it is the project's file from then on
            with open(ignore, "w") as stream:
                stream.write("# session logs of rooda (python3 .rooda/rooda.py ...), and its bytecode"
                             " cache;\n# everything else in .rooda/ is meant to be committed\n"
                             "logs/\n__pycache__/\n")
        with open(manifest_path, "w") as stream:
            stream.write(json.dumps({"version": __version__, "files": new}, indent=2, sort_keys=True) + "\n")
    except OSError as exc:
        where = _display_path(exc.filename, os.getcwd()) if exc.filename else shown
        raise RoodaError("vendor: cannot write %s: %s" % (where, exc.strerror or exc)) from None
    counts = collections.Counter(actions.values())
    here = os.path.realpath(directory) == os.path.realpath(os.getcwd())
    replaced = "".join("replaced %s; your edited version is kept as %s.orig\n"
                       % ((os.path.join(shown, rel),) * 2) for rel in edited)
    write_stdout("%svendored rooda %s into %s: %d new, %d updated, %d unchanged%s\n"
                 "next: %spython3 %s/rooda.py doctor build\n" % (
                     replaced, __version__, shown, counts["new"], counts["update"], counts["same"],
                     ", %d removed" % len(stale) if stale else "",
                     "" if here else "cd %s && " % directory, VENDOR_DIR))
    return 0


def _status_text(summary: Fields, cwd: str, now: float) -> str:
    """The summary for a person."""
    cap, state, pid = summary["max_iterations"], summary["state"], summary["pid"]
    waiting = WAIT_KINDS[summary["waiting"] or WAIT_LIMIT]
    held = waiting.holds  # (before the next iteration)
    number = "%s%s" % ((summary["iterations"] or 0) + 1 if held else summary["iteration"] or 1,
                       "/%d" % cap if cap else "")
    until = parse_iso_time(summary["waiting_until"])
    under_way = "iteration %s under way" % number
    if until is not None:
        under_way = "waiting for %s until %s (%s left); iteration %s %s then" % (
            waiting.waiting_for, clock_words(until, now), format_duration(max(until - now, 0)), number,
            "starts" if held else "runs again")
    moment = parse_iso_time(summary["last_event_time"]) or now
    states = {RUN_RUNNING: "running (pid %s), %s" % (pid, under_way),
              RUN_STOPPED: "stopped (pid %s, Ctrl+Z: `fg` in its terminal goes on), %s" % (pid, under_way),
              RUN_ENDED: "ended: %s, exit code %s" % (summary["status"], summary["exit_code"]),
              RUN_DIED: "died: no session_end, and its process (pid %s) is gone; it was in iteration %s,"
                        " the last event %s at %s" % (pid, summary["iteration"] or "(none yet)",
                                                      summary["last_event"], clock_words(moment, now))}
    figures = ([plural(summary["tool_calls"], "tool call")] if summary["tool_calls"] else []) + \
        (["%s tokens" % format_count(summary["tokens"])] if summary["tokens"] else [])
    usage, resets = summary["usage"] or {}, parse_iso_time(summary["resets_at"])
    if resets and summary["status"] in (STATUS_LIMITED, STATUS_UNAVAILABLE):  # (from now, read whenever)
        states[state] += "; the limit %s at %s (%s)" % ("resets" if resets > now else "reset", clock_words(
            resets, now), "in " + format_duration(resets - now) if resets > now else "already past")
    holds = "; ".join("%s %s %s" % (hold["agent"], hold["why"], "until %s" % clock_words(parse_iso_time(
        hold["until"]) or now, now) if hold["until"] else "for the session") for hold in summary["held"])
    rows = [("session", _display_path(summary["session"], cwd)), ("procedure", summary["procedure"] or "?"),
            ("ran in", summary["cwd"]),  # (a shared log directory: which repository's it is, SPEC 19 rev 5)
            ("state", states[state]), ("now", summary["activity"]),
            ("question", summary["needs"] and "%s -- answer it: %s --answer \"…\"" % (  # (SPEC 24)
                summary["needs"], resume_command(SessionFiles.of(summary["session"]) or SessionFiles(
                    *os.path.split(summary["session"])), summary["cwd"] or cwd))),
            ("agent", summary["agent"] and summary["agent"] + ("; held: " + holds if holds else "")),
            ("iteration", figures and " · ".join(figures) + " so far"), ("reason", summary["reason"]),
            ("last failure", summary["last_failure"] != summary["reason"] and summary["last_failure"]),
            ("verify", verify_course(summary)), ("windows", windows_words({
                name: reading["utilization"] for name, reading in summary["windows"].items()})),
            ("iterations", "%d%s done: %s succeeded, %s failed%s" % (
                summary["iterations"], "/%d" % cap if cap else "", summary["successes"], summary["failures"],
                "".join(", %s %s" % (plural(summary[key], "attempt"), words) for key, words in (
                    ("limited", "at a usage limit"), ("unavailable", "with the provider unavailable"))
                    if summary[key]))),
            ("elapsed", format_duration(summary["elapsed_seconds"] or 0)),
            ("usage", " · ".join(describe_usage(usage, usage.get("tool_calls")))),
            ("last event", summary["last_event"] and "%s at %s (%s ago)" % (
                summary["last_event"], time.strftime("%H:%M:%S", time.localtime(moment)),
                format_duration(max(now - moment, 0)))),
            ("skipped", summary["skipped_lines"] and "%s that did not parse" % plural(
                summary["skipped_lines"], "line"))]
    return "".join("%-10s  %s\n" % (key, clean(str(value))) for key, value in rows if value)


def _status_row(summary: Fields) -> str:
    """One line of `status --all`: start, procedure, iterations, status, duration, cost,
    why it ended (else the last failure's reason), and where it ran (many loops may
    share a log directory, SPEC 19); `?` for what the tail did not hold."""
    started = parse_iso_time(summary["started"])
    cap, cost = summary["max_iterations"], (summary["usage"] or {}).get("cost_usd")
    spent = "?" if summary["successes"] is None else "-"  # (the tail did not say; nothing reported)
    if cost is not None:
        spent = format_cost(cost)
    why = summary["reason"] or ""  # (a death, and the last failure before it: SPEC 16 rev 4)
    if summary["last_failure"] and (not why or summary["state"] == RUN_DIED):
        why = "; ".join(filter(None, (why, "last failure: " + summary["last_failure"])))
    return "%s  %-12s  %7s  %-11s  %9s  %6s  %s%s" % (
        local_time(started) if started else "?" * 19,
        clean(str(summary["procedure"])), "%d%s" % (summary["iterations"], "/%d" % cap if cap else ""),
        summary["status"] if summary["state"] == RUN_ENDED else summary["state"],
        format_duration(summary["elapsed_seconds"] or 0), spent, _one_line(why, REASON_CHARS),
        "  in " + clean(summary["cwd"]) if summary["cwd"] else "")


def _sessions(options: Any, everyone: bool = False) -> Tuple[str, List[str]]:
    """The log directory a run from here would use (or --log-dir) and its sessions, newest
    first -- or the one named (find_sessions). Unless `everyone`, those that ran in this
    directory's repository (else this directory) come first: in a log directory many
    loops share, `status`, `report` and `resume` mean the newest session of this
    repository, the newest of all only when none ran here (SPEC 19 rev 5)."""
    here = os.getcwd()
    directory = os.path.join(here, os.path.expanduser(options.log_dir)) if options.log_dir else \
        os.path.join(ROODA_DIR, load_config(options.config).loop("log_dir"))
    named = options.words[0] if options.words else None
    sessions = find_sessions(directory, _display_path(directory, here), named)
    if named is not None or everyone:
        return directory, sessions
    repo = find_repository(here)[0]
    top = os.path.realpath(repo.top if repo else here)
    mine = [path for path in sessions if (os.path.realpath(str(_first_event(path).get("cwd") or "/-")) +
                                          os.sep).startswith(top + os.sep)]
    return directory, mine + [path for path in sessions if path not in mine]


def command_status(options: Any) -> int:
    """`status [SESSION] [--all] [--json] [--log-dir DIR]`: the newest session, the one
    named, or all of them, newest first; exit 1 when there is none."""
    try:
        _, sessions = _sessions(options, everyone=options.all)
    except RoodaError as exc:
        sys.stderr.write("rooda: %s\n" % exc)
        return 1
    now, summaries = time.time(), []
    for path in sessions if options.all else sessions[:1]:  # (the newest here, SPEC 19 rev 5)
        try:
            summaries.append(summarize_session(path, now, whole=not options.all))
        except OSError as exc:
            sys.stderr.write("rooda: cannot read %s: %s\n" % (_display_path(path, os.getcwd()), exc.strerror))
    if options.json:
        write_stdout("".join(as_json(summary) + "\n" for summary in summaries))
    elif summaries:  # (cleaned whole: no field of a log reaches a terminal raw, issue 43)
        write_stdout(clean("".join(_status_row(summary) + "\n" for summary in summaries) if options.all else
                           _status_text(summaries[0], os.getcwd(), now)))
    return 0 if summaries else 1


def command_report(options: Any) -> int:
    """`report [SESSION...] [--all] [--since WHEN] [--json | --html FILE|-]`: what the
    sessions did (SPEC 19): the newest session here by default; one line and exit 1 when
    the selection holds none."""
    chosen = [option for option in ("json", "html", "markdown") if getattr(options, option)]
    if len(chosen) > 1:
        raise UsageError("--%s and --%s exclude each other; choose one" % tuple(chosen[:2]))
    named, sessions = options.words, []
    try:
        for name in named:  # (each as `status` finds it: a path needs no log directory here)
            options.words = [name]
            sessions.append(_sessions(options)[1][0])
        if not named:
            directory, sessions = _sessions(options, everyone=options.all or options.since is not None)
    except RoodaError as exc:
        sys.stderr.write("rooda: %s\n" % exc)
        return 1
    if options.since is not None:
        sessions = [path for path in sessions if session_started(path) >= options.since]
    elif not (options.all or named):
        sessions = sessions[:1]
    if not sessions:
        sys.stderr.write("rooda: no session in %s started since %s\n" % (
            _display_path(directory, os.getcwd()), local_time(options.since)))
        return 1
    now = time.time()
    reports = [session_report(path, now) for path in reversed(sessions)]  # (oldest first)
    target = options.html or options.markdown
    page = target and (report_html if options.html else report_markdown)(reports, now)
    if target and target != "-":
        try:
            with open(target, "w", encoding="utf-8") as stream:
                stream.write(page)
        except OSError as exc:
            raise RoodaError("cannot write %s: %s" % (target, exc.strerror)) from None
        sys.stderr.write("rooda: the report of %s is in %s\n" % (plural(len(reports), "session"), target))
    elif target:
        write_stdout(page)
    elif options.json:
        write_stdout("".join(as_json(report) + "\n" for report in reports))
    else:  # (fitted to COLUMNS or the terminal; off one, in a file or a pipe, a line is whole)
        import shutil
        write_stdout(report_text(reports, shutil.get_terminal_size((0, 0)).columns or 1 << 20))
    return 0


def read_answer(given: str) -> str:
    """The person's answer (SPEC 24): the text, or @FILE's, cleaned; at most ANSWER_BYTES
    (a longer one is cut, and said so)."""
    text: str | None = given
    if given.startswith("@"):
        text = _read_file(given[1:]) if os.path.isfile(given[1:]) else None
    if text is None:
        raise RoodaError("--answer %s: cannot read %s (no such file, or not readable)" % (given, given[1:]))
    text = clean(text).strip()
    if not text:
        raise UsageError("--answer is empty: give the answer, or @FILE with it")
    size = len(text.encode("utf-8"))
    if size > ANSWER_BYTES:
        sys.stderr.write("WARNING: the answer is %d bytes; the next prompt gets its first %d\n" % (
            size, ANSWER_BYTES))
        text = text.encode("utf-8")[:ANSWER_BYTES].decode("utf-8", "ignore")
    return text


def command_resume(options: Any) -> int:
    """`resume [SESSION] [options]`: go on with a session that was interrupted, died, or
    stopped for the provider, where it was (SPEC 16); options given override its own.
    `--answer`: the person's answer to the agent's open question (SPEC 24), which makes a
    session that stopped on it resumable too, its failure streak begun anew."""
    answer = read_answer(options.answer) if options.answer is not None else None
    directory, sessions = _sessions(options)
    here = os.path.realpath(os.getcwd())
    for path in sessions:  # named, or the newest started here: its agent and gates run here
        ran_here = os.path.realpath(str(_first_event(path).get("cwd") or "/-")) == here
        if options.words or ran_here:
            break
    else:
        raise RoodaError("no session in %s was started in %s" % (_display_path(directory, here), here))
    shown = os.path.basename(path)
    try:  # the lock first, then what the session did: nothing may go on with it meanwhile
        locked = lock_session(path)
    except RoodaError:
        summary = summarize_session(path)  # (read only: to say why)
        if summary["state"] in (RUN_RUNNING, RUN_STOPPED):
            raise RoodaError("%s is still running (pid %s); `status` says what it does" % (
                shown, summary["pid"])) from None
        raise
    except OSError as exc:
        raise RoodaError("cannot open %s: %s" % (path, exc.strerror)) from None
    reader = SessionReader(path, time.time(), detail=True)
    summary = reader.read()
    if not ran_here:
        raise RoodaError("%s was started in %s; resume it from there" % (shown, summary["cwd"]))
    resumable = summary["resumable"] if summary["resumable"] is not None else summary["status"] in {
        stop.status for stop in STOPS.values() if stop.resumable}  # (a session of an older rooda)
    files = SessionFiles.of(path)
    assert files
    if summary["state"] == RUN_ENDED and not resumable and summary["needs"] and not answer:
        raise RoodaError("%s ended %s and asks: %s; answer it: resume %s --answer TEXT" % (
            shown, summary["status"], summary["needs"], files.base))
    if summary["state"] == RUN_ENDED and not resumable and not summary["needs"]:
        raise RoodaError("%s ended %s, nothing to resume (%s); start a new run instead" % (
            shown, summary["status"], summary["reason"]))
    argv = [str(word) for word in summary["argv"] or ()]
    if not argv:
        raise RoodaError("%s does not say how it was started (an older rooda wrote it); start a new run"
                         " instead" % shown)
    # What the session carries over (run_loop): its summary, its base name and lock, the usage known,
    # and what the next attempt is told of (the last counted iteration, else a failing baseline).
    told = {"question": summary["needs"], "answer": answer} if answer else None
    if answer:  # (the person's answer starts the failure streak anew)
        summary["consecutive_failures"] = 0
    point = dict(summary, session=files.base, lock=locked, previous=reader.previous, agent_before=reader.ran,
                 answer=told,
                 seconds=summary["elapsed_seconds"] or 0.0,
                 usage={name: value for name, value in (summary["usage"] or {}).items() if value is not None})
    own, at = list(options.argv), 0  # its own options: its words taken out by position, not value
    for word in ("resume",) + tuple(options.words):
        with _suppress(ValueError):
            at = own.index(word, at)
            del own[at]
    again = parse_args(argv + own + ["--log-dir", files.directory])  # (the session's own, SPEC 16)
    if again.command in RESERVED_WORDS and again.command not in ("run", "prompt"):
        raise RoodaError("%s was not a run (%s); start a new run instead" % (shown, " ".join(argv)))
    again.argv, again.resumed = argv, point  # (a later resume starts from the session's own argv again)
    again.answer = None  # (resume's own: the run has it in `resumed`)
    again.prompt_text = reader.prompt
    return dispatch(again)


def dispatch(options: Any) -> int:
    if options.version or options.command == "version":
        write_stdout("rooda %s\n" % __version__)
        return 0
    if options.help or options.command in (None, "help"):
        if options.command is None and not options.help:
            sys.stderr.write("usage: %s\n\nTry 'python3 rooda.py --help'.\n" % USAGE)
            return 2
        write_stdout(options.parser.format_help())
        return 0
    command, words = options.command, options.words
    for option, commands in COMMAND_OPTIONS.items():
        if getattr(options, option[2:]) and command not in commands:
            raise UsageError("%s is only for %s" % (option, " and ".join("'%s'" % c for c in commands)))
    if command in COMMANDS:
        fewest, most, usage, _ = COMMANDS[command]
        if len(words) > most:
            raise UsageError("unexpected argument '%s' (usage: python3 rooda.py %s)" % (words[most], usage))
        if len(words) < fewest:
            if command == "run":
                raise UsageError("'run' needs a procedure name, e.g. 'python3 rooda.py run build'")
            raise UsageError("usage: python3 rooda.py %s" % usage)
    first = words[0] if words else None
    handlers = {"config": lambda: command_config(options, first), "list": lambda: command_list(options),
                "info": lambda: command_info(options, words[0]),
                "doctor": lambda: command_doctor(options, first),
                "vendor": lambda: command_vendor(options, words[0]),
                "status": lambda: command_status(options), "resume": lambda: command_resume(options),
                "report": lambda: command_report(options)}
    if command in handlers:
        return handlers[command]()
    if command == "prompt":
        return command_run(options, "prompt", words[1] if len(words) > 1 else None, prompt_file=words[0])
    if command == "run":
        command, words = words[0], words[1:]
    if len(words) > 1:
        raise UsageError("unexpected argument '%s' (usage: <procedure> [max_iterations])" % words[1])
    return command_run(options, command, words[0] if words else None)


def main(argv: Sequence[str] | None = None) -> int:
    """Parse, dispatch, and turn errors into messages and exit codes."""
    global _FATAL_SIGNAL
    _FATAL_SIGNAL = None
    try:
        return dispatch(parse_args(sys.argv[1:] if argv is None else argv))
    except ConfigError as exc:
        sys.stderr.write("\n".join(exc.lines()) + "\n")
        return exc.exit_code
    except UsageError as exc:
        sys.stderr.write("rooda: error: %s\nTry 'python3 rooda.py --help'.\n" % exc)
        return exc.exit_code
    except RoodaError as exc:
        sys.stderr.write("rooda: error: %s\n" % exc)
        return exc.exit_code
    except BrokenPipeError:
        _silence_stdout()
        return 0
    except KeyboardInterrupt:
        _FATAL_SIGNAL = signal.SIGINT
        return 130


def _exit(status: int) -> None:
    """Exit with `status`; after an interrupted run, die of the same signal (SPEC 5), so
    the shell sees 130 / 143 / 129 and a calling script stops too."""
    if _FATAL_SIGNAL is not None:
        for stream in (sys.stdout, sys.stderr):
            with _suppress(OSError, ValueError):
                stream.flush()
        signal.signal(_FATAL_SIGNAL, signal.SIG_DFL)
        os.kill(os.getpid(), _FATAL_SIGNAL)
    sys.exit(status)


if __name__ == "__main__":
    _exit(main())
