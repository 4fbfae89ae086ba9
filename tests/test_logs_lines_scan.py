"""clean() counts the lines it keeps (Lines.count: the readers size their columns from it)
and notes where their breaks are (Lines.ends: the CSV reader cuts rows there) and whether
one holds a quote (Lines.quotes) as it finds them, rather than the readers looking again."""
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
    "quoted": b'a,b\n1,"2"\n',
    "quote dropped": b'a,b\n1,"\x00"\n3,4\n',
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_kept_lines_are_counted_as_they_are_found(name):
    got = L.clean(CASES[name])
    assert got.lines is not None
    assert got.count() == got.data.count(b"\n")


def test_lines_made_elsewhere_are_counted_when_asked():
    lines = L.Lines(b"a\nb\nc\n", None, L.Malformed())
    assert lines.lines is None and lines.count() == 3


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_kept_lines_breaks_and_quotes_are_noted_as_the_text_has_them(name):
    got = L.clean(CASES[name])
    assert np.array_equal(got.ends, np.flatnonzero(np.frombuffer(got.data, np.uint8) == 10))
    assert got.quotes is (b'"' in got.data)
