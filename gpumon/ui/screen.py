"""The live screen: a View laid out into lines of styled text for a width and a height.

Drawn straight to rich Segments (no tables, no wrapping) so a frame for 8 GPUs costs about
a millisecond; the segments of the last frame are kept and reused until the data or the
terminal size changes.

Layouts, by terminal size:
- wide (WIDE_COLS and wider): one line per GPU with every cell;
- two-line: a main line (utilization, sparkline, memory, power, marks) and a detail line
  (SM clock, temperature, PCIe, PIDs, throttle reasons) per GPU;
- compact (more than 8 GPUs, or not enough rows): the main line only.
Every line has a priority (P_*): on a short terminal the lowest go first, so the verdict, its
GPUs, the straggler and the advice (wrapped, never cut) are the last to go.
"""
from __future__ import annotations

import textwrap
import time
from functools import lru_cache
from typing import Callable, Optional

from rich.console import Console, ConsoleOptions, RenderResult
from rich.segment import Segment
from rich.style import Style

from gpumon import __version__
from gpumon.diagnosis import ABBREV, INSUFFICIENT_DATA, VERDICTS, Diagnosis, evidence_text
from gpumon.ui import columns as col
from gpumon.ui import style as st
from gpumon.ui.model import GpuView, View
from gpumon.ui.processes import gpu_range, proc_rows, table_lines

WIDE_COLS = 150             # from here on, a GPU fits on one line with every cell
MAX_TWO_LINE_GPUS = 8       # more GPUs than this: compact rows
NAME_W_NARROW = 12
NAME_W = 16
MARK_W = 8                  # "COLD THR"
PIDS_W = 14
MIN_SPARK = 8
WORKERS_SHOWN = 4           # busiest loader workers listed with their CPU % per main process
ADVICE_LINES = 6            # the advice wraps on up to this many lines (never cut before)
MIN_HEIGHT = 6              # rows the layout assumes at the least (below, rich crops)

# Line priorities: when the terminal is short, the lowest go first (the last of them first).
P_VERDICT = 10              # the verdict, its GPUs, its advice
P_TRUTH = 9                 # simulated: the phase and its true verdict
P_NOTE = 9                  # why this source (`make run`)
P_TITLE = 8
P_BANNER_MORE = 8           # straggler, cause, confidence when the top border is full
P_GPU = 7                   # one row per GPU
P_BECAUSE = 5               # the rule and why
P_STRIP = 4
P_HEADER = 4
P_EVIDENCE = 3
P_BOX = 3                   # the banner's bottom border
P_HOST = 2
P_JOBS = 1
P_BLANK = 1
P_DETAIL = 0                # second line per GPU (layout drops them all first when short)

_styles: dict[str, Style] = {}


def _style(name: Optional[str]) -> Optional[Style]:
    if not name:
        return None
    s = _styles.get(name)
    if s is None:
        s = _styles[name] = Style.parse(name)
    return s


class Line:
    """A line of (text, style) pieces; every character is one cell wide."""

    __slots__ = ("parts", "n")

    def __init__(self) -> None:
        self.parts: list[tuple[str, Optional[str]]] = []
        self.n = 0

    def add(self, text: str, style: Optional[str] = None) -> "Line":
        if text:
            # Plain text joins a plain piece before it: fewer segments for rich to split and
            # measure, the same bytes written (styled pieces stay apart, each its own codes).
            if style is None and self.parts and self.parts[-1][1] is None:
                self.parts[-1] = (self.parts[-1][0] + text, None)
            else:
                self.parts.append((text, style))
            self.n += len(text)
        return self

    def pad(self, to: int, style: Optional[str] = None) -> "Line":
        if self.n < to:
            self.add(" " * (to - self.n), style)
        return self

    def _first(self, n: int) -> list[tuple[str, Optional[str]]]:
        """The pieces of the first ``n`` cells."""
        parts, left = [], n
        for text, style in self.parts:
            if left <= 0:
                break
            parts.append((text[:left], style))
            left -= len(parts[-1][0])
        return parts

    def crop(self, n: int) -> "Line":
        """Keep the first ``n`` cells."""
        self.parts, self.n = self._first(n), min(self.n, n)
        return self

    def text(self) -> str:
        return "".join(t for t, _ in self.parts)

    def segments(self, width: int) -> list[Segment]:
        """The line as rich Segments, cut at ``width`` cells."""
        parts = self.parts if self.n <= width else self._first(width)
        return [Segment(text, _style(style)) for text, style in parts]


