"""The git gates in the layouts users have (SPEC 6 rev 2): a vendored .rooda/ with its
ignored logs/, --log-dir . at the top and in a sub-directory project, hooks, submodules,
a bare remote; and HEAD read from the repository's files (issue 15)."""
import os
import shlex
import signal
import subprocess
import sys

import pytest

import rooda
from conftest import (alive, commits, git, interrupt, make_repo, procedure, progress_lines, session_events,
                      run_main, run_rooda, start_rooda, wait_until, write_config)

SUCCESS = {"actions": [{"out": "done\n<promise>SUCCESS</promise>\n"}]}


def writes(name, text, *more):
    """A fake agent step that writes a file (then does `more`)."""
    return {"actions": [{"write_file": name, "text": text}] + list(more)}


def vendored_project(tmp_path, **procedure_settings):
    """A repository with rooda vendored into .rooda/ (its .gitignore lists logs/) and a
    workspace procedure `p`, everything committed, as a user has it."""
    project = tmp_path / "project"
    project.mkdir()
    make_repo(project)
    assert run_rooda("vendor", str(project)).returncode == 0
    procedure(project, **procedure_settings)
    git(project, "add", "-A")
    git(project, "commit", "-q", "-m", "vendor rooda")
    return project


def run_vendored(project, agent, *args, timeout=60):
    """`python3 .rooda/rooda.py p ...` from the project, logs where a user's go."""
    env = dict(os.environ, **agent.env)
    env.pop("ROODA_LOOP_LOG_DIR")
    return subprocess.run([sys.executable, ".rooda/rooda.py", "p", "--ai-cmd", agent.cmd] + list(args),
                          cwd=str(project), env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          timeout=timeout)


def tracked(project):
    return git(project, "ls-files").split()


# --- 1. the vendored layout: an ignored log directory --------------------------------

def test_commits_in_the_vendored_layout_with_its_ignored_log_directory(tmp_path, agent):
    project = vendored_project(tmp_path, git={"commit": True}, stuck={"no_change": 1})
    agent.script(writes("a.txt", "a"), writes("b.txt", "b"), writes("c.txt", "c", *SUCCESS["actions"]))
    done = run_vendored(project, agent, "-n", "5")
    err = done.stderr.decode()
    assert done.returncode == 0, err
    assert commits(project)[:3] == ["p 3: done", "p 2: iteration 2", "p 1: iteration 1"]
    assert "Stuck" not in err and "WARNING" not in err
    assert os.listdir(str(project / ".rooda" / "logs")), "the logs went elsewhere"
    assert not [path for path in tracked(project) if path.startswith(".rooda/logs")]
    assert git(project, "status", "--porcelain") == ""


def test_the_readmes_overnight_recipe_as_written_leaves_the_work_tree_clean(tmp_path, agent):
    """The recipe once made the commit gate commit nohup.out every iteration (issue 20)."""
    from conftest import ROOT

    with open(os.path.join(ROOT, "README.md")) as stream:
        block = stream.read().split("## Leaving it overnight\n\n```sh\n", 1)[1].split("# in the morning", 1)[0]
    # All but doctor (which takes the run's flags: test_cli), lines joined; notify-send is not
    # installed here, which is one warning.
    recipe = "\n".join(line for line in block.replace("\\\n", " ").splitlines() if " doctor " not in line)
    assert "\nmkdir -p .rooda/logs " in recipe and "\nnohup python3 .rooda/rooda.py build " in recipe
    recipe = recipe.replace("python3 .rooda/rooda.py build", "%s .rooda/rooda.py p --ai-cmd %s" % (
        sys.executable, shlex.quote(agent.cmd))).rstrip("&").strip()
    project = vendored_project(tmp_path, git={"commit": True})
    agent.script(writes("a.txt", "a"), writes("b.txt", "b", *SUCCESS["actions"]))
    env = dict(os.environ, **agent.env)
    env.pop("ROODA_LOOP_LOG_DIR")
    done = subprocess.run(["sh", "-c", recipe], cwd=str(project), env=env, timeout=60)
    assert done.returncode == 0
    assert "Completed: agent signalled SUCCESS" in (project / ".rooda" / "logs" / "nohup.out").read_text()
    assert commits(project)[:2] == ["p 2: done", "p 1: iteration 1"]
    assert git(project, "status", "--porcelain") == ""
    assert not [path for path in tracked(project) if "nohup" in path]


