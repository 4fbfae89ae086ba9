"""`gpumon` / `gpumon watch`: the live dashboard (plain lines when not on a terminal)."""
from __future__ import annotations

import sys
import time
from typing import Callable, Optional

from gpumon import interrupts
from gpumon.commands.common import (LostNotices, SelectGpus, add_count_options,
                                    add_sampling_options, lost_text, make_detector, no_color,
                                    open_source, poll_interval, reopen_on_sigusr1,
                                    replay_speed)
from gpumon.commands.helptext import help_kwargs
from gpumon.errors import UserError
from gpumon.monitor import Monitor
from gpumon.ui.live import Loop, is_terminal, make_console, run_plain, run_screen
from gpumon.ui.model import Dashboard
from gpumon.ui.summary import summary_text

# Poll at most this often during a fast replay, s: each poll steps every logged tick due
# (1 s each), one by one, so a faster poll would only add polls.
REPLAY_MIN_POLL_S = 0.05


def add_screen_options(p) -> None:
    g = p.add_argument_group("screen")
    g.add_argument("--refresh", type=poll_interval, default=None, metavar="S",
                   help="seconds between redraws, 0.05 to 3600 (default: the --interval; each "
                        "redraw shows every reading since the last)")
    g.add_argument("--plain", action="store_true",
                   help="plain lines, one per interval, even on a terminal (the default when "
                        "stdout is not one)")
    g.add_argument("--log", metavar="FILE", default=None,
                   help="also write the CSV log (as `gpumon log`) to FILE")
    mode = g.add_mutually_exclusive_group()
    mode.add_argument("--force", action="store_true",
                      help="overwrite the --log FILE if it exists")
    mode.add_argument("--append", action="store_true", help="continue the --log FILE")


def register(sub) -> None:
    p = sub.add_parser("watch",
                       description="Live dashboard: per GPU utilization with its recent "
                       "sub-second history, memory, power, clocks, temperature, PCIe and the "
                       "job's processes; host CPU and I/O; the current verdict and its advice. "
                       "Plain lines when stdout is not a terminal. Ctrl-C or q quits.",
                       **help_kwargs("watch"))
    add_count_options(p)
    add_sampling_options(p)
    add_screen_options(p)
    r = p.add_argument_group("replay")
    r.add_argument("--replay", metavar="CSV", default=None,
                   help="play a gpumon log (CSV, or JSON lines) back through the same screen "
                        "and detector (--gpus picks GPUs of the log by index)")
    r.add_argument("--speed", type=replay_speed, default=None, metavar="N",
                   help="replay N times faster than real time, 0.01 to 100000 (default 1; "
                        "with --replay only)")
    p.set_defaults(func=run)


def check_log_target(args) -> None:
    """--log - is refused: stdout is the screen's (or, under `gpumon run`, CMD's)."""
    if getattr(args, "log", None) == "-":
        raise UserError("--log - is not supported here; use `gpumon log -o -`", 2)


def open_sink(args):
    if not getattr(args, "log", None):
        return []
    check_log_target(args)
    from gpumon.csvlog import CsvSink
    sinks = [CsvSink(args.log, force=getattr(args, "force", False),
                     append=getattr(args, "append", False))]
    reopen_on_sigusr1(sinks)
    return sinks


def label_of(args, source) -> str:
    if source.kind == "replay":
        speed = args.speed or 1.0
        return source.name + (f" x{speed:g}" if speed != 1 else "")
    if source.kind == "sim":
        return args.sim or ""
    return ""


