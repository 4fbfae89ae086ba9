"""`make bench`'s call-cost profile: gpumon beside gpustat and nvitop when NVML calls cost time.

The fake NVML library's calls are free by default, which hides what a real driver charges per
call (a lock, an ioctl). Here every call spins as the profile says (FAKE_NVML_CALL_US), the
fake counts each program's calls by function (FAKE_NVML_CALL_LOG), and gpumon's CPU is compared
with its peers' measured in the same run, one after the other: `gpumon log` at 1 s and 0.1 s
with `gpustat -i` at the same interval, `gpumon watch` with nvitop's screen at its default.
The targets: `gpumon log` at 1 s and `gpumon watch` each at most MAX_RATIO of their peer's CPU
(the 0.1 s pair is measured and shown, not a target: gpustat does not keep that interval).
"""
from __future__ import annotations

import os
import tempfile
from typing import Callable, Mapping, Optional, Sequence

from bench import overhead, report
from bench.overhead import Measurement, Subject

# The profile (µs per call; the named metric groups cost that much per call instead):
# GetSamples, the process list and a GPM sample (nvmlGpmSampleGet, which reads the GPU's
# counters) 300, memory 12, fan 140, every other call 5 (nvmlGpmMetricsGet among them: it
# computes from two sample buffers in the library). No GPM cost is published: 300 µs, the
# costliest class here, is a guess on the dear side; `make gpu-check` measures the real read
# (its row "GPM GPU i: cost of one read" says whether it is dearer than this profile's).
PROFILE = "5,samples=300,processes=300,gpm=300,memory=12,fan=140"
# gpumon's CPU over its peer's, at most.
MAX_RATIO = 0.5
# `gpumon log` at 1 s once more with every GPU's GPM unsupported: what GPM costs is the
# difference.
NO_GPM = "1 s, GPM hidden"
# (gpumon, setting) over (peer, setting): the pairs the targets compare (and one shown).
PAIRS = ((("gpumon log", "1 s"), ("gpustat", "-i 1")),
         (("gpumon log", "0.1 s"), ("gpustat", "-i 0.1")),
         (("gpumon watch", "1 s"), ("nvitop screen", "default (2 s)")),
         (("gpumon log", NO_GPM), ("gpustat", "-i 1")))
# The pairs judged against MAX_RATIO.
TARGET_PAIRS = (PAIRS[0], PAIRS[2])
GPUS = 8
# Functions shown in the calls table: the busiest of every program, at most this many.
TOP_CALLS = 12


def subjects(py: str, build_dir: str, costs: str = PROFILE) -> list[Subject]:
    """Peers and gpumon in turns (a drift of the machine's load hits both of a pair)."""
    log = os.path.join(build_dir, "callcost-log.csv")

    def gpumon_log(iv: str, setting: str = "") -> Subject:
        return Subject("gpumon log", setting or f"{iv} s", GPUS, (py, "-m", "gpumon", "log",
                       "-q", "--force", "--interval", iv, "-o", log), ours=True, costs=costs)

    return [
        Subject("gpustat", "-i 1", GPUS, (py, "-m", "gpustat", "-i", "1"), tmux=True,
                costs=costs),
        gpumon_log("1"),
        gpumon_log("1", NO_GPM),
        Subject("gpustat", "-i 0.1", GPUS, (py, "-m", "gpustat", "-i", "0.1"), tmux=True,
                costs=costs),
        gpumon_log("0.1"),
        Subject("nvitop screen", "default (2 s)", GPUS, (py, "-m", "nvitop"), tmux=True,
                costs=costs),
        Subject("gpumon watch", "1 s", GPUS, (py, "-m", "gpumon", "watch"), tmux=True,
                ours=True, costs=costs),
    ]


def environment(base: Mapping[str, str], costs: str, call_log: str,
                hide_gpm: bool = False) -> dict[str, str]:
    env = dict(base)
    env.update(FAKE_NVML_CALL_US=costs, FAKE_NVML_CALL_LOG=call_log)
    if hide_gpm:
        env["FAKE_NVML_UNSUPPORTED"] = ",".join(
            filter(None, [env.get("FAKE_NVML_UNSUPPORTED"), "gpm"]))
    return env


