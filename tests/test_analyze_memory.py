"""Issue 22: `gpumon analyze` allocates a log's per-second store once (Store.reserve), with
exactly the bins, and so the verdicts, that growing it chunk by chunk gives."""
from __future__ import annotations


import numpy as np

from gpumon.detect.bins import SampleCols, Store
from gpumon.detect.thresholds import DEFAULT
from gpumon.logs.log import Log

# The module (gpumon.analyze exports a function of the same name).


def a_log(seconds: int = 900, gpus: int = 3) -> Log:
    rng = np.random.default_rng(5)
    t = np.repeat(np.arange(seconds, dtype=float), gpus) + 1_700_000_000.25
    g = np.tile(np.arange(gpus), seconds)
    util = np.where((np.arange(len(t)) // (gpus * 40)) % 3 == 0, 0.0,
                    rng.integers(80, 101, len(t)).astype(float))
    power = 100 + 3 * util
    return Log("x.csv", "nvidia-smi", SampleCols(t, g, util, power, np.full(len(t), 400.0),
                                                  None, None, None, np.full(len(t), 4e4),
                                                  None))


def test_store_reserved_once_holds_the_same_bins(monkeypatch):
    # Chunks of 300 samples: GPU 0's alone are three. The store reserved once holds, with
    # no slack, the bins a store given all the samples in one call grows to.
    from gpumon.detect import bins
    monkeypatch.setattr(bins, "STORE_CHUNK", 300)
    log = a_log()
    reserved = bins.log_store(log.samples, log.jobs, log.host, DEFAULT, False)
    grown = Store(reserved.origin, DEFAULT, dtype=np.float32, driver_samples=False)
    grown.add_samples(log.samples)
    assert (reserved.b0, reserved.nb, reserved.gpus) == (grown.b0, grown.nb, grown.gpus)
    np.testing.assert_array_equal(reserved.g[:, :, :reserved.nb], grown.g[:, :, :grown.nb])
    np.testing.assert_array_equal(reserved.h[:, :reserved.nb], grown.h[:, :grown.nb])
    assert reserved.g.shape[2] == reserved.nb                        # no slack


def test_reserve_gives_the_bins_adding_gives():
    st = Store(1000.0, DEFAULT, dtype=np.float32)
    st.reserve(1010.7, 1100.2)
    added = Store(1000.0, DEFAULT, dtype=np.float32)
    added.add_samples(SampleCols(np.array([1010.7, 1100.2]), np.array([0, 0]),
                                 np.array([50.0, 60.0])))
    assert (st.b0, st.nb) == (added.b0, added.nb)


def test_bench_reports_rows_per_second_and_memory_by_log_length():
    from bench import analysis
    day, long = analysis.Timed("24"), analysis.Timed("72")
    day.seconds, day.rss_mib, day.cpu = [2.0, 1.8], [400.0, 380.0], [2.4, 2.5]
    long.seconds, long.rss_mib, long.cpu = [6.0], [1100.0], [7.5]
    lines = analysis.scaling_lines([("24 h", 720_000, day), ("72 h", 2_160_000, long)])
    text = "\n".join(lines)
    assert ("24 h: 720,000 rows in 1.80 s = 400,000 rows/s; CPU 2.40 s; peak RSS 400 MiB "
            "(under") in text
    assert ("72 h: 2,160,000 rows in 6.00 s = 360,000 rows/s; CPU 7.50 s; peak RSS 1100 MiB "
            "(OVER") in text
    assert "rows/s of 72 h over 24 h: 0.90, by CPU time 0.96" in text
    assert analysis.day_path("b", analysis.LONG_S).endswith("nvsmi-72h-8gpu-v1.csv")
    assert analysis.day_path("b").endswith("nvsmi-day-8gpu-v1.csv")


def test_a_gpu_seen_before_the_first_chunk_keeps_its_first_seconds(monkeypatch):
    # GPU 0 (the first chunk's, by GPU) starts 100 s after GPU 1: the store still begins
    # at GPU 1's first sample, and every one of GPU 1's samples is in a bin.
    from gpumon.detect import bins
    monkeypatch.setattr(bins, "STORE_CHUNK", 64)
    t = np.r_[np.arange(100, 200.0), np.arange(0, 200.0)]
    g = np.r_[np.zeros(100, np.int64), np.ones(200, np.int64)]
    st = bins.log_store(SampleCols(t, g, np.full(len(t), 90.0)), None, None, DEFAULT, False)
    assert (st.bin_time(0), st.nb) == (0.0, 200)
    n = st.g[bins.GI["n"], :, :st.nb]
    assert n[st.rows[1]].sum() == 200 and n[st.rows[0]].sum() == 100
