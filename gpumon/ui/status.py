"""`gpumon status`'s output: one View (every GPU, its processes, the verdict) as text lines or
as a JSON object shaped like ``gpustat --json`` (plus gpumon's verdict).

Pure functions of the View: the command samples, these only format. A value not known is
"-" in text and null in JSON, never 0.
"""
from __future__ import annotations

import textwrap
import time
from typing import Optional

from gpumon import __version__
from gpumon.diagnosis import INSUFFICIENT_DATA, Diagnosis
from gpumon.jsonlog import local_time
from gpumon.samples import GPM_FIELDS, GpuSample
from gpumon.ui import columns as col
from gpumon.ui.columns import MISSING
from gpumon.ui.model import GpuView, View
from gpumon.ui.processes import ProcRow, proc_rows, text_lines



def _num(v: Optional[float], nd: int = 0):
    return None if v is None else (round(v) if nd == 0 else round(v, nd))


def _samples(v: View) -> list[GpuSample]:
    return [g.sample for g in v.gpus if g.sample is not None]


def _proc_json(r: ProcRow, workers: list[ProcRow]) -> dict:
    out = {"pid": r.pid, "username": r.user, "command": r.name, "full_command": r.command,
           "gpu_memory_usage": _num(r.gpu_mem_mib), "sm_utilization": _num(r.sm_pct),
           "cpu_percent": _num(r.cpu_pct, 1), "cpu_memory_usage": _num(r.rss_mib),
           "runtime_s": _num(r.runtime_s), "gpus": list(r.gpus), "role": r.role}
    if r.role == "main":
        out["loader_workers"] = [_proc_json(w, []) for w in workers]
    return out


def _on_gpu(r: ProcRow, s: Optional[GpuSample]) -> ProcRow:
    """``r`` with its GPU memory and SM utilization on this GPU alone (gpustat's view)."""
    mem = dict(s.proc_mem) if s is not None else {}
    sm = dict(s.proc_util) if s is not None else {}
    return r._replace(gpu_mem_mib=mem.get(r.pid), sm_pct=sm.get(r.pid))


def _gpu_json(g: GpuView, rows: list[ProcRow], uuid: str, extra: dict) -> dict:
    s = g.sample
    mine = [_on_gpu(r, s) for r in rows if g.index in r.gpus and r.role != "worker"]
    return {
        "index": g.index, "uuid": uuid, "name": g.name, "lost": g.lost,
        "utilization.gpu": _num(g.util),
        "utilization.enc": _num(extra.get("utilization.enc")),
        "utilization.dec": _num(extra.get("utilization.dec")),
        "fan.speed": _num(extra.get("fan.speed")),
        **_sample_json(s),
        "processes": [_proc_json(r, [w for w in rows if w.role == "worker" and w.job == r.pid])
                      for r in mine],
    }


# The latest sample's readings in status --json: key and GpuSample field.
_SAMPLE_KEYS = (("memory.used", "mem_used_mib"), ("memory.total", "mem_total_mib"),
                ("power.draw", "power_w"), ("enforced.power.limit", "power_limit_w"),
                ("temperature.gpu", "temp_c"))


def _sample_json(s: Optional[GpuSample]) -> dict:
    """A GPU's latest readings (None without a sample), its GPM fields (3 decimals; None
    where the GPU has no GPM) after them."""
    if s is None:
        return dict.fromkeys([key for key, _ in _SAMPLE_KEYS] + list(GPM_FIELDS))
    out = {key: _num(getattr(s, name)) for key, name in _SAMPLE_KEYS}
    out.update({name: _num(getattr(s, name), 3) for name in GPM_FIELDS})
    return out


def _verdict_json(d: Diagnosis) -> dict:
    out = d.as_dict()
    out.pop("start", None)
    out.pop("end", None)
    return out


def status_json(v: View, hostname: str, uuids: dict[int, str], seconds: float,
                driver: Optional[str] = None, extras: Optional[dict] = None) -> dict:
    """gpustat --json's shape (hostname, driver_version, query_time, gpus with their
    processes; ``extras``: per GPU what sampling does not read, fan speed and video encoder
    and decoder utilization) and the verdict: null while there is none yet
    (``verdict_note`` says why)."""
    extras = extras or {}
    now = v.time if v.time is not None else time.time()
    rows = proc_rows(v.host, _samples(v), now)
    d = v.diagnosis
    judged = d is not None and d.verdict != INSUFFICIENT_DATA
    return {
        "hostname": hostname, "driver_version": driver,
        "query_time": local_time(now, "seconds"),
        "gpumon_version": __version__,
        "source": v.kind, "sampled_s": round(seconds, 1),
        "gpus": [_gpu_json(g, rows, uuids.get(g.index, ""), extras.get(g.index, {}))
                 for g in v.gpus],
        "verdict": _verdict_json(d) if judged else None,
        "verdicts": [_verdict_json(x) for x in v.diagnoses if x.verdict != INSUFFICIENT_DATA],
        "verdict_note": "" if judged else no_verdict_text(v, seconds),
    }


def no_util_gpus(v: View) -> list[int]:
    """GPUs read but without a utilization value (a MIG instance, a vGPU): no verdict."""
    return [g.index for g in v.gpus
            if not g.lost and g.sample is not None and g.util is None]


