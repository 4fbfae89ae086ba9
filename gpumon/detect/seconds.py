"""The seconds table: what each second of a job is, defined once.

``seconds(g, h, th)`` turns a job's bins (a bins.Store view: ``g`` bins.GPU_FIELDS x GPUs x
T, ``h`` bins.HOST_FIELDS x T) into a ``SecondsTable``, one column per idea of the detector's
vocabulary, each with at most one threshold. The same function serves the live detector
(the bins of its view, each tick) and a whole log (``analyze``).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import partial
from typing import Mapping, NamedTuple, Optional

import numpy as np

from gpumon.detect import nanops as N
from gpumon.detect.bins import GI, HI
from gpumon.detect.jobs import in_use
from gpumon.detect.thresholds import BIN_S, DEFAULT, POWER_LAG_S, Thresholds, bins


def col(unit: str, meaning: str):
    """A column of the table: its unit and one line of meaning (``SecondsTable.describe``);
    None in a table of some columns only (``SecondsTable.take``)."""
    return field(default=None, metadata={"unit": unit, "meaning": meaning})


class Second(NamedTuple):
    """One row of the table as Python values: what the pause tracker reads of a second."""
    has: bool
    stopped: bool
    alone: bool
    lone_idle: bool
    all_on: bool
    full: float
    n: float
    u: float
    held: bool
    workers: float
    starving: bool
    writing: bool
    present: bool
    loader_age: float
    main_busy: bool
    at_work: bool


# The columns the window features read (features.window_features).
WINDOW_COLS = ("duty", "at_work", "holds", "present", "cold")


@dataclass
class SecondsTable:
    """Each second of a job, one column per idea (arrays over T; per-GPU ones (G, T))."""
    duty: np.ndarray = col("share", "per GPU: mean utilization of its samples in the "
                           "second (NaN: no sample)")
    n: np.ndarray = col("samples", "the job's utilization samples in the second")
    u: np.ndarray = col("busy samples", "sum of the job's utilization shares in the second")
    power: np.ndarray = col("W", "per GPU: mean power of its samples in the second (NaN: "
                            "none)")
    sm_active: np.ndarray = col("share", "per GPU: mean SM activity (GPM) of its samples in "
                                "the second (NaN: no GPM)")
    has: np.ndarray = col("bool", "the job sent data (some GPU sampled)")
    stopped: np.ndarray = col("bool", "every GPU seen, all below trickle_duty or all in a "
                              "gap of stop_gap_s ending in the second: the job stopped")
    alone: np.ndarray = col("bool", "one GPU at idle_duty..trickle_duty, every other below "
                            "idle_duty: one rank works alone at a trickle")
    lone_idle: np.ndarray = col("bool", "one GPU below trickle_duty, every other at "
                                "on_duty or more")
    all_on: np.ndarray = col("bool", "every GPU seen at on_duty or more: all at work")
    cold: np.ndarray = col("bool (G, T)", "per GPU: busy, working less than its peers "
                           "now: at most cold_power_ratio of the most active busy GPU's SM "
                           "activity (where it has SM activity; or spins), else of the "
                           "hottest busy GPU's power, power settled (POWER_LAG_S), its "
                           "clocks not held down (held_down); or every GPU busy at "
                           "spin_power_frac of its limit or less: waiting, not computing "
                           "(compared with its peers now: it sees a GPU that waited all "
                           "along; what the screen's COLD and the rules read)")
    full: np.ndarray = col("share", "the least duty of a GPU seen; 0 where a GPU is cold "
                           "or none sent data: warm work on every GPU")
    at_work: np.ndarray = col("bool", "steady work: every GPU seen at work_duty or more "
                              "(warm or not: ``full`` says that)")
    spinning: np.ndarray = col("bool", "one GPU stopped while every GPU at work spins "
                               "(where it has SM activity), or draws at most "
                               "stop_power_frac of its own highest power over the "
                               "context_s before: they spin in a collective (compared "
                               "with its own past: it sees every GPU at work dropping "
                               "together above spin_power_frac, which cold does not)")
    held: np.ndarray = col("bool", "lone_idle and spinning: one rank holds the others up")
    gap_stop: np.ndarray = col("bool", "every GPU sampled min_samples times or more, "
                               "each with a gap of stop_gap_s or more ending in the second")
    rank_starving: np.ndarray = col("bool (G, T)", "per GPU: its rank's host starves it "
                                    "(rank_starving)")
    starving: np.ndarray = col("bool", "some rank's host starves it, or storage feeds the "
                               "job (storage_bound)")
    writing: np.ndarray = col("bool", "disk writes at ckpt_write_mbps or more")
    holds: np.ndarray = col("bool (G, T)", "per GPU: in use (jobs.in_use: a process, or "
                            "mem_active_mib of memory; neither known: held, what its "
                            "kernels say no_kernels reads); a second without samples is "
                            "as the one before")
    present: np.ndarray = col("bool", "the job holds every GPU (holds): the job is there")
    workers: np.ndarray = col("workers", "the most loader workers of any rank (NaN: unknown)")
    loader_age: np.ndarray = col("s", "age of the youngest loader worker (NaN: unknown)")
    main_busy: np.ndarray = col("bool", "a rank's main process with loader workers at "
                                "core_busy_pct or more: busy with other work than feeding")
    _rows: Optional[list] = field(default=None, repr=False, compare=False)

    def row(self, i: int) -> Second:
        """Second ``i`` as Python values."""
        if self._rows is None:
            d = self.__dict__
            self._rows = [d[k].tolist() for k in _ROW_COLS]
        return Second(*[c[i] for c in self._rows])

    def rows(self):
        """Every second in turn, as ``row`` gives it."""
        if not len(self):
            return iter(())
        self.row(0)                         # (the columns as lists, once)
        return map(_SECOND, zip(*self._rows))

    def __len__(self) -> int:
        return len(self.n)

    def take(self, idx, names: Optional[tuple] = None) -> "SecondsTable":
        """The table at bins ``idx``, of the columns ``names`` only where given."""
        return SecondsTable(**{k: getattr(self, k)[..., idx]
                               for k in names or COLUMNS})

    @staticmethod
    def describe() -> dict:
        """Column -> (unit, meaning)."""
        return {f.name: (f.metadata["unit"], f.metadata["meaning"])
                for f in SecondsTable.__dataclass_fields__.values() if f.metadata}


COLUMNS = tuple(SecondsTable.describe())

# Second from a tuple of its fields, in C (Second._make checks the length in Python).
_SECOND = partial(tuple.__new__, Second)
_ROW_COLS = (["has", "stopped", "alone", "lone_idle", "all_on", "full", "n", "u", "held",
              "workers", "starving", "writing", "present", "loader_age", "main_busy", "at_work"])


def seconds(g: np.ndarray, h: np.ndarray, th: Thresholds = DEFAULT) -> SecondsTable:
    """The table of a job's bins ``g`` and host bins ``h``."""
    with np.errstate(invalid="ignore", divide="ignore"):
        duty, power, limit = N.div(g[_POWER_NUM], g[_POWER_DEN])
        sm = N.div(g[GI["sa"]], g[GI["san"]])
        cold = _cold(duty, power, limit, sm, th, settle=True)
        n_raw = _add(g[GI["n"]], 0)
        duty, n, u = fill_holes(duty, n_raw, _add(g[GI["u"]], 0), th)
        at = _any(cold, 0).nonzero()[0]
        if len(at):
            cold[:, at] &= ~_held_down_bins(g[:, :, at], th)
        gap = gap_stops(g, th)
        spin = spin_seconds(g, th, duty)
        cols = _work(duty, n, u, th, gap, _any(cold, 0), spin)
        cols.update(_host(g, h, n_raw, th))
    return SecondsTable(duty=duty, n=n, u=u, power=power, sm_active=sm, cold=cold,
                        spinning=spin,
                        gap_stop=gap, **cols)


