"""A CSV log's text to columns: the one interface between a log's clean lines and its
reader. Everything after it is numpy (values.py).

``read_cells`` cuts the rows after the header into cells a block of lines at a time and
hands each block's wanted columns (``Cells``: byte ranges of the text, trimmed of
whitespace) to the reader's ``convert``, the blocks side by side on the cores (numpy lets
go of the GIL). A row as wide as the header is read; a row of another width is malformed
(counted); a repeated header line and a blank row are dropped. The commas and line breaks of
a block are found at once; only a line that holds a quote is cut by the csv module (a quoted
cell may run over up to MAX_QUOTED_LINES lines, see ``exact``).
"""
from __future__ import annotations

import csv
import io
from typing import Callable, Optional, Sequence

import numpy as np

from gpumon.logs.batches import Columns
from gpumon.logs.lines import Lines
from gpumon.logs.threads import imap_threads

# A quoted cell may run over at most this many lines before its line is malformed.
MAX_QUOTED_LINES = 8
# Bytes of text cut into cells at once: per-block costs (a numpy call per column) vanish,
# and a block's scratch arrays stay a few tens of MB.
BLOCK_BYTES = 4 << 20
# Whitespace trimmed from both ends of a cell (what str.strip() takes, in ASCII).
_SPACE = np.zeros(256, bool)
_SPACE[[9, 11, 12, 13, 32]] = True
# Widest text Cells.one_text compares as bytes (a clock-event mask is 18).
ONE_TEXT_WIDTH = 32
# Cells one_text compares first: a column of many texts differs within them.
ONE_TEXT_PROBE = 64


def header(lines: Lines) -> list[str]:
    """The first line's column names, stripped; a repeated name gets ``#2``, ``#3``..."""
    first = lines.head(1)
    names = [c.strip() for c in next(csv.reader([first[0]]), [])] if first else []
    seen: dict[str, int] = {}
    out = []
    for n in names:
        seen[n] = seen.get(n, 0) + 1
        out.append(n if seen[n] == 1 else f"{n}#{seen[n]}")
    return out


class Cells:
    """One column of text cells: cell ``i`` is ``buf[start[i]:start[i] + length[i]]``, UTF-8,
    trimmed of whitespace."""

    def __init__(self, buf: np.ndarray, start: np.ndarray, length: np.ndarray):
        self.buf, self.start, self.length = buf, start, length

    @staticmethod
    def of(texts: Sequence[str]) -> "Cells":
        """Cells of Python strings (trimmed as the cutter trims them)."""
        data = [t.strip(" \t\v\f\r").encode("utf-8") for t in texts]
        length = np.array([len(d) for d in data], np.int64)
        return Cells(np.frombuffer(b"".join(data) or b"\0", np.uint8),
                     np.cumsum(length) - length, length)

    def __len__(self) -> int:
        return len(self.start)

    def take(self, rows: np.ndarray) -> "Cells":
        return Cells(self.buf, self.start[rows], self.length[rows])

    def chars(self, width: int) -> np.ndarray:
        """(width, rows) bytes: row ``k`` the ``k``-th byte of every cell, 0 past its end."""
        m = self.places(width)
        np.copyto(m, 0, where=np.arange(width)[:, None] >= self.length)
        return m

    def places(self, width: int) -> np.ndarray:
        """(width, rows) bytes: row ``k`` the byte ``k`` places from each cell's start, inside
        the cell or not (bytes outside ``buf`` read as its first or last)."""
        out = np.empty((width, len(self)), np.uint8)
        if len(self.buf):
            for k in range(width):
                np.take(self.buf, self.start + k, out=out[k], mode="clip")
        return out

    def texts(self) -> list[str]:
        if len(self) * 64 < len(self.buf):          # (a few cells of a large buffer)
            return [self.buf[a:a + n].tobytes().decode("utf-8")
                    for a, n in zip(self.start.tolist(), self.length.tolist())]
        data = self.buf.tobytes()
        return [data[a:a + n].decode("utf-8")
                for a, n in zip(self.start.tolist(), self.length.tolist())]

    def distinct(self) -> tuple[list[str], np.ndarray]:
        """(the distinct texts, each cell's index among them), in order of first appearance."""
        one = self.one_text()
        if one is not None:
            return one.texts(), np.zeros(len(self), np.int64)
        index: dict[str, int] = {}
        codes = np.array([index.setdefault(t, len(index)) for t in self.texts()], np.int64)
        return list(index), codes

    def one_text(self) -> Optional["Cells"]:
        """The first cell alone, when every cell holds the same text (compared as bytes, at
        most ONE_TEXT_WIDTH wide, the first rows first); else None."""
        n = len(self)
        if n < 2 or not int(self.length[0]) <= ONE_TEXT_WIDTH:
            return None
        for part in (self.take(np.arange(min(n, ONE_TEXT_PROBE))), self):
            if not (part.length == part.length[0]).all():
                return None
            m = part.places(int(part.length[0]))
            if not (m == m[:, :1]).all():
                return None
        return self.take(np.zeros(1, np.int64))


