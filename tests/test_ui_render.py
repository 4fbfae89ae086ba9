"""The dashboard's screen: golden renders, marks, colour, layouts, frame cost."""
import io
import re
import os
from pathlib import Path

import pytest
from rich.console import Console

from gpumon import __version__
from gpumon.diagnosis import DATA_STARVATION, Diagnosis
from gpumon.samples import CLOCK_EVENT_GPU_IDLE, CLOCK_EVENT_HW_SLOWDOWN, Tick
from gpumon.sim.scenarios import Truth
from gpumon.ui.model import Dashboard, primary, throttle_reasons
from gpumon.ui.screen import Screen, layout, render_text
from gpumon.ui.spark import Sparkline, spark_char
from ui_fixtures import dashboard, infos, ticks

GOLDEN = Path(__file__).parent / "golden"
UPDATE = os.environ.get("GPUMON_UPDATE_GOLDEN") == "1"


pytestmark = pytest.mark.usefixtures("utc")


def _normal(text: str) -> str:
    return text.replace(f"gpumon {__version__}", "gpumon VERSION")


DEMO_TRUTH = Truth(scenario="data_starvation", verdict=DATA_STARVATION,
                  cause="cpu_preprocessing", straggler_gpu=None, gpus=(0, 1))
MAKE_RUN_NOTE = "make run: no NVIDIA driver here, running the SIMULATED demo node"
# The golden screens: a sync stall with its straggler and advice (4 and 8 GPUs), the demo with
# its phase and true verdict, a screen without a verdict yet, and SM activity beside
# utilization on a node where GPUs 0-1 have GPM and 2-3 do not.
CASES = {
    "stall4": lambda: dashboard(4),
    "stall8": lambda: dashboard(8),
    "demo": lambda: dashboard(2, label="demo", truth=DEMO_TRUTH, note=MAKE_RUN_NOTE),
    "noverdict": lambda: dashboard(2, seconds=4),
    "gpm4": lambda: dashboard(4, label="demo", gpm=(0, 1)),
}
SIZES = [(80, 24), (120, 40), (200, 50)]


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("width,height", SIZES)
def test_golden_screen(case, width, height):
    raw = render_text(CASES[case]().view(), width, height)
    lines = raw.splitlines()
    assert len(lines) <= height
    for line in lines:
        assert len(line) <= width
    got = _normal(raw)
    path = GOLDEN / f"screen_{case}_{width}x{height}.txt"
    if UPDATE or not path.exists():
        path.write_text(got)
    assert got == path.read_text(), (f"{path.name} differs; if the change is intended, "
                                     "regenerate with GPUMON_UPDATE_GOLDEN=1")


def test_screen_shows_every_part():
    text = render_text(dashboard(4).view(), 80, 30)
    lines = text.splitlines()
    assert "SIMULATED sync_stall:4" in lines[0]
    for g in range(4):
        assert any(line.startswith(f" {g} H100") for line in lines)
    assert "SYNC STALL" in text and "straggler GPU 1" in text and "cause imbalance" in text
    assert "advice: GPU 1 computes longer" in text
    assert "uneven shards)" in text                      # wrapped, never cut
    assert "COLD" in text and "THR" in text and "throttle sw_thermal" in text
    assert "hot cores 99 98 96 94%" in text and "iowait 0.4%" in text
    assert "4100 python (GPU 0): main 97%" in text and "wrk 4" in text
    assert "sat 1 (60 50 40 30%)" in text                 # the busiest loader workers
    assert "      +3 more: 4101 main 96%, 4102 main 95%, 4103 main 94%" in lines
    assert "pids 4102" in text and "pids ..." in text   # a PID list that does not fit: elided
    strip = next(line for line in lines if line.startswith("verdicts"))
    assert "bbbbsssssssssssssssss" in strip.replace(" ", "")   # past verdicts, oldest first
    # The straggler's bursts and gaps are visible in its sparkline; the spinning GPUs are flat.
    row1 = next(line for line in lines if line.startswith(" 1 H100"))
    row0 = next(line for line in lines if line.startswith(" 0 H100"))
    assert "▁▁▁▁" in row1 and "████" in row1
    assert "▁" not in row0


