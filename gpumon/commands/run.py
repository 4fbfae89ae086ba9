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
import ctypes
import os
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time
from typing import Optional

from rich.text import Text

from gpumon.commands.common import add_sampling_options, open_source
from gpumon.commands.watch import (add_screen_options, check_log_target, is_plain, label_of,
                                   open_sink, print_summary, watch)
from gpumon.errors import UserError
from gpumon.monitor import EVERY, OWN, CommandScope
from gpumon.relay import (LINE_MAX, LineFeed, LineGate, Relay, copy_window_size, open_channel,
                          same_destination)
from gpumon.ui.model import Dashboard
from gpumon.ui.screen import gpus_text, hms
from gpumon.ui.summary import summary_text
from gpumon.commands.helptext import help_kwargs

__all__ = ["LINE_MAX", "Child", "exit_code", "run"]

# Exit codes when CMD cannot be started, as a shell's: found but cannot be executed (no
# permission, a directory, not a program), and not found.
CANNOT_EXECUTE = 126
CANNOT_FIND = 127
# A Ctrl-C this many seconds or more after the first, CMD still running, sends SIGKILL to
# CMD's process group; sooner, each is passed on as SIGINT (as a shell would): a job gets
# time to save and clean up, and a stuck one can still be ended.
KILL_GRACE_S = 3.0
# Lines of CMD's output kept in view above the dashboard on a terminal.
OUTPUT_ROWS = 8
# Longest command text in the summary, characters.
COMMAND_TEXT = 60
# Seconds that what CMD leaves in its process group gets after SIGTERM to end before SIGKILL
# (time to flush and clean up, as `timeout --kill-after`).
KILL_GROUP_AFTER_S = 5.0
# Seconds gpumon waits, once CMD and its group have ended, for the end of CMD's output (a
# process outside the group may still hold it open).
OUTPUT_END_S = 1.0
# prctl(2): the signal a process gets when its parent dies.
PR_SET_PDEATHSIG = 1
# What run reads of NVML: the screen's process table (per-process SM use), and the process
# list every second, so CMD's processes are seen on a GPU as soon as they arrive.
RUN_READS = dict(process_util=True, process_every_s=1.0)


