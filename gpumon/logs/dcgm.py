"""DCGM logs: ``dcgmi dmon -e ...`` output and CSV exports of DCGM fields.

``dcgmi dmon``: a header line ``#Entity  GPUTL  POWER ...`` (the fields' short names) and a
units line (``ID  ...  W``), both again every few polls; rows ``GPU 0  45  120.345 ...``,
``N/A`` for a blank value. Rows of other entities (MIG instances ``GPU-I 1``, ``GPU-CI 2``,
NVSwitches) are not GPUs and are left out, with a note; a log of GPU instances alone reads
them as its GPUs. dmon writes no time: each GPU's rows are ``interval`` apart (dmon's ``-d``;
1 s by default), and a note says so, unless a pipe put a time stamp before each line (epoch
seconds, or an ISO 8601 date-time as ``ts '%Y-%m-%d %H:%M:%S'`` writes it).

A CSV: a header of DCGM field names, short (``GPUTL``) or long (``DCGM_FI_DEV_GPU_UTIL``), an
entity column (``EntityId``, or a GPU column by the plain logs' names; cells ``0``,
``GPU 0`` or ``gpu:0``) and a time column where there is one (``TimeStamp``: epoch seconds,
milliseconds or microseconds, which a note names, or ISO date-times).

Utilization is GPUTL (a percent); without it, GRACT (the share of time the graphics engine
was busy, a 0-1 fraction) times 100, as a duty; a note says which. POWER, EPLMT, SMCLK, SMMAX,
DVCCTR (the clock event reasons, NVML's bits) and FBUSD are the power, its limit, the SM
clock, its maximum, the clock events and the memory used. SMACT, SMOCC, TENSO, DRAMA
and GRACT (0-1 fractions, never percents) go to ``log.gpm``. Parsed with the standard
library: DCGM logs are seconds to hours of a few fields.
"""
from __future__ import annotations

import csv
import math
import re
from datetime import datetime, timezone
from typing import Optional

import numpy as np

from gpumon.detect.bins import SampleCols
from gpumon.errors import UserError
from gpumon.logs.lines import Lines
from gpumon.logs.log import Log, empty_samples, finish, gpu_index, row_times
from gpumon.logs.columns import find_role, plain_key

# DCGM field short name -> detector column.
FIELDS = {"GPUTL": "util", "POWER": "power", "EPLMT": "power_limit", "SMCLK": "clock",
          "SMMAX": "clock_max", "DVCCTR": "events", "FBUSD": "mem"}
# DCGM profiling fields, 0-1 fractions -> their name in Log.gpm.
FRACTIONS = {"GRACT": "gr_active_ratio", "SMACT": "sm_active_ratio",
             "SMOCC": "sm_occupancy_ratio", "TENSO": "tensor_active_ratio",
             "DRAMA": "dram_active_ratio"}
# Long names (DCGM_FI_*) of the fields read, as exports and dcgm-exporter write them.
LONG_NAMES = {"DCGM_FI_DEV_GPU_UTIL": "GPUTL", "DCGM_FI_DEV_POWER_USAGE": "POWER",
              "DCGM_FI_DEV_ENFORCED_POWER_LIMIT": "EPLMT", "DCGM_FI_DEV_SM_CLOCK": "SMCLK",
              "DCGM_FI_DEV_MAX_SM_CLOCK": "SMMAX",
              "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS": "DVCCTR",
              "DCGM_FI_DEV_CLOCKS_EVENT_REASONS": "DVCCTR",
              "DCGM_FI_DEV_FB_USED": "FBUSD", "DCGM_FI_PROF_GR_ENGINE_ACTIVE": "GRACT",
              "DCGM_FI_PROF_SM_ACTIVE": "SMACT", "DCGM_FI_PROF_SM_OCCUPANCY": "SMOCC",
              "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE": "TENSO", "DCGM_FI_PROF_DRAM_ACTIVE": "DRAMA"}