def _ascii_safe(text: str) -> str:
    if text.isascii() and text.isprintable():       # the usual text: nothing to replace
        return text
    return "".join(c if 32 <= ord(c) < 127 else "?" for c in text)


def short_name(name: str, width: int) -> str:
    name = _ascii_safe(name)
    for prefix in ("NVIDIA ", "Tesla "):
        if name.startswith(prefix):
            name = name[len(prefix):]
    return name[:width].ljust(width)


def gpus_text(gpus: tuple[int, ...]) -> str:
    """"GPU 2", "GPUs 0-3"."""
    return f"GPU{'s' if len(gpus) != 1 else ''} {gpu_range(gpus)}"


def hms(seconds: float) -> str:
    s = int(max(0, seconds))
    return f"{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}"


# -- the parts of the screen --------------------------------------------------------------------
def title_line(v: View, width: int) -> Line:
    line = Line().add(f" gpumon {__version__} ", st.TITLE)
    if v.kind == "sim":
        line.add(" ").add(f" SIMULATED {v.label} ".replace("  ", " "), st.LABEL_SIM)
    elif v.kind == "replay":
        line.add(" ").add(f" REPLAY {v.label} ".replace("  ", " "), st.LABEL_REPLAY)
    line.add(f"  {len(v.gpus)} GPU{'s' if len(v.gpus) != 1 else ''}")
    if v.time is not None:
        line.add("  " + time.strftime("%H:%M:%S", time.localtime(v.time)))
        line.add(f"  up {hms(v.elapsed)}", st.DIM)
    hint = "q/Ctrl-C quits"
    if line.n + len(hint) + 2 <= width:
        line.pad(width - len(hint)).add(hint, st.DIM)
    return line


def _marks(g: GpuView) -> list[tuple[str, str]]:
    """The row's marks in words (each with its colour): lost, busy-but-cold, throttled."""
    if g.lost:
        return [("LOST", st.MARK_LOST)]
    if g.other:                         # gpumon run: another job's GPU, not judged
        return [("OTHER", st.DIM)]
    return [(m, style) for m, style, on in (("COLD", st.MARK_COLD, g.cold),
                                            ("THR", st.MARK_THROTTLE, bool(g.throttle))) if on]


class _Geometry:
    """Column widths for one terminal width; computed once per width and kept."""

    def __init__(self, width: int, wide: bool, sm: bool = False):
        self.width = width
        self.wide = wide
        self.sm_w = max(len(col.title(col.SM_ACTIVE)), 4) if sm else 0   # 0: no SM column
        self.name_w = NAME_W if width >= 100 else NAME_W_NARROW
        self.main = [(names, col.cell_width(names)) for names in col.GPU_MAIN]
        self.detail = [(names, col.cell_width(names)) for names in col.GPU_DETAIL] if wide else []
        self.cells = self.main + self.detail
        fixed = 2 + 1 + self.name_w + 1 + 4 + 1        # index, name, util
        fixed += self.sm_w + 1 if sm else 0
        fixed += sum(w + 1 for _, w in self.cells) + 1 + MARK_W
        if wide:
            fixed += 1 + PIDS_W
        self.spark_w = max(MIN_SPARK, width - fixed - 1)


_geometry_cache: dict[tuple[int, bool, bool], _Geometry] = {}


