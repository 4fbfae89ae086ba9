"""CMD's output passed on as it comes (`gpumon run`): raw chunks, byte for byte, to the terminal
or pipe gpumon itself writes to, with gpumon's own lines put in only where CMD's output stands
at the end of a line.

CMD writes into a channel: a pseudo-terminal when the destination is a terminal (CMD still
sees one: progress bars and colours behave as without gpumon; output processing is off on it,
so the bytes reach the real terminal unchanged), else a pipe. A Relay thread reads the
channel with os.read (no line buffering: a `\\r` progress bar shows at once) and writes each
chunk on. gpumon's lines (``say``) go out at once when CMD's output ends in a newline, else
right after the next newline in CMD's output, or after HOLD_S at the latest: on a terminal
CMD's unfinished line is then cleared, gpumon's lines written and CMD's line drawn again below
them; in a pipe or file a newline goes first.
"""
from __future__ import annotations

import codecs
import errno
import io
import os
import select
import threading
import time
from typing import Callable, Optional

# Bytes read from CMD's output at a time.
READ_CHUNK = 64 * 1024
# Longest a gpumon line waits for CMD's unfinished line to end, s.
HOLD_S = 2.0
# Longest unfinished line of CMD's that is drawn again below a gpumon line on a terminal,
# bytes; a longer one gets a newline before gpumon's lines instead.
REDRAW_MAX = 1024
# Erase from the cursor to the end of the line (ECMA-48 EL).
ERASE_LINE = b"\x1b[K"


def same_destination(fd: int, other: int) -> bool:
    """Whether two descriptors write to the same file, pipe or terminal."""
    if fd == other:
        return True
    try:
        a, b = os.fstat(fd), os.fstat(other)
    except OSError:
        return False
    return (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)


def is_tty(fd: int) -> bool:
    try:
        return os.isatty(fd) and os.environ.get("TERM", "") != "dumb"
    except OSError:
        return False


def open_channel(dest: int) -> tuple[int, int]:
    """(read end, write end) for CMD's output bound for ``dest``: a pseudo-terminal of
    ``dest``'s size when that is a terminal, else a pipe. Both close on exec; the caller
    passes the write end to CMD and closes it after the start."""
    if is_tty(dest):
        try:
            return _pty_like(dest)
        except OSError:
            pass                          # (no free pseudo-terminal: a pipe will do)
    r, w = os.pipe()
    return r, w


def _pty_like(dest: int) -> tuple[int, int]:
    import termios
    master, slave = os.openpty()
    try:
        attrs = termios.tcgetattr(slave)
        attrs[1] &= ~termios.OPOST        # no \n -> \r\n here: the real terminal does it
        termios.tcsetattr(slave, termios.TCSANOW, attrs)
        copy_window_size(dest, slave)
    except (OSError, termios.error):
        pass
    os.set_inheritable(master, False)
    os.set_inheritable(slave, False)
    return master, slave


def copy_window_size(src: int, dst: int) -> None:
    """The terminal ``src``'s rows and columns, given to the pseudo-terminal ``dst``."""
    import fcntl
    import termios
    try:
        size = fcntl.ioctl(src, termios.TIOCGWINSZ, b"\0" * 8)
        fcntl.ioctl(dst, termios.TIOCSWINSZ, size)
    except OSError:
        pass


