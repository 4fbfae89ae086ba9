"""`gpumon completion bash|zsh|fish`: the shell completion script, generated from the
argument parser by shtab (pip install 'gpumon-dl[completion]')."""
from __future__ import annotations

import sys

from gpumon.commands.helptext import help_kwargs
from gpumon.errors import EXIT_USAGE, UserError

SHELLS = ("bash", "zsh", "fish")


def register(sub) -> None:
    p = sub.add_parser("completion",
                       description="Print the completion script of SHELL (commands, options, "
                       "choices), generated from gpumon's own argument parser. Needs shtab: "
                       "pip install 'gpumon-dl[completion]'.", **help_kwargs("completion"))
    p.add_argument("shell", choices=SHELLS, help="the shell to complete in")
    p.set_defaults(func=run)


def script(parser, shell: str) -> str:
    """The completion script of ``shell`` for every command and option of ``parser``."""
    if shell not in SHELLS:
        raise UserError(f"completion: no shell {shell!r} (known: {', '.join(SHELLS)})",
                        EXIT_USAGE)
    try:
        import shtab
    except ImportError:
        raise UserError("gpumon completion needs shtab: pip install 'gpumon-dl[completion]'") \
            from None
    return shtab.complete(parser, shell=shell)


def run(args) -> int:
    # (The CLI hands over the builder of its parser with every command: no upward import.)
    sys.stdout.write(script(args.full_parser(), args.shell))
    return 0
