"""The procedure library, the presets, and the list / info / doctor / vendor commands."""
import json
import os
import re
import shutil
import subprocess
import sys

import pytest

import rooda
from conftest import ROODA, ROOT, run_main, run_rooda, write_config

SHIPPED = rooda.load_config(environ={}).data["procedures"]
EXPECTED = (["bootstrap", "plan", "build", "agents-sync", "publish-plan", "audit-spec", "audit-impl",
             "audit-agents", "audit-spec-to-impl", "audit-impl-to-spec"]
            + ["draft-plan-%s-%s" % (side, kind) for side in ("spec", "impl")
               for kind in ("feat", "fix", "refactor", "chore")]
            + ["draft-plan-spec-to-impl", "draft-plan-impl-to-spec", "draft-plan-story-to-spec",
               "draft-plan-bug-to-spec"])


def test_the_22_procedures_of_spec_10_are_shipped():
    assert sorted(SHIPPED) == sorted(EXPECTED) and len(EXPECTED) == 22


@pytest.mark.parametrize("name", EXPECTED)
def test_each_procedure_is_described_and_has_a_sensible_cap(name):
    procedure = SHIPPED[name]
    for key in ("display", "summary", "description"):
        assert procedure[key].strip(), key
    expected = {"bootstrap": 1, "plan": 3, "build": 10, "agents-sync": 1, "publish-plan": 1}.get(
        name, 1 if name.startswith("audit-") else 3)
    assert procedure["default_max_iterations"] == expected


def test_every_fragment_file_is_used_and_every_used_file_exists():
    used = set()
    for procedure in SHIPPED.values():
        for phase in ("observe", "orient", "decide", "act"):
            for fragment in procedure[phase]:
                assert os.path.isfile(fragment["path"]), fragment["path"]
                assert fragment["path"].startswith(os.path.join(ROOT, "prompts", phase)), \
                    "a fragment of %s lives outside prompts/%s/" % (phase, phase)
                used.add(os.path.realpath(fragment["path"]))
    for phase, table in rooda.GO_BUILTIN_FRAGMENTS.items():  # the Go rooda's names use some too
        for shipped in table.values():
            path = os.path.join(ROOT, "prompts", phase, shipped + ".md")
            assert os.path.isfile(path), path
            used.add(os.path.realpath(path))
    used.add(os.path.realpath(rooda.VERDICT_PROMPT))  # (signals.md's stand-in with verdict: schema)
    on_disk = {os.path.realpath(os.path.join(folder, name))
               for folder, _, names in os.walk(os.path.join(ROOT, "prompts")) for name in names}
    assert on_disk - used == set(), "fragments no procedure uses"


def test_every_procedure_ends_with_the_signal_rules():
    for name, procedure in SHIPPED.items():
        assert procedure["act"][-1]["path"].endswith("prompts/act/signals.md"), name


def test_fragments_are_short():
    for folder, _, names in os.walk(os.path.join(ROOT, "prompts")):
        for name in names:
            with open(os.path.join(folder, name)) as stream:
                assert len(stream.read().split()) <= 120, name


# --- list and info ------------------------------------------------------------------

def test_list_prints_name_and_summary_aligned(workspace, capfd):
    code, out, err = run_main(capfd, "list")
    assert code == 0 and err == ""
    lines = out.splitlines()
    assert [line.split()[0] for line in lines] == sorted(EXPECTED)
    column = len(max(EXPECTED, key=len)) + 2
    for line in lines:
        name = line.split()[0]
        assert line[column:] == SHIPPED[name]["summary"]


def test_info_shows_fragments_gates_and_resolved_settings(workspace, capfd):
    code, out, _ = run_main(capfd, "info", "audit-spec", "--ai-cmd", "my-agent")
    assert code == 0
    assert out.startswith("audit-spec — Audit the specifications\n")
    assert "prompts/act/write-report.md  report=audits/spec.md" in out
    assert re.search(r"max_iterations +1 +shipped \S*rooda-config.json:\d+", out)
    assert re.search(r"agent +my-agent +flag --ai-cmd", out)


