"""A column with the same text on every row (a clock, a power limit) is converted once,
found by comparing its bytes (Cells.one_text); the arrays must be those every row read gives."""
import numpy as np
import pytest

from gpumon.logs import nvsmi, values
from gpumon.logs.table import Cells


def _both(texts, target, monkeypatch):
    fn = nvsmi.READ.get(target, values.num)
    got = fn(Cells.of(texts))
    with monkeypatch.context() as m:
        m.setattr(Cells, "one_text", lambda self: None)
        want = fn(Cells.of(texts))
    return got, want


@pytest.mark.parametrize("text,target", [
    (" 1980 MHz", "clock"), (" 700.00 W", "power_limit"), (" [N/A]", "power"),
    (" 0x0000000000000004", "events"), (" 100 %", "util"), (" 81559 MiB", "mem"),
    (" [Not Supported]", "clock_max"), (" abc", "util"), ("", "util")])
def test_one_text_on_every_row_converts_as_every_row_does(text, target, monkeypatch):
    texts = [text] * 500
    assert Cells.of(texts).one_text() is not None
    got, want = _both(texts, target, monkeypatch)
    for a, b in zip(got, want):
        assert a.dtype == b.dtype and a.shape == b.shape
        assert np.array_equal(a, b, equal_nan=True)


def test_columns_that_differ_anywhere_are_read_row_by_row():
    assert Cells.of([" 1980 MHz"] * 99 + [" 1985 MHz"]).one_text() is None
    assert Cells.of([" 1980 MHz", " 345 MHz"]).one_text() is None      # widths
    assert Cells.of(["x" * 40] * 3).one_text() is None                 # too wide to compare
    assert Cells.of(["5 W", " 5 W "]).one_text().texts() == ["5 W"]
