"""Configs written for the Go rooda load (SPEC 3 rev 2): its built-in fragment names, v0.1
keys, empty strings, alias mappings, empty phases, procedure-level max_output_buffer --
and what cannot be honoured (template actions, names only its docs use) is an error.
The configs below are written from the Go rooda's documented schema; only the fragment
names and the keys are its facts."""
import os

import pytest

import rooda
from conftest import ROOT, run_main

# The Go rooda's 16 built-in procedures, as the names of their fragments per phase
# (internal/procedures/builtin.go of jomadu/rooda; names only).
_DECIDE = ["break_down_into_tasks", "prioritize_tasks", "decide_signal"]
_ACT = ["write_draft_plan", "emit_signal"]
GO_PROCEDURES = {
    "agents-sync": (["study_agents_md", "scan_repo_structure", "detect_build_system", "detect_work_tracking"],
                    ["compare_detected_vs_documented", "identify_drift"],
                    ["determine_sections_to_update", "decide_signal"],
                    ["write_agents_md", "commit_changes", "emit_signal"]),
    "build": (["study_agents_md", "query_work_tracking", "study_specs", "study_impl", "study_task_details"],
              ["understand_task_requirements", "search_codebase", "identify_affected_files"],
              ["pick_task", "plan_implementation_approach", "decide_signal"],
              ["modify_files", "run_tests", "update_work_tracking", "commit_changes", "emit_signal"]),
    "publish-plan": (["study_agents_md", "study_draft_plan", "query_work_tracking"],
                     ["parse_plan_tasks", "map_to_work_tracking_format"],
                     ["determine_import_strategy", "decide_signal"],
                     ["create_work_items", "update_draft_plan_status", "emit_signal"]),
    "audit-spec": (["study_agents_md", "study_specs"], ["evaluate_against_quality_criteria"],
                   ["identify_issues", "prioritize_findings"], ["write_audit_report", "emit_signal"]),
    "audit-impl": (["study_agents_md", "study_impl", "run_tests", "run_lints"],
                   ["evaluate_against_quality_criteria"], ["identify_issues", "prioritize_findings"],
                   ["write_audit_report", "emit_signal"]),
    "audit-agents": (["study_agents_md", "scan_repo_structure", "detect_build_system", "verify_commands"],
                     ["compare_documented_vs_actual", "identify_drift"], ["categorize_drift_severity"],
                     ["write_audit_report", "emit_signal"]),
    "audit-spec-to-impl": (["study_agents_md", "study_specs", "study_impl"],
                           ["identify_specified_but_not_implemented"], ["prioritize_gaps_by_impact"],
                           ["write_gap_report", "emit_signal"]),
    "audit-impl-to-spec": (["study_agents_md", "study_impl", "study_specs"],
                           ["identify_implemented_but_not_specified"], ["prioritize_gaps_by_impact"],
                           ["write_gap_report", "emit_signal"]),
    "draft-plan-spec-feat": (["study_agents_md", "study_task_input", "study_specs", "study_impl"],
                             ["understand_feature_requirements", "identify_affected_specs"], _DECIDE, _ACT),
    "draft-plan-spec-fix": (["study_agents_md", "study_task_input", "study_specs", "study_impl"],
                            ["understand_bug_root_cause", "identify_spec_deficiencies"], _DECIDE, _ACT),
    "draft-plan-spec-refactor": (["study_agents_md", "study_task_input", "study_specs"],
                                 ["understand_refactor_request", "identify_structural_issues",
                                  "identify_duplication"], _DECIDE, _ACT),
    "draft-plan-spec-chore": (["study_agents_md", "study_task_input", "study_specs"],
                              ["understand_chore_request", "identify_maintenance_needs"], _DECIDE, _ACT),
    "draft-plan-impl-feat": (["study_agents_md", "study_task_input", "study_specs", "study_impl"],
                             ["understand_feature_requirements", "identify_affected_code"], _DECIDE, _ACT),
    "draft-plan-impl-fix": (["study_agents_md", "study_task_input", "study_specs", "study_impl"],
                            ["understand_bug_root_cause", "identify_affected_code"], _DECIDE, _ACT),
    "draft-plan-impl-refactor": (["study_agents_md", "study_task_input", "study_impl"],
                                 ["understand_refactor_request", "identify_code_smells",
                                  "identify_complexity_issues"], _DECIDE, _ACT),
    "draft-plan-impl-chore": (["study_agents_md", "study_task_input", "study_impl"],
                              ["understand_chore_request", "identify_maintenance_needs"], _DECIDE, _ACT),
}
PHASES = ("observe", "orient", "decide", "act")


