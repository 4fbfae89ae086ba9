"""`gpumon analyze`: every input kind (samples in tests/data/analyze/), malformed lines, empty
and unreadable files, JSON and text output."""
from __future__ import annotations

import json
import os

import pytest

from gpumon.analyze import analyze_file, read_log, summary
from gpumon.report import to_json
from gpumon.logs import sniff
from gpumon.logs.lines import clean
from gpumon.cli import main
from gpumon.errors import UserError

DATA = os.path.join(os.path.dirname(__file__), "data", "analyze")


def path(name):
    return os.path.join(DATA, name)


@pytest.mark.parametrize("name,kind", [
    ("gpumon.csv", "gpumon"), ("nvsmi_starved.csv", "nvidia-smi"),
    ("nvsmi_nounits.csv", "nvidia-smi"), ("dmon.log", "dmon"), ("dmon_dt.log", "dmon"),
    ("plain.csv", "plain"), ("malformed.csv", "nvidia-smi")])
def test_format_is_detected(name, kind):
    assert sniff(clean(open(path(name), 'rb').read()).head(40)) == kind
    assert read_log(path(name)).kind == kind


def test_unknown_format_is_one_line(tmp_path):
    p = tmp_path / "notes.txt"
    p.write_text("hello world\nthis is not a log\n")
    with pytest.raises(UserError) as e:
        read_log(str(p))
    assert "not a log gpumon can read" in str(e.value) and "\n" not in str(e.value)


def test_nvidia_smi_units_any_order_and_timestamps():
    log = read_log(path("nvsmi_starved.csv"))
    s = log.samples
    assert sorted(set(s.gpu.tolist())) == [0, 1]
    assert len(s.time) == 180
    # '2024/01/15 10:00:01.000' -> epoch seconds, one second apart per GPU
    assert s.time.min() == pytest.approx(1_705_312_801.0)
    assert s.time[s.gpu == 0][1] - s.time[s.gpu == 0][0] == pytest.approx(1.0)
    assert 0 <= s.util.min() and s.util.max() <= 100          # "92 %" -> 92.0
    assert s.power_limit[0] == pytest.approx(400.0)          # "400.00 W"
    assert s.mem[0] == pytest.approx(61440.0)                # "61440 MiB"
    log, tl = analyze_file(path("nvsmi_starved.csv"))
    sm = summary(tl)
    # GPU 1 alone waits (47%) beside GPU 0 at 100%; no host counters to tell why on its host.
    assert (sm["verdict"], sm["cause"], sm["straggler_gpu"]) == ("sync_stall", "rank_host", 1)
    main_seg = max(tl.segments, key=lambda d: d.end - d.start)
    assert "subsecond_util" in main_seg.missing and "host" in main_seg.missing


def test_nvidia_smi_nounits_hex_clock_events_and_na():
    log = read_log(path("nvsmi_nounits.csv"))
    s = log.samples
    assert s.events is not None and set(s.events.tolist()) <= {0.0, 32.0}
    assert all(v != v for v in s.power_limit)                 # "[N/A]" -> missing, not 0
    _, tl = analyze_file(path("nvsmi_nounits.csv"))
    sm = summary(tl)
    assert sm["verdict"] == "throttled" and sm["cause"] == "thermal"
    assert sm["straggler_gpu"] == 1


def test_dmon_with_repeated_headers_and_no_time_column():
    log = read_log(path("dmon.log"))
    assert log.malformed.count == 0
    assert sorted(set(log.samples.gpu.tolist())) == [0, 1]
    assert log.samples.time[log.samples.gpu == 1][:3].tolist() == [0.0, 1.0, 2.0]
    assert all(v != v for v in log.samples.mem)               # no fb column -> missing
    _, tl = analyze_file(path("dmon.log"))
    sm = summary(tl)
    assert sm["verdict"] == "sync_stall" and sm["straggler_gpu"] == 1
    half = read_log(path("dmon.log"), interval=0.5)
    assert half.samples.time[half.samples.gpu == 0][:3].tolist() == [0.0, 0.5, 1.0]


def test_dmon_with_date_and_time_columns():
    log = read_log(path("dmon_dt.log"))
    assert log.samples.time.min() == pytest.approx(1_705_312_801.0)
    _, tl = analyze_file(path("dmon_dt.log"))
    assert summary(tl)["verdict"] == "data_starvation"


def test_plain_csv():
    _, tl = analyze_file(path("plain.csv"))
    sm = summary(tl)
    assert sm["verdict"] == "busy" and sm["gpus"] == [0, 1]


