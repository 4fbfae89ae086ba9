"""A CSV log's rows as an Arrow table, every row as wide as the header.

pyarrow reads the clean lines (multi-threaded, only the columns asked for). When it meets a
row of the wrong width, or the file holds quotes, the rows are first checked one by one
(``exact``): rows of the wrong width and quoted cells that hold line breaks are malformed,
repeated header lines (two logs in one file) and blank rows are dropped; then pyarrow reads
what is left. Row ``i`` of the table is kept line ``i`` of the returned body.

``stream_table`` reads the same rows in record batches and hands each to a sink as it comes,
so only one batch's text is in memory at a time (a 72-hour log's text table alone is
~400 MiB).
"""
from __future__ import annotations

import csv
import io
from typing import Callable, Optional

import numpy as np

from gpumon.logs.arrow import pa_modules
from gpumon.logs.lines import Lines

# A quoted cell may run over at most this many lines before its line is malformed.
MAX_QUOTED_LINES = 8


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


class Rows:
    """Where a table's rows came from: row ``i`` is kept line ``i + 1`` of ``lines`` (line 0
    is the header)."""

    def __init__(self, lines: Lines):
        self.lines = lines
        self.malformed = lines.malformed

    def line_of(self, rows: np.ndarray) -> np.ndarray:
        return self.lines.line_of(np.asarray(rows, dtype=np.int64) + 1)


def read_table(lines: Lines, names: list[str], want: Optional[list[str]] = None,
               typed: Optional[dict] = None):
    """(table, Rows) of the lines after the header; table None when no row is left.
    ``typed``: column -> Arrow type alias read directly ("float64"); a cell that is not one
    raises pyarrow's ArrowInvalid (read those columns as text instead)."""
    first = lines.head(1)[0]
    if b'"' in lines.data or _header_again(lines, first):
        lines = exact(lines, names, first)
    if _header_only(lines):
        return None, Rows(lines)
    table, skipped = _arrow(lines, names, want, typed)
    if skipped:
        lines = exact(lines, names, first)
        if _header_only(lines):
            return None, Rows(lines)
        table, skipped = _arrow(lines, names, want, typed)
        lines.malformed.add(None, skipped)      # none left after exact(); counted if so
    return table, Rows(lines)


# Bytes of text per record batch when streaming: large enough that per-batch costs (a Python
# call per column) vanish, small enough that a batch's text is a few tens of MB at most.
STREAM_BLOCK = 8 << 20


def stream_table(lines: Lines, names: list[str], want: list[str], make_sink: Callable,
                 typed: Optional[dict] = None) -> tuple[object, Rows]:
    """(sink, Rows): the rows read_table would give, in record batches, each passed in turn to
    ``sink.add(batch)``; ``make_sink()`` makes a fresh sink for each pass over the rows (a
    second pass follows a row of the wrong width). The sink None when no row is left.
    Raises pyarrow's ArrowInvalid as read_table does."""
    first = lines.head(1)[0]
    if b'"' in lines.data or _header_again(lines, first):
        lines = exact(lines, names, first)
    if _header_only(lines):
        return None, Rows(lines)
    sink, skipped = _stream(lines, names, want, typed, make_sink())
    if skipped:             # a row of the wrong width: check them one by one, read again
        lines = exact(lines, names, first)
        if _header_only(lines):
            return None, Rows(lines)
        sink, skipped = _stream(lines, names, want, typed, make_sink())
        lines.malformed.add(None, skipped)
    return sink, Rows(lines)


def _stream(lines: Lines, names: list[str], want, typed, sink) -> tuple[object, int]:
    """(sink, rows skipped); stops at the first batch with a skipped row."""
    pa, _, pcsv = pa_modules()
    skipped = [0]

    def on_invalid(row):
        skipped[0] += 1
        return "skip"

    reader = pcsv.open_csv(
        pa.BufferReader(lines.data),
        # (One parsing thread: pyarrow's own pool reads ahead block by block at nearly twice
        # the CPU time, and the sink's thread already fills the other core.)
        read_options=pcsv.ReadOptions(column_names=names, skip_rows=1, block_size=STREAM_BLOCK,
                                      use_threads=False),
        parse_options=pcsv.ParseOptions(invalid_row_handler=on_invalid),
        convert_options=pcsv.ConvertOptions(column_types=_types(names, typed),
                                            strings_can_be_null=False, include_columns=want))
    # The sink converts a batch on a thread of its own while the reader parses the next one
    # (both release the GIL); one batch at a time, in order, so at most two are in memory.
    from concurrent.futures import ThreadPoolExecutor
    with ThreadPoolExecutor(1) as pool:
        pending = None
        for batch in reader:
            if pending is not None:
                pending.result()
            if skipped[0]:
                break
            pending = pool.submit(sink.add, batch) if batch.num_rows else None
        if pending is not None:
            pending.result()
    return sink, skipped[0]


def _types(names: list[str], typed: Optional[dict]) -> dict:
    pa = pa_modules()[0]
    return {n: (pa.type_for_alias(typed[n]) if typed and n in typed else pa.string())
            for n in names}


def _header_again(lines: Lines, first: str) -> bool:
    """Whether the header line comes again later (a shell loop of `nvidia-smi --query-gpu=...
    --format=csv; sleep 1` writes it before every row): such lines are dropped (exact), not
    read as rows of bad values. Where every row is as wide as the header (a one-column log)
    nothing else would send the rows to exact."""
    return lines.data.find(b"\n" + first.encode() + b"\n") >= 0


def _header_only(lines: Lines) -> bool:
    return lines.data.find(b"\n") == len(lines.data) - 1


def _arrow(lines: Lines, names: list[str], want, typed):
    pa, _, pcsv = pa_modules()
    skipped = [0]

    def on_invalid(row):
        skipped[0] += 1
        return "skip"

    types = _types(names, typed)
    table = pcsv.read_csv(
        pa.BufferReader(lines.data),
        # 1 MiB blocks: every core parses (fewer, larger blocks leave cores idle); a line is
        # at most lines.MAX_LINE_BYTES long, well inside one block.
        read_options=pcsv.ReadOptions(column_names=names, skip_rows=1, block_size=1 << 20),
        parse_options=pcsv.ParseOptions(invalid_row_handler=on_invalid),
        convert_options=pcsv.ConvertOptions(column_types=types, strings_can_be_null=False,
                                            include_columns=want if want is not None else names))
    return table, skipped[0]


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
