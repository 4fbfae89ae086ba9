"""Clean lines: a log's bytes with every line a reader could choke on taken out and counted.

A line is malformed (skipped, counted, its line number kept) when it is longer than
MAX_LINE_BYTES, holds a NUL byte (the hole logrotate's copytruncate leaves) or is not
UTF-8. Blank lines are dropped silently. Line ends become ``\\n``. What remains is safe for
pyarrow's CSV reader and for plain ``str`` work; ``line_of`` maps a kept line back to its
number in the file.

The checks run over the whole buffer at once (numpy); only lines that hold non-ASCII bytes
are looked at one by one, and a clean log is passed on as it is, without a copy.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import numpy as np

from gpumon.logs.log import Malformed
from gpumon.logs.threads import map_threads

# Longest line a log may hold, in bytes: a gpumon CSV row with a few hundred PIDs is ~4 KiB;
# anything much longer is a corrupt line (or a whole file without line breaks).
MAX_LINE_BYTES = 1 << 16


@dataclass
class Lines:
    data: bytes                             # kept lines, each ending in b"\n"
    lineno: Optional[np.ndarray]            # file line number of each kept line; None: k + 1
    malformed: Malformed
    lines: Optional[int] = None             # how many kept lines, when known

    def count(self) -> int:
        """How many kept lines (header included)."""
        if self.lines is None:
            self.lines = self.data.count(b"\n")
        return self.lines

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


def clean(data: bytes) -> Lines:
    if b"\r" in data:
        data = data.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
    if data and not data.endswith(b"\n"):
        data += b"\n"
    buf = np.frombuffer(data, np.uint8)
    nl, low, high = _scan(buf)
    starts = np.concatenate(([0], nl[:-1] + 1))
    lengths = nl - starts
    bad = lengths > MAX_LINE_BYTES
    if low == 0:
        bad[_lines_at(_where(buf, lambda b: b == 0), nl)] = True
    if high >= 0x80:
        for k in np.unique(_lines_at(_where(buf, lambda b: b >= 0x80), nl)).tolist():
            if not bad[k]:
                try:
                    data[starts[k]:nl[k]].decode("utf-8")
                except UnicodeDecodeError:
                    bad[k] = True
    drop = bad | (lengths == 0)
    mal = Malformed()
    if not drop.any():
        return Lines(data, None, mal, len(nl))
    if bad.any():
        mal.add(int(np.flatnonzero(bad)[0]) + 1, int(bad.sum()))
    keep = ~drop
    mask = np.repeat(keep, lengths + 1)
    return Lines(buf[mask].tobytes(), np.flatnonzero(keep) + 1, mal, int(keep.sum()))


# Bytes compared at once when looking for a byte: the comparison's mask is as large as what it
# reads, so a whole 300 MB log at once would hold another 300 MB.
SCAN_BYTES = 1 << 24


def _where(buf: np.ndarray, test) -> np.ndarray:
    """np.flatnonzero(test(buf)), a slice of SCAN_BYTES at a time."""
    if len(buf) <= SCAN_BYTES:
        return np.flatnonzero(test(buf))
    return np.concatenate([np.flatnonzero(test(buf[a:a + SCAN_BYTES])) + a
                           for a in range(0, len(buf), SCAN_BYTES)])


def _scan(buf: np.ndarray) -> tuple[np.ndarray, int, int]:
    """(positions of the line breaks, lowest byte, highest byte), a slice of SCAN_BYTES at a
    time, the slices side by side on the cores (numpy lets go of the GIL in its loops)."""
    if len(buf) == 0:
        return np.zeros(0, np.intp), 1, 0

    def one(a: int):
        part = buf[a:a + SCAN_BYTES]
        return np.flatnonzero(part == 10) + a, int(part.min()), int(part.max())

    parts = map_threads(one, range(0, len(buf), SCAN_BYTES))
    return (np.concatenate([p[0] for p in parts]), min(p[1] for p in parts),
            max(p[2] for p in parts))


def _lines_at(pos: np.ndarray, nl: np.ndarray) -> np.ndarray:
    """Index of the line that holds each byte position."""
    return np.searchsorted(nl, pos)