class Relay:
    """Copies CMD's output from ``src`` (the channel's read end) to ``dest`` in a thread, and
    puts gpumon's lines (``say``) between CMD's lines. ``close_src`` ends it early."""

    def __init__(self, src: int, dest: int, clock: Callable[[], float] = time.monotonic):
        self.src, self.dest, self.clock = src, dest, clock
        self.tty = is_tty(dest)
        self.at_eol = True                # CMD's last byte was a newline (or none came yet)
        self.segment: Optional[bytes] = b""   # since CMD's last \n or \r; None: too long
        self.pending: list[bytes] = []    # gpumon's lines waiting for CMD's line to end
        self.since = 0.0                  # when the first of them came
        self.ended = False                # CMD's output is over: gpumon's lines go at once
        self.broken = False               # the destination refused a write
        self.relayed = 0                  # bytes of CMD's passed on
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name="gpumon-relay", daemon=True)

    def start(self) -> "Relay":
        self._thread.start()
        return self

    def say(self, data: bytes) -> None:
        """gpumon's whole line(s), written where CMD's output stands at a line's end."""
        with self._lock:
            if self.ended or (self.at_eol and not self.pending):
                if self.ended and not self.at_eol:
                    data = b"\n" + data   # (CMD ended mid-line: its line stays its own)
                    self.at_eol = True
                self._write(data)
                return
            if not self.pending:
                self.since = self.clock()
            self.pending.append(data)
            self._flush_if_held()

    def running(self) -> bool:
        """Reading CMD's output (started, and not at its end)."""
        return self._thread.is_alive()

    def join(self, timeout: Optional[float] = None) -> bool:
        """Waits for CMD's output to end (every writer closed the channel); then gpumon's
        held lines are written. False if it did not end within ``timeout``."""
        self._thread.join(timeout)
        return not self._thread.is_alive()

    def finish(self) -> None:
        """From now on gpumon's lines go out at once (CMD has ended, or its output is left
        to itself): held ones first, after a newline if CMD's last line was unfinished."""
        with self._lock:
            self.ended = True
            held, self.pending = b"".join(self.pending), []
            if held:
                if not self.at_eol:
                    held = b"\n" + held
                    self.at_eol = True
                self._write(held)

    def _run(self) -> None:
        try:
            while not self.broken:
                if not self._step():
                    break
        finally:
            try:
                os.close(self.src)        # (a writer left now gets EPIPE, as without a reader)
            except OSError:
                pass
            self.finish()

    def _step(self) -> bool:
        """One wait and read; False at the end of CMD's output."""
        try:
            ready, _, _ = select.select([self.src], [], [], 0.25 if self.pending else 1.0)
        except InterruptedError:
            return True
        if not ready:
            with self._lock:
                self._flush_if_held()
            return True
        try:
            chunk = os.read(self.src, READ_CHUNK)
        except OSError as exc:            # EIO: the pseudo-terminal's last writer is gone
            if exc.errno in (errno.EINTR, errno.EAGAIN):
                return True
            return False
        if not chunk:
            return False
        with self._lock:
            self._pass(chunk)
        return True

    def _pass(self, chunk: bytes) -> None:
        """CMD's chunk on; held gpumon lines right after its last newline, if it has one."""
        self.relayed += len(chunk)
        cut = chunk.rfind(b"\n") + 1 if self.pending else 0
        if cut:
            held, self.pending = b"".join(self.pending), []
            self._write(chunk[:cut] + held + chunk[cut:])
        else:
            self._write(chunk)
        self._track(chunk)
        self._flush_if_held()

    def _track(self, chunk: bytes) -> None:
        self.at_eol = chunk.endswith(b"\n")
        start = max(chunk.rfind(b"\n"), chunk.rfind(b"\r")) + 1
        if start:
            self.segment = chunk[start:]
        elif self.segment is not None:
            self.segment += chunk
        if self.segment is not None and len(self.segment) > REDRAW_MAX:
            self.segment = None

    def _flush_if_held(self) -> None:
        """gpumon's lines that have waited HOLD_S go out, CMD's unfinished line or not."""
        if not self.pending or self.clock() - self.since < HOLD_S:
            return
        held, self.pending = b"".join(self.pending), []
        seg = self.segment
        if self.tty and seg is not None and len(seg) < _columns(self.dest):
            self._write(b"\r" + ERASE_LINE + held + seg)     # CMD's line drawn again below
        else:
            self._write(b"\n" + held)

    def _write(self, data: bytes) -> None:
        view, done = memoryview(data), 0
        while done < len(data) and not self.broken:
            try:
                done += os.write(self.dest, view[done:])
            except InterruptedError:
                continue
            except OSError:               # (a closed pipe, a terminal gone: nobody reads)
                self.broken = True


def _columns(fd: int) -> int:
    try:
        return os.get_terminal_size(fd).columns
    except OSError:
        return 80


