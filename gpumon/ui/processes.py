"""The process table (as nvitop's and ``gpustat -cup``): every GPU process grouped by job,
the job's loader workers under their main process.

``proc_rows`` joins the host's view (user, command line, CPU, RSS, start time: HostSample.procs)
with NVML's (GPUs, per-process GPU memory and SM utilization: GpuSample.pids, proc_mem,
proc_util); ``table_lines`` lays them out for a width as (text, style) pieces that the
dashboard, ``gpumon status`` and the ``ProcessTable`` renderable share. A value that is not
known is "-", never 0.
"""
from __future__ import annotations

import time
from typing import Iterable, NamedTuple, Optional, Sequence

from rich.console import Console, ConsoleOptions, RenderResult
from rich.segment import Segment
from rich.style import Style

from gpumon.samples import GpuSample, HostSample, ProcSample
from gpumon.ui import style as st
from gpumon.ui.columns import MISSING

# (title, width, right-aligned) of the columns before COMMAND, which takes the rest.
COLUMNS = (("PID", 7, True), ("USER", 8, False), ("GPU", 5, False), ("GPU-MEM", 8, True),
           ("SM", 4, True), ("CPU", 5, True), ("HOST-MEM", 8, True), ("TIME", 9, True))
MIN_COMMAND = 8          # below this many columns for the command, a column is dropped:
DROP = ("USER", "HOST-MEM", "TIME", "SM", "CPU")     # these, in this order
NOT_ON_HOST = "(not visible on this host)"

Pieces = list[tuple[str, Optional[str]]]


class ProcRow(NamedTuple):
    """One process of the table; None is a value not known. (A named tuple: every frame builds
    one per process, and a frozen dataclass costs four times as much to make.)"""
    pid: int
    job: int                          # PID of the job's main process
    role: str                         # "main", "worker" or "gpu" (on a GPU, no host view)
    user: Optional[str]
    gpus: tuple[int, ...]
    gpu_mem_mib: Optional[float]      # summed over its GPUs
    sm_pct: Optional[float]           # its share of each GPU's SM time, mean over its GPUs
    cpu_pct: Optional[float]          # % of one core
    rss_mib: Optional[float]
    runtime_s: Optional[float]
    command: Optional[str]            # the command line (the process name where unknown)
    name: Optional[str] = None        # the process name


def _gpu_view(samples: Iterable[GpuSample]):
    """{pid: GPUs}, {pid: MiB}, {pid: SM %} from the GPUs' latest samples."""
    gpus: dict[int, list[int]] = {}
    mem: dict[int, float] = {}
    sm: dict[int, list[float]] = {}
    for s in samples:
        for pid in s.pids or ():
            gpus.setdefault(pid, []).append(s.gpu)
        for pid, mib in s.proc_mem:
            mem[pid] = mem.get(pid, 0.0) + mib
        for pid, pct in s.proc_util:
            sm.setdefault(pid, []).append(pct)
    mean = {p: sum(v) / len(v) for p, v in sm.items()}
    return {p: tuple(sorted(g)) for p, g in gpus.items()}, mem, mean


def _job_of(p: ProcSample, by_pid: dict[int, ProcSample]) -> int:
    """The main process above ``p`` (a worker's parent may be another worker)."""
    seen = 0
    while p.role != "main" and p.ppid in by_pid and seen < 64:
        p, seen = by_pid[p.ppid], seen + 1
    return p.pid if p.role == "main" else p.ppid


