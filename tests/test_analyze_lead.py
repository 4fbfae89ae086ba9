"""analyze's hindsight lead (analyze/hindsight.hindsight_lead): each second's raw verdict from
the window ending a few seconds after it, never past a change of per-second flags."""
from __future__ import annotations

import importlib

import numpy as np

from gpumon.analyze import analyze_file
from gpumon.diagnosis import PAUSED, VERDICTS

H = importlib.import_module("gpumon.analyze.hindsight")
BUSY, STARVED = VERDICTS.index("busy"), VERDICTS.index("data_starvation")


def _rules(verdicts: list[int]) -> dict:
    """Rule output per bin as judge_windows gives it: the confidence is the bin's index, so
    every output can be traced to the window it came from."""
    n = len(verdicts)
    return {"verdict": np.array(verdicts), "cause": np.full(n, -1), "straggler": np.full(n, -1),
            "confidence": np.arange(n, dtype=float), "sticky": np.zeros(n, bool),
            "quick": np.zeros(n, bool)}


def test_each_second_takes_the_window_ending_k_bins_later():
    r = _rules([BUSY] * 20 + [STARVED] * 10)
    out = H.hindsight_lead(r, [np.zeros(30, bool)], 3)
    assert out["verdict"].tolist() == [BUSY] * 17 + [STARVED] * 13
    # The last k seconds have no window k bins later: they keep their own.
    assert out["confidence"].tolist() == [e + 3 if e < 27 else e for e in range(30)]
    assert H.hindsight_lead(r, [np.zeros(30, bool)], 0) is r


def test_the_lead_stops_where_the_per_second_flags_change():
    """A pause from bin 10 to 19: the seconds whose later window would end in it keep their
    own, as do the pause's, and the seconds after it lead again."""
    v = [BUSY] * 10 + [VERDICTS.index(PAUSED)] * 10 + [STARVED] * 10
    pause = np.zeros(30, bool)
    pause[10:20] = True
    out = H.hindsight_lead(_rules(v), [pause, pause], 3)
    src = out["confidence"].astype(int).tolist()
    assert src[:10] == [3, 4, 5, 6, 7, 8, 9, 7, 8, 9]
    assert src[10:20] == list(range(10, 20))
    assert src[20:] == [e + 3 if e < 27 else e for e in range(20, 30)]
    assert out["verdict"].tolist() == v


def test_a_second_whose_later_window_reads_paused_keeps_its_own():
    v = [BUSY] * 10 + [VERDICTS.index(PAUSED)] * 5
    out = H.hindsight_lead(_rules(v), [np.zeros(15, bool)], 3)
    assert out["verdict"].tolist() == v


def _smi(tmp_path, util):
    rows = ["timestamp, index, utilization.gpu [%], memory.used [MiB]"]
    for k, us in enumerate(util):
        stamp = f"2024/05/01 00:{k // 60:02d}:{k % 60:02d}.000"
        rows += [f"{stamp}, {g}, {u:.0f} %, 20000 MiB" for g, u in enumerate(us)]
    p = tmp_path / "smi.csv"
    p.write_text("\n".join(rows) + "\n")
    return str(p)


def _starvation_start(tmp_path) -> float:
    """Steady work, then from 60 s 3 s bursts and 3 s gaps on both GPUs."""
    util = [[98, 98]] * 60 + [[100, 100] if (k // 3) % 2 == 0 else [1, 2] for k in range(60)]
    _, tl = analyze_file(_smi(tmp_path, util))
    return min(d.start - tl.start for d in tl.segments if d.verdict == "data_starvation")


def test_a_log_dates_starvation_sooner_with_the_lead(tmp_path, monkeypatch):
    with_lead = _starvation_start(tmp_path)
    monkeypatch.setattr(H, "HINDSIGHT", tuple(h for h in H.HINDSIGHT if h.name != "lead"))
    without = _starvation_start(tmp_path)
    assert 60 <= with_lead <= 65 and with_lead < without, (with_lead, without)


def test_a_window_shown_at_once_live_is_not_led():
    """A verdict a live screen shows at once (quick) has no hold to lag by: the seconds
    before it keep their own windows, as live shows them."""
    from gpumon.analyze.hindsight import hindsight_lead
    r = _rules([STARVED] * 3 + [BUSY] * 5)
    r["quick"][3:6] = True
    none = np.zeros(8, bool)
    out = hindsight_lead(r, [none, none], 2)
    assert out["verdict"].tolist()[:3] == [STARVED] * 3
