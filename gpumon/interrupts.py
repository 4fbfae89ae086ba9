"""Ctrl-C while Python imports gpumon's modules: held back until the imports are done.

A KeyboardInterrupt raised at a random point of an import either ends in an import traceback
or is lost (CPython drops exceptions in a few internal lookups, and the command then runs on as
if never interrupted). Inside ``held_interrupts()`` SIGINT is only noted; it is raised as
KeyboardInterrupt when the block ends, where the command handles it. Imports only: a slow
driver call must stay interruptible.

Known limit: a Ctrl-C in the first tenths of a second after the imports, while a command
sets up, is still lost now and then (seen once in a few dozen early signals on a
loaded 2-core machine); a second Ctrl-C ends gpumon cleanly.
"""
from __future__ import annotations

import signal
import threading
from contextlib import contextmanager


@contextmanager
def held_interrupts():
    if (threading.current_thread() is not threading.main_thread()
            or signal.getsignal(signal.SIGINT) is not signal.default_int_handler):
        yield          # (SIGINT ignored, as in a background job, or handled by someone else)
        return
    noted: list[int] = []
    signal.signal(signal.SIGINT, lambda signum, frame: noted.append(signum))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    if noted:
        raise KeyboardInterrupt