def proc_rows(host: Optional[HostSample], samples: Sequence[GpuSample],
              now: Optional[float] = None) -> list[ProcRow]:
    """Every job's main process, then its workers; then GPU processes the host did not place."""
    now = time.time() if now is None else now
    gpus, mem, sm = _gpu_view(samples)
    procs = host.procs if host is not None else ()
    by_pid = {p.pid: p for p in procs}
    rows = []
    for p in procs:
        rows.append(ProcRow(
            pid=p.pid, job=_job_of(p, by_pid), role=p.role, user=p.user,
            gpus=gpus.get(p.pid, p.gpus), gpu_mem_mib=mem.get(p.pid), sm_pct=sm.get(p.pid),
            cpu_pct=p.cpu_pct, rss_mib=p.rss_mib,
            runtime_s=max(0.0, now - p.started) if p.started is not None else None,
            command=p.cmdline or p.name, name=p.name))
    order = {p.pid: i for i, p in enumerate(procs) if p.role == "main"}
    rows.sort(key=lambda r: (order.get(r.job, len(order)), r.role != "main"))
    unmapped = set(host.unmapped_pids) if host is not None else set()
    for pid in sorted(set(gpus) - set(by_pid)):
        rows.append(ProcRow(pid=pid, job=pid, role="gpu", user=None, gpus=gpus[pid],
                            gpu_mem_mib=mem.get(pid), sm_pct=sm.get(pid), cpu_pct=None,
                            rss_mib=None, runtime_s=None,
                            command=NOT_ON_HOST if pid in unmapped else None))
    return rows


def fmt_mib(mib: Optional[float]) -> str:
    if mib is None:
        return MISSING
    return f"{mib:.0f}MiB" if mib < 10000 else f"{mib / 1024:.1f}GiB"


def fmt_runtime(seconds: Optional[float]) -> str:
    """As ps's etime: [[d-]hh:]mm:ss."""
    if seconds is None:
        return MISSING
    s = int(seconds)
    d, s = divmod(s, 86400)
    h, s = divmod(s, 3600)
    m, s = divmod(s, 60)
    if d:
        return f"{d}-{h:02d}:{m:02d}:{s:02d}"
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m:02d}:{s:02d}"


def gpu_range(gpus: tuple[int, ...]) -> str:
    """"0-3" for three or more consecutive GPUs, else "0,2"; "-" for none."""
    if not gpus:
        return MISSING
    g = sorted(gpus)
    if len(g) > 2 and g == list(range(g[0], g[-1] + 1)):
        return f"{g[0]}-{g[-1]}"
    return ",".join(map(str, g))


def _pct(v: Optional[float]) -> str:
    return MISSING if v is None else f"{v:.0f}%"


# Control characters (newlines in a command line) as spaces, for str.translate.
_CONTROLS = {c: " " for c in (*range(32), 127)}


def _clean(text: str, ascii: bool) -> str:
    """One line of text: control characters (newlines in a command line) become spaces."""
    if text.isascii() and text.isprintable():       # the usual text: nothing to replace
        return text
    out = text.translate(_CONTROLS)
    return "".join(c if ord(c) < 127 else "?" for c in out) if ascii else out


def _cells(r: ProcRow, ascii: bool) -> list[str]:
    return [str(r.pid), _clean(r.user or MISSING, ascii), gpu_range(r.gpus),
            fmt_mib(r.gpu_mem_mib), _pct(r.sm_pct), _pct(r.cpu_pct), fmt_mib(r.rss_mib),
            fmt_runtime(r.runtime_s)]


def _cut(text: str, width: int, ascii: bool) -> str:
    if len(text) <= width:
        return text.ljust(width)
    return text[:max(0, width - 1)] + ("~" if ascii else "…")


def _summary(workers: list[ProcRow], job: int) -> ProcRow:
    """A job's loader workers as one row (the screen short of rows)."""
    def total(vals):
        vals = list(vals)
        return None if not vals or any(v is None for v in vals) else sum(vals)
    return ProcRow(pid=0, job=job, role="workers", user=None, gpus=(),
                   gpu_mem_mib=total(w.gpu_mem_mib for w in workers if w.gpus),
                   sm_pct=None, cpu_pct=total(w.cpu_pct for w in workers), rss_mib=total(
                       w.rss_mib for w in workers), runtime_s=None,
                   command=f"{len(workers)} loader worker{'s' if len(workers) != 1 else ''}")