def test_info_of_an_unknown_procedure_proposes_one(workspace, capfd):
    code, _, err = run_main(capfd, "info", "audit-spc")
    assert code == 2 and "did you mean 'audit-spec'?" in err


@pytest.mark.parametrize("command", [["list"]] + [["info", name] for name in EXPECTED])
def test_list_and_info_survive_a_closed_stdout(command, tmp_path):
    proc = subprocess.run("%s %s %s | head -1" % (sys.executable, ROODA, " ".join(command)),
                          shell=True, cwd=str(tmp_path), stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, timeout=30)
    assert proc.returncode == 0 and proc.stderr == b""
    assert len(proc.stdout.splitlines()) == 1


# --- presets ------------------------------------------------------------------------

@pytest.mark.parametrize("preset,needs,agent_format", [
    ("claude", ["-p", "--dangerously-skip-permissions", "--output-format", "stream-json", "--verbose"],
     "claude"),
    ("codex", ["exec", "--dangerously-bypass-approvals-and-sandbox", "--skip-git-repo-check", "--json",
               "-"], "codex"),
    ("gemini", ["--yolo", "--skip-trust", "-o", "stream-json"], "gemini"),
    ("copilot", ["--allow-all-tools", "--no-ask-user", "-s", "--output-format", "json"], "copilot"),
    ("cursor-agent", ["-p", "--force", "--trust", "{prompt}"], "text"),
    ("kiro-cli", ["chat", "--no-interactive", "--trust-all-tools"], "text"),
    ("amp", ["--dangerously-allow-all", "-x"], "text"),
    ("opencode", ["run", "--auto", "--format", "json"], "opencode"),
    ("qwen", ["--yolo", "-o", "stream-json"], "claude"),
    ("goose", ["run", "-i", "-"], "text"),
    ("aider", ["--message-file", "{prompt_file}", "--yes-always", "--no-pretty"], "text"),
])
def test_presets_are_the_documented_unattended_forms(preset, needs, agent_format):
    cli = rooda.PRESETS[preset]
    argv, declared = cli.command.split(), rooda.preset_format(cli)
    assert argv[0] == preset
    for flag in needs:
        assert flag in argv, (preset, flag)
    assert "-p" not in argv or preset != "copilot"
    assert declared == agent_format
    assert rooda.infer_format(argv) == (None if agent_format == "text" else agent_format)


def test_presets_are_detected_in_spec_order():
    assert list(rooda.PRESETS) == ["claude", "codex", "gemini", "copilot", "cursor-agent", "kiro-cli",
                                   "amp", "opencode", "qwen", "goose", "aider"]


# --- doctor -------------------------------------------------------------------------

def doctor(capfd, *args):
    code, out, err = run_main(capfd, "doctor", *args)
    return code, [tuple(line.split(None, 1)) for line in out.splitlines()]


def test_doctor_all_ok_exits_0(workspace, agent, capfd, fake_inhibit):
    code, lines = doctor(capfd, "build", "--ai-cmd", agent.cmd, "--timeout", "600")
    assert code == 0
    assert all(level == "ok" for level, _ in lines), lines
    assert [m.split(":")[0] for _, m in lines] == ["config", "procedure build", "agent", "protect", "git",
                                                   "keep-awake", "logs"]


def test_doctor_reports_a_missing_agent_program(workspace, capfd):
    code, lines = doctor(capfd, "build", "--ai-cmd", "no-such-agent-xyz")
    assert code == 2
    assert ("error", "agent: agent program 'no-such-agent-xyz' not found on PATH; install it, or"
            " choose another agent with --ai-cmd / --ai-cmd-alias") in lines


def test_doctor_knows_claudes_root_trap(workspace, capfd, monkeypatch):
    monkeypatch.setattr("rooda._which", lambda name: "/usr/bin/claude" if name == "claude" else None)
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    monkeypatch.delenv("IS_SANDBOX", raising=False)
    code, lines = doctor(capfd, "build", "--timeout", "60")
    assert code == 2
    assert any(level == "error" and "IS_SANDBOX=1" in message for level, message in lines)
    monkeypatch.setenv("IS_SANDBOX", "1")
    code, lines = doctor(capfd, "build", "--timeout", "60")
    assert code == 0


