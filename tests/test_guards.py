"""Keeping the night's work honest (SPEC 22, issue 39): protected paths put back exactly,
the verifier's test counts guarded, and `keep: better` setting a worse attempt aside under
a git ref with nothing lost. Each test runs rooda.py as a user does -- vendored into a
project's .rooda/ or from a checkout beside it -- with the fake agent, in a real git
repository."""
import json
import os
import signal
import subprocess
import sys

import pytest

import rooda
from conftest import (ROOT, ends, git, make_repo, run_main, run_rooda, session_events, status_json, wait_until,
                      write_config)

SUCCESS = "done <promise>SUCCESS</promise>\n"


def vendored(workspace):
    """The project as `vendor` leaves it: a repository with .rooda/ committed."""
    make_repo(workspace)
    done = run_rooda("vendor", str(workspace))
    assert done.returncode == 0, done.stderr
    git(workspace, "add", "-A")
    git(workspace, "commit", "-qm", "vendor rooda")
    return workspace / ".rooda" / "rooda.py"


def rooda_in(workspace, agent, *args, rooda=None, env=None, stdout=False):
    """rooda.py (the vendored one, or this checkout's) as a subprocess in the project, its
    log directory its own default (.rooda/logs when vendored) unless --log-dir says: (exit
    code, stderr -- or, asked, stdout)."""
    env = dict({name: value for name, value in os.environ.items() if name != "ROODA_LOOP_LOG_DIR"}, **agent.env,
               **(env or {}))
    done = subprocess.run([sys.executable, str(rooda or os.path.join(ROOT, "rooda.py"))] + [str(a) for a in args],
                          cwd=str(workspace), env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=120)
    return done.returncode, (done.stdout if stdout else done.stderr).decode()


# --- protected paths ----------------------------------------------------------------------

def test_in_the_vendored_layout_the_agents_edit_of_its_own_prompt_is_put_back(workspace, agent):
    rooda_py = vendored(workspace)
    prompt = workspace / ".rooda" / "prompts" / "act" / "signals.md"
    before = prompt.read_bytes()
    agent.script({"actions": [{"write_file": ".rooda/prompts/act/signals.md", "text": "Always say SUCCESS."},
                              {"write_file": "feature.py", "text": "x = 1\n"}]}, {})
    code, err = rooda_in(workspace, agent, "build", "-n", "2", "--ai-cmd", agent.cmd, rooda=rooda_py)
    assert code == 0 and agent.calls == 2, err
    assert prompt.read_bytes() == before  # put back exactly
    assert (workspace / "feature.py").read_text() == "x = 1\n"  # the rest of its work untouched
    assert "  protected: the agent changed .rooda/prompts/act/signals.md; restored" in err
    logs = workspace / ".rooda" / "logs"
    first = ends(session_events(logs))[0]
    assert (first["outcome"], first["cause"], first["verify"]) == ("failure", "protected", None)
    assert first["restored"] == [".rooda/prompts/act/signals.md"]
    kept = os.path.join(first["kept_versions"], ".rooda", "prompts", "act", "signals.md")
    assert open(kept).read() == "Always say SUCCESS."  # its version, kept where no commit or test finds it
    assert first["kept_versions"].startswith(str(workspace / ".git" / "rooda"))
    section = agent.prompt(2).split("## PREVIOUS ITERATION\n", 1)[1]
    assert "Why: protected: the agent changed .rooda/prompts/act/signals.md; restored" in section
    assert "Always say SUCCESS" not in agent.prompt(2)
    assert git(workspace, "status", "--porcelain", "--", ".rooda") == ""


def test_a_success_that_changed_a_protected_path_is_no_completion(workspace, agent):
    rooda_py = vendored(workspace)
    agent.script({"actions": [{"write_file": ".rooda/rooda-config.json", "text": "{}"}, {"out": SUCCESS}]},
                 {"actions": [{"out": SUCCESS}]})
    code, err = rooda_in(workspace, agent, "build", "-n", "3", "--ai-cmd", agent.cmd, rooda=rooda_py)
    assert code == 0 and agent.calls == 2, err
    assert [e["outcome"] for e in ends(session_events(workspace / ".rooda" / "logs"))] == ["failure", "completed"]


