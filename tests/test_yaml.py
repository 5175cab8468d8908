"""rooda's YAML subset loader: data-driven corpora, config equivalence with JSON, and
property tests (hypothesis) that it returns data or a ConfigError and nothing else."""
import glob
import json
import math
import os
import re
import shutil

import pytest

import rooda
from conftest import ROOT, run_main

HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "yaml")
VALID = sorted(glob.glob(os.path.join(HERE, "valid", "*.yml")))
INVALID = sorted(glob.glob(os.path.join(HERE, "invalid", "*.yml")))


def read(path):
    with open(path, "rb") as stream:
        return stream.read().decode("utf-8-sig")


def test_the_corpora_are_large_enough():
    assert len(VALID) >= 25 and len(INVALID) >= 20


@pytest.mark.parametrize("path", VALID, ids=[os.path.basename(p) for p in VALID])
def test_valid_document_loads_to_its_expected_data(path):
    with open(path[:-4] + ".json") as stream:
        expected = json.load(stream)
    assert rooda.load_yaml(read(path), os.path.basename(path)) == expected


@pytest.mark.parametrize("path", INVALID, ids=[os.path.basename(p) for p in INVALID])
def test_invalid_document_is_refused_with_its_exact_message(path):
    with open(path[:-4] + ".err") as stream:
        expected = stream.read().rstrip("\n")
    with pytest.raises(rooda.ConfigError) as caught:
        rooda.load_yaml(read(path), os.path.basename(path))
    assert caught.value.lines()[0] == expected


def test_nan_is_a_float():
    assert math.isnan(rooda.load_yaml("a: .nan\nb: .NaN\n")["a"])


@pytest.mark.parametrize("name", ["anchor", "tab_indentation", "duplicate_key", "several_documents"])
def test_a_yaml_mistake_in_the_workspace_config_is_path_line_col_line_caret_exit_2(workspace, capfd, name):
    source = os.path.join(HERE, "invalid", name + ".yml")
    shutil.copy(source, str(workspace / "rooda-config.yml"))
    with open(source[:-4] + ".err") as stream:
        expected = stream.read().rstrip("\n").replace(name + ".yml", "rooda-config.yml", 1)
    code, out, err = run_main(capfd, "build", "--dry-run")
    assert code == 2 and out == ""
    lines = err.splitlines()
    assert lines[0] == expected
    line, col = map(int, expected.split(":")[1:3])
    assert lines[1] == "  " + read(source).splitlines()[line - 1]
    assert lines[2] == "  " + " " * (col - 1) + "^"
    assert "Traceback" not in err


def test_json_and_yaml_give_identical_config_data(tmp_path):
    yml = os.path.join(HERE, "valid", "go_rooda_config.yml")
    as_yaml, as_json = tmp_path / "yaml", tmp_path / "json"
    as_yaml.mkdir()
    as_json.mkdir()
    shutil.copy(yml, str(as_yaml / "rooda-config.yml"))
    with open(str(as_json / "rooda-config.json"), "w") as stream:
        json.dump(rooda.load_yaml(read(yml)), stream)
    from_yaml = rooda.load_config(cwd=str(as_yaml), environ={}).data
    from_json = rooda.load_config(cwd=str(as_json), environ={}).data
    assert from_yaml == json.loads(json.dumps(from_json).replace(str(as_json), str(as_yaml)))


def test_the_go_rooda_example_config_loads_and_dry_runs(workspace, capfd):
    shutil.copy(os.path.join(HERE, "valid", "go_rooda_config.yml"), str(workspace / "rooda-config.yml"))
    shutil.copytree(os.path.join(ROOT, "prompts"), str(workspace / "prompts"))
    code, out, err = run_main(capfd, "bootstrap", "--dry-run")
    assert code == 0, err
    assert "[DRY RUN] Would execute with: kiro-cli chat --no-interactive --trust-all-tools" in err
    code, out, err = run_main(capfd, "review-auth", "--dry-run")
    assert code == 0, err
    assert "## ORIENT\nFocus on the authentication module.\nIgnore the rest.\n\n## DECIDE" in out
    assert "Read AGENTS.md at the root" in out  # the builtin: fragment


# --- property tests ------------------------------------------------------------------

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import given, settings, strategies as st  # noqa: E402

