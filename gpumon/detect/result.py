"""The detector's results: a window's rule output as a Diagnosis, with its evidence (numbers
a user can check), the signals it lacked, its confidence, rule and reason; and the
Diagnoses said without a window (no job on the GPUs, no samples)."""
from __future__ import annotations

import math
from dataclasses import replace
from typing import Optional, Sequence

import numpy as np

from gpumon.detect import nanops as N

from gpumon.diagnosis import CAUSES, Diagnosis, VERDICTS
from gpumon.detect.advice import advice
from gpumon.detect.bins import GI, Store
from gpumon.detect.rules import BY_NAME, RULES
from gpumon.detect.rules.idle import NO_SAMPLES, no_job, too_few_samples
from gpumon.detect.rules.words import Window, no_util_text
from gpumon.detect.thresholds import DEFAULT, Thresholds

# The evidence keys, in order (stable: the exporter and the dashboard show them).
EVIDENCE_KEYS = (
    "duty_cycle", "duty_min", "duty_max", "util_pct", "burst_s", "gap_s", "gap_sync",
    "power_frac", "power_frac_busy", "busy_cold_share", "rel_power_min", "clock_frac",
    "throttle_share", "loader_cpu_pct", "loader_workers", "loader_busy", "main_cpu_pct",
    "main_thread_max_pct", "iowait_pct", "disk_read_mbps", "disk_write_mbps", "samples_per_s",
    "pause", "sm_active",
)


def _num(x) -> Optional[float]:
    if x is None:
        return None
    x = float(x)
    return round(x, 4) if x - x == 0.0 else None      # (NaN and +-inf: None)


def evidence(f: dict, e: int, strag_row: int) -> dict:
    """The evidence dict of window ``e`` (numbers or None, keys EVIDENCE_KEYS)."""
    def col(name):
        return f[name][:, e]

    def mean(name):
        return _mean(col(name))

    def known(name):         # (the column's numbers, NaN left out)
        return [x for x in f[name][:, e].tolist() if x == x]

    duty, dmean, relk, sm = known("duty"), mean("duty"), known("rel_power"), col("sm_active")
    ev = {
        "duty_cycle": dmean, "duty_min": min(duty, default=None),
        "duty_max": max(duty, default=None),
        "util_pct": None if dmean is None else 100.0 * dmean,
        **_job_runs(f, e),      # (bursts and gaps in the same seconds)
        "gap_sync": _num(f["gap_sync"][e]) if f["duty"].shape[0] > 1 else None,
        "power_frac": mean("power_frac"),
        "power_frac_busy": mean("power_frac_busy"),
        "busy_cold_share": mean("cold_share") if len(duty) > 1 else None,
        "rel_power_min": min(relk) if len(relk) > 1 else None,
        "clock_frac": min(known("clock_frac"), default=None),
        "throttle_share": (max(N.throttle_share(col("therm_share"), col("pcap_share"),
                                                col("hws_share")).tolist())
                           if known("therm_share") else None),
        **_host(f, e, strag_row),
        "iowait_pct": _num(f["iowait"][e]),
        "disk_read_mbps": _num(f["disk_read"][e]),
        "disk_write_mbps": _num(f["disk_write"][e]),
        # (Over the whole window, pauses included: a pause leaves its seconds out of the
        # other sums, not out of what the driver delivered.)
        "samples_per_s": mean("n_all") / float(f["window"][e]),
        "pause": float(bool(f["pause"][e])),
        "sm_active": None if np.isnan(sm).any() else float(sm.mean()),   # (GPM on every GPU)
    }
    return {k: _num(ev[k]) for k in EVIDENCE_KEYS}


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
    if not f["seen_power"]:
        out.append("power")
    elif not f["seen_power_limit"]:
        out.append("power_limit")
    out += [k for k in ("clocks", "clock_events", "processes", "memory", "job_processes",
                        "host") if not f["seen_" + k]]
    return tuple(out)