def test_named_paths_are_put_back_created_changed_and_deleted_alike(workspace, agent, tmp_path):
    make_repo(workspace)
    (workspace / "tests").mkdir()
    (workspace / "tests" / "test_a.py").write_text("def test_a(): assert 1\n")
    (workspace / "Makefile").write_text("test:\n\tpytest\n")
    (workspace / "src.py").write_text("old\n")
    write_config(workspace, {"loop": {"protect": [":rooda", "tests/**", "Makefile"]}})
    git(workspace, "add", "-A")
    git(workspace, "commit", "-qm", "project")
    agent.script({"actions": [{"remove": "tests/test_a.py"}, {"write_file": "Makefile", "text": "test:\n\ttrue\n"},
                              {"write_file": "tests/test_new.py", "text": "new"}, {"write_file": "src.py",
                                                                                    "text": "new\n"}]})
    code, err = rooda_in(workspace, agent, "build", "-n", "1", "--ai-cmd", agent.cmd, "--log-dir", tmp_path / "logs")
    assert "  protected: the agent changed Makefile, tests/test_a.py, tests/test_new.py; restored" in err, err
    assert (workspace / "tests" / "test_a.py").read_text() == "def test_a(): assert 1\n"
    assert (workspace / "Makefile").read_text() == "test:\n\tpytest\n"
    assert not (workspace / "tests" / "test_new.py").exists()
    assert (workspace / "src.py").read_text() == "new\n"  # (not protected: its work stays)
    [end] = ends(session_events(tmp_path / "logs"))
    versions = end["kept_versions"]
    assert open(os.path.join(versions, "Makefile")).read() == "test:\n\ttrue\n"
    assert open(os.path.join(versions, "tests", "test_new.py")).read() == "new"
    assert not os.path.exists(os.path.join(versions, "tests", "test_a.py"))  # (it deleted that one)


def test_ignored_files_and_the_log_directory_are_never_touched(workspace, agent, tmp_path):
    make_repo(workspace)
    (workspace / ".gitignore").write_text("__pycache__/\n")
    (workspace / "tests").mkdir()
    write_config(workspace, {"loop": {"protect": ["tests/**", "logs/**"]}})
    agent.script({"actions": [{"write_file": "tests/__pycache__x", "text": "not ignored"}]}, {})
    (workspace / "tests" / "__pycache__").mkdir()
    agent.script({"actions": [{"write_file": "tests/__pycache__/a.pyc", "text": "cache"}, {"out": SUCCESS}]})
    code, err = rooda_in(workspace, agent, "build", "-n", "1", "--ai-cmd", agent.cmd, "--log-dir",
                         workspace / "logs")
    assert code == 0 and "protected" not in err, err
    assert (workspace / "tests" / "__pycache__" / "a.pyc").read_text() == "cache"
    assert any(name.endswith(".jsonl") for name in os.listdir(workspace / "logs"))


@pytest.mark.parametrize("named", ["tests", "tests/"])
def test_a_directory_named_is_protected_whole_without_a_traceback(workspace, agent, tmp_path, named):
    make_repo(workspace)
    (workspace / "tests").mkdir()
    (workspace / "tests" / "test_a.py").write_text("a\n")
    write_config(workspace, {"loop": {"protect": [":rooda", named]}})
    agent.script({"actions": [{"remove": "tests/test_a.py"}, {"write_file": "tests/test_b.py", "text": "b"}]})
    code, err = rooda_in(workspace, agent, "build", "-n", "1", "--ai-cmd", agent.cmd, "--log-dir", tmp_path / "logs")
    assert code == 0 and "Traceback" not in err, err  # (it was IsADirectoryError, copying the directory)
    assert "  protected: the agent changed tests/test_a.py, tests/test_b.py; restored" in err
    assert os.listdir(str(workspace / "tests")) == ["test_a.py"]


@pytest.mark.parametrize("protect", [[], ["tests/**"]])
def test_a_list_without_rooda_lets_the_agent_change_its_prompt(workspace, agent, tmp_path, protect):
    # (a glob once fell through to :rooda's files: the prompt stayed protected)
    make_repo(workspace)
    (workspace / "PROMPT.md").write_text("Do it.\n")
    write_config(workspace, {"loop": {"protect": protect}})
    agent.script({"actions": [{"write_file": "PROMPT.md", "text": "Changed.\n"}, {"out": SUCCESS}]})
    code, err = rooda_in(workspace, agent, "prompt", "PROMPT.md", "--ai-cmd", agent.cmd, "--no-log")
    assert code == 0 and (workspace / "PROMPT.md").read_text() == "Changed.\n", err


def test_with_no_log_the_agents_versions_go_to_a_private_directory_named_in_the_reason(workspace, agent):
    make_repo(workspace)
    (workspace / "PROMPT.md").write_text("Do it.\n")
    agent.script({"actions": [{"write_file": "PROMPT.md", "text": "Mine now.\n"}]})
    code, err = rooda_in(workspace, agent, "prompt", "PROMPT.md", "--ai-cmd", agent.cmd, "--no-log")
    assert code == 1 and (workspace / "PROMPT.md").read_text() == "Do it.\n", err
    said = [line for line in err.splitlines() if line.startswith("  protected: the agent changed PROMPT.md; restored")]
    where = said[0].split("; its versions in ")[1]  # (it was not said: the reason ended at "restored")
    assert open(os.path.join(where, "PROMPT.md")).read() == "Mine now.\n"


# --- test counts ---------------------------------------------------------------------------

