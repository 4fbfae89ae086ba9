"""The detector's pipeline, one stage per function, shared by its three drivers:
``diagnose`` (below: one window, no state), ``StreamingDetector`` (stream.py: live, second
by second, with hysteresis) and ``gpumon analyze`` (analyze/timeline.py: every second of a
log, with hindsight).

    ticks -> columns (tick_columns) -> per-second bins (bins.Store)
          -> jobs (store_jobs) -> per job: duty per bin (bin_duty), pauses (pauses.py)
          -> window features and rules (judge_job: features.py, rules/)
          -> Diagnosis with evidence, rule and reason (make_diagnosis)
"""
from __future__ import annotations

import math
from typing import Optional, Sequence

import numpy as np

from gpumon.detect import nanops as N

from gpumon.diagnosis import CAUSES, Diagnosis, INSUFFICIENT_DATA, VERDICTS
from gpumon.samples import Tick
from gpumon.detect.advice import advice
from gpumon.detect.bins import GI, HostCols, JobCols, SampleCols, Store
from gpumon.detect.features import window_features
from gpumon.detect.jobs import GroupMemo, active, group_active
from gpumon.detect.pauses import pause_flags
from gpumon.detect.seconds import seconds
from gpumon.detect.rules import BY_NAME, RULES, judge
from gpumon.detect.rules.idle import NO_SAMPLES, no_job, too_few_samples
from gpumon.detect.rules.words import Window, no_util_text
from gpumon.detect.thresholds import BIN_S, DEFAULT, Thresholds

# The evidence keys, in order (stable: the exporter and the dashboard show them).
EVIDENCE_KEYS = (
    "duty_cycle", "duty_min", "duty_max", "util_pct", "burst_s", "gap_s", "gap_sync",
    "power_frac", "power_frac_busy", "busy_cold_share", "rel_power_min", "clock_frac",
    "throttle_share", "loader_cpu_pct", "loader_workers", "loader_busy", "main_cpu_pct",
    "main_thread_max_pct", "iowait_pct", "disk_read_mbps", "disk_write_mbps", "samples_per_s",
    "pause",
)
NAN = float("nan")


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
                   None if s.pids is None else bool(s.pids)) for s in gs]
        for s in gs:
            if s.pids is not None:
                pids[s.gpu] = s.pids
            elif s.gpu not in pids:
                pids[s.gpu] = None
        host = tick.host
        if host is None:
            continue
        # A host reading at tick time T describes the tick's interval, the seconds its GPU
        # samples fill: date it inside them (at most half a second back), so it lands in the
        # same per-second bin as the GPU samples it goes with, not the next one.
        ht = host.time
        if gs:
            ht -= min(0.5, max(0.0, ht - min(s.time for s in gs)) / 2)
        hrows.append((ht, host.iowait_pct, host.disk_read_mbps, host.disk_write_mbps,
                      host.cpu_pct))
        jrows += [(ht, j.gpu, j.loader_cpu_pct, j.main_cpu_pct, j.main_thread_max_pct,
                   j.loader_workers, j.loader_busy, j.loader_age_s) for j in host.jobs]
        for p in host.procs:
            ppid[p.pid] = p.ppid
    G = _cols(grows, 10)
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


def _num(x) -> Optional[float]:
    if x is None:
        return None
    x = float(x)
    return round(x, 4) if x - x == 0.0 else None      # (NaN and +-inf: None)


def evidence(f: dict, e: int, strag_row: int, th: Thresholds = DEFAULT) -> dict:
    """The evidence dict of window ``e`` (numbers or None, keys EVIDENCE_KEYS)."""
    def col(name):
        return f[name][:, e]

    def mean(name):
        return _mean(col(name))

    def known(name):         # (the column's numbers, NaN left out)
        return [x for x in f[name][:, e].tolist() if x == x]

    relk = known("rel_power")
    clock = known("clock_frac")
    ev = {
        **_duty_runs(f, e),
        "gap_sync": _num(f["gap_sync"][e]) if f["duty"].shape[0] > 1 else None,
        "power_frac": mean("power_frac"),
        "power_frac_busy": mean("power_frac_busy"),
        "busy_cold_share": (sum(x <= th.cold_power_ratio for x in relk) / len(relk)
                            if len(relk) > 1 else None),
        "rel_power_min": min(relk) if len(relk) > 1 else None,
        "clock_frac": min(clock) if clock else None,
        "throttle_share": (max(N.throttle_share(col("therm_share"), col("pcap_share"),
                                                col("hws_share")).tolist())
                           if known("therm_share") else None),
        **_host(f, e, strag_row),
        "iowait_pct": _num(f["iowait"][e]),
        "disk_read_mbps": _num(f["disk_read"][e]),
        "disk_write_mbps": _num(f["disk_write"][e]),
        # (Over the whole window, pauses included: a pause leaves its seconds out of the
        # other sums, not out of what the driver delivered.)
        "samples_per_s": (float(N.nanmean(col("n_all"))) / float(f["window"][e])
                          if f["duty"].shape[0] and "n_all" in f else None),
        "pause": float(bool(f["pause"][e])),
    }
    return {k: _num(ev[k]) for k in EVIDENCE_KEYS}


