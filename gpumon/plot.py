"""`gpumon analyze --plot out.png|out.svg`: each GPU's utilization and power over time, the
verdict segments coloured beneath, the straggler marked.

matplotlib is an optional extra (`pip install 'gpumon-dl[plot]'`), imported only here, only when
a plot is asked for, with the Agg backend (no display needed).
"""
from __future__ import annotations

import os
from typing import Optional

import numpy as np

from gpumon.analyze.timeline import Timeline, summary
from gpumon.diagnosis import (BUSY, DATA_STARVATION, IDLE, INSUFFICIENT_DATA, PAUSED,
                              SYNC_STALL, THROTTLED, VERDICTS)
from gpumon.errors import UserError
from gpumon.logs.log import Log
from gpumon.report import headline

FORMATS = (".png", ".svg")
# Points per GPU line at most: longer logs are averaged into wider bins (a day at 6/s would
# otherwise draw 500,000 points per GPU).
MAX_POINTS = 2000
VERDICT_COLOR = {BUSY: "#2ca02c", IDLE: "#c7c7c7", PAUSED: "#17becf",
                 DATA_STARVATION: "#ff7f0e", SYNC_STALL: "#d62728", THROTTLED: "#9467bd",
                 INSUFFICIENT_DATA: "#f0f0f0"}
INSTALL_HINT = "pip install 'gpumon-dl[plot]'"


def check_path(path: str) -> str:
    """The plot's file name, if it ends in a format the plot can write."""
    if os.path.splitext(path)[1].lower() not in FORMATS:
        raise UserError(f"--plot {path}: the file name must end in "
                        f"{' or '.join(FORMATS)}", code=2)
    return path


def _pyplot():
    try:
        import matplotlib
    except ImportError:
        raise UserError(f"--plot needs matplotlib, which is not installed: {INSTALL_HINT}")
    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt
    return plt


def binned(t: np.ndarray, y: np.ndarray, t0: float, width: float) -> tuple[np.ndarray, ...]:
    """Means of ``y`` in bins of ``width`` seconds from ``t0`` (missing values left out; a
    bin without any is NaN, drawn as a gap, never as 0)."""
    k = np.floor((t - t0) / width).astype(np.int64)
    ok = ~np.isnan(y)
    n = int(k.max()) + 1 if len(k) else 0
    s = np.bincount(k[ok], weights=y[ok], minlength=n)
    c = np.bincount(k[ok], minlength=n)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = np.where(c > 0, s / np.maximum(c, 1), np.nan)
    return t0 + (np.arange(n) + 0.5) * width, mean


def _power(log: Log, sel: np.ndarray) -> Optional[tuple[np.ndarray, str]]:
    """The GPU's power and its unit: % of its limit, or watts where the log has no limit;
    None without power."""
    s = log.samples
    if s.power is None or np.isnan(s.power[sel]).all():
        return None
    if s.power_limit is not None and not np.isnan(s.power_limit[sel]).all():
        return 100.0 * s.power[sel] / s.power_limit[sel], "% of limit"
    return s.power[sel], "W"


def _lines(ax_u, ax_p, log: Log, t0: float, width: float, straggler: Optional[int]) -> str:
    """One line per GPU on each axis; the straggler's thick and named. Returns the power
    axis's unit."""
    s = log.samples
    unit = "% of limit"
    for g in sorted(int(x) for x in np.unique(s.gpu)):
        sel = s.gpu == g
        name = f"GPU {g}" + (" (straggler)" if g == straggler else "")
        style = dict(lw=2.2, zorder=3) if g == straggler else dict(lw=0.9, alpha=0.8)
        x, u = binned(s.time[sel], s.util[sel], t0, width)
        ax_u.plot(x - t0, u, label=name, **style)
        pw = _power(log, sel)
        if pw is not None:
            if pw[1] == "W":                # (one GPU without a limit: the axis in watts)
                unit = "W"
            x, p = binned(s.time[sel], pw[0], t0, width)
            ax_p.plot(x - t0, p, label=name, **style)
    return unit


def _segments(ax, tl: Timeline, t0: float) -> None:
    """The verdicts as coloured spans; a stretch with a straggler names it (labels() keeps
    the names apart)."""
    for d in tl.segments:
        ax.axvspan(d.start - t0, d.end - t0, color=VERDICT_COLOR.get(d.verdict, "#ffffff"),
                   lw=0)
    span = max((tl.end or 0) - t0, 1.0)
    for x, y, text in labels(tl, t0, span / AXES_WIDTH_IN):
        ax.text(x, y, text, ha="center", va="center", fontsize=LABEL_PT, color="white",
                fontweight="bold")
    seen = [v for v in VERDICTS if any(d.verdict == v for d in tl.segments)]
    for v in seen:
        ax.plot([], [], color=VERDICT_COLOR[v], lw=8, label=v)
    ax.set_ylim(0, 1)
    ax.set_yticks([])
    ax.set_ylabel("verdict", rotation=0, ha="right", va="center")
    if seen:
        ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.9), ncol=len(seen),
                  fontsize=8, frameon=False)


