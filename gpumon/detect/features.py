"""Named features over windows of a job's per-second bins (bins.py): per GPU (G, E) and per
job (E,), for windows ending at the bin indices ``ends`` (one live, every bin of a log), so
live and offline verdicts are the same numbers.
"""
from __future__ import annotations

import math

import numpy as np

from gpumon.detect import nanops as N

from typing import Optional

from gpumon.detect.bins import GI, HI
from gpumon.detect.jobs import kernels
from gpumon.detect.seconds import SecondsTable, seconds, settled as settled_seconds
from gpumon.diagnosis import CAUSES
from gpumon.detect.thresholds import BIN_S, DEFAULT, POWER_LAG_S, Thresholds, bins


_CTX_FIELDS = np.array([GI[k] for k in ("n", "u", "bt", "it", "bst", "gst")])
# Per-GPU window ratios: feature name -> (numerator field, denominator field).
_RATIO_FIELDS = {
    "duty": ("u", "n"), "idle_share": ("idle", "n"),
    "power_w": ("pw", "pn"), "power_limit": ("pl", "pln"), "clock": ("clk", "cn"),
    "clock_max": ("cmax", "cmaxn"), "therm_share": ("therm", "en"),
    "pcap_share": ("pcap", "en"), "hws_share": ("hws", "en"),
    "loader_cpu": ("ld", "ldn"), "main_cpu": ("mc", "mcn"), "main_thread": ("mt", "mtn"),
    "workers": ("wk", "wkn"), "loader_busy": ("lb", "lbn"), "sm_active": ("sa", "san")}
_RATIOS = tuple(_RATIO_FIELDS)
_RECENT = ("workers", "loader_cpu", "loader_busy", "main_cpu", "main_thread")
_RECENT_NUM = [GI[_RATIO_FIELDS[k][0]] for k in _RECENT]
_RECENT_DEN = [GI[_RATIO_FIELDS[k][1]] for k in _RECENT]
_HNUM = [HI[k] for k in ("io", "rd", "wr")]
_HDEN = [HI[k] for k in ("ion", "rdn", "wrn")]
_HIO_NUM = [HI[k] for k in ("io", "rd")]
_HIO_DEN = [HI[k] for k in ("ion", "rdn")]
_NUM = np.array([GI[a] for a, _ in _RATIO_FIELDS.values()])
_DEN = np.array([GI[b] for _, b in _RATIO_FIELDS.values()])
# Fields of the bins read by name, by the rows of the running sums (see _live_sums).
_ROWS = {"ctx": np.array(_CTX_FIELDS), "num": _NUM, "den": _DEN,
               "recent": np.array(_RECENT_NUM + _RECENT_DEN)}


# Signal -> the count field of the bins that says it was reported (result.missing_signals).
SEEN = {"power": "pn", "power_limit": "pln", "clocks": "cn", "clock_events": "en",
        "processes": "pidn", "memory": "memn", "job_processes": "mcn"}

_SEEN_ROWS = [GI[c] for c in SEEN.values()] + [GI["ldn"]]


def view_bins(th: Thresholds = DEFAULT) -> int:
    """Bins a view must hold before (and including) a window's last bin for its features to
    be those of the whole history: the longest window or context, one bin before it (where
    a stall began) and POWER_LAG_S more (whether its first seconds' power settled)."""
    return int(math.ceil(max(th.window_s, th.context_s, th.hang_s)
                         / BIN_S)) + 1 + bins(POWER_LAG_S)


def wsum(a: np.ndarray, w: int, ends: np.ndarray) -> np.ndarray:
    """Sums of the last axis over windows of ``w`` entries (an int, or one per end) ending at
    each of ``ends``."""
    return wsum_c(csum(a), w, ends)


def csum(a: np.ndarray) -> np.ndarray:
    """Running sums of the last axis with a leading 0 (for wsum_c: one pass, many windows)."""
    c = np.zeros(a.shape[:-1] + (a.shape[-1] + 1,))
    np.add.accumulate(a, axis=-1, out=c[..., 1:])      # (np.cumsum, without its wrapper)
    return c


