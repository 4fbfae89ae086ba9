"""The drawing thread: the screen on a terminal (in its alternate screen; under `gpumon run`, a
rich Live below the command's output), plain lines otherwise.

Sampling runs in the Monitor's own thread; this loop only waits (for a new reading, a key,
a resize or a signal) and draws. Signals are turned into a flag and a wake-up, so Ctrl-C
never interrupts a half-written frame, and the terminal is always given back clean.
"""
from __future__ import annotations

import os
import select
import signal
import sys
import threading
import time
import warnings
from contextlib import contextmanager
from typing import Callable, Optional, TextIO

from rich.console import Console, Group
from rich.control import Control
from rich.live import Live

from gpumon.monitor import Monitor
from gpumon.ui import plain
from gpumon.ui.model import Dashboard
from gpumon.ui.screen import Screen

QUIT_KEYS = b"qQ"


def is_terminal(stream: TextIO) -> bool:
    try:
        return stream.isatty() and os.environ.get("TERM", "") != "dumb"
    except (AttributeError, ValueError):
        return False


def make_console(no_color: bool, file: Optional[TextIO] = None) -> Console:
    return Console(file=file, no_color=no_color or None, highlight=False, emoji=False,
                   markup=False)


class Waker:
    """A self-pipe: any thread or signal handler wakes the drawing loop without polling."""

    def __init__(self) -> None:
        self.r, self.w = os.pipe()
        os.set_blocking(self.r, False)
        os.set_blocking(self.w, False)

    def wake(self, *_args) -> None:
        try:
            os.write(self.w, b"!")
        except (BlockingIOError, OSError):
            pass

    def drain(self) -> None:
        try:
            while os.read(self.r, 512):
                pass
        except (BlockingIOError, OSError):
            pass

    def close(self) -> None:
        os.close(self.r)
        os.close(self.w)


@contextmanager
def _keys(fd: Optional[int]):
    """Keys are read one by one and not echoed over the screen; Ctrl-C still signals."""
    if fd is None:
        yield None
        return
    try:
        import termios
        old = termios.tcgetattr(fd)
    except Exception:
        yield None
        return
    new = list(old)
    new[3] &= ~(termios.ECHO | termios.ICANON)
    new[6] = list(new[6])
    new[6][termios.VMIN], new[6][termios.VTIME] = 0, 0
    try:
        termios.tcsetattr(fd, termios.TCSANOW, new)
        yield fd
    finally:
        termios.tcsetattr(fd, termios.TCSADRAIN, old)


class Loop:
    """Runs the Monitor in its thread and draws until it ends, a key or a signal stops it.

    ``on_signal(signum)`` decides what SIGINT/SIGTERM/SIGHUP do (a SIGHUP ignored from the
    start, `nohup`, stays ignored): by default they stop;
    `gpumon run` forwards them to its command instead and keeps watching until it ends.
    ``until()`` is polled after every wake-up (a replay at its end, a command that exited).
    """

    def __init__(self, monitor: Monitor, *, refresh: float,
                 on_signal: Optional[Callable[[int], bool]] = None,
                 until: Optional[Callable[[], bool]] = None):
        self.monitor = monitor
        self.refresh = refresh
        self.on_signal = on_signal or (lambda signum: True)
        self.until = until or (lambda: False)
        self.stopped_by: Optional[str] = None    # "signal", "key", "end"
        self._signals: list[int] = []
        self.waker = Waker()
        self._dirty = False
        self._resized = False
        monitor.listeners.append(self._on_tick)

    def _on_tick(self, tick, diagnoses) -> None:
        self.poke()

    def poke(self) -> None:
        """Something new to show (any thread): draw at the next due time."""
        self._dirty = True
        self.waker.wake()

    @contextmanager
    def _handlers(self):
        names = [signal.SIGINT, signal.SIGTERM]
        if hasattr(signal, "SIGHUP") and signal.getsignal(signal.SIGHUP) != signal.SIG_IGN:
            names.append(signal.SIGHUP)       # (ignored from the start, as by nohup: it stays)
        if hasattr(signal, "SIGWINCH"):
            names.append(signal.SIGWINCH)
        if threading.current_thread() is not threading.main_thread():
            yield
            return

        def handler(signum, frame):
            if signum == getattr(signal, "SIGWINCH", None):
                self._resized = True
            else:
                self._signals.append(signum)
            self.waker.wake()
        old = {s: signal.signal(s, handler) for s in names}
        try:
            yield
        finally:
            for s, h in old.items():
                signal.signal(s, h)

    def _should_stop(self, thread: threading.Thread) -> bool:
        while self._signals:
            if self.on_signal(self._signals.pop(0)):
                self.stopped_by = "signal"
                return True
        if self.until():
            self.stopped_by = "end"
            return True
        if not thread.is_alive():
            self.stopped_by = "end"
            return True
        return False

    def run(self, draw: Callable[[], None], key_fd: Optional[int] = None) -> None:
        """Calls ``draw()`` on new readings (at most every ``refresh`` s, and at least that
        often) until stopped; once more at the end, so the last readings are shown."""
        with self._handlers():
            thread = self.monitor.start_thread()
            try:
                with _keys(key_fd) as fd:
                    fds = [self.waker.r] + ([fd] if fd is not None else [])
                    last = -1e9
                    while not self._should_stop(thread):
                        now = time.monotonic()
                        due = last + self.refresh
                        if (self._dirty and now >= due) or self._resized:
                            self._dirty = self._resized = False
                            draw()
                            last = now = time.monotonic()
                            due = last + self.refresh
                        # New readings wait for the next due time; otherwise sleep until woken.
                        timeout = max(0.0, due - now) if self._dirty else self.refresh
                        ready, _, _ = select.select(fds, [], [], timeout)
                        self.waker.drain()
                        if fd is not None and fd in ready and self._quit_key(fd):
                            self.stopped_by = "key"
                            break
            finally:
                self.monitor.stop()
                thread.join(timeout=5.0)      # the reading in progress is finished and kept
                self.waker.close()
            if self.monitor.error is None:
                draw()                        # the last frame shows every reading taken
        if self.monitor.error is not None:
            raise self.monitor.error

    @staticmethod
    def _quit_key(fd: int) -> bool:
        try:
            keys = os.read(fd, 64)
        except OSError:
            return False
        return any(k in QUIT_KEYS for k in keys)


