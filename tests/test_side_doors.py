"""The guards' side doors and putting back without harm (SPEC 22 rev 6, issue 44): each
walk-around a hostile hunt found, reproduced through the command line with a scripted
agent in a real git repository -- vendored (.rooda/) or run from a checkout beside it --
and a check whose output the agent never sees."""
import json
import os
import subprocess
import sys

import pytest

from conftest import ends, git, make_repo, session_events, write_config
from test_guards import SUCCESS, counting_verify, rooda_in, vendored


def run(workspace, agent, tmp_path, *args, rooda=None):
    """`build` with the fake agent, logs in tmp_path/logs: (exit code, stderr, iteration_ends)."""
    code, err = rooda_in(workspace, agent, "build", "--ai-cmd", agent.cmd, "--log-dir", tmp_path / "logs",
                         *args, rooda=rooda)
    return code, err, ends(session_events(tmp_path / "logs"))


# --- decided by the filesystem, not by rules the agent can write ------------------------------

@pytest.mark.parametrize("layout", ["vendored", "plain"])
def test_a_conftest_hidden_through_git_info_exclude_is_put_back(workspace, agent, tmp_path, layout):
    # (it turned every failing test into a pass, and `check-ignore` with the agent's own rule
    # said it was ignored: the session completed with it still in the tree)
    rooda = vendored(workspace) if layout == "vendored" else make_repo(workspace)
    (workspace / "tests").mkdir()
    (workspace / "tests" / "test_a.py").write_text("def test_a(): assert 0\n")
    write_config(workspace, {"loop": {"protect": [":rooda", ":agent", "tests/**"]}})
    exclude = workspace / ".git" / "info" / "exclude"
    before = exclude.read_text()
    agent.script({"actions": [{"write_file": "tests/conftest.py", "text": "# every failure a pass\n"},
                              {"write_file": ".git/info/exclude", "text": before + "tests/conftest.py\n"},
                              {"out": SUCCESS}]}, {})
    code, err, [end, *_] = run(workspace, agent, tmp_path, "-n", "2", rooda=rooda)
    assert (end["outcome"], end["cause"]) == ("failure", "protected"), err
    assert set(end["restored"]) == {".git/info/exclude", "tests/conftest.py"}
    assert not (workspace / "tests" / "conftest.py").exists() and exclude.read_text() == before
    assert open(os.path.join(end["kept_versions"], "tests", "conftest.py")).read() == "# every failure a pass\n"


@pytest.mark.parametrize("layout", ["plain", "vendored"])
def test_with_the_default_protect_a_file_hidden_through_git_info_exclude_is_put_back(workspace, agent, tmp_path,
                                                                                     layout):
    # (seen with the real Claude Code 2.1.332: the root conftest.py the agent hid was no
    # protected path, so it came back into sight and the next success committed it with the
    # code it let pass; a person's own untracked file that the agent hid stays)
    rooda = vendored(workspace) if layout == "vendored" else make_repo(workspace)
    (workspace / "notes.txt").write_text("the person's")
    exclude = workspace / ".git" / "info" / "exclude"
    before = exclude.read_text()
    agent.script({"actions": [{"write_file": "conftest.py", "text": "# every failure a pass\n"},
                              {"write_file": "hidden/more.py", "text": "x = 1\n"},
                              {"write_file": "feature.py", "text": "y = 2\n"},
                              {"write_file": ".git/info/exclude",
                               "text": before + "conftest.py\nhidden/\nnotes.txt\n"},
                              {"out": SUCCESS}]}, {})
    code, err, [end, *_] = run(workspace, agent, tmp_path, "-n", "2", rooda=rooda)
    assert (end["outcome"], end["cause"]) == ("failure", "protected"), err
    assert set(end["restored"]) == {".git/info/exclude", "conftest.py", "hidden"}, end["restored"]
    assert not (workspace / "conftest.py").exists() and not (workspace / "hidden").exists()
    assert exclude.read_text() == before and (workspace / "feature.py").exists()  # (its other work stays)
    assert (workspace / "notes.txt").read_text() == "the person's"
    assert open(os.path.join(end["kept_versions"], "conftest.py")).read() == "# every failure a pass\n"
    assert open(os.path.join(end["kept_versions"], "hidden", "more.py")).read() == "x = 1\n"


