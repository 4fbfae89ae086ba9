"""`gpumon analyze FILE...`: offline diagnosis of gpumon, nvidia-smi, DCGM and plain logs."""
from __future__ import annotations

import json
import sys

from gpumon.commands.common import positive_float
from gpumon.commands.helptext import help_kwargs


def register(sub) -> None:
    p = sub.add_parser(
        "analyze",
        description="Offline diagnosis of a log: a gpumon CSV or JSON-lines log, an "
        "`nvidia-smi --query-gpu=... --format=csv` log, an `nvidia-smi dmon` log, a DCGM log "
        "(`dcgmi dmon` output or a CSV of DCGM fields), or a CSV or whitespace table with a "
        "utilization column (and time, GPU, power, memory columns; a header in a comment "
        "line, a banner above a table, a column per GPU). The format is detected from the "
        "file; --columns names the columns it does not tell.",
        **help_kwargs("analyze"))
    p.add_argument("files", nargs="+", metavar="FILE",
                   help="log file(s); - reads standard input; .gz files and pipes work")
    p.add_argument("--format", choices=("text", "json"), default="text",
                   help="output format (default text)")
    p.add_argument("--explain", action="store_true",
                   help="under each segment of the timeline, the rule that decided it and why")
    p.add_argument("--interval", type=_log_interval, default=None, metavar="S",
                   help="seconds between samples of a log without a time column (nvidia-smi "
                   "dmon, dcgmi dmon; default 1)")
    p.add_argument("--columns", type=_columns, default=None,
                   metavar="ROLE=COLUMN,...",
                   help="which column is which, for a CSV or table log whose columns gpumon "
                   "does not tell by itself (roles: time, gpu, util, power, power_limit, mem)")
    p.add_argument("--plot", type=_plot_path, default=None, metavar="OUT.png|OUT.svg",
                   help="also draw each GPU's utilization and power over time with the "
                   "verdicts beneath (one FILE; needs matplotlib: pip install 'gpumon-dl[plot]')")
    p.set_defaults(func=run)


def _log_interval(text: str) -> float:
    import argparse
    from gpumon.logs import INTERVAL_RANGE
    value = positive_float(text)
    lo, hi = INTERVAL_RANGE
    if not lo <= value <= hi:
        raise argparse.ArgumentTypeError(f"must be from {lo:g} to {hi:g} seconds: {text!r}")
    return value


def _columns(text: str) -> dict:
    import argparse
    from gpumon.logs.columns import parse_option
    try:
        return parse_option(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc))


def _plot_path(path: str) -> str:
    import argparse
    from gpumon.plot import check_path
    from gpumon.errors import UserError
    try:
        return check_path(path)
    except UserError as exc:
        raise argparse.ArgumentTypeError(str(exc).split(": ", 1)[1])


def run(args) -> int:
    """Every readable file is analysed and reported; each unreadable one gets one line on
    stderr (in JSON, an ``error`` entry); exit 1 when any failed."""
    _reuse_freed_memory()
    from gpumon.analyze import analyze_file
    from gpumon.report import to_json, to_text
    from gpumon.errors import UserError
    docs, texts, failed = [], [], 0
    if args.plot and len(args.files) != 1:
        print("gpumon: --plot draws one FILE; give one", file=sys.stderr)
        return 2
    for path in args.files:
        try:
            log, tl = analyze_file(path, args.interval, columns=args.columns)
        except UserError as exc:
            failed += 1
            print(f"gpumon: {exc}", file=sys.stderr)
            docs.append({"file": path, "error": str(exc)})
            continue
        if args.plot:
            failed += not _plot(log, tl, args.plot)
        if args.format == "json":
            docs.append({"file": path, **to_json(tl, log)})
        else:
            texts.append(to_text(log, tl, args.explain))
        sys.stdout.flush()
    if args.format == "json":
        out = docs[0] if len(args.files) == 1 else docs     # one file: one object
        print(json.dumps(out, indent=2))
    elif texts:
        print("\n\n".join(texts))
    return 1 if failed else 0


def _plot(log, tl, path: str) -> bool:
    """Draws the plot; a missing matplotlib or an unwritable file is one line on stderr."""
    from gpumon.plot import plot
    from gpumon.errors import UserError
    try:
        plot(log, tl, path)
    except UserError as exc:
        print(f"gpumon: {exc}", file=sys.stderr)
        return False
    print(f"gpumon: plot written to {path}", file=sys.stderr)
    return True


# glibc malloc: memory freed by one step of the analysis stays with the process for the next
# (mmap and trim thresholds raised, one arena for every thread) instead of going back to the
# kernel and being faulted in again page by page; on a VM that first touch is most of the
# system time. A day-long log: ~200,000 -> ~86,000 page faults, 0.3 s, peak RSS ~360 MiB
# either way. Blocks up to this size (bytes) come from the heap, which keeps this much free.
KEEP_FREED_BYTES = 1 << 30
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD, _M_ARENA_MAX = -1, -3, -8


def _reuse_freed_memory() -> None:
    """For this command's process only (a batch job); a no-op without glibc's mallopt."""
    try:
        import ctypes
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return
    mallopt(_M_MMAP_THRESHOLD, KEEP_FREED_BYTES)
    mallopt(_M_TRIM_THRESHOLD, KEEP_FREED_BYTES)
    mallopt(_M_ARENA_MAX, 1)
