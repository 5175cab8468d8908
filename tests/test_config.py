"""Configuration tiers (SPEC 3): each tier overrides the one below it, provenance in
`config`, explicit false/0 overriding, null unsetting, agent command precedence."""
import json
import os

import pytest

from conftest import run_main, write_config

BUILD_PHASES = None


def config_json(capfd, *args):
    code, out, err = run_main(capfd, "config", *args, "--json")
    assert code == 0, err
    return json.loads(out)


def phases(directory, text="fragment"):
    """A procedure's four phases, all one fragment file in `directory`."""
    path = os.path.join(str(directory), "fragment.md")
    with open(path, "w") as stream:
        stream.write(text)
    return {phase: "fragment.md" for phase in ("observe", "orient", "decide", "act")}




def test_each_tier_overrides_the_one_below_it(workspace, global_dir, capfd, monkeypatch):
    key = "run.failure_threshold"
    report = config_json(capfd, "build")
    assert report["loop.failure_threshold"] == {"value": 3, "tier": "built-in", "file": None}
    assert report["procedures.build.default_max_iterations"]["tier"] == "shipped"
    assert report["procedures.build.default_max_iterations"]["file"].endswith("rooda-config.json")

    (global_dir / "rooda-config.yml").write_text("loop:\n  failure_threshold: 4\n")
    report = config_json(capfd, "build")
    assert report[key] == {"value": 4, "tier": "global",
                           "file": str(global_dir / "rooda-config.yml")}

    (workspace / "rooda-config.yml").write_text("loop:\n  failure_threshold: 5\n")
    report = config_json(capfd, "build")
    assert report[key] == {"value": 5, "tier": "workspace", "file": "rooda-config.yml"}

    monkeypatch.setenv("ROODA_LOOP_FAILURE_THRESHOLD", "6")
    report = config_json(capfd, "build")
    assert report[key] == {"value": 6, "tier": "env", "file": "ROODA_LOOP_FAILURE_THRESHOLD"}

    report = config_json(capfd, "build", "--failure-threshold", "7")
    assert report[key] == {"value": 7, "tier": "flag", "file": "--failure-threshold"}


def test_config_human_output_names_tier_file_and_line(workspace, global_dir, capfd):
    (global_dir / "rooda-config.json").write_text('{\n  "loop": {"delay": 2}\n}\n')
    (workspace / "rooda-config.yml").write_text("loop:\n  backoff: 3\n")
    code, out, _ = run_main(capfd, "config")
    assert code == 0
    lines = out.splitlines()
    assert any(l.startswith("global     loop.delay") and l.endswith("2  (%s:2)" % (global_dir / "rooda-config.json"))
               for l in lines)
    assert any(l.startswith("workspace  loop.backoff") and l.endswith("3  (rooda-config.yml:2)") for l in lines)
    assert any(l.startswith("built-in   loop.kill_grace") for l in lines)
    assert any(l.startswith("shipped    procedures.build.summary") for l in lines)


def test_the_env_tier_changes_a_run(workspace, agent, capfd, monkeypatch):
    monkeypatch.setenv("ROODA_LOOP_FAILURE_THRESHOLD", "1")
    agent.script({"exit": 1})
    code, _, _ = run_main(capfd, "build", "-n", "5", "--ai-cmd", agent.cmd)
    assert code == 1 and agent.calls == 1


def test_global_config_dir_falls_back_to_xdg_then_home(tmp_path, workspace, capfd, monkeypatch):
    monkeypatch.delenv("ROODA_CONFIG_HOME")
    xdg = tmp_path / "xdg"
    (xdg / "rooda").mkdir(parents=True)
    (xdg / "rooda" / "rooda-config.json").write_text('{"loop": {"kill_grace": 1}}')
    monkeypatch.setenv("XDG_CONFIG_HOME", str(xdg))
    assert config_json(capfd)["loop.kill_grace"]["tier"] == "global"
    monkeypatch.delenv("XDG_CONFIG_HOME")
    home = tmp_path / "home"
    (home / ".config" / "rooda").mkdir(parents=True)
    (home / ".config" / "rooda" / "rooda-config.json").write_text('{"loop": {"kill_grace": 2}}')
    monkeypatch.setenv("HOME", str(home))
    assert config_json(capfd)["loop.kill_grace"] == {
        "value": 2, "tier": "global", "file": str(home / ".config" / "rooda" / "rooda-config.json")}


def test_a_procedure_setting_beats_the_loop_setting_of_any_tier(workspace, capfd, monkeypatch):
    write_config(workspace, {"procedures": {"build": {"iteration_timeout": 600}}})
    monkeypatch.setenv("ROODA_LOOP_ITERATION_TIMEOUT", "30")
    report = config_json(capfd, "build")
    assert report["run.iteration_timeout"]["value"] == 600
    assert report["run.iteration_timeout"]["tier"] == "workspace"
    assert config_json(capfd, "build", "--timeout", "5")["run.iteration_timeout"]["value"] == 5