def test_what_git_ignored_before_the_agent_ran_is_left_alone_and_what_it_hid_is_not(workspace, agent, tmp_path):
    make_repo(workspace)
    (workspace / "tests").mkdir()
    (workspace / ".gitignore").write_text("__pycache__/\n")
    write_config(workspace, {"loop": {"protect": ["tests/**"]}})
    agent.script({"actions": [{"write_file": ".gitignore", "text": "__pycache__/\ntests/hidden.py\n"},
                              {"write_file": "tests/hidden.py", "text": "mine"}]})
    (workspace / "tests" / "__pycache__").mkdir()
    (workspace / "tests" / "__pycache__" / "a.pyc").write_text("cache")
    code, err, [end] = run(workspace, agent, tmp_path, "-n", "1")
    assert end["restored"] == ["tests/hidden.py"], err  # (by the rules as they stood: .gitignore's own change stays)
    assert (workspace / "tests" / "__pycache__" / "a.pyc").read_text() == "cache"
    assert not (workspace / "tests" / "hidden.py").exists()


@pytest.mark.parametrize("written", ["rooda-config.json", "rooda-config.yml", ".claude/settings.json",
                                     ".claude/hooks/stop.sh", ".codex/config.toml", "opencode.json"])
def test_a_config_the_next_run_or_cli_would_read_is_put_back_in_the_vendored_layout(workspace, agent, tmp_path,
                                                                                      written):
    # (`./rooda-config.json` with `protect: []` was obeyed by the next run; `.claude/settings.json`
    # governed the next iteration's CLI)
    rooda = vendored(workspace)
    agent.script({"actions": [{"write_file": ".claude/.keep", "text": ""}, {"write_file": ".codex/.keep",
                                                                          "text": ""},
                              {"write_file": written, "text": '{"loop": {"protect": []}}'}, {"out": SUCCESS}]})
    code, err, [end] = run(workspace, agent, tmp_path, "-n", "1", rooda=rooda)
    assert written in end["restored"] and end["outcome"] == "failure", err
    assert not (workspace / written).exists()


def test_the_pre_commit_hook_the_agent_installs_never_runs_and_a_commit_says_what_it_holds(workspace, agent,
                                                                                           tmp_path):
    # (rooda's own `git commit` ran the agent's hook after the check: `(1 file)`, and the commit
    # held 2, the protected test among them)
    make_repo(workspace)
    (workspace / "tests").mkdir()
    (workspace / "tests" / "test_a.py").write_text("real\n")
    write_config(workspace, {"loop": {"protect": [":rooda", ":agent", "tests/**"], "git": {"commit": True}}})
    git(workspace, "add", "-A")
    git(workspace, "commit", "-qm", "tests")
    hook = "#!/bin/sh\necho tampered > tests/test_a.py\ngit add tests/test_a.py\n"
    agent.script({"actions": [{"write_file": ".git/hooks/pre-commit", "text": hook},
                              {"write_file": "work.txt", "text": "w"}, {"out": SUCCESS}]},
                 {"actions": [{"write_file": "more.txt", "text": "m"}, {"out": SUCCESS}]})
    code, err, ends_ = run(workspace, agent, tmp_path, "-n", "2")
    assert (ends_[0]["cause"], ends_[0]["restored"]) == ("protected", [".git/hooks/pre-commit"]), err
    assert not (workspace / ".git" / "hooks" / "pre-commit").exists()
    assert git(workspace, "show", "HEAD:tests/test_a.py") == "real\n"
    # The person's own hook runs, and the commit's count is what the commit holds.
    (workspace / ".git" / "hooks" / "pre-commit").write_text("#!/bin/sh\ndate > stamp.txt\ngit add stamp.txt\n")
    (workspace / ".git" / "hooks" / "pre-commit").chmod(0o755)
    agent.script({"actions": [{"write_file": "third.txt", "text": "t"}, {"out": SUCCESS}]})
    code, err, _ = run(workspace, agent, tmp_path / "again", "-n", "1")
    assert "committed" in err and "(2 files)" in err, err
    assert sorted(git(workspace, "show", "--name-only", "--format=", "HEAD").split()) == ["stamp.txt", "third.txt"]