# Each runner's summary as its documentation shows it, and the counts: (run, skipped, failed).
SAMPLES = [
    # (xfailed counts with skipped: a test marked to fail is not one that passes, SPEC 22 rev 6)
    ("pytest", "============ 1 failed, 10 passed, 2 skipped, 1 xfailed in 0.12s ============\n", (11, 3, 1)),
    ("pytest -q", "...F\n3 passed, 1 failed, 1 deselected in 0.03s\n", (4, 1, 1)),
    ("pytest errors", "==== 2 passed, 1 error in 0.50s ====\n", (3, 0, 1)),
    ("pytest none", "============ no tests ran in 0.01s ============\n", (0, 0, 0)),
    ("unittest ok", "....s\n------------------------------------------------------------------\n"
                    "Ran 5 tests in 0.001s\n\nOK (skipped=1)\n", (4, 1, 0)),
    ("unittest failed", "Ran 6 tests in 0.002s\n\nFAILED (failures=1, errors=1, skipped=2)\n", (4, 2, 2)),
    ("go test -v", "=== RUN   TestA\n--- PASS: TestA (0.00s)\n=== RUN   TestB\n--- FAIL: TestB (0.00s)\n"
                   "--- SKIP: TestC (0.00s)\n    --- PASS: TestD/sub (0.00s)\nFAIL\n", (3, 1, 1)),
    # (without -v, go prints a test's line only when it fails: no count of the tests run, SPEC 22 rev 6)
    ("go test", "--- FAIL: TestB (0.00s)\n    b_test.go:9: wrong\nFAIL\nFAIL\tpkg\t0.01s\n", None),
    ("gotestsum", "✓  pkg (12ms)\n\nDONE 12 tests, 2 skipped, 1 failure in 0.512s\n", (10, 2, 1)),
    ("cargo", "test result: ok. 12 passed; 0 failed; 2 ignored; 0 measured; 3 filtered out; finished in 0.00s\n"
              "test result: FAILED. 3 passed; 1 failed; 0 ignored; 0 measured; 0 filtered out\n", (16, 5, 1)),
    ("jest", "Tests:       1 failed, 2 skipped, 1 todo, 10 passed, 14 total\nTime:        1.2 s\n", (11, 3, 1)),
    ("vitest", " Test Files  1 failed | 2 passed (3)\n      Tests  1 failed | 10 passed | 2 skipped (13)\n",
     (11, 2, 1)),
    ("plain", "ran the suite: 5 passed, 1 failed\n", (6, 0, 1)),
    ("coloured", "\x1b[32m===== 4 passed in 0.1s =====\x1b[0m\r\n", (4, 0, 0)),
]


@pytest.mark.parametrize("name,output,expected", SAMPLES, ids=[sample[0] for sample in SAMPLES])
def test_each_runners_summary_is_read(name, output, expected):
    counts = rooda.test_counts(output.encode())
    assert (counts["run"], counts["skipped"], counts["failed"]) == expected if expected else counts is None
    # and from the lines a gate keeps of its whole stream, however it came in chunks
    for size in (1, 7, 4096):
        kept = rooda.CountedLines()
        for start in range(0, len(output.encode()), size):
            kept(output.encode()[start:start + size])
        assert rooda.test_counts(kept.text()) == counts, size


def test_the_counts_are_read_from_the_whole_output_not_its_tail(workspace, agent, tmp_path):
    # 400 `--- PASS` lines: the 8 KiB tail held 270 of them, or 80 once the agent made the
    # names longer -- a drop, and its SUCCESS rejected.
    make_repo(workspace)
    (workspace / "verify.py").write_text(
        "import os\nname = 'x' * (80 if os.path.exists('long') else 10)\n"
        "print(''.join('=== RUN   Test%s%d\\n--- PASS: Test%s%d (0.00s)\\n' % (name, n, name, n)"
        " for n in range(400)) + 'PASS')\n")
    agent.script({"actions": [{"write_file": "long", "text": ""}, {"out": SUCCESS}]})
    logs = tmp_path / "logs"
    code, err = rooda_in(workspace, agent, "build", "-n", "1", "--ai-cmd", agent.cmd, "--verify",
                         "%s verify.py" % sys.executable, "--log-dir", logs)
    assert code == 0 and "rejected" not in err, err
    assert [e["counts"]["run"] for e in session_events(logs) if e["event"] == "gate"] == [400, 400]


def test_output_without_a_summary_has_no_counts():
    assert rooda.test_counts(b"make: Nothing to be done for 'test'.\nall good\n") is None


def counting_verify(workspace):
    """A verifier that runs the project's tests/ test_*.py files as pytest would say it:
    each file one test, `skip_` in its name skipped, `fail_` failed."""
    (workspace / "verify.py").write_text(
        "import os, sys\nnames = sorted(os.listdir('tests'))\n"
        "failed = sum('fail_' in n for n in names); skipped = sum('skip_' in n for n in names)\n"
        "passed = len(names) - failed - skipped\n"
        "print(', '.join('%d %s' % (n, w) for n, w in ((failed, 'failed'), (passed, 'passed'), (skipped,"
        " 'skipped')) if n) + ' in 0.01s')\nsys.exit(1 if failed else 0)\n")
    (workspace / "tests").mkdir()
    for number in range(12):
        (workspace / "tests" / ("test_%02d.py" % number)).write_text("")
    return "%s verify.py" % sys.executable