class Rows:
    """Where the rows came from: row ``i`` is kept line ``kept[i]`` of ``lines`` (line 0 is
    the header)."""

    def __init__(self, lines: Lines, kept: np.ndarray):
        self.lines, self.kept = lines, kept
        self.malformed = lines.malformed

    def line_of(self, rows: np.ndarray) -> np.ndarray:
        return self.lines.line_of(self.kept[np.asarray(rows, dtype=np.int64)])


def read_cells(lines: Lines, names: list[str], want: list[str],
               convert: Callable) -> tuple[Columns, Rows]:
    """(columns, rows): ``convert({name: Cells})`` -> {name: array} for each block of rows
    (the ``want`` columns), its arrays written end to end into ``columns``."""
    first = lines.head(1)[0] if lines.count() else ""
    if lines.has_quotes():
        lines = exact(lines, names, first)
    cut = _Cutter(lines, names, first, [names.index(w) for w in want])
    cols = Columns(lines.count())
    kept, base = [], 1
    blocks = cut.blocks()

    def one(block):
        got = cut.cells(*block)
        return got, (convert(dict(zip(want, got.cells))) if len(got.rows) else {})

    for got, out in imap_threads(one, blocks):
        if got.bad_rows:
            lines.malformed.add(int(lines.line_of([base + got.bad_first])[0]), got.bad_rows)
        cols.put(out, len(got.rows))
        kept.append(got.rows + base)
        base += got.lines
    return cols, Rows(lines, np.concatenate(kept) if kept else np.zeros(0, np.int64))


class _Block:
    """One block cut: the wanted cells of its kept rows, their line indices within the
    block (``rows``), how many lines it holds, its malformed rows (how many, the first)."""

    def __init__(self, cells: list, rows: np.ndarray, lines: int, bad: np.ndarray):
        self.cells, self.rows, self.lines = cells, rows, lines
        self.bad_rows = int(bad.sum())
        self.bad_first = int(np.argmax(bad)) if self.bad_rows else 0


class _Cutter:
    """The text of ``lines`` after the header cut into rows, and the cells of columns
    ``cols`` of each row as wide as the header."""

    def __init__(self, lines: Lines, names: list[str], first: str, cols: list[int]):
        self.data = lines.data
        self.buf = np.frombuffer(self.data, np.uint8)
        self.ends = lines.ends
        self.quotes = lines.has_quotes()
        self.width, self.cols = len(names), cols
        self.first = first.encode()
        self.start = len(self.first) + 1 if lines.count() else 0
        self.again = self.data.find(b"\n" + self.first + b"\n") >= 0

    def blocks(self) -> list[tuple[int, int]]:
        out, a, n = [], self.start, len(self.data)
        while a < n:
            b = self.data.find(b"\n", min(a + BLOCK_BYTES, n) - 1) + 1 or n
            out.append((a, b))
            a = b
        return out

    def cells(self, a: int, b: int) -> _Block:
        part = self.buf[a:b]
        nl = self._breaks(part, a, b)
        commas = np.flatnonzero(part == 44)
        starts = np.concatenate(([0], nl[:-1] + 1))
        before = np.searchsorted(commas, nl)
        per = np.diff(np.concatenate(([0], before)))
        fast = per == self.width - 1
        quoted = np.zeros(len(nl), bool)
        if self.quotes and self.data.find(b'"', a, b) >= 0:
            q = np.flatnonzero(part == 34)
            quoted = np.searchsorted(q, starts) < np.searchsorted(q, nl)
            fast &= ~quoted
        if self.again:
            fast &= ~self._headers(part, starts, nl)
        bad = ~fast & ~quoted
        for r in np.flatnonzero(bad).tolist():       # other widths: blank, or malformed
            bad[r] = not _blank(part[starts[r]:nl[r]].tobytes(), self.first)
        cells, rows = self._cut(part, starts, nl, commas, before - per, fast, quoted)
        return _Block(cells, rows, len(nl), bad)

    def _breaks(self, part: np.ndarray, a: int, b: int) -> np.ndarray:
        """Where the line breaks of the block (bytes ``a`` to ``b``) are, within it."""
        if self.ends is None:
            return np.flatnonzero(part == 10)
        i, j = np.searchsorted(self.ends, (a, b))
        return self.ends[i:j] - a

    def _headers(self, part, starts, nl) -> np.ndarray:
        """Rows that repeat the header line."""
        same = np.flatnonzero((nl - starts) == len(self.first))
        out = np.zeros(len(nl), bool)
        for r in same.tolist():
            out[r] = part[starts[r]:nl[r]].tobytes() == self.first
        return out

    def _cut(self, part, starts, nl, commas, k0, fast, quoted):
        """(cells of each wanted column, kept rows): the rows in ``fast`` cut at their
        commas, the ``quoted`` ones by the csv module; blank rows dropped."""
        rows = np.flatnonzero(fast | quoted)
        fr = np.flatnonzero(fast[rows])
        qr = np.flatnonzero(quoted[rows])
        buf, extra = part, None
        if len(qr):
            extra = _quoted_cells(part, starts[rows[qr]], nl[rows[qr]], self.cols)
            buf = np.concatenate([part, extra[0], np.array([10], np.uint8)])
        out = []
        f = rows[fr]
        every = len(f) == len(nl)           # (every row cut at its commas: they line up)
        at = commas.reshape(len(nl), self.width - 1) if every else None
        for c in self.cols:
            s = np.empty(len(rows), np.int64)
            e = np.empty(len(rows), np.int64)
            if every:
                s[:] = starts if c == 0 else at[:, c - 1] + 1
                e[:] = nl if c == self.width - 1 else at[:, c]
            else:
                s[fr] = starts[f] if c == 0 else commas[k0[f] + c - 1] + 1
                e[fr] = nl[f] if c == self.width - 1 else commas[k0[f] + c]
            if extra is not None:
                s[qr], e[qr] = extra[1][c] + len(part), extra[2][c] + len(part)
            s, e = _trim(buf, s, e)
            out.append(Cells(buf, s, e - s))
        return _not_blank(out, rows, part, starts, nl)


