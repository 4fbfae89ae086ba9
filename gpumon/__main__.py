# Ctrl-C while Python imports gpumon is held back (see gpumon/interrupts.py, which cannot be
# imported yet without opening the same window) and then ends gpumon with one line.
import signal

_noted: list = []
_held = signal.getsignal(signal.SIGINT) is signal.default_int_handler
if _held:
    signal.signal(signal.SIGINT, lambda signum, frame: _noted.append(signum))
try:
    from gpumon.cli import main
finally:
    if _held:
        signal.signal(signal.SIGINT, signal.default_int_handler)
if _noted:
    import sys
    print("gpumon: interrupted", file=sys.stderr)
    raise SystemExit(130)

raise SystemExit(main())