def go_procedure_yaml(name, phases):
    lines = ["  %s:" % name, "    display: \"%s\"" % name]
    for phase, names in zip(PHASES, phases):
        lines.append("    %s:" % phase)
        lines += ["      - path: \"builtin:fragments/%s/%s.md\"" % (phase, fragment) for fragment in names]
    return "\n".join(lines)


def dry_run(capfd, *args):
    return run_main(capfd, *args, "--dry-run", "--ai-cmd", "x")


def test_all_57_go_names_map_and_every_go_procedure_dry_runs(workspace, capfd):
    names = {(phase, n) for phases in GO_PROCEDURES.values() for phase, group in zip(PHASES, phases)
             for n in group}
    assert len(GO_PROCEDURES) == 16 and len({n for _, n in names}) == 57
    assert names == {(phase, n) for phase, table in rooda.GO_BUILTIN_FRAGMENTS.items() for n in table}
    prefixed = {name: "go-" + name for name in GO_PROCEDURES}
    (workspace / "rooda-config.yml").write_text("procedures:\n" + "\n".join(
        go_procedure_yaml(prefixed[name], phases) for name, phases in GO_PROCEDURES.items()) + "\n")
    config = rooda.load_config()
    for name, phases in GO_PROCEDURES.items():
        procedure = config.procedure(prefixed[name])
        for phase in PHASES:
            paths = [fragment["path"] for fragment in procedure[phase]]
            assert len(paths) == len(set(paths)), (name, phase)  # a phase never repeats one
            assert all(os.path.isfile(path) and "/prompts/%s/" % phase in path for path in paths)
        code, out, err = dry_run(capfd, prefixed[name])
        assert code == 0, err
        assert "{{" not in out and "## OBSERVE" in out and "## ACT" in out


def test_the_go_build_prompt_is_the_shipped_fragments_in_order(workspace, capfd):
    (workspace / "rooda-config.yml").write_text("procedures:\n" + go_procedure_yaml("gobuild", GO_PROCEDURES["build"]) + "\n")
    code, out, _ = dry_run(capfd, "gobuild")

    def text(relative):
        with open(os.path.join(ROOT, "prompts", relative)) as stream:
            return stream.read().strip()
    act = out.split("## ACT\n")[1]
    assert act == "\n\n".join(text("act/%s.md" % n) for n in ("implement", "commit", "signals")) + "\n"
    decide = out.split("## DECIDE\n")[1].split("\n\n## ACT")[0]
    assert decide == "\n\n".join(text("decide/%s.md" % n) for n in ("task", "impl-changes", "signal"))


def test_a_name_only_the_go_docs_use_is_an_error_naming_the_nearest(workspace, capfd):
    (workspace / "rooda-config.yml").write_text(
        "procedures:\n  docs:\n    observe:\n      - path: builtin:fragments/observe/read_agents_md.md\n")
    code, _, err = dry_run(capfd, "docs")
    assert code == 2
    assert err.splitlines()[0] == (
        "rooda-config.yml:4:9: procedures.docs.observe[0].path: builtin:fragments/observe/read_agents_md.md:"
        " no such built-in fragment; did you mean 'builtin:fragments/observe/study_agents_md.md'?")


