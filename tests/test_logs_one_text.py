"""A column with the same text on every row (a clock, a power limit) is converted once,
found by comparing its bytes (values._one_text) rather than by hashing every row; the
arrays must be those per_value's dictionary gives."""
import numpy as np
import pytest

pa = pytest.importorskip("pyarrow")

from gpumon.logs import nvsmi, values  # noqa: E402
from gpumon.logs.arrow import str_array  # noqa: E402


def _both(col, target, monkeypatch):
    got = nvsmi._convert(col, target)
    with monkeypatch.context() as m:
        m.setattr(values, "_one_text", lambda c: None)
        want = nvsmi._convert(col, target)
    return got, want


@pytest.mark.parametrize("text,target", [
    (" 1980 MHz", "clock"), (" 700.00 W", "power_limit"), (" [N/A]", "power"),
    (" 0x0000000000000004", "events"), (" 100 %", "util"), (" 81559 MiB", "mem"),
    (" [Not Supported]", "clock_max"), (" abc", "util"), ("", "util")])
def test_one_text_on_every_row_converts_as_the_dictionary_does(text, target, monkeypatch):
    col = str_array([text] * 500)
    if text:
        assert values._one_text(col) is not None
    got, want = _both(col, target, monkeypatch)
    for a, b in zip(got, want):
        assert a.dtype == b.dtype and a.shape == b.shape
        assert np.array_equal(a, b, equal_nan=True)


def test_columns_that_differ_anywhere_are_hashed():
    assert values._one_text(str_array([" 1980 MHz"] * 99 + [" 1985 MHz"])) is None
    assert values._one_text(str_array([" 1980 MHz", " 345 MHz"])) is None      # widths
    assert values._one_text(pa.array([" 1980 MHz", None])) is None
    two = pa.chunked_array([str_array([" 5 W"]), str_array([" 5 W"])])
    assert values._one_text(two) is None
    one = pa.chunked_array([str_array(["x", " 5 W", " 5 W"]).slice(1)])
    assert values._one_text(one).to_pylist() == [" 5 W"]