def register(sub) -> None:
    p = sub.add_parser("run",
                       description="Starts CMD, shows the live screen (plain lines when not on "
                       "a terminal) with CMD's process tree attributed to its GPUs, forwards "
                       "Ctrl-C/SIGTERM to CMD (a Ctrl-C "
                       f"{KILL_GRACE_S:g} s or more after the first sends SIGKILL), and when "
                       "CMD ends prints the diagnosis of the run. CMD's output is passed on as "
                       "it comes; gpumon's own lines go between its lines. Exits with CMD's "
                       "exit code (128+N when a signal N killed it; 126 when CMD cannot be "
                       "executed, 127 when it is not found). What CMD leaves running in its "
                       "process group when it ends is ended too (--keep-group: not); if gpumon "
                       "itself is killed, CMD gets SIGTERM.",
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


class Output:
    """Where CMD's stdout and stderr go. Those bound where gpumon writes its own lines
    (stderr for plain lines, stdout for the screen) go through one channel (gpumon.relay), a
    pseudo-terminal when that is a terminal: for plain lines a Relay passes CMD's bytes on as
    they come and gpumon's lines (``gate``, put in place of sys.stderr) fall between CMD's
    lines; on the screen a LineFeed hands CMD's lines, and its unfinished one, to the drawing
    thread. CMD's other stream is its own, inherited untouched."""

    def __init__(self, plain: bool):
        self.plain = plain
        own = 2 if plain else 1
        self.fds = [fd for fd in (1, 2) if same_destination(fd, own)]
        self.relay: Optional[Relay] = None
        self.feed: Optional[LineFeed] = None
        self.gate: Optional[LineGate] = None
        self._write = -1
        if not self.fds:
            return
        read, self._write = open_channel(own)
        self.own, self._pty, self._size = own, read if os.isatty(read) else -1, None
        if self._pty >= 0:
            self._size = _terminal_size(own)
        if plain:
            self.relay = Relay(read, own)
            self.gate = LineGate(self.relay, sys.stderr)
        else:
            self.feed = LineFeed(read)

    def popen_kw(self) -> dict:
        fd = self._write if self._write >= 0 else None
        return {"stdout": fd if 1 in self.fds else None,
                "stderr": fd if 2 in self.fds else None}

    def started(self) -> None:
        """CMD holds the channel's write end now: gpumon's copy is closed, reading begins."""
        self.close_write()
        for reader in (self.relay, self.feed):
            if reader is not None:
                reader.start()

    def close_write(self) -> None:
        if self._write >= 0:
            os.close(self._write)
            self._write = -1

    def join(self, timeout: float) -> None:
        for reader in (self.relay, self.feed):
            if reader is not None:
                reader.join(timeout)

    def resized(self, pgid: int) -> None:
        """The terminal's size given to CMD's pseudo-terminal when it changed, and SIGWINCH
        to CMD's process group (the terminal sends it to gpumon's alone)."""
        reader = self.relay or self.feed
        if self._pty < 0 or reader is None or not reader.running():
            return                       # (no pseudo-terminal, or CMD's output is over)
        size = _terminal_size(self.own)
        if size is not None and size != self._size:
            self._size = size
            copy_window_size(self.own, self._pty)
            _signal_group(pgid, signal.SIGWINCH)

    def finish(self) -> None:
        """gpumon's lines go out at once from now on (CMD has ended)."""
        if self.relay is not None:
            self.relay.finish()


def _terminal_size(fd: int):
    try:
        return os.get_terminal_size(fd)
    except OSError:
        return None


class Child:
    """CMD in its own process group: signals reach it only through gpumon, which forwards them.

    When CMD ends, what it left in its group (`sh -c 'server & exit'`, a rank's orphans) gets
    SIGTERM, then SIGKILL after KILL_GROUP_AFTER_S, unless ``keep_group``. Ctrl-C is passed
    on each time; one that comes KILL_GRACE_S or more after the first, CMD still running,
    sends SIGKILL to its process group instead (``killed_after``: when, after the first)."""

    def __init__(self, cmd: list[str], output: Output, keep_group: bool = False):
        stdin = None
        try:
            if sys.stdin is not None and sys.stdin.isatty():
                stdin = subprocess.DEVNULL   # a background process group reading the tty stops
        except (ValueError, OSError):
            pass
        try:
            self.proc = subprocess.Popen(cmd, stdin=stdin, **output.popen_kw(),
                                         **_group_and_death_signal())
        except OSError as exc:
            output.close_write()
            raise start_error(cmd[0], exc) from None
        output.started()
        self.keep_group = keep_group
        self.left: list[int] = []               # what CMD left in its group, ended by gpumon
        self.first_interrupt: Optional[float] = None
        self.killed_after: Optional[float] = None
        self.warned = False
        self.hurry = False                      # an interrupt after CMD ended: no grace

    @property
    def pid(self) -> int:
        return self.proc.pid

    def forward(self, signum: int) -> Optional[str]:
        """Pass a signal to CMD's process group; keep watching until CMD ends. Returns a
        line to show the user, once, when a second Ctrl-C comes within the grace."""
        note = None
        if self.done():
            self.hurry = True
        elif signum == signal.SIGINT:
            now = time.monotonic()
            if self.first_interrupt is None:
                self.first_interrupt = now
            elif now - self.first_interrupt >= KILL_GRACE_S:
                signum, self.killed_after = signal.SIGKILL, now - self.first_interrupt
            elif not self.warned:
                self.warned = True
                note = (f"gpumon: Ctrl-C passed on to `{os.path.basename(self.proc.args[0])}`; "
                        f"to kill it (SIGKILL), press Ctrl-C again once {KILL_GRACE_S:g} s "
                        "have passed since the first")
        _signal_group(self.pid, signum)
        return note

    def done(self) -> bool:
        return self.proc.poll() is not None

    def wait(self) -> int:
        rc = self.proc.wait()
        if not self.keep_group:
            self.end_group()
        return rc

    def end_group(self) -> None:
        """SIGTERM to what CMD left in its process group, SIGKILL to what is left of it after
        KILL_GROUP_AFTER_S (or at once on Ctrl-C)."""
        left = group_members(self.pid)
        if left == [] or not _signal_group(self.pid, signal.SIGTERM):
            return
        self.left = left or []
        deadline = time.monotonic() + KILL_GROUP_AFTER_S
        while time.monotonic() < deadline and not self.hurry:
            if not _group_alive(self.pid):
                return
            time.sleep(0.05)
        _signal_group(self.pid, signal.SIGKILL)

    def how(self, rc: int) -> str:
        """How CMD ended, as the summary says it."""
        if rc >= 0:
            return f"exited with code {rc}"
        text = f"was killed by {signal.Signals(-rc).name} (exit code {exit_code(rc)})"
        if rc == -signal.SIGKILL and self.killed_after is not None:
            text += (f"; gpumon sent the SIGKILL on a Ctrl-C {self.killed_after:.1f} s after "
                     "the first")
        return text


def command_path(name: str) -> str:
    """The file CMD's name starts, as a shell finds it; not found (127) or not executable
    (126) is a UserError, before anything else starts."""
    path = name if os.sep in name else shutil.which(name)
    if path is None:
        raise UserError(f"cannot start {name}: command not found", CANNOT_FIND)
    if os.path.isdir(path):
        raise UserError(f"cannot start {name}: it is a directory", CANNOT_EXECUTE)
    if not os.path.exists(path):
        raise UserError(f"cannot start {name}: No such file or directory", CANNOT_FIND)
    if not os.access(path, os.X_OK):
        raise UserError(f"cannot start {name}: Permission denied (not executable)",
                        CANNOT_EXECUTE)
    return path


def start_error(name: str, exc: OSError) -> UserError:
    """Popen's failure as a shell's: 127 when a file is not found (CMD's, or the interpreter
    its #! line names), 126 when it cannot be executed (no permission, not a program)."""
    why = exc.strerror or str(exc)
    if isinstance(exc, FileNotFoundError):
        if os.path.exists(name if os.sep in name else (shutil.which(name) or "")):
            why = "the interpreter its #! line names was not found"
        return UserError(f"cannot start {name}: {why}", CANNOT_FIND)
    return UserError(f"cannot start {name}: {why}", CANNOT_EXECUTE)


class Signals:
    """From before CMD starts until gpumon exits, SIGINT, SIGTERM and SIGHUP go to CMD
    (Child.forward), not to gpumon: gpumon ends only when CMD has, and says how. (The
    screen's loop puts its own handlers in place meanwhile; they forward too.)"""

    def __init__(self):
        self.child: Optional[Child] = None
        self._old: dict = {}

    def __enter__(self) -> "Signals":
        names = [getattr(signal, n) for n in ("SIGINT", "SIGTERM", "SIGHUP") if hasattr(signal, n)]
        # (one ignored from the start, as by nohup or for a background job, stays ignored)
        self._old = {s: signal.signal(s, self._handler) for s in names
                     if signal.getsignal(s) != signal.SIG_IGN}
        return self

    def _handler(self, signum, frame) -> None:
        if self.child is None:       # (before CMD started: it never will)
            raise KeyboardInterrupt
        self.child.forward(signum)

    def __exit__(self, *exc) -> None:
        # After CMD's end, a Ctrl-C while gpumon finishes changes nothing: ignored, not left
        # to Python, which sets its handlers back to the default (death) as it exits.
        for s, h in self._old.items():
            signal.signal(s, h if self.child is None else signal.SIG_IGN)


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


def command_of(args) -> list[str]:
    """CMD from the command line, after the options that cannot be used are refused."""
    if args.duration is not None:
        raise UserError("run: no --duration: the run lasts as long as CMD (to limit CMD, "
                        "run it under `timeout S`)", 2)
    check_log_target(args)
    cmd = list(args.cmd)
    if cmd and cmd[0] == "--":
        cmd = cmd[1:]
    if not cmd:
        raise UserError("run: no command given (usage: gpumon run [options] -- CMD ARGS...)", 2)
    return cmd


def run(args) -> int:
    cmd = command_of(args)
    # Everything that can fail is tried before CMD starts, not after: CMD's file, the driver
    # and --gpus, the --log file.
    command_path(cmd[0])
    open_source(args, **RUN_READS).close()
    sinks = open_sink(args)
    saved = sys.stderr
    try:
        with Signals() as signals:
            output = Output(is_plain(args))
            child = signals.child = Child(cmd, output, keep_group=args.keep_group)
            if output.gate is not None:
                sys.stderr = output.gate       # gpumon's lines between CMD's
            return _run_job(args, cmd, child, output, sinks)
    finally:
        sys.stderr = saved
        for sink in sinks:
            sink.close()


def _run_job(args, cmd: list[str], child: Child, output: Output, sinks) -> int:
    try:
        source = open_source(args, **RUN_READS)
    except BaseException:
        child.forward(signal.SIGTERM)
        child.wait()
        raise
    started = time.monotonic()
    view = RunView(args, source, child, output, sinks)
    # CMD's stdout stays CMD's: in plain mode gpumon's own lines and summary go to stderr.
    out = sys.stderr if output.plain else sys.stdout
    error: Optional[UserError] = None
    try:
        dash = watch(view.watch_args, source, label=label_of(args, source),
                     on_signal=view.on_signal, until=child.done, alt_screen=False,
                     reserve=OUTPUT_ROWS, before_draw=view.show_output,
                     loop_ready=view.loop_ready, out=out, plain=output.plain)
    except UserError as exc:        # the monitor failed (a lost driver): CMD goes on
        error, dash = exc, None
        view.screen_gone()
        print(f"gpumon: {exc}; waiting for {cmd[0]} to end", file=sys.stderr)
    except BaseException:
        if not child.done():        # gpumon itself failed: don't leave CMD running unseen
            child.forward(signal.SIGTERM)
        child.wait()
        raise
    view.screen_gone()
    rc = child.wait()
    output.join(OUTPUT_END_S)       # (a process outside the group may hold it open)
    output.finish()
    if dash is not None:
        view.print_notes(out)
    _report(cmd, child, rc, dash, view, time.monotonic() - started, out)
    return exit_code(rc)


def _report(cmd, child: Child, rc: int, dash, view: "RunView", elapsed: float, out) -> None:
    text = shlex.join(cmd)
    if len(text) > COMMAND_TEXT:
        text = text[:COMMAND_TEXT - 3] + "..."
    if child.left:
        print(f"gpumon: `{os.path.basename(cmd[0])}` left {len(child.left)} process(es) in its "
              "process group; ended them (--keep-group leaves them running)", file=sys.stderr)
    if dash is not None:
        print_summary(run_summary(dash, view.scope, view.judged, elapsed, f"`{text}`")
                      + f" The command {child.how(rc)}.", out)
    else:
        print(f"gpumon: `{text}` {child.how(rc)}; no diagnosis (monitoring failed)",
              file=sys.stderr)


class RunView:
    """What `gpumon run` adds to the watch: CMD's scope on real GPUs (the judged part and a
    line when it changes), CMD's output above the screen, the lines gpumon says meanwhile."""

    def __init__(self, args, source, child: Child, output: Output, sinks):
        self.child, self.output, self.sinks = child, output, sinks
        self.plain = output.plain
        # The log is open already: the watch must not open it again.
        self.watch_args = argparse.Namespace(**{**vars(args), "log": None})
        self.notices: list[str] = []
        # Real GPUs: judge CMD's job only. Simulated ones hold no process of CMD's: judge all.
        self.scope = self.notes = self.judged = None
        if hasattr(source, "process_tree"):
            self.scope = CommandScope(source.process_tree(child.pid).members)
            self.notes = ScopeNotes(self.scope, os.path.basename(child.proc.args[0]),
                                    out=sys.stderr if self.plain else None)
            self.judged = Dashboard([], kind=source.kind, label=label_of(args, source),
                                    interval=args.interval)

    def loop_ready(self, loop) -> None:
        loop.monitor.sinks.extend(self.sinks)
        self.sinks.clear()              # (the monitor closes them now)
        # A resize reaches CMD within a reading (the screen's loop takes SIGWINCH).
        loop.monitor.listeners.append(lambda tick, diagnoses: self.output.resized(
            self.child.pid))
        if self.scope is not None:
            loop.monitor.scope = self.scope
            loop.monitor.judged_listeners += [self.judged.update, self.notes]
        if self.output.feed is not None:
            # CMD's output is shown at the next redraw, without waiting for a new reading.
            self.output.feed.on_output = loop.poke

    def on_signal(self, signum: int) -> bool:
        """The screen's loop got a signal: on to CMD, and the loop goes on until CMD ends."""
        note = self.child.forward(signum)
        if note is not None:
            if self.plain:
                print(note, file=sys.stderr, flush=True)
            else:
                self.notices.append(note)
        return False

    def show_output(self, console) -> Optional[Text]:
        """CMD's new lines and gpumon's notes printed above the screen, for good; returns
        CMD's unfinished line (a progress bar), drawn above the screen until the next draw."""
        feed = self.output.feed
        lines = feed.take() if feed is not None else []
        if lines:
            console.print(Text.from_ansi("\n".join(lines)), highlight=False, soft_wrap=True)
        notes = self.notes.take() if self.notes is not None else []
        notices, self.notices = self.notices, []
        for text in notes + notices:
            console.out(text, style="bold", highlight=False)
        self.output.resized(self.child.pid)
        partial = feed.partial if feed is not None else ""
        return Text.from_ansi(partial, no_wrap=True, overflow="ellipsis") if partial else None

    def screen_gone(self) -> None:
        """No screen any more: CMD's lines go straight to stdout as they come."""
        feed = self.output.feed
        if feed is not None:
            feed.on_output = None
            feed.finish(_print_lines)

    def print_notes(self, out) -> None:
        for text in (self.notes.take() if self.notes is not None else []) + self.notices:
            print(text, file=out)


def _print_lines(lines: list[str]) -> None:
    try:
        sys.stdout.write("\n".join(lines) + "\n")
        sys.stdout.flush()
    except (OSError, ValueError):
        pass


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
