"""``nvidia-smi``'s own screen, appended again and again: ``nvidia-smi -l 1 > log``, or a loop of
``nvidia-smi >> log``. Each screen starts with its date (``Tue Oct 29 19:11:46 2024``, whole
seconds); each GPU is a block of lines in its table, the first naming its index and bus, the
second holding ``Pwr:Usage/Cap``, ``Memory-Usage`` and ``GPU-Util`` (the layout of every
driver since 2015; ``N/A`` is missing); the processes table lists the PIDs on each GPU.

A loop without a sleep writes several screens within one second: they are spread evenly over
it (the k-th of n at k + (i + 0.5) / n), the order they were written in. Dates are local time
without a zone, read as nvidia-smi's CSV stamps are."""
from __future__ import annotations

import datetime as dt
import math
import re
from typing import Optional

import numpy as np

from gpumon.detect.bins import SampleCols
from gpumon.logs.lines import Lines
from gpumon.logs.log import MAX_GPU_INDEX, Log, finish

# A screen's first line: its date (a `watch` header may stand before it).
DATE = re.compile(r"(?:^|\s)([A-Z][a-z]{2} [A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d \d{4})\s*$")
# A GPU block's first line: "|   0  NVIDIA L40S   On  |   00000000:4A:00.0 Off | ...".
GPU = re.compile(r"^\|\s*(\d+)\s.*\|\s*[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.\d")
POWER = re.compile(r"(\d+(?:\.\d+)?|N/A)\s*W?\s*/\s*(\d+(?:\.\d+)?|N/A)\s*W")
MEMORY = re.compile(r"(\d+)\s*MiB\s*/\s*\d+\s*MiB")
UTIL = re.compile(r"^\s*(\d+)\s*%")
# What nvidia-smi prints in a GPU's line when the driver cannot reach it.
LOST = "GPU is lost"
# A processes-table row: GPU, [GI CI,] PID, type.
PROC = re.compile(r"^\|\s+(\d+)\s+(?:(?:N/A|\d+)\s+(?:N/A|\d+)\s+)?(\d+)\s+(?:C|G|M|C\+G|M\+C)\s")


class _Screens:
    """The samples of the screens read so far, and the screen being read."""

    def __init__(self):
        # [time (s), gpu, util, power, limit, mem, has_pid, screen number]
        self.rows: list[list] = []
        self.where: list[int] = []      # line index of each row (for malformed counts)
        self.seconds: list[tuple[float, int, int]] = []   # (second, first row, screens)
        self.cur: Optional[float] = None
        self.first = 0
        self.procs: set[int] = set()
        self.pids: dict[int, set] = {}
        self.lost: dict[int, list] = {}    # gpu -> dates of the screens that said it is lost

    def start(self, t: float) -> None:
        self.end()
        if self.seconds and self.seconds[-1][0] == t:
            s, r0, n = self.seconds[-1]
            self.seconds[-1] = (s, r0, n + 1)
        else:
            self.seconds.append((t, len(self.rows), 1))
        self.cur, self.first, self.procs = t, len(self.rows), set()

    def end(self) -> None:
        """The screen is complete: its GPUs with a process listed have one."""
        for r in self.rows[self.first:]:
            r[6] = 1.0 if r[1] in self.procs else 0.0
        self.first = len(self.rows)

    def screen_of_row(self) -> np.ndarray:
        """Each row's time: its second plus its screen's place among that second's screens."""
        t = np.array([r[0] for r in self.rows], dtype=float)
        bounds = [r0 for _, r0, _ in self.seconds] + [len(self.rows)]
        for (s, r0, n), r1 in zip(self.seconds, bounds[1:]):
            if n > 1 and r1 > r0:      # (screens of a second can have no GPU rows at all)
                # Screens of one second in order: their rows' times repeat the screen's index.
                k = np.array([r[7] for r in self.rows[r0:r1]])
                t[r0:r1] = s + (k - k[0] + 0.5) / n
            else:
                t[r0:r1] = s + 0.5
        return t


