"""Which columns of a plain log are its time, GPU, utilization, power and memory.

By name: the known names first (PLAIN_*, in order of preference), then name patterns (a
time is a ``time``, ``stamp``, ``elapsed`` or ``sec``; a utilization a ``util``, ``usage``,
``load`` or a ``gpu``/``sm`` in percent; memory units and other devices ruled out). Without
a time column by name, the first column whose values increase, or that holds date-times, is
the time. Or as the user names them (``--columns time=elapsed_sec,util=gpu_util_pct``).

A wide log has one column per GPU per field, each name carrying a GPU prefix and maybe a
unit (``0 gpu_util %``, ``1 power_draw W``, ``gpu1_util``): each GPU's columns are read as
that GPU's samples, at the time of the row.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Optional

import numpy as np

from gpumon.errors import UserError

# Times before this are seconds since the log's start, not Unix epoch seconds (1973-03-03).
EPOCH_MIN = 1e8



def fractions(util: np.ndarray) -> bool:
    """Whether utilization values are fractions of 1, not percent: every value 0 to 1, some
    between (values of 0 and 1 alone are percent: an idle GPU)."""
    u = util[np.isfinite(util)]
    return bool(len(u) and u.max() <= 1.0 and ((u > 0) & (u < 1)).any())


# Plain CSV column names (units stripped, lower case), in order of preference.
PLAIN_TIME = ("time", "timestamp", "ts", "t", "epoch", "unix_time", "datetime", "date_time",
              "time_s", "seconds", "elapsed", "elapsed_s", "wall_time")
PLAIN_GPU = ("gpu", "gpu_index", "index", "gpu_id", "device", "device_index", "idx", "gpu_idx",
             "gpu_num", "device_id")
PLAIN_UTIL = ("util", "utilization", "gpu_util", "util_gpu", "util_gpu_pct", "utilization_gpu",
              "gpu_utilization", "utilization.gpu", "sm", "sm_util", "util_pct", "gpu_util_pct",
              "gpu_usage", "gpu_load", "gpu_util_percent", "utilization_gpu_pct",
              "gpu_utilization_pct", "gpu_utilization_percent", "gpu_usage_pct")
PLAIN_POWER = ("power", "power_w", "power_draw", "power.draw", "power_draw_w", "power_usage",
               "gpu_power", "gpu_power_w")
PLAIN_MEM = ("mem_used", "memory_used", "mem_used_mib", "memory.used", "memory_used_mib",
             "gpu_memory_used", "gpu_mem_used")
PLAIN_LIMIT = ("power_limit", "power_limit_w", "power.limit")

# The roles a column can have, and the names --columns gives them.
ROLES = ("time", "gpu", "util", "power", "power_limit", "mem")
_KNOWN = {"time": PLAIN_TIME, "gpu": PLAIN_GPU, "util": PLAIN_UTIL, "power": PLAIN_POWER,
          "power_limit": PLAIN_LIMIT, "mem": PLAIN_MEM}

# Name patterns, as sets of the words of a name (split at "_" and ".").
_TIME_WORDS = {"time", "timestamp", "stamp", "ts", "elapsed", "sec", "secs", "seconds",
               "epoch", "datetime", "date", "uptime", "walltime"}
_UTIL_WORDS = {"usage", "load", "busy"}      # with "gpu", "sm" or a percent
_PCT = {"%", "pct", "percent"}
_MEM_WORDS = {"mem", "memory", "fb", "vram"}
_MEM_UNITS = {"mib", "mb"}
# Words that make a utilization-like name some other reading.
_NOT_UTIL = (_MEM_WORDS | _MEM_UNITS | {"gib", "gb", "kib", "bytes", "enc", "dec", "encoder",
             "decoder", "cpu", "jpg", "ofa", "pcie", "w", "watts", "temp", "fan", "clock"})
_NOT_POWER = {"limit", "cap", "max", "min", "enforced", "default", "pct", "percent"}
_NOT_MEM = {"util", "utilization", "pct", "percent", "total", "free", "clock", "temp", "bw"}

_BRACKET = re.compile(r"\s*[\[(]([^\])]*)[\])]\s*$")
_TRAIL_UNIT = re.compile(r"\s+(%|w|mib|mb|mhz|s|ms|us|c)$")
_PREFIX = re.compile(r"^(?:gpu[\s_:.\-]?)?(\d{1,4})[\s_:.\-]+(?=[a-z])")
_SUFFIX = re.compile(r"^(.*?[a-z%])[\s_:.\-]+gpu[\s_]?(\d{1,4})$")
_STAMP = re.compile(r"^\d{4}[-/]\d\d[-/]\d\d([ T:]\d\d:\d\d(:\d\d)?)|^\d\d:\d\d:\d\d")
_NUMBER = re.compile(r"^[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?$")


@dataclass(frozen=True)
class Name:
    """A column name as matched: its GPU prefix (a wide log), words and unit."""
    gpu: Optional[int]
    key: str            # lower case, unit and prefix gone, spaces and dashes as "_"
    unit: str           # "%", "w", "mib", "s"... or ""

    @property
    def words(self) -> set:
        return set(w for w in re.split(r"[_.]", self.key) if w)


def parse_name(raw: str) -> Name:
    s = raw.strip().lstrip("#").strip().lower()
    unit = ""
    m = _BRACKET.search(s) or _TRAIL_UNIT.search(s)
    if m:
        unit, s = m.group(1).strip(), s[:m.start()]
    elif s.endswith("%"):
        unit, s = "%", s[:-1]
    gpu = None
    m = _PREFIX.match(s)
    if m:
        gpu, s = int(m.group(1)), s[m.end():]
    else:
        m = _SUFFIX.match(s)
        if m:
            gpu, s = int(m.group(2)), m.group(1)
    return Name(gpu, re.sub(r"[\s\-]+", "_", s.strip()).strip("_"), unit)


def plain_key(name: str) -> str:
    """A plain log's column name as matched: units gone, lower case, spaces as ``_``."""
    return parse_name(name).key


