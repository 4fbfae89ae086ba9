"""`gpumon log -o run.csv`: headless logging to CSV (or JSON lines), verdicts included."""
from __future__ import annotations

import sys
import time

from gpumon import interrupts
from gpumon.commands.common import (LostNotices, add_count_options, add_sampling_options,
                                    make_detector, open_source, reopen_on_sigusr1)
from gpumon.commands.helptext import help_kwargs
from gpumon.csvlog import CsvSink
from gpumon.logfile import STDOUT
from gpumon.errors import EveryGpuLostError, UserError
from gpumon.monitor import Monitor


def register(sub) -> None:
    p = sub.add_parser("log",
                       description="Headless logging to CSV until Ctrl-C, --duration or -n: one "
                       "row per GPU per driver utilization sample, with host columns and verdicts. "
                       "A lost GPU is said once and the others are logged; when every GPU is "
                       "lost, logging stops with one line and exit status 15 (nothing is left to "
                       "log until the driver is reloaded). --format jsonl writes one JSON object "
                       "per poll instead (fields: README, `gpumon/jsonlog.py`).",
                       **help_kwargs("log"))
    p.add_argument("-o", "--output", required=True, metavar="FILE",
                   help="file to write; - writes to standard output")
    p.add_argument("--format", choices=("csv", "jsonl"), default="csv",
                   help="csv: a row per GPU per driver sample (default); jsonl: one JSON "
                        "object per poll")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--force", action="store_true", help="overwrite FILE if it exists")
    mode.add_argument("--append", action="store_true", help="continue an existing log")
    p.add_argument("-q", "--quiet", action="store_true", help="no status lines on stderr")
    add_count_options(p)
    add_sampling_options(p)
    p.set_defaults(func=run)


class _Unmapped:
    """Says once, on stderr, when the GPUs' processes are not visible here (NVML reports host
    PIDs; in a container they need the host PID namespace)."""

    def __init__(self, quiet: bool):
        self.said = quiet

    def __call__(self, tick, diagnoses) -> None:
        if tick.host is not None and tick.host.unmapped_pids and not self.said:
            self.said = True
            pids = " ".join(map(str, tick.host.unmapped_pids[:5]))
            print(f"gpumon: GPU process(es) {pids} are not visible on this host (in a container, "
                  "run with the host PID namespace, e.g. docker --pid=host); job CPU columns "
                  "stay empty", file=sys.stderr)


def run(args) -> int:
    if args.append and args.output == STDOUT:
        raise UserError("log: --append cannot continue standard output (-o -)", 2)
    with interrupts.held_stops():   # SIGINT, SIGTERM, SIGHUP: noted, read between polls
        return _log(args)


def _log(args) -> int:
    source = open_source(args)
    sink = monitor = None
    started = time.time()
    try:
        infos = source.gpu_infos()
        sink = _open_sink(args, source.kind, [i.index for i in infos])
        reopen_on_sigusr1([sink])
        monitor = Monitor(source, interval=args.interval, detector=make_detector(),
                          sinks=[sink], duration=args.duration, count=args.count)
        monitor.listeners.append(LostNotices(monitor, "logging", quiet=args.quiet,
                                             every_lost=monitor.stop))
        monitor.listeners.append(_Unmapped(args.quiet))
        if not args.quiet:
            _say_start(args, source, len(infos), sink)
        if not interrupts.stop_signal():
            monitor.run(wait=interrupts.wait)
        interrupted = bool(interrupts.stop_signal())
    except KeyboardInterrupt:
        interrupted = True
    finally:
        _close(monitor, sink, source)
    return _end(args, monitor, sink, started, interrupted)


def _end(args, monitor, sink, started: float, interrupted: bool) -> int:
    if interrupted and (sink is None or not sink.rows):
        where = f"; nothing logged to {sink.name}" if sink is not None else ""
        _say(f"gpumon: interrupted before the first sample{where}")
        return 130
    if not interrupted and monitor.every_gpu_lost:
        raise EveryGpuLostError(monitor.latest.lost, f"; stopped: {_written(sink)} in "
                                f"{time.time() - started:.1f} s written to {sink.name}")
    if not args.quiet:
        how = "stopped" if interrupted else "done"
        _say(f"gpumon: {how}: {_written(sink)} in {time.time() - started:.1f} s written to "
             f"{sink.name}")
    return 0


def _say(line: str) -> None:
    """A closing line on stderr; none where stderr is gone (SIGHUP: the terminal closed)."""
    try:
        print(line, file=sys.stderr, flush=True)
    except (OSError, ValueError, AttributeError):
        pass


def _open_sink(args, kind: str, gpus: list):
    if args.format == "jsonl":
        from gpumon.jsonlog import JsonlSink
        return JsonlSink(args.output, source=kind, gpus=gpus, force=args.force,
                         append=args.append)
    return CsvSink(args.output, force=args.force, append=args.append)


def _written(sink) -> str:
    return f"{sink.rows} {sink.UNIT}"


def _close(monitor, sink, source) -> None:
    if monitor is not None:
        monitor.close()                 # its sinks and its source
        return
    if sink is not None:
        sink.close()
    source.close()


def _say_start(args, source, gpus: int, sink) -> None:
    if sink.cut:
        what = "line" if sink.UNIT == "lines" else "row"
        print(f"gpumon: {sink.name} ended in a partial {what} ({sink.cut} bytes, a write cut "
              "short); cut it off before appending", file=sys.stderr)
    label = "SIMULATED " if source.kind == "sim" else ""
    print(f"gpumon: logging {gpus} {label}GPU(s) to {sink.name} every {args.interval:g} s; "
          "Ctrl-C to stop", file=sys.stderr)
