"""The verdict rules: features of one job's windows in, verdict/cause/straggler out.

Vectorized over windows (shape (E,)), so one live window and every second of a day-long log
run the same code. Order of the rules, and why:

1. too few samples -> insufficient_data; a job that runs no kernels -> idle; an all-idle
   stretch after steady work -> a pause (checkpoint, validation, epoch end): still busy.
2. clock event reasons (thermal, power cap, hw slowdown) with the SM clock held down ->
   throttled; with several GPUs and not all throttled, the throttled one is the straggler.
3. GPUs of one job with different duty cycles: one is the odd one out. Whether the busier
   GPUs compute or spin decides who waits for whom: a rank waiting in an NCCL collective keeps
   a kernel running at low power (NVIDIA/nccl #968, #199, #1550; pytorch #36285), so the power
   gained per unit of duty cycle is small. Spinning busier GPUs -> the idle one starves
   (rank_data_stall: data_starvation on that GPU); computing busier GPU -> it is the straggler
   (sync_stall; DataParallel's GPU 0 when one process drives every GPU).
4. every GPU below duty_starved together -> data_starvation; cause from host counters.
5. every GPU ~100% but some at a fraction of the hottest one's power -> sync_stall (the cold
   ones spin in a collective while the hot one computes).
6. otherwise busy.
"""
from __future__ import annotations

import warnings
from typing import Optional

import numpy as np

from gpumon.detect import nanops as N

from gpumon.diagnosis import (BUSY, CAUSES, DATA_STARVATION, IDLE, INSUFFICIENT_DATA, PAUSED,
                              SYNC_STALL, THROTTLED, VERDICTS)
from gpumon.detect.pauses import storage_bound
from gpumon.detect.thresholds import DEFAULT, Thresholds

V = {v: i for i, v in enumerate(VERDICTS)}
CAUSE_NAMES = CAUSES
C = {c: i for i, c in enumerate(CAUSE_NAMES)}
# The rules, in the order they are tried; each window records the one that decided it
# (detect/explain.py says why, in numbers).
RULES = (
    "job_gone",           # idle: the job let go of its GPUs' memory
    "too_few_samples",    # insufficient_data
    "pause",              # paused: every GPU stopped after steady work (detect/pauses.py)
    "no_kernels",         # idle: no kernel in the window or before it, host not feeding
    "quiet_after_work",   # data_starvation: no kernel now, work just before, no pause
    "throttle",           # throttled: clock-event reasons with the clock held down,
                          # the GPUs not waiting for input their host cannot supply
    "rank_computes",      # sync_stall: one rank computes longer, the others wait for it
    "rank_host_starved",  # data_starvation: one rank idles and its own host starves
    "rank_host",          # sync_stall: one rank idles while the others spin; its host
    "duty_low",           # data_starvation: every GPU below duty_starved together
    "hang",               # sync_stall: every GPU busy but cold for hang_s, none computing
    "busy_but_cold",      # sync_stall: the others busy but cold beside the hottest GPU
    "busy",               # busy: none of the above
)
R = {r: i for i, r in enumerate(RULES)}

# Power gained per unit of duty cycle between the busier and the idler GPUs of a job, as a
# share of the power limit: a GPU computing draws ~50-80% of its limit more than idle, a GPU
# spinning in a collective ~5-35% more (nccl #968/#1550 readings), so the busier group
# "computes" above this slope and "spins" below it.
COMPUTE_SLOPE = 0.38
# Seconds after a stall in which a GPU that spun through it may still read cold (power is a
# 1 s average on recent drivers, and a second partly spent spinning averages low).
POWER_LAG_BINS = 2
# Seconds with every GPU at work needed before their power is compared (busy but cold).
POWER_MIN_BINS = 3
# Starvation with its cause on the host replaces busy at its first verdict (see "quick").
QUICK = True


def _nan(a):
    return np.where(np.isnan(a), -np.inf, a)


class _Calm:
    """A no-op context: judge() runs everything under one np.errstate(all="ignore")."""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


_CALM = _Calm()


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
        with _CALM:
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
            with _CALM:
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
        with _CALM:
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


