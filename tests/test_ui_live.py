"""The drawing loop: redraw pacing, ends, signals (no terminal needed)."""
import io
import os
import signal
import threading
import time

from gpumon.monitor import Monitor
from gpumon.ui.live import Loop, run_plain
from gpumon.ui.model import Dashboard
from ui_fixtures import infos, ticks


class FastSource:
    """Hands out fixture ticks as fast as it is polled."""
    kind = "sim"

    def __init__(self, n=2):
        self._ticks = iter(ticks(n, 1000))
        self.n = n
        self.reads = 0

    def gpu_infos(self):
        return infos(self.n)

    def read(self):
        self.reads += 1
        return next(self._ticks)

    def close(self):
        pass


def test_redraws_are_paced_by_refresh_not_by_readings():
    src = FastSource()
    monitor = Monitor(src, interval=0.02, duration=1.5)
    draws = []
    Loop(monitor, refresh=0.5).run(lambda: draws.append(time.monotonic()))
    assert src.reads >= 20                          # sampling went on at its own pace
    assert 3 <= len(draws) <= 6                     # ~1.5 s / 0.5 s, plus the last frame
    gaps = [b - a for a, b in zip(draws, draws[1:-1])]
    assert all(g >= 0.45 for g in gaps), gaps


def test_until_ends_the_loop_and_the_sampler():
    src = FastSource()
    monitor = Monitor(src, interval=0.02)
    loop = Loop(monitor, refresh=0.05, until=lambda: src.reads >= 10)
    loop.run(lambda: None)
    assert loop.stopped_by == "end" and monitor.stop_event.is_set()


def test_signal_stops_or_is_handed_to_on_signal():
    before = signal.getsignal(signal.SIGTERM)
    seen = []

    def on_signal(signum):
        seen.append(signum)
        return len(seen) >= 2                       # the first is "forwarded", the second stops

    monitor = Monitor(FastSource(), interval=0.05)
    loop = Loop(monitor, refresh=0.1, on_signal=on_signal)
    running = threading.Event()

    def send_two():
        for _ in range(2):
            time.sleep(0.2)
            if running.is_set():                 # never at pytest itself once the loop is over
                os.kill(os.getpid(), signal.SIGTERM)

    def draw():
        if not running.is_set():                 # first frame: the loop's handlers are in place
            running.set()
            threading.Thread(target=send_two, daemon=True).start()

    t0 = time.monotonic()
    try:
        loop.run(draw)
    finally:
        running.clear()
    assert seen == [signal.SIGTERM, signal.SIGTERM] and loop.stopped_by == "signal"
    assert time.monotonic() - t0 < 3
    assert signal.getsignal(signal.SIGTERM) == before       # handlers given back


def test_plain_mode_writes_every_tick_once():
    src = FastSource(n=1)
    monitor = Monitor(src, interval=0.01, duration=0.5)
    dash = Dashboard(src.gpu_infos(), kind="sim", label="x", interval=0.01)
    monitor.listeners.append(dash.update)
    out = io.StringIO()
    run_plain(Loop(monitor, refresh=0.2), dash, out)
    lines = out.getvalue().splitlines()
    assert lines[0].startswith("gpumon ") and "SIMULATED" in lines[0]
    assert len(lines) - 2 == monitor.ticks == src.reads      # none lost while batching
