"""The live screen: a View laid out into lines of styled text for a width and a height.

Drawn straight to rich Segments (no tables, no wrapping) so a frame for 8 GPUs costs about
a millisecond; the segments of the last frame are kept and reused until the data or the
terminal size changes.

Layouts, by terminal size:
- wide (WIDE_COLS and wider): one line per GPU with every cell;
- two-line: a main line (utilization, sparkline, memory, power, marks) and a detail line
  (SM clock, temperature, PCIe, PIDs, throttle reasons) per GPU;
- compact (more than 8 GPUs, or not enough rows): the main line only.
"""
from __future__ import annotations

import time
from typing import Callable, Iterable, Optional

from rich.console import Console, ConsoleOptions, RenderResult
from rich.segment import Segment
from rich.style import Style

from gpumon import __version__
from gpumon.diagnosis import ABBREV, INSUFFICIENT_DATA, VERDICTS, Diagnosis
from gpumon.ui import columns as col
from gpumon.ui import style as st
from gpumon.ui.model import GpuView, View
from gpumon.ui.processes import proc_rows, table_lines

WIDE_COLS = 150             # from here on, a GPU fits on one line with every cell
MAX_TWO_LINE_GPUS = 8       # more GPUs than this: compact rows
NAME_W_NARROW = 12
NAME_W = 16
MARK_W = 8                  # "COLD THR"
PIDS_W = 14
MIN_SPARK = 8
EVIDENCE_ITEMS = 8
WORKERS_SHOWN = 4           # busiest loader workers listed with their CPU % per main process
MIN_HEIGHT = 12             # rows the layout assumes at the least (below, rich crops)

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
            self.parts.append((text, style))
            self.n += len(text)
        return self

    def pad(self, to: int, style: Optional[str] = None) -> "Line":
        if self.n < to:
            self.add(" " * (to - self.n), style)
        return self

    def crop(self, n: int) -> "Line":
        """Keep the first ``n`` cells."""
        parts, left = [], n
        for text, style in self.parts:
            if left <= 0:
                break
            parts.append((text[:left], style))
            left -= len(parts[-1][0])
        self.parts, self.n = parts, min(self.n, n)
        return self

    def text(self) -> str:
        return "".join(t for t, _ in self.parts)

    def segments(self, width: int) -> Iterable[Segment]:
        left = width
        for text, style in self.parts:
            if left <= 0:
                break
            if len(text) > left:
                text = text[:left]
            left -= len(text)
            yield Segment(text, _style(style))


def _ascii_safe(text: str) -> str:
    return "".join(c if 32 <= ord(c) < 127 else "?" for c in text)


def short_name(name: str, width: int) -> str:
    name = _ascii_safe(name)
    for prefix in ("NVIDIA ", "Tesla "):
        if name.startswith(prefix):
            name = name[len(prefix):]
    return name[:width].ljust(width)


def gpu_range(gpus: tuple[int, ...]) -> str:
    if not gpus:
        return "-"
    g = sorted(gpus)
    if len(g) > 2 and g == list(range(g[0], g[-1] + 1)):
        return f"{g[0]}-{g[-1]}"
    return ",".join(map(str, g))


def gpus_text(gpus: tuple[int, ...]) -> str:
    """"GPU 2", "GPUs 0-3"."""
    return f"GPU{'s' if len(gpus) != 1 else ''} {gpu_range(gpus)}"


def fmt_evidence(evidence: dict, limit: int = EVIDENCE_ITEMS) -> str:
    """Evidence numbers as ``name value`` pairs, floats at two decimals (or whole numbers)."""
    out = []
    items = [(k, v) for k, v in evidence.items() if v is not None]   # not measured: left out
    for k, v in items[:limit]:
        if isinstance(v, bool):
            v = str(v).lower()
        elif isinstance(v, float):
            v = f"{v:.0f}" if abs(v) >= 100 else f"{v:.1f}" if abs(v) >= 10 else f"{v:.2f}"
        elif isinstance(v, (list, tuple)):
            v = ",".join(f"{x:.2f}" if isinstance(x, float) else str(x) for x in v[:8])
        out.append(f"{k} {v}")
    return "  ".join(out)


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

    def __init__(self, width: int, wide: bool):
        self.width = width
        self.wide = wide
        self.name_w = NAME_W if width >= 100 else NAME_W_NARROW
        self.main = [(names, col.cell_width(names)) for names in col.GPU_MAIN]
        self.detail = [(names, col.cell_width(names)) for names in col.GPU_DETAIL] if wide else []
        fixed = 2 + 1 + self.name_w + 1 + 4 + 1        # index, name, util
        fixed += sum(w + 1 for _, w in self.main + self.detail) + 1 + MARK_W
        if wide:
            fixed += 1 + PIDS_W
        self.spark_w = max(MIN_SPARK, width - fixed - 1)


