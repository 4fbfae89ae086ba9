"""A sample shorter than a rule needs gives no verdict yet, never a confident wrong one:
`gpumon status` of a sync stall over 2 s, of a hang over 10 s; the live detector's first
seconds say the same, and its verdicts after the first window do not change."""
import json
import subprocess
import sys

import pytest

from gpumon.detect import Detector
from gpumon.diagnosis import INSUFFICIENT_DATA
from gpumon.sim import SimSource


@pytest.fixture(scope="module")
def env():
    import os
    from conftest import ROOT
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("FAKE_NVML") and k != "LD_LIBRARY_PATH"}
    return dict(env, PYTHONPATH=str(ROOT), NO_COLOR="1")


def status(env, *args) -> dict:
    proc = subprocess.run([sys.executable, "-m", "gpumon", "status", "--json", *args],
                          env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def live(name: str, ticks: int, seed: int = 0) -> list:
    src = SimSource(name, seed=seed, step_s=1.0, clock=lambda: 1000.0)
    det = Detector()
    return [det.update(src.read()) for _ in range(ticks)]


def test_sync_stall_over_two_seconds_is_no_verdict_yet(env):
    out = status(env, "--sim", "sync_stall")
    assert out["verdict"] is None, out["verdict"]
    assert out["verdict_note"].startswith("no verdict yet (needs 4 s of samples, had 2)"), \
        out["verdict_note"]


def test_hang_over_ten_seconds_is_not_busy(env):
    out = status(env, "--sim", "hang", "--sample", "10")
    assert out["verdict"] is None, out["verdict"]
    note = out["verdict_note"]
    assert "needs 30 s of samples, had 10" in note and "a hang is called after 30 s" in note, \
        note


@pytest.mark.parametrize("name", ["busy", "data_starvation", "idle"])
def test_clear_cases_still_answer_at_the_default_sample(env, name):
    out = status(env, "--sim", name)
    assert out["verdict"] is not None, out["verdict_note"]
    # Two seconds of a six-second window: a verdict, not a confident one.
    if out["verdict"]["rule"] != "no_job":
        assert out["verdict"]["confidence"] <= 0.7


@pytest.mark.parametrize("name", ["sync_stall", "hang"])
def test_live_first_seconds_never_say_busy(name):
    for ds in live(name, 6)[1:]:
        assert ds and ds[0].verdict != "busy", ds[0]


def test_live_says_why_no_verdict_yet():
    d = live("hang", 12)[-1][0]
    assert d.verdict == INSUFFICIENT_DATA and d.rule == "too_short"
    assert "had 11" in d.because and "a hang is called after 30 s" in d.because, d.because


def test_stall_found_as_soon_as_power_can_be_compared():
    ds = live("sync_stall", 6)
    assert ds[4][0].verdict == "sync_stall", ds[4][0]


def test_confidence_full_once_a_window_is_held():
    d = live("busy", 8)[-1][0]
    assert d.verdict == "busy" and d.confidence >= 0.85, d