READ = (*FIELDS, *FRACTIONS)
# The entity column of a CSV export (plain_key form), besides the plain logs' GPU names.
ENTITY = ("entityid", "entity_id", "entity", "gpuid")
# What dmon prints when Ctrl-C stops it (sic).
STOPPED = "dmon was stopped"
# Epoch times in milliseconds and microseconds are above these (seconds reach them in the
# year 5138 and 33658, past RANGES["time"]).
MS_ABOVE, US_ABOVE = 1e11, 1e14
# An entity cell: its kind (GPU, GPU-I, GPU-CI, Switch...) and index: "GPU 0", "gpu:0".
_ENTITY = re.compile(r"^([A-Za-z][A-Za-z-]*?)[\s:_-]*(\d+)$")
# Entities read as GPUs, in order of preference: the GPUs, else (a log of MIG instances
# only) the GPU instances.
READ_ENTITIES = ("GPU", "GPU-I")
# A GPU named by its UUID (dcgm-exporter's `UUID` label, some exports' entity column).
_UUID = re.compile(r"^GPU-[0-9A-Fa-f]{8}(-[0-9A-Fa-f]{4}){3}-[0-9A-Fa-f]{12}$")


def short_name(name: str) -> Optional[str]:
    """The DCGM short name of a column name read here (``GPUTL``, ``dcgm_fi_dev_gpu_util``,
    ``GPUTL (%)``), or None."""
    n = re.sub(r"\s*[\[(].*?[\])]\s*$", "", name.strip()).upper()
    n = LONG_NAMES.get(n, n)
    return n if n in READ else None


def csv_columns(header: str) -> Optional[dict]:
    """For a CSV header line of DCGM fields: {"gpu": index or None, "time": index or None,
    short name: index}; None unless it names a utilization (GPUTL or GRACT) and an entity or
    time column."""
    try:
        names = next(csv.reader([header]), [])
    except csv.Error:
        return None
    keys = [plain_key(n) for n in names]
    entity = next((keys.index(k) for k in ENTITY if k in keys), None)
    out: dict = {"gpu": entity if entity is not None else find_role(names, "gpu"),
                 "time": find_role(names, "time")}
    for i, n in enumerate(names):
        s = short_name(n)
        if s is not None and s not in out:
            out[s] = i
    if ("GPUTL" in out or "GRACT" in out) and (out["gpu"] is not None
                                                or out["time"] is not None):
        return out
    return None


class _Rows:
    """The rows read so far: entity kind and index, time, the fields' values, the kept
    lines."""

    def __init__(self):
        self.entity: list[str] = []
        self.gpu: list = []
        self.time: list = []
        self.vals: dict[str, list] = {s: [] for s in READ}
        self.where: list[int] = []
        self.seen = set()         # the fields any header named
        self.notes: list[str] = []    # what reading them assumed
        self.uuids: dict[str, int] = {}   # GPUs named by UUID -> their index here

    def add(self, k: int, entity: str, gpu: float, t: float, vals: dict) -> None:
        self.entity.append(entity)
        self.gpu.append(gpu)
        self.time.append(t)
        for s, col in self.vals.items():
            col.append(vals.get(s, math.nan))
        self.where.append(k)


def read(lines: Lines, path: str, kind: str, interval: Optional[float]) -> Log:
    rows = _Rows()
    if kind == "dcgm-dmon":
        timed = _dmon_rows(lines, rows)
    else:
        timed = _csv_rows(lines, rows, path)
    if not rows.where:
        return Log(path, kind, empty_samples(), malformed=lines.malformed)
    return _log(rows, lines, path, kind, None if timed else interval or 1.0)


def _cell(text: str) -> float:
    """A value as DCGM writes it: a number, or N/A (blank) or nothing: NaN. ValueError
    otherwise."""
    text = text.strip()
    if not text or text.upper() == "N/A":
        return math.nan
    return float(text)


