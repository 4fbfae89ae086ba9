"""Bursts and gaps: measured over a window's own seconds, so that a reason's duty, bursts and
gaps agree with each other and with the evidence beside them; none where the samples are
too far apart to measure any (features.run_lengths, bins._time_runs)."""
from __future__ import annotations

import math
import random
import re

import numpy as np
import pytest

from gpumon.api import analyze_log
from gpumon.csvlog import CsvSink
from gpumon.detect.bins import GI, SampleCols, Store
from gpumon.detect.features import window_features
from gpumon.sim.source import simulate

REASON = re.compile(r"ran a kernel (\d+)% of the last (\d+) s.*?in bursts of ([\d.]+) s and "
                    r"gaps of ([\d.]+) s")


def _demo_log(path, seed: int = 0) -> str:
    """What `gpumon log --sim demo --seed N` writes, one pass through the demo's phases,
    on the simulation's own clock."""
    sink = CsvSink(str(path))
    for tick in simulate("demo", seconds=320, seed=seed):
        sink.write(tick)
    sink.close()
    return str(path)


def _nvsmi_log(path, every: float, seconds: float, on: float, off: float, gpus: int = 2,
               jitter: float = 0.0, stagger: float = 0.0) -> str:
    """An nvidia-smi --query-gpu CSV sampled every ``every`` s (each sample +- ``jitter``;
    GPU g ``stagger`` g s later) of GPUs busy ``on`` s then idle ``off`` s; a sample reads
    the share of its last second the GPU was busy, as the driver's utilization does."""
    rnd = random.Random(3)
    rows = ["timestamp, index, utilization.gpu [%], memory.used [MiB], power.draw [W]"]
    for k in range(int(seconds / every)):
        t0 = 10.0 + k * every + rnd.uniform(-jitter, jitter)
        for g in range(gpus):
            t = t0 + g * stagger
            u = round(100 * _busy_share(t - 1.0, t, on, off))
            rows.append(f"2024/05/01 00:{int(t) // 60:02d}:{int(t) % 60:02d}."
                        f"{int(t % 1 * 1000):03d}, {g}, {u} %, 30000 MiB, {90 + 2 * u}.00 W")
    path.write_text("\n".join(rows) + "\n")
    return str(path)


def _busy_share(a: float, b: float, on: float, off: float) -> float:
    """Share of [a, b) inside the busy part of the on/off cycle."""
    step, busy, x = 0.01, 0, a
    while x < b - 1e-9:
        busy += (x % (on + off)) < on
        x += step
    return busy * step / (b - a)


def _quoted(segment) -> tuple:
    """(duty, window s, burst s, gap s) as the segment's reason states them."""
    m = REASON.search(segment.because or "")
    return (int(m[1]) / 100, int(m[2]), float(m[3]), float(m[4])) if m else None


def test_demo_reasons_duty_bursts_and_gaps_agree(tmp_path):
    """Every reason that states bursts and gaps: none longer than its window, the same
    numbers as the evidence beside it, and duty, bursts and gaps from the same seconds. In
    a window of W s with duty d, bursts of b s and gaps of g s there are d W / b bursts and
    (1 - d) W / g gaps; bursts and gaps alternate, so those differ by at most one (per GPU,
    and so in the GPUs' mean). Slack: the duty is the mean utilization, the runs split
    samples at seg_util_pct (a run's edge inside a driver sample counts all or nothing): 3
    points of duty, up to 0.03 W (1/b + 1/g) runs."""
    report = analyze_log(_demo_log(tmp_path / "demo.csv"))
    quoted = [(d, _quoted(d)) for d in report.segments if _quoted(d)]
    assert len(quoted) >= 2
    for d, (duty, w, b, g) in quoted:
        ev = d.evidence
        assert b <= w and g <= w, d.because
        assert (f"{ev['burst_s']:.1f}", f"{ev['gap_s']:.1f}") == (f"{b:.1f}", f"{g:.1f}")
        assert round(100 * ev["duty_cycle"]) == round(100 * duty)
        d_, b_, g_ = ev["duty_cycle"], ev["burst_s"], ev["gap_s"]
        bursts, gaps = d_ * w / b_, (1 - d_) * w / g_
        assert abs(bursts - gaps) <= 1 + 0.03 * w * (1 / b_ + 1 / g_), d.because