# --- 2. --log-dir . ------------------------------------------------------------------

def test_log_dir_dot_at_the_top_never_commits_the_session_logs(workspace, agent, capfd):
    make_repo(workspace)
    procedure(workspace, git={"commit": True})
    agent.script(writes("a.txt", "a"))
    code, _, err = run_main(capfd, "p", "-n", "1", "--ai-cmd", agent.cmd, "--log-dir", ".")
    assert code == 0, err
    assert [name for name in os.listdir(str(workspace)) if name.startswith("session-")]
    files = tracked(workspace)
    assert "a.txt" in files and "rooda-config.json" in files
    assert not [path for path in files if path.startswith("session-")]


def test_log_dir_dot_in_a_sub_directory_project_commits_the_project(tmp_path, agent):
    repo = tmp_path / "repo"
    repo.mkdir()
    make_repo(repo)
    project = repo / "services" / "api"
    project.mkdir(parents=True)
    procedure(project, git={"commit": True}, stuck={"no_change": 2})
    agent.script(writes("handler.py", "1"), writes("handler.py", "2"))
    done = run_rooda("p", "-n", "2", "--ai-cmd", agent.cmd, "--log-dir", ".", cwd=str(project),
                     env=agent.env)
    assert done.returncode == 0, done.stderr
    assert commits(repo)[:2] == ["p 2: iteration 2", "p 1: iteration 1"]
    files = tracked(repo)
    assert "services/api/handler.py" in files
    assert not [path for path in files if "/session-" in path]


def test_other_files_in_the_log_directory_are_committed_like_any_other(workspace, agent, capfd):
    make_repo(workspace)
    procedure(workspace, git={"commit": True})
    agent.script(writes("notes/findings.md", "x"))
    (workspace / "notes").mkdir()
    code, _, err = run_main(capfd, "p", "-n", "1", "--ai-cmd", agent.cmd, "--log-dir", "notes")
    assert code == 0, err
    files = tracked(workspace)
    assert "notes/findings.md" in files
    assert not [path for path in files if path.startswith("notes/session-")]


def test_session_logs_committed_before_are_taken_out_of_the_index_and_kept_on_disk(tmp_path, agent):
    """Logs force-added by an earlier workflow stop being committed once rooda commits."""
    project = vendored_project(tmp_path, git={"commit": True})
    old = project / ".rooda" / "logs" / "session-20260101-000000.log"
    old.parent.mkdir(exist_ok=True)
    old.write_text("an old session\n")
    git(project, "add", "-f", str(old))
    git(project, "commit", "-q", "-m", "logs, by mistake")
    agent.script(writes("a.txt", "a"))
    done = run_vendored(project, agent, "-n", "1")
    assert done.returncode == 0, done.stderr.decode()
    assert "a.txt" in tracked(project)
    assert not [path for path in tracked(project) if path.startswith(".rooda/logs")]
    assert old.read_text() == "an old session\n"


# --- 3. a git error is never "no change" ---------------------------------------------

def nested_repository_without_commits(workspace):
    (workspace / "vendor-lib").mkdir()
    git(workspace / "vendor-lib", "init", "-q")
    (workspace / "vendor-lib" / "x.c").write_text("int x;\n")


def test_a_git_add_failure_is_shown_and_not_counted_as_no_change(workspace, agent, capfd):
    make_repo(workspace)
    procedure(workspace, stuck={"no_change": 1})
    git(workspace, "add", "-A")
    git(workspace, "commit", "-q", "-m", "config")
    agent.script({}, {}, {})
    nested_repository_without_commits(workspace)
    code, _, err = run_main(capfd, "p", "-n", "3", "--ai-cmd", agent.cmd)
    assert code == 0 and agent.calls == 3, err
    assert "Stuck" not in err
    assert "WARNING: stuck.no_change: git add failed: " in err
    assert "vendor-lib" in err and "this iteration is not counted" in err


