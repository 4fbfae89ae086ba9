"""Options and wiring shared by the commands that sample (watch, log, run, export)."""
from __future__ import annotations

import argparse
import math
import os
import signal
import sys
import threading
from typing import Callable, Optional

from gpumon.errors import EXIT_USAGE, UserError
from gpumon.interrupts import held_interrupts
from gpumon.selection import select_gpus

# Bounds of --interval, s. Below 50 ms a poll costs more than it tells: the driver keeps a
# utilization sample every ~1/6 s, and every one is read whatever the interval; the loop
# would only burn a core. Above an hour the verdicts (windows of seconds) mean nothing.
MIN_INTERVAL_S = 0.05
MAX_INTERVAL_S = 3600.0
# Every number on the command line has an upper bound, so no value reaches a timer, a clock
# or a width that cannot hold it (--duration 1e308 overflowed select()'s time_t). --duration:
# a year, far beyond any training run (without it: until Ctrl-C).
MAX_DURATION_S = 365 * 86400.0
# --speed of a replay: 100 times slower to a day of log in under a second.
MIN_SPEED, MAX_SPEED = 0.01, 100000.0
# Counts and seeds: what a signed 64-bit integer holds (CSV and JSON readers keep it exact).
MAX_WHOLE = 2**63 - 1
# Text widths (status --width), characters.
MAX_WIDTH = 10000


def positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not (value > 0 and math.isfinite(value)):
        raise argparse.ArgumentTypeError(f"must be above 0 and finite: {text!r}")
    return value


def bounded_float(text: str, least: float, most: float, unit: str = " seconds") -> float:
    """``text`` as a float from ``least`` to ``most`` (above 0 and finite first)."""
    value = positive_float(text)
    if not least <= value <= most:
        raise argparse.ArgumentTypeError(f"must be between {least:g} and {most:g}{unit}: "
                                         f"{text!r}")
    return value


def poll_interval(text: str) -> float:
    return bounded_float(text, MIN_INTERVAL_S, MAX_INTERVAL_S)


def duration_s(text: str) -> float:
    value = positive_float(text)
    if value > MAX_DURATION_S:
        raise argparse.ArgumentTypeError(f"must be at most {MAX_DURATION_S:.0f} seconds (a "
                                         f"year; leave --duration out to run until stopped): "
                                         f"{text!r}")
    return value


def replay_speed(text: str) -> float:
    return bounded_float(text, MIN_SPEED, MAX_SPEED, unit="")