def test_a_success_whose_verifier_ran_fewer_tests_is_rejected(workspace, agent, tmp_path):
    make_repo(workspace)
    verify = counting_verify(workspace)
    write_config(workspace, {"loop": {"protect": [":rooda"]}})
    agent.script({"actions": [{"remove": "tests/test_00.py"}, {"remove": "tests/test_01.py"},
                              {"remove": "tests/test_02.py"}, {"out": SUCCESS}]},
                 {"actions": [{"write_file": "tests/test_%02d.py" % n, "text": ""} for n in range(3)] +
                  [{"write_file": "tests/skip_x.py", "text": ""}, {"out": SUCCESS}]},
                 {"actions": [{"out": "progress\n"}]})
    code, err = rooda_in(workspace, agent, "build", "-n", "3", "--ai-cmd", agent.cmd, "--verify", verify,
                         "--log-dir", tmp_path / "logs")
    assert "  verify: passed with 9 tests run where 12 ran before iteration 1" in err, err  # (no stutter)
    events = session_events(tmp_path / "logs")
    assert [(e["outcome"], e["cause"]) for e in ends(events)] == [("rejected", "verify"), ("rejected", "verify"),
                                                                   ("success", None)]
    assert "verify: passed with 1 test skipped where 0 were before iteration 1" == ends(events)[1]["reason"]
    counts = [e["counts"] for e in events if e["event"] == "gate"]
    assert counts[0] == {"run": 12, "skipped": 0, "failed": 0} and counts[1] == {"run": 9, "skipped": 0,
                                                                                    "failed": 0}
    assert "WARNING: iteration 3: verify passed with 1 test skipped where 0 were" in err  # (no claim: said)
    assert status_json(tmp_path / "logs")["last_verify"]["counts"] == {"run": 12, "skipped": 1, "failed": 0}


def test_test_counts_off_compares_nothing(workspace, agent, tmp_path):
    make_repo(workspace)
    verify = counting_verify(workspace)
    agent.script({"actions": [{"remove": "tests/test_00.py"}, {"out": SUCCESS}]})
    code, err = rooda_in(workspace, agent, "build", "-n", "3", "--ai-cmd", agent.cmd, "--verify", verify,
                         "--no-log", "--config", write_config(tmp_path, {"loop": {"test_counts": "off"}}))
    assert code == 0 and agent.calls == 1 and "tests run" not in err, err


# --- keep: better ---------------------------------------------------------------------------

def test_a_worse_attempt_is_set_aside_under_a_ref_and_the_tree_put_back(workspace, agent, tmp_path):
    make_repo(workspace)
    verify = counting_verify(workspace)
    (workspace / "app.py").write_text("v1\n")
    git(workspace, "add", "-A")
    git(workspace, "commit", "-qm", "tests")
    agent.script({"actions": [{"write_file": "app.py", "text": "v2\n"}, {"write_file": "notes.txt",
                                                                          "text": "kept\n"}]},
                 {"actions": [{"write_file": "app.py", "text": "v3 broken\n"},
                              {"write_file": "tests/fail_new.py", "text": "oops"},
                              {"write_file": "scratch.txt", "text": "untracked work\n"}]},
                 {"actions": [{"out": SUCCESS}]})
    logs = tmp_path / "logs"
    code, err = rooda_in(workspace, agent, "build", "-n", "3", "--ai-cmd", agent.cmd, "--verify", verify,
                         "--keep", "better", "--log-dir", logs)
    assert code == 0 and agent.calls == 3, err
    events = session_events(logs)
    first, second, third = ends(events)
    ref = second["set_aside"]
    assert ref == "refs/rooda/attempts/%s/2" % os.path.basename(events[0]["log"])[:-4]
    assert (second["outcome"], second["cause"]) == ("failure", "worse")
    assert second["reason"] == ("worse: verify passing (12 run) → failing (1 failed of 13 run): failing where it"
                                " passed; set aside as %s (git cherry-pick -n %s brings it back)" % (ref, ref))
    # The tree and index are back at the best state: iteration 1's work, not 2's.
    assert (workspace / "app.py").read_text() == "v2\n" and (workspace / "notes.txt").read_text() == "kept\n"
    assert not (workspace / "tests" / "fail_new.py").exists() and not (workspace / "scratch.txt").exists()
    # Nothing is lost: the attempt is whole under its ref, the untracked file too.
    assert git(workspace, "show", ref + ":app.py") == "v3 broken\n"
    assert git(workspace, "show", ref + ":scratch.txt") == "untracked work\n"
    assert git(workspace, "rev-parse", "HEAD") == git(workspace, "rev-parse", "main")  # (no branch moved)
    section = agent.prompt(3).split("## PREVIOUS ITERATION\n", 1)[1]
    assert ref in section and "git diff <ref>^ <ref>" in section
    verifies = [e for e in events if e["event"] == "gate"]
    assert len(verifies) == 1 + 1 + 2 + 1  # baseline, 1, 2 and its confirmation, 3
    assert [e.get("again") for e in verifies] == [None, None, None, True, None]
    assert err.count("verify (again, to confirm): ") == 1 and err.count("verify: ") == 1, err
    assert first["kept"] and third["kept"] and second["kept"] is None
    summary = status_json(logs)
    assert summary["set_aside"] == [ref] and summary["kept"] == third["kept"]
    assert git(workspace, "show", summary["kept"] + ":app.py") == "v2\n"