def run(todo: Sequence[Subject], env_for: Callable[[int], Mapping[str, str]], cwd: str, *,
        window_s: float, repeats: int, log: Callable[[str], None] = print) -> list[Measurement]:
    """Measure each subject with its call costs and its NVML calls counted."""
    out = []
    for i, s in enumerate(todo):
        fd, calls = tempfile.mkstemp(prefix="gpumon-bench-calls-")
        os.close(fd)
        os.unlink(calls)                  # the library creates it at its first call
        try:
            env = environment(env_for(s.gpus), s.costs, calls, s.setting == NO_GPM)
            m = overhead.measure(s, env, cwd,
                                 window_s=window_s, repeats=repeats, tag=f"cc{i}")
        finally:
            if os.path.exists(calls):
                os.unlink(calls)
        out.append(m)
        total = m.calls_per_s
        log(f"  {s.name:24} {s.setting:18} {s.gpus} GPU  cpu {report.cpu_cell(m):24} "
            f"NVML {'n/a' if total is None else f'{total:.0f}'} calls/s (call costs) "
            f"{m.error or m.note}")
    return out


def _find(ms: Sequence[Measurement], name: str, setting: str) -> Optional[Measurement]:
    return next((m for m in ms if (m.subject.name, m.subject.setting) == (name, setting)
                 and not m.error), None)


def ratios(ms: Sequence[Measurement]) -> list[report.Ratio]:
    out = []
    for ours, peer in PAIRS:
        a, b = _find(ms, *ours), _find(ms, *peer)
        if a and b:
            out.append(report.Ratio(a, b))
    return out


def targets(ms: Sequence[Measurement]) -> list[report.Target]:
    out = []
    for (on, os_), (pn, ps) in TARGET_PAIRS:
        a, b = _find(ms, on, os_), _find(ms, pn, ps)
        v = report.Ratio(a, b).value() if a and b else None
        out.append(report.Target(
            f"`{on}` {os_} vs `{pn} {ps}`, {GPUS} GPUs, with call costs",
            f"<= {MAX_RATIO:g}x", "n/a" if v is None else
            f"{v:.2f}x ({report.pct(a.mean)}% vs {report.pct(b.mean)}%)",
            None if v is None else v <= MAX_RATIO))
    return out


def calls_table(ms: Sequence[Measurement]) -> list[str]:
    """NVML calls a second by function (rows) and program (columns), 8 GPUs together: the
    busiest TOP_CALLS functions, and the GPM calls always."""
    ms = [m for m in ms if m.calls]
    if not ms:
        return []
    busiest: dict[str, float] = {}
    for m in ms:
        for k, v in m.calls.items():
            busiest[k] = max(busiest.get(k, 0.0), v)
    names = sorted(busiest, key=lambda k: -busiest[k])[:TOP_CALLS]
    names += sorted(k for k in busiest if k.startswith("nvmlGpm") and k not in names)
    head = ["NVML function"] + [f"{m.subject.name} {m.subject.setting}" for m in ms]
    rows = [[f"`{k}`"] + [_rate(m.calls.get(k)) for m in ms] for k in names]
    rows.append(["**all calls**"] + [_rate(m.calls_per_s) for m in ms])
    return report.table(head, rows)


def _rate(v: Optional[float]) -> str:
    return "" if not v else (f"{v:.1f}" if v < 10 else f"{v:.0f}")


def report_lines(ms: Sequence[Measurement], costs: str, window_s: float,
                 repeats: int) -> list[str]:
    lines = [f"Every NVML call of the fake library spins `FAKE_NVML_CALL_US={costs}` (µs; the "
             "named metric groups cost that much per call instead), as a driver's lock and "
             f"ioctl would; {GPUS} GPUs, the same job; {repeats} windows of {window_s:g} s "
             "each. NVML calls per second are the fake's per-function counts "
             "(`FAKE_NVML_CALL_LOG`) over the measured windows; `name(NULL)` counts the size "
             "queries among them. GPM's cost (`gpm`) is a guess: no figure is published (`make "
             "gpu-check` measures it on a real GPU); `gpumon log` at "
             f"\"{NO_GPM}\" runs with every GPU's GPM unsupported, so the difference to "
             "`gpumon log` 1 s is what GPM costs.", ""]
    lines += report.overhead_table(ms)
    rs = ratios(ms)
    if rs:
        lines += ["", f"gpumon vs peers with call costs (targets <= {MAX_RATIO:g}x):", ""]
        lines += report.ratio_table(rs)
    table = calls_table(ms)
    if table:
        lines += ["", "NVML calls per second (8 GPUs together):", ""] + table
    return lines