def _host_starved(f: dict, th: Thresholds, suffix: str = "") -> np.ndarray:
    """(G, E): NaN where the GPU's job processes are unknown, else 1.0 / 0.0 (starving);
    over the window, or with suffix "_recent" over its last seconds."""
    w, main, thread = f["workers" + suffix], f["main_cpu" + suffix], f["main_thread" + suffix]
    with _CALM:
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
    _host_starved(f, th), where the caller has it)."""
    hs = _host_starved(f, th) if hs is None else hs
    G = hs.shape[0]
    if G < 2:
        return np.full(hs.shape[1], -1)
    known = (~np.isnan(hs)).all(axis=0)
    one = np.nansum(hs, axis=0) == 1
    return np.where(known & one, np.argmax(N.nan_to_num(hs), axis=0), -1)


def _judge(f: dict, shared_process: bool = False, th: Thresholds = DEFAULT) -> dict:
    """Verdict codes (index into VERDICTS), cause codes (index into CAUSE_NAMES or -1),
    straggler rows (or -1) and confidence per window."""
    duty = f["duty"]
    G, E = duty.shape
    ar = np.arange(E)
    with _CALM:
        jduty = N.nanmean(np.where(f["n"] > 0, duty, np.nan), axis=0) if G else np.full(E, np.nan)
        dmax = N.nanmax(_nan(duty), axis=0)
        dmin = N.nanmin(np.where(np.isnan(duty), np.inf, duty), axis=0)
        amax = np.argmax(_nan(duty), axis=0)
        amin = np.argmin(np.where(np.isnan(duty), np.inf, duty), axis=0)
    nmin = f["n"].min(axis=0) if G else np.zeros(E)
    verdict = np.full(E, V[BUSY])
    cause = np.full(E, -1)
    strag = np.full(E, -1)
    conf = np.full(E, 0.8)
    rule = np.full(E, R["busy"])
    decided = np.zeros(E, dtype=bool)
    host = Host(f, th)

    def decide(name, mask, v, c=None, s=None, cf=None):
        """Windows not decided yet where ``mask`` holds get verdict ``v`` by rule ``name``;
        ``c``, ``s`` and ``cf`` may be callables, evaluated only when some window takes
        this branch."""
        m = mask & ~decided
        if not m.any():
            return
        c, s, cf = (x() if callable(x) else x for x in (c, s, cf))
        verdict[m] = V[v]
        rule[m] = R[name]
        if c is not None:
            cause[m] = c[m] if isinstance(c, np.ndarray) else c
        if s is not None:
            strag[m] = s[m] if isinstance(s, np.ndarray) else s
        if cf is not None:
            conf[m] = cf[m] if isinstance(cf, np.ndarray) else cf
        decided[m] = True

    # The job has let go of its GPUs (no memory held where memory is known): idle, however
    # few of the window's seconds are left to judge (a job that ends during a pause has
    # every second of its last windows set aside).
    with _CALM:
        gone = (f["mem_last"] < th.mem_active_mib).all(axis=0) if G else np.zeros(E, bool)
    decide("job_gone", gone, IDLE, cf=0.9)
    insufficient = (nmin < th.min_samples) | (f["bins"] < 1) | np.isnan(jduty)
    # (A pause leaves its seconds out of the window: whether the window had samples at all
    # is counted with them, so a log sampled every 15 s is never "paused".)
    sparse = (f["n_all"].min(axis=0) if G else np.zeros(E)) < th.min_samples
    decide("too_few_samples", (insufficient & ~f["pause"]) | sparse, INSUFFICIENT_DATA,
           cf=0.3)
    decide("pause", f["pause"], PAUSED,
           c=np.where(f["pause_cause"] >= 0, f["pause_cause"], C["unknown"]), cf=0.6)
    # No kernels in the window: idle when the context was idle too (held when the job still
    # holds its GPUs' memory); after recent work it is a long gap of a starving job (a
    # paused job's gap is a pause, handled above).
    quiet = dmax < th.idle_duty
    feeding = host.starving_any()
    with _CALM:
        held = (f["mem_last"] >= th.mem_active_mib).any(axis=0) if G else np.zeros(E, bool)
    decide("no_kernels", quiet & ~(f["ctx_duty"] >= th.idle_duty) & ~feeding, IDLE,
           c=np.where(held, C["held"], -1),
           cf=np.clip(0.7 + 0.3 * (th.idle_duty - dmax) / th.idle_duty, 0.5, 0.99))
    decide("quiet_after_work", quiet, DATA_STARVATION, c=lambda: host.cause(np.full(E, -1)),
           cf=0.6)

    spread = dmax - dmin
    slope = np.full(E, np.nan)

    def result():
        return {"verdict": verdict, "cause": cause, "straggler": strag, "confidence": conf,
                "rule": rule,
                "duty": jduty, "spread": spread, "slope": slope, "host_starving": feeding,
                # Keep a starvation verdict through a flat-out stretch only while the host
                # still starves it and the recent context starved too.
                "sticky": feeding & (N.nan_to_num(f["ctx_duty"], nan=1.0) < th.duty_starved),
                # The host shows the cause now, in a job that has run without a pause for
                # window_max_s (after an epoch boundary new loader workers refill their queue
                # flat out, however well they keep up later): Hysteresis.step's ``quick``.
                "quick": feeding & (f["since_pause"] > th.window_max_s / th.bin_s) & QUICK}
    if decided.all():               # live: one window, often settled here (pause, idle)
        return result()

    # Throttled: clock event reasons with the clock really held down.
    share = np.fmax(np.fmax(N.nan_to_num(f["therm_share"]), N.nan_to_num(f["pcap_share"])),
                    N.nan_to_num(f["hws_share"]))
    clock_low = np.where(np.isnan(f["clock_frac"]), True, f["clock_frac"] < th.throttle_clock_frac)
    thr = (share >= th.throttle_share) & clock_low                       # (G, E)
    nthr = thr.sum(axis=0)
    tgpu = np.argmax(np.where(thr, share, -1.0), axis=0)
    tcause = np.select(
        [f["therm_share"][tgpu, ar] >= th.throttle_share if G else np.zeros(E, bool),
         f["pcap_share"][tgpu, ar] >= th.throttle_share if G else np.zeros(E, bool)],
        [C["thermal"], C["power_cap"]], C["hw_slowdown"]) if G else np.full(E, -1)
    # (Not while every GPU waits for input its host cannot supply: a slow clock is not what
    # holds the job back then.)
    waiting = feeding & (jduty < th.duty_starved)
    decide("throttle", (nthr > 0) & ~waiting, THROTTLED, c=tcause,
           s=np.where((G > 1) & (nthr < G), tgpu, -1),
           cf=np.clip(0.6 + 0.4 * share.max(axis=0) if G else 0.6, 0, 0.95))

    if decided.all():
        return result()
    # A lone stall that is over: every GPU has run at full speed for recover_s since, with
    # host counters that show no cause over the window. One slow batch stalls a rank for
    # seconds; its window (stretched up to window_max_s) would hold starvation, or a stall
    # naming the rank that spun meanwhile, for that long after. (Loaders saturated only in
    # the last seconds are refilling the prefetch queue the stall drained.) Starvation that
    # recurs shows on the host, or in the next stall.
    known = ~np.isnan(hs_known(f))
    run = f["full_run"]
    stall = f["stall_bins"]
    # (The stall ends inside the window and began within the last window_max_s, which
    # every caller's view of the bins holds: live and offline see the same stall.)
    lone = (known & ~host.starving_any(recent=False) & (run >= th.recover_s / th.bin_s)
            & (stall > 0) & (stall <= th.lone_stall_s / th.bin_s)
            & (run + stall <= th.window_max_s / th.bin_s))
    over = lone & (run < f["window"])
    # The GPUs that spun during it read cold a little longer: power is a 1 s average.
    over_power = lone & (run < f["window"] + POWER_LAG_BINS)
    # The rank whose own host counters show starvation while the others' do not.
    starved_w = _host_starved(f, th)
    hs = host_straggler(f, th, starved_w)
    # Straggler by duty cycle: who waits for whom.
    if G > 1:
        mid = (dmax + dmin) / 2.0
        hi = duty >= mid[None, :]
        with _CALM:
            pf = f["power_frac"]
            p_hi = N.nanmean(np.where(hi, pf, np.nan), axis=0)
            p_lo = N.nanmean(np.where(~hi, pf, np.nan), axis=0)
            d_hi = N.nanmean(np.where(hi, duty, np.nan), axis=0)
            d_lo = N.nanmean(np.where(~hi, duty, np.nan), axis=0)
            slope = (p_hi - p_lo) / np.maximum(d_hi - d_lo, 1e-6)
            # Without power: a single busier GPU against several idler ones computes.
            lone_hi = hi.sum(axis=0) == 1
        computes = np.where(np.isnan(slope), lone_hi & (G > 2), slope >= COMPUTE_SLOPE)
        # A straggler is one GPU the others wait for: when more GPUs run flat out than idle,
        # the idle minority is the odd one out (its input), whatever the power says while
        # the 1 s power averages catch up; a busy minority against idle ones is the straggler.
        nhi = hi.sum(axis=0)
        computes = np.where(nhi > G - nhi, False, np.where(nhi < G - nhi, True, computes))
        computes &= d_hi >= th.spin_duty
        # Unless the idler ranks' own hosts starve (loaders saturated, main process at a
        # core): then they wait for input, and the busy one spins in the collective waiting
        # for them (a data-starved NCCL job's ranks drift apart).
        starved_g = starved_w
        if "workers_recent" in f:
            starved_g = np.fmax(starved_g, _host_starved(f, th, "_recent"))
        with _CALM:
            lo_starve = N.nanmax(np.where(~hi, starved_g, np.nan), axis=0)
        computes &= ~(lo_starve >= 1.0)
        if shared_process:
            computes = d_hi >= th.spin_duty
        asym = (spread >= th.duty_spread) & ~over
        sc = np.clip(0.6 + (spread - th.duty_spread), 0.6, 0.95)
        decide("rank_computes", asym & computes, SYNC_STALL,
               c=C["dataparallel"] if shared_process else C["imbalance"], s=amax, cf=sc)
        # The busier GPUs spin (or nobody runs continuously): a rank is held up on its host.
        # Its own host counters decide: starving (loaders saturated, main process at a core,
        # storage) is data_starvation on it; otherwise, and always without host counters,
        # the cause is on that rank's host but cannot be told (its input, a checkpoint or
        # logging on it): sync_stall, cause rank_host. Several ranks idling in turn with no
        # host counters to name one: the job as a whole waits (duty_low below).
        idle = N.nan_to_num(f["idle_share"])
        others_idle = np.where(np.arange(G)[:, None] == amin[None, :], 0.0, idle).max(axis=0)
        lone_idler = np.where(others_idle < th.lone_idle_share, amin, -1)
        decide("rank_host_starved", asym & (hs >= 0), DATA_STARVATION,
               c=lambda: host.cause(hs), s=hs, cf=sc)
        decide("rank_host", asym & (lone_idler >= 0) & ~feeding, SYNC_STALL, c=C["rank_host"],
               s=lone_idler, cf=np.minimum(sc, 0.7))
        decide("duty_low", asym, DATA_STARVATION, c=lambda: host.cause(np.full(E, -1)), cf=sc)

    # With host counters that show no cause (loaders not saturated, no main process at a
    # core, no iowait), a mild dip is the step's own uploads and launches, not waiting.
    limit = np.where(known & ~feeding, th.duty_starved_calm_host, th.duty_starved)
    # Without host counters, every GPU steady in every second: the step's own gaps (at
    # steady_bin_duty or more; or at steady_floor_duty or more, flat to the second).
    steady = ~known & (f["bins"] >= th.min_samples) & (
        (f["low_bins"] == 0) | ((f["floor_bins"] == 0) & (f["duty_sd"] <= th.steady_duty_sd)))
    starved = (jduty < limit) & ~steady & ~over
    decide("duty_low", starved, DATA_STARVATION, c=lambda: host.cause(hs), s=hs,
           cf=np.clip(0.6 + (th.duty_starved - jduty), 0.6, 0.95))

    if decided.all():
        return result()
    # Every GPU busy but cold for hang_s, none computing: a collective that never completes.
    decide("hang", (G > 1) & (f["cold_run"] >= th.hang_s / th.bin_s), SYNC_STALL,
           c=C["hang"], cf=0.8)
    # Every GPU reads ~100%: busy-but-cold ones spin while the hottest computes.
    if G > 1:
        pfb = f["power_frac_busy"]
        rel = f["rel_power"]
        with _CALM:
            # The hottest GPU; without a power limit, by its power relative to the others.
            hot = np.where(np.isnan(pfb).all(axis=0), np.argmax(_nan(rel), axis=0),
                           np.argmax(_nan(pfb), axis=0))
            top = pfb[hot, ar]
            known = ~np.isnan(pfb)
            # Mean power of the other GPUs (a median costs 20x more for the same answer).
            med = (np.where(known, pfb, 0.0).sum(axis=0) - N.nan_to_num(top)) / np.maximum(
                known.sum(axis=0) - 1, 1)
            med = np.where(known.sum(axis=0) > 1, med, np.nan)
            rel_min = np.where(np.isnan(rel), np.inf, rel).min(axis=0)
        # Without a power limit (dmon logs) the ratio to the hottest GPU decides alone.
        gap = top - med
        # (Power is a 1 s average: a GPU's first seconds back at work after a stop read low
        # while it ramps, so a few seconds of every GPU at work are needed to compare.)
        cold = ((rel_min <= th.cold_power_ratio) & ((gap >= th.power_spread) | np.isnan(gap))
                & ~over_power       # (the cold GPU spun during the stall that is over)
                & (f["all_busy_bins"] >= POWER_MIN_BINS))
        decide("busy_but_cold", cold, SYNC_STALL,
               c=C["dataparallel"] if shared_process else C["imbalance"],
               s=hot, cf=np.clip(0.55 + N.nan_to_num(gap, nan=0.05), 0.55, 0.95))
    decide("busy", np.ones(E, bool), BUSY,
           cf=np.clip(0.6 + 2.0 * (jduty - th.duty_starved), 0.5, 0.95))
    return result()


def judge(f: dict, shared_process: bool = False, th: Thresholds = DEFAULT) -> dict:
    """Verdict codes (index into VERDICTS), cause codes (index into CAUSE_NAMES or -1),
    straggler rows (or -1), confidence and whether the host shows starvation, per window.
    (Windows without power or host counters make all-NaN slices: expected, not warnings.)"""
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore", RuntimeWarning)
        return _judge(f, shared_process, th)