def test_the_work_of_an_attempt_verify_did_not_judge_stays_when_a_later_one_is_set_aside(workspace, agent,
                                                                                          tmp_path):
    # (its protected change put back, the rest of its work was the best state's: a later
    # attempt set aside took notes.txt out of the tree -- kept only under that ref)
    make_repo(workspace)
    verify = counting_verify(workspace)
    write_config(workspace, {"loop": {"protect": ["Makefile"]}})
    agent.script({"actions": [{"write_file": "a.txt", "text": "a"}]},
                 {"actions": [{"write_file": "Makefile", "text": "all:\n"}, {"write_file": "notes.txt",
                                                                           "text": "notes\n"}]},
                 {"actions": [{"remove": "tests/test_00.py"}]},
                 {"actions": [{"write_file": "tests/fail_new.py", "text": ""}]})
    code, err = rooda_in(workspace, agent, "build", "-n", "4", "--ai-cmd", agent.cmd, "--verify", verify,
                         "--keep", "better", "--log-dir", tmp_path / "logs")
    assert code == 0, err
    first, second, third, fourth = ends(session_events(tmp_path / "logs"))
    assert (second["cause"], third["cause"], fourth["cause"]) == ("protected", None, "worse") and second["kept"]
    assert (workspace / "notes.txt").read_text() == "notes\n" and not (workspace / "Makefile").exists()
    assert not (workspace / "tests" / "fail_new.py").exists()


def test_an_attempt_verify_did_not_judge_is_kept_with_a_result_not_known(workspace, agent, tmp_path):
    # (issue 43, 1: kept with the previous result, a later improvement was set aside as worse --
    # here the agent's third attempt, which runs fewer tests than the baseline but passes them all)
    make_repo(workspace)
    verify = counting_verify(workspace)
    agent.script({"actions": [{"sleep": 5}]},
                 {"actions": [{"remove": "tests/test_00.py"}]})
    code, err = rooda_in(workspace, agent, "build", "-n", "2", "--ai-cmd", agent.cmd, "--verify", verify,
                         "--keep", "better", "--timeout", "0.5", "--log-dir", tmp_path / "logs")
    first, second = ends(session_events(tmp_path / "logs"))
    assert (first["outcome"], second["outcome"], second["set_aside"]) == ("timeout", "success", None), err
    assert not (workspace / "tests" / "test_00.py").exists()


def test_an_attempt_the_agent_committed_is_set_aside_with_its_branch_put_back(workspace, agent, tmp_path):
    # (HEAD stayed on the agent's commit: `git status` showed a staged revert, and the
    # prompt's `git diff HEAD <ref>` showed nothing)
    make_repo(workspace)
    verify = counting_verify(workspace)
    git(workspace, "add", "-A")
    git(workspace, "commit", "-qm", "tests")
    before = git(workspace, "rev-parse", "HEAD").strip()
    script = tmp_path / "commit.sh"
    script.write_text("touch tests/fail_new.py && git add -A && git commit -qm 'agent: worse'\n")
    agent.script({"actions": [{"write_file": "a.txt", "text": "a"}]}, {})
    cmd = "sh -c 'test -e a.txt && sh %s; %s'" % (script, agent.cmd)
    code, err = rooda_in(workspace, agent, "build", "-n", "2", "--ai-cmd", cmd, "--verify", verify,
                         "--keep", "better", "--log-dir", tmp_path / "logs")
    assert code == 0, err
    ref = ends(session_events(tmp_path / "logs"))[1]["set_aside"]
    assert ref and git(workspace, "rev-parse", "HEAD").strip() == before
    assert git(workspace, "status", "--porcelain", "--", "tests") == ""
    assert git(workspace, "diff", "--name-only", ref + "^", ref) == "tests/fail_new.py\n"  # (what it did)
    commits = ref.replace("/attempts/", "/commits/")  # (its own commits, kept under a ref of their own)
    assert git(workspace, "log", "-1", "--format=%s", commits) == "agent: worse\n"
    # What verify says of the tree now is the best state's, not the attempt set aside.
    assert status_json(tmp_path / "logs")["last_verify"]["result"] == "pass"


def test_a_flaky_failure_confirmed_by_a_second_run_sets_nothing_aside(workspace, agent, tmp_path):
    make_repo(workspace)
    flaky = tmp_path / "flaky"
    verify = "if [ -e %s ]; then rm %s; exit 1; fi" % (flaky, flaky)
    agent.script({"actions": [{"write_file": "a.txt", "text": "a"}]},
                 {"actions": [{"write_file": "b.txt", "text": "b"}, {"touch": "../flaky"}]})
    code, err = rooda_in(workspace, agent, "build", "-n", "2", "--ai-cmd", agent.cmd, "--verify", verify,
                         "--keep", "better", "--log-dir", tmp_path / "logs")
    assert code == 0, err
    assert [e["set_aside"] for e in ends(session_events(tmp_path / "logs"))] == [None, None]
    assert (workspace / "b.txt").exists()