def wsum_c(c: np.ndarray, w, ends: np.ndarray, rows=None) -> np.ndarray:
    """wsum from running sums ``c = csum(a)`` (of the rows ``rows`` of c's first axis only,
    when given). Consecutive ends (and starts) are read as slices, not gathered."""
    r = slice(None) if rows is None else rows
    lo = np.maximum(ends + 1 - w, 0)
    a, b = _span(ends + 1), _span(lo)
    hi = c[r, ..., a] if a is not None else np.take(c[r], ends + 1, axis=-1)
    return hi - (c[r, ..., b] if b is not None else np.take(c[r], lo, axis=-1))


def _span(idx: np.ndarray) -> Optional[slice]:
    """The slice equal to ``idx`` when it is consecutive integers, else None."""
    n = len(idx)
    i0 = int(idx[0]) if n else 0
    if n > 1 and (int(idx[-1]) - i0 != n - 1 or not bool((np.diff(idx) == 1).all())):
        return None
    return slice(i0, i0 + n)


def _live_sums(g: np.ndarray, keep: np.ndarray):
    """(C, pos, L): csum(g * keep) of the fields that hold data (an nvidia-smi log has no
    host or process fields), then a row of zeros; ``pos[field]`` is that field's row in C
    (the zero row, L, for a field without data)."""
    live = np.flatnonzero(np.logical_or.reduce(g, axis=tuple(range(1, g.ndim))))
    L = len(live)
    pos = np.full(g.shape[0], L)
    pos[live] = np.arange(L)
    return _keep_csum(g[live], keep, L + 1), pos, L


def _keep_csum(g: np.ndarray, keep: np.ndarray, rows: int) -> np.ndarray:
    """csum(g * keep) in ``rows`` rows (any past g's: zeros), summed in place: numpy's
    accumulate from a temporary into the strided view runs several times slower."""
    C = np.zeros((rows,) + g.shape[1:-1] + (g.shape[-1] + 1,))
    body = C[:len(g), ..., 1:]
    np.multiply(g, keep, out=body)
    np.add.accumulate(body, axis=-1, out=body)
    return C


def _ratios(S: np.ndarray, num: np.ndarray, den: np.ndarray, L: int) -> np.ndarray:
    """N.div(S[num], S[den]), row by row; rows whose denominator is S's zero row ``L`` (no
    data) are NaN without dividing."""
    ok = den < L
    if ok.all():
        return N.div(S[num], S[den])
    R = np.full((len(num),) + S.shape[1:], np.nan)
    if ok.any():
        b = S[den[ok]]
        # N.div's numbers (a / b where b > 0, else NaN) in one pass over the rows with data.
        R[ok] = np.divide(S[num[ok]], b, out=np.full(b.shape, np.nan), where=b > 0)
    return R


def _window_features(g: np.ndarray, h: np.ndarray, ends: np.ndarray, pause: np.ndarray,
                    th: Thresholds = DEFAULT, w: int = 0,
                    keep: Optional[np.ndarray] = None,
                    excluded: Optional[np.ndarray] = None,
                    why: Optional[np.ndarray] = None,
                    recent: Optional[np.ndarray] = None,
                    table: Optional[SecondsTable] = None) -> dict:
    """Features of one job's GPUs (rows of ``g``) over the windows ending at ``ends``, the
    ``excluded`` (else ``pause``) bins and those not ``keep`` left out of every sum; the
    window ``w`` bins, else _window_bins'. ``recent``: kernel_recent over a longer history
    than ``g``; ``table``: the seconds table of ``g``'s bins (its WINDOW_COLS at least;
    else computed from ``g``)."""
    out = pause if excluded is None else excluded
    since = keep
    keep = ~out if keep is None else (~out & keep)
    C, pos, L = _live_sums(g, keep)                 # running sums, shared by the windows
    ix = {k: pos[v] for k, v in _ROWS.items()}
    W, ctx_duty = _window_bins(C, ix, ends, th, w)
    f = _gpu_ratios(g, C, pos, L, ix, W, ends, th)
    # Per-bin quantities compared across GPUs, then summed over the window.
    bn = g[GI["n"]]
    bduty = N.div(g[GI["u"]], bn)                    # (G, T)
    have = (bn > 0).all(axis=0) & keep              # bins where every GPU has data
    ix_t = np.arange(have.shape[-1])                # bin indices
    if table is None:
        table = seconds(g, h, th)
    f.update(_sync_features(bduty, have, W, ends, th, ix_t))
    f.update(_work_features(table, keep, W, ends, th, ix_t))
    f.update(_power_features(g, bduty, keep, W, ends, th, ix_t, table.cold))
    f.update(_host_features(h, keep, W, ends, th))
    f.update(_pause_features(pause, why, ends, th, ix_t, pause & out))
    # Memory held in the last bin of each window (NaN where unknown); whether the job is
    # there (seconds.SecondsTable.present), and each GPU held (holds).
    f["mem_last"] = N.div(g[GI["mem"]][:, ends], g[GI["memn"]][:, ends])
    f["present"], f["holds"] = table.present[ends], table.holds[:, ends]
    f["ctx_duty"] = ctx_duty
    # Whether some GPU showed a kernel within idle_after_s before the window's end.
    f["kernel_recent"] = (recent if recent is not None
                          else kernel_recent(last_kernel(g, out=out), th))[ends]
    f["window"] = W
    f["data_run"] = data_run(g, since, ends, th)
    f.update(_seen(g, h))
    return f


