"""`gpumon stream`: one JSON line per tick, for the dstat/dool column (internal).

The dstat/dool plugin runs inside the host tool's interpreter, which usually cannot import
gpumon or nvidia-ml-py. So it starts this command with gpumon's own interpreter
(``python -m gpumon.commands.stream``) and only parses what it prints:

    {"type": "hello", "protocol": 1, "source": "nvml", "interval": 1.0,
     "gpus": [{"gpu": 0, "name": "..."}], "lost": []}
    {"type": "tick", "time": 1700000000.1, "verdict": "data_starvation", "state": "data",
     "gpus": [{"gpu": 0, "util": 37.5, "mem": 12.0, "verdict": "...", "state": "data",
               "lost": false}]}
    {"type": "error", "code": 2, "message": "no NVIDIA driver: libnvidia-ml.so.1 not found"}

A missing value is null. ``state`` is the verdict's abbreviation (gpumon.diagnosis.ABBREV);
``----`` when there is no verdict. The same Monitor and detector as every other command
produce the readings and verdicts: the plugin never judges anything itself.

With ``--stop-on-eof`` the stream ends when its standard input closes, so it dies with the
host even when the host is killed; it also ends when writing its output fails.
"""
from __future__ import annotations

import argparse
import json
import sys
import threading
from typing import IO, Iterable, Optional, Sequence

from gpumon.commands.common import (add_sampling_options, make_detector, open_source,
                                    stop_on_sigterm)
from gpumon.diagnosis import (ABBREV, BUSY, DATA_STARVATION, IDLE, INSUFFICIENT_DATA, PAUSED,
                              SYNC_STALL, THROTTLED, Diagnosis)
from gpumon.errors import NoDriverError, NoGpuError, UserError
from gpumon.monitor import Monitor
from gpumon.samples import GpuInfo, Tick

PROTOCOL = 1
# NVML readings the column neither prints nor judges by: never read (the detector uses
# utilization, memory, power, clocks, clock events and the process list).
STREAM_SKIPS = ("temp", "energy", "pcie")

# One cell must stand for every job on the machine: a job with a problem outranks a healthy
# one, and a verdict outranks "not enough data", so a starving job is never hidden by an idle one.
VERDICT_PRIORITY = (DATA_STARVATION, SYNC_STALL, THROTTLED, PAUSED, BUSY, IDLE, INSUFFICIENT_DATA)

# The state shown when no verdict is available (no detector, or a GPU outside every job).
NO_STATE = ABBREV[INSUFFICIENT_DATA]

# The advice "use --sim" that NoDriverError carries is for gpumon's own commands; in a host
# tool's column only the reason is useful.
_SIM_HINT = "; use --sim"


def register(sub) -> None:
    # No help= : argparse then leaves it out of `gpumon --help` (help=SUPPRESS would print
    # "==SUPPRESS==" there on Python 3.11).
    p = sub.add_parser("stream",
                       description="Internal: one JSON line per tick (readings and verdicts) "
                       "for the dstat/dool column.")
    add_options(p)
    p.set_defaults(func=run)


def add_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--stop-on-eof", action="store_true",
                   help="stop when standard input closes (the plugin passes this)")
    add_sampling_options(p)


# -- records: data in, data out ------------------------------------------------------------
def _mean(values: Iterable[Optional[float]]) -> Optional[float]:
    vals = [v for v in values if v is not None]
    return round(sum(vals) / len(vals), 1) if vals else None


def overall_verdict(diagnoses: Sequence[Diagnosis]) -> Optional[str]:
    """The one verdict a single cell shows for all jobs; None when there is none."""
    present = {d.verdict for d in diagnoses}
    for verdict in VERDICT_PRIORITY:
        if verdict in present:
            return verdict
    return None


def gpu_verdicts(diagnoses: Sequence[Diagnosis]) -> dict[int, str]:
    """GPU index -> the verdict of the job it belongs to (by priority if several)."""
    out: dict[int, str] = {}
    rank = {v: i for i, v in enumerate(VERDICT_PRIORITY)}
    for d in diagnoses:
        for gpu in d.gpus:
            old = out.get(gpu)
            if old is None or rank.get(d.verdict, len(rank)) < rank.get(old, len(rank)):
                out[gpu] = d.verdict
    return out


