"""Session files of a night as rooda writes them, made without running one: for what a real
run cannot do in a test's time (hours of a night, 1,000 iterations, 20 loops at once) --
the report's scale checks, `make bench`, and the README's picture (`python3 tests/nights.py
DIR` writes the night of the picture into DIR). The report's own tests use real runs."""
import json
import os
import sys
import time


class Session:
    """One session's .jsonl, written event by event on a clock of its own."""

    def __init__(self, directory, start, cwd, procedure="build", cap=None, reserve=None):
        self.path = os.path.join(directory, time.strftime("session-%Y%m%d-%H%M%S.jsonl", time.localtime(start)))
        self.clock, self.events, self.start = start, [], start
        self.add("session_start", procedure=procedure, cwd=cwd, max_iterations=cap, pid=999999, version="0.2.0",
                 argv=[procedure, "-n", str(cap or 0)], log=self.path[:-6] + ".log",
                 **({"reserve": reserve} if reserve else {}))

    def add(self, name, after=0.0, **fields):
        self.clock += after
        self.events.append(dict({"event": name, "time": time.strftime(
            "%Y-%m-%dT%H:%M:%S", time.gmtime(self.clock)) + ".000Z"}, **fields))

    def attempt(self, number, seconds, outcome, reason=None, cause=None, cost=0.3, commit=None, **more):
        self.add("iteration_start", 2, iteration=number)
        if commit:
            self.add("commit", seconds - 1, iteration=number, hash=commit[0], files=3, pushed=False,
                     message=commit[1])
            self.clock -= seconds - 1
        self.add("iteration_end", seconds, iteration=number, seconds=seconds, outcome=outcome, cause=cause,
                 reason=reason, usage={"cost_usd": cost, "input_tokens": 40000, "output_tokens": 2500}, **more)

    def window(self, name, used, resets):
        self.add("window", window=name, utilization=used, resets_at=time.strftime(
            "%Y-%m-%dT%H:%M:%S.000Z", time.gmtime(resets)), status="allowed", threshold=None)

    def end(self, status, reason, exit_code, iterations):
        self.add("session_end", 1, status=status, reason=reason, exit_code=exit_code, iterations=iterations,
                 resumable=status in ("limited", "interrupted", "unavailable"), seconds=self.clock - self.start)

    def write(self):
        with open(self.path, "w") as stream:
            stream.write("".join(json.dumps(event) + "\n" for event in self.events))
        return self.path