def test_sparkline_chars_and_missing_values():
    assert spark_char(0.0) == "▁" and spark_char(100.0) == "█" and spark_char(50.0) == "▅"
    assert spark_char(None) == " "              # a gap in the readings, not a zero
    s = Sparkline(keep=5)
    s.extend([0, 100, None, 100, 0, 100, 100])
    assert s.text == " █▁██" and s.ascii == " #_##"
    assert s.tail(8) == "    █▁██"[-8:].rjust(8) and s.tail(2) == "██"


def test_marks_thresholds():
    assert throttle_reasons(CLOCK_EVENT_HW_SLOWDOWN | CLOCK_EVENT_GPU_IDLE) == ("hw_slowdown",)
    assert throttle_reasons(CLOCK_EVENT_GPU_IDLE) == () and throttle_reasons(None) == ()


def test_primary_diagnosis_is_the_most_actionable():
    busy = Diagnosis("busy", gpus=(0, 1, 2))
    starving = Diagnosis(DATA_STARVATION, gpus=(3,))
    assert primary([busy, starving]) is starving and primary([]) is None


def test_no_detector_and_no_data():
    d = Dashboard(infos(2), kind="nvml", detector=False)
    text = render_text(d.view(), 80, 30)
    assert "NO VERDICT" in text and "detector is not available" in text
    assert "SIMULATED" not in text and " 0 H100" in text and "no host readings" in text
    d = dashboard(2, seconds=3)                       # diagnoses start at the 6th tick
    text = render_text(d.view(), 80, 30)
    assert "NO VERDICT" in text and "waiting for enough samples" in text


def test_missing_values_are_dashes_not_zero():
    from dataclasses import replace
    t = ticks(1, 2)
    gone = Tick(time=t[1].time, gpus=tuple(replace(s, power_w=None, temp_c=None, pids=None)
                                           for s in t[1].gpus), host=t[1].host)
    d = Dashboard(infos(1), kind="sim")
    d.update(t[0], [])
    d.update(gone, [])
    text = render_text(d.view(), 80, 30)
    row = next(line for line in text.splitlines() if line.startswith(" 0 H100"))
    assert "-/700" in row
    assert "temp -C" not in text and "temp -" in text and "pids -" in text
    assert "processes unknown" not in text              # the host still names the job
    bare = Tick(time=gone.time + 1, gpus=gone.gpus, host=replace(gone.host, jobs=(), procs=()))
    d.update(bare, [])
    assert "job   processes unknown" in render_text(d.view(), 80, 30)


def _row(text, gpu):
    return next(line for line in text.splitlines() if line.startswith(f" {gpu} H100"))


def test_sm_activity_beside_utilization_where_a_gpu_has_gpm():
    text = render_text(dashboard(4, gpm=(0, 1)).view(), 120, 40)
    assert " util smact last " in text
    assert "100%    3% " in _row(text, 0)               # spinning: busy, few SMs at work
    assert "100%   62% " in _row(text, 1)               # computing
    assert "100%     - " in _row(text, 2)               # no GPM: "-", never 0
    assert "smact" not in render_text(dashboard(4).view(), 120, 40)   # no GPU has GPM
    for width in (40, 80, 200):                         # kept beside utilization at any width
        assert "100%    3% " in _row(render_text(dashboard(4, gpm=(0, 1)).view(), width, 40), 0)


def test_sm_column_stays_once_gpm_is_gone():
    """A GPU whose GPM fails mid-run shows "-" from then on; the column does not come and go."""
    from dataclasses import replace
    t = ticks(2, 3, gpm=(0, 1))
    d = Dashboard(infos(2), kind="sim")
    d.update(t[0], [])
    d.update(Tick(time=t[1].time, gpus=tuple(replace(s, sm_active_ratio=None)
                                             for s in t[1].gpus), host=t[1].host), [])
    v = d.view()
    assert v.gpm and v.gpus[0].sm_active is None
    assert re.search(r" \d+%     - ", _row(render_text(v, 80, 30), 0))


def test_replay_label_lost_gpu_and_compact_rows():
    t = ticks(12, 3)
    d = Dashboard(infos(12), kind="replay", label="run.csv x10")
    for k, tick in enumerate(t):
        d.update(Tick(time=tick.time, gpus=tick.gpus, host=tick.host, lost=(5,) if k else ()),
                 [])
    text = render_text(d.view(), 80, 30)
    lines = text.splitlines()
    assert "REPLAY run.csv x10" in lines[0]
    assert sum(1 for line in lines if "H100" in line) == 12
    assert not any(line.lstrip().startswith("sm ") for line in lines)   # compact: no detail rows
    assert "LOST" in next(line for line in lines if line.startswith(" 5 H100"))
    assert len(lines) <= 30


