"""rooda.py's budget (SPEC 17, revision 4): tokens, not lines, and no line over 110
characters. Counted by tests/size.py (`make size`), the one counter; compile time is
printed there and never asserted."""
from conftest import ROODA
from size import BUDGET_TOKENS, MAX_COLUMNS, count_tokens, long_lines, parts


def source():
    with open(ROODA, encoding="utf-8") as stream:
        return stream.read()


def test_rooda_holds_at_most_62000_tokens():
    assert BUDGET_TOKENS == 62000
    assert count_tokens(source()) <= BUDGET_TOKENS


def test_no_line_of_rooda_is_over_110_characters():
    assert MAX_COLUMNS == 110
    assert long_lines(source()) == []


def test_the_counter_skips_layout_and_counts_comments_and_docstrings():
    wrapped = 'def f(a,\n      b):\n    """Doc."""\n    return a  # why\n'
    joined = 'def f(a, b):\n    """Doc."""\n    return a  # why\n'
    # def f ( a , b ) : "Doc." return a # why
    assert count_tokens(wrapped) == count_tokens(joined) == 12


def test_the_parts_are_the_whole_file_in_order():
    text = source()
    found = parts(text)
    assert "".join(part for _, _, part in found) == text
    assert found[0][0] == "(before part 1)" and found[1][0].startswith("1. ")
    assert sum(count_tokens(part) for _, _, part in found) == count_tokens(text)
