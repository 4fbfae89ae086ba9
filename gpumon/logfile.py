"""An append-only log file, the mechanics the CSV and JSON-lines logs share.

O_APPEND writes (logrotate's `copytruncate` works), ``reopen`` after a rename (SIGUSR1,
logrotate's `postrotate`), ``-`` for standard output, an existing file refused unless
``force`` (start again) or ``append`` (continue it: a partial last record, a write cut short
by a full disk or a power loss, is cut off first, and a log of the other format is refused),
and a failed write raised as one line that counts what reached the file (the record it cut
short is taken out).
"""
from __future__ import annotations

import errno
import os

from gpumon.errors import UserError

STDOUT = "-"
# Bytes read back from the end of a log that --append continues: its last row of every GPU
# is in them (8 GPUs write about 7 KB a second).
TAIL_BYTES = 1 << 18
# How each format's first line begins (the CSV's header; a JSON line's first key).
CSV_START = b"time,gpu,"
JSONL_START = b'{"time":'
FORMATS = {"csv": "a CSV log (gpumon log, watch --log, run --log)",
           "jsonl": "a JSON-lines log (gpumon log --format jsonl)"}


class ShortWrite(Exception):
    """A write that failed after ``done`` bytes."""

    def __init__(self, done: int, error: OSError):
        self.done, self.error = done, error


def write_all(fd: int, data: bytes) -> int:
    """Every byte of ``data`` to ``fd``; ShortWrite says how many went before an error."""
    view, done = memoryview(data), 0
    while done < len(data):
        try:
            done += os.write(fd, view[done:])
        except OSError as exc:
            raise ShortWrite(done, exc) from None
    return done


def size_of(path: str) -> int:
    """Bytes in ``path`` (0: missing or empty); a directory is refused in one line."""
    if os.path.isdir(path):
        raise UserError(f"{path} is a directory; give a file in it, e.g. "
                        f"{os.path.join(path, 'run.csv')}")
    try:
        return os.path.getsize(path)
    except (FileNotFoundError, NotADirectoryError):
        return 0                           # (opening it says what is wrong)
    except OSError as exc:
        raise UserError(f"cannot write {path}: {exc.strerror or exc}") from None


def open_append(path: str, *, truncate: bool = False) -> int:
    """``path`` opened for appending (O_APPEND: every write lands at the end, also after
    logrotate's copytruncate cut the file to nothing)."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND | getattr(os, "O_CLOEXEC", 0)
    try:
        return os.open(path, flags | (os.O_TRUNC if truncate else 0), 0o666)
    except OSError as exc:
        raise UserError(f"cannot write {path}: {exc.strerror or exc}") from None


def format_of(first: bytes) -> str:
    """Which of gpumon's logs a file whose first line is ``first`` is: "csv", "jsonl" or ""."""
    if first.startswith(CSV_START):
        return "csv"
    return "jsonl" if first.startswith(JSONL_START) else ""


def refuse_other_format(path: str, first: bytes, wanted: str) -> None:
    """One line where ``path`` is gpumon's log of another format than ``wanted``."""
    found = format_of(first)
    if found and found != wanted:
        raise UserError(f"{path} is {FORMATS[found]}, not {FORMATS[wanted].split(' (')[0]}; "
                        f"--append continues a log in its own format: log to a new file, or "
                        f"continue it with `gpumon log --format {found} --append`")


def cut_partial_end(f, size: int) -> tuple[bytes, int, int]:
    """In a log open for reading and writing (``size`` bytes), cuts a partial last record
    off (one without its newline: a write cut short), so that the next record does not glue
    onto it. Returns the whole records of the last TAIL_BYTES, where they start in the file
    (0: the tail is the whole file) and the bytes cut. A last record longer than the tail
    is ended with a newline instead (nothing is taken out that cannot be seen whole)."""
    start = max(0, size - TAIL_BYTES)
    f.seek(start)
    tail = f.read()
    cut = 0
    if tail and not tail.endswith(b"\n"):
        end = tail.rfind(b"\n") + 1
        if end or not start:
            cut = len(tail) - end
            f.truncate(start + end)
        else:
            f.seek(0, os.SEEK_END)
            f.write(b"\n")
        tail = tail[:end]
    return tail, start, cut


class AppendSink:
    """The file side of a log sink: subclasses format ticks and write them with write_all;
    ``rows`` counts the records (``UNIT``) that reached the file."""

    UNIT = "rows"

    def __init__(self, path: str, *, force: bool = False, append: bool = False):
        self.path = path
        self.rows = 0
        self.cut = 0                       # bytes of a partial last record cut off (--append)
        self._reopen = False
        self.stdout = path == STDOUT
        if self.stdout:
            if append:
                raise UserError("--append cannot continue standard output (-o -)", 2)
            self._fd = os.dup(1)
            return
        size = size_of(path)
        if size and not (force or append):
            raise UserError(f"{path} exists; use --force to overwrite it or --append to "
                            "continue it")
        if append and size:
            self._continue(size)
        self._fd = open_append(path, truncate=force)

    def _continue(self, size: int) -> None:
        """Called before opening a non-empty file with ``append`` (a subclass may repair
        its end)."""

    @property
    def name(self) -> str:
        """What to call the log in messages."""
        return "standard output" if self.stdout else self.path

    def request_reopen(self) -> None:
        """Reopen the file at the next tick (safe in a signal handler)."""
        self._reopen = True

    def reopen(self) -> None:
        """Continue in the file now at ``path`` (the old one was renamed: log rotation)."""
        self._reopen = False
        if self.stdout:
            return                         # (nothing to reopen: a pipe or a terminal)
        fd = open_append(self.path)
        os.close(self._fd)
        self._fd = fd

    def _reopen_if_asked(self) -> None:
        if self._reopen:
            self.reopen()

    def _emit_records(self, data: bytes, head: bytes = b"") -> None:
        """Writes ``head`` and ``data`` (whole records, each ending in a newline) at once;
        counts the records of ``data`` that reached the file. Where a failure cut a record
        short, it is taken out of the file (the ones before it stay) and the failure is
        raised as one line."""
        try:
            write_all(self._fd, head + data)
        except ShortWrite as short:
            whole, done = head + data, short.done
            self.rows += whole.count(b"\n", len(head), done)
            self._cut_partial(done - (whole.rfind(b"\n", 0, done) + 1))
            self._fail(short.error)
        except OSError as exc:
            self._fail(exc)
        self.rows += data.count(b"\n")

    def _cut_partial(self, nbytes: int) -> None:
        if nbytes and not self.stdout:
            try:
                os.ftruncate(self._fd, os.fstat(self._fd).st_size - nbytes)
            except OSError:
                pass

    def _fail(self, exc: OSError) -> None:
        if self.stdout and exc.errno == errno.EPIPE:
            raise BrokenPipeError(exc.errno, exc.strerror)  # (`| head`: the CLI leaves quietly)
        why = "disk full" if exc.errno == errno.ENOSPC else (exc.strerror or str(exc))
        raise UserError(f"cannot write {self.name}: {why} ({self.rows} {self.UNIT} were "
                        "written before this)") from None

    def close(self) -> None:
        if self._fd >= 0:
            try:
                os.close(self._fd)
            except OSError:
                pass
            self._fd = -1
