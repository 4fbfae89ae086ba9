"""`gpumon analyze`'s shortcuts give exactly what the plain computations give: window features
without the fields that hold no data, windows read as slices, the 16-bit sort; and the
command imports only what it needs."""
from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

from gpumon.logs import values as readers
from gpumon.logs.table import Cells
from gpumon.detect import features as F
from gpumon.detect.bins import GI, GPU_FIELDS, HOST_FIELDS
from gpumon.detect.thresholds import DEFAULT

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _bins(G: int, T: int, seed: int, dead=("ld", "ldn", "mc", "mcn", "pid", "pidn")):
    rng = np.random.default_rng(seed)
    g = np.round(rng.random((len(GPU_FIELDS), G, T)) * 6, 1)
    g[GI["n"]] = rng.integers(0, 3, (G, T))           # some bins without samples
    for k in dead:
        g[GI[k]] = 0.0
    h = np.zeros((len(HOST_FIELDS), T))
    pause = rng.random(T) < 0.05
    excl = pause | (rng.random(T) < 0.05)
    return g, h, pause, excl


def test_window_features_host_sums_without_host_counters_are_zeros():
    g, h, pause, excl = _bins(2, 500, 4)
    hh = np.random.default_rng(4).random(h.shape)          # with host counters: summed
    f = F.window_features(g, hh, np.arange(30, 500), pause, DEFAULT, excluded=excl)
    W = f["window"]
    want = F.wsum(hh * ~excl, W, np.arange(30, 500))
    with np.errstate(all="ignore"):
        assert np.array_equal(f["iowait"], want[0] / want[1], equal_nan=True)
    f0 = F.window_features(g, h, np.arange(30, 500), pause, DEFAULT, excluded=excl)
    assert np.isnan(f0["iowait"]).all() and np.isnan(f0["disk_write"]).all()
    assert np.array_equal(F.wsum(h * ~excl, W, np.arange(30, 500)), np.zeros((len(h), 470)))


def test_live_sums_leave_out_only_empty_fields():
    g, _, _, excl = _bins(2, 40000, 3)
    C, pos, L = F._live_sums(g, ~excl)
    dead = [GI[k] for k in ("ld", "ldn", "mc", "mcn", "pid", "pidn")]
    assert L == len(GPU_FIELDS) - len(dead) and (pos[dead] == L).all()
    assert not C[L].any()
    want = F.csum(g * ~excl)
    for f in range(len(GPU_FIELDS)):
        assert np.array_equal(C[pos[f]], want[f])


def test_wsum_c_slices_and_rows_match_gathering():
    rng = np.random.default_rng(5)
    c = F.csum(rng.random((6, 3, 500)))
    ends = np.arange(10, 400)
    for w in (7, rng.integers(1, 30, len(ends))):
        want = c[..., ends + 1] - c[..., np.maximum(ends + 1 - w, 0)]
        assert np.array_equal(F.wsum_c(c, w, ends), want)
        assert np.array_equal(F.wsum_c(c, w, ends, np.array([4, 1])), want[[4, 1]])
    assert F._span(np.array([3, 4, 5])) == slice(3, 6)
    assert F._span(np.array([3, 5, 4])) is None and F._span(np.array([0, 2, 1, 3])) is None


def test_fractions_of_seconds_either_way():
    stamps = ["2024/01/15 10:00:01.250", "2024/01/15 10:00:02.5", "2024/01/15 10:00:03"]
    odd = stamps + ["2024/01/15 10:00:04.75 UTC"]          # not all ".<digits>": regexes
    t, bad, _ = readers.times(Cells.of(stamps))
    t2, _, _ = readers.times(Cells.of(odd))
    assert not bad.any() and np.array_equal(t, t2[:3])
    assert np.diff(t).tolist() == [1.25, 0.5] and t2[3] - t2[2] == 1.75


def test_gpu_time_order_16_bit_keys_match_lexsort():
    from gpumon.detect.bins import _gpu_time_order
    rng = np.random.default_rng(2)
    gpu = rng.integers(-1, 9, 5000)
    t = np.sort(rng.random(5000))
    assert np.array_equal(_gpu_time_order(gpu, t), np.lexsort((t, gpu)))
    big = gpu * 100_000                                   # beyond 16 bits: sorted as they are
    assert np.array_equal(_gpu_time_order(big, t), np.lexsort((t, big)))


def test_small_pages_put_numpy_setting_back():
    from gpumon.logs.memory import small_pages
    try:
        from numpy._core.multiarray import _set_madvise_hugepage as switch
    except ImportError:
        pytest.skip("numpy without the huge-page switch")
    before = switch(True)
    try:
        with small_pages():
            assert switch(False) is False         # off inside
        assert switch(True) is True               # back on after
    finally:
        switch(before)


def test_analyze_command_imports_only_what_it_needs():
    """`gpumon analyze` loads neither the other commands' modules (UI, exporter, monitor) nor
    pyarrow nor pandas."""
    path = os.path.join(ROOT, "tests", "data", "analyze", "nvsmi_starved.csv")
    code = ("import sys, io, contextlib\n"
            "from gpumon.cli import main\n"
            "with contextlib.redirect_stdout(io.StringIO()):\n"
            "    rc = main(['analyze', '--format', 'json', sys.argv[1]])\n"
            "bad = [m for m in ('gpumon.ui', 'gpumon.export', 'gpumon.monitor', "
            "'pyarrow', 'pandas') if m in sys.modules]\n"
            "print(rc, bad)\n")
    out = subprocess.run([sys.executable, "-c", code, path], cwd=ROOT, capture_output=True,
                         text=True, timeout=60)
    assert out.stdout.strip() == "0 []", out.stdout + out.stderr


def test_bench_in_process_runs_the_command_and_the_library(tmp_path):
    """bench.analysis times `gpumon analyze` in-process through the command's entry point and
    through the library calls; both run, and the report prints both ratios to pandas."""
    from bench import analysis
    path = os.path.join(ROOT, "tests", "data", "analyze", "nvsmi_starved.csv")
    for what in ("command", "library"):
        out = subprocess.run([sys.executable, "-c", analysis.INPROC, what, path], cwd=ROOT,
                             capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stderr
        assert float(out.stdout.strip().splitlines()[-1]) > 0
    t = [analysis.Timed(x, seconds=[s], wall=[s], rss_mib=[100.0])
         for x, s in (("ours", 2.0), ("pandas", 1.0), ("ip", 0.6), ("ii", 0.4), ("lib", 0.8))]
    lines = analysis.only_lines(t[0], t[1], (t[2], t[3], t[4]), 1.5, 10)
    assert any("1.50x" in x for x in lines) and any("library" in x and "2.00x" in x
                                                     for x in lines)
