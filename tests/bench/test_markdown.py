"""The one markdown-table writer."""

import pytest

from specjax.bench.markdown import table


def test_table_layout_and_alignment():
    text = table(["method", "tau", "speedup"], [["ngram", "2.25", "1.15x"], ["ar", 1, None]], "lrr")
    assert text.splitlines() == [
        "| method | tau | speedup |",
        "| :--- | ---: | ---: |",
        "| ngram | 2.25 | 1.15x |",
        "| ar | 1 |  |",
    ]
    assert table(["a", "b"], []) == "| a | b |\n| --- | --- |"


def test_cells_cannot_break_the_row():
    assert table(["x"], [["a|b\nc"]]).splitlines()[-1] == "| a\\|b c |"


def test_shape_errors():
    with pytest.raises(ValueError, match="row 0 has 1 cells; the header has 2"):
        table(["a", "b"], [[1]])
    with pytest.raises(ValueError, match="align='lx'"):
        table(["a", "b"], [], "lx")
