"""Steady-state CPU and peak RSS of one monitor process, started plain or in a tmux terminal.

A measurement starts the program, waits out its start-up (at least ``WARMUP_MIN_S`` and until
its CPU use has settled), then reads its CPU time at the start and end of ``repeats``
consecutive windows of ``window_s`` seconds: one figure per window, so the spread shows. Peak
RSS is the process's VmHWM at the end. Programs that draw a screen run in their own tmux
server (a real terminal), whose CPU time is reported beside theirs as the terminal's cost.
Where the environment names a FAKE_NVML_CALL_LOG, the fake NVML library's call counts at the
first and last mark give the program's NVML calls per second, by function.
"""
from __future__ import annotations

import os
import shlex
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from typing import Mapping, Optional, Sequence

from bench import procfs

# Start-up (imports, NVML init, first reads) is excluded: wait at least this long (s)...
WARMUP_MIN_S = 3.0
# ...and until one second of the program's run costs less than this share of one core (%)
# (start-up runs at a full core; every monitor here settles far below this)...
WARMUP_SETTLED_PCT = 30.0
# ...but no longer than this (s); a program that never settles is measured anyway, and noted.
WARMUP_MAX_S = 15.0
# The terminal a screen program draws in (columns x rows): 8 GPUs fit.
TERM_COLS, TERM_ROWS = 160, 50
# A stopped program that has not exited after this long (s) is killed.
STOP_GRACE_S = 3.0
# Nanosecond (schedstat) and tick (stat) CPU times over the whole span agree within this many
# clock ticks plus this share; beyond it a thread ended mid-span and the tick figure is used.
AGREE_TICKS, AGREE_SHARE = 3, 0.05


@dataclass(frozen=True)
class Subject:
    """One program in one setting."""
    name: str                   # "gpumon log", "nvitop screen", ...
    setting: str                # "1 s", "0.1 s", "default (2 s)", ...
    gpus: int
    argv: tuple[str, ...]
    tmux: bool = False
    ours: bool = False          # gpumon (True) or a peer
    costs: str = ""             # FAKE_NVML_CALL_US of this run ("": free calls)


@dataclass
class Measurement:
    subject: Subject
    cpu_pct: list[float] = field(default_factory=list)     # % of one core, per window
    term_pct: list[float] = field(default_factory=list)    # the tmux server's, per window
    rss_mib: Optional[float] = None
    warmup_s: float = 0.0
    note: str = ""
    error: Optional[str] = None
    calls: dict[str, float] = field(default_factory=dict)   # NVML calls/s by function

    @property
    def calls_per_s(self) -> Optional[float]:
        """Every NVML call a second (size queries, "name(NULL)", are in their function's)."""
        if not self.calls:
            return None
        return sum(v for k, v in self.calls.items() if not k.endswith("(NULL)"))

    @property
    def mean(self) -> Optional[float]:
        return sum(self.cpu_pct) / len(self.cpu_pct) if self.cpu_pct else None

    @property
    def spread(self) -> Optional[tuple[float, float]]:
        return (min(self.cpu_pct), max(self.cpu_pct)) if self.cpu_pct else None

    @property
    def term_mean(self) -> Optional[float]:
        return sum(self.term_pct) / len(self.term_pct) if self.term_pct else None