def test_a_workspace_overriding_a_builtin_and_adding_a_procedure(workspace, capfd):
    (workspace / "steps").mkdir()
    for phase in PHASES:
        (workspace / "steps" / ("%s.md" % phase)).write_text("Our own %s step." % phase)
    (workspace / "rooda-config.yml").write_text(
        "loop:\n  ai_cmd_alias: fast\n  max_output_buffer: 2048\n  log_level: warn\n"
        "ai_cmd_aliases:\n  fast: \"my-agent --fast\"\n"
        "procedures:\n  build:\n    default_max_iterations: 4\n    ai_cmd_alias: fast\n"
        "  review:\n    display: \"Review\"\n    summary: \"Review the change\"\n"
        + "".join("    %s:\n      - path: \"steps/%s.md\"\n" % (p, p) for p in PHASES))
    code, out, err = run_main(capfd, "review", "--dry-run")
    assert code == 0, err
    assert "[DRY RUN] Would execute with: my-agent --fast" in err
    assert "## ORIENT\nOur own orient step." in out
    assert rooda.load_config().procedure("build")["default_max_iterations"] == 4


def test_inline_content_parameters_and_empty_or_absent_phases(workspace, capfd):
    (workspace / "check.md").write_text("Check {{.area}} for {{ .kinds }}.")
    (workspace / "rooda-config.yml").write_text(
        "procedures:\n  lean:\n    observe:\n      - path: check.md\n        parameters:\n"
        "          area: the CLI\n          kinds: [typos, dead links]\n"
        "    orient: []\n    act:\n      - content: \"Fix what you found.\"\n"
        "      - path: builtin:fragments/act/emit_signal.md\n    max_output_buffer: 4096\n")
    code, out, err = dry_run(capfd, "lean")
    assert code == 0, err
    assert "## OBSERVE\nCheck the CLI for typos, dead links.\n\n## ACT\nFix what you found." in out
    assert "## ORIENT" not in out and "## DECIDE" not in out  # empty and absent phases are left out


@pytest.mark.parametrize("template,construct", [
    ("{{range .paths}}- {{.}}\n{{end}}", "range"),
    ("{{if .include_tests}}Run the tests.{{end}}", "if"),
])
def test_go_template_actions_are_a_config_error_naming_the_construct(workspace, capfd, template, construct):
    (workspace / "t.md").write_text("Look at these:\n" + template)
    (workspace / "rooda-config.yml").write_text(
        "procedures:\n  t:\n    observe:\n      - path: t.md\n        parameters:\n"
        "          paths: [a, b]\n          include_tests: true\n")
    code, out, err = dry_run(capfd, "t")
    assert code == 2 and out == ""
    assert "the Go template action {{%s" % construct in err and "'%s'" % construct in err
    assert "Traceback" not in err


def test_v01_keys_load_under_their_new_names_with_one_warning_each(workspace, capfd):
    for phase in PHASES:
        (workspace / ("%s.md" % phase)).write_text("Do %s." % phase)
    (workspace / "rooda-config.yml").write_text(
        "ai_tools:\n  mine: \"my-agent --yes\"\nprocedures:\n  old:\n"
        + "".join("    %s: %s.md\n" % (p, p) for p in PHASES) + "    default_iterations: 0\n"
        "  older:\n" + "".join("    %s: %s.md\n" % (p, p) for p in PHASES) + "    default_iterations: 7\n")
    code, out, err = run_main(capfd, "old", "--dry-run", "--ai-cmd-alias", "mine")
    assert code == 0, err
    assert err.count("warning: ai_tools is the Go rooda v0.1 name; read as ai_cmd_aliases") == 1
    assert "rooda-config.yml:9:5: warning: default_iterations is the Go rooda v0.1 name; read as" \
        " default_max_iterations (0: iteration_mode unlimited)" in err
    assert "Would execute with: my-agent --yes" in err
    config = rooda.load_config()
    assert config.procedure("old")["iteration_mode"] == "unlimited"
    assert config.procedure("older")["default_max_iterations"] == 7


def test_an_empty_ai_cmd_means_not_set_here(workspace, capfd, global_dir):
    (global_dir / "rooda-config.yml").write_text("loop:\n  ai_cmd: \"from-global --flag\"\n")
    (workspace / "rooda-config.yml").write_text("loop:\n  ai_cmd: \"\"\n  ai_cmd_alias: \"\"\n")
    code, _, err = run_main(capfd, "build", "--dry-run")
    assert code == 0 and "Would execute with: from-global --flag" in err