def test_explicit_false_and_zero_override_and_null_unsets(workspace, global_dir, capfd, monkeypatch):
    (global_dir / "rooda-config.json").write_text('{"loop": {"delay": 4, "feedback": true, "backoff": 2}}')
    write_config(workspace, {"loop": {"delay": 0, "feedback": False, "backoff": None}})
    report = config_json(capfd)
    assert report["loop.delay"] == {"value": 0, "tier": "workspace", "file": "rooda-config.json"}
    assert report["loop.feedback"]["value"] is False
    assert report["loop.backoff"] == {"value": 1, "tier": "workspace", "file": "rooda-config.json"}
    monkeypatch.setenv("ROODA_LOOP_FEEDBACK", "1")
    monkeypatch.setenv("ROODA_LOOP_DELAY", "")
    report = config_json(capfd)
    assert report["loop.feedback"]["value"] is True
    assert report["loop.delay"] == {"value": 0, "tier": "env", "file": "ROODA_LOOP_DELAY"}


def test_lists_are_replaced_not_appended(workspace, global_dir, capfd):
    (global_dir / "rooda-config.json").write_text(json.dumps({"loop": {"signals": {
        "success": ["A", "B"]}}}))
    write_config(workspace, {"loop": {"signals": {"success": ["C"]}}})
    report = config_json(capfd)
    assert report["loop.signals.success"]["value"] == ["C"]
    assert report["loop.signals.failure"]["tier"] == "built-in"  # the mapping was merged


def test_relative_paths_resolve_against_the_file_that_names_them(workspace, global_dir, capfd):
    (global_dir / "rooda-config.json").write_text(json.dumps({"procedures": {
        "mine": phases(global_dir, "from the global folder")}}))
    code, out, err = run_main(capfd, "mine", "--dry-run", "--ai-cmd", "x")
    assert code == 0, err
    assert "## OBSERVE\nfrom the global folder\n" in out


def test_config_flag_names_the_workspace_file(workspace, tmp_path, capfd):
    other = tmp_path / "elsewhere"
    other.mkdir()
    (other / "custom.yml").write_text("loop:\n  delay: 7\n")
    report = config_json(capfd, "--config", str(other / "custom.yml"))
    assert report["loop.delay"] == {"value": 7, "tier": "workspace", "file": str(other / "custom.yml")}


def test_the_shipped_file_as_workspace_is_loaded_once_as_shipped(capfd, monkeypatch):
    import rooda

    monkeypatch.chdir(rooda.ROODA_DIR)
    config = rooda.load_config()
    assert [tier for tier, _ in config.files] == ["shipped"]


@pytest.mark.parametrize("name,value,message", [
    ("ROODA_LOOP_FAILURE_TRESHOLD", "2",
     "environment: ROODA_LOOP_FAILURE_TRESHOLD is not a loop setting; did you mean ROODA_LOOP_FAILURE_THRESHOLD?"),
    ("ROODA_LOOP_FAILURE_THRESHOLD", "many",
     "ROODA_LOOP_FAILURE_THRESHOLD: loop.failure_threshold: must be a whole number >= 1, not a string"),
    ("ROODA_LOOP_ENV", "x", "environment: ROODA_LOOP_ENV cannot set env, which is not one value: set it in"
                            " a config file"),
    ("ROODA_LOOP_NOTIFY_ON", "wait", "environment: ROODA_LOOP_NOTIFY_ON cannot set notify_on, which is not"
                                     " one value: set it in a config file"),  # (not: did you mean NOTIFY?)
    ("ROODA_LOOP_BOGUS", "1", "environment: ROODA_LOOP_BOGUS is not a loop setting"),
])
def test_environment_mistakes_exit_2_with_one_line(workspace, capfd, monkeypatch, name, value, message):
    monkeypatch.setenv(name, value)
    code, out, err = run_main(capfd, "build", "--dry-run")
    assert code == 2 and out == ""
    assert err.splitlines()[0] == message


def test_all_problems_of_all_files_are_reported_then_exit_2(workspace, global_dir, capfd):
    (global_dir / "rooda-config.yml").write_text("loop:\n  delay: soon\n")
    (workspace / "rooda-config.yml").write_text("loop:\n  backof: 2\nprocedures:\n  x:\n    observe: []\n")
    code, _, err = run_main(capfd, "build", "--dry-run")
    assert code == 2
    first_lines = [l for l in err.splitlines() if not l.startswith("  ")]
    assert "%s:2:3: loop.delay: must be a number of seconds, not a string" % (global_dir / "rooda-config.yml") \
        in first_lines
    assert "rooda-config.yml:2:3: loop.backof: unknown key; did you mean 'backoff'?" in first_lines
    assert "rooda-config.yml:4:3: procedures.x: has no fragment in any phase; give observe, orient," \
        " decide or act at least one" in first_lines  # an empty phase alone is fine (SPEC 3 rev 2)