def test_doctor_warns_of_max_cost_with_an_agent_that_reports_none(workspace, agent, capfd):
    code, lines = doctor(capfd, "build", "--ai-cmd", agent.cmd, "--max-cost", "1", "--timeout", "60")
    assert ("warning", "max_cost is set, but the agent's output (text format) reports no cost: the budget"
            " cannot be enforced; use --max-time as well") in lines


def test_doctor_knows_amps_login_trap(workspace, capfd, monkeypatch):
    monkeypatch.setattr("rooda._which", lambda name: "/usr/bin/amp" if name == "amp" else None)
    monkeypatch.delenv("AMP_API_KEY", raising=False)
    code, lines = doctor(capfd, "build", "--timeout", "60")
    assert code == 2 and any("AMP_API_KEY" in message for _, message in lines)


def test_doctor_checks_git_when_git_gates_are_on(workspace, agent, capfd, monkeypatch, tmp_path):
    (workspace / "f.md").write_text("x")
    write_config(workspace, {"procedures": {"ship": {
        "observe": "f.md", "orient": "f.md", "decide": "f.md", "act": "f.md",
        "git": {"commit": True, "push": True}}}})
    code, lines = doctor(capfd, "ship", "--ai-cmd", agent.cmd, "--timeout", "60")
    assert code == 2 and any(m.startswith("config: procedures.ship: git.commit and git.push need a git repository")
                             for _, m in lines)
    empty = tmp_path / "gitconfig"
    empty.write_text("[user]\n\tuseConfigOnly = true\n")  # no identity, none guessed
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(empty))
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    subprocess.run(["git", "init", "-q"], cwd=str(workspace), check=True)
    code, lines = doctor(capfd, "ship", "--ai-cmd", agent.cmd, "--timeout", "60")
    assert ("error", "git: git.commit is on, but git has no identity to commit with here (fatal: no email was"
            " given and auto-detection is disabled); set it with: git config user.name 'Your Name' and git"
            " config user.email you@example.com") in lines
    assert ("error", "git: git.push is on but the repository has no remote") in lines


def test_doctor_reports_an_unwritable_log_directory_and_a_bad_config(workspace, agent, capfd):
    (workspace / "a-file").write_text("")
    code, lines = doctor(capfd, "build", "--ai-cmd", agent.cmd, "--log-dir", "a-file/logs")
    assert code == 2 and any(level == "error" and m.startswith("logs: a-file/logs is not writable")
                             for level, m in lines)
    (workspace / "rooda-config.json").write_text("{")
    code, lines = doctor(capfd)
    assert code == 2 and lines[0][1].startswith("config: rooda-config.json:1:2: ")


# --- vendor -------------------------------------------------------------------------

def test_vendor_then_run_from_the_project(tmp_path):
    project = tmp_path / "project"
    project.mkdir()
    done = run_rooda("vendor", str(project))
    assert done.returncode == 0, done.stderr
    assert b"next: cd " in done.stdout
    vendored = project / ".rooda"
    assert {"logs/", "__pycache__/"} <= set((vendored / ".gitignore").read_text().splitlines())
    manifest = json.loads((vendored / "manifest.json").read_text())
    assert manifest["files"]["rooda.py"] == rooda._sha256(ROODA)
    # The manual travels with the code: a vendored copy has its README.
    assert (vendored / "README.md").read_bytes() == open(os.path.join(os.path.dirname(ROODA), "README.md"),
                                                          "rb").read()
    dry = subprocess.run([sys.executable, ".rooda/rooda.py", "build", "--dry-run"], cwd=str(project),
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=30)
    assert dry.returncode == 0, dry.stderr
    assert dry.stdout.startswith(b"# OODA Loop Iteration")


def test_vendor_refuses_to_overwrite_an_edited_copy_without_force(tmp_path, capfd):
    project = tmp_path / "project"
    project.mkdir()
    assert run_main(capfd, "vendor", project)[0] == 0
    edited = project / ".rooda" / "prompts" / "act" / "implement.md"
    edited.write_text("my own build instructions\n")
    code, out, err = run_main(capfd, "vendor", project)
    assert code == 2 and "refusing to overwrite .rooda/prompts/act/implement.md" in err
    assert edited.read_text() == "my own build instructions\n"
    code, out, err = run_main(capfd, "vendor", project, "--force")
    assert code == 0 and "my own" not in edited.read_text()