def whole_number(text: str, least: int, most: int = MAX_WHOLE) -> int:
    """``text`` as an int from ``least`` to ``most`` (an argparse type: errors as usage
    errors)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value < least:
        raise argparse.ArgumentTypeError(f"must be {least} or more: {text!r}")
    if value > most:
        raise argparse.ArgumentTypeError(f"must be {most} or less: {text!r}")
    return value


def sim_seed(text: str) -> int:
    return whole_number(text, 0)


def text_width(text: str) -> int:
    return whole_number(text, 1, MAX_WIDTH)


def sim_spec(text: str) -> str:
    """--sim's SCENARIO[:GPUS], checked for a name here (the scenario itself when the
    simulator is loaded): an empty one is no reason to fall back to NVML."""
    if not text.strip() or text.strip().startswith(":"):
        raise argparse.ArgumentTypeError(f"name a scenario, e.g. busy or sync_stall:4 "
                                         f"(`gpumon sim list` lists them): {text!r}")
    return text


def gpu_list(text: str) -> list[str]:
    items = [t.strip() for t in text.split(",") if t.strip()]
    if not items:
        raise argparse.ArgumentTypeError("expected GPU indices or UUIDs, e.g. 0,2")
    return items


def positive_int(text: str) -> int:
    return whole_number(text, 1)


class _StoreGiven(argparse.Action):
    """Stores the value and notes that the option was given (its default is a real value, so
    `--interval 1` and no --interval look the same otherwise)."""

    def __call__(self, parser, namespace, values, option_string=None):
        setattr(namespace, self.dest, values)
        namespace.given = getattr(namespace, "given", frozenset()) | {self.dest}


def add_sampling_options(p: argparse.ArgumentParser, *, sim: bool = True,
                         duration: bool = True) -> None:
    g = p.add_argument_group("sampling")
    g.add_argument("-i", "--interval", type=poll_interval, default=1.0, metavar="S",
                   action=_StoreGiven,
                   help=f"seconds between polls, {MIN_INTERVAL_S:g} to {MAX_INTERVAL_S:g} "
                        "(default 1; every driver sample is kept anyway)")
    g.add_argument("--gpus", type=gpu_list, default=None, metavar="LIST",
                   help="GPUs to watch, by NVML index or UUID (or its start), e.g. 0,2 "
                        "(default: all)")
    if duration:
        g.add_argument("--duration", type=duration_s, default=None, metavar="S",
                       help="stop after S seconds, at most a year (default: until Ctrl-C)")
    if sim:
        g.add_argument("--sim", type=sim_spec, default=None, metavar="SCENARIO[:GPUS]",
                       help="simulated GPUs instead of NVML (see `gpumon sim list`)")
        g.add_argument("--seed", type=sim_seed, default=0,
                       help="seed of the simulation, 0 or more (default 0)")
    p.add_argument("--no-color", action="store_true",
                   help="no colour (NO_COLOR in the environment does the same)")


def add_count_options(p: argparse.ArgumentParser) -> None:
    """dstat's `DELAY [COUNT]`, -n/--count and --once (watch, log)."""
    p.add_argument("delay", nargs="?", type=poll_interval, default=None, metavar="DELAY",
                   help="seconds between polls, as -i (dstat style)")
    p.add_argument("count_arg", nargs="?", type=positive_int, default=None, metavar="COUNT",
                   help="number of polls with readings, as -n")
    g = p.add_argument_group("how long")
    g.add_argument("-n", "--count", type=positive_int, default=None, metavar="N",
                   help="stop after N polls with readings (with --duration: whichever "
                        "comes first)")
    g.add_argument("--once", action="store_true", help="one poll, then exit (as -n 1)")


def resolve_sampling(args) -> None:
    """Folds the positional DELAY and COUNT and --once into ``interval`` and ``count``; the
    same thing said twice is a usage error."""
    if getattr(args, "delay", None) is not None:
        if "interval" in getattr(args, "given", ()):
            raise UserError("the interval is given twice: DELAY and -i/--interval", EXIT_USAGE)
        args.interval = args.delay
    if not hasattr(args, "count"):
        return
    count = args.count
    if getattr(args, "count_arg", None) is not None:
        if count is not None:
            raise UserError("the count is given twice: COUNT and -n/--count", EXIT_USAGE)
        count = args.count_arg
    if getattr(args, "once", False):
        if count is not None:
            raise UserError("--once cannot be used with a count (-n or COUNT)", EXIT_USAGE)
        count = 1
    args.count = count


def no_color(args) -> bool:
    return bool(getattr(args, "no_color", False) or os.environ.get("NO_COLOR"))


def open_source(args, **reads):
    """The source the options ask for: simulated GPUs with --sim, else NVML + host.
    ``reads``: what the command shows of NVML (gpumon.nvml.NvmlSource's flags)."""
    if getattr(args, "sim", None) is not None:
        with held_interrupts():
            from gpumon.sim import SimSource, parse_sim_spec
        try:
            name, gpus = parse_sim_spec(args.sim)
            # (On its own clock, one interval per read: the same seed, the same verdicts.)
            src = SimSource(name, gpus=gpus, seed=getattr(args, "seed", 0),
                            step_s=getattr(args, "interval", None))
        except UserError as exc:        # a bad --sim SPEC is a usage error
            raise UserError(f"--sim: {exc}", EXIT_USAGE) from None
        if args.gpus:
            src = SelectGpus(src, args.gpus, "simulated GPUs")
        return src
    with held_interrupts():
        from gpumon.node import NvmlNode
    return NvmlNode(args.gpus, **reads).open()


