"""ReplaySource: a gpumon log (CSV, or JSON lines) played back in (scaled) real time.

The log is read by the one gpumon-CSV reader (gpumon.logs.gpumon_csv; a JSON-lines log first
becomes the CSV rows of the same polls, gpumon.logs.jsonl), rebuilt into Ticks and
handed out as their time comes, so the dashboard, the detector and any sink see a replay
exactly as they saw the live run (samples say ``source=replay``). The clock shown is the
log's. Malformed lines are skipped and counted (``self.bad``), as ``gpumon analyze`` does.
"""
from __future__ import annotations

import os
import time
from typing import Callable, Iterator, Optional

import numpy as np

from gpumon.errors import UserError
from gpumon.logs import gpumon_csv, jsonl
from gpumon.logs.lines import clean
from gpumon.logs.log import Malformed
from gpumon.logs.sniff import sniff
from gpumon.logs.source import display_name, read_bytes
from gpumon.logs.table import header
from gpumon.samples import GpuInfo, Tick


class ReplaySource:
    kind = "replay"

    def __init__(self, path: str, speed: float = 1.0,
                 clock: Callable[[], float] = time.monotonic):
        if not speed > 0:
            raise UserError(f"--speed must be above 0, not {speed:g}")
        self.path = path
        self.speed = speed
        self.clock = clock
        name = display_name(path)
        lines = clean(read_bytes(path))
        if sniff(lines.head(1)) == "gpumon-jsonl":
            lines, names = jsonl.as_csv(lines, name)
        else:
            names = header(lines)
        if not gpumon_csv.is_header(names):
            raise UserError(f"{name}: not a gpumon CSV log (its header does not start with "
                            "time,gpu,source) nor gpumon's JSON lines (log --format jsonl)")
        self._ticks: Iterator[Tick]
        self._ticks, cols = gpumon_csv.ticks(lines, names, source="replay")
        self.bad: Malformed = cols.body.malformed
        first = next(self._ticks, None)
        if first is None:
            raise UserError(f"{name}: no samples to replay")
        self._next: Optional[Tick] = first
        self._log_start = min(s.time for s in first.gpus)
        self._wall_start: Optional[float] = None
        self._last_time = self._log_start
        self._infos = self._infos_from(cols)

    @staticmethod
    def _infos_from(cols: gpumon_csv.Columns) -> list[GpuInfo]:
        """Every GPU of the whole log (its rows read, the malformed ones left out), with
        what its first row says: a log written through NVML holds one GPU's samples of a
        poll before the next GPU's, so its first tick may hold one GPU alone."""
        gpu = cols.num("gpu")
        ok = ~cols.bad & np.isfinite(gpu)
        index, first = np.unique(gpu[ok], return_index=True)
        rows = np.flatnonzero(ok)[first]

        def value(name: str, row: int) -> Optional[float]:
            v = float(cols.num(name)[row])
            return None if v != v else v
        # A GPU had GPM where the log holds SM activity of it (the screen's smact column).
        sm = ok & np.isfinite(cols.num("sm_active_ratio"))
        gpm = set(np.unique(gpu[sm]).tolist())
        return [GpuInfo(index=int(g), name="logged GPU", uuid="",
                        mem_total_mib=value("mem_total_mib", r),
                        power_limit_w=value("power_limit_w", r),
                        sm_clock_max_mhz=value("sm_clock_max_mhz", r),
                        supported=(("gpm", g in gpm),))
                for g, r in zip(index.tolist(), rows.tolist())]

    @property
    def name(self) -> str:
        return os.path.basename(self.path)

    @property
    def done(self) -> bool:
        """Every tick of the log has been handed out."""
        return self._next is None

    def gpu_infos(self) -> list[GpuInfo]:
        return list(self._infos)

    def _advance(self) -> Optional[Tick]:
        tick, self._next = self._next, next(self._ticks, None)
        return tick

    def _log_now(self) -> float:
        """The log's time the clock has reached (the first read starts the clock)."""
        now = self.clock()
        if self._wall_start is None:
            self._wall_start = now
        return self._log_start + (now - self._wall_start) * self.speed

    @property
    def behind(self) -> bool:
        """The next logged tick is due already: the clock ran past more than one tick since
        the last read (a fast replay, a slow poll). The Monitor then reads on at once."""
        return self._next is not None and self._next.time <= self._log_now()

    def read(self) -> Tick:
        """The next logged tick, as the live run got it: one per read, never several merged
        (a merged tick spans seconds the detector would judge only at its end, with one host
        sample for them all). None left: an empty tick."""
        self._log_now()
        if self._next is None:
            return Tick(time=self._last_time, gpus=())
        tick = self._advance()
        self._last_time = tick.time
        return tick

    def close(self) -> None:
        pass