def test_vendor_upgrades_unedited_files_without_force(tmp_path, capfd):
    project = tmp_path / "project"
    project.mkdir()
    run_main(capfd, "vendor", project)
    # Pretend the vendored copy is an older, unedited release.
    old = project / ".rooda" / "prompts" / "act" / "signals.md"
    old.write_text("an older release's text\n")
    manifest_path = project / ".rooda" / "manifest.json"
    manifest = json.loads(manifest_path.read_text())
    manifest["files"]["prompts/act/signals.md"] = rooda._sha256(str(old))
    manifest["files"]["prompts/act/retired.md"] = rooda._sha256(str(old))
    shutil.copy(str(old), str(project / ".rooda" / "prompts" / "act" / "retired.md"))
    manifest_path.write_text(json.dumps(manifest))
    code, out, _ = run_main(capfd, "vendor", project)
    assert code == 0 and "1 updated" in out and "1 removed" in out
    assert old.read_text() == open(os.path.join(ROOT, "prompts", "act", "signals.md")).read()
    assert not (project / ".rooda" / "prompts" / "act" / "retired.md").exists()


def test_vendor_force_names_each_replaced_file_and_keeps_the_edit_as_orig(tmp_path, capfd):
    project = tmp_path / "project"
    project.mkdir()
    run_main(capfd, "vendor", project)
    edited = project / ".rooda" / "prompts" / "act" / "implement.md"
    edited.write_text("my own build instructions\n")
    code, out, _ = run_main(capfd, "vendor", project, "--force")
    assert code == 0
    assert "replaced %s; your edited version is kept as %s.orig" % ((
        os.path.join(str(project), ".rooda", "prompts", "act", "implement.md"),) * 2) in out
    assert (project / ".rooda" / "prompts" / "act" / "implement.md.orig").read_text() == \
        "my own build instructions\n"


def test_vendor_where_it_cannot_write_is_one_clear_error(tmp_path, capfd):
    occupied = tmp_path / "occupied"
    occupied.mkdir()
    (occupied / ".rooda").write_text("a file, not a directory")
    code, _, err = run_main(capfd, "vendor", occupied)
    assert code == 2 and "exists and is not a directory" in err and "Traceback" not in err
    read_only = tmp_path / "read-only"
    read_only.mkdir()
    read_only.chmod(0o555)
    if os.geteuid() == 0:  # root writes into any mode-555 directory; not into sysfs
        read_only = "/sys" if os.path.isdir("/sys") else pytest.skip("no read-only directory")
    code, _, err = run_main(capfd, "vendor", read_only)
    assert code == 2 and "vendor: cannot write" in err and "Traceback" not in err


def test_vendor_into_a_missing_directory_is_an_error(tmp_path, capfd):
    code, _, err = run_main(capfd, "vendor", tmp_path / "nope")
    assert code == 2 and "is not a directory" in err


def test_doctor_warns_about_an_idle_timeout_with_a_text_agent(workspace, agent, capfd):
    code, lines = doctor(capfd, "build", "--ai-cmd", agent.cmd, "--idle-timeout", "60")
    assert any(level == "warning" and message.startswith("idle timeout with a text agent: some CLIs"
                                                         " (claude -p among them) print nothing")
               for level, message in lines)
    write_config(workspace, {"ai_cmd_aliases": {"claude": "claude -p --dangerously-skip-permissions"}})
    code, lines = doctor(capfd, "build", "--ai-cmd-alias", "claude", "--idle-timeout", "60")
    assert any("the claude preset as shipped prints its structured output (format claude)" in message
               for _, message in lines)
    code, lines = doctor(capfd, "build", "--ai-cmd", agent.cmd, "--ai-format", "claude", "--idle-timeout", "60")
    assert not any("idle timeout with a text agent" in message for _, message in lines)
