"""Fuzz `gpumon analyze` with mutated logs: the contract is that no input gives a traceback,
hangs, or takes more than 1 GiB; bad input is a UserError (one line, exit 1).

    python -m bench.fuzz_logs                    # 1,000 cases, seed 0
    python -m bench.fuzz_logs --seed 3 --count 200
    python -m bench.fuzz_logs --seed 0 --only 17 # one case again, with its full traceback
    python -m bench.fuzz_logs --keep DIR         # keep the generated files in DIR

Each case takes one of the sample logs of tests/data/analyze and applies a seeded-random
combination of mutations (MUTATIONS: byte flips, mid-line truncation, duplicated headers,
wrong cell counts, NaN/inf/negative/huge numbers, non-UTF-8 bytes, CRLF, time going backwards
or jumping 1e9 s, 2 MiB lines, 200,000-character fields, quoted line breaks, negative and huge
GPU indices), or replaces it by an empty or header-only file; some are then gzip-compressed
(name ending .gz). The logs include a commented header with a column per GPU, names outside
gpumon's list, a whitespace table with a banner, quoted cells cut at a line break, and a log
read only with --columns (BASE_COLUMNS); 5 % of the other cases read with a --columns drawn
from their own header. A case depends only on (seed, case number), so `--only N` rebuilds it.

Two worker processes (python -m bench.fuzz_logs --worker) import gpumon once and run
gpumon.analyze.analyze_file(path, columns=...) plus to_text/to_json on each file, under an
address-space limit (their size after warm-up + --mem-headroom-mib) and a per-file alarm; the
parent kills and restarts a worker that does not answer. Outcomes: ok, user_error (fine), traceback,
hang, memory (MemoryError, or a peak RSS above --max-rss-mib), crash (the worker died).
About 2.5 % of the cases also go through the real command line, `python -m gpumon analyze
FILE`, a few of them through a pipe (`cat FILE | ... analyze -` or `/dev/stdin`): the exit
code must be 0 or 1 and stderr hold no traceback.

Beside them, the memory bombs (BOMBS), once each, through the worker and the command line:
inputs whose cost must follow the samples they hold, never their time span or their blank
bytes (one row an hour for a year, 1,000 rows 1e8 s apart, an nvidia-smi log of 8 GPUs x 30
days every 5 minutes, a 64 MiB NUL tail, 128 MiB of blank lines, a gzip of 1 GiB of line
breaks, and `yes 1,0,90 | gpumon analyze -` through a pipe). Every case's peak RSS is kept;
the report gives the bombs' one by one and the worst of all. `--bombs-only` runs just them.

Exit status 0 when no case gave a traceback, hang, memory or crash outcome, 1 otherwise.
"""
from __future__ import annotations

import argparse
import datetime as dt
import gzip
import json
import os
import random
import re
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Callable, Optional

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DATA = os.path.join(ROOT, "tests", "data", "analyze")
BASES = ("gpumon.csv", "nvsmi_nounits.csv", "nvsmi_starved.csv", "dmon.log", "dmon_dt.log",
         "plain.csv", "malformed.csv", "dcgm_dmon.log", "dcgm.csv", "gpumon.jsonl",
         "commented.csv", "elapsed.csv", "banner.txt", "cut.csv", "named.csv")
# Bases read only with --columns (what a user would give), and how often any other CSV or
# table base is read with a --columns of names drawn from its own header instead.
BASE_COLUMNS = {"named.csv": "time=wall,gpu=card,util=sm_activity,power=board"}
P_COLUMNS = 0.05

OUTCOMES = ("ok", "user_error", "traceback", "hang", "memory", "crash")
FAILURES = ("traceback", "hang", "memory", "crash")
CLI_OUTCOMES = ("ok", "user_error", "noisy_stderr", "traceback", "hang", "memory", "crash")

LONG_LINE = 2 * 1024 * 1024        # bytes in a "very long line", its line end excluded
LONG_FIELD = 200_000               # characters in a "long field"
TIME_JUMP_S = 1e9

NAN_INF = ("nan", "NaN", "inf", "-inf", "Infinity", "-nan")
NEGATIVE = ("-1", "-100", "-0.5", "-1e6", "-0")
HUGE = ("1e308", "-1e308", "1e309", "9" * 38, "1" + "0" * 37,
        "12345678901234567890123456789012345678.5")
NEG_GPU = ("-1", "-1", "-2", "-2147483648")
HUGE_GPU = ("1e12", "1e12", "1000000000000", "4294967296", "9" * 20)
BAD_BYTES = (b"\xff", b"\xc3", b"\xc3", b"\xfe\xff", b"\xed\xa0\x80", b"\x80")


# -- the layout of a log: its lines, header lines, separator, time and GPU columns -------------
@dataclass
class Layout:
    lines: list                    # bytes, each with its own line end
    header: list                   # indices of header lines
    ws: bool                       # whitespace-separated (dmon) rather than commas
    time_cols: tuple               # column indices of the time (dmon with a date: two)
    gpu_col: Optional[int]

    @property
    def data(self) -> list:
        hs = set(self.header)
        return [i for i, ln in enumerate(self.lines) if i not in hs and ln.strip()
                and not ln.lstrip().startswith(b"#")]


def _names(line: bytes, ws: bool) -> list:
    text = line.decode("utf-8", "replace").strip()
    if ws:
        return [w.lower() for w in text.lstrip("#").split()]
    return [re.sub(r"\s*\[.*?\]\s*$", "", c.strip()).strip().lower()
            for c in text.lstrip("#").split(",")]


_ROW = re.compile(rb'^\s*"?[-+]?\d')


def names_line(lines: list, header: list) -> int:
    """The header line that names most of the columns looked for."""
    known = [len(re.findall(rb"(?i)\b(gpu|idx|index|time|timestamp|date|util)\b", lines[i]))
             for i in header]
    return header[known.index(max(known))]


def _header_lines(lines: list, first: int) -> list:
    """A CSV's first line; dmon's "#" lines, or a comment header and the comments above it;
    a table's banner, header and rules: every line before the first row."""
    comment = lines[first].lstrip().startswith(b"#")
    if not comment and b"," in lines[first]:
        return [first]
    header = [first]
    for i in range(first + 1, len(lines)):
        if not lines[i].strip():
            continue
        if (comment and not lines[i].lstrip().startswith(b"#")) or _ROW.match(lines[i]):
            break
        header.append(i)
    return header