def _duty_runs(f: dict, e: int) -> dict:
    """Window ``e``'s duty (mean, least and most of the job's GPUs) and, in the same
    seconds, its bursts and gaps (_job_runs)."""
    d = f["duty"][:, e]
    d = d[~np.isnan(d)]
    dl = d.tolist()
    dmean = float(d.sum()) / len(d) if dl else None
    return {"duty_cycle": dmean, "duty_min": min(dl) if dl else None,
            "duty_max": max(dl) if dl else None,
            "util_pct": 100.0 * dmean if dl else None,
            **_job_runs(f, e)}


def _job_runs(f: dict, e: int) -> dict:
    """The job's burst_s and gap_s in window ``e``: its GPUs' busy (idle) time over their
    bursts (gaps), each GPU's runs its time over its run length (features.run_lengths);
    None where no GPU's were measured."""
    t = f["run_t"][:, :, e]                              # (2, G): busy, idle seconds
    run = np.array([f["burst_s"][:, e], f["gap_s"][:, e]])
    known = run > 0                                      # (NaN: none measured)
    k = np.divide(t, run, out=np.zeros_like(t), where=known)    # runs
    T, K = np.add.reduce(np.where(known, t, 0.0), axis=1), np.add.reduce(k, axis=1)
    return {key: float(T[i] / K[i]) if K[i] > 0 else None
            for i, key in enumerate(("burst_s", "gap_s"))}


def _mean(a: np.ndarray) -> Optional[float]:
    """The mean of ``a``'s numbers (NaN left out; None: none)."""
    a = a[~np.isnan(a)]
    return float(a.sum()) / len(a) if len(a) else None   # a.mean() without its checks


def _host(f: dict, e: int, strag_row: int) -> dict:
    """The job's host readings in window ``e``: the straggler's, else the largest."""
    def hostval(name):       # (max in plain Python: the same number, on a few values)
        a = f[name][:, e].tolist()
        if strag_row >= 0 and not math.isnan(a[strag_row]):
            return a[strag_row]
        a = [x for x in a if x == x]          # (NaN != NaN)
        return max(a) if a else None

    return {k: hostval(name) for k, name in (
        ("loader_cpu_pct", "loader_cpu"), ("loader_workers", "workers"),
        ("loader_busy", "loader_busy"), ("main_cpu_pct", "main_cpu"),
        ("main_thread_max_pct", "main_thread"))}


def missing_signals(f: dict, e: int) -> tuple[str, ...]:
    """Signals absent from the input (the whole view, pauses included), and sub-second
    utilization when the window's GPUs gave fewer than 2 samples a second."""
    out = []
    n = f["n"][:, e]
    bins = float(f["bins"][e])
    # (No second in which every GPU had a sample, though they had samples: sampled seconds
    # apart.)
    if len(n) and n.sum() > 0 and (bins == 0 or float(n.mean()) / bins < 2.0):
        out.append("subsecond_util")
    def seen(k):     # (an array when analyze joined the features of several chunks)
        v = f["seen_" + k]
        return v if v.__class__ is bool else bool(np.any(v))

    if not seen("power"):
        out.append("power")
    elif not seen("power_limit"):
        out.append("power_limit")
    out += [k for k in ("clocks", "clock_events", "processes", "memory", "job_processes",
                        "host") if not seen(k)]
    return tuple(out)


# Confidence lost for each missing signal: without sub-second samples bursts blur; without
# power busy-but-cold cannot be seen; without host counters the cause is a guess.
CONFIDENCE_FACTOR = {"subsecond_util": 0.8, "power": 0.85, "job_processes": 0.9, "host": 0.95}