# Seeded (derandomize), so a failure reproduces; `make fuzz` raises the counts.
EXAMPLES = int(os.environ.get("ROODA_FUZZ_EXAMPLES") or 0)
PROFILE = settings(max_examples=EXAMPLES or 300, derandomize=True, deadline=None)
FUZZ = settings(max_examples=EXAMPLES or 1500, derandomize=True, deadline=None)


def emit(value, indent=0):
    """A test emitter: block style, strings plain when that is safe, else double-quoted."""
    pad = " " * indent
    if isinstance(value, dict) and value:
        lines = []
        for key, child in value.items():
            head = pad + scalar(key, key=True) + ":"
            if isinstance(child, (dict, list)) and child:
                lines.append(head)
                lines.extend(emit(child, indent + 2))
            else:
                lines.append(head + " " + scalar(child))
        return lines
    if isinstance(value, list) and value:
        lines = []
        for child in value:
            if isinstance(child, (dict, list)) and child:
                lines.append(pad + "-")
                lines.extend(emit(child, indent + 2))
            else:
                lines.append(pad + "- " + scalar(child))
        return lines
    return [pad + scalar(value)]


def scalar(value, key=False):
    if value is None:
        return "null"
    if value is True or value is False:
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return ".inf" if value == math.inf else "-.inf" if value == -math.inf else repr(value)
    if isinstance(value, dict):
        return "{}"
    if isinstance(value, list):
        return "[]"
    if re.fullmatch(r"[A-Za-z][A-Za-z0-9 _./-]*[A-Za-z0-9]", value) and \
            rooda._yaml_plain_value(value) == value:
        return value
    return json.dumps(value, ensure_ascii=False)


text = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\r\n\x85\u2028\u2029"),
               max_size=12)
leaves = st.none() | st.booleans() | st.integers(-10**6, 10**6) | \
    st.floats(allow_nan=False) | text
documents = st.recursive(leaves, lambda children: st.lists(children, max_size=4)
                         | st.dictionaries(text, children, max_size=4), max_leaves=20)


@PROFILE
@given(st.dictionaries(text, documents, min_size=1, max_size=5))
def test_round_trip_of_representable_data(data):
    document = "\n".join(emit(data)) + "\n"
    assert rooda.load_yaml(document) == data


ALPHABET = list(" \t\n-:#'\"[]{},|>&*!%@?~.0123456789abcxyz\\") + ["- ", ": ", "\n  ", "---\n", "\t"]
SEEDS = [read(path) for path in VALID + INVALID]


@st.composite
def mutated(draw):
    document = draw(st.sampled_from(SEEDS))
    for _ in range(draw(st.integers(1, 6))):
        position = draw(st.integers(0, len(document)))
        action = draw(st.sampled_from(["insert", "delete", "replace"]))
        piece = draw(st.sampled_from(ALPHABET))
        end = min(len(document), position + draw(st.integers(1, 8)))
        if action == "insert":
            document = document[:position] + piece + document[position:]
        elif action == "delete":
            document = document[:position] + document[end:]
        else:
            document = document[:position] + piece + document[end:]
    return document


def loads_or_config_error(function, document):
    try:
        function(document)
    except rooda.ConfigError as exc:
        assert exc.lines()[0]  # a message, always
        line = exc.problems[0][1]
        assert line is None or 1 <= line <= document.count("\n") + 2


@FUZZ
@given(mutated())
def test_mutated_yaml_gives_data_or_a_config_error(document):
    loads_or_config_error(lambda d: rooda.parse_config_text(d, "fuzz.yml", True), document)
    loads_or_config_error(rooda.load_yaml, document)


@PROFILE
@given(st.text(max_size=200))
def test_random_text_gives_data_or_a_config_error(document):
    loads_or_config_error(rooda.load_yaml, document)
    loads_or_config_error(lambda d: rooda.parse_config_text(d, "fuzz.json", False), document)


JSON_SEEDS = [json.dumps(rooda.load_yaml(read(path))) for path in VALID if "nan" not in path]


@FUZZ
@given(st.sampled_from(JSON_SEEDS), st.lists(st.tuples(st.integers(0, 400), st.sampled_from(
    list('{}[]:,"\\ 0-.eE\n') + ["true", "null", '"k": 1']), st.integers(0, 3)), max_size=5))
def test_mutated_json_gives_data_or_a_config_error(document, edits):
    for position, piece, cut in edits:
        position = min(position, len(document))
        document = document[:position] + piece + document[position + cut:]
    loads_or_config_error(lambda d: rooda.parse_config_text(d, "fuzz.json", False), document)
