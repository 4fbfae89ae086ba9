"""Peak RSS of `gpumon log`, `watch`, `export` and `stream` over a simulated hour (8 GPUs),
faster than real time, and their RSS after 10 minutes of steady state.

Each command runs in a child process as a user runs it (`gpumon log --sim busy:8 --interval
0.1 --duration 3600 ...`, `gpumon watch` on a 160x50 pseudo-terminal, `gpumon export` on a free
port of 127.0.0.1, `gpumon stream` (the dool column's child) into /dev/null) on simulated GPUs,
whose
clock moves one interval per poll (``SimSource(step_s=...)``). Only the Monitor's waits are
taken out: its clock is virtual and a wait moves it on instead of sleeping, so the hour at
0.1 s (36,000 polls) takes about a minute. Everything else (the command's wiring, detector,
CSV sink, dashboard, screen) is the command's own code. The child reads its VmRSS every
simulated minute and its VmHWM (the peak) at the end. A run as long as the history's limit
(10 minutes: ``SETTLED_S``) or longer shows every bounded store full.

    python -m bench.memory [--hours 1] [--commands log,watch,export,stream] [--json]

``run(**kw) -> list[dict]`` is the entry point for bench/run.py; ``format_result`` the text.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
import types
from typing import Optional, Sequence

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# (command, --sim scenario, --interval): what is measured, 8 GPUs each.
CASES = (("log", "busy:8", 0.1), ("log", "busy:8", 1.0),
         ("watch", "demo:8", 0.1), ("watch", "demo:8", 1.0),
         ("export", "demo:8", 0.1), ("stream", "demo:8", 0.1), ("stream", "demo:8", 1.0))
# Arguments of each command beyond the source's and the run's.
ARGS = {"log": ["-q", "--force", "-o", "{tmp}/run.csv"], "export": ["-q", "--port", "0"],
        "stream": [], "watch": []}
# The target for any duration, MiB.
RSS_MAX_MIB = 80.0
# RSS is read every this many simulated seconds.
SAMPLE_EVERY_S = 60.0
# Growth is counted from this far into the run (start-up and the detector's windows filling,
# the screen's 10-minute history full): the "RSS after 10 minutes of steady state".
SETTLED_S = 600.0
# The pseudo-terminal `watch` draws on (bench.overhead's size).
TERM_COLS, TERM_ROWS = 160, 50


def status_mib(key: str) -> Optional[float]:
    """A ``kB`` line of this process's /proc status, in MiB."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1]) / 1024.0
    except (OSError, ValueError, IndexError):
        pass
    return None


# -- the child: the command on a virtual clock -------------------------------------------------
class _VirtualClock:
    """The Monitor's monotonic clock; ``advance`` also reads RSS at each simulated minute."""

    def __init__(self) -> None:
        self.start = self.now = time.monotonic()
        self.rss: list[tuple[float, float]] = []
        self._next = 0.0

    def monotonic(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += max(0.0, seconds)
        elapsed = self.now - self.start
        if elapsed >= self._next:
            self.rss.append((round(elapsed, 1), status_mib("VmRSS") or 0.0))
            self._next += SAMPLE_EVERY_S


def _unpace_monitor(clock: _VirtualClock) -> None:
    """gpumon.monitor's clock, stop event and the commands' wait between polls
    (interrupts.wait), made virtual: a wait returns at once."""
    import gpumon.interrupts as gi
    import gpumon.monitor as gm

    def wait(timeout: float) -> bool:
        clock.advance(timeout)
        return bool(gi.stop_signal())

    class Event(threading.Event):
        def wait(self, timeout=None):
            if timeout is None:
                return super().wait()
            clock.advance(timeout)
            return self.is_set()

    gi.wait = wait
    gm.time = types.SimpleNamespace(monotonic=clock.monotonic, time=time.time)
    gm.threading = types.SimpleNamespace(Event=Event, Lock=threading.Lock,
                                         Thread=threading.Thread)


def _on_a_terminal() -> None:
    """Standard output becomes a 160x50 pseudo-terminal whose output is read and dropped."""
    import fcntl
    import pty
    import struct
    import termios
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", TERM_ROWS, TERM_COLS, 0, 0))

    def drain():
        try:
            while os.read(master, 65536):
                pass
        except OSError:
            pass
    threading.Thread(target=drain, daemon=True).start()
    sys.stdout.flush()
    os.dup2(slave, 1)
    os.environ.update(TERM="xterm-256color", COLUMNS=str(TERM_COLS), LINES=str(TERM_ROWS))


def child(command: str, scenario: str, interval: float, seconds: float, result: str) -> int:
    clock = _VirtualClock()
    _unpace_monitor(clock)
    tmp = tempfile.mkdtemp(prefix="gpumon-mem-")
    argv = [command, "--sim", scenario, "--interval", f"{interval:g}",
            "--duration", f"{seconds:g}"]
    argv += [a.format(tmp=tmp) for a in ARGS[command]]
    if command == "watch":
        _on_a_terminal()
    from gpumon.cli import main
    t0 = time.monotonic()
    code = main(argv)
    # (The last minute's sample may fall before the end: one more where the run ended.)
    clock.rss.append((round(clock.now - clock.start, 1), status_mib("VmRSS") or 0.0))
    out = {"command": command, "scenario": scenario, "interval": interval, "seconds": seconds,
           "exit_code": code, "wall_s": round(time.monotonic() - t0, 1),
           "peak_mib": status_mib("VmHWM"), "rss": clock.rss}
    with open(result, "w") as f:
        json.dump(out, f)
    return 0


# -- the parent --------------------------------------------------------------------------------
def measure(command: str, scenario: str, interval: float, seconds: float,
            python: Optional[str] = None, timeout_s: float = 1200.0) -> dict:
    """One command over ``seconds`` of simulated time: peak, RSS per minute, growth."""
    with tempfile.TemporaryDirectory(prefix="gpumon-mem-") as tmp:
        result = os.path.join(tmp, "result.json")
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(
            filter(None, [ROOT, os.environ.get("PYTHONPATH")])))
        env.pop("NO_COLOR", None)
        p = subprocess.run([python or sys.executable, "-m", "bench.memory", "--child", command,
                            scenario, str(interval), str(seconds), result],
                           cwd=ROOT, env=env, stdin=subprocess.DEVNULL,
                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                           timeout=timeout_s)
        if p.returncode != 0 or not os.path.exists(result):
            tail = " ".join(p.stderr.split())[-300:]
            return {"command": command, "scenario": scenario, "interval": interval,
                    "seconds": seconds, "error": tail or f"exit {p.returncode}"}
        with open(result) as f:
            out = json.load(f)
    settled = min(SETTLED_S, seconds / 5)
    out["growth_mib"] = growth(out["rss"], settled)
    out["settled_mib"] = next((mib for t, mib in out["rss"] if t >= settled), None)
    return out