def last_kernel(g: np.ndarray, before: float = -math.inf,
                out: Optional[np.ndarray] = None) -> np.ndarray:
    """Per bin of a job's bins ``g`` (T,): the index of the last bin at or before it in which
    some GPU had a sample showing a kernel (above idle_util_pct), bins ``out`` (a pause, a
    start-up: their kernels are no rhythm of the job's work) left out; ``before`` for bins
    before the first such one (the last such bin before ``g``, on its index scale)."""
    k = np.logical_or.reduce(kernels(g), axis=0)
    if out is not None:
        k &= ~out
    return np.maximum.accumulate(np.where(k, np.arange(k.shape[-1], dtype=float), before))


def kernel_recent(lk: np.ndarray, th: Thresholds = DEFAULT) -> np.ndarray:
    """Per bin, from last_kernel's ``lk``: whether a kernel ran within idle_after_s up to and
    including it."""
    return np.arange(len(lk)) - lk < bins(th.idle_after_s)


def run_lengths(t: np.ndarray, k: np.ndarray) -> np.ndarray:
    """(burst_s, gap_s): a window's busy and idle seconds ``t`` (2, ...) over its bursts and
    gaps ``k`` (2, ...) (_runs_of). NaN where there was no such time (samples further apart
    than max_sample_gap_s measure none). Never longer than the window."""
    return t / np.where(k > 0, k, np.nan)         # (t / NaN: NaN, without a warning)


def _runs_of(S: np.ndarray):
    """(time, runs), each (2, ...), from a window's sums ``S`` of bins bt, it, bst, gst: the
    bursts and gaps that begin inside it; time of a kind with none begun there (a run that
    spans the whole window) counts one."""
    t = S[:2]
    return t, np.maximum(S[2:], t > 0)


def _window_bins(C: np.ndarray, ix: dict, ends: np.ndarray, th: Thresholds, w: int):
    """(W, ctx_duty): each window's length in bins (``w``, else window_s, stretched up to
    context_s to min_samples cycles of burst and gap) and the job's duty over the context_s
    before its end, from the running sums ``C`` (rows ``ix``)."""
    ctx = max(1, bins(th.context_s))
    Sc = wsum_c(C, ctx, ends, ix["ctx"])            # (6, G, E)
    tot = Sc.sum(axis=1)                            # (6, E)
    ctx_duty = N.div(tot[1], tot[0])
    if w:
        return np.full(len(ends), int(w)), ctx_duty
    w0 = max(1, bins(th.window_s))
    wmax = max(w0, ctx)
    # Stretched only where the context before the last window_s and that window itself
    # are both under duty_starved.
    last = wsum_c(C, w0, ends, ix["ctx"]).sum(axis=1)
    t0 = tot - last
    old_duty = N.div(t0[1], t0[0])
    before = np.where(np.isnan(old_duty), ctx_duty, old_duty)
    slow = ((N.nan_to_num(before, nan=1.0) < th.duty_starved)
            & (N.nan_to_num(N.div(last[1], last[0]), nan=0.0) < th.duty_starved))
    if not slow.any():                 # (no window stretched: all of window_s)
        return np.full(len(ends), w0), ctx_duty
    cycle = run_lengths(*_runs_of(tot[2:6])).sum(axis=0)   # s per (burst + gap)
    want = np.where(slow, np.ceil(N.nan_to_num(cycle) * th.min_samples / BIN_S), 0)
    return np.minimum(np.maximum(want, w0), wmax).astype(int), ctx_duty