def abbrev(verdict: Optional[str]) -> str:
    return ABBREV.get(verdict, NO_STATE) if verdict else NO_STATE


def hello_record(kind: str, infos: Sequence[GpuInfo], interval: float,
                 lost: Sequence[int] = ()) -> dict:
    return {"type": "hello", "protocol": PROTOCOL, "source": kind, "interval": interval,
            "gpus": [{"gpu": i.index, "name": i.name} for i in infos], "lost": sorted(lost)}


def tick_record(tick: Tick, diagnoses: Sequence[Diagnosis], gpus: Sequence[int]) -> dict:
    """Per GPU: mean utilization and memory utilization over this tick's driver samples."""
    verdicts = gpu_verdicts(diagnoses)
    lost = set(tick.lost)
    by_gpu: dict[int, list] = {}
    for s in tick.gpus:                  # (one pass, not one per GPU)
        by_gpu.setdefault(s.gpu, []).append(s)
    rows = []
    for gpu in gpus:
        samples = by_gpu.get(gpu, ())
        verdict = verdicts.get(gpu)
        rows.append({"gpu": gpu,
                     "util": _mean(s.util_gpu_pct for s in samples),
                     "mem": _mean(s.util_mem_pct for s in samples),
                     "verdict": verdict, "state": abbrev(verdict), "lost": gpu in lost})
    verdict = overall_verdict(diagnoses)
    return {"type": "tick", "time": round(tick.time, 3), "verdict": verdict,
            "state": abbrev(verdict), "gpus": rows}


def error_record(exc: BaseException, code: int = 1) -> dict:
    message = str(exc) if isinstance(exc, UserError) else f"{type(exc).__name__}: {exc}"
    if isinstance(exc, NoDriverError):
        message = message.split(_SIM_HINT)[0]
    return {"type": "error", "code": getattr(exc, "code", code), "message": message}


# -- I/O at the edge -----------------------------------------------------------------------
def _emit(out: IO[str], record: dict) -> None:
    out.write(json.dumps(record, separators=(",", ":")) + "\n")
    out.flush()


def _stop_when_stdin_closes(monitor: Monitor) -> None:
    def watch():
        try:
            while sys.stdin.buffer.read(4096):
                pass
        except (OSError, ValueError):
            pass
        monitor.stop()
    threading.Thread(target=watch, name="gpumon-stdin", daemon=True).start()


def run(args, out: Optional[IO[str]] = None) -> int:
    out = out or sys.stdout
    stop_on_sigterm()
    try:
        source = open_source(args, skip=STREAM_SKIPS)
    except UserError as exc:
        _emit(out, error_record(exc))
        return exc.code
    try:
        try:
            infos = source.gpu_infos()
        except UserError as exc:
            _emit(out, error_record(exc))
            return exc.code
        if not infos:
            exc = NoGpuError()
            _emit(out, error_record(exc))
            return exc.code
        gpus = [i.index for i in infos]
        monitor = Monitor(source, interval=args.interval, detector=make_detector(),
                          duration=args.duration)
        monitor.listeners.append(lambda tick, diags: _emit(out, tick_record(tick, diags, gpus)))
        _emit(out, hello_record(source.kind, infos, args.interval,
                                getattr(getattr(source, "nvml", source), "lost", ())))
        if args.stop_on_eof:
            _stop_when_stdin_closes(monitor)
        try:
            monitor.run()
        except KeyboardInterrupt:
            return 0
        except UserError as exc:
            _emit(out, error_record(exc))
            return exc.code
    finally:
        source.close()
    return 0


def main(argv: Optional[list[str]] = None) -> int:
    """``python -m gpumon.commands.stream``: what the plugin runs (no full CLI to import)."""
    parser = argparse.ArgumentParser(prog="gpumon stream", description=__doc__.splitlines()[0])
    add_options(parser)
    args = parser.parse_args(argv)
    try:
        return run(args)
    except BrokenPipeError:
        _quiet_stdout()
        return 0
    except KeyboardInterrupt:
        return 130
    except Exception as exc:  # one line for the plugin to show, never a traceback
        try:
            _emit(sys.stdout, error_record(exc))
        except BrokenPipeError:
            _quiet_stdout()
        return 1


def _quiet_stdout() -> None:
    """The reader went away: point stdout at /dev/null so the exit flush cannot complain."""
    import os
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass


if __name__ == "__main__":
    raise SystemExit(main())