def geometry(width: int, wide: bool, sm: bool = False) -> _Geometry:
    g = _geometry_cache.get((width, wide, sm))
    if g is None:
        g = _geometry_cache[(width, wide, sm)] = _Geometry(width, wide, sm)
    return g


def unit_text(u: str, ascii: bool) -> str:
    """A unit as the terminal can show it: degrees Celsius as °C on a unicode terminal."""
    return "°C" if u == "C" and not ascii else u


def gpu_header(v: View, geo: _Geometry, ascii: bool = False) -> Line:
    line = Line().add(" #", st.HEADER).add(" ").add("name".ljust(geo.name_w), st.HEADER)
    line.add(" ").add(col.title("util_gpu_pct").rjust(4), st.HEADER).add(" ")
    if geo.sm_w:
        line.add(col.title(col.SM_ACTIVE).rjust(geo.sm_w), st.HEADER).add(" ")
    if v.sample_s:
        span = f"last {geo.spark_w * v.sample_s:.0f} s, {1 / v.sample_s:.0f}/s"
    else:
        span = "recent samples"
    line.add(span[:geo.spark_w].ljust(geo.spark_w), st.DIM)
    for names, w in geo.main + geo.detail:
        title = col.cell_title(names)
        if col.unit(names[0]) == "C":
            title = title[:-1] + unit_text("C", ascii)
        line.add(" ").add(title.rjust(w), st.HEADER)
    line.add(" ").add("marks".ljust(MARK_W), st.HEADER)
    if geo.wide:
        line.add(" ").add(col.title("pids"), st.HEADER)
    return line


def _pids(g: GpuView) -> str:
    pids = g.sample.pids if g.sample is not None else None
    if pids is None:
        return col.MISSING
    return " ".join(map(str, pids)) if pids else "none"


def gpu_lines(g: GpuView, geo: _Geometry, ascii: bool, detail: bool) -> list[Line]:
    """A GPU's main line (utilization, SM activity, sparkline, cells, marks) and, with
    ``detail``, its second line."""
    line = Line().add(f"{g.index:>2}", st.HEADER).add(" ")
    line.add(short_name(g.name, geo.name_w)).add(" ")
    util = col.fmt("util_gpu_pct", g.util)
    line.add((util + "%" if g.util is not None else util).rjust(4), st.HEADER).add(" ")
    if geo.sm_w:
        line.add(col.percent(g.sm_active).rjust(geo.sm_w)).add(" ")
    line.add((g.spark_ascii if ascii else g.spark)[-geo.spark_w:].rjust(geo.spark_w), st.SPARK)
    line.add("".join(" " + col.cell_value(names, g.sample).rjust(w) for names, w in geo.cells)
             + " ")
    start = line.n
    for k, (mark, style) in enumerate(_marks(g)):
        line.add(" " if k else "").add(mark, style)
    line.pad(start + MARK_W)
    if geo.wide:
        line.add(" ").add(_pids(g)[:PIDS_W], st.DIM)
        if g.throttle:
            line.add(" " + ",".join(g.throttle), st.MARK_THROTTLE)
    return [line, _detail_line(g, geo, ascii)] if detail else [line]


def _detail_line(g: GpuView, geo: _Geometry, ascii: bool) -> Line:
    """The second line of a GPU: SM clock, temperature (and throttle reasons), PCIe, PIDs."""
    s = g.sample
    d = Line().add(" " * (3 + geo.name_w if geo.width >= 100 else 4))
    for names in col.GPU_DETAIL:
        label = "/".join(col.title(n) for n in names)
        unit = col.unit(names[0])
        known = s is not None and any(getattr(s, n) is not None for n in names)
        d.add(" ").add(label, st.DIM).add(" " + col.cell_value(names, s))
        if known:
            d.add(unit_text(unit, ascii) if unit == "C" else f" {unit}" if unit else "",
                  st.DIM)
        d.add(" ")
        if names[0] == "temp_c" and g.throttle:
            d.add(" throttle " + ",".join(g.throttle) + " ", st.MARK_THROTTLE)
    pids = " " + _pids(g)
    if d.n + 1 + len(col.title("pids")) + len(pids) > geo.width:
        pids = " ..."       # the wide layout and the job line name them; never cut one
    return d.add(" ").add(col.title("pids"), st.DIM).add(pids)


