"""Without host counters, a plateau a little below duty_starved that is steady to the second
is the step's own uploads and launches (busy); a plateau with seconds that dip is starvation
(Thresholds.work_duty)."""
from __future__ import annotations

import importlib
from dataclasses import replace

import numpy as np

from gpumon.analyze import read_log
from gpumon.detect.thresholds import DEFAULT

T = importlib.import_module("gpumon.analyze.timeline")


def _log(tmp_path, util):
    rows = ["timestamp, index, utilization.gpu [%], memory.used [MiB]"]
    for k, us in enumerate(util):
        for g, u in enumerate(us):
            rows.append(f"2024/05/01 00:{k // 60:02d}:{k % 60:02d}.000, {g}, {u:.0f} %, "
                        "20000 MiB")
    p = tmp_path / "smi.csv"
    p.write_text("\n".join(rows) + "\n")
    return read_log(str(p))


def _share(tl, verdict):
    """Share of the log after its first 15 s with this verdict."""
    a = tl.start + 15
    span = [(d.verdict, max(0.0, d.end - max(d.start, a))) for d in tl.segments]
    return sum(x for v, x in span if v == verdict) / sum(x for _, x in span)


def test_steady_plateau_below_duty_starved_is_busy(tmp_path):
    rng = np.random.default_rng(1)
    util = [[rng.uniform(80, 88), rng.uniform(80, 88)] for _ in range(120)]    # mean 0.84
    log = _log(tmp_path, util)
    assert _share(T.timeline(log), "busy") == 1.0
    # Without the rule the same log is starvation: the test can fail.
    off = replace(DEFAULT, work_duty=2.0)   # every second "dips"
    assert _share(T.timeline(log, off), "data_starvation") > 0.9


def test_plateau_with_seconds_that_dip_is_starvation(tmp_path):
    rng = np.random.default_rng(2)
    # The same mean, but every fourth second the input ran dry for part of it.
    util = [[u, u] for u in (rng.uniform(62, 70) if k % 4 == 0 else rng.uniform(88, 93)
                             for k in range(120))]
    log = _log(tmp_path, util)
    assert _share(T.timeline(log), "data_starvation") > 0.9


def test_flat_plateau_at_seventy_odd_percent_is_busy(tmp_path):
    """72-76% on every GPU, flat to the second (a gloo job with 50 ms steps whose uploads
    take a quarter of each step): busy, every second at steady work (work_duty); at a
    steadier bar it is starvation."""
    rng = np.random.default_rng(3)
    util = [[rng.uniform(71.5, 76.5) for _ in range(4)] for _ in range(120)]
    log = _log(tmp_path, util)
    assert _share(T.timeline(log), "busy") == 1.0
    off = replace(DEFAULT, work_duty=0.8)
    assert _share(T.timeline(log, off), "data_starvation") > 0.9


def test_flat_plateau_below_the_floor_is_starvation(tmp_path):
    """As flat, but at 62-68% (where the simulator's flat starvation sits): starvation."""
    rng = np.random.default_rng(4)
    util = [[rng.uniform(62, 68) for _ in range(4)] for _ in range(120)]
    log = _log(tmp_path, util)
    assert _share(T.timeline(log), "data_starvation") > 0.9


def test_a_small_models_steady_85_percent_is_busy(tmp_path):
    """84-85% on average, every GPU's second between 74.5% and 95%, moving by several points
    (its all-reduce and launch gaps: eight H100s training a small GPT on synthetic data,
    h100-ddp8-small-gpt-85pct in bench/real): busy, every second above work_duty."""
    rng = np.random.default_rng(5)
    util = [[rng.uniform(74.5, 95.0) for _ in range(4)] for _ in range(120)]
    log = _log(tmp_path, util)
    assert _share(T.timeline(log), "busy") == 1.0
