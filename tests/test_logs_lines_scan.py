"""clean() counts the lines it keeps (Lines.count: the readers size their columns from it)
as it finds them, rather than the readers counting the line breaks again; it finds them a
slice at a time, the slices side by side."""
import numpy as np
import pytest

from gpumon.logs import lines as L


def _line(n: int) -> bytes:
    return b"x" * n + b"\n"


CASES = {
    "plain": b"a,b\n1,2\n3,4\n",
    "no final break": b"a,b\n1,2\n3,4",
    "blank line": b"a,b\n1,2\n\n3,4\n",
    "blank first": b"\na,b\n1,2\n",
    "crlf": b"a,b\r\n1,2\r\n",
    "nul": b"a,b\n1,\x002\n3,4\n",
    "utf8": "a,b\n1,\u00e9\n".encode(),
    "not utf8": b"a,b\n1,\xff\n3,4\n",
    "too long": b"a\n" + _line(L.MAX_LINE_BYTES + 1) + b"1\n",
    "empty": b"",
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_kept_lines_are_counted_as_they_are_found(name):
    got = L.clean(CASES[name])
    assert got.lines is not None
    assert got.count() == got.data.count(b"\n")


def test_lines_made_elsewhere_are_counted_when_asked():
    lines = L.Lines(b"a\nb\nc\n", None, L.Malformed())
    assert lines.lines is None and lines.count() == 3


@pytest.mark.parametrize("size", [1, 7, 64, 1000])
def test_scanning_slices_side_by_side_matches_one_pass(size, monkeypatch):
    rng = np.random.default_rng(size)
    data = rng.choice(np.frombuffer(b"ab,1\n\n\x00\xff", np.uint8), 5000).tobytes()
    monkeypatch.setattr(L, "SCAN_BYTES", size)
    buf = np.frombuffer(data, np.uint8)
    nl, low, high = L._scan(buf)
    assert np.array_equal(nl, np.flatnonzero(buf == 10))
    assert (low, high) == (int(buf.min()), int(buf.max()))
    monkeypatch.setattr(L, "SCAN_BYTES", 1 << 24)
    whole = L.clean(data)
    monkeypatch.setattr(L, "SCAN_BYTES", size)
    parts = L.clean(data)
    assert parts.data == whole.data and np.array_equal(parts.lineno, whole.lineno)
    assert parts.malformed.count == whole.malformed.count > 0