def layout(data: bytes) -> Layout:
    lines = data.splitlines(keepends=True)
    first = next((i for i, ln in enumerate(lines) if ln.strip()), None)
    if first is None:
        return Layout(lines, [], False, (), None)
    header = _header_lines(lines, first)
    row = header[-1] + 1
    ws = row < len(lines) and b"," not in lines[row]
    names = _names(lines[names_line(lines, header)], ws)
    tcols = tuple(i for i, n in enumerate(names)
                  if n in ("date", "time", "timestamp", "elapsed_sec", "wall"))
    gcol = next((i for i, n in enumerate(names) if n in ("gpu", "index", "gpu_index", "idx")),
                None)
    return Layout(lines, header, ws, tcols, gcol)


def _split(line: bytes, ws: bool) -> tuple:
    """(cells, line end) of one line."""
    body = line.rstrip(b"\r\n")
    end = line[len(body):]
    return (body.split() if ws else body.split(b",")), end


def _join(cells: list, end: bytes, ws: bool) -> bytes:
    return (b"  " if ws else b",").join(cells) + end


def _edit_rows(data: bytes, rng: random.Random, fn: Callable, rows: tuple = (1, 5)) -> bytes:
    """fn(cells, layout, rng) -> cells on a few random data lines."""
    lay = layout(data)
    idx = lay.data
    if not idx:
        return data
    for i in rng.sample(idx, min(len(idx), rng.randint(*rows))):
        cells, end = _split(lay.lines[i], lay.ws)
        if cells:
            lay.lines[i] = _join(fn(cells, lay, rng), end, lay.ws)
    return b"".join(lay.lines)


_NUM = re.compile(rb"^(\s*)([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)(.*)$", re.S)


def _set_number(cells: list, lay: Layout, rng: random.Random, values: tuple) -> list:
    """One numeric cell (not the GPU index) set to one of values, its unit kept."""
    cand = [k for k, c in enumerate(cells) if _NUM.match(c) and k != lay.gpu_col]
    if not cand:
        return cells
    k = rng.choice(cand)
    m = _NUM.match(cells[k])
    cells = list(cells)
    cells[k] = m.group(1) + rng.choice(values).encode() + m.group(3)
    return cells


# -- mutations: (bytes, rng) -> bytes, each small --------------------------------------------
def byte_flip(data: bytes, rng: random.Random) -> bytes:
    """1-8 bytes XORed with a random non-zero byte."""
    if not data:
        return data
    b = bytearray(data)
    for _ in range(rng.randint(1, 8)):
        b[rng.randrange(len(b))] ^= rng.randint(1, 255)
    return bytes(b)


