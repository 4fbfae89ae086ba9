"""gpumon's command line: wires the sub-command modules together, nothing more."""
from __future__ import annotations

import argparse
import importlib
import signal
import sys

from gpumon import __version__
from gpumon.errors import UserError
from gpumon.interrupts import held_interrupts

# Sub-commands, each a module of gpumon.commands with register(subparsers) and run(args).
COMMANDS = ("watch", "log", "run", "analyze", "list", "status", "export", "plugin", "sim",
            "stream")
DEFAULT_COMMAND = "watch"


def build_parser(names: tuple = COMMANDS) -> argparse.ArgumentParser:
    """The parser with the sub-commands ``names`` (default all of them)."""
    parser = argparse.ArgumentParser(
        prog="gpumon", description="Watch NVIDIA GPUs during training and say why they are "
        "not busy: data starvation, sync stalls, throttling.")
    parser.add_argument("--version", action="version", version=f"gpumon {__version__}")
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
    try:
        return _main(list(sys.argv[1:] if argv is None else argv))
    except KeyboardInterrupt:       # Ctrl-C or SIGTERM before a command's loop took over
        print("gpumon: interrupted", file=sys.stderr)
        return 130


def _parser(argv: list[str]) -> argparse.ArgumentParser:
    # A named sub-command needs only its own module (the others import the UI, the exporter
    # and the monitor: ~50 ms that `gpumon analyze` would spend for nothing).
    parser = None
    if argv and argv[0] in COMMANDS:
        parser = build_parser((argv[0],))
        if argv[0] not in _choices(parser):     # that command is not built
            parser = None
    return parser or build_parser()


def unknown_command(name: str, known: set) -> str:
    """One line: the word that is no command, the closest command, and every command."""
    import difflib
    names = [c for c in COMMANDS if c in known]
    close = difflib.get_close_matches(name, names, n=1)
    hint = f" (did you mean '{close[0]}'?)" if close else ""
    return f"unknown command {name!r}{hint}; the commands are: {', '.join(names)}"


def _main(argv: list[str]) -> int:
    with held_interrupts():         # (the command's modules are imported here)
        parser = _parser(argv)
    known = _choices(parser)
    if argv and argv[0] not in known and not argv[0].startswith("-"):
        print(f"gpumon: {unknown_command(argv[0], known)}", file=sys.stderr)
        return 2
    if not argv or (argv[0] not in known and argv[0] not in ("-h", "--help", "--version")):
        if DEFAULT_COMMAND in known:
            argv.insert(0, DEFAULT_COMMAND)
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except UserError as exc:
        print(f"gpumon: {exc}", file=sys.stderr)
        return exc.code
    except BrokenPipeError:
        # `gpumon watch | head`: the reader went away; leave quietly.
        try:
            sys.stdout = None  # type: ignore[assignment]
        except Exception:
            pass
        return 0


if __name__ == "__main__":
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    raise SystemExit(main())