def no_verdict_text(v: View, seconds: float) -> str:
    if v.gpus and all(g.lost for g in v.gpus):
        return "no verdict: every GPU is lost"
    if seconds == 0:
        return "no verdict: --sample 0 reads the current values only"
    if not v.detector:
        return "no verdict: the detector is not available in this build"
    blind = no_util_gpus(v)
    if blind:
        verb = "does" if len(blind) == 1 else "do"
        return (f"no verdict: GPU{'s' if len(blind) > 1 else ''} {','.join(map(str, blind))} "
                f"{verb} not report utilization (MIG or vGPU): idle cannot be told from busy")
    d = v.diagnosis
    if d is not None and d.rule == "too_short" and d.because:
        # (The detector says what it saw and how many seconds its rules need.)
        return f"{d.because}; sample longer with --sample S"
    return (f"no verdict yet: {seconds:.1f} s of samples are not enough to judge "
            "(sample longer with --sample S)")


def _fmt(v: Optional[float], unit: str, spec: str = ".0f") -> str:
    return MISSING if v is None else f"{v:{spec}}{unit}"


# The widest a GPU's name is shown, and the narrowest before it is left out.
NAME_W, NAME_MIN = 24, 8
# What a GPU line leaves out, in this order, when the width does not hold it all.
DROP = ("temp", "power", "mem")


def _gpu_cells(g: GpuView, ascii: bool, sm: bool) -> dict[str, str]:
    """A GPU line's cells after its name: utilization, SM activity (``sm``: where some GPU
    has GPM; "-" on a GPU without), memory, power, temperature."""
    cells = {"util": f"{_fmt(g.util, '%'):>4}"}
    if sm:
        cells["sm"] = f"{col.title(col.SM_ACTIVE)} {col.percent(g.sm_active):>4}"
    s = g.sample
    if s is None:
        return cells | {"mem": f"{MISSING:>19}", "power": f"{MISSING:>11}",
                        "temp": f"{MISSING:>5}"}
    mem = f"{_fmt(s.mem_used_mib, '')} / {_fmt(s.mem_total_mib, ' MiB')}"
    power = f"{_fmt(s.power_w, '')} / {_fmt(s.power_limit_w, ' W')}"
    temp = _fmt(s.temp_c, "C" if ascii else "°C")
    return cells | {"mem": f"{mem:>19}", "power": f"{power:>11}", "temp": f"{temp:>5}"}


def gpu_line(g: GpuView, ascii: bool, width: int = 80, sm: bool = False) -> str:
    """``[i] name | util | SM activity | memory | power | temperature`` in ``width``
    columns: the name shortened, then the temperature, power and memory left out, as the
    width asks (utilization and SM activity stay)."""
    head = f"[{g.index}] "
    if g.lost:
        return (head + f"{g.name[:NAME_W]:{NAME_W}}  lost (NVML: GPU is lost, it fell off "
                "the bus)")[:width]
    cells = _gpu_cells(g, ascii, sm)
    drop = list(DROP)
    while True:
        rest = "".join(" | " + c for c in cells.values())
        room = min(NAME_W, width - len(head) - len(rest))
        if room >= NAME_MIN or not drop:
            break
        del cells[drop.pop(0)]
    name = f"{g.name[:room]:{room}}" if room >= NAME_MIN else ""
    return (head + name + rest if name else head + rest[3:])[:width]


def verdict_lines(v: View, seconds: float, width: int = 0) -> list[str]:
    """The verdict, the rule's reason and the advice; wrapped at ``width`` (0: not)."""
    lines = _verdict_lines(v, seconds)
    if not width:
        return lines
    return [w for line in lines for w in textwrap.wrap(
        line, width, subsequent_indent="    ", break_on_hyphens=False) or [""]]


def _verdict_lines(v: View, seconds: float) -> list[str]:
    d = v.diagnosis
    if d is None or d.verdict == INSUFFICIENT_DATA:
        return [no_verdict_text(v, seconds)]
    head = f"verdict: {d.verdict} on GPU{'s' if len(d.gpus) != 1 else ''} " + \
        ",".join(map(str, d.gpus))
    if d.cause:
        head += f", cause {d.cause}"
    if d.straggler_gpu is not None:
        head += f", straggler GPU {d.straggler_gpu}"
    out = [head + f" (confidence {d.confidence:.2f})"]
    if d.because:
        out.append(f"  {d.rule}: {d.because}" if d.rule else f"  {d.because}")
    if d.advice:
        out.append(f"  advice: {d.advice}")
    return out


def status_text(v: View, hostname: str, seconds: float, width: int,
                ascii: bool = False) -> list[str]:
    """The snapshot as lines: a title, a line per GPU, the verdict, the process table."""
    now = v.time if v.time is not None else time.time()
    what = {"sim": f"  SIMULATED {v.label}", "replay": f"  REPLAYED {v.label}"}.get(v.kind, "")
    out = textwrap.wrap(f"gpumon {__version__}  {hostname}  {local_time(now, 'seconds')} "
                        f"(local){what}", width, subsequent_indent="  ")
    out += [gpu_line(g, ascii, width, sm=v.gpm) for g in v.gpus]
    out.append("")
    out += verdict_lines(v, seconds, width)
    out.append("")
    rows = proc_rows(v.host, _samples(v), now)
    if rows:
        out += text_lines(rows, width, ascii=ascii)
    else:
        unknown = v.gpus and all(g.sample is None or g.sample.pids is None for g in v.gpus)
        out.append("processes unknown (not reported for these GPUs)" if unknown
                   else "no processes on the GPUs")
    return out