def truncate(data: bytes, rng: random.Random) -> bytes:
    """Cut inside a line (never just after a line end)."""
    lay = layout(data)
    idx = lay.data or list(range(len(lay.lines)))
    idx = [i for i in idx if len(lay.lines[i].rstrip(b"\r\n")) >= 2]
    if not idx:
        return data[:len(data) // 2]
    i = rng.choice(idx)
    body = lay.lines[i].rstrip(b"\r\n")
    return b"".join(lay.lines[:i]) + body[:rng.randint(1, len(body) - 1)]


def dup_header(data: bytes, rng: random.Random) -> bytes:
    """The header line(s) repeated at 1-3 places: right after it, mid-file, at the end."""
    lay = layout(data)
    if not lay.header:
        return data
    head = b"".join(lay.lines[i] if lay.lines[i].endswith(b"\n") else lay.lines[i] + b"\n"
                    for i in lay.header)
    lines = list(lay.lines)
    if lines and not lines[-1].endswith(b"\n"):
        lines[-1] += b"\n"
    spots = [lay.header[-1] + 1] + [rng.randint(lay.header[-1] + 1, len(lines))
                                     for _ in range(rng.randint(0, 2))]
    for at in sorted(spots, reverse=True):
        lines.insert(at, head)
    return b"".join(lines)


def drop_cells(data: bytes, rng: random.Random) -> bytes:
    """A cell removed from a few lines (or all but the first)."""
    def fn(cells, lay, rng):
        cells = list(cells)
        for _ in range(1 if rng.random() < 0.8 else len(cells) - 1):
            if len(cells) > 1:
                del cells[rng.randrange(len(cells))]
        return cells
    return _edit_rows(data, rng, fn)


def add_cells(data: bytes, rng: random.Random) -> bytes:
    """1-3 extra cells on a few lines."""
    def fn(cells, lay, rng):
        cells = list(cells)
        for _ in range(rng.randint(1, 3)):
            cells.insert(rng.randint(0, len(cells)), rng.choice((b"", b"0", b"x", b"99 %", b"1.5")))
        return cells
    return _edit_rows(data, rng, fn)


def nan_inf(data: bytes, rng: random.Random) -> bytes:
    return _edit_rows(data, rng, lambda c, lay, r: _set_number(c, lay, r, NAN_INF), (1, 20))


def negative_values(data: bytes, rng: random.Random) -> bytes:
    return _edit_rows(data, rng, lambda c, lay, r: _set_number(c, lay, r, NEGATIVE), (1, 20))


def huge_values(data: bytes, rng: random.Random) -> bytes:
    """1e308, 1e309, 38-digit numbers."""
    return _edit_rows(data, rng, lambda c, lay, r: _set_number(c, lay, r, HUGE), (1, 20))


def non_utf8(data: bytes, rng: random.Random) -> bytes:
    """1-5 invalid UTF-8 sequences (0xff, a lone 0xc3, ...) inserted."""
    b = data
    for _ in range(rng.randint(1, 5)):
        at = rng.randint(0, len(b))
        b = b[:at] + rng.choice(BAD_BYTES) + b[at:]
    return b


def crlf(data: bytes, rng: random.Random) -> bytes:
    """Windows line ends: on every line, or on about half of them."""
    lines = data.replace(b"\r\n", b"\n").split(b"\n")
    every = rng.random() < 0.7
    out = [ln + (b"\r\n" if every or rng.random() < 0.5 else b"\n") for ln in lines[:-1]]
    return b"".join(out) + lines[-1]


def _shift_cell(cells: list, lay: Layout, delta: float) -> list:
    cells = list(cells)
    tc = lay.time_cols
    if not tc or max(tc) >= len(cells):
        return cells
    try:
        if len(tc) == 2 and lay.ws:                           # dmon: 20240115 10:00:01
            d = dt.datetime.strptime((cells[tc[0]] + b" " + cells[tc[1]]).decode(),
                                     "%Y%m%d %H:%M:%S") + dt.timedelta(seconds=delta)
            cells[tc[0]], cells[tc[1]] = (d.strftime("%Y%m%d").encode(),
                                          d.strftime("%H:%M:%S").encode())
        else:
            k = tc[0]
            raw = cells[k].decode()
            lead = raw[:len(raw) - len(raw.lstrip())]
            s = raw.strip()
            if re.fullmatch(r"[-+]?\d+(\.\d*)?", s):                  # epoch seconds
                cells[k] = f"{lead}{float(s) + delta:.3f}".encode()
            else:                                                     # 2024/01/15 10:00:01.000
                fmt = "%Y/%m/%d %H:%M:%S.%f" if "." in s else "%Y/%m/%d %H:%M:%S"
                d = dt.datetime.strptime(s, fmt) + dt.timedelta(seconds=delta)
                out = d.strftime(fmt)
                cells[k] = (lead + (out[:-3] if "." in s else out)).encode()
    except (ValueError, OverflowError, UnicodeDecodeError):
        pass
    return cells


def _shift_after(data: bytes, rng: random.Random, delta: float) -> bytes:
    lay = layout(data)
    idx = lay.data
    if len(idx) < 2:
        return data
    cut = rng.randint(1, len(idx) - 1)
    for i in idx[cut:]:
        cells, end = _split(lay.lines[i], lay.ws)
        lay.lines[i] = _join(_shift_cell(cells, lay, delta), end, lay.ws)
    return b"".join(lay.lines)


def time_backwards(data: bytes, rng: random.Random) -> bytes:
    """From a random row on, the time 30 s to a year earlier."""
    return _shift_after(data, rng, -rng.choice((30, 3600, 86400, 365 * 86400)))


def time_jump(data: bytes, rng: random.Random) -> bytes:
    """From a random row on, the time 1e9 s (32 years) later."""
    return _shift_after(data, rng, TIME_JUMP_S)


def long_line(data: bytes, rng: random.Random) -> bytes:
    """A line of 2 MiB inserted: a row with a huge last cell, all commas, or one long word."""
    lay = layout(data)
    idx = lay.data
    kind = rng.choice(("row", "commas", "word"))
    if kind == "row" and idx:
        cells, _ = _split(lay.lines[rng.choice(idx)], lay.ws)
        head = _join(cells[:-1] + [b""], b"", lay.ws)
        line = head + b"7" * (LONG_LINE - len(head))
    elif kind == "commas":
        line = b"," * LONG_LINE
    else:
        line = b"x" * LONG_LINE
    at = rng.randint((lay.header[-1] + 1) if lay.header else 0, len(lay.lines))
    lines = list(lay.lines)
    if lines and not lines[-1].endswith(b"\n"):
        lines[-1] += b"\n"
    lines.insert(at, line + b"\n")
    return b"".join(lines)


def long_field(data: bytes, rng: random.Random) -> bytes:
    """One cell of a data row 200,000 characters long (letters, digits, or quoted)."""
    def fn(cells, lay, rng):
        cells = list(cells)
        k = rng.randrange(len(cells))
        cells[k] = rng.choice((b"a" * LONG_FIELD, b"9" * LONG_FIELD,
                               b'"' + b"q" * (LONG_FIELD - 2) + b'"'))
        return cells
    return _edit_rows(data, rng, fn, (1, 2))


def quoted_newline(data: bytes, rng: random.Random) -> bytes:
    """A cell replaced by a quoted value holding line breaks (and a comma)."""
    def fn(cells, lay, rng):
        cells = list(cells)
        cells[rng.randrange(len(cells))] = rng.choice(
            (b'"99\n%"', b'"a\r\nb,c"', b'"\n\n"', b'"x\n' + cells[0].strip(b'"') + b'"'))
        return cells
    return _edit_rows(data, rng, fn, (1, 3))


def _set_gpu(data: bytes, rng: random.Random, values: tuple) -> bytes:
    def fn(cells, lay, rng):
        cells = list(cells)
        if lay.gpu_col is not None and lay.gpu_col < len(cells):
            c = cells[lay.gpu_col]
            lead = c[:len(c) - len(c.lstrip())]
            cells[lay.gpu_col] = lead + rng.choice(values).encode()
        return cells
    return _edit_rows(data, rng, fn, (1, 10))


def negative_gpu(data: bytes, rng: random.Random) -> bytes:
    return _set_gpu(data, rng, NEG_GPU)


def huge_gpu(data: bytes, rng: random.Random) -> bytes:
    return _set_gpu(data, rng, HUGE_GPU)


def empty(data: bytes, rng: random.Random) -> bytes:
    return b""


def header_only(data: bytes, rng: random.Random) -> bytes:
    """The header line(s) alone, with or without a final line end."""
    lay = layout(data)
    out = b"".join(lay.lines[i] for i in lay.header)
    return out if rng.random() < 0.7 else out.rstrip(b"\r\n")


def gzip_file(data: bytes, rng: random.Random) -> bytes:
    """gzip-compressed (the file name then ends in .gz)."""
    return gzip.compress(data, compresslevel=6, mtime=0)


# In the order they are applied: cell-level first, then whole-line, then bytes.
MUTATIONS = {f.__name__: f for f in (
    time_backwards, time_jump, nan_inf, negative_values, huge_values, negative_gpu, huge_gpu,
    drop_cells, add_cells, long_field, quoted_newline, dup_header, long_line, crlf, truncate,
    byte_flip, non_utf8)}
WHOLE = {f.__name__: f for f in (empty, header_only)}     # replace the log
NEEDS_TIME = {"time_backwards", "time_jump"}
P_WHOLE = 0.05          # each of empty, header_only
P_GZIP = 0.10
P_PIPE = 0.008          # through the command line, by a pipe
P_CLI = 0.017           # through the command line, by its file name


# -- cases -------------------------------------------------------------------------------------
@dataclass
class Case:
    seed: int
    n: int
    base: str
    mutations: list
    gz: bool
    cli: Optional[str]      # None, "file", "-" or "/dev/stdin"
    columns: Optional[str] = None       # --columns, when the case reads with it

    @property
    def name(self) -> str:
        return f"{self.n:05d}-{self.base}" + (".gz" if self.gz else "")

    @property
    def label(self) -> str:
        return "+".join(self.mutations + (["gzip"] if self.gz else []) +
                        ([f"pipe({self.cli})"] if self.cli in ("-", "/dev/stdin") else []) +
                        ([f"columns({self.columns})"] if self.columns else []))

    @property
    def repro(self) -> str:
        return f"python -m bench.fuzz_logs --seed {self.seed} --only {self.n}"


_BASE_CACHE: dict = {}


def base_bytes(name: str) -> bytes:
    if name not in _BASE_CACHE:
        with open(os.path.join(DATA, name), "rb") as f:
            _BASE_CACHE[name] = f.read()
    return _BASE_CACHE[name]


def make_case(seed: int, n: int) -> Case:
    rng = random.Random(f"gpumon-fuzz:{seed}:{n}")
    base = rng.choice(BASES)
    r = rng.random()
    if r < P_WHOLE:
        muts = ["empty"]
    elif r < 2 * P_WHOLE:
        muts = ["header_only"]
    else:
        names = [m for m in MUTATIONS if m not in NEEDS_TIME or layout(base_bytes(base)).time_cols]
        muts = rng.sample(names, rng.choice((1, 1, 2, 2, 3)))
        muts.sort(key=list(MUTATIONS).index)
    gz = rng.random() < P_GZIP
    r = rng.random()
    cli = (rng.choice(("-", "/dev/stdin")) if r < P_PIPE else
           "file" if r < P_PIPE + P_CLI else None)
    columns = BASE_COLUMNS.get(base)
    if columns is None and rng.random() < P_COLUMNS:
        columns = drawn_columns(base, rng)
    return Case(seed, n, base, muts, gz, cli, columns)


def drawn_columns(base: str, rng: random.Random) -> Optional[str]:
    """A --columns of names from the base's own header, drawn at random (util always)."""
    lay = layout(base_bytes(base))
    if not lay.header:
        return None
    names = [n for n in _names(lay.lines[names_line(lay.lines, lay.header)], lay.ws)
             if n and "," not in n]
    if not names:
        return None
    roles = ["util"] + rng.sample(("time", "gpu", "power", "mem"), rng.randint(0, 3))
    return ",".join(f"{r}={rng.choice(names)}" for r in roles)


def build(case: Case) -> bytes:
    """The case's file contents: its own random stream, so each case rebuilds alone."""
    rng = random.Random(f"gpumon-fuzz-data:{case.seed}:{case.n}")
    data = base_bytes(case.base)
    for m in case.mutations:
        data = (WHOLE.get(m) or MUTATIONS[m])(data, rng)
    if case.gz:
        data = gzip_file(data, rng)
    return data


def write_case(case: Case, folder: str) -> str:
    path = os.path.join(folder, case.name)
    with open(path, "wb") as f:
        f.write(build(case))
    return path


# -- the worker: one process, gpumon imported once ----------------------------------------------
class _Alarm(BaseException):
    """Raised by SIGALRM: a BaseException, so that no `except Exception` in gpumon eats it."""


def _status(key: str) -> Optional[int]:
    try:
        with open("/proc/self/status") as f:
            for ln in f:
                if ln.startswith(key + ":"):
                    return int(ln.split()[1]) * 1024
    except OSError:
        pass
    return None


def _reset_peak() -> bool:
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")      # resets VmHWM (and ru_maxrss) to the current RSS
        return True
    except OSError:
        return False


def _peak() -> int:
    return _status("VmHWM") or resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def _where(tb) -> str:
    """The innermost frame in gpumon, else the innermost frame: 'file:line func'."""
    frames = traceback.extract_tb(tb)
    ours = [f for f in frames if f"{os.sep}gpumon{os.sep}" in f.filename]
    f = (ours or frames or [None])[-1]
    if f is None:
        return "?"
    fn = os.path.relpath(f.filename, ROOT) if f.filename.startswith(ROOT) else \
        os.path.basename(f.filename)
    return f"{fn}:{f.lineno} {f.name}"


def run_one(path: str, max_rss: int, columns: Optional[str] = None) -> dict:
    from gpumon.errors import UserError
    reset = _reset_peak()
    base_peak = _peak()
    t0 = time.monotonic()
    res: dict = {"outcome": "ok"}
    try:
        ws = _analyse(path, columns)
        if ws:
            res["warnings"] = ws
    except UserError as exc:
        res = {"outcome": "user_error", "msg": str(exc)[:300]}
        if "\n" in str(exc).strip():
            res["multiline"] = True
    except _Alarm:
        res = {"outcome": "hang", "type": "timeout", "where": _where(sys.exc_info()[2]),
               "tb": traceback.format_exc()[-6000:]}
    except BaseException as exc:      # noqa: B036 (SystemExit, KeyboardInterrupt: bugs too)
        if isinstance(exc, KeyboardInterrupt):
            raise
        res = {"outcome": "memory" if isinstance(exc, MemoryError) else "traceback",
               "type": f"{type(exc).__module__}.{type(exc).__qualname__}".replace("builtins.", ""),
               "msg": str(exc).strip().splitlines()[0][:300] if str(exc).strip() else "",
               "where": _where(exc.__traceback__), "tb": traceback.format_exc()[-6000:]}
    res["secs"] = round(time.monotonic() - t0, 3)
    _peak_check(res, reset, base_peak, max_rss)
    return res


def _analyse(path: str, columns: Optional[str]) -> list:
    """The case analysed and reported as text and JSON (--columns when given); the warnings
    raised on the way."""
    from gpumon.analyze import analyze_file
    from gpumon.report import to_json, to_text
    from gpumon.logs.columns import parse_option
    import warnings
    with warnings.catch_warnings(record=True) as ws:
        warnings.simplefilter("always")
        log, tl = analyze_file(path, columns=parse_option(columns) if columns else None)
        to_text(log, tl)
        json.dumps(to_json(tl))
    return sorted({f"{w.category.__name__}: {w.message}"[:120] for w in ws})


def _peak_check(res: dict, reset: bool, base_peak: int, max_rss: int) -> None:
    """The case's peak RSS in ``res``; an ok or user_error case over ``max_rss`` is memory."""
    peak = _peak()
    res["peak_mib"] = round(peak / 2**20, 1)
    if not reset:
        res["peak_mib_note"] = "process peak (clear_refs unavailable)"
    if peak > max_rss and peak > base_peak and res["outcome"] in ("ok", "user_error"):
        res.update(outcome="memory", type="peak RSS",
                   msg=f"peak RSS {peak / 2**20:.0f} MiB > {max_rss / 2**20:.0f} MiB "
                       f"(the case ended as {res['outcome']})", where="")


def worker_main(timeout: float, headroom_mib: float, max_rss_mib: float) -> int:
    proto = os.fdopen(os.dup(1), "w", buffering=1)
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)               # whatever gpumon prints does not reach the protocol
    sys.stdout = open(os.devnull, "w")
    import gpumon.analyze as ga
    ga.analyze_file(os.path.join(DATA, "plain.csv"))     # pyarrow's threads and pools started
    vm = _status("VmSize") or 0
    limit = int(vm + headroom_mib * 2**20)
    try:
        resource.setrlimit(resource.RLIMIT_AS, (limit, resource.getrlimit(resource.RLIMIT_AS)[1]))
    except (ValueError, OSError):
        limit = 0

    def on_alarm(signum, frame):
        raise _Alarm()
    signal.signal(signal.SIGALRM, on_alarm)
    proto.write(json.dumps({"ready": True, "vm_mib": round(vm / 2**20), "as_limit_mib":
                            round(limit / 2**20)}) + "\n")
    for line in sys.stdin:
        job = json.loads(line)
        signal.setitimer(signal.ITIMER_REAL, timeout)
        try:
            res = run_one(job["path"], int(max_rss_mib * 2**20), job.get("columns"))
        except _Alarm:     # fired between the analysis and the result
            res = {"outcome": "hang", "type": "timeout", "where": "(after the analysis)"}
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
        res["n"] = job["n"]
        proto.write(json.dumps(res) + "\n")
    return 0