def host_lines(v: View, width: int, rows: int) -> list[Line]:
    h = v.host
    line = Line().add("host ", st.HEADER)
    if h is None:
        return [line.add(" no host readings", st.DIM)]
    line.add(f" {col.title('cpu_pct')} {col.with_unit('cpu_pct', h.cpu_pct)}")
    if h.cpu_count:
        line.add(f" of {h.cpu_count}", st.DIM)
    if h.cpu_cores_pct:
        hot = sorted(h.cpu_cores_pct, reverse=True)[:4]
        line.add("  hot cores ").add(" ".join(f"{c:.0f}" for c in hot) + "%")
    else:
        line.add(f"  {col.title('cpu_max_core_pct')} "
                 f"{col.with_unit('cpu_max_core_pct', h.cpu_max_core_pct)}")
    line.add(f"  iowait {col.with_unit('iowait_pct', h.iowait_pct)}",
             st.WARN if (h.iowait_pct or 0) >= 5 else None)
    line.add(f"  disk {col.title('disk_read_mbps')} "
             f"{col.with_unit('disk_read_mbps', h.disk_read_mbps)}")
    if width >= 100:
        line.add(f"  {col.title('disk_write_mbps')} "
                 f"{col.with_unit('disk_write_mbps', h.disk_write_mbps)}", st.DIM)
    out = [line]
    names = {p.pid: p.name for p in h.procs if p.role == "main"}
    workers: dict[int, list[float]] = {}
    for p in h.procs:
        if p.role == "worker" and p.cpu_pct is not None:
            workers.setdefault(p.ppid, []).append(p.cpu_pct)
    seen: dict[int, list[int]] = {}
    for j in h.jobs:
        if j.main_pid is not None:
            seen.setdefault(j.main_pid, []).append(j.gpu)
    entries = []
    for j in h.jobs:
        if j.main_pid is None or seen.get(j.main_pid, [None])[0] != j.gpu:
            continue
        gpus = gpu_range(tuple(seen[j.main_pid]))
        text = f"{j.main_pid}"
        if names.get(j.main_pid):
            text += f" {_ascii_safe(names[j.main_pid])[:12]}"
        text += f" (GPU {gpus}): " + " ".join(
            f"{col.title(c)} {col.with_unit(c, getattr(j, c))}" for c in col.JOB_CELLS
            if getattr(j, c) is not None)
        busiest = sorted(workers.get(j.main_pid, ()), reverse=True)[:WORKERS_SHOWN]
        full = text + (" (" + " ".join(f"{c:.0f}" for c in busiest) + "%)" if busiest else "")
        short = (f"{j.main_pid} {col.title('main_cpu_pct')} "
                 f"{col.with_unit('main_cpu_pct', j.main_cpu_pct)}")
        entries.append((full, short, text))
    if not entries:
        unknown = v.gpus and all(g.sample is None or g.sample.pids is None for g in v.gpus)
        why = ("processes unknown (not reported for these GPUs)" if unknown
               else "no job processes on the GPUs")
        out.append(Line().add("job  ", st.HEADER).add(" " + why, st.DIM))
    else:
        out.extend(_pack(entries, width, rows))
    if h.unmapped_pids and len(out) < rows + 1:
        out.append(Line().add(f"      {len(h.unmapped_pids)} GPU process(es) not visible on "
                              "this host (a container?)", st.DIM))
    return out