def test_a_git_add_failure_fails_the_commit_gate_with_gits_message(workspace, agent, capfd):
    make_repo(workspace)
    procedure(workspace, git={"commit": True})
    agent.script(writes("a.txt", "a"))
    nested_repository_without_commits(workspace)
    code, _, err = run_main(capfd, "p", "-n", "1", "--ai-cmd", agent.cmd)
    assert "(failure, consecutive: 1/3)" in err
    assert "git add failed: " in err and "vendor-lib" in err


# --- 4. git's own output: log, verbose, the telling line ------------------------------

def failing_hook(workspace, text):
    hook = workspace / ".git" / "hooks" / "pre-commit"
    hook.write_text("#!/bin/sh\necho '%s' >&2\nexit 1\n" % text)
    hook.chmod(0o755)


@pytest.mark.parametrize("message,problem", [
    ("   ", "message must be a non-empty string"),
    ("{procedure}: {sumary}", "message has no placeholder {sumary}; did you mean 'summary'? (they are"
                              " {procedure}, {iteration} and {summary})")])
def test_a_commit_message_that_would_commit_nonsense_is_a_config_error(workspace, agent, capfd, message,
                                                                        problem):
    # A blank subject made git take the trailers for the subject; a typo was committed as is.
    make_repo(workspace)
    procedure(workspace, git={"commit": True, "message": message})
    code, _, err = run_main(capfd, "p", "-n", "1", "--ai-cmd", agent.cmd)
    assert code == 2 and agent.calls == 0
    assert err.startswith("rooda-config.json:") and "procedures.p.git: %s\n" % problem in err, err


def without_identity(workspace, monkeypatch, tmp_path):
    """A repository where git has no identity to commit with (and may not guess one)."""
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    for name in ("GIT_AUTHOR_NAME", "GIT_AUTHOR_EMAIL", "GIT_COMMITTER_NAME", "GIT_COMMITTER_EMAIL", "EMAIL"):
        monkeypatch.delenv(name, raising=False)
    git(workspace, "config", "--unset", "user.name")
    git(workspace, "config", "--unset", "user.email")
    git(workspace, "config", "user.useConfigOnly", "true")


def test_a_commit_gate_without_a_git_identity_stops_before_the_first_iteration(workspace, agent, capfd,
                                                                               monkeypatch, tmp_path):
    # Every iteration's SUCCESS would become a git failure, until `stuck` or the threshold.
    make_repo(workspace)
    procedure(workspace, git={"commit": True})
    without_identity(workspace, monkeypatch, tmp_path)
    agent.script(writes("a.txt", "a"))
    code, _, err = run_main(capfd, "p", "-n", "3", "--ai-cmd", agent.cmd)
    assert code == 2 and agent.calls == 0
    assert err == ("rooda: error: git.commit is on, but git has no identity to commit with here (fatal: no email"
                   " was given and auto-detection is disabled); set it with: git config user.name 'Your Name'"
                   " and git config user.email you@example.com\n")


def test_doctor_names_the_identity_it_commits_as_or_that_there_is_none(workspace, capfd, monkeypatch,
                                                                      tmp_path):
    def git_lines():
        code, out, _ = run_main(capfd, "doctor", "p", "--ai-cmd", "true")
        return code, [line.split(None, 1) for line in out.splitlines()
                      if line.split(None, 1)[1].startswith(("git: repository", "git: git.commit is on, but"))]

    make_repo(workspace)
    procedure(workspace, git={"commit": True})
    assert git_lines()[1] == [["ok", "git: repository %s, committing as Test <test@example.com>"
                               % os.path.realpath(str(workspace))]]
    without_identity(workspace, monkeypatch, tmp_path)
    assert git_lines() == (2, [["error", "git: git.commit is on, but git has no identity to commit with here"
                                " (fatal: no email was given and auto-detection is disabled); set it with: git"
                                " config user.name 'Your Name' and git config user.email you@example.com"]])