_geometry_cache: dict[tuple[int, bool], _Geometry] = {}


def geometry(width: int, wide: bool) -> _Geometry:
    g = _geometry_cache.get((width, wide))
    if g is None:
        g = _geometry_cache[(width, wide)] = _Geometry(width, wide)
    return g


def gpu_header(v: View, geo: _Geometry) -> Line:
    line = Line().add(" #", st.HEADER).add(" ").add("name".ljust(geo.name_w), st.HEADER)
    line.add(" ").add(col.title("util_gpu_pct").rjust(4), st.HEADER).add(" ")
    if v.sample_s:
        span = f"last {geo.spark_w * v.sample_s:.0f} s, {1 / v.sample_s:.0f}/s"
    else:
        span = "recent samples"
    line.add(span[:geo.spark_w].ljust(geo.spark_w), st.DIM)
    for names, w in geo.main + geo.detail:
        line.add(" ").add(col.cell_title(names).rjust(w), st.HEADER)
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
    s = g.sample
    line = Line().add(f"{g.index:>2}", st.HEADER).add(" ")
    line.add(short_name(g.name, geo.name_w)).add(" ")
    util = col.fmt("util_gpu_pct", g.util)
    line.add((util + "%" if g.util is not None else util).rjust(4), st.HEADER).add(" ")
    line.add((g.spark_ascii if ascii else g.spark)[-geo.spark_w:].rjust(geo.spark_w), st.SPARK)
    for names, w in geo.main + geo.detail:
        line.add(" ").add(col.cell_value(names, s).rjust(w))
    line.add(" ")
    start = line.n
    for k, (mark, style) in enumerate(_marks(g)):
        line.add(" " if k else "").add(mark, style)
    line.pad(start + MARK_W)
    if geo.wide:
        line.add(" ").add(_pids(g)[:PIDS_W], st.DIM)
        if g.throttle:
            line.add(" " + ",".join(g.throttle), st.MARK_THROTTLE)
    lines = [line]
    if detail:
        d = Line().add(" " * (3 + geo.name_w if geo.width >= 100 else 4))
        for names in col.GPU_DETAIL:
            label = "/".join(col.title(n) for n in names)
            unit = col.unit(names[0])
            known = s is not None and any(getattr(s, n) is not None for n in names)
            d.add(" ").add(label, st.DIM).add(" " + col.cell_value(names, s))
            if known:
                d.add(unit if unit == "C" else f" {unit}" if unit else "", st.DIM)
            d.add(" ")
            if names[0] == "temp_c" and g.throttle:
                d.add(" throttle " + ",".join(g.throttle) + " ", st.MARK_THROTTLE)
        d.add(" ").add(col.title("pids"), st.DIM).add(" " + _pids(g))
        lines.append(d)
    return lines


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
        if busiest:
            text += " (" + " ".join(f"{c:.0f}" for c in busiest) + "%)"
        short = (f"{j.main_pid} {col.title('main_cpu_pct')} "
                 f"{col.with_unit('main_cpu_pct', j.main_cpu_pct)}")
        entries.append((text, short))
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


def _pack(entries: list[tuple[str, str]], width: int, rows: int) -> list[Line]:
    """Job entries (full, short) on at most ``rows`` lines; on the last line, the ones that
    do not fit in full are listed short ("+3 more: 4101 main 96%, ...")."""
    lines: list[Line] = []
    cur = Line().add("job  ", st.HEADER)
    indent = cur.n
    i = 0
    while i < len(entries):
        full = entries[i][0]
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
            cur.add(f"{sep}+{len(rest)} more: ", st.DIM).add(", ".join(s for _, s in rest))
            break
        lines.append(cur)
        cur = Line().add(" " * indent)
    lines.append(cur)
    return lines