class SelectGpus:
    """--gpus over a simulated or replayed source: keep the chosen GPUs only (``where`` names
    the GPUs there are, for the error). Anything else is the source's own."""

    def __init__(self, src, keys: list[str], where: str):
        self.src, self.kind = src, src.kind
        self.keep = set(select_gpus(src.gpu_infos(), keys, where))

    def __getattr__(self, name):        # (a replay's name, done, bad, ...)
        return getattr(self.src, name)

    def gpu_infos(self):
        return [i for i in self.src.gpu_infos() if i.index in self.keep]

    def read(self):
        from dataclasses import replace
        t = self.src.read()
        host = t.host
        if host is not None:
            host = replace(host, jobs=tuple(j for j in host.jobs if j.gpu in self.keep))
        return replace(t, gpus=tuple(s for s in t.gpus if s.gpu in self.keep), host=host)

    def close(self):
        self.src.close()


def lost_text(gpus) -> str:
    """``GPU 3 is lost (...)``: one or several GPUs NVML reported lost."""
    gpus = sorted(gpus)
    verb = "is" if len(gpus) == 1 else "are"
    return (f"GPU {', '.join(map(str, gpus))} {verb} lost (NVML: GPU is lost, it fell off the "
            "bus)")


class LostNotices:
    """A Monitor listener that says once, in one line on stderr, each GPU lost while sampling
    ("...; logging the others"), and calls ``every_lost()`` once instead when none is left."""

    def __init__(self, monitor, doing: str, *, quiet: bool = False,
                 every_lost: Optional[Callable[[], None]] = None):
        self.monitor = monitor
        self.doing = doing
        self.quiet = quiet
        self.every_lost = every_lost
        self.said: set[int] = set()
        self.ended = False

    def __call__(self, tick, diagnoses) -> None:
        new = [g for g in tick.lost if g not in self.said]
        if not new:
            return
        self.said.update(new)
        if self.monitor.every_gpu_lost:
            if not self.ended and self.every_lost is not None:
                self.ended = True
                self.every_lost()
        elif not self.quiet:
            print(f"gpumon: {lost_text(new)}; {self.doing} the others", file=sys.stderr,
                  flush=True)


def make_detector():
    """The live detector (streaming, with hysteresis); None until gpumon.detect exists."""
    try:
        with held_interrupts():
            from gpumon.detect import Detector
    except ImportError:
        return None
    return Detector()


def stop_on_sigterm() -> None:
    """SIGTERM ends the loop the same way Ctrl-C does: cleanly, with the log closed. So does
    SIGHUP (the terminal went away), unless it was ignored from the start: `nohup gpumon log
    ... &` outlives the terminal."""
    def handler(signum, frame):
        raise KeyboardInterrupt
    _on_stop_signals(handler)


def sigterm_event() -> threading.Event:
    """SIGTERM and SIGHUP set the returned event, every time they come: a second one while
    stopping (GNU timeout sends two; a service manager may repeat) changes nothing, so the
    command still ends cleanly with 0. For loops that wait on the event instead of catching
    KeyboardInterrupt."""
    stop = threading.Event()
    _on_stop_signals(lambda signum, frame: stop.set())
    return stop


def _on_stop_signals(handler) -> None:
    """``handler`` for SIGTERM, and for SIGHUP unless it was ignored from the start (nohup)."""
    signal.signal(signal.SIGTERM, handler)
    if hasattr(signal, "SIGHUP") and signal.getsignal(signal.SIGHUP) != signal.SIG_IGN:
        signal.signal(signal.SIGHUP, handler)


def reopen_on_sigusr1(sinks) -> None:
    """SIGUSR1 reopens the CSV log at the next tick: after logrotate renamed it
    (`postrotate ... kill -USR1`), rows go on in a new file of the same name."""
    if not sinks or not hasattr(signal, "SIGUSR1"):
        return

    def handler(signum, frame):
        for sink in sinks:
            sink.request_reopen()
    signal.signal(signal.SIGUSR1, handler)