def _dmon_rows(lines: Lines, rows: _Rows) -> bool:
    """dmon's lines into ``rows``; whether they carry times (a stamp put before each line,
    as ``date +%s`` or ``ts '%Y-%m-%d %H:%M:%S'`` in a pipe write it)."""
    names: Optional[list[str]] = None
    timed = False
    for k, line in enumerate(lines.text_lines()):
        words = line.split()
        if not words or "ID" in words[:3] or STOPPED in line:
            continue                                # (the units line; dmon's last words)
        mark = next((i for i, w in enumerate(words) if w.startswith("#")), None)
        if mark is not None:
            head = " ".join(words[mark:]).lstrip("#").split()
            if head and head[0].lower() == "entity":
                names = head[1:]
                rows.seen.update(names)
            continue
        try:
            timed |= _dmon_row(k, words, names, rows)
        except (ValueError, OverflowError):
            lines.malformed.add(int(lines.line_of([k])[0]))
    return timed


def _dmon_row(k: int, words: list[str], names: Optional[list[str]], rows: _Rows) -> bool:
    """One data line of dmon (``GPU 0  v1 v2 ...``, perhaps after a time stamp) into
    ``rows``; whether it had a stamp. ValueError when it is not one under a header."""
    if names is None or len(words) < len(names) + 2:
        raise ValueError(words)
    p = len(words) - len(names) - 2                 # (the words of a stamp before it)
    if not words[p][:1].isalpha():
        raise ValueError(words)
    t = _stamp(" ".join(words[:p])) if p else math.nan
    vals = {n: _cell(v) for n, v in zip(names, words[p + 2:]) if n in rows.vals}
    rows.add(k, words[p].upper(), float(int(words[p + 1])), t, vals)
    return p > 0


def _csv_rows(lines: Lines, rows: _Rows, path: str) -> bool:
    """A CSV export's rows; whether it has a time column."""
    texts = lines.text_lines()
    header = texts[0] if texts else ""
    at = csv_columns(header)
    if at is None:
        raise UserError(f"{path}: no DCGM fields with a GPU or time column in its header")
    width = len(next(csv.reader([header])))
    rows.seen.update(s for s in at if s in rows.vals)
    if at["gpu"] is None:
        rows.notes.append("no entity (GPU) column: read as one GPU, GPU 0")
    for k in range(1, len(texts)):
        if texts[k] == header:
            continue                                # (exports joined: the header again)
        try:
            # (A line at a time: a quote left open takes no other line with it.)
            cells = next(csv.reader([texts[k]]), [])
            if len(cells) != width:
                raise ValueError(texts[k])
            _csv_row(k, cells, at, rows)
        except (ValueError, OverflowError, csv.Error):
            lines.malformed.add(int(lines.line_of([k])[0]))
    return at["time"] is not None


def _csv_row(k: int, cells: list[str], at: dict, rows: _Rows) -> None:
    entity, gpu = _entity(cells[at["gpu"]], rows.uuids) if at["gpu"] is not None else (
        "GPU", 0.0)
    t = _stamp(cells[at["time"]]) if at["time"] is not None else math.nan
    rows.add(k, entity, gpu, t, {s: _cell(cells[i]) for s, i in at.items() if s in rows.vals})


def _entity(text: str, uuids: dict) -> tuple[str, float]:
    """An entity cell's kind and index: ``0`` and ``GPU 0`` or ``gpu:0`` are GPU 0,
    ``GPU-I 1`` GPU instance 1, a GPU's UUID the GPU numbered by first appearance in
    ``uuids``; ValueError for no entity at all."""
    text = text.strip()
    if _UUID.match(text):
        return "GPU", float(uuids.setdefault(text, len(uuids)))
    m = _ENTITY.match(text)
    if m:
        return m.group(1).upper(), float(m.group(2))
    return "GPU", float(text)


def _stamp(text: str) -> float:
    """Epoch seconds of a time cell: a number (its unit decided for the whole log, see
    _epoch) or an ISO 8601 date-time (UTC unless it says otherwise)."""
    try:
        return _cell(text)
    except ValueError:
        d = datetime.fromisoformat(text.strip())
        if d.tzinfo is None:
            d = d.replace(tzinfo=timezone.utc)
        return d.timestamp()


