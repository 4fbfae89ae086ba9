"""`gpumon analyze` on the edges: impossible cells and lines out of order never raise, an
interval out of range and a closed standard input are one line, one file gives one JSON
object, and simulated data says so in the report and the plot."""
import datetime as dt
import json
import os
import subprocess
import sys

import pytest

from gpumon.analyze import analyze_file
from gpumon.report import to_text
from gpumon.analyze.timeline import Timeline
from gpumon.diagnosis import Diagnosis
from gpumon.errors import UserError

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DATA = os.path.join(ROOT, "tests", "data", "analyze")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_logs_screen import NEW_HEAD, T0, screen  # noqa: E402


def cli(*args, stdin=subprocess.DEVNULL, shell_prefix=None):
    cmd = [sys.executable, "-m", "gpumon", "analyze", *args]
    return subprocess.run(cmd, cwd=ROOT, stdin=stdin, capture_output=True, text=True,
                          timeout=120)


GPUMON_HEAD = "time,gpu,source,util_gpu_pct,power_w,pids\n"


@pytest.mark.parametrize("gpu", ["inf", "-inf", "1e300", "nan"])
def test_a_gpumon_csv_with_an_impossible_gpu_and_pids_is_a_malformed_line(tmp_path, gpu):
    rows = [f"{1700000000 + k},0,nvml,90,200,{100 + k}" for k in range(20)]
    rows.insert(5, f"1700000004.5,{gpu},nvml,90,200,777")
    p = tmp_path / "run.csv"
    p.write_text(GPUMON_HEAD + "\n".join(rows) + "\n")
    log, tl = analyze_file(str(p))
    assert log.malformed.count == 1 and log.malformed.first_line == 7
    assert 777 not in log.pids.get(0, ())


def test_a_screen_log_whose_screens_have_no_gpu_rows_within_a_second(tmp_path):
    """Lines out of order (two dates of one second before any GPU block): IndexError."""
    date = T0.strftime("%a %b %d %H:%M:%S %Y") + "\n"
    gpus = [(0, 90, 300, 1000, 7)]
    text = date + NEW_HEAD + date + NEW_HEAD + "".join(
        screen(T0 + dt.timedelta(seconds=k), gpus) for k in range(1, 20))
    p = tmp_path / "smi.log"
    p.write_text(text)
    log, tl = analyze_file(str(p))
    assert len(log.samples.time) == 19


def test_screen_lines_shuffled_read_or_refused_in_one_line(tmp_path):
    import random
    gpus = [(0, 90, 200, 1000, 5), (1, 10, 100, 1000, None)]
    lines = "".join(screen(T0 + dt.timedelta(seconds=k // 3), gpus)
                    for k in range(30)).splitlines(True)
    for seed in range(60):
        rng = random.Random(seed)
        mixed = lines[:]
        for _ in range(rng.choice((1, 5, 50))):
            i, j = rng.randrange(len(mixed)), rng.randrange(len(mixed))
            mixed[i], mixed[j] = mixed[j], mixed[i]
        p = tmp_path / f"smi{seed}.log"
        p.write_text("".join(mixed))
        try:
            analyze_file(str(p))
        except UserError:
            pass


@pytest.mark.parametrize("value", ["1e-300", "1e300", "0.0001", "100000"])
def test_an_interval_out_of_range_is_a_usage_error(value):
    r = cli("--interval", value, os.path.join(DATA, "dmon.log"))
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert "--interval: must be from 0.001 to 86400 seconds" in r.stderr
    assert r.stdout == ""


def test_the_api_refuses_an_interval_out_of_range():
    from gpumon.api import analyze_log
    with pytest.raises(UserError, match="interval must be from"):
        analyze_log(os.path.join(DATA, "dmon.log"), interval=1e300)


def test_a_closed_standard_input_is_one_line():
    r = subprocess.run(["sh", "-c", f"exec '{sys.executable}' -m gpumon analyze - <&-"],
                       cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert r.returncode == 1
    assert r.stderr == "gpumon: cannot read standard input: it is closed\n"


def test_one_file_gives_one_json_object_even_when_it_fails(tmp_path):
    r = cli("--format", "json", str(tmp_path / "nosuch.csv"))
    assert r.returncode == 1
    doc = json.loads(r.stdout)
    assert isinstance(doc, dict) and doc["file"].endswith("nosuch.csv") and "error" in doc
    r = cli("--format", "json", str(tmp_path / "nosuch.csv"), os.path.join(DATA, "plain.csv"))
    assert isinstance(json.loads(r.stdout), list)


def _sim_log(tmp_path, source="sim"):
    rows = [f"{1700000000 + k / 6:.3f},{g},{source},{95 if (k // 12) % 2 else 10},200,"
            for k in range(6 * 60) for g in range(2)]
    p = tmp_path / f"{source}.csv"
    p.write_text(GPUMON_HEAD + "\n".join(rows) + "\n")
    return str(p)


def test_a_simulated_log_says_so_in_text_json_and_the_plot_title(tmp_path):
    from gpumon.report import to_json
    from gpumon.plot import title
    from gpumon.analyze.timeline import summary
    log, tl = analyze_file(_sim_log(tmp_path))
    text = to_text(log, tl)
    assert "gpumon log of SIMULATED GPUs" in text.splitlines()[0]
    assert any("simulated" in n for n in to_json(tl, log)["notes"])
    assert "SIMULATED GPUs" in title(log, summary(tl))
    real, tl2 = analyze_file(_sim_log(tmp_path, "nvml"))
    assert "SIMULATED" not in to_text(real, tl2) and "SIMULATED" not in title(real, summary(tl2))


def _seg(a, b, strag, verdict="sync_stall", gpus=(0, 1, 2, 3)):
    return Diagnosis(verdict=verdict, gpus=gpus, confidence=0.8, evidence={}, advice="",
                     start=a, end=b, straggler_gpu=strag, cause="imbalance")


def test_straggler_labels_never_overlap_where_segments_meet():
    from gpumon.plot import AXES_WIDTH_IN, CHAR_IN, labels
    segs = [_seg(0, 40, 1), _seg(40, 80, 1), _seg(80, 100, 2), _seg(100, 130, 3),
            _seg(60, 120, 0, gpus=(4, 5)), _seg(130, 300, None, verdict="busy"),
            _seg(300, 310, 3, verdict="throttled")]
    tl = Timeline(segments=segs, start=0.0, end=310.0)
    s_per_in = 310.0 / AXES_WIDTH_IN
    got = labels(tl, 0.0, s_per_in)
    texts = [t for _, _, t in got]
    assert texts.count("straggler GPU 1") == 1          # one stretch, one name
    assert next(x for x, _, t in got if t == "straggler GPU 1") == 40.0
    for i, (x1, y1, t1) in enumerate(got):
        for x2, y2, t2 in got[i + 1:]:
            w1, w2 = (len(t) * CHAR_IN * s_per_in for t in (t1, t2))
            assert y1 != y2 or abs(x1 - x2) >= (w1 + w2) / 2, (t1, t2)
    assert "straggler GPU 0" in texts                    # the other job's, in its own lane
