"""`gpumon status`: a one-shot snapshot of every GPU, its processes and the current verdict,
as text or JSON (``gpustat --json``'s shape). It samples for ``--sample`` seconds (default 2)
through the same Monitor and detector as `watch`, so a verdict exists where one can be given."""
from __future__ import annotations

import argparse
import json
import shutil
import socket
import sys
from typing import Callable, NamedTuple, Optional

from gpumon.commands.helptext import help_kwargs
from gpumon.commands.common import (add_sampling_options, make_detector, open_source,
                                    text_width)
from gpumon.errors import UserError
from gpumon.monitor import Monitor
from gpumon.ui.model import Dashboard

# Seconds sampled by default before the snapshot: the detector needs a few driver samples per
# GPU (3 at the least) and a second bin to say more than "insufficient data".
SAMPLE_S = 2.0
# --sample 0 still reads twice, this far apart, s: no verdict, only the current readings.
QUICK_S = 0.1
# Width of the text output when stdout is not a terminal (a pipe keeps the command lines).
PIPE_WIDTH = 160


def register(sub) -> None:
    p = sub.add_parser("status",
                       description="Sample every GPU for a moment (--sample), then print each "
                       "GPU (utilization, memory, power, temperature), the processes using it "
                       "(grouped by job, loader workers under their main process) and the "
                       "current verdict, or that there is none yet. --json prints the "
                       "snapshot as gpustat --json does, with the verdict.",
                       **help_kwargs("status"))
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument("--sample", type=_sample_s, default=SAMPLE_S, metavar="S",
                   help=f"seconds to sample before the snapshot, 0 to 60 (default {SAMPLE_S:g}; "
                        "0: the current readings, no verdict)")
    p.add_argument("--width", type=text_width, default=None, metavar="N",
                   help="text width, 40 to 10000 (default: the terminal's, else 160)")
    p.add_argument("-1", "--once", action="store_true",
                   help="accepted as nvitop's -1/--once: status always reports once")
    add_sampling_options(p, duration=False)
    p.set_defaults(func=run)


def _sample_s(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not 0 <= value <= 60:               # (NaN fails too)
        raise argparse.ArgumentTypeError(f"must be 0 or more and 60 seconds or less: {text!r}")
    return value


class Snapshot(NamedTuple):
    board: Dashboard
    uuids: dict[int, str]
    seconds: float                  # from the first reading to the last (0: --sample 0)
    driver: Optional[str]           # the driver's version (None: simulated)
    extras: dict                    # per GPU: fan speed, encoder and decoder utilization


def snapshot(args, wait: Optional[Callable[[float], bool]] = None) -> Snapshot:
    """Sample ``args.sample`` seconds: the dashboard model, GPU UUIDs, the seconds seen, and
    what gpustat --json shows that sampling does not read. ``wait``: Monitor.run's wait
    between polls (default: sleep; a simulated source runs on its own clock, so a caller may
    pass one that returns at once)."""
    source = open_source(args, process_util=True)     # (the process table)
    monitor = None
    times: list[float] = []
    driver, extras = None, {}
    try:
        infos = source.gpu_infos()
        label = getattr(source, "label", "") or (args.sim or "")
        detector = make_detector() if args.sample > 0 else None
        board = Dashboard(infos, kind=source.kind, label=label, interval=args.interval,
                          detector=detector is not None or not args.sample)
        # --sample 0: two quick reads (a first read of a source may hold no sample yet).
        span = args.sample or QUICK_S
        monitor = Monitor(source, interval=min(args.interval, span), duration=span,
                          detector=detector)
        monitor.listeners.append(board)
        monitor.listeners.append(lambda tick, _: times.append(tick.time))
        monitor.run(wait)
        if hasattr(source, "extras"):
            driver = source.versions().get("driver")
            extras = source.extras()
    finally:
        if monitor is not None:
            monitor.close()
        else:
            source.close()
    seconds = times[-1] - times[0] if args.sample and times else 0.0   # 0: not judged
    return Snapshot(board, {i.index: i.uuid for i in infos}, seconds, driver, extras)


def run(args) -> int:
    if args.width is not None and args.width < 40:
        raise UserError(f"--width must be 40 or more, not {args.width}", 2)
    try:
        snap = snapshot(args)
    except KeyboardInterrupt:
        print("gpumon: interrupted before the snapshot", file=sys.stderr)
        return 130
    from gpumon.ui.status import status_json, status_text
    view = snap.board.view()
    host = socket.gethostname()
    if args.json:
        print(json.dumps(status_json(view, host, snap.uuids, snap.seconds, snap.driver,
                                     snap.extras), indent=2))
        return 0
    width = args.width or (shutil.get_terminal_size((PIPE_WIDTH, 24)).columns
                           if sys.stdout.isatty() else PIPE_WIDTH)
    ascii = not (sys.stdout.encoding or "").lower().startswith("utf")
    print("\n".join(status_text(view, host, snap.seconds, width, ascii)))
    return 0
