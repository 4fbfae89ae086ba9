"""Where a monitor's CPU time goes: py-spy samples of a running process, summarised.

``record(pid, seconds)`` attaches py-spy to a process already past its start-up and returns
its collapsed stacks; ``summarize`` turns them into shares per part of gpumon (NVML, host
sampling, detector, CSV, dashboard) and per function (inclusive and self).
"""
from __future__ import annotations

import linecache
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections import Counter
from dataclasses import dataclass
from typing import Optional

# py-spy's sampling rate (Hz): a monitor at 1.5% of a core gives ~300 samples in 20 s.
RATE_HZ = 1000

# Parts of the program a stack is charged to: the first pattern found in the stack, in order.
PARTS = (("detector (gpumon/detect)", "gpumon/detect/"),
         ("host sampling (gpumon/host.py, psutil)", "gpumon/host.py"),
         ("NVML (gpumon/nvml.py, pynvml)", "gpumon/nvml.py"),
         ("CSV (gpumon/csvlog.py)", "gpumon/csvlog.py"),
         ("dashboard (gpumon/ui, rich)", "gpumon/ui/"),
         ("dashboard (gpumon/ui, rich)", "/rich/"),
         ("monitor loop (gpumon/monitor.py, node.py)", "gpumon/monitor.py"))


def py_spy() -> Optional[str]:
    here = os.path.join(os.path.dirname(sys.executable), "py-spy")
    return here if os.path.exists(here) else shutil.which("py-spy")


def record(pid: int, seconds: float, rate: int = RATE_HZ) -> list[tuple[list[str], int]]:
    """Collapsed stacks (root first) with sample counts, from py-spy attached to ``pid``."""
    exe = py_spy()
    if exe is None:
        raise RuntimeError("py-spy is not installed (pip install py-spy)")
    with tempfile.NamedTemporaryFile(suffix=".txt") as out:
        p = subprocess.run([exe, "record", "--pid", str(pid), "--duration", str(int(seconds)),
                            "--rate", str(rate), "--nonblocking", "--format", "raw",
                            "--output", out.name], capture_output=True, text=True,
                           timeout=seconds + 30)
        if p.returncode != 0:
            raise RuntimeError(f"py-spy failed: {' '.join(p.stderr.split())[-300:]}")
        with open(out.name) as f:
            return parse_collapsed(f.read())


def parse_collapsed(text: str) -> list[tuple[list[str], int]]:
    stacks = []
    for line in text.splitlines():
        line = line.strip()
        if not line:
            continue
        stack, _, count = line.rpartition(" ")
        try:
            stacks.append((stack.split(";"), int(count)))
        except ValueError:
            continue
    return stacks


# A leaf frame on one of these calls is a thread blocked in a wait that py-spy caught as it woke
# (or, sampling without pausing, mis-read as active): not CPU time, so left out.
_WAIT_CALL = re.compile(r"\b(select|poll|epoll|wait|sleep|acquire|accept|recv|read_events)\(")


def waiting(frame: str) -> bool:
    """Whether a leaf frame 'name (path:line)' sits on a blocking call, by its source line."""
    where = frame.rpartition(" (")[2].rstrip(")")
    path, _, line = where.rpartition(":")
    if not line.isdigit():
        return False
    return bool(_WAIT_CALL.search(linecache.getline(path, int(line))))


def _func(frame: str) -> str:
    """'name (path/to/file.py:123)' -> 'name (file.py)' with the package dir kept short."""
    name, _, where = frame.partition(" (")
    path = where.rstrip(")").rsplit(":", 1)[0]
    for marker in ("site-packages/", "/work/main/", "lib/python3"):
        if marker in path:
            path = path.split(marker, 1)[1]
            break
    return f"{name} ({path})"


@dataclass
class Summary:
    samples: int
    waiting: int                          # samples left out: blocked in a wait
    parts: list[tuple[str, float]]        # (part, share of samples)
    inclusive: list[tuple[str, float]]    # (function, share of samples it is on the stack)
    self_: list[tuple[str, float]]        # (function, share of samples it is the leaf)


def summarize(stacks: list[tuple[list[str], int]], top: int = 15) -> Summary:
    waits = sum(c for frames, c in stacks if frames and waiting(frames[-1]))
    stacks = [(f, c) for f, c in stacks if not (f and waiting(f[-1]))]
    total = sum(c for _, c in stacks) or 1
    parts: Counter = Counter()
    incl: Counter = Counter()
    leaf: Counter = Counter()
    for frames, count in stacks:
        joined = ";".join(frames)
        part = next((name for name, pat in PARTS if pat in joined), "other (interpreter, "
                    "threads, start-up)")
        parts[part] += count
        for f in {_func(fr) for fr in frames}:
            incl[f] += count
        if frames:
            leaf[_func(frames[-1])] += count
    share = lambda c: [(k, v / total) for k, v in c.most_common(top)]  # noqa: E731
    return Summary(total, waits, share(parts), share(incl), share(leaf))


def markdown(s: Summary, cpu_pct: Optional[float] = None) -> list[str]:
    """The summary as Markdown; with the process's CPU %, each share also as % of a core."""
    def cell(f: float) -> str:
        return f"{100 * f:.0f}%" + (f" ({cpu_pct * f:.2f})" if cpu_pct is not None else "")
    unit = " (% of one core)" if cpu_pct is not None else ""
    out = [f"{s.samples} samples ({s.waiting} more in blocking waits left out).", "", f"| part | share{unit} |", "|---|---|"]
    out += [f"| {k} | {cell(v)} |" for k, v in s.parts]
    out += ["", f"| function (on the stack) | share{unit} |", "|---|---|"]
    out += [f"| `{k}` | {cell(v)} |" for k, v in s.inclusive]
    out += ["", f"| function (self time) | share{unit} |", "|---|---|"]
    out += [f"| `{k}` | {cell(v)} |" for k, v in s.self_]
    return out
