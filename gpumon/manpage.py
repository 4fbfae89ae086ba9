"""`python -m gpumon.manpage > gpumon.1`: gpumon's man page, generated from its argument
parser (every command, its options and examples) by argparse-manpage (a build-time tool:
pip install 'gpumon-dl[completion]')."""
from __future__ import annotations

import os
import sys

from gpumon import __version__
from gpumon.cli import build_parser


def manpage() -> str:
    """The man page, in roff."""
    try:
        from argparse_manpage.manpage import Manpage
    except ImportError:
        raise SystemExit("gpumon.manpage needs argparse-manpage: "
                         "pip install 'gpumon-dl[completion]'") from None
    parser = build_parser()
    data = {"project_name": "gpumon", "version": __version__, "manual_section": "1",
            "manual_title": "gpumon manual",
            "description": parser.description}
    return str(Manpage(parser, _data=data, format="single-commands-section"))


def main() -> int:
    """Writes the man page to standard output; one that cannot be written is one line."""
    text = manpage()
    try:
        sys.stdout.write(text)
        sys.stdout.flush()
    except OSError as exc:
        sys.stdout = open(os.devnull, "w")      # (nothing left for the exit's flush)
        print(f"gpumon.manpage: cannot write standard output: {exc.strerror}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
