"""gpumon's command line: wires the sub-command modules together, nothing more.

Only the named command's module is imported: `gpumon --help` and `--version` use the table
below alone (the modules import the UI, the exporter and the monitor).
"""
from __future__ import annotations

import argparse
import errno
import importlib
import os
import signal
import sys

from gpumon import __version__
from gpumon.commands.helptext import COMMAND_HELP
from gpumon.errors import EXIT_USAGE, UserError, exit_codes_text
from gpumon.interrupts import held_interrupts

COMMANDS = tuple(COMMAND_HELP)
DEFAULT_COMMAND = "watch"
_TOP_LEVEL = ("-h", "--help", "--version")

EPILOG = f"""\
examples:
  gpumon                            the live dashboard (gpumon watch)
  gpumon log -o run.csv 1 600       every 1 s, 600 polls, to run.csv
  gpumon run -- python train.py     watch a training job, diagnose it when it ends
  gpumon analyze run.csv            diagnose a log afterwards
  gpumon watch --sim sync_stall:4   simulated GPUs, no driver needed
  gpumon COMMAND --help             a command's options and examples

exit codes:
{exit_codes_text()}
"""


class Parser(argparse.ArgumentParser):
    """argparse's parser, whose errors are one line, as every other gpumon error: `gpumon
    COMMAND: what is wrong (see gpumon COMMAND --help)`, exit 2. Sub-commands' parsers are of
    the same class (argparse makes them so), and each refuses what it does not know itself,
    so the line names the command it is about."""

    def error(self, message: str):
        if message.startswith("argument "):
            message = message[len("argument "):]
        try:
            print(f"{self.prog}: {message} (see {self.prog} --help)", file=sys.stderr)
        except (OSError, ValueError, AttributeError):     # (no stderr to say it on)
            pass
        raise SystemExit(EXIT_USAGE)

    def parse_known_args(self, args=None, namespace=None):
        args, extras = super().parse_known_args(args, namespace)
        if extras:
            self.error(f"unrecognized arguments: {' '.join(extras)}")
        return args, extras


def _top_parser() -> argparse.ArgumentParser:
    from gpumon.commands.helptext import HelpFormatter
    parser = Parser(
        prog="gpumon", description="Watch NVIDIA GPUs during training and say why they are "
        "not busy: data starvation, sync stalls, throttling.", epilog=EPILOG,
        formatter_class=HelpFormatter)
    parser.add_argument("--version", action="version", version=f"gpumon {__version__}")
    parser.set_defaults(full_parser=build_parser)     # (for `gpumon completion`)
    return parser


def light_parser() -> argparse.ArgumentParser:
    """The top-level parser with every command's name and help, no command module imported."""
    parser = _top_parser()
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, text in COMMAND_HELP.items():
        sub.add_parser(name, **({"help": text} if text else {}))
    return parser


def build_parser(names: tuple = COMMANDS) -> argparse.ArgumentParser:
    """The parser with the sub-commands ``names`` (default all of them), their options included."""
    parser = _top_parser()
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in names:
        try:
            module = importlib.import_module(f"gpumon.commands.{name}")
        except ModuleNotFoundError as exc:
            if exc.name != f"gpumon.commands.{name}":
                raise
            continue  # a command not built yet
        module.register(sub)
    return parser


def _choices(parser: argparse.ArgumentParser) -> set:
    return set(parser._subparsers._group_actions[0].choices)  # type: ignore[union-attr]


def main(argv: list[str] | None = None) -> int:
    """The command line; returns the exit code. Standard output that cannot be written (a
    full disk, closed, a device that refuses) is one line on stderr and exit 1, whenever
    it shows; a reader that went away (`| head`) is a quiet 0. Either way nothing is left
    for the interpreter's last flush to fail on."""
    out = Stdout(_stdout_stream())
    before, sys.stdout = sys.stdout, out
    try:
        code = _interruptible(list(sys.argv[1:] if argv is None else argv))
        out.flush()                 # (what print() left buffered fails here, not at exit)
    except BrokenPipeError as exc:
        out.error = out.error or exc
    except (OSError, SystemExit):   # (rich turns a broken pipe into SystemExit(1))
        if out.error is None:
            raise
    finally:
        sys.stdout = out.stream if before is None else before
        if out.error is not None:
            out.silence()
    return code if out.error is None else out.said()


def _interruptible(argv: list[str]) -> int:
    try:
        return _main(argv)
    except KeyboardInterrupt:       # Ctrl-C or SIGTERM before a command's loop took over
        print("gpumon: interrupted", file=sys.stderr)
        return 130


