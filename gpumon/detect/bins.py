"""Per-second bins: the detector's memory of what the GPUs and the host did.

Raw samples (one per driver utilization period per GPU, ~6 per second on NVML, 1 per second
in an nvidia-smi log) are reduced, per GPU and per second of data, to sums: samples, busy
share, samples busy/idle, power, clocks, clock-event counts, memory, the busy and idle time
measured by the samples and the bursts and gaps (runs of busy and idle samples) that begin in
that second, and the gaps that *ended* in it (seconds.gap_stops). Sums add, so the live
detector adds each tick's samples into a sliding store and ``gpumon analyze`` bins a whole log
at once with the same function: both then read the same features from the same arrays.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional, Sequence

import numpy as np

from gpumon.samples import Tick
from gpumon.samples import (CLOCK_EVENT_HW_POWER_BRAKE, CLOCK_EVENT_HW_SLOWDOWN,
                            CLOCK_EVENT_HW_THERMAL, CLOCK_EVENT_SW_POWER_CAP,
                            CLOCK_EVENT_SW_THERMAL)
from gpumon.detect.thresholds import BIN_S, DEFAULT, SAMPLE_MID_S, Thresholds

# Per-GPU bin fields (first axis of Store.g). Sums unless said otherwise.
GPU_FIELDS = (
    "n",        # utilization samples
    "u",        # sum of utilization shares (util/100): busy seconds per sample
    "busy",     # samples at or above seg_util_pct
    "idle",     # samples at or below idle_util_pct
    "pw", "pn",  # power (W) sum and count
    "pl", "pln",  # power limit (W) sum and count
    "clk", "cn",  # SM clock sum and count
    "cmax", "cmaxn",  # max SM clock sum and count
    "en",       # samples with clock event reasons known
    "therm", "pcap", "hws",  # samples with thermal / power-cap / hw-slowdown reasons
    "mem", "memn",  # memory used (MiB) sum and count
    "gapn", "gaps",  # gaps ending in this bin: count, total seconds (their whole length)
    "bt", "it",  # busy / idle seconds the samples measured (see _time_runs)
    "bst", "gst",  # bursts / gaps that begin in this bin
    "ld", "ldn",  # loader workers' CPU (% of a core), sum and count
    "mc", "mcn",  # main process CPU
    "mt", "mtn",  # main process busiest thread CPU
    "wk", "wkn",  # loader worker count
    "lb", "lbn",  # loader workers at a full core
    "age", "agen",  # age of the youngest loader worker (s)
    "pid",      # ticks that saw a process on this GPU
    "pidn",     # ticks that said whether a process was there
    "sa", "san",  # SM activity (GPM, share of SMs with work), sum and count
)
HOST_FIELDS = ("io", "ion", "rd", "rdn", "wr", "wrn", "cpu", "cpun")
GI = {name: i for i, name in enumerate(GPU_FIELDS)}
HI = {name: i for i, name in enumerate(HOST_FIELDS)}

_F_JOB = np.array([GI[k] for k in ("ld", "mc", "mt", "wk", "lb", "age", "ldn", "mcn", "mtn",
                                   "wkn", "lbn", "agen")])
_F_HOST = np.array([HI[k] for k in ("io", "rd", "wr", "cpu", "ion", "rdn", "wrn", "cpun")])
_F_GAPS = np.array([GI[k] for k in ("gapn", "gaps")])
_THERMAL = CLOCK_EVENT_SW_THERMAL | CLOCK_EVENT_HW_THERMAL
_PCAP = CLOCK_EVENT_SW_POWER_CAP | CLOCK_EVENT_HW_POWER_BRAKE
# The fields add_samples fills, and where each sits in its scratch array.
_SAMPLE_FIELDS = np.array([GI[k] for k in (
    "n", "u", "busy", "idle", "pw", "pl", "clk", "cmax", "mem", "pid",
    "pn", "pln", "cn", "cmaxn", "memn", "pidn", "en", "therm", "pcap", "hws",
    "bt", "it", "bst", "gst", "sa", "san")])


def _values(cols: tuple, order: Optional[np.ndarray], n: int) -> tuple:
    """(the first column, each column with 0 where missing, where each is there) of ``n``
    samples' columns ``cols`` (the first, utilization, always given; None: a column the
    samples lack, all missing), in ``order``; only the given columns are read."""
    have = [k for k, a in enumerate(cols) if a is not None]
    vals = np.array([np.asarray(cols[k], dtype=float) for k in have])
    if order is not None:
        vals = vals[:, order]
    there = ~np.isnan(vals)
    v0 = [np.zeros(n)] * len(cols)
    ok = [np.zeros(n, bool)] * len(cols)
    for i, (k, v) in enumerate(zip(have, np.where(there, vals, 0.0))):
        v0[k], ok[k] = v, there[i]
    return vals[0], v0, ok


def _gpu_time_order(gpu: np.ndarray, t: np.ndarray) -> Optional[np.ndarray]:
    """np.lexsort((t, gpu)), or None where that is the identity (samples already by GPU,
    then time: most ticks). A log is in time order per GPU already, so a stable sort by GPU
    alone (by radix, on 16-bit keys) gives that order much faster than lexsort."""
    if len(gpu) < 2:
        return None
    g0, g1 = gpu[:-1], gpu[1:]
    if bool(((g1 > g0) | ((g1 == g0) & (t[1:] >= t[:-1]))).all()):
        return None
    key = gpu
    if -(1 << 15) <= gpu.min() and gpu.max() < 1 << 15:
        key = gpu.astype(np.int16)
    order = np.argsort(key, kind="stable")
    ts, gs = t[order], gpu[order]
    if not bool(((gs[1:] != gs[:-1]) | (ts[1:] >= ts[:-1])).all()):
        return np.lexsort((t, gpu))
    return order


def _per_gpu(gpu: np.ndarray, kind: np.ndarray, t: np.ndarray) -> tuple:
    """(kind, first, starts, ends, dt) of samples (at least one) sorted by GPU then time:
    each GPU's first sample and where its samples start and end, the time since the sample
    before (the first's left for the caller)."""
    n = len(t)
    first = np.empty(n, dtype=bool)
    first[0] = True
    first[1:] = gpu[1:] != gpu[:-1]
    starts = first.nonzero()[0]
    dt = np.empty(n)
    dt[1:] = t[1:] - t[:-1]
    return kind, first, starts, np.append(starts[1:], n), dt


def _time_runs(t: np.ndarray, runs: tuple, prev: np.ndarray, max_gap_s: float
               ) -> tuple[np.ndarray, tuple]:
    """(per sample, the rows (bt, it, bst, gst) to add: the busy and idle seconds it
    measured (the time since the sample before; none after a hole over max_gap_s) and
    whether a burst or gap (features.run_lengths) begins at it; per sample, the time it
    measured (0: none) and whether it measured any, each GPU's first from _carried and its
    tail ``prev``)."""
    kind, _, starts, ends, dt = runs
    n, last, dt = len(t), ends - 1, dt.copy()
    pk = np.empty(n, dtype=bool)              # the sample before: its kind, ...
    pk[1:] = kind[:-1]
    pm0 = _carried(t, kind, starts, last, dt, pk, prev)
    meas = dt <= max_gap_s                    # (NaN: not measured)
    pm = np.empty(n, dtype=bool)              # ... and whether it measured time
    pm[1:] = meas[:-1]
    pm[starts] = pm0
    begin = meas & ~(pm & (pk == kind))
    dt = np.where(meas, dt, 0.0)
    return np.array([np.where(kind, dt, 0.0), np.where(~kind, dt, 0.0),
                     begin & kind, begin & ~kind], dtype=float), (dt, meas)


def _carried(t, kind, starts, last, dt, pk, prev) -> np.ndarray:
    """Each GPU's first sample in this call (``starts``; ``last``: its last): ``dt`` and
    ``pk`` from its last sample before (``prev``: its tail), and whether that one measured
    time. A GPU's first sample ever counts its chunk's mean period."""
    new = np.isnan(prev[0])
    k = last - starts
    period = (t[last] - t[starts]) / np.where(k > 0, k, np.nan)    # (NaN: one sample)
    dt[starts] = np.where(new, period, np.maximum(t[starts] - prev[0], 0.0))
    pk[starts] = np.where(new, ~kind[starts], prev[1] > 0)
    return ~new & (prev[2] > 0)


def _flat_slots(arr: np.ndarray, rows: Optional[np.ndarray], slots: np.ndarray, m):
    """(idx, m) for Store._scatter: each sample's index into ``arr`` flattened past its first
    axis, and its values, without the samples that fall outside ``arr``."""
    width = arr.shape[-1]
    ok = (slots >= 0) & (slots < width)
    if rows is not None:
        ok &= rows >= 0
        idx = rows * width + slots
    else:
        idx = slots
    if not ok.all():
        idx = idx[ok]
        m = [r[ok] for r in m] if isinstance(m, list) else m[:, ok]
    return idx, m


def _add_log(flat: np.ndarray, fidx: np.ndarray, idx: np.ndarray, m) -> None:
    """flat[fidx[k], idx[i]] += m[k][i] for a log's many samples: one bincount per field."""
    # Only over the slots the samples touch, and not for fields they leave at zero.
    lo, hi = int(idx.min()), int(idx.max()) + 1
    if lo:
        idx = idx - lo
    for k, f in enumerate(fidx):
        w = m[k]
        if w.any():
            flat[f, lo:hi] += np.bincount(idx, w, hi - lo)


def _add_tick(flat: np.ndarray, fidx: np.ndarray, idx: np.ndarray, m) -> None:
    """flat[fidx[k], idx[i]] += m[k][i] for a tick's few samples: one reduceat, one add."""
    if isinstance(m, list):
        m = np.array(m, dtype=float)
    order = np.argsort(idx, kind="stable")
    idx, m = idx[order], m[:, order]
    starts = np.flatnonzero(np.concatenate(([True], idx[1:] != idx[:-1])))
    sums = np.add.reduceat(m, starts, axis=1)
    flat[fidx[:, None], idx[starts][None, :]] += sums


@dataclass
class SampleCols:
    """GPU samples as columns (NaN = missing). ``events`` holds the clock event bitmask."""
    time: np.ndarray
    gpu: np.ndarray
    util: np.ndarray
    power: Optional[np.ndarray] = None
    power_limit: Optional[np.ndarray] = None
    clock: Optional[np.ndarray] = None
    clock_max: Optional[np.ndarray] = None
    events: Optional[np.ndarray] = None
    mem: Optional[np.ndarray] = None
    has_pid: Optional[np.ndarray] = None   # 1.0 a process is on the GPU, 0.0 none, NaN unknown
    sm_active: Optional[np.ndarray] = None  # GPM SM activity, 0-1 (NaN: no GPM)


@dataclass
class JobCols:
    """Per-GPU host readings (JobProcs) as columns."""
    time: np.ndarray
    gpu: np.ndarray
    loader_cpu: np.ndarray
    main_cpu: np.ndarray
    main_thread: np.ndarray
    workers: np.ndarray
    loader_busy: np.ndarray
    loader_age: Optional[np.ndarray] = None   # youngest loader worker's age, s (NaN unknown)


@dataclass
class HostCols:
    time: np.ndarray
    iowait: np.ndarray
    disk_read: np.ndarray
    disk_write: np.ndarray
    cpu: np.ndarray


class Store:
    """Bins of one or more GPUs: ``g[field, row, bin]``, ``h[field, bin]``.

    Bin ``i`` of the arrays is absolute bin ``b0 + i``, covering
    ``[origin + (b0+i)*BIN_S, origin + (b0+i+1)*BIN_S)``. With ``cap`` set, the store keeps
    at most that many bins, dropping the oldest (live use); without it, it grows (a log).
    """

    def __init__(self, origin: float, th: Thresholds = DEFAULT, cap: Optional[int] = None,
                 dtype=np.float64, driver_samples: bool = True):
        self.origin = origin
        self.th = th
        # NVML's own samples are dated at the end of their period: binned at its middle
        # (SAMPLE_MID_S). Other tools' logs are binned as they are dated.
        self.mid_s = SAMPLE_MID_S if driver_samples else 0.0
        self.cap = cap
        self.b0 = 0
        self.nb = 0                      # bins in use
        self.gpus: list[int] = []        # row -> GPU index
        self.rows: dict[int, int] = {}
        self._lut: Optional[np.ndarray] = None   # GPU index -> row (-1: none), see _row
        self.dtype = dtype             # float32 halves a day-long log's bins; sums stay exact
        self.g = np.zeros((len(GPU_FIELDS), 0, cap or 0), dtype)
        self.h = np.zeros((len(HOST_FIELDS), cap or 0), dtype)
        # Per row, its last sample: time (NaN: none yet), busy, measured (_time_runs),
        # and the seconds of the run (burst or gap) going on at it (Store._gap_runs).
        self.tail = np.zeros((4, 0))

    # -- shape management ---------------------------------------------------------------------
    def _row(self, gpus: np.ndarray) -> np.ndarray:
        lut = self._lut
        if lut is not None and len(gpus):
            gi = gpus.astype(np.int64)
            if 0 <= gi.min() and gi.max() < len(lut):
                r = lut[gi]
                if r.min() >= 0:          # every GPU already has a row
                    return r
        new = [int(x) for x in np.unique(gpus) if int(x) not in self.rows]
        if new:
            for gpu in sorted(new):
                self.rows[gpu] = len(self.gpus)
                self.gpus.append(gpu)
            pad = np.zeros((self.g.shape[0], len(new), self.g.shape[2]), self.dtype)
            self.g = np.concatenate([self.g, pad], axis=1)
            self.tail = np.concatenate([self.tail, np.full((4, len(new)), np.nan)], axis=1)
        lut = np.full(max(self.rows) + 1, -1, dtype=np.int64)
        for gpu, row in self.rows.items():
            lut[gpu] = row
        self._lut = lut
        return lut[gpus.astype(np.int64)]

    def _bins(self, times: np.ndarray) -> np.ndarray:
        return np.floor((times - self.origin) / BIN_S).astype(np.int64)

    def _make_room(self, bmin: int, bmax: int) -> None:
        """Ensure absolute bins up to bmax have slots; bins before b0 are dropped."""
        if self.nb == 0:
            self.b0 = bmin
        need = bmax - self.b0 + 1
        if self.cap:
            if need > self.cap:
                shift = need - self.cap
                if shift >= self.cap:
                    self.g[:] = 0.0
                    self.h[:] = 0.0
                else:
                    self.g[:, :, :-shift] = self.g[:, :, shift:]
                    self.h[:, :-shift] = self.h[:, shift:]
                    self.g[:, :, -shift:] = 0.0
                    self.h[:, -shift:] = 0.0
                self.b0 += shift
                need = self.cap
                self.nb = max(0, self.nb - shift)
        elif need > self.g.shape[2]:
            grow = max(need, int(self.g.shape[2] * 1.5) + 16)
            g = np.zeros((self.g.shape[0], self.g.shape[1], grow), self.dtype)
            g[:, :, :self.g.shape[2]] = self.g
            h = np.zeros((self.h.shape[0], grow), self.dtype)
            h[:, :self.h.shape[1]] = self.h
            self.g, self.h = g, h
        self.nb = max(self.nb, need)

    def reserve(self, first: float, last: float) -> None:
        """Room for samples dated ``first`` (the earliest) to ``last`` (the latest) at once: a
        log's store is then allocated once, not grown and copied as its chunks arrive. The
        bins are those adding the samples would give."""
        b = self._bins(np.array([first, last], dtype=float) - self.mid_s)
        self._make_room(int(b[0]), int(b[1]))

    def _scatter(self, arr: np.ndarray, fidx: np.ndarray, rows: Optional[np.ndarray],
                 slots: np.ndarray, m) -> None:
        """arr[fidx[k], row, slot] += m[k, i] for every sample i (one reduceat, one add).
        ``m``: a float array, or a list of its rows (numbers or booleans, as 1.0 and 0.0)."""
        idx, m = _flat_slots(arr, rows, slots, m)
        if len(idx) == 0:
            return
        flat = arr.reshape(arr.shape[0], -1)
        if len(idx) > 4096:       # a log: one bincount per field beats sorting
            _add_log(flat, fidx, idx, m)
        else:
            _add_tick(flat, fidx, idx, m)

    # -- adding data --------------------------------------------------------------------------
    def add_gpus(self, gpus) -> None:
        """Give these GPUs their rows now (in index order), before their samples arrive: a
        log's store then grows its GPU axis once rather than chunk by chunk."""
        g = np.asarray(gpus, dtype=np.int64)
        if len(g) and 0 <= g.min() and g.max() < 1 << 16:    # indices: no sort needed
            self._row(np.flatnonzero(np.bincount(g)))
        else:
            self._row(np.unique(g))

    def add_samples(self, s: SampleCols) -> None:
        if len(s.time) == 0:
            return
        th = self.th
        order = _gpu_time_order(s.gpu, s.time)
        t = s.time if order is None else s.time[order]
        gpu = (s.gpu if order is None else s.gpu[order]).astype(np.int64)
        rows = self._row(gpu)
        b = self._bins(t - self.mid_s)
        self._make_room(int(b.min()), int(b.max()))
        cols = (s.util, s.power, s.power_limit, s.clock, s.clock_max, s.mem, s.has_pid, s.events,
                s.sm_active)
        u, v0, ok = _values(cols, order, len(t))
        # The fields samples feed, in the order of _SAMPLE_FIELDS.
        bits = v0[7].astype(np.int64)
        have_u = ok[0]
        tm = self._runs(t, gpu, rows, u, have_u)
        m = [have_u, v0[0] / 100.0, have_u & (u >= th.seg_util_pct),
             have_u & (u <= th.idle_util_pct), *v0[1:7], *ok[1:7], ok[7],
             (bits & _THERMAL) != 0, (bits & _PCAP) != 0, (bits & CLOCK_EVENT_HW_SLOWDOWN) != 0,
             *tm, v0[8], ok[8]]
        self._scatter(self.g, _SAMPLE_FIELDS, rows, b - self.b0, m)

    def _runs(self, t: np.ndarray, gpu: np.ndarray, rows: np.ndarray, util: np.ndarray,
              have_u: np.ndarray) -> np.ndarray:
        """Per sample, the rows (bt, it, bst, gst) to add (_time_runs); the bursts and gaps
        that ended emitted and each GPU's last carried on (_gap_runs). The runs are of the
        samples with a utilization (``have_u``): the others add none."""
        n = len(t)
        if not have_u.all():
            t, gpu, rows, util = t[have_u], gpu[have_u], rows[have_u], util[have_u]
        if len(t) == 0:
            return np.zeros((4, n))
        runs = _per_gpu(gpu, util >= self.th.seg_util_pct, t)
        prev = self.tail[:, rows[runs[2]]]        # each GPU's last sample before (see tail)
        tm, measured = _time_runs(t, runs, prev, self.th.max_sample_gap_s)
        self._gap_runs(t, rows, runs, measured, prev)
        if len(t) < n:
            full = np.zeros((4, n))
            full[:, have_u] = tm
            tm = full
        return tm

    def _gap_runs(self, t: np.ndarray, rows: np.ndarray, runs: tuple, measured: tuple,
                  prev: np.ndarray) -> None:
        """Bursts and gaps: runs of samples above / below seg_util_pct, per GPU, across calls;
        ``measured``: each sample's time measured and whether it measured any (_time_runs:
        time after a hole is missing, not work or idleness); ``prev``: each GPU's tail."""
        kind, first, starts, ends, _ = runs
        dt, meas = measured
        newrun = first.copy()
        newrun[1:] |= kind[1:] != kind[:-1]
        rid = np.cumsum(newrun) - 1
        length = np.bincount(rid, dt)
        rstart = np.flatnonzero(newrun)
        rend = np.append(rstart[1:], len(t)) - 1
        rkind = kind[rstart]
        # Join the run carried from the previous call; the last run of each GPU is carried on.
        r_first, last = rid[starts], ends - 1
        had = ~np.isnan(prev[0])
        same = had & ((prev[1] > 0) == rkind[r_first])
        length[r_first[same]] += prev[3, same]
        ended = had & ~same
        if ended.any():
            self._emit(rows[starts[ended]], prev[0, ended], prev[1, ended] > 0, prev[3, ended])
        completed = np.ones(len(rstart), dtype=bool)
        completed[rid[last]] = False
        self.tail[:, rows[last]] = t[last], kind[last], meas[last], length[rid[last]]
        done = np.flatnonzero(completed)
        if len(done):
            self._emit(rows[rstart[done]], t[rend[done]], rkind[done], length[done])

    def _emit(self, rows: np.ndarray, tend: np.ndarray, kind: np.ndarray,
              length: np.ndarray) -> None:
        slots = self._bins(tend - self.mid_s) - self.b0
        gap = ~kind.astype(bool)
        m = np.array([gap, np.where(gap, length, 0.0)])
        self._scatter(self.g, _F_GAPS, rows, slots, m.astype(float))

    def add_host(self, j: Optional[JobCols], hc: Optional[HostCols]) -> None:
        """A tick's or a log's host readings: each rank's job processes (per GPU) and the
        host's counters (None: the log has none)."""
        if j is not None and len(j.time):
            age = j.loader_age if j.loader_age is not None else np.full(len(j.time), np.nan)
            self._add_readings("g", _F_JOB, self._row(np.asarray(j.gpu)), j.time,
                               (j.loader_cpu, j.main_cpu, j.main_thread, j.workers,
                                j.loader_busy, age))
        if hc is not None and len(hc.time):
            self._add_readings("h", _F_HOST, None, hc.time,
                               (hc.iowait, hc.disk_read, hc.disk_write, hc.cpu))

    def _add_readings(self, arr: str, fidx: np.ndarray, rows: Optional[np.ndarray],
                      times, cols: tuple) -> None:
        """Each reading's value (NaN: none) and its count into its bin of ``g`` or ``h``
        (``arr``, named: making room may replace the array)."""
        b = self._bins(np.asarray(times, dtype=float))
        self._make_room(int(b.min()), int(b.max()))
        vals = np.array(cols, dtype=float)
        ok = ~np.isnan(vals)
        self._scatter(getattr(self, arr), fidx, rows, b - self.b0,
                      np.concatenate([np.where(ok, vals, 0.0), ok]))

    # -- reading ------------------------------------------------------------------------------
    def view(self, rows: Optional[list[int]] = None, stop: Optional[int] = None,
             start: int = 0):
        """(g, h) for bins ``start`` to ``stop`` (exclusive; default all in use), optionally
        some rows only, in the store's dtype."""
        stop = self.nb if stop is None else stop
        g = self.g[:, :, start:stop]
        if rows is not None and list(rows) != list(range(self.g.shape[1])):
            g = g[:, rows, :]
        return g, self.h[:, start:stop]

    def bin_time(self, i: int) -> float:
        return self.origin + (self.b0 + i) * BIN_S


# -- filling a store ------------------------------------------------------------------------

# Samples of a log binned at once (bounds the scratch arrays, not the store).
STORE_CHUNK = 1 << 17
_SAMPLE_COLS = ("time", "gpu", "util", "power", "power_limit", "clock", "clock_max", "events",
                "mem", "has_pid", "sm_active")


def log_store(s: SampleCols, jobs: Optional[JobCols], host: Optional[HostCols],
              th: Thresholds, driver_samples: bool) -> Store:
    """A whole log's bins (float32: a day-long log's halve; the sums stay exact)."""
    st = Store(math.floor(float(np.nanmin(s.time))), th, dtype=np.float32,
               driver_samples=driver_samples)
    # In time order per GPU, in chunks: runs carry across chunks as across live ticks.
    order = _gpu_time_order(s.gpu, s.time)
    if order is None:
        order = np.arange(len(s.time))
    st.add_gpus(s.gpu)
    # All the bins at once, from the earliest sample of any GPU: no copies of a growing
    # store, and no GPU's samples before the first chunk's left out.
    st.reserve(float(np.nanmin(s.time)), float(np.nanmax(s.time)))
    _add_chunks(st, s, order)
    st.add_host(jobs, host)
    return st


def _add_chunks(st: Store, s: SampleCols, order: np.ndarray) -> None:
    """The samples ``order`` (by GPU, then time) into ``st`` in chunks of STORE_CHUNK, the
    chunks also cut where the GPUs part into groups of about as many samples, the groups
    side by side on the cores (numpy lets go of the GIL in its loops). A GPU's samples are
    all in one group, added in order: its chunks hold what they hold in one pass (runs carry
    across them), and its bins are its own."""
    from gpumon.logs.threads import MAX_THREADS, map_threads    # (a log's work: not live)
    n = len(order)
    gpu = s.gpu[order]
    first = np.flatnonzero(np.r_[True, gpu[1:] != gpu[:-1]])     # each GPU's first sample
    k = min(MAX_THREADS, len(first))
    at = first[np.minimum(np.searchsorted(first, np.arange(1, k) * n / k), len(first) - 1)]
    edges = np.unique(np.r_[0, at, n])
    chunks = np.arange(0, n, STORE_CHUNK)
    groups = []
    for a, b in zip(edges[:-1].tolist(), edges[1:].tolist()):
        cuts = np.unique(np.r_[a, chunks[(chunks > a) & (chunks < b)], b]).tolist()
        groups.append(list(zip(cuts[:-1], cuts[1:])))

    def one(slices: list) -> None:
        scratch: dict = {}
        for a, b in slices:
            st.add_samples(_take(s, order[a:b], scratch))

    map_threads(one, groups)


def _take(s: SampleCols, idx: np.ndarray, scratch: dict) -> SampleCols:
    """The samples at ``idx``, gathered into arrays kept in ``scratch`` from one chunk to
    the next (add_samples keeps none of them): fresh ones for every chunk would each be
    faulted in anew."""
    out = []
    for name in _SAMPLE_COLS:
        a = getattr(s, name)
        if a is None:
            out.append(None)
            continue
        buf = scratch.get(name)
        if buf is None or buf.dtype != a.dtype or len(buf) < len(idx):
            buf = scratch[name] = np.empty(len(idx), a.dtype)
        out.append(np.take(a, idx, out=buf[:len(idx)]))
    return SampleCols(*out)


def tick_columns(ticks: Sequence[Tick]):
    """(SampleCols, JobCols, HostCols, latest PIDs per GPU, PID -> parent PID)."""
    # One row per sample, converted by numpy at once (None -> NaN under dtype float).
    grows: list = []
    jrows: list = []
    hrows: list = []
    pids: dict[int, Optional[tuple]] = {}
    ppid: dict[int, int] = {}
    for tick in ticks:
        gs = tick.gpus
        grows += [(s.time, s.gpu, s.util_gpu_pct, s.power_w, s.power_limit_w, s.sm_clock_mhz,
                   s.sm_clock_max_mhz, s.clock_events, s.mem_used_mib,
                   None if s.pids is None else bool(s.pids), s.sm_active_ratio) for s in gs]
        for s in gs:
            if s.pids is not None:
                pids[s.gpu] = s.pids
            elif s.gpu not in pids:
                pids[s.gpu] = None
        host = tick.host
        if host is None:
            continue
        # A host reading describes the tick's interval: dated inside it (at most 0.5 s back).
        ht = host.time
        if gs:
            ht -= min(0.5, max(0.0, ht - min([s.time for s in gs])) / 2)
        hrows.append((ht, host.iowait_pct, host.disk_read_mbps, host.disk_write_mbps,
                      host.cpu_pct))
        jrows += [(ht, j.gpu, j.loader_cpu_pct, j.main_cpu_pct, j.main_thread_max_pct,
                   j.loader_workers, j.loader_busy, j.loader_age_s) for j in host.jobs]
        for p in host.procs:
            ppid[p.pid] = p.ppid
    G = _cols(grows, 11)
    J = _cols(jrows, 8)
    H = _cols(hrows, 5)
    samples = SampleCols(G[0], G[1].astype(np.int64), *G[2:])
    jobs = JobCols(J[0], J[1].astype(np.int64), *J[2:])
    hosts = HostCols(*H)
    return samples, jobs, hosts, pids, ppid


def _cols(rows: list, k: int) -> np.ndarray:
    """(k, len(rows)) float64 array of the rows' fields, None as NaN."""
    if not rows:
        return np.zeros((k, 0))
    return np.array(rows, dtype=float).T