def _pack(entries: list[tuple[str, str, str]], width: int, rows: int) -> list[Line]:
    """Job entries (full, short, without the workers' CPU) on at most ``rows`` lines; an
    entry too long for a line of its own loses its workers' list (never cut in the middle);
    on the last line, the ones that do not fit in full are listed short ("+3 more: 4101 main
    96%, ...", as many as fit)."""
    lines: list[Line] = []
    cur = Line().add("job  ", st.HEADER)
    indent = cur.n
    i = 0
    while i < len(entries):
        full = entries[i][0]
        if indent + 1 + len(full) > width:
            full = entries[i][2]
        sep = " " if cur.n <= indent else "  "
        last_row = len(lines) + 1 >= rows
        left = len(entries) - i - 1
        reserve = len(f"  +{left} more") if last_row and left else 0
        if cur.n + len(sep) + len(full) + reserve <= width or (cur.n <= indent and not last_row):
            cur.add(sep + full)
            i += 1
            continue
        if last_row:
            rest = entries[i:]
            cur.add(f"{sep}+{len(rest)} more: ", st.DIM)
            for k, (_, short, _) in enumerate(rest):
                piece = (", " if k else "") + short
                if cur.n + len(piece) + (4 if k < len(rest) - 1 else 0) > width:
                    cur.add(", ..." if k else "...")
                    break
                cur.add(piece)
            break
        lines.append(cur)
        cur = Line().add(" " * indent)
    lines.append(cur)
    return lines


def _banner_head(v: View) -> tuple[str, list[tuple[str, Optional[str]]], list[str]]:
    """The verdict, the banner's top items (most important first) and its body texts."""
    d: Optional[Diagnosis] = v.diagnosis
    style = st.VERDICT_STYLE[INSUFFICIENT_DATA]
    if d is None and v.judged == ():    # gpumon run: the command is on no GPU (yet)
        return INSUFFICIENT_DATA, [("WAITING", style)], [
            "waiting for the command to use a GPU; other jobs are not judged"]
    if d is None and v.gpus and all(g.lost for g in v.gpus):
        return INSUFFICIENT_DATA, [("NO GPU LEFT", style)], [
            "every GPU is lost (NVML: GPU is lost, it fell off the bus): no verdict",
            "a reboot or a driver reload brings them back"]
    if d is None or d.verdict == INSUFFICIENT_DATA:
        why = ("the detector is not available in this build" if not v.detector
               else d.because if d is not None and d.because
               else f"waiting for enough samples ({v.elapsed:.0f} s so far)")
        return INSUFFICIENT_DATA, [(st.NO_VERDICT.upper(), style)], [why]
    head = [(d.verdict.upper().replace("_", " "), st.VERDICT_STYLE.get(d.verdict)),
            (gpus_text(d.gpus), None)]
    if d.straggler_gpu is not None:
        head.append((f"straggler GPU {d.straggler_gpu}", None))
    if d.cause:
        head.append((f"cause {d.cause}", None))
    head.append((f"confidence {d.confidence:.2f}", st.DIM))
    return d.verdict, head, []


@lru_cache(maxsize=64)
def _wrap(text: str, width: int, most: int, ascii: bool) -> tuple[str, ...]:
    """``text`` wrapped to ``width``, on at most ``most`` lines (the last one cut, marked).
    Kept: the rule, evidence and advice often read the same from one frame to the next."""
    lines = textwrap.wrap(text, width, break_on_hyphens=False) or [""]
    if len(lines) > most:
        lines = lines[:most]
        lines[-1] = lines[-1][:width - 1] + ("~" if ascii else "…")
    return tuple(lines)


