#!/usr/bin/env python3
"""A scripted stand-in for an agent CLI, for rooda's tests (never a real agent).

Environment:
  FAKE_AGENT_STATE   a directory; call N (1-based) records there:
                       prompt-N.txt  the prompt it received (stdin, or the {prompt_file})
                       env-N.json    its ROODA_* variables and CLAUDECODE
                       pid-N         its pid (= its process group: rooda starts it in a session)
                       ppid-N        its parent's pid (rooda's)
                       time-N        when it started (time.time())
                       argv-N.json   its arguments
                       cli-N         the CLI it stood in for (FAKE_AGENT_AS, set by fake_cli)
  FAKE_AGENT_SCRIPT  a JSON file: a list of steps, one per call (the last one repeats),
                     or {"steps": [...]}.

A step is a mapping:
  "stdin":   "first" (default: read all of stdin, then act), "after" (act, then read),
             "never"
  "actions": a list, done in order, of
     {"out": TEXT} / {"err": TEXT}     write to stdout / stderr (no newline added)
     {"out_hex": HEX}                  write raw bytes to stdout
     {"out_file": PATH}                write a file's bytes to stdout (a recorded stream)
     {"out_bytes": N, "line": L}       write N bytes of filler to stdout, a newline
                                       every L bytes (0: none), in 64 KiB writes
     {"echo_prompt": true}             write the prompt back to stdout
     {"sleep": SECONDS}
     {"touch": NAME}                   create FAKE_AGENT_STATE/NAME (an event a test awaits)
     {"write_file": PATH, "text": TEXT} write a file (relative to the working directory), its
                                       directories made
     {"remove": PATH}                  delete a file (relative to the working directory)
     {"wait_for": NAME}                wait (up to 30 s) until a test creates that file
     {"background": SECONDS, "hold_output": true|false, "setsid": false, "name": NAME,
      "ignore_int": false}             start a child that sleeps (with SIGINT ignored, as a
                                       shell's `cmd &` is); its pid goes to
                                       FAKE_AGENT_STATE/NAME (default bg-N.pid)
     {"ignore_term": true}             ignore SIGTERM from now on
     {"term_goes_on": NAME}            on SIGTERM create FAKE_AGENT_STATE/NAME and go on (as
                                       Claude Code does during a tool); SIGINT ends it, even
                                       where it was started with SIGINT ignored (so does Claude)
     {"kill_self": SIGNUM}             die of a signal
  "exit":    the exit code (default 0)

With `--prompt-file PATH` the prompt is read from PATH instead of stdin.
"""
import json
import os
import signal
import subprocess
import sys
import time


def main():
    state = os.environ.get("FAKE_AGENT_STATE") or "."
    counter = os.path.join(state, "calls")
    try:
        with open(counter) as stream:
            call = int(stream.read() or 0) + 1
    except FileNotFoundError:
        call = 1
    with open(counter, "w") as stream:
        stream.write(str(call))
    with open(os.path.join(state, "pid-%d" % call), "w") as stream:
        stream.write(str(os.getpid()))
    with open(os.path.join(state, "time-%d" % call), "w") as stream:
        stream.write(repr(time.time()))
    with open(os.path.join(state, "ppid-%d" % call), "w") as stream:
        stream.write(str(os.getppid()))
    with open(os.path.join(state, "argv-%d.json" % call), "w") as stream:
        json.dump(sys.argv[1:], stream)
    with open(os.path.join(state, "cli-%d" % call), "w") as stream:
        stream.write(os.environ.get("FAKE_AGENT_AS", ""))  # (which fake CLI on PATH ran it)

    steps = [{}]
    script = os.environ.get("FAKE_AGENT_SCRIPT")
    if script:
        with open(script) as stream:
            loaded = json.load(stream)
        steps = loaded["steps"] if isinstance(loaded, dict) else loaded
    step = steps[min(call, len(steps)) - 1]

    prompt_file = None
    if "--prompt-file" in sys.argv:
        prompt_file = sys.argv[sys.argv.index("--prompt-file") + 1]
    prompt = b""

    def read_prompt():
        nonlocal prompt
        if prompt_file:
            with open(prompt_file, "rb") as stream:
                prompt = stream.read()
        else:
            prompt = sys.stdin.buffer.read()
        with open(os.path.join(state, "prompt-%d.txt" % call), "wb") as stream:
            stream.write(prompt)

    with open(os.path.join(state, "env-%d.json" % call), "w") as stream:
        json.dump({k: v for k, v in os.environ.items()
                   if k.startswith("ROODA_") or k in ("CLAUDECODE", "FAKE_EXTRA")}, stream)

    mode = step.get("stdin", "first")
    if mode == "first":
        read_prompt()
    out, err = sys.stdout.buffer, sys.stderr.buffer
    for action in step.get("actions", []):
        if "out" in action:
            out.write(action["out"].encode("utf-8"))
            out.flush()
        elif "err" in action:
            err.write(action["err"].encode("utf-8"))
            err.flush()
        elif "out_hex" in action:
            out.write(bytes.fromhex(action["out_hex"]))
            out.flush()
        elif "out_file" in action:
            with open(action["out_file"], "rb") as stream:
                out.write(stream.read())
            out.flush()
        elif "out_bytes" in action:
            total, line = action["out_bytes"], action.get("line", 0)
            block = bytearray(b"x" * 65536)
            if line:
                for index in range(line - 1, len(block), line):
                    block[index] = 10
            block = bytes(block)
            while total > 0:
                piece = block[:min(total, len(block))]
                out.write(piece)
                total -= len(piece)
            out.flush()
        elif "echo_prompt" in action:
            out.write(prompt)
            out.flush()
        elif "sleep" in action:
            time.sleep(action["sleep"])
        elif "write_file" in action:
            if os.path.dirname(action["write_file"]):
                os.makedirs(os.path.dirname(action["write_file"]), exist_ok=True)
            with open(action["write_file"], "w") as stream:
                stream.write(action["text"])
        elif "remove" in action:
            os.unlink(action["remove"])
        elif "wait_for" in action:
            target = os.path.join(state, action["wait_for"])
            deadline = time.monotonic() + 30
            while not os.path.exists(target) and time.monotonic() < deadline:
                time.sleep(0.005)
        elif "touch" in action:
            open(os.path.join(state, action["touch"]), "w").close()
        elif "background" in action:
            hold = action.get("hold_output", True)
            child = subprocess.Popen(
                [sys.executable, "-c", "import time; time.sleep(%r)" % action["background"]],
                stdin=subprocess.DEVNULL,
                stdout=None if hold else subprocess.DEVNULL,
                stderr=None if hold else subprocess.DEVNULL,
                start_new_session=bool(action.get("setsid")),
                preexec_fn=(lambda: signal.signal(signal.SIGINT, signal.SIG_IGN)) if action.get("ignore_int")
                else None)
            name = action.get("name", "bg-%d.pid" % call)
            with open(os.path.join(state, name), "w") as stream:
                stream.write(str(child.pid))
        elif "ignore_term" in action:
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
        elif "term_goes_on" in action:
            marker = os.path.join(state, action["term_goes_on"])
            signal.signal(signal.SIGTERM, lambda *_: open(marker, "w").close())
            signal.signal(signal.SIGINT, signal.default_int_handler)
        elif "kill_self" in action:
            out.flush()
            os.kill(os.getpid(), action["kill_self"])
            time.sleep(10)
    if mode == "after":
        read_prompt()
    return step.get("exit", 0)


if __name__ == "__main__":
    sys.exit(main())