def test_gpumon_csv_rebuilds_the_run():
    log, tl = analyze_file(path("gpumon.csv"))
    assert log.pids == {0: (40000,), 1: (40001,)}
    assert log.jobs is not None and log.host is not None
    sm = summary(tl)
    assert sm["verdict"] == "data_starvation" and sm["cause"] == "cpu_preprocessing"
    assert sm["straggler_gpu"] == 1
    seg = max(tl.segments, key=lambda d: d.end - d.start)
    assert seg.evidence["loader_cpu_pct"] > 300          # host counters came through
    assert seg.evidence["samples_per_s"] == pytest.approx(6.0, abs=0.2)


def test_malformed_lines_are_counted_with_the_first_line_number(capsys):
    log, tl = analyze_file(path("malformed.csv"))
    assert log.malformed.count == 3
    assert log.malformed.first_line == 5
    assert len(log.samples.time) == 37
    assert summary(tl)["verdict"] == "busy"
    assert main(["analyze", path("malformed.csv")]) == 0
    out = capsys.readouterr().out
    assert "3 malformed line(s) skipped, the first at line 5" in out


def test_empty_file_is_one_clear_line_and_exit_1(capsys):
    assert main(["analyze", path("empty.csv")]) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith("gpumon: ") and "empty" in err and "\n" not in err


def test_header_only_and_missing_file(tmp_path, capsys):
    p = tmp_path / "h.csv"
    p.write_text("timestamp, index, utilization.gpu [%]\n")
    assert main(["analyze", str(p)]) == 1
    assert "no usable samples" in capsys.readouterr().err
    assert main(["analyze", str(tmp_path / "nope.csv")]) == 1
    assert "cannot read" in capsys.readouterr().err