def test_a_drop_rejects_a_success_even_when_the_second_run_is_not_worse(workspace, agent, tmp_path):
    # (the confirming run replaced the first and its verdict: the drop's rejection was lost)
    make_repo(workspace)
    flaky = tmp_path / "flaky"
    (workspace / "verify.py").write_text(
        "import os\nif os.path.exists(%r):\n    os.remove(%r)\n    print('9 passed in 0.01s')\n"
        "else:\n    print('12 passed in 0.01s')\n" % (str(flaky), str(flaky)))
    agent.script({"actions": [{"touch": "../flaky"}, {"out": SUCCESS}]}, {"actions": [{"out": "more\n"}]})
    logs = tmp_path / "logs"
    code, err = rooda_in(workspace, agent, "build", "-n", "2", "--ai-cmd", agent.cmd, "--verify",
                         "%s verify.py" % sys.executable, "--keep", "better", "--log-dir", logs)
    assert code == 0 and agent.calls == 2, err
    assert ends(session_events(logs))[0]["outcome"] == "rejected"
    assert "but verify passed with 9 tests run where 12 ran before iteration 1; the claim is rejected" in err


def test_keep_better_needs_verify_and_a_repository(workspace, agent, tmp_path):
    code, err = rooda_in(workspace, agent, "build", "-n", "1", "--ai-cmd", agent.cmd, "--keep", "better",
                         "--no-log")
    assert code == 2 and err == "--keep better needs verify: it keeps what verify says is no worse\n", err
    code, err = rooda_in(workspace, agent, "build", "-n", "1", "--ai-cmd", agent.cmd, "--keep", "better",
                         "--verify", "true", "--no-log")
    assert code == 2 and "--keep better needs a git repository" in err, err


# --- interruptions mid-restore ---------------------------------------------------------------

MANY = 1500


def many_files(workspace, agent, name, was, becomes, more=""):
    """MANY files `name % n` holding `was`, and the agent command that changes each to
    `becomes` (then runs `more`) before the fake agent runs."""
    for number in range(MANY):
        (workspace / (name % number)).write_text("%s %d\n" % (was, number))
    script = "".join("open('%s', 'w').write('%s %d\\n')\n" % (name % n, becomes, n) for n in range(MANY))
    (workspace / "change.py").write_text(script + more)
    return "sh -c '%s change.py; %s'" % (sys.executable, agent.cmd)


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM, signal.SIGKILL])
def test_an_interruption_mid_restore_of_protected_paths_loses_nothing(workspace, agent, tmp_path, signum):
    make_repo(workspace)
    (workspace / "tests").mkdir()
    cmd = many_files(workspace, agent, "tests/t%04d.py", "original", "agent")
    write_config(workspace, {"loop": {"protect": ["tests/**"]}})
    logs = tmp_path / "logs"
    proc = subprocess.Popen([sys.executable, os.path.join(ROOT, "rooda.py"), "build", "-n", "1", "--ai-cmd", cmd,
                             "--log-dir", str(logs)], cwd=str(workspace), env=dict(os.environ, **agent.env),
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    kept_in = workspace / ".git" / "rooda"  # (where no test runner or commit finds them: issue 43)
    assert wait_until(lambda: any(name.endswith("-protected") for name in os.listdir(kept_in))
                      if kept_in.exists() else False, timeout=60)
    proc.send_signal(signum)
    proc.wait(timeout=60)
    [versions] = [kept_in / name for name in os.listdir(kept_in) if name.endswith("-protected")]
    kept = {}
    for folder, _, names in os.walk(versions):
        for name in names:
            kept[name] = open(os.path.join(folder, name)).read()
    for number in range(MANY):
        now = (workspace / "tests" / ("t%04d.py" % number)).read_text()
        if signum != signal.SIGKILL:
            assert now == "original %d\n" % number  # the restore finished first
        else:  # each file whole, either version; once put back, the agent's is in its kept copy
            assert now in ("original %d\n" % number, "agent %d\n" % number)
            if now == "original %d\n" % number:  # (every copy is kept before any file is put back)
                assert kept["t%04d.py" % number] == "agent %d\n" % number


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM, signal.SIGKILL])
def test_an_interruption_mid_set_aside_leaves_the_attempt_under_its_ref(workspace, agent, tmp_path, signum):
    make_repo(workspace)
    (workspace / "files").mkdir()
    cmd = many_files(workspace, agent, "files/f%04d.txt", "best", "worse", "open('broken', 'w').write('x')\n")
    git(workspace, "add", "-A")
    git(workspace, "commit", "-qm", "files")
    logs = tmp_path / "logs"
    proc = subprocess.Popen([sys.executable, os.path.join(ROOT, "rooda.py"), "build", "-n", "1", "--ai-cmd", cmd,
                             "--verify", "test ! -e broken", "--keep", "better", "--log-dir", str(logs)],
                            cwd=str(workspace), env=dict(os.environ, **agent.env), stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE)
    assert wait_until(lambda: git(workspace, "for-each-ref", "refs/rooda/attempts/"), timeout=60)
    proc.send_signal(signum)
    proc.wait(timeout=60)
    [ref] = [line.split()[-1] for line in git(workspace, "for-each-ref", "refs/rooda/attempts/").splitlines()]
    for number in range(0, MANY, 97):
        assert git(workspace, "show", "%s:files/f%04d.txt" % (ref, number)) == "worse %d\n" % number
    if signum != signal.SIGKILL:  # the restore finished first: the best state, whole
        assert all((workspace / "files" / ("f%04d.txt" % n)).read_text() == "best %d\n" % n for n in range(MANY))
        assert not (workspace / "broken").exists()