def _is_time(n: Name) -> bool:
    w = n.words
    return bool(w & _TIME_WORDS) or "time" in n.key or "stamp" in n.key


def _is_util(n: Name) -> bool:
    w = n.words
    if w & _NOT_UTIL or n.unit in _NOT_UTIL:
        return False
    if "util" in n.key or "utilisation" in w:
        return True
    gpu = bool(w & {"gpu", "sm"})
    pct = n.unit in _PCT or bool(w & _PCT)
    return (gpu and pct) or bool(w & _UTIL_WORDS and (gpu or pct))


def _is_power(n: Name) -> bool:
    w = n.words
    return bool(w & {"power", "pwr", "watts"}) and not w & _NOT_POWER and n.unit not in _PCT


def _is_mem(n: Name) -> bool:
    w = n.words
    if not w & _MEM_WORDS or w & _NOT_MEM or n.unit in _PCT:
        return False
    return bool(w & {"used", "usage"}) or n.unit in _MEM_UNITS or bool(w & _MEM_UNITS)


_PATTERN = {"time": _is_time, "util": _is_util, "power": _is_power, "mem": _is_mem}


def _role(cols: list, role: str, taken: set) -> Optional[int]:
    """The column of ``role`` among ``cols`` ((index, Name) pairs) not ``taken``: a known
    name (in order of preference), else the first whose name fits the role's pattern."""
    free = [(i, n) for i, n in cols if i not in taken]
    for k in _KNOWN[role]:
        for i, n in free:
            if n.key == k and not (role == "gpu" and n.unit in _PCT):
                return i
    test = _PATTERN.get(role)
    return None if test is None else next((i for i, n in free if test(n)), None)


def find_role(names: list[str], role: str) -> Optional[int]:
    """The column of ``role`` among ``names`` by its name alone (a known name, else the
    role's pattern); None if none fits."""
    return _role([(i, parse_name(h)) for i, h in enumerate(names)], role, set())


@dataclass
class Choice:
    """The columns a plain log is read from: ``at`` role -> column index (a long log: every
    role; a wide log: the shared time), ``per_gpu`` GPU -> {role -> index} (a wide log)."""
    at: dict
    per_gpu: dict = field(default_factory=dict)
    notes: list = field(default_factory=list)

    @property
    def readable(self) -> bool:
        return "util" in self.at or any("util" in c for c in self.per_gpu.values())

    def indices(self) -> list:
        out = list(self.at.values())
        for c in self.per_gpu.values():
            out += list(c.values())
        return sorted(set(out))