def _gpu_ratios(g: np.ndarray, C: np.ndarray, pos: np.ndarray, L: int, ix: dict,
                W: np.ndarray, ends: np.ndarray, th: Thresholds) -> dict:
    """Per-GPU window features (G, E) from the running sums ``C`` (see _live_sums): sample
    counts, every ratio of _RATIO_FIELDS, the host's _RECENT readings, power and clock
    fractions."""
    S = wsum_c(C, W, ends)                         # (L + 1, G, E): pos[field] -> row
    f = {"n": S[pos[GI["n"]]],
         # Samples in the window, pauses included: whether there is enough data at all.
         "n_all": wsum(g[GI["n"]], W, ends)}
    # Busy and idle time (run_t) and the mean lengths of the bursts and gaps (G, E).
    t, k = _runs_of(S[pos[_CTX_FIELDS[2:]]])
    f["run_t"] = t
    f["burst_s"], f["gap_s"] = run_lengths(t, k)
    # Every per-GPU ratio in one division (a few numpy calls instead of twenty).
    R = _ratios(S, ix["num"], ix["den"], L)         # (len(_RATIOS), G, E)
    for i, name in enumerate(_RATIOS):
        f[name] = R[i]
    # The host over the last seconds only: at an onset the window's mean lags the change.
    k = len(_RECENT)
    rr = ix["recent"]
    if (rr[k:] < L).any():
        Sr = wsum_c(C, min(bins(th.hold_s), int(W.min())), ends, rr)
        Rr = N.div(Sr[:k], Sr[k:])
    else:                                           # no host readings: all NaN, as divided
        Rr = np.full((k,) + S.shape[1:], np.nan)
    for i, name in enumerate(_RECENT):
        f[name + "_recent"] = Rr[i]
    f["power_frac"] = N.div(f["power_w"], f["power_limit"])
    f["clock_frac"] = N.div(f["clock"], f["clock_max"])
    return f


def _sync_features(bduty: np.ndarray, have: np.ndarray, W: np.ndarray, ends: np.ndarray,
                   th: Thresholds, ix_t: np.ndarray) -> dict:
    """How the GPUs' per-second duty (``bduty``, (G, T)) compares across GPUs over each
    window, in the seconds where every GPU has data (``have``): gap synchrony, duty spread,
    and the stall before the window's end."""
    # (Where every GPU has data, ``bduty`` is a number: no NaN to replace.)
    bidle = np.where(have, 1.0 - bduty, 0.0)
    mean_idle = np.add.reduce(bidle, axis=0) / bidle.shape[0]   # (bidle.mean(axis=0))
    min_idle = bidle.min(axis=0)
    least = 1.0 - bidle.max(axis=0)                 # the least busy GPU's duty per second
    sm = wsum(np.array([min_idle, mean_idle, have], dtype=float), W, ends)
    f = {"gap_sync": N.div(sm[0], sm[1]), "bins": sm[2]}
    f.update(_stall_features(have & (least >= th.busy_duty), ends, th, ix_t))
    return f


def _work_features(table: SecondsTable, keep: np.ndarray, W: np.ndarray, ends: np.ndarray,
                   th: Thresholds, ix_t: np.ndarray) -> dict:
    """Steady work (the table's at_work) in the seconds kept: the seconds of it in a row up
    to each window's end (steady_run), and the window's seconds with every GPU seen that
    are not (low_bins)."""
    work = table.at_work & keep
    low = keep & ~work & ~np.isnan(table.duty).any(axis=0)
    return {"steady_run": _run_to(work, ends, ix_t, bins(th.context_s) + 1),
            "low_bins": wsum(low[None].astype(float), W, ends)[0]}


def _run_to(mask: np.ndarray, ends: np.ndarray, ix_t: np.ndarray, cap: int) -> np.ndarray:
    """(E,): the bins in a row up to and including each of ``ends`` in which ``mask``
    holds, at most ``cap`` (what every caller's view of the bins holds; ``ix_t``: the bins'
    indices)."""
    last_not = np.maximum.accumulate(np.where(mask, -1, ix_t))
    return np.minimum(ends - last_not[ends], cap)


