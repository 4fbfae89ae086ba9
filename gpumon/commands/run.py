"""`gpumon run [options] -- CMD ARGS...`: run CMD under watch, diagnose it, exit as it did.

The verdicts are CMD's job's only: on real GPUs a CommandScope (gpumon/monitor.py) cuts each
tick to the GPUs whose processes are in CMD's process tree before the detector sees it. The
screen still shows every GPU (a line above it says which are CMD's and which run other jobs);
the CSV of --log has every GPU's rows and verdict cells on CMD's GPUs only; the exit summary
comes from the judged part alone. Until one of CMD's processes is on a GPU, nothing is judged
and a line says so. With --sim the simulated GPUs hold no process of CMD's: every GPU is
judged, and the scenario says what they do.
"""
from __future__ import annotations

import argparse
import os
import shlex
import signal
import subprocess
import sys
import threading
import time
from collections import deque
from typing import Optional

from gpumon.commands.common import add_sampling_options, open_source
from gpumon.commands.watch import add_screen_options, is_plain, label_of, print_summary, watch
from gpumon.errors import UserError
from gpumon.monitor import EVERY, OWN, CommandScope
from gpumon.ui.model import Dashboard
from gpumon.ui.screen import gpus_text, hms
from gpumon.ui.summary import summary_text

# Exit code when CMD cannot be started (not found, not executable), as a shell does.
CANNOT_START = 127
# Ctrl-C presses after which CMD's process group gets SIGKILL: a job that ignores two
# interrupts is stuck, and the user is asking to get out.
KILL_AFTER_INTERRUPTS = 3
# Lines of CMD's output kept in view above the dashboard on a terminal.
OUTPUT_ROWS = 8
# Longest command text in the summary, characters.
COMMAND_TEXT = 60


def register(sub) -> None:
    p = sub.add_parser("run", help="run a command, watch its GPUs, diagnose it when it ends",
                       description="Starts CMD, shows the live screen (plain lines when not on "
                       "a terminal) with CMD's process tree attributed to its GPUs, forwards "
                       "Ctrl-C/SIGTERM to CMD, and when CMD ends prints the diagnosis of the "
                       "run. Exits with CMD's exit code (128+N when a signal N killed it).")
    add_sampling_options(p, duration=False)
    add_screen_options(p)
    p.add_argument("cmd", nargs=argparse.REMAINDER, metavar="-- CMD ARGS",
                   help="the command to run (after --)")
    p.set_defaults(func=run)


def exit_code(returncode: int) -> int:
    """A shell's convention: 128+N for a process killed by signal N."""
    return 128 - returncode if returncode < 0 else returncode


class Child:
    """CMD in its own process group: signals reach it only through gpumon, which forwards them."""

    def __init__(self, cmd: list[str], capture: bool):
        env = dict(os.environ)
        stdin = None
        if capture:
            env.setdefault("PYTHONUNBUFFERED", "1")    # lines as they are printed, not in blocks
        try:
            if sys.stdin is not None and sys.stdin.isatty():
                stdin = subprocess.DEVNULL   # a background process group reading the tty stops
        except (ValueError, OSError):
            pass
        kw = {"process_group": 0} if sys.version_info >= (3, 11) else {"preexec_fn": os.setpgrp}
        try:
            self.proc = subprocess.Popen(
                cmd, stdin=stdin, env=env,
                stdout=subprocess.PIPE if capture else None,
                stderr=subprocess.PIPE if capture else None, **kw)
        except OSError as exc:
            raise UserError(f"cannot start {cmd[0]}: {exc.strerror or exc}", CANNOT_START) \
                from None
        self.interrupts = 0
        self.lines: deque[str] = deque(maxlen=1000)
        self.on_output = None                   # called (from a pump thread) after new lines
        self._lock = threading.Lock()
        self.pumps = []
        if capture:
            for stream in (self.proc.stdout, self.proc.stderr):
                t = threading.Thread(target=self._pump, args=(stream,), daemon=True,
                                     name="gpumon-cmd-output")
                t.start()
                self.pumps.append(t)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def _pump(self, stream) -> None:
        """CMD's output, line by line; a progress bar's carriage returns keep the last part."""
        for raw in iter(stream.readline, b""):
            text = raw.decode(errors="replace").rstrip("\n").rsplit("\r", 1)[-1]
            with self._lock:
                self.lines.append(text)
            if self.on_output is not None:
                self.on_output()
        stream.close()

    def take_lines(self) -> list[str]:
        with self._lock:
            out = list(self.lines)
            self.lines.clear()
        return out

    def forward(self, signum: int) -> bool:
        """Pass a signal to CMD's process group; keep watching until CMD ends."""
        if signum == signal.SIGINT:
            self.interrupts += 1
            if self.interrupts >= KILL_AFTER_INTERRUPTS:
                signum = signal.SIGKILL
        try:
            os.killpg(self.proc.pid, signum)
        except (ProcessLookupError, PermissionError):
            pass
        return False

    def done(self) -> bool:
        return self.proc.poll() is not None

    def wait(self) -> int:
        while True:
            try:
                rc = self.proc.wait()
                break
            except KeyboardInterrupt:
                self.forward(signal.SIGINT)
        for t in self.pumps:
            t.join(timeout=1.0)      # a grandchild may hold the pipe open: don't hang on it
        return rc