class Worker:
    """The parent's handle on one worker process; restarts it after a kill."""

    def __init__(self, args, log_dir: str, wid: int):
        self.args, self.log_dir, self.wid = args, log_dir, wid
        self.proc: Optional[subprocess.Popen] = None
        self.info: dict = {}
        self.starts = 0

    def start(self) -> None:
        self.starts += 1
        self.errpath = os.path.join(self.log_dir, f"worker{self.wid}.stderr")
        self.err = open(self.errpath, "ab")
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(
            filter(None, [ROOT, os.environ.get("PYTHONPATH")])))
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "bench.fuzz_logs", "--worker", "--timeout",
             str(self.args.timeout), "--mem-headroom-mib", str(self.args.mem_headroom_mib),
             "--max-rss-mib", str(self.args.max_rss_mib)],
            cwd=ROOT, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.err,
            text=True, bufsize=1)
        line = self._readline(60)
        if not line:
            self.stop()
            raise RuntimeError(f"fuzz worker did not start; see {self.errpath}")
        self.info = json.loads(line)

    def _readline(self, timeout: float) -> Optional[str]:
        out: list = []
        pipe = self.proc.stdout
        t = threading.Thread(target=lambda: out.append(pipe.readline()), daemon=True)
        t.start()
        t.join(timeout)
        return out[0] if out and out[0] else None

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
        if self.proc:
            self.proc.wait()
        self.proc = None
        self.err.close()

    def run(self, n: int, path: str, columns: Optional[str] = None) -> dict:
        if self.proc is None:
            self.start()
        try:
            self.proc.stdin.write(json.dumps({"n": n, "path": path, "columns": columns}) + "\n")
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError):
            pass
        line = self._readline(self.args.timeout + 15)
        if line:
            res = json.loads(line)
            if res["outcome"] in ("hang", "memory"):      # a fresh process for the next case
                self.stop()
            return res
        rc = self.proc.poll()
        self.stop()
        if rc is None:
            return {"outcome": "hang", "type": "killed", "where": "",
                    "msg": f"no answer in {self.args.timeout + 15:g} s (the alarm did not fire)"}
        tail = ""
        try:
            with open(self.errpath, "rb") as f:
                tail = f.read()[-300:].decode("utf-8", "replace").strip().splitlines()[-1:]
        except OSError:
            pass
        return {"outcome": "crash", "type": "worker died", "where": "",
                "msg": f"exit {rc}; stderr: {' '.join(tail)}"}