# The figure's width, in inches (the verdict axis spans ~0.9 of it), and the labels' size.
FIG_WIDTH_IN = 10.0
AXES_WIDTH_IN = 0.9 * FIG_WIDTH_IN
LABEL_PT = 8
# Width of a bold character of the labels, in inches (DejaVu Sans Bold: ~0.65 em).
CHAR_IN = 0.65 * LABEL_PT / 72
# Heights (in the verdict axis, 0 to 1) a label may sit at: the middle, else above or below.
LANES = (0.5, 0.8, 0.2)


def labels(tl: Timeline, t0: float, s_per_in: float) -> list[tuple[float, float, str]]:
    """(x, y, text) of each straggler's name (or throttled GPU's): one per stretch of
    touching segments that name the same one, at its middle, only where the name fits in the stretch, and in a
    lane (LANES) where it overlaps no other name (where segments meet, or several jobs'
    segments lie over one another)."""
    out: list[tuple[float, float, str]] = []
    taken: dict[float, list] = {y: [] for y in LANES}      # lane -> (left, right) in use
    for a, b, text in _stretches(tl):
        width = len(text) * CHAR_IN * s_per_in
        x = (a + b) / 2 - t0
        left, right = x - width / 2, x + width / 2
        if width > b - a:
            continue
        for y in LANES:
            if all(right <= lo or left >= hi for lo, hi in taken[y]):
                taken[y].append((left, right))
                out.append((x, y, text))
                break
    return out


def title(log: Log, sm: dict) -> str:
    """The figure's title: the file and its summary verdict; simulated data says so."""
    sim = " - SIMULATED GPUs (recorded with --sim)" if log.simulated else ""
    return f"{os.path.basename(log.path)}: {headline(sm)}{sim}"


def _stretches(tl: Timeline) -> list[list]:
    """[start, end, name] of each run of touching segments that name the same straggler
    (or throttled GPU), in time order."""
    out: list[list] = []
    for d in sorted(tl.segments, key=lambda d: (d.start, d.end)):
        if d.straggler_gpu is None:
            continue
        text = (f"GPU {d.straggler_gpu} throttled" if d.verdict == THROTTLED
                else f"straggler GPU {d.straggler_gpu}")
        last = out[-1] if out else None
        if last is not None and last[2] == text and d.start <= last[1]:
            last[1] = max(last[1], d.end)
        else:
            out.append([d.start, d.end, text])
    return out


def plot(log: Log, tl: Timeline, path: str) -> None:
    """Writes the figure of ``log`` and its timeline ``tl`` to ``path`` (.png or .svg)."""
    check_path(path)
    plt = _pyplot()
    s = log.samples
    t0 = float(np.nanmin(s.time))
    span = max(float(np.nanmax(s.time)) - t0, 1.0)
    width = max(1.0, span / MAX_POINTS)
    sm = summary(tl)
    fig, (ax_u, ax_p, ax_v) = plt.subplots(
        3, 1, sharex=True, figsize=(FIG_WIDTH_IN, 5.6),
        gridspec_kw={"height_ratios": [3, 3, 0.8]})
    fig.subplots_adjust(left=0.08, right=0.98, top=0.93, bottom=0.2, hspace=0.12)
    unit = _lines(ax_u, ax_p, log, t0, width, sm["straggler_gpu"])
    ax_u.set_ylabel("utilization %")
    ax_u.set_ylim(-3, 103)
    ax_p.set_ylabel(f"power, {unit}")
    ax_u.legend(loc="lower left", fontsize=7, ncol=4, framealpha=0.9)
    _segments(ax_v, tl, t0)
    ax_v.set_xlabel(f"seconds since the first sample (means over {width:g} s)")
    ax_u.set_title(title(log, sm), fontsize=10, color="#b00000" if log.simulated else None)
    try:
        fig.savefig(path, dpi=80, metadata={"Date": None} if path.endswith(".svg") else None)
    except OSError as exc:
        raise UserError(f"--plot {path}: {exc.strerror or exc}")
    finally:
        plt.close(fig)
