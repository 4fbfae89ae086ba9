"""A replayed log gives the same verdicts, second by second, whatever the --speed."""
from __future__ import annotations

import pytest

from gpumon.commands.watch import REPLAY_MIN_POLL_S
from gpumon.csvlog import CsvSink
from gpumon.detect import Detector
from gpumon.monitor import Monitor
from gpumon.replay import ReplaySource
from gpumon.sim import simulate
from gpumon.ui.model import Dashboard, primary
from gpumon.ui.summary import verdict_shares

SPEEDS = (1, 100, 10000, 100000)


@pytest.fixture(scope="module")
def demo_log(tmp_path_factory):
    """The demo's busy, data_starvation (host counters name its cause), busy and sync_stall
    phases, logged as `gpumon log --sim demo` logs them."""
    path = tmp_path_factory.mktemp("replay") / "demo.csv"
    sink = CsvSink(str(path))
    for tick in simulate("demo", seconds=150, seed=0):
        sink.write(tick, [])
    sink.close()
    return str(path)


def replay(path: str, speed: float):
    """Replay ``path`` through the Monitor as `gpumon watch --replay` drives it, on a virtual
    clock that moves one poll interval per poll: [(tick time, verdict, cause)] per tick,
    and the dashboard's verdict shares."""
    now = [0.0]
    src = ReplaySource(path, speed=speed, clock=lambda: now[0])
    monitor = Monitor(src, interval=1.0, detector=Detector())
    dash = Dashboard(src.gpu_infos(), kind=src.kind)
    seen: list = []

    def note(tick, diagnoses):
        d = primary(diagnoses)
        seen.append((tick.time, d.verdict if d else None, d.cause if d else None))
    monitor.listeners += [note, dash.update]
    poll = 1.0 if speed == 1 else max(REPLAY_MIN_POLL_S, 1.0 / speed)
    while not src.done:
        monitor.step()
        now[0] += poll
    return seen, verdict_shares(dash)


def test_replay_verdicts_do_not_depend_on_speed(demo_log):
    base, shares = replay(demo_log, 1)
    assert len(base) == 150 and {"busy", "data_starvation"} <= {v for _, v, _ in base}
    for speed in SPEEDS[1:]:
        seen, at_speed = replay(demo_log, speed)
        assert seen == base, f"x{speed}"
        assert at_speed == shares, f"x{speed}"


def test_a_fast_poll_reads_every_tick_due_one_by_one(demo_log):
    """A poll that finds many logged ticks due hands them out one at a time (``behind``),
    never merged: each keeps its own host sample, and the poll is one of the Monitor's."""
    now = [0.0]
    src = ReplaySource(demo_log, speed=10.0, clock=lambda: now[0])
    first = src.read()
    assert not src.behind
    # The clock starts at the log's first sample, 5/6 s before the first tick's end: 1 s of
    # wall time at speed 10 is 10 s of the log, nine ticks more.
    now[0] += 1.0
    due = []
    while src.behind:
        due.append(src.read())
    assert [t.time for t in due] == [first.time + k for k in range(1, 10)]
    assert all(t.host is not None for t in due)
    assert all(t.time - 1.0 < s.time <= t.time for t in due for s in t.gpus)
    monitor = Monitor(src, interval=0.1)
    now[0] += 1.0
    monitor.step()
    assert monitor.ticks == 1 and monitor.latest.time == first.time + 19
