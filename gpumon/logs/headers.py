"""Where a plain log's header is, and the log made a CSV whose first line is that header.

- ``csv``: the first line is the header (a person's own loop);
- ``comment``: the header is the last line starting with ``#`` before the first row (as
  dstat's ``--output`` and monitoring scripts write it, comment lines of their own before
  it); its names may be comma- or whitespace-separated; ``preamble``: comment lines, then
  a header line of its own;
- ``table``: a whitespace table with a banner, as a script prints it to its terminal: a
  title, a rule of ``=`` or ``-``, a header row of names with units, then aligned numbers
  (or the header row first, then its rule); or a bare whitespace header row over rows.

Comment lines, rules and header rows met again among the rows are dropped; a whitespace
table's cells are joined by commas.
"""
from __future__ import annotations

import csv
import re
from dataclasses import dataclass
from typing import Optional

import numpy as np

from gpumon.logs.lines import Lines

_RULE = re.compile(r"^[\s=+|:-]*(={3,}|-{3,})[\s=+|:-]*$")
_CELL = re.compile(r"^([-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?%?|-|n/a|\[n/a\]|"
                   r"\d{4}[-/]\d\d[-/]\d\d([T:]\d\d:\d\d:\d\d(\.\d+)?)?|\d\d:\d\d:\d\d(\.\d+)?)$",
                   re.I)
# A unit written as a word of its own after a name in a whitespace header ("util %").
_UNIT_WORD = re.compile(r"^([\[(].*[\])]|%|w|mib|mb|mhz|s|ms|c)$", re.I)


@dataclass
class Form:
    kind: str               # "comment", "preamble" or "table"
    header: int             # index of the header line among the first lines
    first: int              # index of the first row
    names: list             # the column names
    comma: bool = True      # cells separated by commas (else by whitespace)


def is_rule(line: str) -> bool:
    return bool(_RULE.match(line))


def is_row(line: str) -> bool:
    """Whitespace-separated cells that are all numbers, date-times or missing marks."""
    cells = line.split()
    return len(cells) >= 2 and all(_CELL.match(c) for c in cells)


def locate(head: list[str]) -> Optional[Form]:
    """The header of the log that starts with lines ``head``: a comment header or a banner
    table's; None when neither (then the first line is the header, as any CSV's)."""
    if head and head[0].lstrip().startswith("#"):
        return _comment(head)
    rule = next((k for k, x in enumerate(head) if is_rule(x)), None)
    if rule is None:
        return _bare_table(head)
    if "," in head[0] and rule > 0 and "," in head[rule - 1]:
        return None
    return _table(head, rule)


def _comment(head: list[str]) -> Optional[Form]:
    """The last comment line before the first row; or, where comment lines come before a
    header line of its own, that line."""
    first = next((k for k, x in enumerate(head) if not x.lstrip().startswith("#")), None)
    if first is None or first == 0:
        return None
    row = head[first]
    if not _data(row) and first + 1 < len(head):
        return _header_at(row, head[first + 1], first, "preamble")
    return _header_at(head[first - 1].lstrip().lstrip("#"), row, first - 1, "comment")


def _header_at(text: str, row: str, at: int, kind: str) -> Optional[Form]:
    """The Form of header line ``text`` (line ``at``) over first row ``row``."""
    text = text.strip()
    if "," in text:
        names = [c.strip() for c in next(csv.reader([text]), [])]
        return Form(kind, at, at + 1, names) if len(names) >= 2 else None
    names = split_names(text, len(row.split()))
    return None if names is None else Form(kind, at, at + 1, names, False)


def _data(line: str) -> bool:
    """Whether a line is a row (its cells numbers, date-times or missing marks), not a
    header."""
    cells = [c.strip() for c in line.split(",")] if "," in line else line.split()
    return any(_CELL.match(c) for c in cells if c)


def _bare_table(head: list[str]) -> Optional[Form]:
    """A whitespace header row over whitespace rows, without a banner or rule."""
    if len(head) < 2 or "," in head[0] or not is_row(head[1]) or _data(head[0]):
        return None
    names = split_names(head[0], len(head[1].split()))
    return None if names is None else Form("table", 0, 1, names, False)


def _table(head: list[str], rule: int) -> Optional[Form]:
    where = _table_rows(head, rule)
    if where is None:
        return None
    header, first = where
    width = len(head[first].split())
    names = split_names(head[header], width)
    units = head[header].split()
    if names and header > 0 and all(_UNIT_WORD.match(u) for u in units):
        above = split_names(head[header - 1], width)    # names, then a row of their units
        names = None if above is None else [f"{a} {u}" for a, u in zip(above, units)]
    return None if names is None else Form("table", header, first, names, False)


def _table_rows(head: list[str], rule: int) -> Optional[tuple[int, int]]:
    """(header row, first row) of a table with a rule at line ``rule``: the header row after
    the rule, or before it when the rows come right after the rule."""
    after = [k for k in range(rule + 1, len(head)) if not is_rule(head[k])]
    if not after:
        return None
    if is_row(head[after[0]]):
        header = rule - 1
        ok = header >= 0 and not is_rule(head[header]) and not is_row(head[header])
        return (header, after[0]) if ok else None
    first = next((k for k in after[1:] if is_row(head[k])), None)
    return None if first is None else (after[0], first)


def split_names(text: str, width: int) -> Optional[list[str]]:
    """A whitespace header's ``width`` names: split at runs of two spaces or more, else at
    every space with units ("%", "(W)") kept with the name before them; None when neither
    gives ``width`` names."""
    names = re.split(r"\s{2,}|\t", text.strip())
    if len(names) == width:
        return names
    words = text.split()
    if len(words) == width:
        return words
    out: list = []
    for w in words:
        if out and _UNIT_WORD.match(w):
            out[-1] += " " + w
        else:
            out.append(w)
    return out if len(out) == width else None


def sample_rows(head: list[str], form: Optional[Form]) -> list[list[str]]:
    """The cells of the rows among the first lines (to tell a time column by its values)."""
    if form is None:
        rows = head[1:]
        return [next(csv.reader([x]), []) for x in rows if x.strip()]
    rows = [x for x in head[form.first:] if not x.lstrip().startswith("#") and not is_rule(x)]
    return [next(csv.reader([x]), []) if form.comma else x.split() for x in rows]


def as_csv(lines: Lines, form: Optional[Form]) -> Lines:
    """The log's lines with the header first (as a CSV line) and the rows after it; the
    lines before the header, comment lines and rules after it left out."""
    if form is None:
        return lines
    text = lines.data.decode("utf-8").split("\n")[:-1]
    header = ",".join(_quoted(n) for n in form.names)
    drop = {text[k].strip() for k in range(form.first)}    # a banner, header or units again
    kept = [form.header]
    out = [header]
    for k in range(form.first, len(text)):
        x = text[k]
        s = x.strip()
        if s.startswith("#") or s in drop or not form.comma and is_rule(x):
            continue
        out.append(x if form.comma else ",".join(x.split()))
        kept.append(k)
    data = ("\n".join(out) + "\n").encode()
    return Lines(data, lines.line_of(np.array(kept, dtype=np.int64)), lines.malformed,
                 len(out))


def _quoted(name: str) -> str:
    return '"' + name.replace('"', '""') + '"' if any(c in name for c in ',"') else name


def note(form: Optional[Form]) -> Optional[str]:
    if form is None:
        return None
    if form.kind == "comment":
        return "header read from the comment line before the rows"
    if form.kind == "preamble":
        return "comment lines before the header skipped"
    if form.header == 0:
        return "read as a whitespace table"
    return "read as a whitespace table (banner and rules skipped)"
