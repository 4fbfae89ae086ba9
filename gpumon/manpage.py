"""`python -m gpumon.manpage > gpumon.1`: gpumon's man page, generated from its argument
parser (every command, its options and examples) by argparse-manpage (a build-time tool:
pip install 'gpumon-dl[completion]')."""
from __future__ import annotations

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


if __name__ == "__main__":
    sys.stdout.write(manpage())
