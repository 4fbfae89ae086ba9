"""The rules registry: the order, one Rule per name, the rules a live screen shows at once,
a rule added in its family's module alone, and reasons that quote the thresholds given."""
from __future__ import annotations

import dataclasses
import pathlib
import shutil
import subprocess
import sys
import types

import numpy as np
import pytest

from gpumon.detect import detector, diagnose
from gpumon.detect import rules as R
from gpumon.detect.rules import held, idle, stall, starve
from gpumon.detect.rules.words import Window, rhythm
from gpumon.detect.thresholds import DEFAULT
from gpumon.diagnosis import VERDICTS
from test_detect import burst_gap, window

ROOT = pathlib.Path(__file__).resolve().parent.parent
ORDER = ("no_job", "job_gone", "too_few_samples", "pause", "no_kernels", "quiet_after_work",
         "throttle", "rank_computes", "rank_host_starved", "stall_over", "rank_host",
         "duty_low", "hang", "busy_but_cold", "too_short", "busy", "hold")


def test_the_rules_in_their_order_each_named_once():
    assert R.RULES == ORDER
    assert len({r.order for r in R.REGISTRY}) == len(R.REGISTRY)
    assert [r.order for r in R.REGISTRY] == sorted(r.order for r in R.REGISTRY)
    for r in R.REGISTRY:
        assert r.family.startswith("gpumon.detect.rules."), r
        assert r.verdict in VERDICTS or r.name == "hold", r
        assert r.means and r.meaning(DEFAULT) and "{" not in r.meaning(DEFAULT), r
    # Only no_job and hold are decided outside the windows (where jobs are found; the hold).
    assert [r.name for r in R.REGISTRY if r.decide is None] == ["no_job", "hold"]
    assert R.TRIED[-1].name == "busy"


def test_only_rank_host_and_stall_over_show_at_once():
    assert {r.name for r in R.REGISTRY if r.shows_at_once} == {"rank_host", "stall_over"}
    assert sorted(R.RULES[i] for i in np.flatnonzero(R.AT_ONCE)) == ["rank_host", "stall_over"]


def test_a_name_or_a_place_taken_twice_is_refused():
    twin = dataclasses.replace(starve.duty_low, order=starve.duty_low.order + 1)
    with pytest.raises(ValueError, match="name"):
        R.collect([starve, types.SimpleNamespace(twin=twin)])
    other = dataclasses.replace(starve.duty_low, name="other")
    with pytest.raises(ValueError, match="order"):
        R.collect([starve, types.SimpleNamespace(other=other)])


def test_a_rule_defined_in_a_family_module_takes_its_place():
    fam = types.ModuleType("gpumon.detect.rules.scratch")
    fam.__dict__.update(vars(starve))
    fam.sm_idle = R.Rule("sm_idle", "data_starvation", starve.duty_low.order + 1,
                         "SM activity under 50%", lambda x: "", family=fam.__name__)
    names = [r.name for r in R.collect([idle, fam, stall])]
    assert names.index("sm_idle") == names.index("duty_low") + 1
    assert names.index("sm_idle") < names.index("hang")


THROWAWAY = '''

def _sm_low(x: Window) -> str:
    return f"SM activity under {x.th.duty_starved:.0%}"


@rule(DATA_STARVATION, 115, "SM activity under {duty_starved:.0%}", _sm_low)
def sm_low(w: Windows) -> None:
    """A rule added for this test only: never fires."""
    w.decide(sm_low, np.zeros(w.E, bool))
'''

PROBE = """
from gpumon.detect import diagnose
from gpumon.detect.rules import RULES, BY_NAME
from test_detect import burst_gap, window
[d] = diagnose(window(20, 2, burst_gap(0.5, 0.5), power=lambda g, t: 200.0))
print(RULES.index("sm_low") - RULES.index("duty_low"), BY_NAME["sm_low"].family, d.rule)
"""