def _stall_features(full: np.ndarray, ends: np.ndarray, th: Thresholds,
                    ix_t: np.ndarray) -> dict:
    """The stall before the window's end (Thresholds.recover_s, window_s): seconds in
    which every GPU ran at full speed (``full``) since it (full_run) and its length
    (stall_bins)."""
    # Both are read within context_s of the end only: a longer run reads wm + 1; a stall
    # that began earlier, wm + 1; none, 0. Before the first bin nothing is known: full
    # work since then follows a stall that began earlier.
    wm = bins(th.context_s)
    run = _run_to(full, ends, ix_t, wm + 1)
    j = ends - run                                  # the stall's last bin (where run <= wm)
    lf = np.maximum.accumulate(np.where(full, ix_t, -1))[np.maximum(j, 0)]
    return {"full_run": run, "stall_bins": np.where(run > wm, 0, np.where(
        (j >= 0) & (lf >= 0) & (lf >= ends - wm), j - lf, wm + 1))}


def _power_features(g: np.ndarray, bduty: np.ndarray, keep: np.ndarray, W: np.ndarray,
                    ends: np.ndarray, th: Thresholds, ix_t: np.ndarray,
                    cold: np.ndarray) -> dict:
    """Power in busy seconds: its fraction of the limit, relative to the hottest GPU once all
    are settled at work, the seconds some GPU is cold (the seconds table's cold column) and
    which GPU was the hottest in each (by SM activity where every GPU has it: no power lag
    to settle), and the run of seconds all busy yet cold (a hang)."""
    bpw = N.div(g[GI["pw"]], g[GI["pn"]])            # mean power per bin (W), NaN if none
    sm = N.div(g[GI["sa"]], g[GI["san"]])
    blim = N.div(g[GI["pl"]], g[GI["pln"]])
    busy_bin = (bduty >= th.busy_duty) & ~np.isnan(bpw) & keep
    pf = N.div(bpw, blim)                            # power / limit per bin
    all_busy = busy_bin.all(axis=0)
    settled = settled_seconds(all_busy, th)
    top = np.fmax.reduce(np.where(busy_bin, bpw, np.nan), axis=0)
    rel = np.where(settled, N.div(bpw, top), 0.0)
    rel_a, ok = _relative(rel, settled, all_busy, sm)
    # The compared seconds with some GPU cold beside the hottest, and which GPU was the
    # hottest in each (rel_a is exactly 1 there): a straggler is the same GPU every step.
    cold_s = ok & cold.any(axis=0)
    # The window sums in one pass (rows: power fraction while busy, busy seconds,
    # power relative to the hottest GPU, settled seconds, hottest in a cold second, cold
    # seconds, the GPU cold, seconds compared).
    rows = [np.where(busy_bin, pf, 0.0), busy_bin, rel, np.broadcast_to(settled, rel.shape),
            cold_s & (rel_a >= 1.0), np.broadcast_to(cold_s, rel.shape), ok & cold,
            np.broadcast_to(ok, rel.shape)]
    sums = wsum(np.array(rows, dtype=float), W, ends)
    rs = sums[2:4]
    # (Rows 0 / 1 and 2 / 3 in one division; rel_power (G, E): power over the hottest's,
    # all busy.)
    f = dict(zip(("power_frac_busy", "rel_power"), N.div(sums[0:4:2], sums[1:4:2])))
    f["hot_bins"] = sums[4]                        # (G, E) hottest in a cold second
    f["cold_bins"] = sums[5][0]
    f["cold_share"] = N.div(sums[6], sums[7])      # (G, E) its compared seconds cold
    # Seconds in a row, up to each window's end, with every GPU busy and cold (the seconds
    # table's: all spin, Thresholds.hang_s), read within hang_s + 1 bins.
    f["cold_run"] = _run_to(all_busy & cold.all(axis=0), ends, ix_t,
                            int(math.ceil(th.hang_s / BIN_S)) + 1)
    f["all_busy_bins"] = rs[1][0]                   # (settled ones)
    return f