def banner_lines(v: View, width: int, ascii: bool) -> list[tuple[int, Line]]:
    """The verdict's box, each line with its priority (the layout cuts the lowest first):
    the verdict, its GPUs and its advice are the last to go."""
    tl, tr, bl, br, hz, vt = st.BOX_ASCII if ascii else st.BOX_UNICODE
    verdict, head, texts = _banner_head(v)
    box = st.VERDICT_STYLE.get(verdict)
    inner = width - 4
    top = Line().add(tl + hz, box)
    rest = []
    for k, (text, style) in enumerate(head):
        if k < 2 or (not rest and top.n + len(text) + 4 <= width):
            top.add(" ").add(text, style).add(" " + hz, box)
        else:
            rest.append(text)
    top.crop(width - 1)
    top.add(hz * max(0, width - 1 - top.n), box).add(tr, box)
    body: list[tuple[int, str, Optional[str]]] = []
    if rest:
        more = rest[0]
        for text in rest[1:]:
            if len(more) + 2 + len(text) <= inner:
                more += ", " + text
        body.append((P_BANNER_MORE, more, st.DIM))
    body += [(P_BECAUSE, t, None) for t in texts]
    d = v.diagnosis if verdict != INSUFFICIENT_DATA else None
    if d is not None:
        if d.because:
            body += [(P_BECAUSE, t, None) for t in
                     _wrap(f"{d.rule}: {d.because}" if d.rule else d.because, inner, 2, ascii)]
        ev = evidence_text(d.evidence)
        if d.missing:
            ev += ("; " if ev else "") + "missing: " + ",".join(d.missing)
        if ev:
            body += [(P_EVIDENCE, t, st.DIM) for t in _wrap(ev, inner, 2, ascii)]
        if d.advice:
            body += [(P_VERDICT, t, "bold") for t in
                     _wrap("advice: " + d.advice, inner, ADVICE_LINES, ascii)]
    out = [(P_VERDICT, top)]
    for prio, text, style in body:
        out.append((prio, Line().add(vt + " ", box).add(text.ljust(inner)[:inner], style)
                    .add(" " + vt, box)))
    out.append((P_BOX, Line().add(bl + hz * (width - 2) + br, box)))
    return out


def truth_line(v: View, width: int) -> Optional[Line]:
    """Simulated GPUs: the phase running and its true verdict, beside gpumon's (the details
    that do not fit are left out, whole)."""
    t = v.truth
    if v.kind != "sim" or t is None:
        return None
    head = f" SIMULATED: phase {t.scenario} "
    straggler = f", straggler GPU {t.straggler_gpu}" if t.straggler_gpu is not None else ""
    cause = f" {t.cause}" if t.cause else ""
    for truth in (f"(truth: {t.verdict}{cause}{straggler})", f"(truth: {t.verdict}{cause})",
                  f"(truth: {t.verdict})"):
        if len(head) + len(truth) <= width:
            break
    return Line().add(head, st.LABEL_SIM).add(truth, st.LABEL_SIM_TRUTH)


def strip_line(v: View, width: int) -> Line:
    label = "verdicts "
    legend = "  " + " ".join(f"{st.STRIP_CHAR[k]} {ABBREV[k]}" for k in VERDICTS
                             if k != INSUFFICIENT_DATA)
    legend += f" {st.STRIP_CHAR[INSUFFICIENT_DATA]} {st.NO_VERDICT}"
    room = width - len(label)
    if room - len(legend) >= 20:
        room -= len(legend)
    else:
        legend = ""
    chars, verdicts = v.strip[-room:], v.strip_verdicts[-room:]
    line = Line().add(label, st.HEADER).add(" " * (room - len(chars)))
    i = 0
    while i < len(chars):               # one styled piece per run of the same verdict
        j = i
        while j < len(chars) and verdicts[j] == verdicts[i]:
            j += 1
        line.add(chars[i:j], st.VERDICT_STYLE.get(verdicts[i]))
        i = j
    return line.add(legend, st.DIM)


def _fit(lines: list[tuple[int, Line]], height: int) -> list[Line]:
    """The lines, without the lowest-priority ones (the last of them first) past ``height``."""
    while len(lines) > height:
        low = min(p for p, _ in lines)
        k = max(i for i, (p, _) in enumerate(lines) if p == low)
        del lines[k]
    return [line for _, line in lines]


