"""Stop signals (SIGINT, SIGTERM, SIGHUP) and SIGUSR1 from gpumon's first line to its last.

A KeyboardInterrupt raised at a random point (inside an import, a lock's release, a
handler already unwinding the first one) ends in a traceback, or is lost. So the command's
entry point (gpumon/__main__.py) calls ``install()`` before anything else: from then on a
stop signal is only *noted* (its handler sets a number: no lock, no I/O; the interpreter's
wake-up pipe ends ``wait()``). Where it is noted:

- until the command's module is imported (``held_interrupts()`` in the command line): at
  the end of that block it is raised as one KeyboardInterrupt, which the command line
  answers with `gpumon: interrupted` and exit 130; from then on SIGINT, SIGTERM and SIGHUP
  raise KeyboardInterrupt as Ctrl-C does in Python, for commands that handle it, except in
  the imports a command makes later inside ``held_interrupts()`` (held, then raised);
- in a command that polls (``held_stops()``: `gpumon log`, `gpumon watch`): the command reads
  ``stop_signal()`` between its steps and waits with ``wait()``, which returns at once when
  one comes. A second signal while stopping changes nothing.

SIGUSR1 (logrotate's `postrotate`) is caught from the start and does nothing until a log
file is open (then the log reopens it): a request to reopen a file not yet opened is moot,
as the file will be opened at its name as it is then.

At the very end (atexit) they are ignored: Python's finalization would otherwise give them
their default action back, and a late one would kill a process that ended cleanly.

What remains: the interpreter's own start, before the entry point's first line runs (about
20-30 ms on an idle machine; Python's defaults then apply: SIGTERM and SIGHUP end it
without a word, SIGINT with a KeyboardInterrupt traceback).
"""
from __future__ import annotations

import atexit
import os
import select
import signal
import time
from contextlib import contextmanager

STOPS = tuple(getattr(signal, n) for n in ("SIGINT", "SIGTERM", "SIGHUP") if hasattr(signal, n))


class _State:
    installed = False      # install() ran: the stop signals are ours for the process's life
    holding = True         # note stop signals (else: raise KeyboardInterrupt at each)
    polled = False         # a command reads stop_signal() (held_stops): held to the end
    stop = 0               # the first stop signal noted (0: none)
    wake_r = -1            # read end of the pipe a signal wakes wait() through
    wake_w = -1


def _on_stop(signum, frame) -> None:
    if not _State.holding:
        raise KeyboardInterrupt
    if not _State.stop:
        _State.stop = signum


def _on_usr1(signum, frame) -> None:
    """SIGUSR1 before any log is open: nothing to reopen yet."""


def _ours(signum: int) -> bool:
    """Whether gpumon may take ``signum``: not where it was ignored from the start (a
    background job's SIGINT, `nohup`'s SIGHUP), which stays ignored."""
    return signal.getsignal(signum) != signal.SIG_IGN


def _take() -> dict:
    """Installs the handlers and the wake-up pipe; returns what they replaced."""
    old = {"wakeup": None}
    for s in STOPS:
        if _ours(s):
            old[s] = signal.signal(s, _on_stop)
    if hasattr(signal, "SIGUSR1") and _ours(signal.SIGUSR1):
        old[signal.SIGUSR1] = signal.signal(signal.SIGUSR1, _on_usr1)
    try:
        r, w = os.pipe()
        os.set_blocking(r, False)
        os.set_blocking(w, False)
        old["wakeup"] = signal.set_wakeup_fd(w, warn_on_full_buffer=False)
    except (OSError, ValueError):     # (no such pipe here: wait() sleeps its time out)
        return old
    _State.wake_r, _State.wake_w = r, w
    return old


def _give_back(old: dict) -> None:
    wakeup = old.pop("wakeup")
    for s, h in old.items():
        signal.signal(s, h if h is not None else signal.SIG_DFL)
    if _State.wake_r >= 0:
        signal.set_wakeup_fd(wakeup)
        os.close(_State.wake_r)
        os.close(_State.wake_w)
    _State.wake_r = _State.wake_w = -1