def _relative(rel: np.ndarray, settled: np.ndarray, all_busy: np.ndarray, sm: np.ndarray):
    """(rel_a, ok): each GPU's work relative to the busiest GPU's per second, and the
    seconds compared: power (``rel``, in the ``settled`` seconds) where some GPU lacks SM
    activity, SM activity over the most active GPU's (every GPU busy) where each has it."""
    smk = ~np.isnan(sm).any(axis=0)
    if not smk.any():
        return rel, settled
    rel_sm = N.div(sm, np.fmax.reduce(sm, axis=0))
    return (np.where(smk & all_busy, rel_sm, np.where(smk, 0.0, rel)),
            np.where(smk, all_busy, settled))


def data_run(g: np.ndarray, since: Optional[np.ndarray], ends: np.ndarray,
             th: Thresholds) -> np.ndarray:
    """Seconds of the job's data up to each window's end (E,): from the first bin with a
    sample from any of its GPUs (and ``since`` True: the job seen in use) among the last
    hang_s + 1 bins, as cold_run is read (a longer history reads hang_s + 1). What the rules
    that need more seconds than were sampled compare with (rules.too_short)."""
    has = (g[GI["n"]] > 0).any(axis=0)
    if since is not None:
        has &= since
    T = has.shape[-1]
    # The first bin at or after each bin with data (T: none).
    nxt = np.minimum.accumulate(np.where(has, np.arange(T), T)[::-1])[::-1]
    first = nxt[np.maximum(ends + 1 - (int(math.ceil(th.hang_s / BIN_S)) + 1), 0)]
    return np.where(first <= ends, ends - first + 1, 0)


def _host_features(h: np.ndarray, keep: np.ndarray, W: np.ndarray, ends: np.ndarray,
                   th: Thresholds) -> dict:
    """The host's iowait and disk rates over each window, storage also over its last
    hold_s."""
    Ch = csum(h * keep)                             # (one pass for both spans)
    H = wsum_c(Ch, W, ends)
    f = {}
    f["iowait"], f["disk_read"], f["disk_write"] = N.div(H[_HNUM], H[_HDEN])
    # Storage over the last seconds too (as the loaders' _recent readings, _gpu_ratios).
    Hr = wsum_c(Ch, min(bins(th.hold_s), int(W.min())), ends, _HIO_NUM + _HIO_DEN)
    f["iowait_recent"], f["disk_read_recent"] = N.div(Hr[:2], Hr[2:])
    return f


def _pause_features(pause: np.ndarray, why: Optional[np.ndarray], ends: np.ndarray,
                    th: Thresholds, ix_t: np.ndarray, stands: np.ndarray) -> dict:
    """Whether each window's last bin is a pause, why, for how long, and since when not
    (``stands``: the pause bins still left out of the windows; a "pause" the tracker later
    found to be starvation was none)."""
    f = {"pause": pause[ends]}
    # Why each window's last bin is a pause (an index into diagnosis.CAUSES; -1: no pause).
    f["pause_cause"] = (why[ends] if why is not None else
                        np.where(f["pause"], CAUSES.index("unknown"), -1))
    wm = bins(th.context_s)
    f["pause_len"] = _run_to(pause, ends, ix_t, wm + 1)        # (0 where no pause)
    # Seconds since the last pause bin, read within context_s as full_run is (wm + 1:
    # none in the last context_s, or none at all).
    last_pause = np.maximum.accumulate(np.where(stands, ix_t, -1))[ends]
    f["since_pause"] = np.where(last_pause < 0, wm + 1, np.minimum(ends - last_pause, wm + 1))
    return f


def _seen(g: np.ndarray, h: np.ndarray) -> dict:
    """Which signals the job's GPUs reported at all in this view, pauses included."""
    # A signal is missing only when absent from the input, not when a window left its
    # seconds out.
    any_g = g[_SEEN_ROWS].any(axis=tuple(range(1, g.ndim))).tolist()    # one reduction
    f = {"seen_" + k: v for k, v in zip(SEEN, any_g)}
    f["seen_job_processes"] |= any_g[-1]
    f["seen_host"] = bool(h[HI["ion"]].any()) if h.size else False
    return f


def window_features(*args, **kwargs) -> dict:
    """See _window_features; all-NaN windows (no power, no host) are normal: their NaN
    quotients and comparisons raise no floating-point warnings."""
    with np.errstate(all="ignore"):
        return _window_features(*args, **kwargs)
