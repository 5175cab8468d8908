"""Typed error kinds first, wording second (SPEC 13 rev 5, issue 37): the recorded error
samples of Claude Code 2.1.332 and Codex 0.171.0, replayed by a fake `claude` / `codex` on
PATH (Codex's rollout in a CODEX_HOME of the test's), decide the cause, the exit code and
the wait by the CLI's own kind; an unknown kind falls back to the wording; no value of
the fields makes a traceback. Waits go through the injected wait (`waits`), never slept."""
import json
import os
import shutil

import pytest

import rooda
from conftest import OK_RESULT, STREAMS, ends, events_line, fake_cli, replay, run_main, run_rooda, say, \
    session_events, status

GOOD = {"actions": [{"out": events_line(say("done <promise>SUCCESS</promise>"), OK_RESULT)}]}


def run_claude(capfd, tmp_path, *args):
    logs = tmp_path / "logs"
    code, _, err = run_main(capfd, "build", "-n", "3", "--ai-cmd-alias", "claude", "--log-dir", logs, *args)
    return code, err, session_events(logs)


@pytest.fixture
def claude(tmp_path, monkeypatch, workspace, agent):
    fake_cli(tmp_path, monkeypatch, "claude")
    monkeypatch.setenv("IS_SANDBOX", "1")  # (root may skip permissions in a sandbox)
    return agent


# --- Claude Code 2.1.332 -----------------------------------------------------------------

def test_claude_oauth_org_not_allowed_is_an_auth_stop_and_resume_goes_on(claude, capfd, tmp_path):
    claude.script(replay("claude-error-oauth-org-not-allowed-403.jsonl", 1), GOOD)
    code, err, events = run_claude(capfd, tmp_path)
    assert code == 2 and claude.calls == 1, err  # (it was 3 failures and exit 1: the wording knew no 403)
    [end] = ends(events)
    assert (end["cause"], end["error_kind"]) == ("auth", "oauth_org_not_allowed")
    assert end["reason"].startswith("auth (oauth_org_not_allowed): Your organization has disabled Claude")
    assert "ERROR: the agent cannot authenticate: Your organization has disabled" in err
    # What to do is what this kind needs, not a login the organisation refuses.
    assert "; the organisation allows no subscription login here: use an API key (ANTHROPIC_API_KEY)" in err
    assert "/login" not in err.split("cannot authenticate")[1]
    assert events[-1]["resumable"] is True
    _, said, _ = status(tmp_path / "logs")
    assert "reason      the agent cannot authenticate: Your organization" in said
    assert "0 failed" in said and "last failure" not in said  # (the account's stop is no failure: issue 43)
    code, _, err = run_main(capfd, "resume", "--log-dir", tmp_path / "logs")
    assert code == 0 and claude.calls == 2, err
    assert ends(session_events(tmp_path / "logs"))[-1]["outcome"] == "completed"
    # The stopped attempt was not counted: the resumed one is not told it failed (it was,
    # with the real CLI: "Iteration 1 ended in failure").
    assert "Iteration 1 ended" not in claude.prompt(2) and "organization" not in claude.prompt(2)


@pytest.mark.parametrize("sample,kind", [("claude-error-server-error-529.jsonl", "server_error"),
                                         ("claude-error-server-error-500.jsonl", "server_error"),
                                         ("claude-error-overloaded-midstream.jsonl", "server_error")])
def test_claude_server_errors_are_outages_waited_out(claude, capfd, tmp_path, waits, sample, kind):
    claude.script(replay(sample, 1), GOOD)
    code, err, events = run_claude(capfd, tmp_path)
    assert code == 0 and claude.calls == 2 and len(waits) == 1, err
    first = ends(events)[0]
    assert (first["outcome"], first["cause"], first["error_kind"]) == ("unavailable", "outage", kind)
    [said] = [line for line in err.splitlines() if "retrying in" in line]
    assert ".;" not in said and "; retrying in 1m · attempt 1." in said, said  # (it was "errors.; retrying")
    assert "  outage (%s): API Error: 5" % kind in err
    assert [e["kind"] for e in events if e["event"] == "limit"] == ["outage"]
    code, out, _ = run_main(capfd, "report", "--log-dir", tmp_path / "logs")  # (it counts them by kind)
    assert code == 0 and "            kinds: %s ×1\n" % kind in out, out


