"""`gpumon` (the console script) and `python -m gpumon`.

The stop signals are taken before anything else is imported (gpumon/interrupts.py): a
signal while Python imports gpumon is held, then ends it with one line and exit 130.
"""
from gpumon import interrupts


def main() -> int:
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