class ScopeNotes:
    """One line whenever the judged GPUs change: waiting, CMD's GPUs and the others, or every
    GPU. A judged listener of the Monitor (sampling thread); ``take()`` hands the lines over."""

    def __init__(self, scope: CommandScope, name: str, out=None):
        self.scope = scope
        self.name = name
        self.out = out                  # write at once (plain mode: stderr), else queue
        self._last: Optional[tuple] = None
        self._lines: list[str] = []
        self._lock = threading.Lock()

    def text(self) -> str:
        sc, name = self.scope, f"`{self.name}`"
        others = f"; {gpus_text(sc.others)}: other jobs, not judged" if sc.others else ""
        if sc.state == OWN:
            return f"gpumon: {name} uses {gpus_text(sc.gpus)}{others}"
        if sc.state == EVERY:
            return (f"gpumon: cannot tell {name}'s GPUs (their processes are not visible on "
                    "this host: a container?); judging every GPU")
        if sc.used:
            return f"gpumon: {name} is on no GPU now; nothing is judged{others}"
        return f"gpumon: waiting for {name} to use a GPU{others}"

    def __call__(self, tick, diagnoses) -> None:
        key = (self.scope.state, self.scope.gpus, self.scope.others)
        if key == self._last:
            return
        self._last = key
        line = self.text()
        if self.out is not None:
            try:
                self.out.write(line + "\n")
                self.out.flush()
            except OSError:
                pass
            return
        with self._lock:
            self._lines.append(line)

    def take(self) -> list[str]:
        with self._lock:
            lines, self._lines = self._lines, []
        return lines


def run(args) -> int:
    cmd = list(args.cmd)
    if cmd and cmd[0] == "--":
        cmd = cmd[1:]
    if not cmd:
        raise UserError("run: no command given (usage: gpumon run [options] -- CMD ARGS...)", 2)
    # Fail on a missing driver or a bad --gpus before CMD starts, not after.
    open_source(args).close()
    plain = is_plain(args)
    child = Child(cmd, capture=not plain)
    try:
        source = open_source(args)
    except BaseException:
        child.forward(signal.SIGTERM)
        child.wait()
        raise
    started = time.monotonic()
    # Real GPUs: judge CMD's job only. Simulated ones hold no process of CMD's: judge them all.
    scope = notes = judged = None
    if hasattr(source, "process_tree"):
        scope = CommandScope(source.process_tree(child.pid).members)
        notes = ScopeNotes(scope, os.path.basename(cmd[0]), out=sys.stderr if plain else None)
        judged = Dashboard([], kind=source.kind, label=label_of(args, source),
                           interval=args.interval)

    def show_output(console) -> None:
        for text in child.take_lines():
            console.out(text, highlight=False)
        for text in notes.take() if notes is not None else ():
            console.out(text, style="bold", highlight=False)

    def loop_ready(loop) -> None:
        if scope is not None:
            loop.monitor.scope = scope
            loop.monitor.judged_listeners += [judged.update, notes]
        if not plain:
            # CMD's output is shown at the next redraw, without waiting for a new reading.
            child.on_output = loop.poke

    error: Optional[UserError] = None
    try:
        dash = watch(args, source, label=label_of(args, source), on_signal=child.forward,
                     until=child.done, alt_screen=False, reserve=OUTPUT_ROWS,
                     before_draw=show_output, loop_ready=loop_ready)
    except UserError as exc:        # the monitor failed (a lost driver): CMD goes on
        error, dash = exc, None
        print(f"gpumon: {exc}; waiting for {cmd[0]} to end", file=sys.stderr)
    except BaseException:
        if not child.done():        # gpumon itself failed: don't leave CMD running unseen
            child.forward(signal.SIGTERM)
        child.wait()
        raise
    child.on_output = None
    rc = child.wait()
    for text in child.take_lines():
        print(text)
    for text in notes.take() if notes is not None and dash is not None else ():
        print(text)
    elapsed = time.monotonic() - started
    text = shlex.join(cmd)
    if len(text) > COMMAND_TEXT:
        text = text[:COMMAND_TEXT - 3] + "..."
    how = (f"exited with code {rc}" if rc >= 0 else
           f"was killed by {signal.Signals(-rc).name} (exit code {exit_code(rc)})")
    if dash is not None:
        print_summary(run_summary(dash, scope, judged, elapsed, f"`{text}`")
                      + f" The command {how}.")
    elif error is not None:
        print(f"gpumon: `{text}` {how}; no diagnosis (monitoring failed)", file=sys.stderr)
    return exit_code(rc)


def run_summary(dash: Dashboard, scope: Optional[CommandScope], judged: Optional[Dashboard],
                elapsed: float, command: str) -> str:
    """The paragraph about CMD's job: from the judged part of each tick when there is a scope."""
    if scope is None:
        return summary_text(dash, elapsed=elapsed, command=command)
    if not scope.used:
        return (f"gpumon ran {command} for {hms(elapsed)}: none of its processes used a GPU, "
                "so nothing was judged.")
    judged.detector = dash.detector
    text = summary_text(judged, elapsed=elapsed, command=command)
    if scope.state == EVERY:
        text += (" Every GPU was judged: the command's processes could not be told on the "
                 "GPUs.")
    return text