def _frame(v: View, width: int, height: int, ascii: bool,
           detail: bool) -> list[tuple[int, Line]]:
    n = len(v.gpus)
    wide = width >= WIDE_COLS
    host_rows = 2 if 11 + n + 1 > height else 3     # (detail rows go first when short)
    geo = geometry(width, wide, v.gpm)
    out = [(P_TITLE, title_line(v, width))]
    if v.note:
        out.append((P_NOTE, Line().add(" " + _ascii_safe(v.note), st.WARN)))
    out.append((P_HEADER, gpu_header(v, geo, ascii)))
    for g in v.gpus:
        main, *more = gpu_lines(g, geo, ascii, detail)
        out += [(P_GPU, main)] + [(P_DETAIL, m) for m in more]
    out.append((P_BLANK, Line()))
    host = host_lines(v, width, host_rows - 1)
    out += [(P_HOST, host[0])] + [(P_JOBS, line) for line in host[1:]]
    out.append((P_BLANK, Line()))
    truth = truth_line(v, width)
    if truth is not None:
        out.append((P_TRUTH, truth))
    out += banner_lines(v, width, ascii)
    out.append((P_STRIP, strip_line(v, width)))
    return out


def layout(v: View, width: int, height: int, ascii: bool = False) -> list[Line]:
    """Every line of one frame for a terminal of ``width`` x ``height``: GPU detail rows when
    they all fit, then the least important lines cut until the frame fits."""
    width = max(40, width)
    detail = width < WIDE_COLS and len(v.gpus) <= MAX_TWO_LINE_GPUS
    lines = _frame(v, width, height, ascii, detail)
    if detail and len(lines) > height:          # all of them or none
        lines = [(p, line) for p, line in lines if p != P_DETAIL]
    out = _fit(lines, height)
    procs = proc_rows(v.host, [g.sample for g in v.gpus if g.sample], v.time)
    if procs and height - len(out) >= 4:           # the process table, in the rows left
        out.append(Line())
        for pieces in table_lines(procs, width, height - len(out), ascii):
            out.append(Line())
            for text, style in pieces:
                out[-1].add(text, style)
    return out


class Screen:
    """A rich renderable of the latest View; reuses the last frame while nothing changed.

    ``fill``: the frame covers the whole terminal, each line padded to the width and blank
    lines below, as rich's Live pads it in the alternate screen (live.AltScreen)."""

    def __init__(self, get_view: Callable[[], View], reserve: int = 0, fill: bool = False):
        self.get_view = get_view
        self.reserve = reserve          # rows left to other output (`gpumon run`'s command)
        self.fill = fill
        self._key: Optional[tuple] = None
        self._segments: list[Segment] = []

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        v = self.get_view()
        width = options.max_width
        rows = options.height or console.size.height
        ascii = not console.encoding.lower().startswith("utf")
        key = (v.version, width, rows, ascii)
        if key != self._key:
            self._key, self._segments = key, self._render(v, width, rows, ascii)
        yield from self._segments

    def _render(self, v: View, width: int, rows: int, ascii: bool) -> list[Segment]:
        lines = layout(v, width, max(MIN_HEIGHT, rows - self.reserve), ascii)
        if self.fill:                   # (padding joins the plain text before it)
            lines = [line.pad(width) for line in lines[:rows]]
            lines += [Line().pad(width) for _ in range(rows - len(lines))]
        segs: list[Segment] = []
        nl = Segment.line()
        for line in lines:
            segs.extend(line.segments(width))
            segs.append(nl)
        if segs:
            segs.pop()
        return segs


def render_text(v: View, width: int, height: int = 40, color: bool = False) -> str:
    """The frame as a string (tests, golden files, benchmarks)."""
    import io
    buf = io.StringIO()
    console = Console(file=buf, width=width, height=height, color_system="standard" if color
                      else None, force_terminal=color, legacy_windows=False)
    console.print(Screen(lambda: v))
    return buf.getvalue()
