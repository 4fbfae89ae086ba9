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
import codecs
import ctypes
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
from gpumon.commands.watch import (add_screen_options, check_log_target, is_plain, label_of,
                                   print_summary, watch)
from gpumon.errors import UserError
from gpumon.monitor import EVERY, OWN, CommandScope
from gpumon.ui.model import Dashboard
from gpumon.ui.screen import gpus_text, hms
from gpumon.ui.summary import summary_text
from gpumon.commands.helptext import help_kwargs

# Exit code when CMD cannot be started (not found, not executable), as a shell does.
CANNOT_START = 127
# Ctrl-C presses after which CMD's process group gets SIGKILL: a job that ignores two
# interrupts is stuck, and the user is asking to get out.
KILL_AFTER_INTERRUPTS = 3
# Lines of CMD's output kept in view above the dashboard on a terminal.
OUTPUT_ROWS = 8
# Longest command text in the summary, characters.
COMMAND_TEXT = 60
# CMD's output is read in chunks of this many bytes, and a line longer than LINE_MAX
# characters is passed on in parts of that length: a command that prints a 300 MB line
# (a dumped tensor) costs gpumon a few MB, not the line twice over.
READ_CHUNK = 64 * 1024
LINE_MAX = 4096
# Seconds that what CMD leaves in its process group gets after SIGTERM to end before SIGKILL
# (time to flush and clean up, as `timeout --kill-after`).
KILL_GROUP_AFTER_S = 5.0
# prctl(2): the signal a process gets when its parent dies.
PR_SET_PDEATHSIG = 1
# What run reads of NVML: the screen's process table (per-process SM use), and the process
# list every second, so CMD's processes are seen on a GPU as soon as they arrive.
RUN_READS = dict(process_util=True, process_every_s=1.0)


def register(sub) -> None:
    p = sub.add_parser("run",
                       description="Starts CMD, shows the live screen (plain lines when not on "
                       "a terminal) with CMD's process tree attributed to its GPUs, forwards "
                       "Ctrl-C/SIGTERM to CMD, and when CMD ends prints the diagnosis of the "
                       "run. Exits with CMD's exit code (128+N when a signal N killed it). "
                       "What CMD leaves running in its process group when it ends is ended "
                       "too (--keep-group: not); if gpumon itself is killed, CMD gets SIGTERM.",
                       **help_kwargs("run"))
    add_sampling_options(p, duration=False)
    # (Accepted only to say why not: the run lasts as long as CMD.)
    p.add_argument("--duration", type=str, default=None, help=argparse.SUPPRESS)
    add_screen_options(p)
    p.add_argument("--keep-group", action="store_true",
                   help="leave running what CMD leaves behind in its process group when it "
                        "ends (default: SIGTERM to them, SIGKILL after "
                        f"{KILL_GROUP_AFTER_S:g} s)")
    p.add_argument("cmd", nargs=argparse.REMAINDER, metavar="-- CMD ARGS",
                   help="the command to run (after --)")
    p.set_defaults(func=run)


def exit_code(returncode: int) -> int:
    """A shell's convention: 128+N for a process killed by signal N."""
    return 128 - returncode if returncode < 0 else returncode


