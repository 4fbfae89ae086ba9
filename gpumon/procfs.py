"""Per-process readings straight from Linux's /proc: one read of /proc/PID/stat gives a
process's CPU time, resident memory, parent and start, where psutil reads two files and builds
objects (about twice the cost: 64 processes a tick were 1.6 ms with psutil, 0.76 ms here).

Only what is read every tick is here; what is read once per process (name, user, command
line) stays with psutil. Each reader returns None where the process is gone (or its PID
belongs to another process now: compare ``start_ticks``) and raises PermissionError where
/proc hides it.
"""
from __future__ import annotations

import os
from typing import NamedTuple, Optional

# /proc/PID/stat counts CPU time in clock ticks and memory in pages.
CLK_TCK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
PAGE_BYTES = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
_MIB = 1048576.0
# A stat file is read in one call: its 52 fields take about 350 bytes (a 64-byte name, every
# counter at 20 digits: under 1.2 KB).
STAT_MAX_BYTES = 4096


class ProcStat(NamedTuple):
    """One reading of /proc/PID/stat."""
    ppid: int
    cpu_s: float         # user + system CPU seconds so far (this process's own threads)
    rss_mib: float       # resident memory, MiB
    start_ticks: int     # start after boot, clock ticks: a reused PID has another


def available() -> bool:
    """Whether this system has Linux's /proc (macOS and the BSDs do not)."""
    return os.path.exists("/proc/self/stat")


def _fields(path: str) -> Optional[list[bytes]]:
    """Fields of a stat file after the command name (the state is [0]); None if gone."""
    try:
        fd = os.open(path, os.O_RDONLY)      # (half the cost of open(): no buffered file)
    except (FileNotFoundError, ProcessLookupError):
        return None
    try:
        data = os.read(fd, STAT_MAX_BYTES)
    except ProcessLookupError:               # (ESRCH: the process ended after the open)
        return None
    finally:
        os.close(fd)
    # The name may hold spaces and parentheses: it ends at the last ")".
    return data[data.rfind(b")") + 2:].split()


def read_stat(pid: int) -> Optional[ProcStat]:
    """The process's counters now; None if it is gone (or a zombie, exited, not reaped)."""
    f = _fields(f"/proc/{pid}/stat")
    # Fields 14, 15, 22, 24 of proc(5) (utime, stime, starttime, rss) are [11, 12, 19, 21].
    if f is None or len(f) < 22 or f[0] in (b"Z", b"X"):
        return None
    return ProcStat(int(f[1]), (int(f[11]) + int(f[12])) / CLK_TCK,
                    int(f[21]) * PAGE_BYTES / _MIB, int(f[19]))


def thread_cpu(pid: int) -> Optional[dict[int, float]]:
    """{thread id: CPU seconds} of the process's live threads; None if it is gone."""
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except (FileNotFoundError, ProcessLookupError):
        return None
    out = {}
    for tid in tids:
        f = _fields(f"/proc/{pid}/task/{tid}/stat")
        if f is not None and len(f) > 12:      # a thread that ended meanwhile is skipped
            out[int(tid)] = (int(f[11]) + int(f[12])) / CLK_TCK
    return out


class DiskCounters:
    """Bytes read and written so far by the machine's disks, from /proc/diskstats.

    A disk counts as psutil counts it: a whole device (a name under /sys/block, virtual ones
    included), not its partitions, whose I/O the device already counts. Which names are
    whole devices is looked up once per name (psutil looks at /sys for every disk at every
    call, most of its cost)."""

    # /proc/diskstats counts in 512-byte sectors whatever the device's own sector size.
    SECTOR_BYTES = 512

    def __init__(self, path: str = "/proc/diskstats", sys_block: str = "/sys/block"):
        self.path, self.sys_block = path, sys_block
        self._whole: dict[bytes, bool] = {}

    def read(self) -> Optional[tuple[int, int]]:
        """(bytes read, bytes written) by every whole disk; None without /proc/diskstats."""
        try:
            with open(self.path, "rb") as f:
                lines = f.read().splitlines()
        except OSError:
            return None
        rd = wr = 0
        for line in lines:
            f = line.split()
            # major minor name reads merged sectors-read ms writes merged sectors-written ...
            if len(f) < 10 or not self._is_whole(f[2]):
                continue
            rd += int(f[5])
            wr += int(f[9])
        return rd * self.SECTOR_BYTES, wr * self.SECTOR_BYTES

    def _is_whole(self, name: bytes) -> bool:
        whole = self._whole.get(name)
        if whole is None:
            path = os.path.join(self.sys_block, name.decode(errors="replace").replace("/", "!"))
            whole = self._whole[name] = os.path.exists(path)
        return whole