def fill_holes(duty: np.ndarray, n: np.ndarray, u: np.ndarray, th: Thresholds
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per-GPU duty (G, T) and the job's sample count and busy sum per bin (T,), with each
    bin that has no sample (of a GPU; of the whole job) within max_sample_gap_s of the last
    one that had read as that one: an empty second between two samples is the sampler's
    jitter (a 1 s log drifting past a second) or its interval (a 2 s log), not a stop of
    the work nor the end of a stretch of it. Longer holes stay empty."""
    k = int(th.max_sample_gap_s / BIN_S)
    have = duty == duty                  # (NaN: no sample)
    if k <= 0 or _all(have, None):
        return duty, n, u
    ar = np.arange(len(n))
    last = np.maximum.accumulate(np.where(have, ar, -1), axis=-1)   # -1 before the first
    fill = ~have & (last >= 0) & (ar - last <= k)
    duty = np.where(fill, np.take_along_axis(duty, np.maximum(last, 0), axis=-1), duty)
    seen = _any(have | fill, 0)
    src = np.where(seen & (n == 0), np.maximum.accumulate(np.where(n > 0, ar, -1)), ar)
    return duty, n[src], u[src]


_POWER_NUM = [GI[k] for k in ("u", "pw", "pl")]
_POWER_DEN = [GI[k] for k in ("n", "pn", "pln")]


# a.any(axis=0), a.all(axis=0), a.sum(axis=0) as one ufunc call each: _any(a, 0) (the live
# detector makes many on tiny arrays, where numpy's Python wrappers cost more than the sums).
_any, _all, _add = np.logical_or.reduce, np.logical_and.reduce, np.add.reduce


def _work(duty: np.ndarray, n: np.ndarray, u: np.ndarray, th: Thresholds, gap: np.ndarray,
          cold: np.ndarray, spin: np.ndarray) -> dict:
    """The columns read from the GPUs' duty (see SecondsTable)."""
    G = len(duty)
    known = ~np.isnan(duty)
    low = duty < th.idle_duty               # (NaN, no data, compares False)
    on = duty >= th.on_duty
    stopped = duty < th.trickle_duty
    nk, nlow, nstop = _add(known, 0), _add(low, 0), _add(stopped, 0)
    seen = nk == G
    lone_idle = (nk > 1) & (nstop == 1) & (_add(on, 0) == nk - 1)
    full = np.where(nk > 0, np.minimum.reduce(np.where(known, duty, 1.0), 0), 0.0)
    at_work = seen & (full >= th.work_duty)
    full[cold] = 0.0
    return dict(
        has=_any(known, 0) & (n > 0),
        # (Seen on every GPU: a second in which some GPUs sent no sample is no stop.)
        stopped=((nstop == G) | gap) & seen,
        alone=(nk > 1) & (nlow == nk - 1) & (_add(stopped & ~low, 0) == 1),
        lone_idle=lone_idle, held=lone_idle & spin,
        all_on=_all(on | ~known, 0), full=full, at_work=at_work)


def gap_stops(g: np.ndarray, th: Thresholds = DEFAULT) -> np.ndarray:
    """(T,): every GPU sampled min_samples times or more in the second, and a gap of its
    samples (below seg_util_pct) of stop_gap_s or more on average ended in it: a stop shorter
    than a second, which the second's duty hides."""
    n, gn, gs = g[GI["n"]], g[GI["gapn"]], g[GI["gaps"]]
    one = (n >= th.min_samples) & (gn > 0) & (gs >= th.stop_gap_s * gn)
    return _all(one, 0) & (g.shape[1] > 0)


# -- spins: busy with few SMs active (GPM); power where a GPU has no SM activity ------------

def spins(duty, sm, th: Thresholds = DEFAULT):
    """A GPU busy (busy_duty) with under spin_sm_active of its SMs active: it spins in a
    collective (NCCL keeps a kernel on a few SMs while it waits), it does not compute. From
    duty and SM activity (shares; NaN SM activity: False)."""
    return (duty >= th.busy_duty) & (sm < th.spin_sm_active)


def by_sm(by_power, by_sm_activity, sm):
    """Per GPU, ``by_sm_activity`` where its SM activity ``sm`` is known, else ``by_power``
    (the reading of its power, the fallback where a GPU has no GPM)."""
    if not np.any(sm == sm):                # (no SM activity anywhere: power alone)
        return by_power
    return np.where(np.isnan(sm), by_power, by_sm_activity)


# -- cold: below the hottest GPU now (SM activity, else power) ------------------------------

def _cold(duty: np.ndarray, power: np.ndarray, limit: np.ndarray, sm: np.ndarray,
          th: Thresholds, settle: bool = False) -> np.ndarray:
    """(G, T): the cold column (SecondsTable.cold) of per-GPU duty (share), power and power
    limit (W) and SM activity (share, its own limit 1), NaN where unknown; ``settle``: power
    compared in the seconds whose power settled only (the first settle_bins only settling
    the ones after them)."""
    busy = duty >= th.busy_duty
    pw = np.where(busy, power, np.nan)
    frac = pw / np.where(limit > 0, limit, np.nan)
    cold = below_hottest(pw, frac, th)
    if settle:
        cold &= settled(_all(~np.isnan(pw), 0), th)
    cold |= _all_low(frac, ~np.isnan(pw), th)
    if np.isnan(sm).all():                  # (no SM activity anywhere: power alone)
        return cold
    sm_busy = np.where(busy, sm, np.nan)
    return by_sm(cold, spins(duty, sm, th) | below_hottest(sm_busy, sm_busy, th), sm)


def below_hottest(x: np.ndarray, frac: np.ndarray, th: Thresholds) -> np.ndarray:
    """(G, T): each GPU's reading ``x`` (NaN: not busy, or unknown) at most cold_power_ratio
    of the highest one's, at least power_spread below it as a share of its limit
    (``frac``; NaN: no check); fewer than two GPUs with a reading: none. A GPU that works
    less than its peers now: it waits part of each second for them."""
    known = ~np.isnan(x)
    hot = (np.where(known, x, -np.inf).argmax(axis=0), np.arange(x.shape[1]))
    gap = frac[hot] - frac
    cold = known & (x <= th.cold_power_ratio * x[hot]) & (np.isnan(gap)
                                                          | (gap >= th.power_spread))
    return cold & (_add(known, 0) >= 2) & (x[hot] > 0)


def _all_low(frac: np.ndarray, busy: np.ndarray, th: Thresholds) -> np.ndarray:
    """(T,): two GPUs or more, every one busy with power (``busy``), each drawing at most
    spin_power_frac of its limit (``frac``; unknown: as the others, one known at least):
    they all spin in a collective, none computes."""
    low = ~(frac > th.spin_power_frac)
    return ((len(busy) >= 2) & _all(busy, 0) & _all(low, 0)
            & _any(~np.isnan(frac), 0))


def busy_cold(util_pct: Mapping[int, Optional[float]], power_w: Mapping[int, Optional[float]],
              limit_w: Mapping[int, Optional[float]], th: Thresholds = DEFAULT,
              held: Optional[Mapping[int, bool]] = None,
              sm_active: Optional[Mapping[int, Optional[float]]] = None) -> frozenset[int]:
    """The GPUs the cold column marks on one set of readings (utilization %, power and
    limit W; ``held``: whose clocks are held down (held_down); ``sm_active``: SM activity
    (GPM, 0-1) where known; no seconds before them to settle): the screen's COLD mark."""
    gpus = list(power_w)
    if len(gpus) < 2 and not sm_active:     # (power compares two GPUs or more)
        return frozenset()

    def one(values, scale=1.0):
        return np.array([[np.nan if values.get(g) is None else values[g] / scale]
                         for g in gpus], dtype=float)
    with np.errstate(invalid="ignore", divide="ignore"):
        duty = one(util_pct, 100.0)
        cold = _cold(duty, one(power_w), one(limit_w), one(sm_active or {}), th)[:, 0]
    held = held or {}
    return frozenset(g for g, c in zip(gpus, cold) if c and not held.get(g, False))


def held_down(share, clock_frac, th: Thresholds = DEFAULT):
    """A GPU's clocks held down: clock-event reasons (thermal, power cap, hardware slowdown)
    in throttle_share of its samples or more, with its SM clock below throttle_clock_frac of
    its maximum (or unknown). It computes slowly: low power is no wait. From the share of
    samples with a reason (NaN: unknown) and the clock over its maximum."""
    with np.errstate(invalid="ignore"):
        return (share >= th.throttle_share) & np.where(
            np.isnan(clock_frac), True, clock_frac < th.throttle_clock_frac)


_EVENTS = [GI[k] for k in ("therm", "pcap", "hws", "clk", "cmax")]
_EVENTS_DEN = [GI[k] for k in ("en", "en", "en", "cn", "cmaxn")]


def _held_down_bins(g: np.ndarray, th: Thresholds) -> np.ndarray:
    """(G, T): held_down of each GPU in each bin of ``g``."""
    therm, pcap, hws, clk, cmax = N.div(g[_EVENTS], g[_EVENTS_DEN])
    return held_down(N.throttle_share(therm, pcap, hws), clk / cmax, th)


def settle_bins(th: Thresholds) -> int:
    """Seconds with every GPU at work before a second whose power is compared."""
    return max(0, bins(POWER_LAG_S))


def settled(all_busy: np.ndarray, th: Thresholds) -> np.ndarray:
    """(T,): the seconds in which power is compared across GPUs: every GPU at work in it and
    in the POWER_LAG_S before (the driver's power is a 1 s average, so a GPU's first
    second back from a wait, its own or spinning on a rank that waited, still reads cold)."""
    out = all_busy.copy()
    for k in range(1, settle_bins(th) + 1):
        out[k:] &= all_busy[:-k]
        out[:k] = False
    return out


# -- spinning: below its own working power before ---------------------------------------------

# Bins whose context is gathered at once by spin_seconds (bounds its scratch memory).
SPIN_CHUNK = 4096


def spin_seconds(g: np.ndarray, th: Thresholds = DEFAULT,
                 duty: Optional[np.ndarray] = None) -> np.ndarray:
    """The spinning column (SecondsTable.spinning, (T,)); power and SM activity unknown:
    False. ``duty``: the per-GPU duty, where the caller has it. Only bins with a GPU stopped
    beside one at work are read (a day-long log has few; a live second rarely is one)."""
    out = np.zeros(g.shape[-1], bool)
    if duty is None:
        duty = N.div(g[GI["u"]], g[GI["n"]])
    busy = duty >= th.busy_duty
    idx = (_any(duty < th.trickle_duty, 0) & _any(busy, 0)).nonzero()[0]
    idx = idx[idx > 0]                      # (the first bin has no power before it)
    if not len(idx):
        return out
    power = N.div(g[GI["pw"]], g[GI["pn"]])
    sm = N.div(g[GI["sa"]], g[GI["san"]])
    busy, d = busy[:, idx], duty[:, idx]
    ctx = np.arange(1, max(1, bins(th.context_s)) + 1)
    for a in range(0, len(idx), SPIN_CHUNK):
        i, b, di = idx[a:a + SPIN_CHUNK], busy[:, a:a + SPIN_CHUNK], d[:, a:a + SPIN_CHUNK]
        back = i[:, None] - ctx[None, :]                       # (k, ctx)
        before = np.where(back >= 0, power[:, np.maximum(back, 0)], np.nan)
        ref = np.fmax.reduce(before, axis=2)                   # (G, k): NaN where unknown
        spin = by_sm(power[:, i] <= th.stop_power_frac * ref, spins(di, sm[:, i], th),
                     sm[:, i])
        out[i] = _all(np.where(b, spin, True), 0)
    return out


# -- the host: starving, writing, present, loader workers ------------------------------------

# (The host's functions below compare NaN: call them under np.errstate(invalid="ignore").)

def storage_bound(io, rd, th: Thresholds = DEFAULT):
    """Storage feeds the job: iowait with disk reads, or heavy reads however little iowait."""
    return (rd > 0) & ((io >= th.iowait_pct) | (rd >= th.disk_read_busy_mbps))


def loaders_saturated(wk, ld, lb, th: Thresholds = DEFAULT):
    """A rank's loader workers saturated: their CPU, or how many of them are busy, at
    core_busy_pct of their capacity (from its workers, loader CPU %, busy workers)."""
    per = np.maximum(wk, 1)
    return (wk >= 0.5) & ((ld / (100 * per) >= th.core_busy_pct / 100)
                          | (lb / per >= th.core_busy_pct / 100))


def main_bound(wk, mc, mt, th: Thresholds = DEFAULT):
    """A rank without loader workers whose main process (or its busiest thread) is at
    core_busy_pct: it loads its batches itself, at a full core."""
    return (wk < 0.5) & (np.fmax(mc, mt) >= th.core_busy_pct)


def rank_starving(wk, ld, lb, mc, mt, th: Thresholds = DEFAULT):
    """Per rank, its host starves its GPU: loaders_saturated or main_bound. From the ratios
    of a rank's workers, loader CPU %, busy workers, main CPU % and main thread CPU % (NaN:
    unknown, never starving)."""
    return loaders_saturated(wk, ld, lb, th) | main_bound(wk, mc, mt, th)


# Fields the host columns divide (numerators, denominators), per GPU and for the host.
_RANK_NUM = [GI[k] for k in ("wk", "ld", "lb", "mc", "mt", "age")]
_RANK_DEN = [GI[k] for k in ("wkn", "ldn", "lbn", "mcn", "mtn", "agen")]
_HELD = ([GI["mem"], GI["pid"]], [GI["memn"], GI["pidn"]])
_H_NUM = [HI[k] for k in ("io", "rd", "wr")]
_H_DEN = [HI[k] for k in ("ion", "rdn", "wrn")]


def _host(g: np.ndarray, h: np.ndarray, n: np.ndarray, th: Thresholds) -> dict:
    """The columns read from the host and the job's processes (see SecondsTable); the
    ratios only where some bin has them (an nvidia-smi log has none)."""
    G, T = g.shape[1:]
    out = _ranks(g, th) if np.logical_or.reduce(g[_RANK_DEN], axis=None) else dict(
        rank_starving=np.zeros((G, T), bool), workers=np.full(T, np.nan),
        loader_age=np.full(T, np.nan), main_busy=np.zeros(T, bool))
    starving = _any(out["rank_starving"], 0)
    if np.logical_or.reduce(h[_H_DEN], axis=None):
        io, rd, wr = N.div(h[_H_NUM], h[_H_DEN])
        starving = starving | storage_bound(io, rd, th)
        out["writing"] = wr >= th.ckpt_write_mbps
    else:
        out["writing"] = np.zeros(T, bool)
    out["starving"] = starving
    out["holds"] = _holds(g, n, th)
    out["present"] = _all(out["holds"], 0)
    return out


def _ranks(g: np.ndarray, th: Thresholds) -> dict:
    """rank_starving per GPU, and the job's loader workers, youngest loader and main_busy."""
    wk, ld, lb, mc, mt, age = N.div(g[_RANK_NUM], g[_RANK_DEN])
    unknown, no_age = np.isnan(wk), np.isnan(age)
    return dict(
        rank_starving=rank_starving(wk, ld, lb, mc, mt, th),
        workers=np.where(_all(unknown, 0), np.nan,
                         np.maximum.reduce(np.where(unknown, -1, wk), 0)),
        loader_age=np.where(_all(no_age, 0), np.nan,
                            np.minimum.reduce(np.where(no_age, np.inf, age), 0)),
        main_busy=_any((wk >= 0.5) & (np.fmax(mc, mt) >= th.core_busy_pct), 0))


def _holds(g: np.ndarray, n: np.ndarray, th: Thresholds) -> np.ndarray:
    """(G, T): each GPU in use (jobs.in_use; neither known: held); a bin without
    samples (``n`` 0: a hole in the log says nothing of it) is as the last one before it."""
    mem, pid = N.div(g[_HELD[0]], g[_HELD[1]])
    holds = in_use(pid, mem, True, th)
    if len(n) > 1 and not np.logical_and.reduce(n[1:], axis=None):
        at = np.arange(len(n))
        holds = holds[:, np.maximum.accumulate(np.where((n > 0) | (at == 0), at, 0))]
    return holds

