"""host_bins of bins without loader, main-process or host counters (an nvidia-smi log) takes
a short cut (pauses._held_only); its tuples must be those of the full computation."""
import math

import numpy as np
import pytest

from gpumon.detect import pauses as P
from gpumon.detect.bins import GI, GPU_FIELDS, HOST_FIELDS
from gpumon.detect.thresholds import DEFAULT


def _bins(seed, G=3, T=400):
    rng = np.random.default_rng(seed)
    g = np.zeros((len(GPU_FIELDS), G, T), np.float32)
    g[GI["n"]] = 1
    g[GI["u"]] = rng.random((G, T))
    g[GI["memn"]] = rng.integers(0, 3, (G, T))          # memory seen 0-2 times a bin
    g[GI["mem"]] = g[GI["memn"]] * rng.choice([0.0, 3.0, 20000.0], (G, T))
    g[GI["pidn"]] = rng.integers(0, 2, (G, T))
    g[GI["pid"]] = g[GI["pidn"]] * rng.integers(0, 2, (G, T))
    return g, np.zeros((len(HOST_FIELDS), T), np.float32)


def _same(a, b):
    assert len(a) == len(b)
    for x, y in zip(a, b):
        assert len(x) == len(y) == 6
        for p, q in zip(x, y):
            assert type(p) is type(q)
            assert (math.isnan(p) and math.isnan(q)) if isinstance(p, float) else p == q


@pytest.mark.parametrize("seed", range(4))
def test_bins_without_host_counters_give_the_full_computation_s_tuples(seed, monkeypatch):
    g, h = _bins(seed)
    got = P.host_bins(g, h, DEFAULT)
    assert {x[3] for x in got} == {True, False}          # the job held its GPUs, and not
    monkeypatch.setattr(P, "_held_only", lambda g, th: pytest.fail("short cut taken"))
    monkeypatch.setattr(P, "_HB_JOB_DEN", [GI["n"]])      # (n > 0: the full computation)
    _same(got, P.host_bins(g, h, DEFAULT))


def test_a_bin_with_loader_workers_takes_the_full_computation(monkeypatch):
    g, h = _bins(0)
    g[GI["wkn"], 1, 7] = 1
    g[GI["wk"], 1, 7] = 4
    monkeypatch.setattr(P, "_held_only", lambda g, th: pytest.fail("short cut taken"))
    assert P.host_bins(g, h, DEFAULT)[7][0] == 4.0