def test_a_failing_hooks_report_reaches_the_log_verbose_output_and_the_reason_line(workspace, agent, capfd,
                                                                               tmp_path):
    make_repo(workspace)
    procedure(workspace, git={"commit": True})
    failing_hook(workspace, "ruff: src/app.py:3:1: F401 unused import")
    agent.script(writes("a.txt", "a"))
    logs = tmp_path / "hook-logs"
    code, out, err = run_main(capfd, "p", "-n", "1", "-v", "--ai-cmd", agent.cmd, "--log-dir", logs)
    assert "ruff: src/app.py:3:1: F401 unused import" in err.split("completed in")[0]  # verbose
    reason = "  git: git commit failed: ruff: src/app.py:3:1: F401 unused import"
    assert reason in err.splitlines() and "WARNING: iteration" not in err  # the reason line says it, once
    log = [name for name in os.listdir(str(logs)) if name.endswith(".log")][0]
    text = (logs / log).read_text()
    assert "--- git: git commit -q --cleanup=verbatim -m 'p 1: iteration 1' -m 'Rooda-Session: session-" in text
    assert "ruff: src/app.py:3:1: F401 unused import" in text


def test_the_warning_quotes_gits_reason_not_its_hints():
    result = rooda.GitResult(exit_code=1, out="", interrupted=None, err=(
        "To /tmp/remote.git\n ! [rejected]        main -> main (fetch first)\n"
        "error: failed to push some refs to '/tmp/remote.git'\n"
        "hint: Updates were rejected because the remote contains work that you do\n"
        "hint: not have locally.\n"))
    assert result.message() == "error: failed to push some refs to '/tmp/remote.git'"


# --- 5. what git add staged decides the commit ----------------------------------------

def test_new_files_are_committed_with_show_untracked_files_off(workspace, agent, capfd):
    make_repo(workspace)
    git(workspace, "config", "status.showUntrackedFiles", "no")
    procedure(workspace, git={"commit": True})
    agent.script(writes("new.txt", "new"))
    code, _, err = run_main(capfd, "p", "-n", "1", "--ai-cmd", agent.cmd)
    assert code == 0, err
    assert "new.txt" in tracked(workspace)


def test_an_untracked_file_in_a_submodule_does_not_fail_a_success(tmp_path, agent, capfd, monkeypatch):
    library = tmp_path / "library"
    library.mkdir()
    make_repo(library)
    project = tmp_path / "project"
    project.mkdir()
    make_repo(project)
    git(project, "-c", "protocol.file.allow=always", "submodule", "add", "-q", str(library), "lib")
    git(project, "commit", "-q", "-m", "submodule")
    procedure(project, git={"commit": True})
    git(project, "add", "-A")
    git(project, "commit", "-q", "-m", "config")
    (project / "lib" / "scratch.txt").write_text("untracked inside the submodule")
    monkeypatch.chdir(project)
    agent.script({}, SUCCESS)
    code, _, err = run_main(capfd, "p", "-n", "3", "--ai-cmd", agent.cmd)
    assert code == 0 and agent.calls == 2, err
    assert "failure" not in err and "Completed: agent signalled SUCCESS" in err


# --- 6. a failed push is retried -----------------------------------------------------

def test_a_push_that_failed_once_is_retried_at_the_next_successful_iteration(workspace, agent, capfd,
                                                                             tmp_path):
    remote = tmp_path / "remote.git"
    subprocess.run(["git", "init", "-q", "--bare", str(remote)], check=True)
    make_repo(workspace)
    git(workspace, "remote", "add", "origin", str(remote))
    git(workspace, "push", "-q", "-u", "origin", "main")
    once = tmp_path / "refused-once"
    hook = remote / "hooks" / "pre-receive"
    hook.write_text("#!/bin/sh\nif [ ! -e %s ]; then touch %s; echo 'remote: busy, try later' >&2;"
                    " exit 1; fi\n" % (once, once))
    hook.chmod(0o755)
    procedure(workspace, git={"commit": True, "push": True})
    agent.script(writes("a.txt", "a"), SUCCESS)
    code, _, err = run_main(capfd, "p", "-n", "5", "--ai-cmd", agent.cmd)
    assert code == 0 and agent.calls == 2, err
    assert "Iteration 1/5 completed in D (failure, consecutive: 1/3)" in progress_lines(err)
    assert "git push failed: " in err
    remote_log = subprocess.run(["git", "--git-dir", str(remote), "log", "--format=%s", "main"],
                                stdout=subprocess.PIPE, check=True).stdout.decode().splitlines()
    assert remote_log[0] == "p 1: iteration 1"


