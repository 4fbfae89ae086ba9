"""The host as the rules read it: each rank's loader workers and main process, and storage,
over a job's windows (features.py's host columns)."""
from __future__ import annotations

from typing import Optional

import numpy as np

from gpumon.detect import nanops as N
from gpumon.detect.pauses import storage_bound
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
        self.workers, self.loader = f["workers"], f["loader_cpu"]
        self.lbusy, self.main, self.thread = f["loader_busy"], f["main_cpu"], f["main_thread"]
        self.io, self.rd = f["iowait"], f["disk_read"]
        self.io_r, self.rd_r = f.get("iowait_recent"), f.get("disk_read_recent")
        self.views = [(f["workers"], f["loader_cpu"], f["loader_busy"], f["main_cpu"],
                       f["main_thread"])]
        if "workers_recent" in f:
            self.views.append(tuple(f[k + "_recent"] for k in (
                "workers", "loader_cpu", "loader_busy", "main_cpu", "main_thread")))
        G = self.workers.shape[0]
        with CALM:
            self.whole = {k: (np.fmax.reduce(getattr(self, k), axis=0) if G else
                              np.full(self.io.shape, np.nan))
                          for k in ("workers", "loader", "lbusy", "main", "thread")}

    def storage(self) -> np.ndarray:
        """(E,): storage feeds the job, over the window or over its last seconds."""
        out = storage_bound(self.io, self.rd, self.th)
        if self.io_r is not None:
            out = out | storage_bound(self.io_r, self.rd_r, self.th)
        return out

    def starving_any(self, recent: bool = True) -> np.ndarray:
        """(E,): any rank's host shows starvation (loaders saturated, main at a core, storage),
        over the window or (``recent``) over its last seconds."""
        th = self.th
        out = self.storage() if recent else storage_bound(self.io, self.rd, th)
        for wk, ld, lb, mc, mt in (self.views if recent else self.views[:1]):
            with CALM:
                per = np.maximum(wk, 1)
                g = (((wk >= 0.5) & ((ld / (100 * per) >= th.loader_busy_share)
                                     | (lb / per >= th.loader_busy_share)))
                     | ((wk < 0.5) & (np.fmax(mc, mt) >= th.core_busy_pct)))
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
        return np.select([main_bound, storage & ~cpu, cpu, thread_bound, storage],
                         [C["main_process"], C["io_fetch"], C["cpu_preprocessing"],
                          C["main_process"], C["io_fetch"]], C["input_pipeline"])


def host_starved(f: dict, th: Thresholds, suffix: str = "") -> np.ndarray:
    """(G, E): NaN where the GPU's job processes are unknown, else 1.0 / 0.0 (starving);
    over the window, or with suffix "_recent" over its last seconds."""
    w, main, thread = f["workers" + suffix], f["main_cpu" + suffix], f["main_thread" + suffix]
    with CALM:
        per_worker = f["loader_cpu" + suffix] / (100.0 * np.maximum(w, 1))
        starving = (((w >= 0.5) & (per_worker >= th.loader_busy_share))
                    | ((w < 0.5) & (np.fmax(main, thread) >= th.core_busy_pct))
                    | (thread >= th.core_busy_pct))
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


