"""Pieces of `gpumon analyze` made cheaper must give what they gave before: the runs of full
work found without a loop over them, and a log's samples binned through gathering arrays
reused from chunk to chunk."""
from __future__ import annotations

import os
import sys

import numpy as np
import pytest

pytest.importorskip("pyarrow")

import gpumon.analyze.timeline  # noqa: E402,F401
from gpumon.detect.thresholds import DEFAULT  # noqa: E402
from gpumon.logs import read_log  # noqa: E402

TL = sys.modules["gpumon.analyze.timeline"]     # (the package exports a function of its name)
H = sys.modules["gpumon.analyze.hindsight"]
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _loop(full: np.ndarray, need: float) -> np.ndarray:
    """Each run of True checked in turn (what the pause and stall ends did before _long_runs)."""
    edges = np.flatnonzero(np.diff(np.concatenate(([0], full.astype(np.int8), [0]))))
    out = np.zeros(len(full), bool)
    for a, b in zip(edges[::2], edges[1::2]):
        if b - a >= need:
            out[a:b] = True
    return out


@pytest.mark.parametrize("seed", range(5))
def test_long_runs_match_checking_each_run(seed):
    rng = np.random.default_rng(seed)
    full = rng.random(3000) < rng.uniform(0.3, 0.95)
    full[:3] = seed % 2 == 0                    # runs at either end, or not
    full[-3:] = seed % 3 == 0
    for need in (1, 2, 3.5, 5, 12):
        assert np.array_equal(H.long_runs(full, need), _loop(full, need))
    assert not H.long_runs(np.zeros(0, bool), 3).any()


def test_binning_through_reused_arrays_matches_fresh_ones(monkeypatch):
    """build_store gathers each chunk into the same arrays: nothing of a chunk may be kept
    by the store once the next one overwrites them."""
    log = read_log(os.path.join(ROOT, "tests", "data", "analyze", "nvsmi_starved.csv"))
    monkeypatch.setattr(TL, "STORE_CHUNK", 97)          # many chunks, a short last one
    got = TL.build_store(log, DEFAULT)
    take = TL._take
    monkeypatch.setattr(TL, "_take", lambda s, idx, scratch: take(s, idx, {}))
    want = TL.build_store(log, DEFAULT)
    assert got.nb == want.nb > 10
    assert np.array_equal(got.g, want.g, equal_nan=True)
    assert np.array_equal(got.h, want.h, equal_nan=True)


def test_take_reuses_its_arrays_and_leaves_out_missing_columns():
    log = read_log(os.path.join(ROOT, "tests", "data", "analyze", "nvsmi_starved.csv"))
    s = log.samples
    scratch: dict = {}
    idx = np.arange(len(s.time))[::-1][:50]
    a = TL._take(s, idx, scratch)
    assert np.array_equal(a.util, s.util[idx]) and np.array_equal(a.time, s.time[idx])
    assert a.has_pid is None
    b = TL._take(s, idx[:20], scratch)
    assert np.shares_memory(a.util, b.util) and len(b.util) == 20