def choose(names: list[str], rows: list[list[str]]) -> Choice:
    """The columns of a log with these column names, its first rows ``rows`` (cells) to
    tell a time column by its values."""
    parsed = [(i, parse_name(h)) for i, h in enumerate(names)]
    shared = [(i, n) for i, n in parsed if n.gpu is None]
    groups: dict = {}
    for i, n in parsed:
        if n.gpu is not None:
            groups.setdefault(n.gpu, []).append((i, n))
    per_gpu = {}
    for g, cols in sorted(groups.items()):
        c = _roles(cols, ("util", "power", "power_limit", "mem"), set())
        if "util" in c:
            per_gpu[g] = c
    if per_gpu:
        ch = Choice(_roles(shared, ("time",), set()), per_gpu)
    else:
        ch = Choice(_roles(parsed, ("util", "time", "gpu", "power", "power_limit", "mem"),
                           set()))
    if "time" not in ch.at and ch.readable:
        t = time_by_content(rows, len(names), set(ch.indices()))
        if t is not None:
            ch.at["time"] = t
            ch.notes.append(f"column {names[t]!r} read as the time: its values increase")
    return ch


def _roles(cols: list, roles: tuple, taken: set) -> dict:
    out = {}
    for r in roles:
        i = _role(cols, r, taken)
        if i is not None:
            out[r] = i
            taken.add(i)
    return out


def time_by_content(rows: list[list[str]], width: int, taken: set) -> Optional[int]:
    """The first column not ``taken`` whose cells in ``rows`` are all date-times, or all
    numbers that never decrease and end higher than they start."""
    for i in range(width):
        cells = [r[i].strip() for r in rows if len(r) == width]
        if i not in taken and len(cells) >= 2 and _times(cells):
            return i
    return None


def _times(cells: list[str]) -> bool:
    if all(_STAMP.match(c) for c in cells):
        return True
    if not all(_NUMBER.match(c) for c in cells):
        return False
    v = [float(c) for c in cells]
    return v[-1] > v[0] and all(b >= a for a, b in zip(v, v[1:]))


# Seconds per unit of a time column whose name gives a unit smaller than the second.
TIME_UNITS = {"ms": 1e-3, "msec": 1e-3, "millis": 1e-3, "us": 1e-6, "usec": 1e-6,
              "micros": 1e-6, "ns": 1e-9}


def time_unit(name: str) -> Optional[str]:
    """The unit a time column's name gives (``time (ms)``, ``elapsed_ms``), when it is not
    the second; else None."""
    n = parse_name(name)
    last = re.split(r"[_.]", n.key)[-1] if n.key else ""
    return next((u for u in (n.unit, last) if u in TIME_UNITS), None)


def parse_option(text: str) -> dict:
    """``time=elapsed_sec,util=gpu_util_pct`` -> {"time": "elapsed_sec", ...}; a ValueError
    saying what is wrong."""
    out = {}
    for part in text.split(","):
        role, eq, name = part.partition("=")
        role = role.strip().lower()
        if not eq or not name.strip():
            raise ValueError(f"want ROLE=COLUMN, not {part.strip()!r}")
        if role in out:
            raise ValueError(f"{role} named twice")
        out[role] = name.strip()
    return check_roles(out)


def check_roles(columns: dict) -> dict:
    """``columns`` (role -> column name) as given, or a ValueError saying what is wrong."""
    for role, name in columns.items():
        if role not in ROLES:
            raise ValueError(f"{role!r} is not one of {', '.join(ROLES)}")
        if not isinstance(name, str) or not name.strip():
            raise ValueError(f"{role}: want a column name, not {name!r}")
    if "util" not in columns:
        raise ValueError("name the utilization column (util=COLUMN)")
    return dict(columns)


def named(names: list[str], columns: dict, path: str) -> Choice:
    """The Choice of the columns the user named (``columns``: role -> column name, matched
    exactly, then ignoring case, then as plain_key matches names)."""
    at = {}
    for role, want in columns.items():
        i = _find(names, want)
        if i is None:
            raise UserError(f"{path}: no column {want!r} for {role} (its columns: "
                            f"{seen(names)})")
        at[role] = i
    return Choice(at)


def _find(names: list[str], want: str) -> Optional[int]:
    for same in (lambda h: h.strip() == want, lambda h: h.strip().lower() == want.lower(),
                 lambda h: plain_key(h) == plain_key(want)):
        i = next((k for k, h in enumerate(names) if same(h)), None)
        if i is not None:
            return i
    return None


# Column names a refusal lists at most.
SEEN_NAMES = 16


def seen(names: list[str]) -> str:
    """The column names, for a message."""
    shown = ", ".join(repr(n.strip()) for n in names[:SEEN_NAMES])
    return shown + (f" and {len(names) - SEEN_NAMES} more" if len(names) > SEEN_NAMES else "")