class _Running:
    """A started program: its PID (the pane's process under tmux) and how to stop it."""

    def __init__(self, subject: Subject, env: Mapping[str, str], cwd: str, tag: str):
        self.subject = subject
        self.err = tempfile.NamedTemporaryFile(prefix="gpumon-bench-", suffix=".err",
                                               delete=False)
        self.err.close()
        self.popen: Optional[subprocess.Popen] = None
        self.socket: Optional[str] = None
        self.server_pid: Optional[int] = None
        if subject.tmux:
            self.socket = f"gpumon-bench-{os.getpid()}-{tag}"
            # `exec` so the pane's process is the program itself, not a shell around it.
            cmd = f"exec {shlex.join(subject.argv)} 2>{shlex.quote(self.err.name)}"
            self._tmux("new-session", "-d", "-s", "bench", "-x", str(TERM_COLS),
                       "-y", str(TERM_ROWS), cmd, env=env, cwd=cwd)
            self.pid = int(self._tmux("list-panes", "-t", "bench", "-F", "#{pane_pid}"))
            self.server_pid = int(self._tmux("display-message", "-p", "#{pid}"))
        else:
            with open(self.err.name, "wb") as err:
                self.popen = subprocess.Popen(subject.argv, env=dict(env), cwd=cwd,
                                              stdin=subprocess.DEVNULL,
                                              stdout=subprocess.DEVNULL, stderr=err,
                                              start_new_session=True)
            self.pid = self.popen.pid

    def _tmux(self, *args: str, env=None, cwd=None) -> str:
        out = subprocess.run(["tmux", "-L", self.socket, "-f", "/dev/null", *args], env=env,
                             cwd=cwd, capture_output=True, text=True, timeout=10)
        if out.returncode != 0:
            raise RuntimeError(f"tmux {args[0]}: {out.stderr.strip() or out.returncode}")
        return out.stdout.strip()

    def alive(self) -> bool:
        if self.popen is not None:
            return self.popen.poll() is None
        return procfs.alive(self.pid)

    def stderr_tail(self, chars: int = 300) -> str:
        try:
            with open(self.err.name, errors="replace") as f:
                text = f.read()
        except OSError:
            return ""
        return " ".join(text.split())[-chars:]

    def stop(self) -> None:
        if self.popen is not None:
            if self.popen.poll() is None:
                self.popen.send_signal(signal.SIGTERM)
                try:
                    self.popen.wait(STOP_GRACE_S)
                except subprocess.TimeoutExpired:
                    os.killpg(self.popen.pid, signal.SIGKILL)
                    self.popen.wait()
        elif self.socket is not None:
            try:
                os.kill(self.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            deadline = time.monotonic() + STOP_GRACE_S
            while procfs.alive(self.pid) and time.monotonic() < deadline:
                time.sleep(0.05)
            subprocess.run(["tmux", "-L", self.socket, "kill-server"], capture_output=True,
                           timeout=10)
            if procfs.alive(self.pid):
                try:
                    os.kill(self.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        try:
            os.unlink(self.err.name)
        except OSError:
            pass


def _cpu_s(pid: int, exact: bool) -> float:
    t = procfs.tree_cpu(pid)
    return t.exact_s if exact and t.exact_s is not None else t.ticks_s


def _warm_up(run: _Running) -> float:
    start = time.monotonic()
    time.sleep(WARMUP_MIN_S)
    prev_t, prev_c = time.monotonic(), _cpu_s(run.pid, True)
    while time.monotonic() - start < WARMUP_MAX_S:
        time.sleep(1.0)
        t, c = time.monotonic(), _cpu_s(run.pid, True)
        if 100.0 * (c - prev_c) / (t - prev_t) < WARMUP_SETTLED_PCT:
            break
        prev_t, prev_c = t, c
    return time.monotonic() - start


def measure(subject: Subject, env: Mapping[str, str], cwd: str, *, window_s: float,
            repeats: int, tag: str = "0") -> Measurement:
    """Start ``subject``, measure ``repeats`` windows of ``window_s`` s after warm-up, stop it."""
    m = Measurement(subject)
    try:
        run = _Running(subject, env, cwd, tag)
    except (OSError, RuntimeError, ValueError) as exc:
        m.error = f"could not start: {exc}"
        return m
    try:
        m.warmup_s = _warm_up(run)
        if m.warmup_s >= WARMUP_MAX_S:
            m.note = f"still busy after {WARMUP_MAX_S:g} s of warm-up"
        if not run.alive():
            m.error = f"exited during warm-up: {run.stderr_tail() or 'no message'}"
            return m
        log = env.get("FAKE_NVML_CALL_LOG")
        first_calls = call_counts(log) if log else None
        marks = [(time.monotonic(), procfs.tree_cpu(run.pid),
                  procfs.tree_cpu(run.server_pid, tree=False) if run.server_pid else None)]
        for k in range(1, repeats + 1):
            time.sleep(max(0.0, marks[0][0] + k * window_s - time.monotonic()))
            marks.append((time.monotonic(), procfs.tree_cpu(run.pid),
                          procfs.tree_cpu(run.server_pid, tree=False) if run.server_pid else None))
        m.rss_mib = procfs.peak_rss_mib(run.pid)
        if log:
            m.calls = call_rates(first_calls, call_counts(log))
        if not run.alive():
            m.error = f"exited while measured: {run.stderr_tail() or 'no message'}"
            return m
        m.cpu_pct, used_ticks = _rates([(t, c) for t, c, _ in marks])
        if used_ticks:
            m.note = (m.note + "; " if m.note else "") + "a thread ended mid-span: tick counts used"
        if run.server_pid:
            m.term_pct, _ = _rates([(t, s) for t, _, s in marks])
    except ProcessLookupError:
        m.error = f"exited while measured: {run.stderr_tail() or 'no message'}"
    finally:
        run.stop()
    return m


def call_counts(path: str) -> Optional[tuple[float, dict[str, int]]]:
    """(CLOCK_MONOTONIC s, {function: calls}) from the fake library's call log; None when
    there is none yet. The library rewrites it whole (a rename) at most once a second."""
    try:
        with open(path) as f:
            lines = f.read().splitlines()
        when = float(lines[0].split()[-2])
        return when, {k: int(v) for k, v in (ln.split() for ln in lines[1:] if ln.strip())}
    except (OSError, ValueError, IndexError):
        return None


def call_rates(first, last) -> dict[str, float]:
    """Calls per second by function between two call_counts() readings ({} without two)."""
    if not first or not last or last[0] <= first[0]:
        return {}
    dt = last[0] - first[0]
    out = {k: (n - first[1].get(k, 0)) / dt for k, n in last[1].items()}
    return {k: v for k, v in sorted(out.items(), key=lambda kv: -kv[1]) if v > 0}


def _rates(marks: Sequence[tuple[float, procfs.CpuTimes]]) -> tuple[list[float], bool]:
    """Per-window % of one core; (rates, True) where the tick counts had to be used."""
    first, last = marks[0][1], marks[-1][1]
    exact = first.exact_s is not None and last.exact_s is not None
    if exact:
        d_exact = last.exact_s - first.exact_s
        d_ticks = last.ticks_s - first.ticks_s
        exact = abs(d_exact - d_ticks) <= AGREE_TICKS / procfs.CLK_TCK + AGREE_SHARE * d_ticks
    out = []
    for (t0, c0), (t1, c1) in zip(marks, marks[1:]):
        used = (c1.exact_s - c0.exact_s) if exact else (c1.ticks_s - c0.ticks_s)
        out.append(100.0 * used / (t1 - t0))
    return out, not exact and first.exact_s is not None


def run_profiled(subject: Subject, env: Mapping[str, str], cwd: str, seconds: float,
                 tag: str = "prof"):
    """Start ``subject``, wait out its start-up, record it with py-spy for ``seconds``.

    Returns (collapsed stacks, CPU % of one core over the recorded span).
    """
    from bench import profile
    run = _Running(subject, env, cwd, tag)
    try:
        _warm_up(run)
        t0, c0 = time.monotonic(), _cpu_s(run.pid, True)
        stacks = profile.record(run.pid, seconds)
        cpu = 100.0 * (_cpu_s(run.pid, True) - c0) / (time.monotonic() - t0)
        return stacks, cpu
    finally:
        run.stop()