def test_a_placeholder_without_parameter_is_a_config_error(workspace, capfd):
    (workspace / "t.md").write_text("Work on {{.area}} and {{.depth}}.")
    write_config(workspace, {"procedures": {"p": {
        "observe": [{"path": "t.md", "parameters": {"area": "auth"}}],
        "orient": "t.md", "decide": "t.md", "act": "t.md"}}})
    code, _, err = run_main(capfd, "p", "-d", "--ai-cmd", "x")
    assert code == 2 and "placeholder {{.depth}} has no parameter" in err


# --- agent command precedence (SPEC 3) ------------------------------------------------

def test_agent_command_precedence(workspace, capfd, monkeypatch):
    monkeypatch.setattr("rooda._which", lambda name: "/usr/bin/" + name if name == "gemini" else None)
    config = {
        "ai_cmd_aliases": {"a1": "from-loop-alias", "a2": "from-procedure-alias", "a3": "from-flag-alias"},
        "loop": {"ai_cmd_alias": "a1", "ai_cmd": "from-loop-cmd"},
        "procedures": {"build": {"ai_cmd_alias": "a2", "ai_cmd": "from-procedure-cmd"}},
    }

    def agent_of(*args):
        write_config(workspace, config)
        code, _, err = run_main(capfd, "build", "--dry-run", *args)
        assert code == 0, err
        return err.splitlines()[1].split("Would execute with: ")[1]

    assert agent_of("--ai-cmd", "from-flag-cmd", "--ai-cmd-alias", "a3") == "from-flag-cmd"
    assert agent_of("--ai-cmd-alias", "a3") == "from-flag-alias"
    assert agent_of() == "from-procedure-cmd"
    del config["procedures"]["build"]["ai_cmd"]
    assert agent_of() == "from-procedure-alias"
    del config["procedures"]["build"]["ai_cmd_alias"]
    assert agent_of() == "from-loop-cmd"
    del config["loop"]["ai_cmd"]
    assert agent_of() == "from-loop-alias"
    del config["loop"]["ai_cmd_alias"]
    assert agent_of() == "gemini --yolo --skip-trust -o stream-json"  # the first preset on PATH


def test_auto_detection_follows_the_preset_order(workspace, capfd, monkeypatch):
    on_path = {"aider", "qwen", "copilot"}
    monkeypatch.setattr("rooda._which", lambda name: "/bin/" + name if name in on_path else None)
    code, _, err = run_main(capfd, "build", "--dry-run")
    assert "Would execute with: copilot " in err


def test_goose_preset_sets_goose_mode(workspace, agent, capfd, monkeypatch, tmp_path):
    import rooda

    config = rooda.load_config()
    goose = rooda.resolve_agent(config, "build", None, "goose")
    assert goose.env == {"GOOSE_MODE": "auto"}
    write_config(workspace, {"ai_cmd_aliases": {"goose": "my-goose run"}})
    assert rooda.resolve_agent(rooda.load_config(), "build", None, "goose").env == {}


def test_loading_many_procedures_is_linear(workspace, capfd):
    """`list` with 5,000 procedures must not spend seconds on provenance bookkeeping."""
    import time

    def list_time(count):
        write_config(workspace, {"procedures": {"p%d" % n: {
            "summary": "s", "observe": "a.md", "orient": "a.md", "decide": "a.md", "act": "a.md"}
            for n in range(count)}})
        best = None
        for _ in range(2):
            started = time.perf_counter()
            code, out, _ = run_main(capfd, "list")
            took = time.perf_counter() - started
            best = took if best is None else min(best, took)
        assert code == 0 and out.count("\n") >= count
        return best
    ratio = list_time(5000) / list_time(500)
    assert ratio < 30, "10x the procedures took %.0fx the time (quadratic?)" % ratio


def test_every_run_option_shows_in_config_with_the_flag_tier(workspace, capfd):
    """Issue 22 item 13: `config build --max-cost 3 ...` shows the flags' values."""
    shown = config_json(capfd, "build", "--max-cost", "3", "--verify", "make test", "--ai-format", "codex",
                        "--timeout", "60", "--failure-threshold", "2")
    for key, value in (("max_cost", 3), ("verify", "make test"), ("ai_format", "codex"),
                       ("iteration_timeout", 60), ("failure_threshold", 2)):
        assert shown["run." + key]["value"] == value and shown["run." + key]["tier"] == "flag", key