def growth(rss: Sequence[Sequence[float]], settled_s: float) -> Optional[float]:
    """RSS at the end minus RSS once settled (MiB); None with too few readings."""
    after = [mib for t, mib in rss if t >= settled_s]
    return round(after[-1] - after[0], 1) if len(after) >= 2 else None


def run(hours: float = 1.0, cases=CASES, python: Optional[str] = None, log=None) -> list[dict]:
    out = []
    for command, scenario, interval in cases:
        r = measure(command, scenario, interval, hours * 3600.0, python=python)
        if log is not None:
            log(f"  memory: {format_row(r)}")
        out.append(r)
    return out


def format_row(r: dict) -> str:
    what = f"gpumon {r['command']} --sim {r['scenario']} --interval {r['interval']:g}"
    if r.get("error"):
        return f"{what}: failed ({r['error']})"
    return (f"{what}: peak {r['peak_mib']:.1f} MiB, {_mib(r.get('settled_mib'))} MiB at minute "
            f"{min(SETTLED_S, r['seconds'] / 5) / 60:g}, {r['growth_mib']:+.1f} MiB from then "
            f"to the end ({r['wall_s']:.0f} s)")


def _shortened(seconds: float) -> str:
    """What a run shorter than the issue's hour says about itself."""
    if seconds >= 3600.0:
        return ""
    if seconds >= SETTLED_S:
        return (f" A shortened run ({seconds / 60:g} min): past the 10-minute limit of every "
                "history, so what is bounded is full.")
    return (f" A shortened run ({seconds / 60:g} min): shorter than the 10-minute history "
            "limit, so the figures may still grow.")


def _mib(v: Optional[float]) -> str:
    return "-" if v is None else f"{v:.1f}"


def worst(rows: Sequence[dict]) -> Optional[dict]:
    ok = [r for r in rows if not r.get("error")]
    return max(ok, key=lambda r: r["peak_mib"]) if ok else None


def format_result(rows: Sequence[dict]) -> list[str]:
    """Markdown: the method in a sentence, then one row per command and interval."""
    if not rows:
        return ["Not run."]
    hours = rows[0]["seconds"] / 3600.0
    settled = min(SETTLED_S, rows[0]["seconds"] / 5) / 60
    out = [f"Each command over a simulated {hours:g} h at 8 GPUs, faster than real time (the "
           "simulator's clock moves one interval per poll; the Monitor does not sleep), in a "
           "child process: `log` to a CSV file, `watch` on a "
           f"{TERM_COLS}x{TERM_ROWS} pseudo-terminal, `export` on a free local port, `stream` "
           "into /dev/null. Peak is VmHWM; settled is VmRSS at minute "
           f"{settled:g} (steady state); growth is VmRSS at the end minus settled."
           + _shortened(rows[0]["seconds"]), "",
           "| command | scenario | interval | peak RSS MiB | settled MiB | growth MiB | wall s |",
           "|---|---|---|---|---|---|---|"]
    for r in rows:
        if r.get("error"):
            out.append(f"| `{r['command']}` | {r['scenario']} | {r['interval']:g} s | failed: "
                       f"{r['error']} | | | |")
            continue
        out.append(f"| `{r['command']}` | {r['scenario']} | {r['interval']:g} s | "
                   f"{r['peak_mib']:.1f} | {_mib(r.get('settled_mib'))} | "
                   f"{r['growth_mib']:+.1f} | {r['wall_s']:.0f} |")
    return out


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["--child"]:
        cmd, scenario, interval, seconds, result = argv[1:6]
        return child(cmd, scenario, float(interval), float(seconds), result)
    ap = argparse.ArgumentParser(prog="python -m bench.memory", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--hours", type=float, default=1.0, help="simulated hours (default 1)")
    ap.add_argument("--json", action="store_true", help="print the figures as JSON")
    ap.add_argument("--commands", default=",".join(sorted(ARGS)),
                    help="comma-separated commands to measure (default: all)")
    args = ap.parse_args(argv)
    wanted = set(args.commands.split(","))
    if not wanted <= set(ARGS):
        ap.error(f"unknown command(s): {', '.join(sorted(wanted - set(ARGS)))}")
    rows = run(hours=args.hours, cases=[c for c in CASES if c[0] in wanted],
               log=None if args.json else print)
    print(json.dumps(rows, indent=1) if args.json else "\n".join(format_result(rows)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