def _main_thread() -> bool:
    import threading        # (not at the top: the entry point's first moments stay short)
    return threading.current_thread() is threading.main_thread()


def install() -> None:
    """The command's first act: stop signals are noted from here on (see the module's text).
    Once per process, from its main thread; the process keeps them to its end."""
    if _State.installed:
        return
    _State.holding, _State.stop = True, 0
    try:
        _take()
    except ValueError:      # (not the main thread: signals are not Python's to take there)
        return
    _State.installed = True
    atexit.register(_ignore_from_here)


def _ignore_from_here() -> None:
    """At the very end (atexit: the command's code is decided, its files closed) the signals
    are ignored: Python's finalization gives every handled signal back its default action,
    which would let a late one turn a clean exit into a death by signal."""
    for s in STOPS + ((signal.SIGUSR1,) if hasattr(signal, "SIGUSR1") else ()):
        signal.signal(s, signal.SIG_IGN)


def installed() -> bool:
    return _State.installed


def stop_signal() -> int:
    """The stop signal noted (SIGINT, SIGTERM or SIGHUP), 0 if none came."""
    return _State.stop


def check() -> None:
    """Raises KeyboardInterrupt if a stop signal was noted (at a point chosen for it)."""
    if _State.stop:
        raise KeyboardInterrupt


def hold() -> None:
    """Stop signals are noted from now on (the process is ending, or it polls them)."""
    _State.holding = True


def _release() -> None:
    """From now on a stop signal raises KeyboardInterrupt; one noted before is raised now."""
    _State.holding = False
    if _State.stop:
        _State.stop = 0
        raise KeyboardInterrupt


def wait(timeout: float) -> bool:
    """Sleeps ``timeout`` s, less when a stop signal comes; True if one came (now or before)."""
    deadline = time.monotonic() + max(0.0, timeout)
    while not _State.stop:
        left = deadline - time.monotonic()
        if left <= 0:
            break
        if _State.wake_r < 0:
            time.sleep(left)
            break
        ready, _, _ = select.select([_State.wake_r], [], [], left)
        if ready:
            # (the signal's number is in the pipe before its handler has run)
            _State.stop = _State.stop or _drained()
    return bool(_State.stop)


def _drained() -> int:
    """Empties the wake-up pipe; the first stop signal's number in it (0: none)."""
    got = b""
    try:
        while True:
            chunk = os.read(_State.wake_r, 512)
            if not chunk:
                break
            got += chunk
    except (BlockingIOError, InterruptedError):
        pass
    return next((b for b in got if b in STOPS), 0)


@contextmanager
def held_stops():
    """A command that polls ``stop_signal()`` and sleeps in ``wait()``: stop signals are
    noted, never raised, for the whole block (and, in the gpumon process, to its end).
    Where ``install()`` did not run (a call from Python), the handlers are taken for the
    block and given back after it."""
    if _State.installed:
        _State.holding = _State.polled = True
        _drained()             # (signals raised as KeyboardInterrupt before: handled)
        yield
        return
    if not _main_thread():
        yield
        return
    _State.holding, _State.stop = True, 0
    old = _take()
    try:
        yield
    finally:
        _give_back(old)
        _State.stop = 0


@contextmanager
def held_interrupts():
    """Ctrl-C (and, in the gpumon process, SIGTERM and SIGHUP) while modules are imported is
    held, then raised as one KeyboardInterrupt at the end of the block. Imports only: a slow
    driver call must stay interruptible."""
    if _State.installed:
        if _State.polled:
            yield              # (the command reads the signals itself, between its steps)
            return
        _State.holding = True
        try:
            yield
        finally:
            _release()
        return
    if (not _main_thread()
            or signal.getsignal(signal.SIGINT) is not signal.default_int_handler):
        yield          # (SIGINT ignored, as in a background job, or handled by someone else)
        return
    noted: list[int] = []
    signal.signal(signal.SIGINT, lambda signum, frame: noted.append(signum))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    if noted:
        raise KeyboardInterrupt