# -- the command line, for a few cases --------------------------------------------------------
_LIMITED = ("import os, resource, sys\n"
            "n = int(sys.argv[1])\n"
            "if n: resource.setrlimit(resource.RLIMIT_AS, (n, n))\n"
            "os.execv(sys.argv[2], sys.argv[2:])\n")


def run_cli(case: Case, path: str, args, as_limit: int, endless: bool = False) -> dict:
    # The address-space limit set by a small exec wrapper (preexec_fn is unsafe with threads);
    # the pid stays the same, so wait4's ru_maxrss is gpumon's.
    cmd = [sys.executable, "-c", _LIMITED, str(as_limit), sys.executable, "-m", "gpumon",
           "analyze"] + (["--columns", case.columns] if case.columns else []) + [
           case.cli if case.cli in ("-", "/dev/stdin") else path]
    rc, secs, ru, stderr, killed = _run_cli(cmd, case, path, args, endless)
    lines = [ln for ln in stderr.splitlines() if ln.strip()]
    res = {"rc": rc, "secs": round(secs, 2), "peak_mib": round(ru.ru_maxrss / 1024, 1),
           "stderr": stderr[-2000:],
           "outcome": _cli_outcome(rc, stderr, lines, ru.ru_maxrss * 1024, killed, args)}
    if res["outcome"] != "ok" and lines:
        res["msg"] = lines[-1][:300]
        if res["outcome"] in FAILURES and "Traceback" in stderr:
            res.update(_tb_text(stderr))
    return res