def picture_night(directory, evening=None):
    """The night of the README's picture: four loops sharing a log directory -- one that
    completed (a commit, a verify failure, a usage limit waited out, the agent asking for a
    key, commits), one that aborted after three timeouts, one held by its reserve, one
    interrupted -- with the windows' readings."""
    start = evening or time.mktime(time.strptime("2026-11-27 22:00", "%Y-%m-%d %H:%M"))
    os.makedirs(directory, exist_ok=True)
    home = "/home/me/src/"
    a = Session(directory, start, home + "shop", cap=8, reserve={"seven_day": 0.2})
    a.add("gate", 3, gate="verify", command="make test", exit_code=1, seconds=3, baseline=True,
          line="2 failed, 14 passed in 3.10s", counts={"run": 16, "skipped": 0, "failed": 2})
    a.window("five_hour", 0.22, start + 4 * 3600)
    a.window("seven_day", 0.41, start + 3 * 86400)
    a.attempt(1, 1480, "success", commit=("1a2b3c4", "build 1: Add the cart model"), cost=0.42)
    a.attempt(2, 1210, "failure", "verify exit 1: 2 failed, 14 passed (tests/test_cart.py::test_total)",
              "verify", cost=0.38)
    a.window("five_hour", 0.61, start + 4 * 3600)
    a.attempt(3, 1620, "success", commit=("2b3c4d5", "build 3: Fix the cart total rounding"), cost=0.51)
    a.window("five_hour", 1.0, start + 4 * 3600)
    a.attempt(4, 12, "limited", "limit (usage_limit_reached): You've hit your 5-hour limit · resets 2:00am",
              "limit", cost=0.0)
    a.add("limit", kind="five_hour", message="You've hit your 5-hour limit", wait_seconds=3600,
          resets_at=time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime(start + 4 * 3600)))
    a.clock += 3600
    a.window("five_hour", 0.04, start + 9 * 3600)
    a.attempt(4, 1390, "failure", "agent: The webhooks task needs STRIPE_TEST_KEY, which is not set in this"
              " environment; I stopped before faking it", "agent", cost=0.33)
    a.attempt(5, 1710, "success", commit=("3c4d5e6", "build 5: Add order webhooks behind a flag"), cost=0.47)
    a.window("five_hour", 0.31, start + 9 * 3600)
    a.window("seven_day", 0.54, start + 3 * 86400)
    a.attempt(6, 1550, "completed", commit=("4d5e6f7", "build 6: Document the cart API"), cost=0.44)
    a.add("gate", gate="verify", command="make test", exit_code=0, seconds=3, line="18 passed in 3.40s",
          counts={"run": 18, "skipped": 0, "failed": 0})
    a.end("completed", "success signal", 0, 6)
    b = Session(directory, start + 300, home + "api", cap=10)
    b.attempt(1, 1900, "success", commit=("5e6f7a8", "build 1: Split the router"), cost=0.61)
    for number in (2, 3, 4):
        b.attempt(number, 1800, "timeout", "timeout: time limit of 30m reached", "timeout", cost=0.58)
    b.end("aborted", "3 consecutive failures", 1, 4)
    c = Session(directory, start + 900, home + "docs", procedure="audit-spec", cap=3, reserve={"five_hour": 0.2})
    c.attempt(1, 2400, "success", commit=("6f7a8b9", "audit-spec 1: Report the gaps in the API spec"), cost=0.71)
    c.window("five_hour", 0.83, start + 4 * 3600)
    c.add("limit", kind="reserve", message="reserve reached: five_hour 83% used, 20% kept", wait_seconds=0,
          resets_at=time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime(start + 4 * 3600)))
    c.end("limited", "reserve reached: five_hour 83% used, 20% kept; it resets at 02:00 (on_limit is stop)", 4, 1)
    d = Session(directory, start + 6 * 3600, home + "shop", procedure="plan", cap=3)
    d.attempt(1, 900, "success", cost=0.2)
    d.attempt(2, 400, "interrupted", cost=0.05)
    d.end("interrupted", "interrupted by SIGTERM", 143, 1)
    return [session.write() for session in (a, b, c, d)]


def long_session(directory, iterations=1000, start=1795737600.0):
    """One session of many iterations: a failure in four, a commit for the rest, a wait,
    window readings every ten."""
    os.makedirs(directory, exist_ok=True)
    session = Session(directory, start, "/home/me/project", cap=iterations)
    for number in range(1, iterations + 1):
        failed = number % 4 == 0
        session.attempt(number, 310.0, "failure" if failed else "success",
                        "verify exit 1: 3 failed, 10 passed <tests/test_x.py>" if failed else None,
                        "verify" if failed else None, 0.31,
                        None if failed else ("%07x" % number, "build %d: a change of some length" % number))
        if number % 10 == 0:
            session.window("five_hour", (number % 500) / 500, session.clock + 3600)
        if number == 500:
            session.add("limit", kind="five_hour", message="limit", wait_seconds=3600, resets_at=None)
            session.clock += 3600
    session.end("completed", "max iterations", 0, iterations)
    return session.write()


def many_sessions(directory, count=20, start=1795737600.0):
    """`count` loops of one to three attempts each, in one log directory."""
    os.makedirs(directory, exist_ok=True)
    paths = []
    for index in range(count):
        session = Session(directory, start + index * 61, "/home/me/src/repo%02d" % index, cap=3)
        for number in range(1, 1 + index % 3 + 1):
            session.attempt(number, 600 + index * 13, ("success", "failure", "timeout")[(index + number) % 3],
                            None if (index + number) % 3 == 0 else "exit 1: boom", cost=0.2)
        session.end(("completed", "aborted", "limited", "interrupted")[index % 4], "done", 0, 1 + index % 3)
        paths.append(session.write())
    return paths


if __name__ == "__main__":
    picture_night(sys.argv[1])