class Stdout:
    """sys.stdout while a command runs: the same stream, with the first error writing it
    kept, so that the command line tells standard output's failure from a file's."""

    def __init__(self, stream):
        self.stream = stream
        self.error: OSError | None = None

    def write(self, text: str) -> int:
        try:
            return self.stream.write(text)
        except OSError as exc:
            self.error = self.error or exc
            raise

    def flush(self) -> None:
        try:
            self.stream.flush()
        except OSError as exc:
            self.error = self.error or exc
            raise

    def __getattr__(self, name):    # (isatty, encoding, fileno, ...)
        return getattr(self.stream, name)

    def said(self) -> int:
        """The exit code of the failure, said on stderr in one line (a broken pipe: 0,
        quietly)."""
        if isinstance(self.error, BrokenPipeError):
            return 0
        why = ("it is closed" if self.error.errno == errno.EBADF
               else self.error.strerror or str(self.error))
        if sys.stderr is not None:          # (print(file=None) would write to stdout)
            try:
                print(f"gpumon: cannot write standard output: {why}", file=sys.stderr)
            except (OSError, ValueError):
                pass
        return 1

    def silence(self) -> None:
        """Points the stream's descriptor at /dev/null and lets go of what it holds."""
        try:
            null = os.open(os.devnull, os.O_WRONLY)
            os.dup2(null, self.stream.fileno())
            os.close(null)
            self.stream.flush()
        except (OSError, ValueError, AttributeError):
            pass


class _Closed:
    """Standard output that was closed when gpumon started: every write fails as on a
    closed descriptor."""
    encoding = "utf-8"

    def write(self, text: str) -> int:
        raise OSError(errno.EBADF, os.strerror(errno.EBADF))

    def flush(self) -> None:
        pass

    def isatty(self) -> bool:
        return False

    def fileno(self) -> int:
        raise OSError(errno.EBADF, os.strerror(errno.EBADF))


def _stdout_stream():
    """sys.stdout; where it is None (started with `>&-`), a stream that refuses writes. A
    closed descriptor 1 is held with /dev/null opened read-only: no file the command opens
    takes number 1 (and gets what is meant for standard output), and writes to it fail."""
    if sys.stdout is not None:
        return sys.stdout
    try:
        os.fstat(1)
    except OSError:
        fd = os.open(os.devnull, os.O_RDONLY)
        if fd != 1:
            os.dup2(fd, 1)
            os.close(fd)
    return _Closed()


def unknown_command(name: str, known) -> str:
    """One line: the word that is no command, the closest command, and every command."""
    import difflib
    names = [c for c in COMMANDS if c in known and COMMAND_HELP.get(c)]
    close = difflib.get_close_matches(name, names, n=1)
    hint = f" (did you mean '{close[0]}'?)" if close else ""
    return f"unknown command {name!r}{hint}; the commands are: {', '.join(names)}"


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def with_command(argv: list[str]) -> list[str]:
    """``argv`` with the default command put in front where none is named: no argument, an
    option (`gpumon -i 2`) or a dstat-style delay (`gpumon 1 10`)."""
    if not argv or (argv[0] not in COMMANDS and argv[0] not in _TOP_LEVEL
                    and (argv[0].startswith("-") or _is_number(argv[0]))):
        return [DEFAULT_COMMAND] + argv
    return argv


def _main(argv: list[str]) -> int:
    argv = with_command(argv)
    if argv[0] not in COMMANDS and argv[0] not in _TOP_LEVEL:
        print(f"gpumon: {unknown_command(argv[0], COMMANDS)}", file=sys.stderr)
        return EXIT_USAGE
    with held_interrupts():         # (the command's module is imported here)
        parser = build_parser((argv[0],)) if argv[0] in COMMANDS else light_parser()
    if argv[0] in COMMANDS and argv[0] not in _choices(parser):     # that command is not built
        print(f"gpumon: {unknown_command(argv[0], _choices(parser))}", file=sys.stderr)
        return EXIT_USAGE
    args = parser.parse_args(argv)     # (a usage error: one line, SystemExit(2))
    if not getattr(args, "func", None):
        parser.print_help()
        return EXIT_USAGE
    try:
        if hasattr(args, "interval"):
            from gpumon.commands.common import resolve_sampling
            resolve_sampling(args)
        return int(args.func(args) or 0)
    except UserError as exc:
        print(f"gpumon: {exc}", file=sys.stderr)
        return exc.code


if __name__ == "__main__":
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    raise SystemExit(main())