def _run_cli(cmd: list, case: Case, path: str, args, endless: bool) -> tuple:
    """(exit code, seconds, rusage, stderr, killed) of the command, fed by a pipe where the
    case says so."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        filter(None, [ROOT, os.environ.get("PYTHONPATH")])), NO_COLOR="1")
    cat = None
    stdin = subprocess.DEVNULL
    if case.cli in ("-", "/dev/stdin"):
        cat = subprocess.Popen(["yes", "1,0,90"] if endless else ["cat", path],
                               stdout=subprocess.PIPE)
        stdin = cat.stdout
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        t0 = time.monotonic()
        p = subprocess.Popen(cmd, cwd=ROOT, env=env, stdin=stdin, stdout=out, stderr=err)
        if cat:
            cat.stdout.close()
        killed = []
        timer = threading.Timer(args.timeout + 10, lambda: (killed.append(1), p.kill()))
        timer.start()
        _, status, ru = os.wait4(p.pid, 0)
        timer.cancel()
        if cat:
            cat.kill()                # (`yes` never ends; a finished `cat` takes no harm)
            cat.wait()
        secs = time.monotonic() - t0
        err.seek(0)
        stderr = err.read().decode("utf-8", "replace")
    return os.waitstatus_to_exitcode(status), secs, ru, stderr, bool(killed)


def _cli_outcome(rc: int, stderr: str, lines: list, peak: int, killed: bool, args) -> str:
    if killed:
        return "hang"
    if "MemoryError" in stderr or peak > args.max_rss_mib * 2**20:
        return "memory"
    if "Traceback" in stderr:
        return "traceback"
    if rc < 0 or rc not in (0, 1):
        return "crash"
    if rc == 1:
        return ("user_error" if len(lines) == 1 and lines[0].startswith("gpumon: ")
                else "noisy_stderr")
    return "ok" if not lines else "noisy_stderr"


_FRAME = re.compile(r'File "([^"]+)", line (\d+), in (\S+)')


def _tb_text(stderr: str) -> dict:
    """type, msg and where (innermost gpumon frame) of a printed traceback."""
    last = [ln for ln in stderr.splitlines() if ln.strip()][-1]
    typ, _, msg = last.partition(": ")
    frames = _FRAME.findall(stderr)
    ours = [f for f in frames if f"{os.sep}gpumon{os.sep}" in f[0]]
    f = (ours or frames or [None])[-1]
    where = ""
    if f is not None:
        name = os.path.relpath(f[0], ROOT) if f[0].startswith(ROOT) else os.path.basename(f[0])
        where = f"{name}:{f[1]} {f[2]}"
    return {"type": typ.strip()[:100], "msg": msg.strip()[:300], "where": where}


# -- memory bombs ---------------------------------------------------------------------------------
MIB = 1 << 20


def _rows_file(path: str, head: str, rows) -> None:
    with open(path, "w") as f:
        f.write(head + "\n")
        for r in rows:
            f.write(r + "\n")


def bomb_hourly_year(path: str, scale: float) -> None:
    """One row an hour for a year: 8,760 rows, 31.5 million seconds."""
    _rows_file(path, "timestamp,gpu,util", (f"{1767225600 + 3600 * k},0,{k * 7 % 100}"
                                            for k in range(max(3, int(8760 * scale)))))


def bomb_far_apart(path: str, scale: float) -> None:
    """1,000 rows 1e8 s apart (1e11 s: 13 TiB of per-second bins)."""
    _rows_file(path, "timestamp,gpu,util", (f"{1 + 10 ** 8 * k},0,50"
                                            for k in range(max(3, int(1000 * scale)))))


def bomb_nvsmi_5min(path: str, scale: float) -> None:
    """nvidia-smi --query-gpu of 8 GPUs for 30 days, one poll every 5 minutes."""
    t0 = dt.datetime(2024, 5, 1)

    def rows():
        for k in range(max(3, int(30 * 288 * scale))):
            ts = (t0 + dt.timedelta(seconds=300 * k)).strftime("%Y/%m/%d %H:%M:%S.000")
            for g in range(8):
                yield f"{ts}, {g}, {(k * 7 + g) % 100} %, 1000 MiB, 150.00 W"
    _rows_file(path, "timestamp, index, utilization.gpu [%], memory.used [MiB], "
               "power.draw [W]", rows())


def _padded(path: str, pad: bytes, size: int, gz: bool = False) -> None:
    opener = (lambda p: gzip.open(p, "wb", compresslevel=6)) if gz else (lambda p: open(p, "wb"))
    with opener(path) as f:
        f.write(base_bytes("nvsmi_starved.csv"))
        block = pad * (MIB // len(pad))
        for _ in range(max(1, size // MIB)):
            f.write(block)


def bomb_nul_tail(path: str, scale: float) -> None:
    """A log and 64 MiB of NULs after it (logrotate's copytruncate, a writer without
    O_APPEND)."""
    _padded(path, b"\0", int(64 * MIB * scale))


def bomb_blank_tail(path: str, scale: float) -> None:
    """A log and 128 MiB of blank lines after it."""
    _padded(path, b"\n", int(128 * MIB * scale))


def bomb_newline_gzip(path: str, scale: float) -> None:
    """A log and 1 GiB of line breaks, gzip-compressed (~1 MB)."""
    _padded(path, b"\n", int(1024 * MIB * scale), gz=True)


# name -> (writer, file suffix); `endless_pipe` has no file: `yes 1,0,90 | ... analyze -`.
BOMBS = {"hourly_year": (bomb_hourly_year, ".csv"), "far_apart": (bomb_far_apart, ".csv"),
         "nvsmi_5min_30d": (bomb_nvsmi_5min, ".csv"), "nul_tail": (bomb_nul_tail, ".csv"),
         "blank_tail": (bomb_blank_tail, ".csv"),
         "newline_gzip": (bomb_newline_gzip, ".csv.gz"), "endless_pipe": (None, "")}


@dataclass
class Bomb:
    name: str
    size: int                   # bytes of the file (0: a pipe)
    res: dict                   # through analyze_file in the worker (empty for the pipe)
    cli: dict


def run_bombs(args, log: Callable = print, scale: float = 1.0) -> list:
    """Every bomb through a worker (peak RSS of the case) and the command line (under the
    worker's address-space limit)."""
    tmp = tempfile.mkdtemp(prefix="gpumon-bombs-")
    logs = tempfile.mkdtemp(prefix="gpumon-bombs-workers-")
    w = Worker(args, logs, 0)
    out = []
    try:
        for name, (writer, suffix) in BOMBS.items():
            path = os.path.join(tmp, name + suffix)
            res: dict = {}
            if writer is not None:
                writer(path, scale)
                res = w.run(-1, path)
            as_limit = (w.info.get("as_limit_mib") or 0) * MIB
            cli = run_cli(Case(0, -1, name, [name], False, "-" if writer is None else "file"),
                          path, args, as_limit, endless=writer is None)
            size = os.path.getsize(path) if writer is not None else 0
            out.append(Bomb(name, size, res, cli))
            if writer is not None:
                os.unlink(path)
            log(f"  fuzz bomb {name}: " + ", ".join(
                f"{via} {r['outcome']} {r.get('peak_mib', 0):.0f} MiB"
                for via, r in (("analyze_file", res), ("CLI", cli)) if r))
    finally:
        if w.proc:
            w.stop()
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.rmtree(logs, ignore_errors=True)
    return out


def bomb_lines(bombs: list) -> list:
    """The bombs as a Markdown table, one row each, with their peak RSS."""
    rows = []
    for b in bombs:
        for via, r in (("analyze_file", b.res), ("CLI", b.cli)):
            if r:
                rows.append([f"`{b.name}`", f"{b.size / MIB:.1f} MiB" if b.size else "pipe",
                             via, r["outcome"], f"{r.get('peak_mib', 0):.0f}",
                             f"{r.get('secs', 0):.1f}", (r.get("msg") or "")[:90]
                             .replace("|", "/")])
    worst = max((r.get("peak_mib", 0) for b in bombs for r in (b.res, b.cli) if r), default=0)
    return (["", f"Memory bombs (BOMBS), once each: largest peak RSS {worst:.0f} MiB.", ""]
            + _table(["input", "size", "via", "outcome", "peak RSS MiB", "s", "message"],
                     rows))


# -- the run -----------------------------------------------------------------------------------
@dataclass
class Result:
    case: Case
    res: dict
    cli: Optional[dict] = None


@dataclass
class Summary:
    seed: int
    count: int
    secs: float
    results: list = field(default_factory=list)
    bombs: list = field(default_factory=list)       # Bomb

    @property
    def outcomes(self) -> Counter:
        return Counter(r.res["outcome"] for r in self.results)

    @property
    def cli_outcomes(self) -> Counter:
        return Counter(r.cli["outcome"] for r in self.results if r.cli)

    @property
    def failures(self) -> list:
        return [r for r in self.results if r.res["outcome"] in FAILURES
                or (r.cli and r.cli["outcome"] in FAILURES)]

    @property
    def bomb_failures(self) -> list:
        return [b for b in self.bombs if any(r and r["outcome"] in FAILURES
                                             for r in (b.res, b.cli))]

    @property
    def ok(self) -> bool:
        return not self.failures and not self.bomb_failures

    def measured(self) -> str:
        """The run in one line, for bench.run's table of targets: outcomes, the memory bombs'
        and the largest peak RSS of any case."""
        peaks = [r.get("peak_mib", 0) for x in self.results for r in (x.res, x.cli) if r]
        peaks += [r.get("peak_mib", 0) for b in self.bombs for r in (b.res, b.cli) if r]
        bombs = (f"; {len(self.bombs)} memory bombs, {len(self.bomb_failures)} failing"
                 if self.bombs else "")
        return (", ".join(f"{k} {self.outcomes.get(k, 0)}" for k in OUTCOMES) + bombs
                + f"; largest peak RSS {max(peaks, default=0):.0f} MiB")


def run_cases(cases: list, args, log: Callable = print) -> Summary:
    t0 = time.monotonic()
    tmp = args.keep or tempfile.mkdtemp(prefix="gpumon-fuzz-")
    os.makedirs(tmp, exist_ok=True)
    logs = tempfile.mkdtemp(prefix="gpumon-fuzz-workers-")
    todo = list(reversed(cases))
    lock = threading.Lock()
    results: list = []
    errors: list = []
    workers = [Worker(args, logs, i) for i in range(max(1, args.workers))]
    as_limit = [0]

    def loop(w: Worker) -> None:
        while not errors:
            with lock:
                if not todo:
                    return
                case = todo.pop()
            path = write_case(case, tmp)
            res = w.run(case.n, path, case.columns)
            if w.info.get("as_limit_mib"):
                as_limit[0] = w.info["as_limit_mib"] * 2**20
            cli = run_cli(case, path, args, as_limit[0]) if case.cli else None
            if not args.keep:
                os.unlink(path)
            with lock:
                results.append(Result(case, res, cli))
                k = len(results)
                if args.progress and (k % 100 == 0 or k == len(cases)):
                    log(f"  fuzz: {k}/{len(cases)} cases, {time.monotonic() - t0:.0f} s, "
                        f"{dict(Counter(r.res['outcome'] for r in results))}")

    def guarded(w: Worker) -> None:
        try:
            loop(w)
        except BaseException as exc:        # the harness's own failure: stop, re-raise below
            errors.append(exc)

    threads = [threading.Thread(target=guarded, args=(w,), daemon=True) for w in workers]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        for w in workers:
            if w.proc:
                try:
                    w.proc.stdin.close()
                except OSError:
                    pass
                w.stop()
        shutil.rmtree(logs, ignore_errors=True)
        if not args.keep:
            shutil.rmtree(tmp, ignore_errors=True)
    if errors:
        raise errors[0]
    results.sort(key=lambda r: r.case.n)
    return Summary(args.seed, len(cases), time.monotonic() - t0, results)


def _table(head: list, rows: list) -> list:
    out = ["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
    return out + ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]


def kinds(s: Summary) -> list:
    """Distinct failures: ((via, outcome, type, where), (count, first Result)), most first."""
    groups: dict = {}
    for r in s.results:
        for via, res in (("analyze_file", r.res), ("CLI", r.cli)):
            if res and res["outcome"] in FAILURES:
                key = (via, res["outcome"], res.get("type", ""), res.get("where", ""))
                c, first = groups.get(key, (0, r))
                groups[key] = (c + 1, first)
    return sorted(groups.items(), key=lambda kv: -kv[1][0])


def _gist(msg: str, case: Case) -> str:
    """A user error's message without the file name and numbers, to count alike ones."""
    msg = msg.replace(case.name, "FILE")
    msg = re.sub(r"\S*" + re.escape("FILE"), "FILE", msg)
    return re.sub(r"\b\d+\b", "N", msg)[:110]


def report_lines(s: Summary, show: int = 8) -> list:
    """The fuzz run as Markdown (also the section of bench.run's report)."""
    oc = s.outcomes
    peak = max((r.res.get("peak_mib", 0) for r in s.results), default=0)
    out = [f"{s.count} mutated logs (seed {s.seed}) through `gpumon.analyze.analyze_file` + "
           f"`to_text`/`to_json` in {s.secs:.0f} s: " +
           ", ".join(f"{k} {oc.get(k, 0)}" for k in OUTCOMES) + ". " +
           ("No traceback, hang or memory failure." if not s.failures else
            f"**{len(s.failures)} failing cases.**") +
           f" Largest peak RSS of a worker during one case: {peak:.0f} MiB.", ""]
    if s.bombs:
        out = out[:-1] + bomb_lines(s.bombs) + [""]
    per: dict = defaultdict(Counter)
    for r in s.results:
        for m in r.case.mutations + (["gzip"] if r.case.gz else []):
            per[m][r.res["outcome"]] += 1
        per[f"(base {r.case.base})"][r.res["outcome"]] += 1
    order = list(WHOLE) + list(MUTATIONS) + ["gzip"] + [f"(base {b})" for b in BASES]
    rows = [[m, sum(per[m].values())] + [per[m].get(o, 0) or "" for o in OUTCOMES]
            for m in order if m in per]
    rows.append(["**all**", len(s.results)] + [oc.get(o, 0) for o in OUTCOMES])
    out += _table(["mutation (a case has 1-3)", "cases"] + list(OUTCOMES), rows)
    ue = Counter(_gist(r.res.get("msg", ""), r.case) for r in s.results
                 if r.res["outcome"] == "user_error")
    if ue:
        out += ["", "Most common user errors: " + "; ".join(
            f"{c}x `{m}`" for m, c in ue.most_common(5)) + "."]
    cli = [r for r in s.results if r.cli]
    if cli:
        co = s.cli_outcomes
        out += ["", f"Command line (`python -m gpumon analyze`), {len(cli)} of the cases: " +
                ", ".join(f"{k} {co[k]}" for k in CLI_OUTCOMES if co.get(k)) + "."]
        pipes = [r for r in cli if r.case.cli in ("-", "/dev/stdin")]
        if pipes:
            out += ["Through a pipe (`cat FILE | python -m gpumon analyze ARG`): " + "; ".join(
                f"case {r.case.n} `{r.case.cli}` {r.cli['outcome']}"
                + (f" ({r.cli.get('type') or r.cli.get('msg', '')[:60]})"
                   if r.cli["outcome"] != "ok" else "") for r in pipes) + "."]
        noisy = [r for r in cli if r.cli["outcome"] == "noisy_stderr"]
        if noisy:
            out += [f"noisy_stderr: exit {noisy[0].cli['rc']} with more on stderr than one "
                    f"`gpumon:` line, e.g. case {noisy[0].case.n}: "
                    f"`{noisy[0].cli.get('msg', '')[:100]}`."]
    ks = kinds(s)
    if ks:
        out += ["", "Distinct failures (exception and innermost gpumon frame), each with its "
                "first case:", ""]
        rows = []
        for (via, outcome, typ, where), (c, r) in ks:
            res = r.res if via == "analyze_file" else r.cli
            msg = res.get("msg", "").replace("|", "/")[:90]
            rows.append([via, outcome, f"`{typ}`" if typ else "", f"`{where}`" if where else "",
                         c, f"{r.case.n} ({r.case.base}: {r.case.label}): {msg}",
                         f"`{r.case.repro}`"])
        out += _table(["via", "outcome", "type", "where", "cases", "first case", "reproduce"],
                      rows)
    fails = s.failures[:show]
    if fails:
        out += ["", f"First {len(fails)} failing cases:", ""]
        for r in fails:
            res = r.res if r.res["outcome"] in FAILURES else r.cli
            out.append(f"- case {r.case.n} ({r.case.base}: {r.case.label}): {res['outcome']} "
                       f"`{res.get('type', '')}` {res.get('msg', '')[:100]} "
                       f"[{res.get('where', '')}]: `{r.case.repro}`")
    return out


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m bench.fuzz_logs",
                                 description=__doc__.split("\n")[0])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--count", type=int, default=1000)
    ap.add_argument("--only", type=int, nargs="+", metavar="N",
                    help="run only these case numbers (prints their full tracebacks)")
    ap.add_argument("--keep", metavar="DIR", help="write the files to DIR and keep them")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--timeout", type=float, default=20.0, help="seconds per file (default 20)")
    ap.add_argument("--mem-headroom-mib", type=float, default=1536.0,
                    help="address space a worker may add to its size after warm-up (default "
                    "1536; pyarrow's reservations alone are ~1.7 GiB, so no absolute limit)")
    ap.add_argument("--max-rss-mib", type=float, default=1024.0,
                    help="peak RSS over which a case counts as a memory failure (default 1024)")
    ap.add_argument("--show", type=int, default=8, help="failing cases listed (default 8)")
    ap.add_argument("--no-bombs", action="store_true", help="leave out the memory bombs")
    ap.add_argument("--bombs-only", action="store_true",
                    help="run the memory bombs only, not the mutated logs")
    ap.add_argument("--bomb-scale", type=float, default=1.0, help=argparse.SUPPRESS)
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    return ap