def watch(args, source, *, label: str = "", interval: Optional[float] = None,
          on_signal: Optional[Callable[[int], bool]] = None,
          until: Optional[Callable[[], bool]] = None, alt_screen: bool = True,
          reserve: int = 0, before_draw=None, loop_ready=None, out=None,
          plain: Optional[bool] = None) -> Dashboard:
    """Monitor ``source`` and draw it until the end (duration, ``until``, a signal, q).

    Returns the Dashboard (for the summary). The source is closed on the way out. ``plain``
    (default: is_plain on ``out``) chooses plain lines over the screen.
    """
    out = out or sys.stdout
    interval = interval or args.interval
    sinks: list = []
    try:
        infos = source.gpu_infos()
        sinks = open_sink(args)
        interrupts.check()          # a stop signal held during the set-up: nothing watched yet
    except BaseException:
        for sink in sinks:
            sink.close()
        source.close()
        raise
    detector = make_detector()
    monitor = Monitor(source, interval=interval, detector=detector, sinks=sinks,
                      duration=getattr(args, "duration", None),
                      count=getattr(args, "count", None))
    dash = Dashboard(infos, kind=source.kind, label=label, interval=args.interval,
                     detector=detector is not None)
    monitor.listeners.append(dash.update)
    if plain is None:
        plain = is_plain(args, out)
    if plain:                            # (on the screen, a lost GPU's row and banner say it)
        monitor.listeners.append(LostNotices(monitor, "watching",
                                             every_lost=lambda: _every_lost(monitor)))
    loop = Loop(monitor, refresh=args.refresh or args.interval, on_signal=on_signal,
                until=until)
    if loop_ready is not None:
        loop_ready(loop)
    try:
        if plain:
            run_plain(loop, dash, out)
        else:
            run_screen(loop, dash, make_console(no_color(args), file=out),
                       alt_screen=alt_screen, reserve=reserve, before_draw=before_draw)
    finally:
        monitor.close()
    return dash


def _every_lost(monitor) -> None:
    print(f"gpumon: {lost_text(monitor.latest.lost)}: no GPU is left; no verdict from now on",
          file=sys.stderr, flush=True)


def print_summary(text: str, out=None) -> None:
    """The paragraph, wrapped at word boundaries on a terminal, one line in a pipe."""
    out = out or sys.stdout
    if is_terminal(out):
        import shutil
        import textwrap
        text = textwrap.fill(text, width=min(100, shutil.get_terminal_size().columns))
    try:
        out.write(text + "\n")
        out.flush()
    except OSError:          # the terminal went away (SIGHUP): nobody is left to read it
        pass


def is_plain(args, out=None) -> bool:
    return bool(args.plain) or not is_terminal(out or sys.stdout)


def check_replay_options(args) -> None:
    """Options that mean nothing with (or without) --replay are refused, not ignored."""
    if args.replay and args.sim:
        raise UserError("--replay and --sim cannot be used together", 2)
    if args.speed is not None and not args.replay:
        raise UserError("--speed needs --replay CSV", 2)


def run(args) -> int:
    check_replay_options(args)
    with interrupts.held_stops():   # until the screen's loop takes them, and after it
        return _run(args)


def _run(args) -> int:
    if args.replay:
        from gpumon.replay import ReplaySource
        speed = args.speed or 1.0
        source = ReplaySource(args.replay, speed=speed)
        if args.gpus:
            try:
                source = SelectGpus(source, args.gpus, "the log has")
            except UserError:
                source.close()
                raise
        interval = max(REPLAY_MIN_POLL_S, args.interval / speed)
        until = lambda: source.done or bool(interrupts.stop_signal())  # noqa: E731
    else:
        # The screen's process table shows per-process SM use, its list a little fresher; the
        # energy counter only goes to a --log.
        source = open_source(args, process_util=True, process_every_s=2.0,
                             skip=() if getattr(args, "log", None) else ("energy",))
        interval, until = args.interval, lambda: bool(interrupts.stop_signal())
    started = time.monotonic()
    dash = watch(args, source, label=label_of(args, source), interval=interval, until=until)
    elapsed = None if args.replay else time.monotonic() - started
    print_summary(summary_text(dash, elapsed=elapsed))
    if getattr(source, "bad", None) is not None and source.bad.count:
        print(f"gpumon: {source.bad.count} malformed row(s) skipped in {args.replay} (first at "
              f"line {source.bad.first_line})", file=sys.stderr)
    return 0