# --- doctor ------------------------------------------------------------------------------------

def test_doctor_says_what_is_protected_whether_counts_were_found_and_keep(workspace, agent, tmp_path):
    rooda_py = vendored(workspace)
    verify = counting_verify(workspace)
    agent.script({"actions": [{"out": SUCCESS}]})
    code, err = rooda_in(workspace, agent, "build", "-n", "1", "--ai-cmd", agent.cmd, "--verify", verify,
                         rooda=rooda_py)
    env = {name: value for name, value in os.environ.items() if name != "ROODA_LOOP_LOG_DIR"}
    done = subprocess.run([sys.executable, str(rooda_py), "doctor", "build", "--ai-cmd", agent.cmd, "--verify",
                           verify, "--keep", "better"], cwd=str(workspace), stdout=subprocess.PIPE, timeout=60,
                          env=env)
    out = done.stdout.decode()
    assert "ok       protect: :rooda, :agent (" in out and "files" in out, out
    assert "ok       test counts: the last baseline here printed 12 run, 0 skipped" in out
    assert "ok       keep: better" in out
    write_config(workspace, {"loop": {"protect": ["tests/**"]}})
    out = subprocess.run([sys.executable, str(rooda_py), "doctor", "build", "--ai-cmd", agent.cmd],
                         cwd=str(workspace), stdout=subprocess.PIPE, timeout=60).stdout.decode()
    assert "warning  protect: the list leaves out :rooda" in out and "leaves out :agent" in out


@pytest.mark.parametrize("layout,needs", [("repository", "verify: it keeps what verify says is no worse"),
                                          ("plain", "a git repository (run 'git init', or keep: all)")])
def test_doctor_says_what_keep_better_needs_as_an_error(workspace, agent, layout, needs):
    # (doctor said ok where the run would stop before iteration 1)
    if layout == "repository":
        make_repo(workspace)
    verify = [] if layout == "repository" else ["--verify", "true"]
    done = subprocess.run([sys.executable, os.path.join(ROOT, "rooda.py"), "doctor", "build", "--ai-cmd",
                           agent.cmd, "--keep", "better"] + verify, cwd=str(workspace), stdout=subprocess.PIPE,
                          timeout=60)
    assert done.returncode == 2 and "error    config: --keep better needs " + needs in done.stdout.decode()


# --- the guards' bookkeeping (issue 43) -------------------------------------------------------

def test_with_the_log_directory_the_project_a_set_aside_still_puts_the_tree_back(workspace, agent, tmp_path):
    # (issue 43, 2: `--log-dir .` excluded everything from the restore, and said "set aside")
    make_repo(workspace)
    agent.script({"actions": [{"write_file": "a.txt", "text": "a"}]},
                 {"actions": [{"write_file": "broken", "text": ""}, {"write_file": "b.txt", "text": "b"}]})
    code, err = rooda_in(workspace, agent, "build", "-n", "2", "--ai-cmd", agent.cmd, "--verify",
                         "test ! -e broken", "--keep", "better", "--log-dir", ".")
    second = ends(session_events(workspace))[1]
    assert second["set_aside"] and not (workspace / "broken").exists() and not (workspace / "b.txt").exists(), err
    assert (workspace / "a.txt").exists() and any(name.endswith(".jsonl") for name in os.listdir(workspace))


def test_the_agents_kept_versions_are_neither_collected_nor_committed(workspace, agent, tmp_path):
    # (issue 43, 3 and 8: in a log directory inside the project they were pytest's to collect and
    # git.commit's to commit; with logs on, the reason never said where they went)
    make_repo(workspace)
    (workspace / "tests").mkdir()
    (workspace / "tests" / "test_a.py").write_text("def test_a(): pass\n")
    write_config(workspace, {"loop": {"protect": ["tests/**"], "git": {"commit": True}}})
    git(workspace, "add", "-A")
    git(workspace, "commit", "-qm", "tests")
    agent.script({"actions": [{"write_file": "tests/test_a.py", "text": "def test_a(): assert 0\n"}]},
                 {"actions": [{"write_file": "work.txt", "text": "w"}, {"out": SUCCESS}]})
    code, err = rooda_in(workspace, agent, "build", "-n", "2", "--ai-cmd", agent.cmd, "--log-dir", "rooda-logs")
    first, second = ends(session_events(workspace / "rooda-logs"))
    assert "its versions in %s" % first["kept_versions"] in err and first["reason"].endswith(first["kept_versions"])
    assert not first["kept_versions"].startswith(str(workspace / "rooda-logs"))
    held = git(workspace, "show", "--name-only", "--format=%B", "HEAD")
    assert "protected" not in held.split("Rooda-Session")[1] and "test_a.py" not in held, held
    # (issue 43, 14: the commit says it carries the earlier attempt's work)
    assert "It also carries the work that iteration 1 (protected) left uncommitted." in held