# Confidence lost for each missing signal: without sub-second samples bursts blur; without
# power busy-but-cold cannot be seen; without host counters the cause is a guess.
CONFIDENCE_FACTOR = {"subsecond_util": 0.8, "power": 0.85, "job_processes": 0.9, "host": 0.95}


def discounted(conf: float, missing: Sequence[str]) -> float:
    """Confidence ``conf`` less what each missing signal costs (CONFIDENCE_FACTOR)."""
    for m in missing:
        conf *= CONFIDENCE_FACTOR.get(m, 1.0)
    return conf


def make_diagnosis(f: dict, r: dict, e: int, gpus: Sequence[int], start: Optional[float],
                   end: Optional[float], th: Thresholds = DEFAULT) -> Diagnosis:
    v = VERDICTS[int(r["verdict"][e])]
    c = int(r["cause"][e])
    s = int(r["straggler"][e])
    missing = missing_signals(f, e)
    conf = discounted(float(r["confidence"][e]), missing)
    cause = CAUSES[c] if c >= 0 else None
    strag = gpus[s] if s >= 0 else None
    ev = evidence(f, e, s)
    rule = RULES[int(r["rule"][e])]
    with np.errstate(all="ignore"):
        why = BY_NAME[rule].because(Window(f, e, gpus, s, ev, th))
    return Diagnosis(verdict=v, gpus=tuple(gpus), cause=cause, straggler_gpu=strag,
                     confidence=round(conf, 3), evidence=ev,
                     advice=advice(v, cause, strag), start=start, end=end, missing=missing,
                     rule=rule, because=why)


def said(r, gpus: Sequence[int], start, end, confidence: float, because: str) -> Diagnosis:
    """Rule ``r``'s verdict of ``gpus`` said without a window (no evidence)."""
    return Diagnosis(verdict=r.verdict, gpus=tuple(gpus), confidence=confidence,
                     evidence=dict.fromkeys(EVIDENCE_KEYS), advice=advice(r.verdict, None, None),
                     start=start, end=end, rule=r.name, because=because)


def idle_diagnosis(gpus: Sequence[int], start, end, th: Thresholds = DEFAULT,
                   whole_log: bool = False) -> Diagnosis:
    """No job on these GPUs (store_jobs found none; ``whole_log``: over a whole log)."""
    return said(no_job, gpus, start, end, 0.9, no_job.because(th, whole_log))


def no_data_diagnosis(gpus: Sequence[int], start, end,
                      because: str = NO_SAMPLES) -> Diagnosis:
    """A window in which no GPU of the job sent a sample: the rule ``too_few_samples``."""
    return said(too_few_samples, gpus, start, end, 0.0, because)


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


def data_window(f: dict, e: int) -> dict:
    """``f`` with window ``e`` no longer than the seconds of the job's data (features.data_run):
    right after the start, the reason and the samples per second speak of the seconds
    sampled, not of window_s."""
    span = int(f["data_run"][e])
    if not 0 < span < f["window"][e]:
        return f
    window = f["window"].copy()
    window[e] = span
    return dict(f, window=window)


def key_names(key: Optional[tuple], gpus: Sequence[int]):
    """A hold key (verdict, cause, straggler indices) as (verdict, cause, GPU); None: None."""
    if key is None:
        return None
    v, c, s = key
    return (VERDICTS[v], CAUSES[c] if c >= 0 else None, gpus[s] if s >= 0 else None)


def held_diagnosis(fresh: Diagnosis, key: Optional[tuple], gpus: Sequence[int],
                   conf: Optional[float]) -> Diagnosis:
    """The held verdict, cause and straggler with the freshest evidence."""
    named = key_names(key, gpus)
    if named is None or named == (fresh.verdict, fresh.cause, fresh.straggler_gpu):
        return fresh
    v, c, s = named
    return replace(fresh, verdict=v, cause=c, straggler_gpu=s, advice=advice(v, c, s),
                   confidence=round(conf if conf is not None else fresh.confidence, 3))