def test_claude_usage_limit_reached_is_a_limit_waited_until_its_reset(claude, capfd, tmp_path, waits):
    claude.script(replay("claude-error-usage-limit-reached-429.jsonl", 1), GOOD)
    code, err, events = run_claude(capfd, tmp_path)
    assert code == 0 and claude.calls == 2, err
    first = ends(events)[0]
    assert (first["outcome"], first["error_kind"]) == ("limited", "usage_limit_reached")
    [limit] = [e for e in events if e["event"] == "limit"]
    assert limit["kind"] == "five_hour" and limit["resets_at"] == "2026-11-28T12:13:57.000Z"


def test_every_kind_no_retry_fixes_says_what_to_do():
    for cli in rooda.AGENT_CLIS:
        fatal = {kind for kind, cause in cli.kinds.items() if cause == rooda.CAUSE_FATAL}
        assert fatal <= set(cli.advice) and set(cli.advice) <= set(cli.kinds), cli.name


def test_claude_model_not_found_cannot_go_on(claude, capfd, tmp_path):
    claude.script(replay("claude-error-model-not-found-404.jsonl", 1), GOOD)
    code, err, events = run_claude(capfd, tmp_path)
    assert code == 2 and claude.calls == 1, err
    [end] = ends(events)
    assert (end["outcome"], end["cause"], end["error_kind"]) == ("failure", "fatal", "model_not_found")
    assert "ERROR: the agent cannot go on: There's an issue with the selected model" in err
    assert "(model_not_found); choose a model that exists and that the account may use" in err


def test_an_unknown_kind_is_as_if_absent_and_the_wording_decides(claude, capfd, tmp_path, waits):
    outage = {"type": "assistant", "error": "a_kind_from_a_later_release", "message": {"content": [
        {"type": "text", "text": "API Error: 529 Overloaded. Try again in a moment."}]}}
    other = dict(outage, message={"content": [{"type": "text", "text": "Something else broke."}]})
    failed = {"type": "result", "subtype": "success", "is_error": True, "result": "x"}
    claude.script({"actions": [{"out": events_line(outage, dict(failed, result=outage["message"]["content"][0]
                                                                ["text"]))}], "exit": 1},
                  {"actions": [{"out": events_line(other, dict(failed, result="Something else broke."))}],
                   "exit": 1})
    code, err, events = run_claude(capfd, tmp_path, "-n", "1")
    first, second = ends(events)
    assert (first["cause"], first["error_kind"]) == ("outage", "a_kind_from_a_later_release")
    assert (second["outcome"], second["cause"]) == ("failure", "error") and code == 0  # (the cap)


def test_a_kind_on_a_run_that_ended_well_is_ignored(claude, capfd, tmp_path):
    error = {"type": "assistant", "error": "authentication_failed", "message": {"content": [
        {"type": "text", "text": "Invalid API key"}]}}
    claude.script({"actions": [{"out": events_line(error, say("<promise>SUCCESS</promise>"), OK_RESULT)}]})
    code, err, events = run_claude(capfd, tmp_path)
    assert code == 0 and ends(events)[0]["outcome"] == "completed" and ends(events)[0]["error_kind"] is None


# --- Codex 0.171.0: the kind is in the rollout file ---------------------------------------

@pytest.fixture
def codex(tmp_path, monkeypatch, workspace, agent):
    fake_cli(tmp_path, monkeypatch, "codex")
    home = tmp_path / "codex-home"
    monkeypatch.setenv("CODEX_HOME", str(home))
    agent.home = home
    return agent


def rollout(codex, name):
    """The recorded run's stdout as the fake codex's step, its rollout where Codex writes it."""
    with open(os.path.join(STREAMS, "codex-error-%s.jsonl" % name)) as stream:
        thread = json.loads(stream.readline())["thread_id"]
    folder = codex.home / "sessions" / "2026" / "11" / "28"
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copy(os.path.join(STREAMS, "codex-rollout-%s.jsonl" % name),
                folder / ("rollout-2026-11-28T09-56-14-%s.jsonl" % thread))
    return replay("codex-error-%s.jsonl" % name, 1)


CODEX_GOOD = replay("codex.jsonl", 0)


def run_codex(capfd, tmp_path, *args):
    logs = tmp_path / "logs"
    code, _, err = run_main(capfd, "build", "-n", "3", "--ai-cmd-alias", "codex", "--log-dir", logs, *args)
    return code, err, session_events(logs)


@pytest.mark.parametrize("name,kind", [("high-demand-500", "internal_server_error"),
                                       ("high-demand-500-retried", "internal_server_error"),
                                       ("unavailable-503", "http_connection_failed")])