def banner_lines(v: View, width: int, ascii: bool) -> list[Line]:
    tl, tr, bl, br, hz, vt = st.BOX_ASCII if ascii else st.BOX_UNICODE
    d: Optional[Diagnosis] = v.diagnosis
    if d is None and v.judged == ():    # gpumon run: the command is on no GPU (yet)
        verdict = INSUFFICIENT_DATA
        head = [("WAITING", st.VERDICT_STYLE[verdict])]
        body1 = "waiting for the command to use a GPU; other jobs are not judged"
        body2 = ""
    elif d is None and v.gpus and all(g.lost for g in v.gpus):
        verdict = INSUFFICIENT_DATA
        head = [("NO GPU LEFT", st.VERDICT_STYLE[verdict])]
        body1 = "every GPU is lost (NVML: GPU is lost, it fell off the bus): no verdict"
        body2 = "a reboot or a driver reload brings them back"
    elif d is None:
        verdict = INSUFFICIENT_DATA
        head = [("NO VERDICT" if not v.detector else "INSUFFICIENT DATA",
                 st.VERDICT_STYLE[verdict])]
        body1 = ("the detector is not available in this build: no verdicts" if not v.detector
                 else f"waiting for enough samples ({v.elapsed:.0f} s so far)")
        body2 = ""
    else:
        verdict = d.verdict
        head = [(d.verdict.upper().replace("_", " "), st.VERDICT_STYLE.get(d.verdict))]
        head.append((gpus_text(d.gpus), None))
        if d.cause:
            head.append((f"cause {d.cause}", None))
        if d.straggler_gpu is not None:
            head.append((f"straggler GPU {d.straggler_gpu}", None))
        head.append((f"confidence {d.confidence:.2f}", st.DIM))
        # Why, in the rule's own numbers; the bare evidence where no rule said.
        body1 = (f"{d.rule}: {d.because}" if d.because else
                 fmt_evidence(d.evidence) if d.evidence else "")
        if d.missing:
            body1 += ("  " if body1 else "") + "missing: " + ",".join(d.missing)
        body2 = ("advice: " + d.advice) if d.advice else ""
    box = st.VERDICT_STYLE.get(verdict)
    inner = width - 4
    top = Line().add(tl + hz, box)
    for text, style in head:
        if top.n + len(text) + 3 > width - 1:
            break
        top.add(" ").add(text, style).add(" " + hz, box)
    top.add(hz * max(0, width - 1 - top.n), box).add(tr, box)
    lines = [top]
    for text, style in ((body1, None), (body2, "bold")):
        if len(text) > inner:
            text = text[:inner - 1] + ("~" if ascii else "…")
        lines.append(Line().add(vt + " ", box).add(text.ljust(inner), style).add(" " + vt, box))
    lines.append(Line().add(bl + hz * (width - 2) + br, box))
    return lines


def strip_line(v: View, width: int) -> Line:
    label = "verdicts "
    legend = "  " + " ".join(f"{st.STRIP_CHAR[k]} {ABBREV[k]}" for k in VERDICTS
                             if k != INSUFFICIENT_DATA) + f" {st.STRIP_CHAR[INSUFFICIENT_DATA]} n/a"
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


def layout(v: View, width: int, height: int, ascii: bool = False) -> list[Line]:
    """Every line of one frame for a terminal of ``width`` x ``height``."""
    width = max(40, width)
    n = len(v.gpus)
    fixed = 11
    wide = width >= WIDE_COLS
    detail = (not wide and n <= MAX_TWO_LINE_GPUS and fixed + 2 * n <= height)
    host_rows = 2 if fixed + n * (2 if detail else 1) + 1 > height else 3
    geo = geometry(width, wide)
    lines = [title_line(v, width), gpu_header(v, geo)]
    for g in v.gpus:
        lines.extend(gpu_lines(g, geo, ascii, detail))
    lines.append(Line())
    lines.extend(host_lines(v, width, host_rows - 1))
    lines.append(Line())
    lines.extend(banner_lines(v, width, ascii))
    lines.append(strip_line(v, width))
    procs = proc_rows(v.host, [g.sample for g in v.gpus if g.sample], v.time)
    if procs and height - len(lines) >= 4:         # the process table, in the rows left
        lines.append(Line())
        for pieces in table_lines(procs, width, height - len(lines), ascii):
            lines.append(Line())
            for text, style in pieces:
                lines[-1].add(text, style)
    return lines


class Screen:
    """A rich renderable of the latest View; reuses the last frame while nothing changed."""

    def __init__(self, get_view: Callable[[], View], reserve: int = 0):
        self.get_view = get_view
        self.reserve = reserve          # rows left to other output (`gpumon run`'s command)
        self._key: Optional[tuple] = None
        self._segments: list[Segment] = []

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        v = self.get_view()
        width = options.max_width
        height = options.height or console.size.height
        height = max(MIN_HEIGHT, height - self.reserve)
        ascii = not console.encoding.lower().startswith("utf")
        key = (v.version, width, height, ascii)
        if key != self._key:
            segs: list[Segment] = []
            nl = Segment.line()
            for line in layout(v, width, height, ascii):
                segs.extend(line.segments(width))
                segs.append(nl)
            if segs:
                segs.pop()
            self._key, self._segments = key, segs
        yield from self._segments


def render_text(v: View, width: int, height: int = 40, color: bool = False) -> str:
    """The frame as a string (tests, golden files, benchmarks)."""
    import io
    buf = io.StringIO()
    console = Console(file=buf, width=width, height=height, color_system="standard" if color
                      else None, force_terminal=color, legacy_windows=False)
    console.print(Screen(lambda: v))
    return buf.getvalue()