def _not_blank(out: list, rows: np.ndarray, part, starts, nl):
    """(cells, rows) without the rows whose every cell is blank (checked whole where the
    wanted cells are all empty)."""
    if not out or not len(rows):
        return out, rows
    empty = np.logical_and.reduce([c.length == 0 for c in out])
    if not empty.any():
        return out, rows
    for r in np.flatnonzero(empty).tolist():
        k = rows[r]
        empty[r] = _blank(part[starts[k]:nl[k]].tobytes(), None)
    keep = np.flatnonzero(~empty)
    return [c.take(keep) for c in out], rows[keep]


def _blank(line: bytes, header: Optional[bytes]) -> bool:
    """Whether a line is a row of nothing but blank cells, or the header again."""
    return (not line.replace(b",", b"").strip()
            or (header is not None and line.strip() == header.strip()))


def _trim(buf: np.ndarray, s: np.ndarray, e: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Cell bounds moved past whitespace at both ends (``buf`` ends in a byte that is none:
    a cell's end is a comma or a line break)."""
    m = _SPACE[buf[s]]
    s += m
    if m.any():               # (a space after each comma: the next byte of every cell)
        m = _SPACE[buf[s]]
        s += m
        at = np.flatnonzero(m)
        while len(at):
            at = at[_SPACE[buf[s[at]]]]
            s[at] += 1
    m = _SPACE[buf[e - 1]]
    m &= e > s
    if m.any():
        e -= m
        at = np.flatnonzero(m)
        while len(at):
            at = at[_SPACE[buf[e[at] - 1]] & (e[at] > s[at])]
            e[at] -= 1
    return s, e


def _quoted_cells(part, starts, ends, cols):
    """(bytes, starts by column, ends by column) of the wanted cells of quoted rows, cut by
    the csv module; positions relative to the returned bytes."""
    data = bytearray()
    s = {c: np.empty(len(starts), np.int64) for c in cols}
    e = {c: np.empty(len(starts), np.int64) for c in cols}
    for i, (a, b) in enumerate(zip(starts.tolist(), ends.tolist())):
        row = next(csv.reader([part[a:b].tobytes().decode("utf-8")]))
        for c in cols:
            s[c][i] = len(data)
            data += row[c].encode("utf-8")
            e[c][i] = len(data)
    return np.frombuffer(bytes(data), np.uint8), s, e


def exact(body: Lines, names: list[str], header_line: str) -> Lines:
    """The header and the rows of ``body`` after it that are as wide as the header, checked
    one by one (see the module)."""
    text = body.text_lines()
    width, out, kept = len(names), [text[0]], [0]
    k = 1
    while k < len(text):
        line, span = text[k], 1
        if '"' in line:
            while line.count('"') % 2 and span < MAX_QUOTED_LINES and k + span < len(text):
                line += "\n" + text[k + span]
                span += 1
            if line.count('"') % 2:               # never closed: this line alone is bad
                line, span = text[k], 1
        cells = _cells(line)
        if line.strip() == header_line.strip() or (cells is not None and
                                                   not any(c.strip() for c in cells)):
            pass                                  # a repeated header, a blank row
        elif cells is None or len(cells) != width or any("\n" in c for c in cells):
            body.malformed.add(int(body.line_of([k])[0]))
        else:
            out.append(line if '"' not in line else _quoted(cells))
            kept.append(k)
        k += span
    data = ("\n".join(out) + "\n").encode()
    return Lines(data, body.line_of(np.array(kept, dtype=np.int64)), body.malformed)


def _cells(line: str) -> Optional[list[str]]:
    if '"' not in line:
        return line.split(",")
    try:
        rows = list(csv.reader(io.StringIO(line, newline="")))
    except csv.Error:
        return None
    return rows[0] if len(rows) == 1 else None


def _quoted(cells: list[str]) -> str:
    out = io.StringIO()
    csv.writer(out, lineterminator="").writerow(cells)
    return out.getvalue()
