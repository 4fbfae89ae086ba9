"""The detector reads SM activity (GPM) where a GPU has it: spinning is a busy GPU with few SMs
active, power the fallback; hangs, small batches, the reasons and the screen's COLD."""
from __future__ import annotations

import numpy as np
import pytest

from gpumon.detect import Detector
from gpumon.detect.bins import SampleCols, log_store
from gpumon.detect.seconds import busy_cold, seconds
from gpumon.detect.thresholds import DEFAULT
from gpumon.sim import simulate


def _table(sm1: float, power1: float, secs: int = 20):
    """Two GPUs at 100% utilization for ``secs`` s: GPU 0 at 300 W and 70% SM activity,
    GPU 1 at ``power1`` W and ``sm1`` (NaN: no GPM)."""
    t = np.repeat(np.arange(secs, dtype=float), 2) + 0.5
    gpu = np.tile([0, 1], secs)
    s = SampleCols(t, gpu, np.full(2 * secs, 100.0), np.tile([300.0, power1], secs),
                   np.full(2 * secs, 400.0), sm_active=np.tile([0.7, sm1], secs))
    st = log_store(s, None, None, DEFAULT, False)
    g, h = st.view([st.rows[0], st.rows[1]])
    return seconds(g, h, DEFAULT)


def test_a_busy_gpu_with_few_sms_active_is_cold_whatever_its_power():
    tab = _table(0.03, 300.0)              # same power: power alone sees no wait
    assert tab.cold[1, 5:].all() and not tab.cold[0].any()
    assert np.allclose(tab.sm_active[1], 0.03)
    tab = _table(0.68, 150.0)              # half the power, but its SMs compute as GPU 0's
    assert not tab.cold.any()
    tab = _table(0.5, 300.0)               # same power, its SMs idle part of each second
    assert tab.cold[1].all() and not tab.cold[0].any()


def test_without_sm_activity_power_decides():
    tab = _table(np.nan, 150.0)
    assert np.isnan(tab.sm_active[1]).all()
    assert tab.cold[1, 5:].all() and not tab.cold[0].any()
    assert not _table(np.nan, 300.0).cold.any()


def _last(name: str, gpm: str, gpus: int = 4, secs: float = 60, **params):
    det, out = Detector(), []
    for tk in simulate(name, gpus=gpus, seconds=secs, seed=3, params=dict(gpm=gpm, **params)):
        out = det.update(tk) or out
    return out[0]


@pytest.mark.parametrize("name, attr, want, sm_words, power_words", [
    ("hang", "cause", "hang", "SMs active", "power limit"),         # every GPU spins
    ("sync_stall", "rule", "busy_but_cold", "of their SMs active against", "power"),
])
def test_the_stall_is_found_by_sm_activity_and_the_reason_says_so(name, attr, want,
                                                                   sm_words, power_words):
    d = _last(name, "all")
    assert (d.verdict, getattr(d, attr)) == ("sync_stall", want)
    assert sm_words in d.because and power_words not in d.because
    d = _last(name, "none")
    assert (d.verdict, getattr(d, attr)) == ("sync_stall", want)
    assert power_words in d.because and "SMs" not in d.because


def test_small_batches_are_busy_with_a_hint():
    d = _last("busy", "all", sm_active_compute=0.25)
    assert d.verdict == "busy", d.because
    assert "small kernels or batches" in d.because
    assert d.evidence["sm_active"] is not None and d.evidence["sm_active"] < DEFAULT.few_sm_active
    d = _last("busy", "none")
    assert d.verdict == "busy" and "SMs" not in d.because
    assert d.evidence["sm_active"] is None


def test_cold_mark_reads_sm_activity_where_present():
    util, power, limit = {0: 100.0, 1: 100.0}, {0: 300.0, 1: 300.0}, {0: 400.0, 1: 400.0}
    assert busy_cold(util, power, limit) == frozenset()
    assert busy_cold(util, power, limit, sm_active={0: 0.7, 1: 0.03}) == {1}
    # GPU 1 without GPM: its power decides (half GPU 0's: cold).
    assert busy_cold(util, {0: 300.0, 1: 150.0}, limit, sm_active={0: 0.7}) == {1}
    assert busy_cold(util, {0: 300.0, 1: 150.0}, limit,
                     sm_active={0: 0.7, 1: 0.68}) == frozenset()
    assert busy_cold(util, power, limit, sm_active={0: 0.7, 1: 0.5}) == {1}


@pytest.mark.parametrize("gpm,says", [("all", "SMs active"), ("none", "power limit")])
def test_analyze_reads_sm_activity_from_a_gpumon_csv(tmp_path, gpm, says):
    """`gpumon analyze` of a gpumon CSV with GPM columns judges the hang from SM activity
    and says so; without them, from power."""
    from gpumon.analyze import analyze_file
    from gpumon.csvlog import CsvSink
    path = str(tmp_path / "hang.csv")
    sink = CsvSink(path)
    for tk in simulate("hang", gpus=2, seconds=50, seed=0, interval=1.0,
                       params={"gpm": gpm}):
        sink.write(tk)
    sink.close()
    _, tl = analyze_file(path)
    hang = [d for d in tl.segments if d.cause == "hang"]
    assert hang and all(says in d.because for d in hang), [d.because for d in tl.segments]


@pytest.mark.parametrize("signal", ["sm_active", "power"])
def test_ranks_taking_turns_are_busy_by_sm_activity_as_by_power(signal):
    """Two GPUs at 100%: GPU 0 works more (SM activity, or power, where there is no GPM) in
    two seconds of every three, GPU 1 in the third. GPU 0 is the hottest on average, but
    not in straggler_hot_share of the seconds another is cold: the ranks take turns, no
    straggler to name, whichever signal compares them."""
    from dataclasses import replace
    from gpumon.detect import diagnose
    from tests.test_detect import window

    def more(g, t):
        return (int(t) % 3 == 2) == (g == 1)
    ticks = window(15, 2, lambda g, t: 100.0,
                   power=lambda g, t: 360.0 if signal == "sm_active" or more(g, t) else 220.0)
    if signal == "sm_active":
        ticks = [replace(tk, gpus=tuple(
            replace(s, sm_active_ratio=0.9 if more(s.gpu, s.time - 1 / 12) else 0.55)
            for s in tk.gpus)) for tk in ticks]
    [d] = diagnose(ticks)
    assert d.verdict == "busy", d.because


def test_a_busier_gpu_that_spins_by_sm_activity_is_no_straggler_whatever_its_power():
    """GPU 0 at 100% utilization, GPU 1 at 50% (half of every second): GPU 0's power
    rises with its extra duty as a computing GPU's would (45% of its limit against 20%),
    but only 3% of its SMs are active: it spins waiting for GPU 1, it is not the rank the
    other waits for (rank_computes). Without GPM, its power says it computes."""
    from dataclasses import replace
    from gpumon.detect import diagnose
    from tests.test_detect import window

    def on(g, t):
        return g == 0 or t % 1.0 < 0.5
    ticks = window(15, 2, lambda g, t: 100.0 if on(g, t) else 0.0,
                   power=lambda g, t: 180.0 if g == 0 else 120.0 if on(g, t) else 40.0)
    assert diagnose(ticks)[0].rule == "rank_computes"
    ticks = [replace(tk, gpus=tuple(
        replace(s, sm_active_ratio=0.03 if s.gpu == 0 else 0.7 if on(1, s.time - 1 / 12)
                else 0.0) for s in tk.gpus)) for tk in ticks]
    d = diagnose(ticks)[0]
    assert d.rule != "rank_computes" and d.straggler_gpu != 0, (d.rule, d.because)