def make_diagnosis(f: dict, r: dict, e: int, gpus: Sequence[int], start: Optional[float],
                   end: Optional[float], th: Thresholds = DEFAULT) -> Diagnosis:
    v = VERDICTS[int(r["verdict"][e])]
    c = int(r["cause"][e])
    s = int(r["straggler"][e])
    missing = missing_signals(f, e)
    conf = float(r["confidence"][e])
    for m in missing:
        conf *= CONFIDENCE_FACTOR.get(m, 1.0)
    cause = CAUSES[c] if c >= 0 else None
    strag = gpus[s] if s >= 0 else None
    ev = evidence(f, e, s, th)
    rule = RULES[int(r["rule"][e])] if "rule" in r else ""
    with np.errstate(all="ignore"):
        why = BY_NAME[rule].because(Window(f, e, gpus, s, ev, th)) if rule else ""
    return Diagnosis(verdict=v, gpus=tuple(gpus), cause=cause, straggler_gpu=strag,
                     confidence=round(conf, 3), evidence=ev,
                     advice=advice(v, cause, strag), start=start, end=end, missing=missing,
                     rule=rule, because=why)


def store_jobs(store: Store, stop: int, w: int, pids: dict, ppid: dict,
               th: Thresholds = DEFAULT, memo: Optional[GroupMemo] = None,
               latest: bool = False, recent: frozenset = frozenset(),
               gone: frozenset = frozenset()):
    """Jobs from the last ``w`` bins before ``stop`` (memory, activity) and the PIDs seen
    (``memo``: a GroupMemo that keeps the grouping while its inputs stay the same). With
    ``latest``, each GPU is read in its own last bin with samples among those (a GPU with
    no sample in the last second is not thereby unused). ``recent``: GPUs that ran a kernel
    within idle_after_s; without process or memory info they are in use (a slow loader's
    job between its bursts), as no_kernels calls a job idle only after that long. ``gone``:
    GPUs lost (NVML: GPU is lost): they have left every job (their missing samples are no
    idle rank, and never a straggler)."""
    lo = max(0, stop - w)
    s = store.g[_JOB_ROWS, :, lo:stop]
    if latest:
        has = s[0] > 0                                    # (G, T): a sample in the bin
        last = s.shape[2] - 1 - np.argmax(has[:, ::-1], axis=1)
        s = np.where(has.any(axis=1), s[:, np.arange(s.shape[1]), last], 0.0)
    else:
        s = s.sum(axis=2)
    # (Python floats where the store is float64: the same quotients, computed faster.)
    n, quiet, memn, mem = s.tolist() if s.dtype == np.float64 else s
    act = [gpu for i, gpu in enumerate(store.gpus)
           if gpu not in gone and active(pids.get(gpu), mem[i] / memn[i] if memn[i] > 0 else NAN,
                     1.0 if gpu in recent else (n[i] - quiet[i]) / n[i] if n[i] > 0 else NAN,
                     th)]
    return (memo or group_active)(act, pids, ppid)


_JOB_ROWS = [GI["n"], GI["idle"], GI["memn"], GI["mem"]]


def bin_duty(g: np.ndarray):
    """Per-GPU duty per bin (G, T), and the job's sample count and busy sum per bin (T,)."""
    n = g[GI["n"]]
    u = g[GI["u"]]
    with np.errstate(invalid="ignore", divide="ignore"):
        duty = N.div(u, n)
    return duty, n.sum(axis=0), u.sum(axis=0)


def active_since(g: np.ndarray, th: Thresholds = DEFAULT) -> int:
    """First bin of the last unbroken stretch in which every GPU of the job was in use
    (processes, memory, or without either, a kernel within idle_after_s: store_jobs)."""
    with np.errstate(invalid="ignore", divide="ignore"):
        pid = N.div(g[GI["pid"]], g[GI["pidn"]])
        mem = N.div(g[GI["mem"]], g[GI["memn"]])
    k = (g[GI["n"]] - g[GI["idle"]]) > 0                 # (G, T): a kernel in the bin
    at = np.arange(k.shape[-1])
    since_k = at - np.maximum.accumulate(np.where(k, at, -(1 << 30)), axis=-1)
    ran = since_k < int(round(th.idle_after_s / BIN_S))
    act = np.where(~np.isnan(pid), pid > 0, False) | np.where(
        ~np.isnan(mem), mem >= th.mem_active_mib, np.isnan(pid) & ran)
    allact = act.all(axis=0)
    off = np.flatnonzero(~allact)
    return int(off[-1] + 1) if len(off) else 0