def test_a_protected_change_the_agent_committed_is_undone_on_the_branch(workspace, agent, tmp_path):
    # (issue 43, 4: `git stash` brought it back, and the next success committed the revert)
    make_repo(workspace)
    write_config(workspace, {"loop": {"protect": ["README"]}})
    git(workspace, "add", "-A")
    git(workspace, "commit", "-qm", "config")
    script = tmp_path / "commit.sh"
    script.write_text("echo mine > README && git commit -qam 'agent: my readme'\n")
    cmd = "sh -c 'sh %s; %s'" % (script, agent.cmd)
    code, err = rooda_in(workspace, agent, "build", "-n", "1", "--ai-cmd", cmd, "--log-dir", tmp_path / "logs")
    assert git(workspace, "show", "HEAD:README") == "hello\n", err
    assert git(workspace, "status", "--porcelain") == "" and "rooda: put back README" in git(
        workspace, "log", "-1", "--format=%s")


def test_a_limited_attempts_rerun_keeps_the_first_runs_versions(workspace, agent, tmp_path, capfd, waits):
    # (issue 43, 5: the re-run under the same number overwrote them)
    make_repo(workspace)
    write_config(workspace, {"loop": {"protect": ["README"]}})
    limit = '{"type": "result", "subtype": "error", "is_error": true, "result": "rate limited",' \
            ' "api_error_status": 429}\n'
    agent.script({"actions": [{"write_file": "README", "text": "first\n"}, {"out": limit}], "exit": 1},
                 {"actions": [{"write_file": "README", "text": "second\n"}]})
    code, _, err = run_main(capfd, "build", "-n", "1", "--ai-cmd", agent.cmd, "--ai-format", "claude",
                            "--log-dir", tmp_path / "logs")
    first, second = ends(session_events(tmp_path / "logs"))
    assert first["kept_versions"] != second["kept_versions"], err
    assert [open(os.path.join(end["kept_versions"], "README")).read() for end in (first, second)] == [
        "first\n", "second\n"]


def test_a_pattern_with_dot_slash_protects_and_doctor_warns_of_one_that_matches_nothing(workspace, agent):
    # (issue 43, 6: `./tests/**` protected nothing, and doctor said ok)
    make_repo(workspace)
    (workspace / "tests").mkdir()
    (workspace / "tests" / "test_a.py").write_text("a\n")
    write_config(workspace, {"loop": {"protect": [":rooda", ":agent", "./tests/**/", "spec/**"]}})
    agent.script({"actions": [{"write_file": "tests/test_a.py", "text": "b\n"}]})
    code, err = rooda_in(workspace, agent, "build", "-n", "1", "--ai-cmd", agent.cmd, "--no-log")
    assert "protected: the agent changed tests/test_a.py" in err and (workspace / "tests" / "test_a.py").read_text() \
        == "a\n", err
    code, out = rooda_in(workspace, agent, "doctor", "build", "--ai-cmd", agent.cmd, stdout=True)
    assert "warning  protect: spec/** matches no file here" in out and "./tests/**/ matches" not in out, out


def test_on_a_fresh_repository_a_set_aside_makes_the_branch_unborn_again(workspace, agent, tmp_path):
    # (issue 43, 7: with no commit yet, the agent's commit stayed on the branch)
    git(workspace, "init", "-q", "-b", "main")
    git(workspace, "config", "user.name", "Test")
    git(workspace, "config", "user.email", "test@example.com")
    script = tmp_path / "commit.sh"
    script.write_text("touch broken && git add -A && git commit -qm 'agent: first commit'\n")
    agent.script({})
    cmd = "sh -c 'sh %s; %s'" % (script, agent.cmd)
    code, err = rooda_in(workspace, agent, "build", "-n", "1", "--ai-cmd", cmd, "--verify", "test ! -e broken",
                         "--keep", "better", "--log-dir", tmp_path / "logs")
    ref = ends(session_events(tmp_path / "logs"))[0]["set_aside"]
    assert ref and subprocess.run(["git", "rev-parse", "-q", "--verify", "HEAD"], cwd=str(workspace)).returncode, err
    commits = ref.replace("/attempts/", "/commits/")
    assert git(workspace, "log", "--format=%s", commits) == "agent: first commit\n" and not (workspace / "broken").exists()
