"""Readers of /proc for the benchmark: a process tree's CPU time and a process's peak RSS.

CPU time is read two ways: ``utime + stime`` from /proc/<pid>/stat (clock ticks, 10 ms here,
dead threads and reaped children included) and the sum of every live thread's run time from
/proc/<pid>/task/<tid>/schedstat (nanoseconds). Over a span of a few seconds a cheap monitor
uses a handful of ticks, so the nanosecond figure is the one reported; the tick figure checks
it (a thread that exits inside the span would make the nanosecond sum fall short).
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Optional

CLK_TCK = os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class CpuTimes:
    """CPU seconds used so far by a process tree (user + system)."""
    ticks_s: float          # utime+stime (+ reaped children) from /proc/<pid>/stat
    exact_s: Optional[float]  # live threads' schedstat run time; None where schedstat is absent
    pids: int               # processes counted


def _stat_fields(pid: int) -> list[str]:
    """Fields of /proc/<pid>/stat after the command name (field 3, the state, is [0])."""
    with open(f"/proc/{pid}/stat", "rb") as f:
        text = f.read().decode("ascii", "replace")
    return text[text.rindex(")") + 2:].split()


def ppid_of(pid: int) -> int:
    return int(_stat_fields(pid)[1])


def children_map() -> dict[int, list[int]]:
    """Every process's live children, from one scan of /proc."""
    kids: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            ppid = ppid_of(int(name))
        except (OSError, ValueError, IndexError):
            continue  # gone while scanning
        kids.setdefault(ppid, []).append(int(name))
    return kids


def tree_pids(root: int) -> list[int]:
    """``root`` and its live descendants."""
    kids = children_map()
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo.extend(kids.get(pid, ()))
    return out


def _proc_ticks(pid: int) -> tuple[int, int]:
    """(own utime+stime, reaped children's cutime+cstime) in clock ticks."""
    f = _stat_fields(pid)
    # utime, stime, cutime, cstime: fields 14-17 of proc(5); [11:15] here.
    return int(f[11]) + int(f[12]), int(f[13]) + int(f[14])


def _proc_exact_ns(pid: int) -> Optional[int]:
    total = 0
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return None
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/schedstat", "rb") as f:
                total += int(f.read().split()[0])
        except (OSError, ValueError, IndexError):
            if not os.path.exists(f"/proc/{pid}/task/{tid}"):
                continue  # thread ended while reading
            return None   # no schedstat on this kernel
    return total


def tree_cpu(root: int, tree: bool = True) -> CpuTimes:
    """CPU seconds of ``root`` and its live descendants (reaped children via cutime/cstime);
    of ``root`` alone with ``tree=False``."""
    ticks = 0
    exact: Optional[int] = 0
    n = 0
    for pid in (tree_pids(root) if tree else [root]):
        try:
            own, reaped = _proc_ticks(pid)
        except (OSError, ValueError, IndexError):
            continue
        e = _proc_exact_ns(pid)
        ticks += own + reaped
        n += 1
        if exact is not None:
            exact = None if e is None else exact + e + reaped * 1_000_000_000 // CLK_TCK
    if n == 0:
        raise ProcessLookupError(root)
    return CpuTimes(ticks_s=ticks / CLK_TCK, exact_s=None if exact is None else exact / 1e9,
                    pids=n)


def status_kib(pid: int, key: str) -> Optional[int]:
    """A ``kB`` line of /proc/<pid>/status (VmHWM, VmRSS, ...), in KiB; None if absent."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def peak_rss_mib(pid: int) -> Optional[float]:
    """Peak resident set (VmHWM) of one process, MiB."""
    kib = status_kib(pid, "VmHWM")
    return None if kib is None else kib / 1024.0


def alive(pid: int) -> bool:
    try:
        return _stat_fields(pid)[0] not in ("Z", "X")
    except (OSError, IndexError):
        return False