def judge_job(g: np.ndarray, h: np.ndarray, pause: np.ndarray, ends: np.ndarray, shared: bool,
              th: Thresholds = DEFAULT, w: int = 0, keep: Optional[np.ndarray] = None,
              excluded: Optional[np.ndarray] = None, why: Optional[np.ndarray] = None,
              recent: Optional[np.ndarray] = None):
    """Features and rule output for one job's bins at windows ending at ``ends``."""
    f = window_features(g, h, ends, pause, th, w, keep, excluded, why, recent)
    return f, judge(f, shared, th)


def idle_diagnosis(gpus: Sequence[int], start, end, th: Thresholds = DEFAULT,
                   whole_log: bool = False) -> Diagnosis:
    """No job on these GPUs (store_jobs found none): the rule ``no_job``; ``whole_log``: found
    over a whole log (analyze), not live."""
    return Diagnosis(verdict=no_job.verdict, gpus=tuple(gpus), confidence=0.9,
                     evidence={k: None for k in EVIDENCE_KEYS},
                     advice=advice(no_job.verdict, None, None), start=start, end=end,
                     rule=no_job.name, because=no_job.because(th, whole_log))


def no_data_diagnosis(gpus: Sequence[int], start, end,
                      because: str = NO_SAMPLES) -> Diagnosis:
    """A window in which no GPU of the job sent a sample: the rule ``too_few_samples``."""
    return Diagnosis(verdict=too_few_samples.verdict, gpus=tuple(gpus), confidence=0.0,
                     evidence={k: None for k in EVIDENCE_KEYS},
                     advice=advice(too_few_samples.verdict, None, None), start=start,
                     end=end, rule=too_few_samples.name, because=because)


def no_job_diagnoses(store: Store, lo: int, stop: int, start, end, th: Thresholds = DEFAULT,
                     gone: frozenset = frozenset(), whole_log: bool = False) -> list[Diagnosis]:
    """No GPU in use (store_jobs found no job in bins lo..stop): idle, said only of the GPUs
    that sent utilization samples there; one that sent none (a MIG instance, a vGPU, the
    metric unsupported) has no verdict: its processes and memory alone cannot tell idle
    from busy. Lost GPUs (``gone``) are left out."""
    n = store.g[GI["n"], :, lo:stop].sum(axis=1).tolist()
    gpus = sorted(g for g in store.gpus if g not in gone)
    blind = [g for g in gpus if not n[store.rows[g]] > 0]
    out = [idle_diagnosis([g for g in gpus if g not in blind], start, end, th, whole_log)] \
        if len(blind) < len(gpus) else []
    if blind:
        out.append(no_data_diagnosis(blind, start, end, no_util_text(blind)))
    return out


def diagnose(window: Sequence[Tick], th: Thresholds = DEFAULT) -> list[Diagnosis]:
    """One Diagnosis per job, judged on the whole window (no hysteresis, no state)."""
    samples, jobs, hosts, pids, ppid = tick_columns(window)
    gone = frozenset(g for t in window for g in t.lost)
    if len(samples.time) == 0:
        return [Diagnosis(verdict=INSUFFICIENT_DATA, confidence=0.0,
                          evidence={k: None for k in EVIDENCE_KEYS},
                          advice="not enough samples yet")]
    start, end = float(samples.time.min()), float(samples.time.max())
    store = Store(math.floor(start), th)
    store.add_samples(samples)
    store.add_jobs(jobs)
    store.add_host(hosts)
    nb = store.nb
    found = store_jobs(store, nb, nb, pids, ppid, th, gone=gone)
    if not found:
        return no_job_diagnoses(store, 0, nb, start, end, th, gone, whole_log=True)
    out = []
    for gpus, shared in found:
        g, h = store.view([store.rows[x] for x in gpus])
        pause, excl, why = pause_flags(seconds(g, h, th), th)
        f, r = judge_job(g, h, pause, np.array([nb - 1]), shared, th, w=nb, excluded=excl,
                         why=why)
        out.append(make_diagnosis(f, r, 0, gpus, start, end, th))
    return out
