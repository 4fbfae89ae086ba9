"""The end-of-run summary and the plain lines (pure functions over fixed ticks)."""
import re

import pytest

from gpumon.diagnosis import BUSY, DATA_STARVATION, Diagnosis
from gpumon.ui import plain
from gpumon.ui.model import Dashboard
from gpumon.ui.summary import MAIN_MIN_SHARE, main_finding, summary_text, verdict_shares
from ui_fixtures import dashboard, diagnosis_at, infos, ticks


pytestmark = pytest.mark.usefixtures("utc")


def test_summary_names_shares_main_cause_evidence_and_advice():
    text = summary_text(dashboard(4))
    assert "\n" not in text
    assert text.startswith("gpumon watched 4 SIMULATED GPUs (0-3, sync_stall:4) for 0:00:30:")
    # 30 ticks: 5 without a verdict, 7 busy, 18 sync_stall.
    assert "sync_stall 60%, busy 23%, no verdict 17% of the time" in text
    assert "Main finding: sync_stall (imbalance, straggler GPU 1) on GPUs 0-3" in text
    assert "rule busy_but_cold: every GPU busy" in text and "Advice: GPU 1 computes longer" in text


def test_no_verdict_has_one_name_and_shares_sum_to_100():
    from gpumon.diagnosis import INSUFFICIENT_DATA
    from gpumon.ui.summary import whole_percents
    d = Dashboard(infos(2), kind="sim", interval=1.0)
    busy = Diagnosis(BUSY, gpus=(0, 1))
    short = Diagnosis(INSUFFICIENT_DATA, gpus=(0, 1))
    # 1 tick without a diagnosis, 1 insufficient_data, 1 busy: thirds that round to 101%.
    for t, diags in zip(ticks(2, 3), ([], [short], [busy])):
        d.update(t, diags)
    text = summary_text(d)
    assert "insufficient_data" not in text
    assert "no verdict 67%, busy 33% of the time" in text, text
    pcts = [int(p) for p in re.findall(r"(\d+)%", text.split(":", 1)[1].split(" of the time")[0])]
    assert sum(pcts) == 100
    assert sum(p for _, p in whole_percents([("a", 1 / 3)] * 3)) == 100
    assert whole_percents([("a", 0.996), ("b", 0.004)]) == [("a", 100)]
    short_only = Dashboard(infos(1), kind="sim")
    short_only.update(ticks(1, 1)[0], [Diagnosis(INSUFFICIENT_DATA, gpus=(0,))])
    assert summary_text(short_only).endswith(": no verdict (too little data).")


def test_a_short_problem_does_not_headline_a_healthy_run():
    d = Dashboard(infos(2), kind="sim", interval=1.0)
    starving = Diagnosis(DATA_STARVATION, gpus=(0, 1), cause="io_fetch", advice="faster disk")
    busy = Diagnosis(BUSY, gpus=(0, 1), advice="nothing to do")
    n_bad = int(40 * MAIN_MIN_SHARE) - 1
    for k, t in enumerate(ticks(2, 40)):
        d.update(t, [starving if k < n_bad else busy])
    assert main_finding(d).verdict == BUSY
    d.update(ticks(2, 41)[-1], [starving])
    for t in ticks(2, 45)[41:]:
        d.update(t, [starving])
    assert main_finding(d).verdict == DATA_STARVATION
    shares = dict(verdict_shares(d))
    assert abs(sum(shares.values()) - 1) < 1e-9


def test_summary_without_detector_or_readings():
    d = Dashboard(infos(1), kind="nvml", detector=False)
    assert summary_text(d).endswith("no readings were taken.")
    d.update(ticks(1, 1)[0], [])
    assert "the detector is not available" in summary_text(d)
    assert "SIMULATED" not in summary_text(d)


def test_summary_of_a_command():
    text = summary_text(dashboard(2), elapsed=65, command="`python train.py`")
    assert text.startswith("gpumon ran `python train.py` on 2 SIMULATED GPUs (0,1, sync_stall:4)"
                           " for 0:01:05:")


def test_plain_header_and_line():
    inf = infos(2)
    head = plain.header(inf, "sim", "busy:2", 1.0)
    assert head[0] == f"gpumon {plain.__version__}: 2 SIMULATED GPUs (busy:2), a line every 1 s"
    assert head[1] == "time    |g0 util power|g1 util power|verdict"
    t = ticks(2, 20)[-1]
    line = plain.line(t, diagnosis_at(19, 2), inf)
    assert re.fullmatch(r"\d\d:\d\d:\d\d\|\s+\d+%\s+\d+W\|\s+\d+%\s+\d+W\|sync imbalance gpu1",
                        line), line
    assert len(line.split("|")[1]) == len(head[1].split("|")[1])    # columns line up
    assert line.endswith("|sync imbalance gpu1")
    assert plain.line(t, [], inf).endswith("|----")


def test_plain_line_missing_and_lost():
    from dataclasses import replace
    from gpumon.samples import Tick
    t = ticks(2, 1)[0]
    t = Tick(time=t.time, gpus=tuple(replace(s, util_gpu_pct=None, power_w=None)
                                     for s in t.gpus if s.gpu == 0), lost=(1,))
    line = plain.line(t, [], infos(2))
    cells = line.split("|")
    assert cells[1].split() == ["-", "-"] and cells[2].strip() == "lost"


def test_plain_line_has_sm_activity_where_the_node_has_gpm():
    from dataclasses import replace
    inf = [replace(i, supported=(("gpm", i.index < 1),)) for i in infos(2)]
    head = plain.header(inf, "sim", "demo", 1.0)
    assert head[1] == "time    |g0 util smact power|g1 util smact power|verdict"
    line = plain.line(ticks(2, 20, gpm=(0,))[-1], [], inf)
    g0, g1 = line.split("|")[1:3]
    assert g0.split()[1:] == ["3%", "210W"] and g1.split()[1:] == ["-", "560W"]
    assert len(g0) == len(head[1].split("|")[1])                       # columns line up