def fuzz(seed: int = 0, count: int = 1000, log: Callable = print,
         bombs: bool = True) -> Summary:
    """A whole run with the default settings (bench.run's section): the mutated logs, then
    the memory bombs."""
    args = parser().parse_args(["--seed", str(seed), "--count", str(count)])
    args.progress = True
    s = run_cases([make_case(seed, n) for n in range(count)], args, log)
    if bombs:
        s.bombs = run_bombs(args, log)
    return s


def main(argv=None) -> int:
    args = parser().parse_args(argv)
    if args.worker:
        return worker_main(args.timeout, args.mem_headroom_mib, args.max_rss_mib)
    args.keep = os.path.abspath(args.keep) if args.keep else None
    nums = args.only if args.only else range(0 if args.bombs_only else args.count)
    cases = [make_case(args.seed, n) for n in nums]
    args.progress = not args.only
    print(f"fuzz: {len(cases)} cases, seed {args.seed}, {args.workers} workers, "
          f"{args.timeout:g} s per file", flush=True)
    s = run_cases(cases, args)
    s.bombs = [] if args.only or args.no_bombs else run_bombs(args, scale=args.bomb_scale)
    for r in (s.results if args.only else []):
        print(f"\ncase {r.case.n}: {r.case.base} {r.case.label}"
              + (f" (kept: {os.path.join(args.keep, r.case.name)})" if args.keep else ""))
        print(json.dumps({k: v for k, v in r.res.items() if k != "tb"}))
        if r.res.get("tb"):
            print(r.res["tb"].rstrip())
        if r.cli:
            print("command line:", json.dumps({k: v for k, v in r.cli.items() if k != "stderr"}))
            if r.cli.get("stderr"):
                print(r.cli["stderr"].rstrip())
    print()
    print("\n".join(report_lines(s, args.show)))
    print(f"\nfuzz: {len(cases)} cases and {len(s.bombs)} memory bombs in {s.secs:.1f} s; "
          f"{'OK' if s.ok else f'{len(s.failures) + len(s.bomb_failures)} FAILING'}")
    return 0 if s.ok else 1


if __name__ == "__main__":
    sys.exit(main())