def test_codex_outages_are_waited_out_and_the_run_completes(codex, capfd, tmp_path, waits, name, kind):
    codex.script(rollout(codex, name), CODEX_GOOD)
    code, err, events = run_codex(capfd, tmp_path)
    assert code == 0 and codex.calls == 2 and len(waits) == 1, err  # (it aborted after three: issue 37)
    first = ends(events)[0]
    assert (first["outcome"], first["cause"], first["error_kind"]) == ("unavailable", "outage", kind)
    [said] = [line for line in err.splitlines() if "retrying in" in line]
    assert ".;" not in said and "; retrying in 1m · attempt 1." in said, said  # (it was "errors.; retrying")


@pytest.mark.parametrize("name,kind,wait", [("usage-limit-exceeded-429", "usage_limit_exceeded", True),
                                            ("too-many-attempts-429", "response_too_many_failed_attempts",
                                             True)])
def test_codex_limits_are_limits(codex, capfd, tmp_path, waits, name, kind, wait, monkeypatch):
    # "try again at 12:13 PM" is up to a day away, whenever the test runs: within limit_wait.
    monkeypatch.setenv("ROODA_LOOP_LIMIT_WAIT", "90000")
    codex.script(rollout(codex, name), CODEX_GOOD)
    code, err, events = run_codex(capfd, tmp_path)
    assert code == 0 and codex.calls == 2, err
    assert (ends(events)[0]["outcome"], ends(events)[0]["error_kind"]) == ("limited", kind)


def test_codex_unauthorized_stops_with_exit_2(codex, capfd, tmp_path):
    codex.script(rollout(codex, "unauthorized-401"), CODEX_GOOD)
    code, err, events = run_codex(capfd, tmp_path)
    assert code == 2 and codex.calls == 1, err
    assert (ends(events)[0]["cause"], ends(events)[0]["error_kind"]) == ("auth", "http_connection_failed")
    # (a kind its HTTP status decides reads as that status, not as a network error: issue 43, 11)
    assert ends(events)[0]["reason"].startswith("auth (HTTP 401): ")


def test_codex_advice_and_doctor_know_a_custom_providers_key(codex, capfd, tmp_path, monkeypatch):
    codex.home.mkdir(exist_ok=True)
    (codex.home / "config.toml").write_text('model_provider = "corp"\n[model_providers.corp]\n'
                                            'base_url = "http://127.0.0.1:9/v1"\nenv_key = "CORP_LLM_KEY"\n')
    codex.script(rollout(codex, "unauthorized-401"))
    code, err, _ = run_codex(capfd, tmp_path)
    assert code == 2 and "; codex needs CORP_LLM_KEY or OPENAI_API_KEY, or `codex login`" in err, err
    monkeypatch.setenv("CORP_LLM_KEY", "corp-secret")
    code, out, _ = run_main(capfd, "doctor", "build", "--ai-cmd-alias", "codex")
    assert "ok       credentials: CORP_LLM_KEY found; who pays: the API billing of the provider that names it" \
        in out, out


def test_codex_model_not_found_cannot_go_on(codex, capfd, tmp_path):
    codex.script(rollout(codex, "model-not-found-404"), CODEX_GOOD)
    code, err, events = run_codex(capfd, tmp_path)
    assert code == 2 and codex.calls == 1 and "ERROR: the agent cannot go on: " in err, err
    assert (ends(events)[0]["cause"], ends(events)[0]["error_kind"]) == ("fatal", "model_not_found")


def test_codex_context_window_is_the_iterations_own_error_not_a_wait(codex, capfd, tmp_path, waits):
    codex.script(rollout(codex, "context-window-400"))
    code, err, events = run_codex(capfd, tmp_path, "-n", "2")
    assert code == 0 and waits == [], err  # (two failures, then the cap)
    assert [(e["cause"], e["error_kind"]) for e in ends(events)] == [("error", "context_window_exceeded")] * 2
    assert "  error (context_window_exceeded): Codex ran out of room in the model's context window" in err