class LineGate(io.TextIOBase):
    """A text stream for gpumon's own writes to a Relay's destination (sys.stderr, the plain
    lines): each whole line goes to ``relay.say``; an unfinished one waits for its newline."""

    def __init__(self, relay: Relay, like: io.TextIOBase):
        self.relay, self.like = relay, like
        self._encoding = getattr(like, "encoding", None) or "utf-8"
        self._part = ""
        self._lock = threading.Lock()

    @property
    def encoding(self) -> str:
        return self._encoding

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        with self._lock:
            whole, nl, self._part = (self._part + text).rpartition("\n")
            if nl:
                self.relay.say((whole + nl).encode(self._encoding, "backslashreplace"))
        return len(text)

    def flush(self) -> None:
        pass

    def isatty(self) -> bool:
        return self.like.isatty()

    def fileno(self) -> int:
        return self.like.fileno()


# CMD's lines longer than this many characters come to the screen in parts of this length:
# a command that prints a 300 MB line (a dumped tensor) costs gpumon a few MB.
LINE_MAX = 4096
# Characters of CMD's output that wait for the drawing thread at most; CMD then waits.
QUEUE_MAX = 1 << 20


def shown_part(line: str) -> str:
    """A line as a terminal shows it: what follows its last carriage return (a progress
    bar's latest state)."""
    line = line.rstrip("\r")
    return line[line.rfind("\r") + 1:]


def _parts(line: str) -> list[str]:
    line = shown_part(line)
    return [line[i:i + LINE_MAX] for i in range(0, len(line), LINE_MAX)] or [""]


class LineFeed:
    """CMD's output as lines for the screen (`gpumon run` on a terminal): read as it comes
    from ``src``, cut at newlines; ``partial`` is the unfinished line as a terminal shows it,
    so a progress bar is seen before its newline. Nothing is dropped: at most QUEUE_MAX
    characters wait for ``take``, and the reading (so CMD's writing) waits beyond that.
    ``on_output`` is called (from the reading thread) when there is something new."""

    def __init__(self, src: int, on_output: Optional[Callable[[], None]] = None):
        self.src = src
        self.on_output = on_output
        self.partial = ""
        self._lines: list[str] = []
        self._queued = 0
        self._write: Optional[Callable[[list[str]], None]] = None
        self._cond = threading.Condition()
        self._thread = threading.Thread(target=self._run, name="gpumon-cmd-output",
                                        daemon=True)

    def start(self) -> "LineFeed":
        self._thread.start()
        return self

    def running(self) -> bool:
        """Reading CMD's output (started, and not at its end)."""
        return self._thread.is_alive()

    def join(self, timeout: Optional[float] = None) -> bool:
        self._thread.join(timeout)
        return not self._thread.is_alive()

    def finish(self, write: Callable[[list[str]], None]) -> None:
        """The screen is gone: the lines waiting, and from now on each line as it comes
        (from the reading thread), go to ``write``."""
        with self._cond:
            self._write = write
            lines, self._lines, self._queued = self._lines, [], 0
            self._cond.notify_all()
            if lines:
                write(lines)

    def take(self) -> list[str]:
        with self._cond:
            lines, self._lines, self._queued = self._lines, [], 0
            self._cond.notify_all()
        return lines

    def _run(self) -> None:
        utf8 = codecs.getincrementaldecoder("utf-8")(errors="replace")
        part = ""
        try:
            while True:
                chunk = _read(self.src)
                text = part + utf8.decode(chunk, final=not chunk)
                *ended, part = text.split("\n")
                if not chunk and part:    # the end: an unfinished last line is a line
                    ended.append(part)
                    part = ""
                lines = [p for line in ended for p in _parts(line)]
                whole = max(0, len(part) - 1) // LINE_MAX * LINE_MAX
                if whole:                 # the complete parts of a long unfinished line
                    lines += _parts(part[:whole])
                    part = part[whole:]
                self._add(lines, part)
                if not chunk:
                    break
        finally:
            try:
                os.close(self.src)
            except OSError:
                pass

    def _add(self, lines: list[str], part: str) -> None:
        with self._cond:
            while self._queued > QUEUE_MAX and self._write is None:
                self._cond.wait(0.5)
            self.partial = shown_part(part)
            if self._write is not None:
                if lines:
                    self._write(lines)
                return
            self._lines.extend(lines)
            self._queued += sum(map(len, lines))
        if self.on_output is not None:
            self.on_output()


def _read(fd: int) -> bytes:
    """The next chunk of ``fd``; b"" at its end (EIO: a pseudo-terminal's last writer left)."""
    while True:
        try:
            return os.read(fd, READ_CHUNK)
        except InterruptedError:
            continue
        except OSError:
            return b""
