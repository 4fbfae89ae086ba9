"""gpumon's command line: wires the sub-command modules together, nothing more.

Only the named command's module is imported: `gpumon --help` and `--version` use the table
below alone (the modules import the UI, the exporter and the monitor).
"""
from __future__ import annotations

import argparse
import importlib
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


def _top_parser() -> argparse.ArgumentParser:
    from gpumon.commands.helptext import HelpFormatter
    parser = argparse.ArgumentParser(
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
    try:
        return _main(list(sys.argv[1:] if argv is None else argv))
    except KeyboardInterrupt:       # Ctrl-C or SIGTERM before a command's loop took over
        print("gpumon: interrupted", file=sys.stderr)
        return 130


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
    args = parser.parse_args(argv)
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