def _epoch(t: np.ndarray, notes: list) -> np.ndarray:
    """Epoch times in seconds: a log's numbers in milliseconds or microseconds (DCGM's own
    timestamps) divided down, with a note."""
    finite = t[np.isfinite(t)]
    if not len(finite):
        return t
    mid = float(np.median(finite))
    for above, unit, div in ((US_ABOVE, "microseconds", 1e6), (MS_ABOVE, "milliseconds", 1e3)):
        if mid > above:
            notes.append(f"times in {unit} since the epoch: read as seconds")
            return t / div
    return t


def _log(rows: _Rows, lines: Lines, path: str, kind: str, step: Optional[float]) -> Log:
    """The read rows as detector columns (``step``: seconds between a GPU's rows, for a log
    without times; None when it has them)."""
    notes: list[str] = list(rows.notes)
    if rows.uuids:
        notes.append(f"GPUs named by UUID: numbered 0 to {len(rows.uuids) - 1} in the order "
                     "they first appear")
    rows = _entities(rows, notes)
    gpu, bad = gpu_index(np.array(rows.gpu, float))
    cols = {s: np.array(v, float) for s, v in rows.vals.items()}
    if step is not None:
        t = row_times(gpu, step)
        notes.append(f"no time column: each GPU's rows read as {step:g} s apart "
                     "(analyze --interval S to change)")
    else:
        t = _epoch(np.array(rows.time, float), notes)
    util = _util(cols, rows.seen, notes)
    samples = SampleCols(t, gpu, util, **{c: _col(cols, rows.seen, s)
                                          for s, c in FIELDS.items() if c != "util"})
    gpm = {name: cols[s] for s, name in FRACTIONS.items() if s in rows.seen} or None
    log = Log(path, kind, samples, None, None, {}, lines.malformed, len(rows.where), notes,
              gpm=gpm)
    kept = np.array(rows.where, np.int64)
    return finish(log, bad, lambda r: lines.line_of(kept[r]))


def _entities(rows: _Rows, notes: list) -> _Rows:
    """The rows of the GPUs (or, in a log of MIG instances only, of the GPU instances); the
    others (MIG instances beside their GPU, NVSwitches) left out, with a note."""
    kinds = set(rows.entity)
    keep = next((e for e in READ_ENTITIES if e in kinds), None)
    if keep == "GPU-I":
        notes.append("no GPU rows: MIG GPU instances (GPU-I) read as GPUs, by instance id")
    if kinds <= {keep}:
        return rows
    take = [i for i, e in enumerate(rows.entity) if e == keep]
    notes.append(f"{len(rows.entity) - len(take)} row(s) of other DCGM entities (MIG "
                 "instances, NVSwitches) left out")
    out = _Rows()
    out.seen, out.notes = rows.seen, rows.notes
    for name in ("entity", "gpu", "time", "where"):
        setattr(out, name, [getattr(rows, name)[i] for i in take])
    out.vals = {s: [v[i] for i in take] for s, v in rows.vals.items()}
    return out


def _col(cols: dict, seen: set, short: str) -> Optional[np.ndarray]:
    return cols[short] if short in seen else None


def _util(cols: dict, seen: set, notes: list) -> np.ndarray:
    """GPUTL (%) where the log has values of it; else GRACT (a 0-1 fraction) x 100."""
    util = cols["GPUTL"]
    if "GPUTL" in seen and not np.isnan(util).all():
        notes.append("utilization: GPUTL (DCGM_FI_DEV_GPU_UTIL, %)")
        return util
    if "GRACT" in seen:
        notes.append("utilization: GRACT (graphics engine active, a 0-1 fraction) x 100, "
                     "as a duty: no GPUTL values")
        return cols["GRACT"] * 100.0
    return util