def test_every_gpu_lost_banner_says_so_not_waiting_for_samples():
    t = ticks(2, 3)
    d = Dashboard(infos(2), kind="nvml")
    for tick in t:
        d.update(Tick(time=tick.time, gpus=(), host=tick.host, lost=(0, 1)), [])
    text = render_text(d.view(), 100, 30)
    assert "NO GPU LEFT" in text and "every GPU is lost" in text, text
    assert "NO VERDICT" not in text and "waiting for enough samples" not in text


def test_short_terminal_gets_compact_rows():
    lines = layout(dashboard(8).view(), 100, 24)
    assert len(lines) <= 24
    assert len(layout(dashboard(8).view(), 100, 40)) > 24      # taller: detail rows come back


def test_wide_terminal_one_line_per_gpu():
    text = render_text(dashboard(4).view(), 160, 30)
    row = next(line for line in text.splitlines() if line.startswith(" 3 H100"))
    for cell in ("1410", "88", "250.5/3.2", "4103", "sw_thermal", "THR"):
        assert cell in row
    # (GPU 3's clocks are held down: it draws little for that, it is not COLD; GPU 0 is.)
    assert "COLD" not in row
    assert "COLD" in next(line for line in text.splitlines() if line.startswith(" 0 H100"))


def test_colour_and_no_colour():
    v = dashboard(4).view()
    coloured = render_text(v, 100, 30, color=True)
    assert "\x1b[" in coloured
    buf = io.StringIO()
    Console(file=buf, width=100, height=30, force_terminal=True,
            no_color=True).print(Screen(lambda: v))
    plain = buf.getvalue()
    assert "\x1b[3" not in plain and "\x1b[4" not in plain     # no colours, bold/reverse stay
    assert "SYNC STALL" in plain and "COLD" in plain          # said in words, not colour


def test_ascii_terminal():
    v = dashboard(4).view()
    buf = io.TextIOWrapper(io.BytesIO(), encoding="ascii", errors="strict")
    Console(file=buf, width=100, height=30, color_system=None).print(Screen(lambda: v))
    buf.flush()
    text = buf.buffer.getvalue().decode("ascii")
    assert "+-" in text and "#" in text and "SYNC STALL" in text


def test_frame_cache_reuses_unchanged_frame():
    d = dashboard(2)
    screen = Screen(d.view)
    con = Console(file=io.StringIO(), width=100, height=30)
    con.print(screen)
    first = screen._segments
    con.print(screen)
    assert screen._segments is first
    d.update(ticks(2, 31)[-1], [])
    con.print(screen)
    assert screen._segments is not first




@pytest.mark.parametrize("width,height", [(160, 50), (100, 24), (60, 4)])
def test_alt_screen_writes_what_rich_live_writes(monkeypatch, width, height):
    """live.AltScreen (the frame filling the terminal itself) writes the bytes rich's Live
    writes in the alternate screen: entering, every frame, leaving; a terminal too short for
    the layout included."""
    from rich.live import Live

    from gpumon.ui.live import AltScreen

    class Tty(io.StringIO):
        def isatty(self):
            return True

    monkeypatch.setenv("TERM", "xterm-256color")

    def drawn(ours):
        d = dashboard(4, seconds=10)
        buf = Tty()
        con = Console(file=buf, width=width, height=height, force_terminal=True,
                      color_system="256", legacy_windows=False)
        screen = Screen(d.view)
        drawer = AltScreen(con, screen) if ours else Live(
            get_renderable=lambda: screen, console=con, screen=True, auto_refresh=False,
            redirect_stdout=False, redirect_stderr=False, transient=False)
        with drawer as live:
            for tick in ticks(4, 14)[10:]:
                d.update(tick, [])
                live.refresh()
                live.refresh()                  # nothing new: the same frame again
        return buf.getvalue()

    assert AltScreen.usable(Console(file=Tty(), force_terminal=True, legacy_windows=False))
    ours = drawn(True)
    assert ours == drawn(False)
    assert ours.count("\x1b[H") == 1 + 8 and f"gpumon {__version__}" in ours   # entering, frames