def test_git_configuration_that_runs_programs_is_put_back(workspace, agent, tmp_path):
    make_repo(workspace)
    agent.script({"actions": [{"write_file": "hooks/pre-commit", "text": "#!/bin/sh\n"}]})
    script = tmp_path / "agent.sh"
    script.write_text("git config core.hooksPath hooks && git config filter.x.clean 'sh -c evil'\n")
    cmd = "sh -c 'sh %s; %s'" % (script, agent.cmd)
    code, err = rooda_in(workspace, agent, "build", "-n", "1", "--ai-cmd", cmd, "--log-dir", tmp_path / "logs")
    [end] = ends(session_events(tmp_path / "logs"))
    assert end["cause"] == "protected" and ".git/config" in end["restored"], err
    left = subprocess.run(["git", "config", "--local", "--get-regexp", "hookspath|filter"], cwd=str(workspace),
                          stdout=subprocess.PIPE).stdout
    assert left == b""
    assert "core.hookspath hooks\n" in open(os.path.join(end["kept_versions"], "git-config")).read()


# --- test counts that mean what they say -------------------------------------------------------

def test_a_failing_test_turned_xfail_is_a_drop_not_a_pass(workspace, agent, tmp_path):
    make_repo(workspace)
    (workspace / "verify.py").write_text(
        "import os, sys\nxfail = os.path.exists('marked')\n"
        "print('1 passed, 1 xfailed in 0.1s' if xfail else '1 failed, 1 passed in 0.1s')\nsys.exit(0 if xfail else 1)\n")
    agent.script({"actions": [{"write_file": "marked", "text": ""}, {"out": SUCCESS}]}, {})
    code, err, ends_ = run(workspace, agent, tmp_path, "-n", "1", "--verify", "%s verify.py" % sys.executable)
    assert (ends_[0]["outcome"], ends_[0]["cause"]) == ("rejected", "verify"), err
    assert ends_[0]["reason"] == "verify: passed with 1 test run where 2 ran before iteration 1"


def test_go_test_without_v_gives_no_counts_and_a_fixed_suite_completes(workspace, agent, tmp_path):
    # (its per-test lines appear only on failure: the baseline's one `--- FAIL` was "1 run")
    make_repo(workspace)
    (workspace / "verify.sh").write_text(
        "if [ -e fixed ]; then echo 'ok  \texample.com/pkg\t0.01s'; exit 0; fi\n"
        "echo '--- FAIL: TestB (0.00s)'; echo '    b_test.go:9: wrong'; echo FAIL; echo 'FAIL\texample.com/pkg\t0.01s'; exit 1\n")
    agent.script({"actions": [{"write_file": "fixed", "text": ""}, {"out": SUCCESS}]})
    code, err, [end] = run(workspace, agent, tmp_path, "-n", "1", "--verify", "sh verify.sh")
    assert code == 0 and end["outcome"] == "completed", err


# --- putting back never harms ----------------------------------------------------------------

def keep_better(workspace, agent, tmp_path, script, *steps, more=()):
    """A run of keep: better whose second attempt runs `script` (a shell line) and breaks the
    verifier (`broken`): (exit code, stderr, iteration_ends)."""
    agent.script({"actions": [{"write_file": "first.txt", "text": "1"}]}, *steps)
    (tmp_path / "attempt.sh").write_text(script + "\ntouch broken\n")
    cmd = "sh -c 'test -e first.txt && sh %s; %s'" % (tmp_path / "attempt.sh", agent.cmd)
    code, err = rooda_in(workspace, agent, "build", "-n", "2", "--ai-cmd", cmd, "--verify", "test ! -e broken",
                         "--keep", "better", "--log-dir", tmp_path / "logs", *more)
    found = ends(session_events(tmp_path / "logs"))
    assert found[-1]["set_aside"] and code == 0, err
    return found