def test_nvsmi_one_second_on_two_off_reason_and_evidence_say_the_same(tmp_path):
    """An nvidia-smi log at 1 s (times jittered) of GPUs 1 s busy, 2 s idle: the reason and
    the evidence give one burst and one gap, about 1 s and 2 s."""
    report = analyze_log(_nvsmi_log(tmp_path / "smi.csv", 1.0, 300, 1.0, 2.0, jitter=0.1))
    starved = [d for d in report.segments if d.verdict == "data_starvation"]
    assert starved
    for d in starved:
        duty, w, b, g = _quoted(d)
        assert (f"{d.evidence['burst_s']:.1f}", f"{d.evidence['gap_s']:.1f}") == \
            (f"{b:.1f}", f"{g:.1f}"), d.because
        assert abs(b - 1.0) <= 0.2 and abs(g - 2.0) <= 0.3, d.because


@pytest.mark.parametrize("every", [3.0, 5.0])
@pytest.mark.parametrize("gpus", [1, 2])
def test_logs_sampled_seconds_apart_measure_no_bursts(tmp_path, every, gpus):
    """Samples 3 or 5 s apart (further than max_sample_gap_s) measure no burst or gap: no
    starvation read from a few snapshots' duty, bursts and gaps unknown (not 0.0 s), and
    sub-second utilization missing."""
    # (Two GPUs' samples a second apart: no second holds a sample of both.)
    report = analyze_log(_nvsmi_log(tmp_path / "sparse.csv", every, 600, every, every,
                                    gpus=gpus, stagger=1.0))
    assert report.summary.verdict == "insufficient_data"
    for d in report.segments:
        assert d.verdict not in ("data_starvation", "sync_stall", "busy"), d
        assert d.evidence["burst_s"] is None and d.evidence["gap_s"] is None
        assert "subsecond_util" in d.missing or d.rule == "no_job"
        assert "0.0 s" not in (d.because or "")


def _store(times, utils) -> Store:
    st = Store(math.floor(times[0]))
    st.add_samples(SampleCols(np.array(times, float), np.zeros(len(times), np.int64),
                              np.array(utils, float)))
    return st


def test_a_window_counts_its_own_seconds_only():
    """40 s busy, then 1 s busy and 2 s idle: a 6 s window in the rhythm reads bursts of
    about 1 s (the long burst before it is no part of it), and a window inside the long
    burst reads one burst as long as the window, no longer."""
    times = [0.5 + k / 6 for k in range(6 * 70)]
    utils = [100.0 if t < 40 or (t - 40) % 3 < 1 else 0.0 for t in times]
    st = _store(times, utils)
    g, h = st.view()
    nb = g.shape[-1]
    ends = np.array([20, 63 - st.b0])        # (the second: seconds 58 to 63, two cycles)
    f = window_features(g, h, ends, np.zeros(nb, bool), w=6)
    assert f["burst_s"][0, 0] == pytest.approx(6.0, abs=0.01)
    assert math.isnan(f["gap_s"][0, 0])
    assert f["burst_s"][0, 1] == pytest.approx(1.0, abs=0.2)
    assert f["gap_s"][0, 1] == pytest.approx(2.0, abs=0.2)
    # The busy and idle time the window's seconds measured: all of them.
    assert f["run_t"][:, 0, 1].sum() == pytest.approx(6.0, abs=0.2)


def test_samples_after_a_hole_measure_nothing():
    """A sample more than max_sample_gap_s after the one before measures no time and ends
    the run before it; the next run begins anew."""
    st = _store([0.0, 0.5, 1.0, 5.0, 5.5, 6.0], [100, 100, 100, 100, 100, 100])
    g = st.view()[0][:, 0]
    # (The first sample counts the mean period of the samples added with it: 6 s / 5.)
    assert g[GI["bt"]].sum() == pytest.approx(1.2 + 4 * 0.5)
    assert g[GI["bst"]].sum() == 2 and g[GI["gst"]].sum() == 0