def read(lines: Lines, path: str) -> Log:
    sc = _Screens()
    nscreen = 0
    pending: Optional[int] = None       # the GPU whose metrics line comes next
    procs = False
    for k, line in enumerate(lines.text_lines()):
        if not line.startswith("|"):
            m = DATE.search(line)
            if m:
                t = _date(m.group(1))
                if t is not None:
                    nscreen += 1
                    sc.start(t)
                    procs, pending = False, None
            continue
        if sc.cur is None:
            continue
        if pending is not None:
            row = _metrics(line, pending)
            if row is None and LOST in line:
                sc.lost.setdefault(pending, []).append(sc.cur)
            elif row is None:
                lines.malformed.add(int(lines.line_of([k])[0]))
            else:
                sc.rows.append([sc.cur, pending, *row, math.nan, nscreen])
                sc.where.append(k)
            pending = None
            continue
        if line.startswith("| Processes"):
            procs = True
            continue
        if procs:
            m = PROC.match(line)
            if m:
                g, pid = int(m.group(1)), int(m.group(2))
                sc.procs.add(g)
                sc.pids.setdefault(g, set()).add(pid)
            continue
        m = GPU.match(line)
        if m and int(m.group(1)) <= MAX_GPU_INDEX:
            pending = int(m.group(1))
    sc.end()
    return _log(sc, lines, path, nscreen)


def _log(sc: _Screens, lines: Lines, path: str, nscreen: int) -> Log:
    arr = np.array([r[:7] for r in sc.rows], dtype=float).reshape(-1, 7)
    if len(sc.rows):
        arr[:, 0] = sc.screen_of_row()
    samples = SampleCols(arr[:, 0], arr[:, 1].astype(np.int64), arr[:, 2], arr[:, 3],
                         arr[:, 4], None, None, None, arr[:, 5], arr[:, 6])
    notes = [_lost_note(g, ts) for g, ts in sorted(sc.lost.items())]
    many = sum(1 for _, _, n in sc.seconds if n > 1)
    if many:
        notes.append(f"{nscreen} screens with whole-second dates: the screens of one second "
                     "spread evenly over it")
    log = Log(path, "nvidia-smi-screen", samples, None, None,
              {g: tuple(sorted(p)) for g, p in sc.pids.items()}, lines.malformed, len(sc.rows),
              notes)
    kept = np.array(sc.where, dtype=np.int64)
    return finish(log, np.zeros(len(sc.rows), bool), lambda r: lines.line_of(kept[r]))


def _lost_note(gpu: int, times: list) -> str:
    """What a user needs to hear of screens that said 'GPU is lost'."""
    a, b = (dt.datetime.fromtimestamp(t, dt.timezone.utc).strftime("%H:%M:%S")
            for t in (min(times), max(times)))
    return (f"GPU {gpu}: 'GPU is lost' in {len(times)} screens ({a} to {b}): the driver could "
            "not reach it (fallen off the bus, Xid 79, or a driver fault; see dmesg): no "
            "samples for it there")


def _metrics(line: str, gpu: int) -> Optional[tuple]:
    """(util %, power W, limit W, memory MiB) from a GPU block's second line, NaN where N/A;
    None when it is not one."""
    cells = line.split("|")
    if len(cells) < 4:
        return None
    u = UTIL.match(cells[3])
    if not u and "N/A" not in cells[3]:
        return None
    p = POWER.search(cells[1])
    m = MEMORY.search(cells[2])
    return (float(u.group(1)) if u else math.nan, _num(p.group(1)) if p else math.nan,
            _num(p.group(2)) if p else math.nan, float(m.group(1)) if m else math.nan)


def _num(x: str) -> float:
    return math.nan if x == "N/A" else float(x)


def _date(s: str) -> Optional[float]:
    try:
        d = dt.datetime.strptime(" ".join(s.split()), "%a %b %d %H:%M:%S %Y")
    except ValueError:
        return None
    return d.replace(tzinfo=dt.timezone.utc).timestamp()