def test_a_set_aside_that_rewrote_gitignore_neither_takes_nor_removes_the_persons_ignored_files(
        workspace, agent, tmp_path):
    make_repo(workspace)
    (workspace / ".gitignore").write_text(".env\ndata/\n")
    git(workspace, "add", "-A")
    git(workspace, "commit", "-qm", "ignore")
    (workspace / ".env").write_text("SECRET=1\n")
    (workspace / "data").mkdir()
    (workspace / "data" / "big.csv").write_text("1,2\n")
    _, second = keep_better(workspace, agent, tmp_path, "echo hidden.txt > .gitignore && echo mine > hidden.txt")
    ref = second["set_aside"]
    assert (workspace / ".env").read_text() == "SECRET=1\n" and (workspace / "data" / "big.csv").exists()
    held = git(workspace, "ls-tree", "-r", "--name-only", ref).split()
    assert ".env" not in held and "data/big.csv" not in held  # (its content never went into the ref)
    assert "hidden.txt" in held and not (workspace / "hidden.txt").exists()  # (it hid its own: set aside)
    assert (workspace / ".gitignore").read_text() == ".env\ndata/\n"


def test_a_set_aside_leaves_assume_unchanged_files_and_bytes_it_never_touched(workspace, agent, tmp_path):
    make_repo(workspace)
    (workspace / "local.cfg").write_text("shared\n")
    (workspace / "crlf.txt").write_bytes(b"one\r\ntwo\r\n")
    git(workspace, "add", "-A")
    git(workspace, "commit", "-qm", "files")
    git(workspace, "update-index", "--assume-unchanged", "local.cfg")
    git(workspace, "config", "core.autocrlf", "input")
    (workspace / "local.cfg").write_text("mine, locally\n")
    keep_better(workspace, agent, tmp_path, "echo worse > worse.txt")
    assert (workspace / "local.cfg").read_text() == "mine, locally\n"
    assert (workspace / "crlf.txt").read_bytes() == b"one\r\ntwo\r\n"
    assert not (workspace / "worse.txt").exists()


def test_a_set_aside_never_deletes_through_a_link_out_of_the_tree(workspace, agent, tmp_path):
    make_repo(workspace)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "x").write_text("not the project's\n")
    os.symlink(str(outside), str(workspace / "link"))
    git(workspace, "add", "-A")
    git(workspace, "commit", "-qm", "a link")
    keep_better(workspace, agent, tmp_path, "rm link && mkdir link && echo attempt > link/x")
    assert (outside / "x").read_text() == "not the project's\n"
    assert os.readlink(str(workspace / "link")) == str(outside)


def test_a_protected_tree_made_a_link_to_another_project_is_a_directory_again(workspace, agent, tmp_path):
    make_repo(workspace)
    other = tmp_path / "other-project"
    other.mkdir()
    (other / "test_theirs.py").write_text("theirs\n")
    (workspace / "tests").mkdir()
    (workspace / "tests" / "test_a.py").write_text("a\n")
    write_config(workspace, {"loop": {"protect": ["tests/**"]}})
    script = tmp_path / "link.sh"
    script.write_text("rm -r tests && ln -s %s tests\n" % other)
    cmd = "sh -c 'sh %s; %s'" % (script, agent.cmd)
    code, err = rooda_in(workspace, agent, "build", "-n", "1", "--ai-cmd", cmd, "--log-dir", tmp_path / "logs")
    assert code == 0 and "protected" in err, err
    assert (other / "test_theirs.py").read_text() == "theirs\n" and sorted(os.listdir(other)) == ["test_theirs.py"]
    assert not os.path.islink(str(workspace / "tests")) and (workspace / "tests" / "test_a.py").read_text() == "a\n"


