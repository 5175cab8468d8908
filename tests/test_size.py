"""rooda.py's budget (SPEC 17, revisions 4 and 5): tokens without comments, not lines; no
line over 110 characters; no conditional expression nested in another. Counted by
tests/size.py (`make size`), the one counter; compile time is printed there and never
asserted."""
import pytest

from conftest import ROODA
from size import BUDGET_TOKENS, MAX_COLUMNS, count_tokens, long_lines, parts


def source():
    with open(ROODA, encoding="utf-8") as stream:
        return stream.read()


@pytest.mark.xfail(strict=True, reason="revision 6 lands at 83,927 tokens, over SPEC 17's 78,000 after its"
                   " consolidation (the closing note of issues 42-46, `make size`): the budget is to be"
                   " reconsidered")
def test_rooda_holds_at_most_78000_tokens():
    # SPEC 17 rev 6's number, and only SPEC 17 moves it (never raised to fit a change).
    assert BUDGET_TOKENS == 78000
    assert count_tokens(source()) <= BUDGET_TOKENS


def test_no_line_of_rooda_is_over_110_characters():
    assert MAX_COLUMNS == 110
    assert long_lines(source()) == []


def test_the_counter_skips_layout_and_comments_and_counts_docstrings():
    wrapped = 'def f(a,\n      b):\n    """Doc."""\n    return a  # why\n'
    joined = 'def f(a, b):\n    """Doc."""\n    # a comment costs nothing to compile\n    return a\n'
    # def f ( a , b ) : "Doc." return a
    assert count_tokens(wrapped) == count_tokens(joined) == 11


def test_the_parts_are_the_whole_file_in_order():
    text = source()
    found = parts(text)
    assert "".join(part for _, _, part in found) == text
    assert found[0][0] == "(before part 1)" and found[1][0].startswith("1. ")
    assert sum(count_tokens(part) for _, _, part in found) == count_tokens(text)


def nested_conditionals(source):
    """The lines of the conditional expressions that hold another one (density is no
    saving: SPEC 17 rev 5)."""
    import ast
    return [node.lineno for node in ast.walk(ast.parse(source)) if isinstance(node, ast.IfExp)
            and any(isinstance(inner, ast.IfExp) for inner in ast.walk(node) if inner is not node)]


def test_no_conditional_expression_is_nested_in_another():
    assert nested_conditionals("x = a if b else c if d else e\n") == [1]
    assert nested_conditionals("x = (a if b else c) + f(d if e else g)\n") == []
    assert nested_conditionals(source()) == []


def disguised_conditionals(source):
    """The lines of conditionals written as arithmetic or indexing (SPEC 17 rev 6: plain
    statements): `text * bool(x)`, `text * (a > b)`, `text * (not x)`, `(a, b)[flag]`,
    `("quiet", "normal", "verbose")[level]`, `{True: "pass", False: "fail"}[passed]`."""
    import ast
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult):
            for side in (node.left, node.right):
                truth = isinstance(side, (ast.Compare, ast.BoolOp)) or (
                    isinstance(side, ast.UnaryOp) and isinstance(side.op, ast.Not)) or (
                    isinstance(side, ast.Call) and getattr(side.func, "id", "") == "bool")
                if truth:
                    found.append(node.lineno)
        chosen = isinstance(node, ast.Subscript) and not isinstance(node.slice, (ast.Slice, ast.Constant))
        if chosen and isinstance(node.value, ast.Tuple):  # (a literal tuple picked from by a value)
            found.append(node.lineno)
        if chosen and isinstance(node.value, ast.Dict) and any(  # (a dict keyed by truth values)
                isinstance(key, ast.Constant) and (key.value is None or isinstance(key.value, bool))
                for key in node.value.keys):
            found.append(node.lineno)
    return sorted(set(found))


def test_no_conditional_is_disguised_as_arithmetic_or_indexing():
    assert disguised_conditionals('x = ", %d skipped" % n * bool(n)\ny = ("a", "b")[flag]\n') == [1, 2]
    assert disguised_conditionals('x = "s" * (n > 1)\ny = "-" * 80\nz = (a, b)[0:1]\n') == [1]
    assert disguised_conditionals('x = ("q", "n", "v")[level]\ny = {None: 0, True: 1}[ok]\nz = {"s": 1}[u]\n') \
        == [1, 2]
    assert disguised_conditionals(source()) == []


def later_names(source, allowed=(("command_resume", "dispatch"),)):
    """(definition, name) where a top-level function's or class's body (its annotations
    left out) uses a module-level name defined below it (the docstring's promise)."""
    import ast
    tree, defined = ast.parse(source), {}
    for node in tree.body:
        targets = [node] if isinstance(node, (ast.FunctionDef, ast.ClassDef)) else \
            [name for target in getattr(node, "targets", [getattr(node, "target", None)]) if target is not None
             for name in ast.walk(target) if isinstance(name, ast.Name)]
        for target in targets:
            defined.setdefault(getattr(target, "name", None) or target.id, node.lineno)
    found = set()
    for node in tree.body:
        if not isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            continue
        annotations = set()
        for inner in ast.walk(node):
            for part in [getattr(inner, "returns", None), getattr(inner, "annotation", None)]:
                annotations.update(map(id, ast.walk(part)) if part is not None else ())
        for name in ast.walk(node):
            if isinstance(name, ast.Name) and isinstance(name.ctx, ast.Load) and id(name) not in annotations \
                    and defined.get(name.id, 0) > node.lineno:
                found.add((node.name, name.id))
    return sorted(found - set(allowed))


def test_a_body_uses_only_names_defined_above_it_but_the_one_cycle():
    assert later_names("def f():\n    return g()\n\ndef g():\n    return 1\n") == [("f", "g")]
    assert later_names("def f(x: 'G') -> 'G':\n    return x\n\nclass G:\n    pass\n") == []
    assert later_names(source()) == []


def definitions(source):
    """(lines, name, whether a class) of every function and class, nested ones included."""
    import ast
    return [(node.end_lineno - node.lineno + 1, node.name, isinstance(node, ast.ClassDef))
            for node in ast.walk(ast.parse(source)) if isinstance(node, (ast.FunctionDef, ast.ClassDef))]


def test_no_function_over_100_lines_and_no_class_over_250_but_the_loops_and_the_parser():
    # STYLE: functions a reader can hold; SPEC 17 rev 6: the gate runner no second loop class.
    found = definitions(source())
    assert [name for lines, name, is_class in found if lines > 100 and not is_class] == []
    assert [name for lines, name, is_class in found if lines > 250 and is_class
            and name not in ("_Run", "YamlSubsetParser")] == []


def test_keep_is_never_compared_to_a_word():
    # keep: better has one owner (SPEC 17 rev 6): the loop asks it, never `plan.keep == "better"`.
    import ast
    compared = [node.lineno for node in ast.walk(ast.parse(source())) if isinstance(node, ast.Compare)
                and any(isinstance(side, ast.Constant) and side.value == "better"
                        for side in [node.left] + node.comparators)]
    assert compared == []