def test_json_output_is_the_contract(capsys):
    assert main(["analyze", "--format", "json", path("gpumon.csv")]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert set(doc) == {"file", "summary", "segments", "gaps", "malformed_lines", "notes"}
    assert doc["gaps"] == [] and doc["malformed_lines"] == 0
    assert doc["notes"] == ["simulated data: recorded with --sim, on simulated GPUs, not a "
                            "real machine's"]           # (the sample log was)
    assert set(doc["summary"]) == {"verdict", "cause", "gpus", "straggler_gpu", "confidence",
                                   "fractions"}
    assert isinstance(doc["summary"]["straggler_gpu"], int)
    assert sum(doc["summary"]["fractions"].values()) == pytest.approx(1.0, abs=0.01)
    for seg in doc["segments"]:
        assert set(seg) == {"start", "end", "verdict", "cause", "gpus", "straggler_gpu",
                            "confidence", "rule", "because", "evidence", "advice", "missing"}
        assert seg["rule"] and seg["because"]
        assert seg["end"] >= seg["start"]
    assert to_json(analyze_file(path("plain.csv"))[1])["summary"]["straggler_gpu"] is None


def test_text_output(capsys):
    assert main(["analyze", path("nvsmi_starved.csv"), path("plain.csv")]) == 0
    out = capsys.readouterr().out
    assert out.count("verdict:") == 2 and out.count("timeline:") == 2
    assert "advice:" in out and "data_starvation" in out


def test_analyze_never_imports_pandas(clean_env):
    """numpy reads every log: neither pandas nor pyarrow (optional extras) is imported."""
    import subprocess
    import sys
    code = ("import sys\n"
            "from gpumon.analyze import analyze_file\n"
            "from gpumon.report import to_json\n"
            "for p in sys.argv[1:]:\n"
            "    to_json(analyze_file(p)[1])\n"
            "print('pandas' in sys.modules or 'pyarrow' in sys.modules)\n")
    names = ["nvsmi_starved.csv", "nvsmi_nounits.csv", "malformed.csv", "plain.csv",
             "gpumon.csv", "dmon.log"]
    r = subprocess.run([sys.executable, "-c", code] + [path(n) for n in names],
                       capture_output=True, text=True, env=clean_env, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "False"


@pytest.mark.parametrize("name", ["nvsmi_starved.csv", "gpumon.csv", "dmon.log"])
def test_windows_judged_alone_or_with_their_neighbours_read_the_same(name):
    """Detector.judge_windows gives a window's rule output whatever other windows it judges
    with: a few scattered ones (each window's bins laid side by side) read as every second
    of the log does (up to float rounding of running sums), the log's first bins too."""
    import numpy as np
    from gpumon.detect import Detector
    log = read_log(path(name))
    det = Detector()
    st, _ = det.read_log(log.samples, log.jobs, log.host, log.kind == "gpumon", log.pids)
    rows = list(range(len(st.gpus)))
    job = det.judge_log(st, st.gpus, False)         # (every window, no hindsight)
    pts = np.unique(np.r_[0, 1, 5, np.linspace(0, st.nb - 1, 25).round().astype(int),
                          st.nb - 1])
    got, f = det.judge_windows(st, rows, False, job, pts, features=True)
    every = job.r
    assert len(f["window"]) == len(pts)
    for k in ("verdict", "cause", "straggler"):
        assert np.array_equal(got[k], every[k][pts]), k
    assert np.allclose(got["confidence"], every["confidence"][pts], rtol=1e-9, atol=1e-12)


def test_nvidia_smi_index_that_is_not_a_number_is_one_bad_line(tmp_path):
    """The GPU index is read as an integer by the CSV reader; a value that is not one sends
    the file through the text path, where that line alone counts as malformed."""
    rows = ["timestamp, index, utilization.gpu [%], power.draw [W]"]
    for k in range(40):
        for g in (0, 1):
            idx = "x1" if (k, g) == (12, 1) else str(g)
            rows.append(f"2024/05/01 00:00:{k:02d}.000, {idx}, {95 if k % 3 else 5} %, "
                        f"{300 if k % 3 else 80}.00 W")
    p = tmp_path / "smi.csv"
    p.write_text("\n".join(rows) + "\n")
    log = read_log(str(p))
    assert (log.malformed.count, log.malformed.first_line) == (1, 2 + 12 * 2 + 1)
    assert len(log.samples.time) == 79 and sorted(set(log.samples.gpu.tolist())) == [0, 1]
    assert log.samples.util[:4].tolist() == [5.0, 5.0, 95.0, 95.0]


def test_sample_orders_are_lexsorts():
    """The shortcuts for samples already in order give np.lexsort((time, gpu)) exactly: ties,
    NaN times, GPUs out of order, a log's time-major rows."""
    import numpy as np
    from gpumon.detect import bins
    rng = np.random.default_rng(7)
    cases = []
    for n in (0, 1, 2, 50, 500):
        g = rng.integers(0, 4, n)
        t = rng.integers(0, 20, n).astype(float)
        cases += [(g, t), (np.sort(g), t), (np.repeat(np.arange(4), n // 4), np.tile(
            np.arange(n // 4, dtype=float), 4))]
        t2 = t.copy()
        if n > 3:
            t2[3] = np.nan
        cases.append((g, t2))
    cases.append((np.tile(np.arange(8), 100), np.repeat(np.arange(100.0), 8)))
    for g, t in cases:
        want = np.lexsort((t, g))
        got = bins._gpu_time_order(g, t)
        assert np.array_equal(np.arange(len(g)) if got is None else got, want)


def test_hold_gives_the_verdict_held_after_each_second():
    """A new raw verdict wins once it lasts hold_s (2 s: two seconds in a row); one second of
    it, or of another, changes nothing."""
    import numpy as np
    from gpumon.detect.detector import hold
    from gpumon.detect import Hysteresis
    from gpumon.detect.thresholds import DEFAULT
    from gpumon.diagnosis import VERDICTS
    A, B, C = (VERDICTS.index(x) for x in ("busy", "data_starvation", "sync_stall"))
    v = np.array([A, A, B, A, B, B, C, A])
    none = np.full(len(v), -1)
    times = 100.0 + np.arange(len(v))
    held, keys = hold(Hysteresis(DEFAULT), times, v, none, none, np.zeros(len(v), bool))
    assert [keys[k][0] for k in held] == [A, A, A, A, A, B, B, B]
    assert keys == [(A, -1, -1), (B, -1, -1)]
    held, keys = hold(Hysteresis(DEFAULT), times[:0], v[:0], none[:0], none[:0],
                      np.zeros(0, bool))
    assert len(held) == 0 and keys == []


def test_a_log_shorter_than_a_window_names_its_rule(tmp_path):
    """A run shorter than one window is insufficient_data said by the rule too_few_samples,
    with the window it lacks, as every verdict names the rule that gave it."""
    p = tmp_path / "short.csv"
    p.write_text("time,gpu,util\n" + "".join(f"{t},0,90\n" for t in range(3)))
    _, tl = analyze_file(str(p))
    [d] = tl.segments
    assert (d.verdict, d.rule) == ("insufficient_data", "too_few_samples")
    assert d.because == "no run of samples here spans one window (6 s)"
    assert d.advice == "too few samples to judge: log for longer"