def _fit(rows: list[ProcRow], room: int) -> tuple[list[ProcRow], int]:
    """Rows for ``room`` lines: every row, else each job's workers as one summary row, else
    the first ones; with how many processes were left out."""
    if len(rows) <= room:
        return rows, 0
    short: list[ProcRow] = []
    for r in rows:
        if r.role != "worker":
            short.append(r)
        elif short and short[-1].role == "workers" and short[-1].job == r.job:
            continue
        else:
            short.append(_summary([w for w in rows if w.role == "worker" and w.job == r.job],
                                  r.job))
    if len(short) <= room:
        return short, 0
    keep = short[:max(0, room - 1)]
    hidden = {r.job for r in keep if r.role == "workers"}
    shown = sum(1 for r in rows if r.role != "worker" and r in keep
                or r.role == "worker" and r.job in hidden)
    return keep, len(rows) - shown


def _columns(width: int) -> list[tuple[str, int, bool]]:
    """The columns before COMMAND that leave it MIN_COMMAND of ``width`` (DROP's order)."""
    cols = list(COLUMNS)
    for name in DROP:
        if width - sum(w + 1 for _, w, _ in cols) >= MIN_COMMAND:
            break
        cols = [c for c in cols if c[0] != name]
    return cols


def table_lines(rows: Sequence[ProcRow], width: int, max_rows: Optional[int] = None,
                ascii: bool = False) -> list[Pieces]:
    """The table (a header, then a line per process) in at most ``max_rows`` lines."""
    cols = _columns(width)
    keep = [i for i, c in enumerate(COLUMNS) if c in cols]
    fixed = sum(w + 1 for _, w, _ in cols)
    cmd_w = max(1, width - fixed)
    room = (len(rows) if max_rows is None else max_rows - 1)
    if room < 1:
        return []
    shown, left = _fit(list(rows), room)
    head = " ".join(t.rjust(w) if right else t.ljust(w) for t, w, right in cols)
    out: list[Pieces] = [[(_cut(head + " COMMAND", width, ascii).rstrip(), st.HEADER)]]
    tree = "`- " if ascii else "└ "
    for r in shown:
        cells = _cells(r, ascii)
        cells = [cells[i] for i in keep]
        if r.role == "workers":
            cells = [""] + ["" if c == MISSING else c for c in cells[1:]]
        line = " ".join(c[:w].rjust(w) if right else c[:w].ljust(w)
                        for c, (_, w, right) in zip(cells, cols)) + " "
        cmd = _clean(r.command or MISSING, ascii)
        pieces: Pieces = [(line, None)]
        if r.role in ("worker", "workers"):
            pieces.append((tree, st.DIM))
            cmd_room = cmd_w - len(tree)
        else:
            cmd_room = cmd_w
        pieces.append((_cut(cmd, cmd_room, ascii).rstrip(),
                       st.DIM if r.role == "gpu" and r.command is None else None))
        out.append(pieces)
    if left:
        out.append([(f"  +{left} more process{'es' if left != 1 else ''}", st.DIM)])
    return out


def text_lines(rows: Sequence[ProcRow], width: int, max_rows: Optional[int] = None,
               ascii: bool = False) -> list[str]:
    """The table as plain lines (``gpumon status``, pipes)."""
    return ["".join(t for t, _ in p).rstrip() for p in table_lines(rows, width, max_rows, ascii)]


class ProcessTable:
    """A rich renderable of the table at the console's width."""

    def __init__(self, rows: Sequence[ProcRow], max_rows: Optional[int] = None):
        self.rows = rows
        self.max_rows = max_rows

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        ascii = not console.encoding.lower().startswith("utf")
        for pieces in table_lines(self.rows, options.max_width, self.max_rows, ascii):
            for text, style in pieces:
                yield Segment(text[:options.max_width], Style.parse(style) if style else None)
            yield Segment.line()