# --- 7. git under the run's signals and timeout ---------------------------------------

def slow_hook(workspace, pid_file, seconds=60):
    hook = workspace / ".git" / "hooks" / "pre-commit"
    hook.write_text("#!/bin/sh\necho $$ > %s\nsleep %d\n" % (pid_file, seconds))
    hook.chmod(0o755)


def test_a_git_command_that_times_out_leaves_no_hook_running(workspace, agent, capfd):
    make_repo(workspace)
    procedure(workspace, git={"commit": True})
    write_config(workspace, {"loop": {"gate_timeout": 1}, "procedures": {"p": {
        "observe": "fragment.md", "orient": "fragment.md", "decide": "fragment.md",
        "act": "fragment.md", "git": {"commit": True}}}})
    pid_file = workspace.parent / "hook.pid"
    slow_hook(workspace, pid_file)
    agent.script(writes("a.txt", "a"))
    code, _, err = run_main(capfd, "p", "-n", "1", "--ai-cmd", agent.cmd)
    assert "git commit failed: git commit: no answer within 1s; stopped" in err
    assert not alive(int(pid_file.read_text()))


def test_sigterm_while_a_slow_hook_runs_stops_rooda_and_the_hook(workspace, agent):
    make_repo(workspace)
    procedure(workspace, git={"commit": True})
    pid_file = workspace.parent / "hook.pid"
    slow_hook(workspace, pid_file)
    agent.script(writes("a.txt", "a"))
    proc = start_rooda(agent, "-n", "2", cwd=workspace, procedure="p")
    assert wait_until(pid_file.exists, timeout=20)
    took, err = interrupt(proc, signal.SIGTERM)
    assert proc.returncode == -signal.SIGTERM and took < 1.0, err
    assert "Interrupted by SIGTERM during iteration 1" in err and "Completed" not in err
    assert not alive(int(pid_file.read_text()))


def test_ctrl_c_during_the_git_calls_before_an_iteration_starts_no_agent(workspace, agent, tmp_path):
    make_repo(workspace)
    procedure(workspace, stuck={"no_change": 3})
    monitor = tmp_path / "fsmonitor"
    started = tmp_path / "fsmonitor-started"
    monitor.write_text("#!/bin/sh\ntouch %s\nsleep 30\nexit 1\n" % started)
    monitor.chmod(0o755)
    git(workspace, "config", "core.fsmonitor", str(monitor))  # makes `git add` slow
    proc = start_rooda(agent, "-n", "2", cwd=workspace, procedure="p")
    assert wait_until(started.exists, timeout=20)
    proc.send_signal(signal.SIGINT)
    proc.wait(timeout=5)
    assert proc.returncode == -signal.SIGINT
    assert agent.calls == 0


# --- 8. git's reason, not "not a git repository" ---------------------------------------

def test_dubious_ownership_is_reported_with_gits_reason(workspace, agent, capfd, monkeypatch):
    make_repo(workspace)
    procedure(workspace, git={"commit": True})
    monkeypatch.setenv("GIT_TEST_ASSUME_DIFFERENT_OWNER", "1")  # as root on a bind mount
    code, _, err = run_main(capfd, "p", "-n", "1", "--ai-cmd", agent.cmd)
    assert code == 2 and agent.calls == 0
    assert "dubious ownership" in err and "run 'git init'" not in err
    code, out, _ = run_main(capfd, "doctor", "p", "--ai-cmd", agent.cmd)
    assert code == 2 and "dubious ownership" in out and "git init" not in out


# --- HEAD from the repository's files (issue 15) ----------------------------------------