def test_a_set_aside_leaves_a_submodules_uncommitted_work(workspace, agent, tmp_path):
    make_repo(workspace)
    module = tmp_path / "module"
    module.mkdir()
    make_repo(module)
    git(workspace, "-c", "protocol.file.allow=always", "submodule", "add", "-q", str(module), "sub")
    git(workspace, "commit", "-qm", "a submodule")
    git(workspace, "config", "submodule.recurse", "true")
    (workspace / "sub" / "README").write_text("the person's work in progress\n")
    keep_better(workspace, agent, tmp_path, "echo worse > worse.txt")
    assert (workspace / "sub" / "README").read_text() == "the person's work in progress\n"


def test_the_best_state_survives_gc_and_a_ref_that_exists_is_never_moved(workspace, agent, tmp_path):
    make_repo(workspace)
    agent.script({"actions": [{"write_file": "a.txt", "text": "a"}]},
                 {"actions": [{"touch": "started"}, {"wait_for": "never"}]}, {})
    logs = tmp_path / "logs"
    args = ["--ai-cmd", agent.cmd, "--verify", "true", "--keep", "better", "--log-dir", logs]
    proc = subprocess.Popen([sys.executable, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(
        __file__))), "rooda.py"), "build", "-n", "2"] + [str(a) for a in args], cwd=str(workspace),
        env=dict(os.environ, **agent.env), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    agent.wait_for("started", timeout=30)
    proc.kill()  # (SIGKILL: no chance to clean up; `resume` goes on with its refs there)
    proc.wait()
    [best] = git(workspace, "for-each-ref", "--format=%(refname) %(objectname)", "refs/rooda/best/").splitlines()
    git(workspace, "reflog", "expire", "--expire=now", "--all")
    git(workspace, "gc", "-q", "--prune=now")
    kept = ends(session_events(logs))[0]["kept"]
    assert git(workspace, "cat-file", "-t", kept) == "commit\n" and best.split()[1] == kept
    code, err = rooda_in(workspace, agent, "resume", "--log-dir", logs)
    assert code == 0, err
    refs = git(workspace, "for-each-ref", "--format=%(refname) %(objectname)", "refs/rooda/best/").splitlines()
    assert refs[0] == best and refs[1].startswith(best.split()[0] + "-2 ")  # (the next free name)


def test_file_and_directory_swaps_a_nested_repository_and_odd_names_are_no_traceback(workspace, agent,
                                                                                     tmp_path):
    make_repo(workspace)
    (workspace / "was_file").write_text("f\n")
    (workspace / "was_dir").mkdir()
    (workspace / "was_dir" / "in.txt").write_text("d\n")
    git(workspace, "add", "-A")
    git(workspace, "commit", "-qm", "shapes")
    found = keep_better(workspace, agent, tmp_path, "rm was_file && mkdir was_file && echo x > was_file/in.txt && "
                        "rm -r was_dir && echo y > was_dir && echo z > ' blank' && "
                        "git init -q nested && echo n > nested/n.txt")
    assert (workspace / "was_file").read_text() == "f\n" and (workspace / "was_dir" / "in.txt").read_text() == "d\n"
    assert not (workspace / " blank").exists()
    events = session_events(tmp_path / "logs")
    assert events[-1]["event"] == "session_end" and events[-1]["status"] == "completed", found


def test_a_protected_file_made_a_directory_or_a_fifo_is_put_back_whole(workspace, agent, tmp_path):
    make_repo(workspace)
    (workspace / "Makefile").write_text("all:\n")
    (workspace / "tests").mkdir()
    (workspace / "tests" / "t.py").write_text("t\n")
    write_config(workspace, {"loop": {"protect": ["Makefile", "tests/**"]}})
    script = tmp_path / "shapes.sh"
    script.write_text("rm Makefile && mkdir Makefile && echo in > Makefile/x && rm tests/t.py && mkfifo tests/t.py\n")
    cmd = "sh -c 'sh %s; %s'" % (script, agent.cmd)
    code, err = rooda_in(workspace, agent, "build", "-n", "1", "--ai-cmd", cmd, "--log-dir", tmp_path / "logs")
    [end] = ends(session_events(tmp_path / "logs"))
    assert end["cause"] == "protected" and "Traceback" not in err, err
    assert (workspace / "Makefile").read_text() == "all:\n" and (workspace / "tests" / "t.py").read_text() == "t\n"
    assert open(os.path.join(end["kept_versions"], "Makefile", "x")).read() == "in\n"