def _death_signal():
    """A function for the child, between fork and exec, that asks Linux to send CMD SIGTERM
    when gpumon dies, even by SIGKILL (prctl PR_SET_PDEATHSIG); None where there is no prctl.
    The kernel sends it when the thread that started CMD ends: gpumon's main thread."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl     # looked up before the fork
    except (OSError, AttributeError):
        return None
    parent = os.getpid()

    def setup() -> None:
        prctl(PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0)
        if os.getppid() != parent:       # gpumon died before prctl: CMD never starts
            os.kill(os.getpid(), signal.SIGKILL)
    return setup


def group_members(pgid: int) -> Optional[list[int]]:
    """The live processes (zombies left out) of process group ``pgid``, from /proc; None
    where /proc cannot tell."""
    try:
        names = [n for n in os.listdir("/proc") if n.isdigit()]
    except OSError:
        return None
    out = []
    for name in names:
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue                     # ended meanwhile
        fields = stat[stat.rfind(b")") + 2:].split()     # state, ppid, pgrp, ...
        if len(fields) > 2 and int(fields[2]) == pgid and fields[0] != b"Z":
            out.append(int(name))
    return out


class Child:
    """CMD in its own process group: signals reach it only through gpumon, which forwards them.

    When CMD ends, what it left in its group (`sh -c 'server & exit'`, a rank's orphans) gets
    SIGTERM, then SIGKILL after KILL_GROUP_AFTER_S, unless ``keep_group``."""

    def __init__(self, cmd: list[str], capture: bool, keep_group: bool = False):
        env = dict(os.environ)
        stdin = None
        if capture:
            env.setdefault("PYTHONUNBUFFERED", "1")    # lines as they are printed, not in blocks
        try:
            if sys.stdin is not None and sys.stdin.isatty():
                stdin = subprocess.DEVNULL   # a background process group reading the tty stops
        except (ValueError, OSError):
            pass
        kw = _group_and_death_signal()
        try:
            self.proc = subprocess.Popen(
                cmd, stdin=stdin, env=env,
                stdout=subprocess.PIPE if capture else None,
                stderr=subprocess.PIPE if capture else None, **kw)
        except OSError as exc:
            raise UserError(f"cannot start {cmd[0]}: {exc.strerror or exc}", CANNOT_START) \
                from None
        self.keep_group = keep_group
        self.left: list[int] = []               # what CMD left in its group, ended by gpumon
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
        """CMD's output, line by line, read in chunks (see _parts); a line not ended yet is
        held up to LINE_MAX characters."""
        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        partial = ""
        while True:
            chunk = stream.read1(READ_CHUNK)
            *ended, partial = (partial + decoder.decode(chunk, final=not chunk)).split("\n")
            if not chunk and partial:       # the end: an unfinished last line is a line
                ended.append(partial)
                partial = ""
            lines = [part for line in ended for part in _parts(line)]
            partial = partial[partial.rfind("\r") + 1:]
            whole = max(0, len(partial) - 1) // LINE_MAX * LINE_MAX
            if whole:                       # the parts of a long line that are complete
                lines += _parts(partial[:whole])
                partial = partial[whole:]
            if lines:
                self._add(lines)
            if not chunk:
                break
        stream.close()

    def _add(self, lines: list[str]) -> None:
        with self._lock:
            self.lines.extend(lines)
        if self.on_output is not None:
            self.on_output()

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
        if not self.keep_group:
            self.end_group()
        for t in self.pumps:
            t.join(timeout=1.0)      # a process outside the group may hold the pipe open
        return rc

    def end_group(self) -> None:
        """SIGTERM to what CMD left in its process group, SIGKILL to what is left of it after
        KILL_GROUP_AFTER_S (or at once on Ctrl-C)."""
        left = group_members(self.pid)
        if left == [] or not _signal_group(self.pid, signal.SIGTERM):
            return
        self.left = left or []
        deadline = time.monotonic() + KILL_GROUP_AFTER_S
        try:
            while time.monotonic() < deadline:
                if not _group_alive(self.pid):
                    return
                time.sleep(0.05)
        except KeyboardInterrupt:
            pass
        _signal_group(self.pid, signal.SIGKILL)


def _parts(line: str) -> list[str]:
    """A line of CMD's as shown: what follows its last carriage return (a progress bar's
    latest state), in parts of at most LINE_MAX characters."""
    line = line[line.rfind("\r") + 1:]
    return [line[i:i + LINE_MAX] for i in range(0, len(line), LINE_MAX)] or [""]


def _group_and_death_signal() -> dict:
    """Popen's keywords for CMD: its own process group, and SIGTERM when gpumon dies."""
    setup = _death_signal()
    if sys.version_info >= (3, 11):
        return {"process_group": 0, "preexec_fn": setup}

    def preexec() -> None:
        os.setpgrp()
        if setup is not None:
            setup()
    return {"preexec_fn": preexec}


def _group_alive(pgid: int) -> bool:
    members = group_members(pgid)
    return bool(members) if members is not None else _signal_group(pgid, 0)


def _signal_group(pgid: int, signum: int) -> bool:
    try:
        os.killpg(pgid, signum)
        return True
    except (ProcessLookupError, PermissionError):
        return False


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
    if args.duration is not None:
        raise UserError("run: no --duration: the run lasts as long as CMD (to limit CMD, "
                        "run it under `timeout S`)", 2)
    check_log_target(args)
    cmd = list(args.cmd)
    if cmd and cmd[0] == "--":
        cmd = cmd[1:]
    if not cmd:
        raise UserError("run: no command given (usage: gpumon run [options] -- CMD ARGS...)", 2)
    # Fail on a missing driver or a bad --gpus before CMD starts, not after.
    open_source(args, **RUN_READS).close()
    plain = is_plain(args)
    # CMD's stdout stays CMD's: in plain mode gpumon's own lines and summary go to stderr.
    out = sys.stderr if plain else sys.stdout
    child = Child(cmd, capture=not plain, keep_group=args.keep_group)
    try:
        source = open_source(args, **RUN_READS)
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
                     before_draw=show_output, loop_ready=loop_ready, out=out, plain=plain)
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
        print(text, file=out)
    elapsed = time.monotonic() - started
    text = shlex.join(cmd)
    if len(text) > COMMAND_TEXT:
        text = text[:COMMAND_TEXT - 3] + "..."
    how = (f"exited with code {rc}" if rc >= 0 else
           f"was killed by {signal.Signals(-rc).name} (exit code {exit_code(rc)})")
    if child.left:
        print(f"gpumon: `{os.path.basename(cmd[0])}` left {len(child.left)} process(es) in its "
              "process group; ended them (--keep-group leaves them running)", file=sys.stderr)
    if dash is not None:
        print_summary(run_summary(dash, scope, judged, elapsed, f"`{text}`")
                      + f" The command {how}.", out)
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