def head_by_git(path):
    done = subprocess.run(["git", "rev-parse", "-q", "--verify", "HEAD"], cwd=str(path),
                          stdout=subprocess.PIPE)
    return done.stdout.decode().strip() or None


def head_by_files(path):
    repo, why = rooda.find_repository(str(path))
    assert repo is not None, why
    calls = []
    original = rooda.git
    rooda.git = lambda *args, **kwargs: calls.append(args) or original(*args, **kwargs)
    try:
        value = rooda.read_head(repo)
    finally:
        rooda.git = original
    assert calls == [], "read_head started git"
    return value


def test_head_from_files_matches_git_in_every_layout(tmp_path):
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    assert head_by_files(repo) is None and head_by_git(repo) is None  # unborn branch
    make_identity = ("-c", "user.name=T", "-c", "user.email=t@example.com")
    (repo / "a").write_text("1")
    git(repo, "add", "-A")
    git(repo, *make_identity, "commit", "-q", "-m", "one")
    assert head_by_files(repo) == head_by_git(repo)  # a loose ref
    (repo / "a").write_text("2")
    git(repo, *make_identity, "commit", "-qam", "two")
    git(repo, "pack-refs", "--all", "--prune")
    assert not (repo / ".git" / "refs" / "heads" / "main").exists()
    assert head_by_files(repo) == head_by_git(repo)  # packed refs only
    git(repo, "checkout", "-q", "--detach", "HEAD~1")
    assert head_by_files(repo) == head_by_git(repo)  # detached
    git(repo, "checkout", "-q", "main")
    git(repo, "worktree", "add", "-q", "-b", "side", str(tmp_path / "side"))
    (tmp_path / "side" / "b").write_text("side")
    git(tmp_path / "side", "add", "-A")
    git(tmp_path / "side", *make_identity, "commit", "-q", "-m", "side")
    assert head_by_files(tmp_path / "side") == head_by_git(tmp_path / "side")  # linked worktree
    assert head_by_files(tmp_path / "side") != head_by_files(repo)
    outer = tmp_path / "outer"
    outer.mkdir()
    git(outer, "init", "-q")
    git(outer, "-c", "protocol.file.allow=always", "submodule", "add", "-q", str(repo), "sub")
    assert head_by_files(outer / "sub") == head_by_git(outer / "sub")  # a submodule
    git(repo, "checkout", "-q", "--orphan", "fresh")
    assert head_by_files(repo) is None and head_by_git(repo) is None  # an unborn branch again


def test_the_logs_record_head_before_and_after(workspace, agent, capfd, tmp_path):
    make_repo(workspace)
    procedure(workspace, git={"commit": True})
    before = head_by_git(workspace)
    agent.script(writes("a.txt", "a"))
    logs = tmp_path / "head-logs"
    run_main(capfd, "p", "-n", "1", "--ai-cmd", agent.cmd, "--log-dir", logs)
    end = [event for event in session_events(logs) if event["event"] == "iteration_end"][0]
    assert end["head_before"] == before and end["head_after"] == head_by_git(workspace) != before


def test_ctrl_c_during_the_stuck_check_after_an_iteration_stops_at_once(workspace, agent, tmp_path):
    make_repo(workspace)
    procedure(workspace, stuck={"no_change": 3})
    slow = tmp_path / "slow-now"
    started = tmp_path / "fsmonitor-started"
    monitor = tmp_path / "fsmonitor"
    monitor.write_text("#!/bin/sh\nif [ -e %s ]; then touch %s; sleep 30; fi\nexit 1\n" % (slow, started))
    monitor.chmod(0o755)
    git(workspace, "config", "core.fsmonitor", str(monitor))
    agent.script({"actions": [{"write_file": str(slow), "text": ""}]})  # git is slow from now on
    proc = start_rooda(agent, "-n", "3", cwd=workspace, procedure="p")
    assert wait_until(started.exists, timeout=20)
    took, err = interrupt(proc, signal.SIGINT)
    assert proc.returncode == -signal.SIGINT and took < 1.0, err
    assert agent.calls == 1 and "Interrupted by SIGINT during iteration 1" in err