def test_alias_mappings_and_the_kiro_name(workspace, capfd):
    (workspace / "rooda-config.yml").write_text(
        "ai_cmd_aliases:\n  mine:\n    command: \"my-agent --json\"\n    format: codex\n"
        "    env: {MY_TOKEN: abc}\n")
    code, _, err = run_main(capfd, "build", "--dry-run", "--ai-cmd-alias", "mine")
    assert code == 0 and "Would execute with: my-agent --json" in err
    code, _, err = run_main(capfd, "build", "--dry-run", "--ai-cmd-alias", "kiro")
    assert code == 0 and "Would execute with: kiro-cli chat --no-interactive --trust-all-tools" in err
    (workspace / "rooda-config.yml").write_text("ai_cmd_aliases:\n  broken:\n    format: codex\n")
    code, _, err = run_main(capfd, "build", "--dry-run")
    assert code == 2 and "ai_cmd_aliases.broken: needs a 'command'" in err


@pytest.mark.parametrize("value,ok", [(1024, True), (1023, False)])
def test_max_output_buffer_is_at_least_1024_in_a_procedure_too(workspace, capfd, value, ok):
    (workspace / "rooda-config.yml").write_text(
        "procedures:\n  build:\n    max_output_buffer: %d\n" % value)
    code, _, err = dry_run(capfd, "build")
    assert (code == 0) == ok, err
    if not ok:
        assert "procedures.build.max_output_buffer: must be >= 1024, got 1023" in err


def test_a_bare_signal_line_in_the_prompt_is_warned_about_at_start_and_by_doctor(workspace, agent, capfd):
    (workspace / "emit.md").write_text("When done, print exactly:\n\n<promise>SUCCESS</promise>\n"
                                       "else:\n<promise>FAILURE</promise>\n")
    (workspace / "other.md").write_text("<promise>SUCCESS</promise>\n")
    (workspace / "rooda-config.yml").write_text(
        "procedures:\n  p:\n    act:\n      - path: emit.md\n      - path: other.md\n")
    code, _, err = run_main(capfd, "p", "-n", "1", "--ai-cmd", agent.cmd)
    warnings = [line for line in err.splitlines() if "promise marker alone" in line]
    assert len(warnings) == 1 and warnings[0].endswith(  # one warning, naming the fragments
        "WARNING: a promise marker alone on a line (emit.md lines 3, 5; other.md line 1): an"
        " agent that echoes its prompt would read as done; put it inside a sentence")  # (doctor's words)
    code, out, _ = run_main(capfd, "doctor", "p", "--ai-cmd", agent.cmd)
    assert "prompt: a promise marker alone on a line (emit.md lines 3, 5; other.md line 1)" in out
    code, _, err = run_main(capfd, "build", "-n", "1", "--ai-cmd", agent.cmd)
    assert "promise marker alone" not in err  # the shipped prompts never do it


def test_the_go_log_level_flag(workspace, agent, capfd):
    code, out, err = run_main(capfd, "build", "-n", "1", "--log-level", "error", "--ai-cmd", agent.cmd)
    assert code == 0 and err == ""


def test_the_readme_documents_the_whole_table():
    with open(os.path.join(ROOT, "README.md")) as stream:
        readme = stream.read()
    rows = {}
    for line in readme.split("### Configs written for the Go rooda")[1].split("### ")[0].splitlines():
        cells = [cell.strip() for cell in line.strip("|").split("|")]
        if len(cells) == 3 and cells[0] in PHASES:
            for name in cells[1].replace("`", "").split(", "):
                rows[(cells[0], name)] = cells[2].split()[0].strip("`")
    assert rows == {(phase, name): shipped for phase, table in rooda.GO_BUILTIN_FRAGMENTS.items()
                    for name, shipped in table.items()}


def test_a_null_parameter_is_an_empty_string(workspace, capfd):
    """Issue 22 item 23: `area: null` is refused as a whole mapping no more."""
    (workspace / "check.md").write_text("Check {{.area}} now.")
    (workspace / "rooda-config.yml").write_text(
        "procedures:\n  t:\n    observe:\n      - path: check.md\n        parameters:\n          area: null\n")
    code, out, err = dry_run(capfd, "t")
    assert code == 0, err
    assert "## OBSERVE\nCheck  now." in out