def test_a_kind_its_status_decides_given_no_status_leaves_the_cause_to_the_wording(codex, capfd, tmp_path, waits):
    # (it made an outage a plain failure: the kind decided "nothing", the wording was not read)
    stdout = open(os.path.join(STREAMS, "codex-error-unavailable-503.jsonl")).read().replace(
        "unexpected status 503 Service Unavailable: Service Unavailable", "stream disconnected before completion")
    rollout(codex, "unavailable-503")
    [found] = list((codex.home / "sessions").rglob("rollout-*.jsonl"))
    found.write_text(found.read_text().replace('{"http_connection_failed":{"http_status_code":503}}',
                                               '{"response_stream_disconnected":{"http_status_code":null}}'))
    codex.script({"actions": [{"out": stdout}], "exit": 1}, CODEX_GOOD)
    code, err, events = run_codex(capfd, tmp_path)
    assert code == 0 and len(waits) == 1, err
    assert (ends(events)[0]["cause"], ends(events)[0]["error_kind"]) == ("outage", "response_stream_disconnected")


def test_without_its_rollout_codexs_high_demand_wording_is_an_outage(codex, capfd, tmp_path, waits):
    codex.script(replay("codex-error-high-demand-500.jsonl", 1), CODEX_GOOD)  # (no CODEX_HOME files)
    code, err, events = run_codex(capfd, tmp_path)
    assert code == 0 and len(waits) == 1, err
    assert (ends(events)[0]["cause"], ends(events)[0]["error_kind"]) == ("outage", None)


# --- no value of the fields makes a traceback ---------------------------------------------

HOSTILE = [None, 0, -1, 1e308, 10 ** 400, "", " ", "\x1b]0;owned\x07x", "a\nb", "x" * 200000, [], {},
           {"a": 1}, [1, "two"], True, {"http_connection_failed": None}, {"": {"http_status_code": "503"}},
           {"http_connection_failed": {"http_status_code": 1e308}}]


@pytest.mark.parametrize("value", HOSTILE, ids=range(len(HOSTILE)))
def test_no_value_of_a_claude_kind_field_makes_a_traceback(value):
    cli = rooda.PRESETS["claude"]
    events = []
    for event in ({"type": "assistant", "error": value, "api_error": value, "api_error_status": value,
                   "api_error_type": value, "message": {"content": [{"type": "text", "text": "x"}]}},
                  {"type": "result", "is_error": True, "result": value, "api_error_status": value,
                   "api_error": value, "api_error_type": value, "subtype": value, "errors": value}):
        events += rooda.decode_claude(event)
    [error] = [e for e in events if e[0] == rooda.EV_ERROR][-1:]
    report = rooda.StreamReport(signals=frozenset(), tail=b"", own_text=b"", output_bytes=0, error=error[1:])
    kind, _ = rooda.typed_kind(report, cli)
    assert kind is None or (isinstance(kind, str) and "\n" not in kind and "\x1b" not in kind and len(kind) <= 60)
    rooda.find_provider_trouble(report, 1, False, 0.0, cli)


@pytest.mark.parametrize("value", HOSTILE, ids=range(len(HOSTILE)))
def test_no_value_of_codexs_error_info_makes_a_traceback(tmp_path, value):
    folder = tmp_path / "sessions" / "2026" / "11" / "28"
    folder.mkdir(parents=True)
    (folder / "rollout-x-thread.jsonl").write_text(json.dumps({"payload": {
        "type": "task_complete", "error": {"codex_error_info": value}}}) + "\n" + json.dumps(
        {"payload": {"type": "token_count", "rate_limits": {"primary": {"used_percent": value,
                                                                        "window_minutes": 300}}}}) + "\n")
    windows, kind = rooda.codex_rollout("thread", {"CODEX_HOME": str(tmp_path)})
    assert kind == () or isinstance(kind[0], str)
    report = rooda.StreamReport(signals=frozenset(), tail=b"", own_text=b"", output_bytes=0,
                                error=rooda.error_event("x", kind[1] if kind else None, *kind[:1])[1:])
    rooda.find_provider_trouble(report, 1, False, 0.0, rooda.PRESETS["codex"])


def test_through_the_command_line_a_hostile_kind_is_shown_cleaned(workspace, agent, tmp_path):
    agent.script({"actions": [{"out": events_line({"type": "assistant", "error": "x\x1b]0;owned\x07\nfake",
                                                   "message": {"content": [{"type": "text", "text": "no"}]}},
                                                  {"type": "result", "is_error": True, "result": "no"})}],
                  "exit": 1})
    done = run_rooda("build", "-n", "1", "--ai-cmd", agent.cmd, "--ai-format", "claude", "--log-dir",
                     tmp_path / "logs", cwd=workspace, env=agent.env)
    err = done.stderr.decode()
    assert done.returncode == 0 and "Traceback" not in err and "\x1b]0" not in err, err
    assert "  error (x): no" in err  # (its first line, cleaned: no fake line of its own)
