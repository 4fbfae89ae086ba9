"""What the screen must never hide or contradict: the verdict, its GPUs and advice last to be
cut; COLD as the detector judges it; evidence in words; one name for "no verdict"; the demo's
phase and truth; the degree sign where the terminal can show it."""
import io
import re
from dataclasses import replace

import pytest
from rich.console import Console

from gpumon.detect.seconds import busy_cold
from gpumon.detect import Detector
from gpumon.detect.thresholds import DEFAULT
from gpumon.diagnosis import BUSY, INSUFFICIENT_DATA, Diagnosis, evidence_text
from gpumon.sim.source import simulate
from gpumon.ui.model import NOTE_ENV, Dashboard
from gpumon.ui.screen import Screen, render_text
from ui_fixtures import dashboard, diagnosis_at, infos, ticks

pytestmark = pytest.mark.usefixtures("utc")
ADVICE = ("advice: GPU 1 computes longer than the others: balance the work across ranks "
          "(batch sizes, sequence lengths, uneven shards)")


def _words(text: str) -> str:
    """The text inside the banner's box, its lines joined."""
    inside = [m.group(1).strip() for m in re.finditer(r"[│|] (.*?) [│|]$", text, re.M)]
    return " ".join(inside)


@pytest.mark.parametrize("width,height", [(40, 10), (60, 12), (80, 24), (120, 40), (80, 14)])
def test_verdict_gpus_and_advice_are_never_cut(width, height):
    text = render_text(dashboard(8).view(), width, height)
    lines = text.splitlines()
    assert len(lines) <= height and all(len(line) <= width for line in lines)
    assert "SYNC STALL" in text and "GPUs 0-7" in text
    assert ADVICE in _words(text), text
    assert "straggler GPU 1" in text


def test_job_line_never_cuts_a_number_or_bracket():
    for width in (60, 80, 120):
        text = render_text(dashboard(4).view(), width, 40)
        for line in text.splitlines():
            if line.startswith("job") or line.startswith("      "):
                assert line.count("(") == line.count(")"), line


def test_cold_is_the_detectors_comparison_not_an_absolute_power():
    # Waiting GPUs at 60% of their limit (over the old absolute 50%), the straggler at 95%.
    util = {0: 99.0, 1: 100.0, 2: 98.0}
    power = {0: 420.0, 1: 665.0, 2: 430.0}
    limit = {0: 700.0, 1: 700.0, 2: 700.0}
    assert busy_cold(util, power, limit) == {0, 2}
    # One busy GPU alone, or all at the same power: nothing to compare, no COLD.
    assert busy_cold({0: 99.0, 1: 20.0}, {0: 200.0, 1: 600.0}, limit) == frozenset()
    assert busy_cold(util, {0: 650.0, 1: 665.0, 2: 640.0}, limit) == frozenset()
    # The detector's own thresholds decide: a stricter ratio marks fewer.
    strict = replace(DEFAULT, cold_power_ratio=0.5)
    assert busy_cold(util, power, limit, strict) == frozenset()


def test_cold_mark_on_the_screen_follows_the_detector():
    d = Dashboard(infos(3), kind="sim")
    warm_wait = [replace(t, gpus=tuple(replace(s, power_w=420.0 if s.gpu != 1 else 665.0,
                                               util_gpu_pct=100.0) for s in t.gpus))
                 for t in ticks(3, 8)]
    for t in warm_wait:
        d.update(t, [])
    cold = {g.index for g in d.view().gpus if g.cold}
    assert cold == {0, 2}
    row = next(line for line in render_text(d.view(), 80, 24).splitlines()
               if line.startswith(" 0 H100"))
    assert "COLD" in row


@pytest.mark.parametrize("scenario,straggler_cold", [("throttled", False), ("sync_stall", None)])
def test_cold_is_not_the_throttled_straggler(scenario, straggler_cold):
    """`watch --sim throttled:4`: the straggler computes slowly at a held-down clock and draws
    less than the others; it is no GPU spinning cold (its row says THR, not COLD). In a sync
    stall the GPUs waiting for the straggler are COLD, the straggler is not."""
    d = Dashboard(infos(4), kind="sim")
    det = Detector()
    # (Power's reading: without GPM. With SM activity a GPU is cold while it spins, few of
    # its SMs active: tests/test_gpm_detect.py.)
    for t in simulate(scenario, gpus=4, seconds=20, seed=0, params={"gpm": "none"}):
        d.update(t, det.update(t))
    view = d.view()
    s = view.diagnosis.straggler_gpu
    cold = {g.index for g in view.gpus if g.cold}
    assert s is not None and s not in cold
    if straggler_cold is False:
        assert cold == set()
        row = next(line for line in render_text(view, 100, 24).splitlines()
                   if line.startswith(f" {s} H100"))
        assert "THR" in row and "COLD" not in row
    else:
        assert cold == {0, 1, 2, 3} - {s}


