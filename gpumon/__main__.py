"""`gpumon` (the console script) and `python -m gpumon`.

The stop signals are taken before anything else is imported (gpumon/interrupts.py): a
signal while Python imports gpumon is held, then ends it with one line and exit 130.
"""
import os

from gpumon import interrupts


def _hold_closed_std_fds() -> None:
    """A standard descriptor closed at start (`>&-`, `<&-`) is held by /dev/null opened
    read-only (writes to it fail, reads see the end): no pipe or file gpumon opens later
    takes its number and receives what is meant for standard output."""
    for fd in (0, 1, 2):
        try:
            os.fstat(fd)
        except OSError:
            os.open(os.devnull, os.O_RDONLY)    # (the lowest free number: this one)


def main() -> int:
    _hold_closed_std_fds()
    interrupts.install()
    try:
        from gpumon.cli import main as cli_main
        return cli_main()
    except KeyboardInterrupt:       # a second signal while the first one was being answered
        return 130
    finally:
        interrupts.hold()           # the way out is never cut by a signal


if __name__ == "__main__":
    raise SystemExit(main())
