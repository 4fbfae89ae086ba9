"""Clean lines: a log's bytes with every line a reader could choke on taken out and counted.

A line is malformed (skipped, counted, its line number kept) when it is longer than
MAX_LINE_BYTES, holds a NUL byte (the hole logrotate's copytruncate leaves) or is not
UTF-8. Blank lines are dropped silently. Line ends become ``\\n``. What remains is safe for
the CSV reader (table.py) and for plain ``str`` work; ``line_of`` maps a kept line back to its
number in the file.

The bytes come a chunk at a time (clean_chunks): each chunk's lines are checked at once
(numpy), only lines that hold non-ASCII bytes one by one, and the kept ones appended to one
buffer. Blank lines, a NUL tail (no line break for megabytes: one over-long line, skipped
as it comes) and a gzip bomb of line breaks so cost one chunk's scratch, not their size.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Optional

from gpumon.errors import UserError

import numpy as np

from gpumon.logs.log import Malformed

# Longest line a log may hold, in bytes: a gpumon CSV row with a few hundred PIDs is ~4 KiB;
# anything much longer is a corrupt line (or a whole file without line breaks).
MAX_LINE_BYTES = 1 << 16


@dataclass
class Lines:
    data: bytes                             # kept lines, each ending in b"\n"
    lineno: Optional[np.ndarray]            # file line number of each kept line; None: k + 1
    malformed: Malformed
    lines: Optional[int] = None             # how many kept lines, when known
    ends: Optional[np.ndarray] = None       # where each kept line's break is, when known
    quotes: Optional[bool] = None           # whether a kept line holds a '"', when known

    def count(self) -> int:
        """How many kept lines (header included)."""
        if self.lines is None:
            self.lines = self.data.count(b"\n")
        return self.lines

    def has_quotes(self) -> bool:
        """Whether a kept line holds a double quote (a CSV's quoted cell)."""
        if self.quotes is None:
            self.quotes = b'"' in self.data
        return self.quotes

    def line_of(self, k: np.ndarray) -> np.ndarray:
        """File line numbers (1-based) of kept lines ``k`` (0-based indices)."""
        k = np.asarray(k, dtype=np.int64)
        return k + 1 if self.lineno is None else self.lineno[np.minimum(k, len(self.lineno) - 1)]

    def text_lines(self) -> list[str]:
        return self.data.decode("utf-8").split("\n")[:-1]

    def head(self, n: int) -> list[str]:
        """The first ``n`` kept lines, as text."""
        out, start = [], 0
        while len(out) < n and start < len(self.data):
            end = self.data.find(b"\n", start)
            out.append(self.data[start:end].decode("utf-8"))
            start = end + 1
        return out


# Bytes cleaned at once: a chunk's scratch arrays cost up to ~40 times this (a chunk of
# nothing but line breaks has several 8-byte numbers per byte), whatever the log's size.
CHUNK_BYTES = 1 << 18


def clean(data: bytes) -> Lines:
    """The clean lines of a log's bytes (see the module)."""
    return clean_chunks(memoryview(data)[a:a + CHUNK_BYTES]
                        for a in range(0, len(data), CHUNK_BYTES))


def clean_chunks(chunks: Iterable, limit: Optional[int] = None, name: str = "") -> Lines:
    """The clean lines of a log read in ``chunks`` of bytes, a chunk at a time: blank lines,
    NULs and over-long lines cost what one chunk costs, not what they take in the file.
    ``limit``: the most kept bytes allowed (beyond it, a UserError naming ``name``)."""
    c = _Cleaner(limit, name)
    for chunk in chunks:
        c.feed(chunk)
    return c.finish()


# The UTF-8 byte order mark some editors and Windows tools write before the first line.
BOM = b"\xef\xbb\xbf"

class _Cleaner:
    """clean_chunks' state between chunks: the kept bytes, the line a chunk starts at, the
    unfinished line carried to the next chunk (or skipped, once over MAX_LINE_BYTES)."""

    def __init__(self, limit: Optional[int], name: str):
        self.out = bytearray()              # the kept lines (grown in place, not copied)
        self.limit, self.name = limit, name
        self.line = 0                       # file lines before the next chunk's first
        self.carry = b""                    # the last line so far, not yet ended
        self.skip: Optional[int] = None     # the over-long line being skipped, its number
        self.after_cr = False               # the last chunk ended in a \r
        self.lnos: list = []                # kept lines' numbers: arrays, or (first, n)
        self.ends: list = []                # kept lines' breaks (Lines.ends), per chunk
        self.quotes = False                 # a kept line holds a '"' (Lines.quotes)
        self.gaps = False                   # a line was dropped (lnos are not 1, 2, 3...)
        self.kept = 0
        self.read = 0                       # bytes fed
        self.mal = Malformed()

    def feed(self, chunk) -> None:
        if not self.read and chunk[:3] == BOM:    # (a UTF-8 byte order mark: no header text)
            self.read, chunk = 3, chunk[3:]
        for a in range(0, len(chunk), CHUNK_BYTES):
            self._feed(bytes(chunk[a:a + CHUNK_BYTES]))

    def _feed(self, chunk: bytes) -> None:
        self.read += len(chunk)
        if self.after_cr and chunk[:1] == b"\n":
            chunk = chunk[1:]               # (\r\n across two chunks: one line end)
        self.after_cr = False
        if not chunk:
            return
        self.after_cr = chunk.endswith(b"\r")
        if b"\r" in chunk:
            chunk = chunk.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        if self.skip is not None:
            end = chunk.find(b"\n")
            if end < 0:
                return
            self._drop_long()
            chunk = chunk[end + 1:]
        end = chunk.rfind(b"\n") + 1
        if end:
            self._whole(chunk, end)
            self.carry = chunk[end:]
        else:
            self.carry += chunk
        if len(self.carry) > MAX_LINE_BYTES:        # a line too long to keep: skip the rest
            self.skip, self.carry = self.line + 1, b""

    def _whole(self, chunk: bytes, end: int) -> None:
        """The lines of ``chunk`` up to ``end`` (just past a line break), the line carried
        from the chunks before first (the rest read in place, not copied)."""
        a = 0
        if self.carry:
            a = chunk.find(b"\n") + 1
            self._lines(self.carry + chunk[:a])
        if a < end:
            self._lines(memoryview(chunk)[a:end])

    def _drop_long(self) -> None:
        """The skipped line has ended: it is malformed, and the lines after it count on."""
        self.mal.add(self.skip)
        self.gaps = True
        self.line = self.skip
        self.skip = None

    def _lines(self, body) -> None:
        """Whole lines (each ending in a line break; bytes or a memoryview): the clean ones
        kept."""
        buf = np.frombuffer(body, np.uint8)
        if buf[0] == 10 and (buf == 10).all():    # nothing but blank lines (padding)
            self.line += len(buf)
            self.gaps = True
            return
        nl = np.flatnonzero(buf == 10)
        n = len(nl)
        starts = np.concatenate(([0], nl[:-1] + 1))
        lengths = nl - starts
        bad = lengths > MAX_LINE_BYTES
        if buf.view(np.int8).min() <= 0:      # a NUL, or a byte of 0x80 or more
            _bad_bytes(body, buf, starts, nl, bad)
        drop = bad | (lengths == 0)
        if not drop.any():
            self._keep(body, (self.line + 1, n), n, nl)
        else:
            if bad.any():
                self.mal.add(self.line + int(np.flatnonzero(bad)[0]) + 1, int(bad.sum()))
            keep = ~drop
            self.gaps = True
            self._keep(buf[np.repeat(keep, lengths + 1)].tobytes(),
                       self.line + np.flatnonzero(keep) + 1, int(keep.sum()),
                       np.cumsum(lengths[keep] + 1) - 1)
        self.line += n

    def _keep(self, data: bytes, lnos, n: int, ends: np.ndarray) -> None:
        """Keep ``data``: ``n`` lines, their numbers ``lnos``, their breaks at ``ends``
        (what the lines take counts those too: 8 bytes a line)."""
        w = len(self.out) + len(data) + 8 * (self.kept + n)
        if self.limit is not None and w > self.limit:
            raise UserError(f"{self.name}: stopped after reading {size_text(self.read)}: "
                            f"its {size_text(w)} of lines are more than the memory free here "
                            "allows analysing at once (split the log, or analyse a part of it)")
        at = len(self.out)
        self.ends.append(ends + at)
        self.out += data
        self.quotes = self.quotes or self.out.find(b'"', at) >= 0
        self.lnos.append(lnos)
        self.kept += n

    def finish(self) -> Lines:
        if self.skip is not None:
            self.mal.add(self.skip)
            self.gaps = True
        elif self.carry:                    # a last line without its line break
            self.after_cr = False
            carry, self.carry = self.carry, b""
            self._lines(carry + b"\n")
        lineno = None
        if self.gaps and self.lnos:
            lineno = np.concatenate([np.arange(a[0], a[0] + a[1]) if isinstance(a, tuple)
                                     else a for a in self.lnos]).astype(np.int64)
        elif self.gaps:
            lineno = np.zeros(0, np.int64)
        ends = np.concatenate(self.ends) if self.ends else np.zeros(0, np.int64)
        return Lines(self.out, lineno, self.mal, self.kept, ends, self.quotes)


def size_text(n: int) -> str:
    """A number of bytes, as MiB or GiB."""
    return f"{n / 2**30:.1f} GiB" if n >= 2**30 else f"{n / 2**20:.0f} MiB"


def _bad_bytes(body: bytes, buf: np.ndarray, starts: np.ndarray, nl: np.ndarray,
               bad: np.ndarray) -> None:
    """Mark in ``bad`` the lines (breaks at ``nl``) that hold a NUL or are not UTF-8."""
    bad[_lines_at(np.flatnonzero(buf == 0), nl)] = True
    for k in np.unique(_lines_at(np.flatnonzero(buf >= 0x80), nl)).tolist():
        if not bad[k]:
            try:
                bytes(body[starts[k]:nl[k]]).decode("utf-8")
            except UnicodeDecodeError:
                bad[k] = True


def _lines_at(pos: np.ndarray, nl: np.ndarray) -> np.ndarray:
    """Index of the line that holds each byte position."""
    return np.searchsorted(nl, pos)


def cut_cells(lines: Lines) -> tuple[Lines, int]:
    """(lines, rows cut): each row with a quoted cell that holds a line break (``"76.14``
    newline ``0"``: a script's cell holding a second GPU's value) made one line, the cell
    cut at its first line break. A quote never closed within table.MAX_QUOTED_LINES lines
    is left as it is (the reader counts that line malformed)."""
    if not lines.has_quotes():
        return lines, 0
    buf = np.frombuffer(lines.data, np.uint8)
    nl = np.flatnonzero(buf == 10)
    odd = np.flatnonzero(np.bincount(_lines_at(np.flatnonzero(buf == 34), nl),
                                     minlength=len(nl)) % 2)
    if not len(odd):
        return lines, 0
    text = lines.data.decode("utf-8").split("\n")[:-1]
    joined = _join_cut(text, odd.tolist())
    if not joined:
        return lines, 0
    keep = np.ones(len(text), bool)
    for k, span, line in joined:
        text[k] = line
        keep[k + 1:k + span] = False
    kept = np.flatnonzero(keep)
    data = ("\n".join(text[k] for k in kept.tolist()) + "\n").encode()
    return Lines(data, lines.line_of(kept), lines.malformed, len(kept)), len(joined)


def _join_cut(text: list[str], odd: list[int]) -> list[tuple[int, int, str]]:
    """(line, lines spanned, the row as one line) of each row starting at one of the lines
    ``odd`` (an odd count of quotes) whose quote closes on a later line."""
    import csv
    import io
    from gpumon.logs.table import MAX_QUOTED_LINES
    out, skip_to = [], 0
    for k in odd:
        if k < skip_to:
            continue
        line, span = text[k], 1
        while line.count('"') % 2 and span < MAX_QUOTED_LINES and k + span < len(text):
            line += "\n" + text[k + span]
            span += 1
        try:
            rows = list(csv.reader(io.StringIO(line, newline="")))
        except csv.Error:
            continue
        if line.count('"') % 2 or len(rows) != 1:
            continue
        cells = [c.split("\n", 1)[0].strip() if "\n" in c else c for c in rows[0]]
        w = io.StringIO()
        csv.writer(w, lineterminator="").writerow(cells)
        out.append((k, span, w.getvalue()))
        skip_to = k + span
    return out