def test_evidence_in_words_and_the_rules_reason():
    text = _words(render_text(dashboard(4).view(), 120, 40))
    assert "duty 92%, burst 0.67 s, gap 0.33 s" in text
    for raw in ("gap_sync", "power_frac_busy", "busy_cold_share", "rel_power_min"):
        assert raw not in text
    assert "busy_but_cold: every GPU busy, but the others draw as little as 38%" in text
    assert evidence_text({"duty_cycle": 0.65, "burst_s": 1.19, "gap_s": 0.59,
                          "power_w": None}) == "duty 65%, burst 1.19 s, gap 0.59 s"


def test_no_verdict_has_one_name_on_screen():
    d = Dashboard(infos(2), kind="sim")
    t = ticks(2, 4)
    d.update(t[0], [])
    d.update(t[1], [Diagnosis(INSUFFICIENT_DATA, gpus=(0, 1), because="too few samples")])
    text = render_text(d.view(), 120, 40)
    assert "NO VERDICT" in text and "too few samples" in text
    assert "INSUFFICIENT" not in text and "insufficient_data" not in text
    strip = next(line for line in text.splitlines() if line.startswith("verdicts"))
    assert strip.split()[1] == "--" and strip.endswith("- no verdict")


def test_demo_shows_its_phase_and_truth_beside_the_verdict():
    d = Dashboard(infos(2), kind="sim", label="demo")
    for t in simulate("demo", gpus=2, seconds=12):
        d.update(t, [])
    text = render_text(d.view(), 120, 40)
    truth = d.view().truth
    assert f"SIMULATED: phase {truth.scenario} (truth: {truth.verdict}" in text, text
    # Real GPUs (or a replay) carry no such line.
    real = Dashboard(infos(2), kind="nvml")
    for t in ticks(2, 3, truth=truth):
        real.update(t, [])
    assert "SIMULATED" not in render_text(real.view(), 120, 40)


def test_make_run_note_is_on_the_screen(monkeypatch):
    monkeypatch.setenv(NOTE_ENV, "make run: no NVIDIA driver here, running the SIMULATED demo")
    d = Dashboard(infos(1), kind="sim", label="demo")
    d.update(ticks(1, 1)[0], [])
    lines = render_text(d.view(), 80, 24).splitlines()
    assert lines[1].strip() == "make run: no NVIDIA driver here, running the SIMULATED demo"
    monkeypatch.delenv(NOTE_ENV)
    assert "make run" not in render_text(Dashboard(infos(1)).view(), 80, 24)


def test_degree_sign_only_where_the_terminal_can_show_it():
    v = dashboard(2).view()
    assert "temp 61°C" in render_text(v, 100, 30)
    buf = io.TextIOWrapper(io.BytesIO(), encoding="ascii", errors="strict")
    Console(file=buf, width=100, height=30, color_system=None).print(Screen(lambda: v))
    buf.flush()
    text = buf.buffer.getvalue().decode("ascii")
    assert "temp 61C" in text and "°" not in text
    wide = render_text(v, 200, 50)
    assert "temp °C" in wide


def test_busy_banner_without_straggler():
    d = Dashboard(infos(1), kind="sim")
    for sec, t in enumerate(ticks(1, 8)):
        d.update(t, diagnosis_at(sec, 1))
    text = render_text(d.view(), 80, 24)
    assert "BUSY" in text and "GPU 0" in text and "nothing to do" in text
    assert Diagnosis(BUSY).verdict == "busy"


def test_make_run_passes_the_note_to_the_screen():
    from pathlib import Path
    make = (Path(__file__).resolve().parent.parent / "Makefile").read_text()
    line = next(x for x in make.splitlines() if "--sim demo $(ARGS)" in x and "exec" in x)
    note = next(x for x in make.splitlines() if x.strip().startswith("note="))
    assert f'{NOTE_ENV}="$$note"' in line
    assert "make run: $$why, running the SIMULATED demo node" in note
