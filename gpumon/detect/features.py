"""Small named features over windows of per-second bins (see bins.py).

Every function takes arrays and returns arrays; windows end at the bin indices ``ends`` (one
index live, every bin of a log offline) so live and offline verdicts are the same numbers.

Per GPU (shape (G, E)): duty cycle, busy/idle sample shares, power fraction, power fraction in
busy seconds, power relative to the hottest GPU while all are busy (busy-but-cold), clock
fraction, clock-event shares, mean burst and gap length, host counters of that GPU's job.
Per job (shape (E,)): synchrony of gaps, iowait and disk rates, seconds of data.
"""
from __future__ import annotations

import numpy as np

from gpumon.detect.bins import GI, HI
from gpumon.detect.thresholds import DEFAULT, Thresholds


def _div(a, b):
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(b > 0, a / np.where(b > 0, b, 1.0), np.nan)


def wsum(a: np.ndarray, w: int, ends: np.ndarray) -> np.ndarray:
    """Sums of the last axis over windows of ``w`` entries ending at each of ``ends``."""
    c = np.zeros(a.shape[:-1] + (a.shape[-1] + 1,))
    np.cumsum(a, axis=-1, out=c[..., 1:])
    lo = np.maximum(ends + 1 - w, 0)
    return c[..., ends + 1] - c[..., lo]


def pause_mask(g: np.ndarray, th: Thresholds = DEFAULT) -> np.ndarray:
    """Bins of a job's all-idle stretches that are pauses of a healthy run.

    A checkpoint, validation pass or epoch boundary stops every GPU for seconds after a long
    stretch of steady work; starvation stops them again and again. So an all-idle stretch is a
    pause when the ``context_s`` before it was busy (duty >= duty_starved), had no all-idle
    second of its own, and the stretch is not longer than ``pause_max_s``. Causal: whether a
    bin is a pause depends only on bins before it, so live and offline agree.
    """
    n = g[GI["n"]].sum(axis=0)
    u = g[GI["u"]].sum(axis=0)
    T = n.shape[0]
    duty = _div(u, n)
    idle = (n > 0) & (duty < th.idle_duty)
    out = np.zeros(T, dtype=bool)
    if not idle.any():
        return out
    ctx = max(1, int(round(th.context_s / th.bin_s)))
    pmax = int(round(th.pause_max_s / th.bin_s))
    edges = np.diff(np.concatenate([[0], idle.astype(np.int8), [0]]))
    starts = np.flatnonzero(edges == 1)
    stops = np.flatnonzero(edges == -1)
    cn = np.concatenate([[0.0], np.cumsum(n)])
    cu = np.concatenate([[0.0], np.cumsum(u)])
    ci = np.concatenate([[0], np.cumsum(idle)])
    cd = np.concatenate([[0], np.cumsum(n > 0)])
    for s, e in zip(starts, stops):
        lo = s - ctx
        if lo < 0 or (cd[s] - cd[lo]) < ctx // 2 or ci[s] - ci[lo] > 0:
            continue
        dn = cn[s] - cn[lo]
        if dn <= 0 or (cu[s] - cu[lo]) / dn < th.duty_starved:
            continue
        out[s:min(e, s + pmax)] = True
    return out


def window_features(g: np.ndarray, h: np.ndarray, ends: np.ndarray, pause: np.ndarray,
                    th: Thresholds = DEFAULT, w: int = 0) -> dict:
    """Features of one job's GPUs (rows of ``g``) over the windows ending at ``ends``
    (``w`` bins long; default ``window_s``)."""
    W = w or max(1, int(round(th.window_s / th.bin_s)))
    keep = ~pause
    gk = g * keep
    S = wsum(gk, W, ends)                          # (F, G, E)
    f = {}
    n = S[GI["n"]]
    f["n"] = n
    f["duty"] = _div(S[GI["u"]], n)
    f["busy_share"] = _div(S[GI["busy"]], n)
    f["idle_share"] = _div(S[GI["idle"]], n)
    f["power_frac"] = _div(_div(S[GI["pw"]], S[GI["pn"]]), _div(S[GI["pl"]], S[GI["pln"]]))
    f["clock_frac"] = _div(_div(S[GI["clk"]], S[GI["cn"]]), _div(S[GI["cmax"]], S[GI["cmaxn"]]))
    en = S[GI["en"]]
    f["therm_share"] = _div(S[GI["therm"]], en)
    f["pcap_share"] = _div(S[GI["pcap"]], en)
    f["hws_share"] = _div(S[GI["hws"]], en)
    f["gap_s"] = _div(S[GI["gaps"]], S[GI["gapn"]])
    f["burst_s"] = _div(S[GI["burs"]], S[GI["burn"]])
    f["gap_n"] = S[GI["gapn"]]
    f["mem_mib"] = _div(S[GI["mem"]], S[GI["memn"]])
    f["pid_share"] = _div(S[GI["pid"]], S[GI["pidn"]])
    f["loader_cpu"] = _div(S[GI["ld"]], S[GI["ldn"]])
    f["main_cpu"] = _div(S[GI["mc"]], S[GI["mcn"]])
    f["main_thread"] = _div(S[GI["mt"]], S[GI["mtn"]])
    f["workers"] = _div(S[GI["wk"]], S[GI["wkn"]])
    f["loader_busy"] = _div(S[GI["lb"]], S[GI["lbn"]])

    # Per-bin quantities compared across GPUs, then summed over the window.
    bn = g[GI["n"]]
    bduty = _div(g[GI["u"]], bn)                    # (G, T)
    have = (bn > 0).all(axis=0) & keep              # bins where every GPU has data
    bidle = np.where(have, 1.0 - bduty, 0.0)
    mean_idle = bidle.mean(axis=0)
    min_idle = bidle.min(axis=0)
    sm = wsum(np.stack([min_idle, mean_idle, have.astype(float)]), W, ends)
    f["gap_sync"] = _div(sm[0], sm[1])
    f["job_idle"] = _div(sm[1], sm[2])
    f["bins"] = sm[2]

    bpw = _div(g[GI["pw"]], g[GI["pn"]])            # mean power per bin (W), NaN if none
    blim = _div(g[GI["pl"]], g[GI["pln"]])
    busy_bin = (bduty >= th.busy_bin_duty) & ~np.isnan(bpw) & keep
    pfb = wsum(np.stack([np.where(busy_bin, _div(bpw, blim), 0.0), busy_bin.astype(float)]),
               W, ends)
    f["power_frac_busy"] = _div(pfb[0], pfb[1])
    all_busy = busy_bin.all(axis=0) if bpw.shape[0] else np.zeros(bpw.shape[1], bool)
    with np.errstate(invalid="ignore"):
        top = np.nanmax(np.where(busy_bin, bpw, np.nan), axis=0) if bpw.shape[0] else bpw[0]
    rel = np.where(all_busy, _div(bpw, top), 0.0)
    rs = wsum(np.stack([rel, np.broadcast_to(all_busy.astype(float), rel.shape)]), W, ends)
    f["rel_power"] = _div(rs[0], rs[1])            # (G, E): power over the hottest's, all busy
    f["all_busy_bins"] = rs[1][0] if rs.shape[1] else np.zeros(len(ends))

    H = wsum(h * keep, W, ends)
    f["iowait"] = _div(H[HI["io"]], H[HI["ion"]])
    f["disk_read"] = _div(H[HI["rd"]], H[HI["rdn"]])
    f["disk_write"] = _div(H[HI["wr"]], H[HI["wrn"]])
    f["host_cpu"] = _div(H[HI["cpu"]], H[HI["cpun"]])
    f["pause"] = pause[ends]
    return f
