"""The host as the rules read it: each rank's loader workers and main process, and storage,
over a job's windows (features.py's host columns)."""
from __future__ import annotations

from contextlib import nullcontext
from typing import Optional

import numpy as np

from gpumon.detect.seconds import loaders_saturated, main_bound, rank_starving, storage_bound
from gpumon.detect.thresholds import Thresholds
from gpumon.diagnosis import CAUSES

C = {c: i for i, c in enumerate(CAUSES)}


# A no-op context: judge() runs everything under one np.errstate(all="ignore").
CALM = nullcontext()


# A rank's readings, in the order rank_starving takes them (and their "_recent" features).
_RANK = ("workers", "loader_cpu", "loader_busy", "main_cpu", "main_thread")


class Host:
    """Host counters of a job's windows, read once per judge() call."""

    def __init__(self, f: dict, th: Thresholds):
        self.th = th
        self._whole: Optional[np.ndarray] = None
        self._storage: Optional[np.ndarray] = None       # (see storage_window)
        self._storage_any: Optional[np.ndarray] = None   # (see storage)
        self.workers, self.loader = f["workers"], f["loader_cpu"]
        self.lbusy, self.main, self.thread = f["loader_busy"], f["main_cpu"], f["main_thread"]
        self.io, self.rd = f["iowait"], f["disk_read"]
        self.io_r, self.rd_r = f.get("iowait_recent"), f.get("disk_read_recent")
        # The ranks' readings over the window and (where the features have them) over its
        # last seconds, stacked (views, 5, G, E): each view is judged in the same pass.
        names = [_RANK] + ([tuple(k + "_recent" for k in _RANK)] if "workers_recent" in f
                           else [])
        self.views = np.array([[f[k] for k in v] for v in names])
        self._ranks: Optional[np.ndarray] = None
        self._ranks_any: Optional[np.ndarray] = None
        self._starved: Optional[np.ndarray] = None

    def ranks(self) -> np.ndarray:
        """(views, G, E): rank_starving of each view (computed once)."""
        if self._ranks is None:
            self._ranks = rank_starving(*self.views.swapaxes(0, 1), self.th)
        return self._ranks

    def starved(self) -> np.ndarray:
        """(views, G, E): starved_ranks of each view (computed once)."""
        if self._starved is None:
            v = self.views
            self._starved = starved_ranks(v[:, 0], v[:, 3], v[:, 4], self.ranks(), self.th)
        return self._starved

    @property
    def whole(self) -> np.ndarray:
        """(5, E): the busiest reading of any of the job's GPUs (rank_starving's order), per
        window (read by cause() only: computed on its first call)."""
        if self._whole is None:
            if self.workers.shape[0]:
                self._whole = np.fmax.reduce(self.views[0], axis=1)
            else:
                self._whole = np.full((len(_RANK),) + self.io.shape, np.nan)
        return self._whole

    def storage(self) -> np.ndarray:
        """(E,): storage feeds the job, over the window or over its last seconds."""
        if self._storage_any is None:
            out = self.storage_window()
            if self.io_r is not None:
                out = out | storage_bound(self.io_r, self.rd_r, self.th)
            self._storage_any = out
        return self._storage_any.copy()

    def storage_window(self) -> np.ndarray:
        """(E,): storage feeds the job over the window (computed once: the caller copies it
        before changing it)."""
        if self._storage is None:
            self._storage = storage_bound(self.io, self.rd, self.th)
        return self._storage

    def starving_any(self, recent: bool = True) -> np.ndarray:
        """(E,): any rank's host shows starvation (loaders saturated, main at a core, storage),
        over the window or (``recent``) over its last seconds."""
        out = self.storage() if recent else self.storage_window().copy()
        if self.workers.shape[0]:
            if self._ranks_any is None:
                self._ranks_any = self.ranks().any(axis=1)     # (views, E)
            for hit in (self._ranks_any if recent else self._ranks_any[:1]):
                out |= hit
        return out

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
        with CALM:
            thread_bound = thread >= th.core_busy_pct
            storage = self.storage()
        # The first that holds, in this order (np.select's answer, in fewer calls).
        return _first([(by_main, C["main_process"]), (storage & ~cpu, C["io_fetch"]),
                       (cpu, C["cpu_preprocessing"]), (thread_bound, C["main_process"]),
                       (storage, C["io_fetch"])], C["input_pipeline"])


def _first(cases: list, default: int) -> np.ndarray:
    """np.select([c for c, _ in cases], [v for _, v in cases], default) for integer codes:
    per window, the code of the first condition that holds."""
    out = None
    for cond, code in reversed(cases):
        out = np.where(cond, code, default if out is None else out)
    return out


def starved_ranks(w: np.ndarray, main: np.ndarray, thread: np.ndarray, ranks: np.ndarray,
                  th: Thresholds) -> np.ndarray:
    """Per rank, NaN where its job processes are unknown, else 1.0 (its host starves) or 0.0,
    from its workers, main CPU and main thread readings and their rank_starving
    (``ranks``), of any shape."""
    # (As starving_any reads a rank, and its main thread at a core beside loaders too: the
    # rank's collation holds it up, whichever rank it is.)
    with CALM:
        starving = ranks | (thread >= th.core_busy_pct)
    return np.where(np.isnan(w) & np.isnan(main), np.nan, starving.astype(float))


def host_straggler(hs: np.ndarray) -> np.ndarray:
    """(E,): the row of the only GPU whose rank's host starves, or -1, from ``hs`` (G, E):
    starved_ranks of each GPU's rank."""
    G = hs.shape[0]
    if G < 2:
        return np.full(hs.shape[1], -1)
    known = (~np.isnan(hs)).all(axis=0)
    starving = hs == 1.0                    # (hs is 1.0, 0.0 or NaN)
    one = starving.sum(axis=0) == 1
    return np.where(known & one, starving.argmax(axis=0), -1)