class AltScreen:
    """Frames drawn over each other in the terminal's alternate screen from its top-left corner,
    the bytes rich's Live writes there: the Screen fills the terminal itself, so Live's two
    more passes over every line of every frame (its Screen wrapper, its LiveRender) are saved."""

    def __init__(self, console: Console, screen: Screen):
        self.console = console
        self.screen = screen
        screen.fill = True

    @staticmethod
    def usable(console: Console) -> bool:
        """Where Live would draw in the alternate screen: a terminal that takes cursor moves."""
        return (console.is_terminal and console.is_interactive and not console.is_dumb_terminal
                and not console.legacy_windows)

    def __enter__(self) -> "AltScreen":
        self.console.set_alt_screen(True)
        self.console.show_cursor(False)
        return self

    def __exit__(self, *exc) -> None:
        self.console.show_cursor(True)
        self.console.set_alt_screen(False)

    def refresh(self) -> None:
        self.console.print(Control.home(), self.screen)


def run_screen(loop: Loop, dash: Dashboard, console: Console, *, alt_screen: bool = True,
               reserve: int = 0,
               before_draw: Optional[Callable[[Console], object]] = None) -> None:
    """The live screen, redrawn explicitly (no timer thread). In the alternate screen by
    default; `gpumon run` draws it below its command's output instead (``reserve`` rows kept
    for that output, printed by ``before_draw`` from the drawing thread; what it returns, if
    not None, is drawn above the screen until the next draw: the command's unfinished line)."""
    screen = Screen(dash.view, reserve=reserve)
    key_fd = None
    try:
        if sys.stdin.isatty():
            key_fd = sys.stdin.fileno()
    except (AttributeError, ValueError, OSError):
        key_fd = None
    top: list = [None]
    # A library warning written to stderr would scribble over the screen: hold them back.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if alt_screen and AltScreen.usable(console):
            drawer = AltScreen(console, screen)
        else:
            drawer = Live(get_renderable=lambda: _above(top[0], screen), console=console,
                          screen=alt_screen, auto_refresh=False, redirect_stdout=False,
                          redirect_stderr=False, transient=False)
        with drawer as live:
            def draw() -> None:
                if before_draw is not None:
                    top[0] = before_draw(console)
                live.refresh()
            loop.run(draw, key_fd=key_fd)


def _above(top, screen: Screen):
    return screen if top is None else Group(top, screen)


class PlainPrinter:
    """A Monitor listener that queues one plain line per tick; the drawing thread writes them."""

    def __init__(self, infos, out: TextIO):
        self.infos = list(infos)
        self.out = out
        self._lines: list[str] = []
        self._lock = threading.Lock()

    def __call__(self, tick, diagnoses) -> None:
        if not tick.gpus and not tick.lost:
            return
        text = plain.line(tick, diagnoses, self.infos)
        with self._lock:
            self._lines.append(text)

    def flush(self) -> None:
        with self._lock:
            lines, self._lines = self._lines, []
        if lines:
            self.out.write("\n".join(lines) + "\n")
            self.out.flush()


def run_plain(loop: Loop, dash: Dashboard, out: TextIO) -> None:
    printer = PlainPrinter(dash.infos.values(), out)
    for text in plain.header(list(dash.infos.values()), dash.kind, dash.label, dash.interval):
        out.write(text + "\n")
    out.flush()
    loop.monitor.listeners.insert(0, printer)
    loop.run(printer.flush)