# --- bringing an attempt back works --------------------------------------------------------------

def test_the_recovery_recipe_brings_exactly_the_attempt_back_onto_later_work(workspace, agent, tmp_path):
    make_repo(workspace)
    agent.script({"actions": [{"write_file": "first.txt", "text": "1"}]},
                 {"actions": [{"write_file": "attempt.txt", "text": "its work\n"}, {"write_file": "broken",
                                                                                    "text": ""}]},
                 {"actions": [{"write_file": "later.txt", "text": "later work\n"}]})
    code, err = rooda_in(workspace, agent, "build", "-n", "3", "--ai-cmd", agent.cmd, "--verify", "test ! -e broken",
                         "--keep", "better", "--log-dir", tmp_path / "logs")
    ref = ends(session_events(tmp_path / "logs"))[1]["set_aside"]
    assert "git cherry-pick -n %s" % ref in err, err  # (the reason line says how)
    assert sorted(git(workspace, "diff", "--name-only", ref + "^", ref).split()) == ["attempt.txt", "broken"]
    git(workspace, "add", "-A")
    git(workspace, "commit", "-qm", "the night's kept work")
    git(workspace, "cherry-pick", "-n", ref)
    assert (workspace / "attempt.txt").read_text() == "its work\n"
    assert (workspace / "later.txt").read_text() == "later work\n"  # (later kept work stays)


# --- a check the agent never sees ------------------------------------------------------------------

def test_an_acceptance_check_rejects_a_success_without_showing_its_output(workspace, agent, tmp_path):
    make_repo(workspace)
    suite = tmp_path / "hidden-suite.sh"
    suite.write_text("echo SECRET-EXPECTATION: the total must be 42; test -e good\n")
    agent.script({"actions": [{"out": SUCCESS}]}, {"actions": [{"write_file": "good", "text": ""},
                                                             {"out": SUCCESS}]})
    code, err, ends_ = run(workspace, agent, tmp_path, "-n", "3", "-v", "--verify", "true", "--accept",
                           "sh %s" % suite)
    assert code == 0 and [(e["outcome"], e["cause"]) for e in ends_] == [("rejected", "accept"), ("completed", None)]
    assert ends_[0]["reason"] == "accept: the acceptance check failed (exit 1)"
    assert "SECRET" not in err and "SECRET" not in agent.prompt(2) and str(suite) not in agent.prompt(2)
    assert "the acceptance check failed (exit 1)" in agent.prompt(2)
    assert "SECRET-EXPECTATION" in open([str(p) for p in (tmp_path / "logs").glob("session-*.log")][0]).read()


def test_an_acceptance_program_that_is_missing_is_refused_before_any_agent_runs(workspace, agent, tmp_path):
    code, err = rooda_in(workspace, agent, "build", "-n", "1", "--ai-cmd", agent.cmd, "--accept",
                         "no-such-acceptance-suite --strict", "--no-log")
    assert code == 2 and agent.calls == 0, err
    assert err == "rooda: error: no-such-acceptance-suite: not found on PATH\n"
    done = subprocess.run([sys.executable, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                                        "rooda.py"), "doctor", "build", "--ai-cmd", agent.cmd,
                           "--accept", "no-such-acceptance-suite --strict"], cwd=str(workspace),
                          stdout=subprocess.PIPE)
    assert done.returncode == 2 and b"error    accept: no-such-acceptance-suite: not found on PATH" in done.stdout
