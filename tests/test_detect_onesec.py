"""The live detector's one-second pause-tracker inputs (detect/onesec.py) are the numbers of
the numpy functions they stand in for (pauses.Seconds, pauses.host_bins, cold.cold_seconds),
on random bins whose ratios fall on both sides of every threshold, NaN where a count is 0."""
from __future__ import annotations

import math

import numpy as np

from gpumon.detect.bins import GI, GPU_FIELDS, HI, HOST_FIELDS
from gpumon.detect.cold import _cold, cold_seconds, settle_bins, spin_seconds
from gpumon.detect.onesec import cold_second, gap_second, host_second, second_at
from gpumon.detect.stream import _seconds
from gpumon.detect.pauses import Seconds, gap_stops, host_bins
from gpumon.detect.pipeline import bin_duty
from gpumon.detect.thresholds import DEFAULT

# (sum field, count field, the per-count values drawn: around and on the thresholds that
# read them, as a tie decides either way)
_PAIRS = [("u", "n", (0.0, 0.02, 0.05, 0.1, 0.15, 0.3, 0.5, 0.8, 0.9, 1.0)),
          ("pw", "pn", (0.0, 40.0, 100.0, 200.0, 270.0, 300.0, 350.0)),
          ("pl", "pln", (0.0, 300.0, 400.0)), ("wk", "wkn", (0.0, 0.4, 1.0, 2.0, 4.0)),
          ("ld", "ldn", (0.0, 50.0, 88.0, 150.0, 176.0, 380.0)),
          ("lb", "lbn", (0.0, 0.88, 1.0, 2.0, 4.0)),
          ("mc", "mcn", (10.0, 85.0, 90.0, 100.0)), ("mt", "mtn", (10.0, 85.0, 95.0, 100.0)),
          ("mem", "memn", (0.0, 100.0, 256.0, 5000.0)), ("pid", "pidn", (0.0, 1.0)),
          ("age", "agen", (0.5, 3.0, 60.0)), ("gaps", "gapn", (0.2, 0.5, 0.9))]
_HPAIRS = [("io", "ion", (0.0, 3.0, 5.0, 30.0)), ("rd", "rdn", (0.0, 1.0, 20.0, 200.0, 900.0)),
           ("wr", "wrn", (0.0, 50.0, 500.0))]


def _bins(rng, G: int, T: int):
    g = np.zeros((len(GPU_FIELDS), G, T))
    h = np.zeros((len(HOST_FIELDS), T))
    for s, c, vals in _PAIRS:
        cnt = rng.integers(0, 3, (G, T)).astype(float) * (rng.random((G, T)) < 0.85)
        g[GI[c]] = cnt
        g[GI[s]] = cnt * rng.choice(vals, (G, T))
    for s, c, vals in _HPAIRS:
        cnt = (rng.random(T) < 0.8).astype(float)
        h[HI[c]] = cnt
        h[HI[s]] = cnt * rng.choice(vals, T)
    # Some pairs of seconds with every GPU alike (a stop, full work, settled power) so that
    # every branch is taken.
    for t in range(0, T - 1, 5):
        g[GI["n"], :, t:t + 2] = 6.0
        g[GI["u"], :, t:t + 2] = 6.0 * rng.choice((0.0, 0.02, 0.97))
        g[GI["pn"], :, t:t + 2] = np.maximum(g[GI["pn"], :, t:t + 2], 1.0)
        g[GI["pw"], :, t:t + 2] = g[GI["pn"], :, t:t + 2] * rng.choice((100.0, 300.0), (G, 1))
        g[GI["gapn"], :, t:t + 2] = 1.0
        g[GI["gaps"], :, t:t + 2] = rng.choice((0.3, 0.5, 0.7))
    # Some seconds with GPU 0 stopped beside the others at work, at 100 or 300 W (spinning
    # or computing, against their power in the seconds before).
    for t in range(3, T, 7):
        g[GI["n"], :, t] = g[GI["pn"], :, t] = g[GI["pln"], :, t] = 6.0
        g[GI["u"], :, t] = 6.0 * 0.97
        g[GI["u"], 0, t] = 0.0
        g[GI["pl"], :, t] = 6.0 * 400.0
        g[GI["pw"], :, t] = 6.0 * rng.choice((100.0, 300.0))
    return g, h


def _same(a, b) -> bool:
    return all((x == y and type(x) is type(y)) or (isinstance(x, float) and math.isnan(x)
                                                   and isinstance(y, float) and math.isnan(y))
               for x, y in zip(a, b)) and len(a) == len(b)


def test_one_second_inputs_equal_the_numpy_functions():
    rng = np.random.default_rng(11)
    th = DEFAULT
    for G in (1, 2, 3, 8):
        g, h = _bins(rng, G, 400)
        duty, n, u = bin_duty(g)
        cold = cold_seconds(g, th)
        gap, spin = gap_stops(g, th), spin_seconds(g, th)
        secs = Seconds(duty, n, u, th, cold, gap, spin)
        hb = host_bins(g, h, th)
        with np.errstate(invalid="ignore", divide="ignore"):
            raw = _cold(g[GI["u"]] / g[GI["n"]], g[GI["pw"]] / g[GI["pn"]],
                        np.where(g[GI["pln"]] > 0, g[GI["pl"]] / g[GI["pln"]], np.nan),
                        th).any(axis=0)
        for t in range(g.shape[-1]):
            col, hcol = g[:, :, t].tolist(), h[:, t].tolist()
            assert cold_second(col, th) == bool(raw[t]), (G, t)
            assert gap_second(col, th) == bool(gap[t]), (G, t)
            got = second_at(duty[:, t].tolist(), float(n[t]), float(u[t]), th, bool(cold[t]),
                            bool(gap[t]), bool(spin[t]))
            assert _same(got, secs.at(t)), (G, t, got, secs.at(t))
            assert _same(host_second(col, hcol, th), hb[t]), (G, t)
            # The live path's one second, with the bins before it that settle its power.
            lead = min(t, settle_bins(th))
            at, hb1 = _seconds(g[:, :, t - lead:t + 1], h[:, t:t + 1], duty[:, t:t + 1],
                               n[t:t + 1], u[t:t + 1], th, lead, spin[t:t + 1])
            assert _same(at(0), secs.at(t)), (G, t, at(0), secs.at(t))
            assert _same(hb1[0], hb[t]), (G, t)


def test_the_random_bins_reach_every_outcome():
    """(The test above would pass vacuously if every second read the same.)"""
    rng = np.random.default_rng(11)
    g, h = _bins(rng, 3, 400)
    duty, n, u = bin_duty(g)
    secs = Seconds(duty, n, u, DEFAULT, cold_seconds(g, DEFAULT), gap_stops(g, DEFAULT),
                   spin_seconds(g, DEFAULT))
    assert gap_stops(g, DEFAULT).any() and spin_seconds(g, DEFAULT).any()
    for field in ("has", "idle", "alone", "lone_idle", "all_on", "full", "held"):
        v = getattr(secs, field)
        assert v.any() and not v.all(), field
    hb = np.array(host_bins(g, h, DEFAULT), dtype=float)
    for k in (1, 2, 3, 5):                       # starving, writing, present, main_busy
        assert hb[:, k].any() and not hb[:, k].all(), k
    assert np.isnan(hb[:, 0]).any() and np.isnan(hb[:, 4]).any()
    assert cold_seconds(g, DEFAULT).any()
    assert (cold_seconds(g, DEFAULT) != cold_seconds(g, DEFAULT.__class__(power_settle_s=0.0))).any()