def test_adding_a_rule_touches_its_family_module_only(tmp_path):
    """A copy of the package with one rule appended to starve.py: the registry lists it after
    duty_low, and the detector runs with it, nothing else edited."""
    shutil.copytree(ROOT / "gpumon", tmp_path / "gpumon",
                    ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "tests" / "test_detect.py", tmp_path)
    fam = tmp_path / "gpumon" / "detect" / "rules" / "starve.py"
    fam.write_text(fam.read_text() + THROWAWAY)
    r = subprocess.run([sys.executable, "-c", PROBE], cwd=tmp_path, capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["1", "gpumon.detect.rules.starve", "duty_low"], r.stdout


def test_no_reason_reads_the_default_thresholds():
    for path in (ROOT / "gpumon" / "detect" / "rules").glob("*.py"):
        assert "DEFAULT." not in path.read_text(), path


def test_reasons_quote_the_thresholds_they_were_given():
    th = dataclasses.replace(DEFAULT, mem_active_mib=123.0, idle_after_s=45.0, hold_s=7.0,
                             duty_starved=0.55, hang_s=50.0, spin_power_frac=0.2,
                             idle_duty=0.33, idle_util_pct=12.0)
    assert "123 MiB" in R.BY_NAME["no_job"].because(th, False)
    assert "the last 45 s" in R.BY_NAME["no_job"].because(th, False)
    assert "12%" in R.BY_NAME["no_job"].because(th, False)
    assert "33% or more" in R.BY_NAME["no_job"].because(th, True)
    said = held.hold.because("busy", "duty_low", th)
    assert said.endswith("did not last the 7 s a change needs") and "rule duty_low" in said
    assert "under 55%" in R.BY_NAME["duty_low"].meaning(th)
    assert "for 50 s" in R.BY_NAME["hang"].meaning(th)

    ticks = window(20, 2, burst_gap(0.5, 0.5), power=lambda g, t: 200.0)
    [d] = diagnose(ticks, th)
    assert d.rule == "duty_low" and "under 55%" in d.because, d.because
    f, r = _judged(ticks, th)
    x = Window(f, 0, [0, 1], -1, {"duty_cycle": 0.4, "power_frac_busy": 0.1}, th)
    assert "(at most 20% for 50 s)" in stall.hang.because(x)
    assert "123 MiB" in idle.job_gone.because(
        Window({**f, "mem_last": np.array([[10.0], [10.0]]),
                "holds": np.array([[False], [False]])}, 0, [0, 1], -1, {}, th))
    mins = dataclasses.replace(th, min_samples=9.0)
    assert "fewer than 9" in idle.too_few_samples.because(Window(f, 0, [0, 1], -1, {}, mins))



def test_job_gone_names_each_gpu_by_the_signal_that_said_it():
    """A GPU without its processes but with memory "runs no process"; one under
    mem_active_mib "holds less than"; the job's other GPUs are named beside them."""
    ticks = window(20, 3, burst_gap(0.5, 0.5), power=lambda g, t: 200.0)
    f, _ = _judged(ticks, DEFAULT)
    part = {**f, "mem_last": np.array([[30000.0], [10.0], [30000.0]]),
            "holds": np.array([[False], [False], [True]])}
    said = idle.job_gone.because(Window(part, 0, [0, 1, 2], -1, {}, DEFAULT))
    assert said.startswith("GPU 1 holds less than 256 MiB of memory and GPU 0 runs no "
                           "process, of the job's GPUs 0-2"), said
    gone = {**part, "holds": np.array([[False], [False], [False]])}
    said = idle.job_gone.because(Window(gone, 0, [0, 1, 2], -1, {}, DEFAULT))
    assert said.startswith("GPU 1 holds less than 256 MiB of memory and GPUs 0,2 run no "
                           "process: "), said
    assert said.endswith("let go of them"), said

def _judged(ticks, th):
    """The features and rule output of the one job of ``ticks``, over the whole window."""
    seen = {}
    wf = detector.window_features

    def keep(*a, **k):
        seen["f"] = f = wf(*a, **k)
        return f
    detector.window_features = keep
    try:
        diagnose(ticks, th)
    finally:
        detector.window_features = wf
    return seen["f"], R.judge(seen["f"], False, th)


def test_a_reason_leaves_out_bursts_and_gaps_that_were_not_measured(monkeypatch):
    ticks = window(20, 2, burst_gap(0.5, 0.5), power=lambda g, t: 200.0)
    [d] = diagnose(ticks)
    assert d.rule == "duty_low" and ", in bursts of 0.5 s and gaps of 0.5 s;" in d.because
    wf = detector.window_features

    def unmeasured(*a, **k):
        f = wf(*a, **k)
        return {**f, "burst_s": np.full_like(f["burst_s"], np.nan),
                "gap_s": np.full_like(f["gap_s"], np.nan)}
    monkeypatch.setattr(detector, "window_features", unmeasured)
    [d] = diagnose(ticks)
    assert d.rule == "duty_low" and d.evidence["burst_s"] is None
    assert "burst" not in d.because and "gap" not in d.because and "?" not in d.because
    assert d.because.startswith("every GPU ran a kernel 50% of the last ")
    assert rhythm({"burst_s": 0.5, "gap_s": float("nan")}) == ""
    assert rhythm({"burst_s": None, "gap_s": 1.0}) == ""
    assert rhythm({"burst_s": 1.04, "gap_s": 2.0}) == ", in bursts of 1.0 s and gaps of 2.0 s"


def test_the_readme_rule_table_is_the_registrys():
    """The README's rule table is what the registry prints with the default thresholds: a
    rule added, moved or reworded shows there."""
    import pathlib
    from gpumon.detect.rules import table
    from gpumon.detect.thresholds import DEFAULT
    readme = (pathlib.Path(__file__).resolve().parents[1] / "README.md").read_text()
    assert table(DEFAULT) in readme
