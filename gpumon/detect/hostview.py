"""The host as the rules read it: each rank's loader workers and main process, and storage,
over a job's windows (features.py's host columns)."""
from __future__ import annotations

from typing import Optional

import numpy as np

from gpumon.detect.seconds import loaders_saturated, main_bound, rank_starving, storage_bound
from gpumon.detect.thresholds import Thresholds
from gpumon.diagnosis import CAUSES

C = {c: i for i, c in enumerate(CAUSES)}


# A rank's readings, in the order rank_starving takes them (and their "_recent" features).
_RANK = ("workers", "loader_cpu", "loader_busy", "main_cpu", "main_thread")


class Host:
    """Host counters of a job's windows, read once per judge() call: each rank's readings
    (rank_starving's order) and storage, over the window and over its last seconds."""

    def __init__(self, f: dict, th: Thresholds):
        self.th = th
        # (2, 5, G, E): the ranks' readings over the window, then over its last seconds.
        self.views = np.array([[f[k] for k in _RANK], [f[k + "_recent"] for k in _RANK]])
        self.ranks = rank_starving(*self.views.swapaxes(0, 1), th)             # (2, G, E)
        self.storage = storage_bound(np.array([f["iowait"], f["iowait_recent"]]),
                                     np.array([f["disk_read"], f["disk_read_recent"]]), th)
        self.starving = self.storage | self.ranks.any(axis=1)                  # (2, E)
        # (2, G, E): a rank's job processes unknown (neither loader workers nor main process).
        self.unknown = np.isnan(self.views[:, 0]) & np.isnan(self.views[:, 3])
        self._whole: Optional[np.ndarray] = None
        self._starved: Optional[np.ndarray] = None

    def starved(self) -> np.ndarray:
        """(G, E): each rank's host starving over the window or its last seconds (computed
        once)."""
        if self._starved is None:
            # 1.0 where a rank's host starves (as starving_any reads it, or its main thread
            # at a core beside loaders: its collation holds it up), 0.0, NaN where unknown.
            s = np.where(self.unknown, np.nan, (self.ranks | (
                self.views[:, 4] >= self.th.core_busy_pct)).astype(float))
            self._starved = np.fmax(s[0], s[1])
        return self._starved

    @property
    def whole(self) -> np.ndarray:
        """(5, E): the busiest reading of any of the job's GPUs (rank_starving's order), per
        window (read by cause() only: computed on its first call)."""
        if self._whole is None:
            self._whole = np.fmax.reduce(self.views[0], axis=1)
        return self._whole

    def starving_any(self, recent: bool = True) -> np.ndarray:
        """(E,): any rank's host shows starvation (loaders saturated, main at a core, storage),
        over the window or (``recent``) over its last seconds."""
        return self.starving[0] | self.starving[1] if recent else self.starving[0].copy()

    def cause(self, col: np.ndarray) -> np.ndarray:
        """Cause of starvation per window, from the rank at row ``col`` (the straggler), or
        with col -1 from the job as a whole (the busiest reading of any of its GPUs)."""
        th = self.th
        mine = col >= 0
        v = self.views[0]                     # (5, G, E)
        # (The job's reading is computed only where some window reads it.)
        if not v.shape[1] or not mine.any():
            rows = self.whole
        else:
            rows = v[:, np.maximum(col, 0), np.arange(col.shape[0])]
            if not mine.all():
                rows = np.where(mine, rows, self.whole)
        workers, loader, lbusy, main, thread = rows
        # (rank_starving's two halves, told apart.)
        cpu = loaders_saturated(workers, loader, lbusy, th)
        by_main = main_bound(workers, main, thread, th)
        thread_bound = thread >= th.core_busy_pct
        storage = self.storage[0] | self.storage[1]
        # The first that holds, in this order.
        return np.where(by_main, C["main_process"], np.where(
            storage & ~cpu, C["io_fetch"], np.where(
                cpu, C["cpu_preprocessing"], np.where(
                    thread_bound, C["main_process"], np.where(
                        storage, C["io_fetch"], C["input_pipeline"])))))


