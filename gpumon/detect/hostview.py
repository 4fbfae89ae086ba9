"""The host as the rules read it: each rank's loader workers and main process, and storage,
over a job's windows (features.py's host columns)."""
from __future__ import annotations

from typing import Optional

import numpy as np

from gpumon.detect import nanops as N
from gpumon.detect.pauses import rank_starving, storage_bound
from gpumon.detect.thresholds import DEFAULT, Thresholds
from gpumon.diagnosis import CAUSES

C = {c: i for i, c in enumerate(CAUSES)}


class Calm:
    """A no-op context: judge() runs everything under one np.errstate(all="ignore")."""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


CALM = Calm()


class Host:
    """Host counters of a job's windows, read once per judge() call."""

    def __init__(self, f: dict, th: Thresholds):
        self.th = th
        self._whole: Optional[dict] = None
        self._storage: Optional[np.ndarray] = None       # (see storage_window)
        self._storage_any: Optional[np.ndarray] = None   # (see storage)
        self.workers, self.loader = f["workers"], f["loader_cpu"]
        self.lbusy, self.main, self.thread = f["loader_busy"], f["main_cpu"], f["main_thread"]
        self.io, self.rd = f["iowait"], f["disk_read"]
        self.io_r, self.rd_r = f.get("iowait_recent"), f.get("disk_read_recent")
        self.views = [(f["workers"], f["loader_cpu"], f["loader_busy"], f["main_cpu"],
                       f["main_thread"])]
        if "workers_recent" in f:
            self.views.append(tuple(f[k + "_recent"] for k in (
                "workers", "loader_cpu", "loader_busy", "main_cpu", "main_thread")))

    @property
    def whole(self) -> dict:
        """The busiest reading of any of the job's GPUs, per window (read by cause() only:
        computed on its first call)."""
        if self._whole is None:
            G = self.workers.shape[0]
            with CALM:
                self._whole = {k: (np.fmax.reduce(getattr(self, k), axis=0) if G else
                                   np.full(self.io.shape, np.nan))
                               for k in ("workers", "loader", "lbusy", "main", "thread")}
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
        th = self.th
        out = self.storage() if recent else self.storage_window().copy()
        for view in (self.views if recent else self.views[:1]):
            g = rank_starving(*view, th)
            if g.shape[0]:
                out |= g.any(axis=0)
        return out

    def cause(self, col: np.ndarray) -> np.ndarray:
        """Cause of starvation per window, from the rank at row ``col`` (the straggler), or
        with col -1 from the job as a whole (the busiest reading of any of its GPUs)."""
        th = self.th
        E = col.shape[0]
        ar = np.arange(E)
        sel = np.clip(col, 0, None)
        mine = col >= 0

        def pick(k):
            a = getattr(self, k)
            if not a.shape[0]:
                return self.whole[k]
            return np.where(mine, a[sel, ar], self.whole[k])

        workers, loader, lbusy = pick("workers"), pick("loader"), pick("lbusy")
        main, thread = pick("main"), pick("thread")
        with CALM:
            per_worker = loader / (100.0 * np.maximum(workers, 1))
            cpu = (workers >= 0.5) & ((per_worker >= th.loader_busy_share)
                                      | (lbusy / np.maximum(workers, 1) >= th.loader_busy_share))
            no_workers = workers < 0.5
            main_bound = (np.fmax(main, thread) >= th.core_busy_pct) & no_workers
            thread_bound = thread >= th.core_busy_pct
            storage = self.storage()
        # The first that holds, in this order (np.select's answer, in fewer calls).
        return _first([(main_bound, C["main_process"]), (storage & ~cpu, C["io_fetch"]),
                       (cpu, C["cpu_preprocessing"]), (thread_bound, C["main_process"]),
                       (storage, C["io_fetch"])], C["input_pipeline"])


def _first(cases: list, default: int) -> np.ndarray:
    """np.select([c for c, _ in cases], [v for _, v in cases], default) for integer codes:
    per window, the code of the first condition that holds."""
    out = None
    for cond, code in reversed(cases):
        out = np.where(cond, code, default if out is None else out)
    return out


def host_starved(f: dict, th: Thresholds, suffix: str = "") -> np.ndarray:
    """(G, E): NaN where the GPU's job processes are unknown, else 1.0 / 0.0 (starving);
    over the window, or with suffix "_recent" over its last seconds."""
    w, main, thread = f["workers" + suffix], f["main_cpu" + suffix], f["main_thread" + suffix]
    with CALM:
        # (As starving_any reads a rank, and its main thread at a core beside loaders too:
        # the rank's collation holds it up, whichever rank it is.)
        starving = rank_starving(w, f["loader_cpu" + suffix], f["loader_busy" + suffix], main,
                                 thread, th) | (thread >= th.core_busy_pct)
    return np.where(np.isnan(w) & np.isnan(main), np.nan, starving.astype(float))


def hs_known(f: dict) -> np.ndarray:
    """(E,): NaN where no GPU of the job has host counters."""
    known = ~(np.isnan(f["workers"]) & np.isnan(f["main_cpu"]))
    return np.where(known.any(axis=0), 1.0, np.nan) if known.shape[0] else np.full(
        known.shape[1], np.nan)


def host_straggler(f: dict, th: Thresholds = DEFAULT,
                   hs: Optional[np.ndarray] = None) -> np.ndarray:
    """(E,): the row of the only GPU whose rank's host starves, or -1 (``hs``:
    host_starved(f, th), where the caller has it)."""
    hs = host_starved(f, th) if hs is None else hs
    G = hs.shape[0]
    if G < 2:
        return np.full(hs.shape[1], -1)
    known = (~np.isnan(hs)).all(axis=0)
    one = np.nansum(hs, axis=0) == 1
    return np.where(known & one, np.argmax(N.nan_to_num(hs), axis=0), -1)


