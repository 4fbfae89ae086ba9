"""Plain lines for pipes and logs (dstat-style): one line per interval, flushed as written."""
from __future__ import annotations

import time
from typing import Optional, Sequence

from gpumon import __version__
from gpumon.diagnosis import ABBREV, Diagnosis
from gpumon.samples import GpuInfo, Tick
from gpumon.ui import columns as col
from gpumon.ui.model import primary

_CELL = 13          # "g0 util power" / "   98%  350W" per GPU
_SM_CELL = 6        # " smact" / "   42%" more per GPU where the node has GPM


def has_gpm(infos: Sequence[GpuInfo]) -> bool:
    """Whether some GPU says it has GPM: then every GPU's cell shows its SM activity ("-"
    where it has none), so the columns line up."""
    return any(dict(i.supported).get("gpm") for i in infos)


def header(infos: Sequence[GpuInfo], kind: str, label: str, interval: float) -> list[str]:
    what = {"sim": "SIMULATED ", "replay": "REPLAYED "}.get(kind, "")
    n = len(infos)
    first = (f"gpumon {__version__}: {n} {what}GPU{'s' if n != 1 else ''}"
             + (f" ({label})" if label else "") + f", a line every {interval:g} s")
    util_t = col.title("util_gpu_pct")
    power_t = col.title("power_w")
    sm_t = f" {col.title(col.SM_ACTIVE):>5}" if has_gpm(infos) else ""
    width = _CELL + (_SM_CELL if sm_t else 0)
    cols = ["time    "] + [f"g{i.index} {util_t:>3}{sm_t} {power_t:>5}".rjust(width)
                           for i in infos]
    return [first, "|".join(cols) + "|verdict"]


def line(tick: Tick, diagnoses: Sequence[Diagnosis], infos: Sequence[GpuInfo]) -> str:
    """``12:00:01|  98% 350W|  97% 340W|sync imbalance gpu2`` (``  98%   42%  350W`` per GPU
    where the node has GPM)."""
    sm = has_gpm(infos)
    width = _CELL + (_SM_CELL if sm else 0)
    util: dict[int, list[float]] = {}
    smact: dict[int, list[float]] = {}
    power: dict[int, Optional[float]] = {}
    for s in tick.gpus:
        if s.util_gpu_pct is not None:
            util.setdefault(s.gpu, []).append(s.util_gpu_pct)
        if s.sm_active_ratio is not None:
            smact.setdefault(s.gpu, []).append(s.sm_active_ratio)
        power[s.gpu] = s.power_w if s.power_w is not None else power.get(s.gpu)
    cells = [time.strftime("%H:%M:%S", time.localtime(tick.time))]
    for i in infos:
        if i.index in tick.lost:
            cells.append("lost".rjust(width))
            continue
        u = util.get(i.index)
        ut = col.fmt("util_gpu_pct", sum(u) / len(u)) + "%" if u else col.MISSING
        a = smact.get(i.index)
        st = f" {col.percent(sum(a) / len(a) if a else None):>5}" if sm else ""
        p = power.get(i.index)
        pt = col.fmt("power_w", p) + col.unit("power_w") if p is not None else col.MISSING
        cells.append(f"{ut:>5}{st} {pt:>5}".rjust(width))
    return "|".join(cells) + "|" + _verdict(primary(diagnoses))


def _verdict(d: Optional[Diagnosis]) -> str:
    """The verdict's abbreviation, its cause and straggler: ``sync imbalance gpu2``."""
    if d is None:
        return ABBREV["insufficient_data"]
    verdict = ABBREV.get(d.verdict, d.verdict)
    if d.cause:
        verdict += f" {d.cause}"
    if d.straggler_gpu is not None:
        verdict += f" gpu{d.straggler_gpu}"
    return verdict
