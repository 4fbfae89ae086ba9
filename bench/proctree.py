"""A stand-in training job for the benchmark: real processes the fake GPUs report as theirs.

``ProcTree(mains=8, workers=7)`` starts 8 "main" Python processes, each of which forks 7
"loader workers" (as a PyTorch DataLoader does), 64 processes in all. They sleep almost all
the time and wake once a second for a moment of work, so the host sampler sees live
processes with small, non-zero CPU times: reading them costs what it would on a real node.
``fake_pids(gpus)`` is the FAKE_NVML_PIDS value that makes GPU i report main i.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from typing import Optional

# How long a process of the stand-in job sleeps between moments of work (s), and how much
# work it does then (loop iterations, ~0.1 ms): enough that its CPU time moves, too little
# to disturb a measurement on a 2-core machine (64 x 0.1 ms/s = 0.6% of one core).
WAKE_EVERY_S = 1.0
WORK_LOOPS = 2000
# A tree that has not reported its workers after this long failed to start.
START_TIMEOUT_S = 20.0

_MAIN = r"""
import os, signal, sys, time
workers, wake, loops = int(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3])
signal.signal(signal.SIGCHLD, signal.SIG_IGN)   # a worker that ends is reaped, as by DataLoader

def idle_loop():
    while True:
        time.sleep(wake)
        sum(range(loops))

kids = []
for _ in range(workers):
    pid = os.fork()
    if pid == 0:
        try:
            idle_loop()
        finally:
            os._exit(0)
    kids.append(pid)
print(" ".join(str(k) for k in kids), flush=True)
idle_loop()
"""


class ProcTree:
    """``mains`` processes with ``workers`` forked children each; ``close()`` ends them all."""

    def __init__(self, mains: int = 8, workers: int = 7, python: str = sys.executable):
        if mains < 1 or workers < 0:
            raise ValueError("need at least one main and no negative worker count")
        self.procs: list[subprocess.Popen] = []
        self.workers: dict[int, tuple[int, ...]] = {}
        try:
            for _ in range(mains):
                # Each main leads its own process group, so close() ends it with its workers.
                p = subprocess.Popen([python, "-c", _MAIN, str(workers), str(WAKE_EVERY_S),
                                      str(WORK_LOOPS)], stdout=subprocess.PIPE,
                                     stdin=subprocess.DEVNULL, start_new_session=True)
                self.procs.append(p)
            deadline = time.monotonic() + START_TIMEOUT_S
            for p in self.procs:
                line = self._readline(p, deadline)
                self.workers[p.pid] = tuple(int(x) for x in line.split())
                if len(self.workers[p.pid]) != workers:
                    raise RuntimeError(f"stand-in job main {p.pid} started "
                                       f"{len(self.workers[p.pid])} of {workers} workers")
        except BaseException:
            self.close()
            raise

    @staticmethod
    def _readline(p: subprocess.Popen, deadline: float) -> str:
        import selectors
        sel = selectors.DefaultSelector()
        sel.register(p.stdout, selectors.EVENT_READ)
        try:
            if not sel.select(max(0.0, deadline - time.monotonic())):
                raise RuntimeError(f"stand-in job main {p.pid} did not start in "
                                   f"{START_TIMEOUT_S:g} s")
        finally:
            sel.close()
        return p.stdout.readline().decode()

    @property
    def mains(self) -> list[int]:
        return [p.pid for p in self.procs]

    @property
    def all_pids(self) -> list[int]:
        return [pid for m in self.mains for pid in (m,) + self.workers.get(m, ())]

    def fake_pids(self, gpus: Optional[int] = None) -> str:
        """FAKE_NVML_PIDS for ``gpus`` GPUs (default: one per main): GPU i runs main i."""
        n = len(self.mains) if gpus is None else min(gpus, len(self.mains))
        return ";".join(f"{i}:{self.mains[i]}" for i in range(n))

    def close(self) -> None:
        for p in self.procs:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        for p in self.procs:
            p.wait()
            if p.stdout:
                p.stdout.close()
        self.procs = []

    def __enter__(self) -> "ProcTree":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
