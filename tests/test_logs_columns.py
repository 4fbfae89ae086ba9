"""Plain logs as people keep them: the header in a comment line, column names outside gpumon's
list (told by their names' patterns or by their values, or named with --columns), a column
per GPU per field, whitespace tables with a banner, quoted cells cut at a line break, and a
note for every assumption made."""
import os
import subprocess
import sys

import numpy as np
import pytest

from gpumon.analyze import analyze_file, summary
from gpumon.errors import UserError
from gpumon.logs import read_log
from gpumon.logs.columns import choose, parse_option

HERE = os.path.dirname(os.path.abspath(__file__))
DATA = os.path.join(HERE, "data", "analyze")
ROOT = os.path.dirname(HERE)
T0 = 1_705_312_800.0   # the fixtures' start (make_samples.py)


def path(name):
    return os.path.join(DATA, name)


def write(tmp_path, name, text):
    p = tmp_path / name
    p.write_text(text)
    return str(p)


def verdicts(tl):
    return {d.verdict for d in tl.segments}


def cli(*args):
    env = dict(os.environ, PYTHONPATH=ROOT, NO_COLOR="1")
    return subprocess.run([sys.executable, "-m", "gpumon", "analyze", *args], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=120)


def starving(seconds=90):
    """Utilization of a starved GPU: 3 s of work, 3 s of nothing."""
    return [100.0 if (k // 3) % 2 == 0 else 0.0 for k in range(seconds)]


# -- commented headers, a column per GPU per field ------------------------------------------

def test_commented_header_with_a_column_per_gpu_is_read_as_per_gpu_samples():
    log, tl = analyze_file(path("commented.csv"))
    s = log.samples
    assert log.kind == "plain" and log.malformed.count == 0
    assert sorted(set(s.gpu.tolist())) == [0, 1] and len(s.time) == 180
    # 2024-01-15:10:00:01.760601: the date, a colon, the time with microseconds
    assert s.time[0] == pytest.approx(T0 + 1.760601) and s.time[1] == s.time[0]
    assert s.util[:4].tolist() == [25.3, 25.3, 73.2, 96.0]
    assert s.power[:2].tolist() == [120.44, 125.12] and s.mem[0] == 61440
    assert "data_starvation" in verdicts(tl)
    assert any("comment" in n for n in log.notes)
    assert any("column per GPU" in n for n in log.notes)


def test_a_column_per_gpu_reads_as_the_same_log_written_a_row_per_gpu(tmp_path):
    wide, wtl = analyze_file(path("commented.csv"))
    s = wide.samples
    rows = "".join(f"{t!r},{g},{u!r},{p!r},{m!r}\n" for t, g, u, p, m in
                   zip(*(c.tolist() for c in (s.time, s.gpu, s.util, s.power, s.mem))))
    long, ltl = analyze_file(write(tmp_path, "long.csv", "time,gpu,util,power,mem_used\n"
                                   + rows))
    assert [(d.verdict, d.gpus, d.start, d.end) for d in wtl.segments] == \
        [(d.verdict, d.gpus, d.start, d.end) for d in ltl.segments]
    assert summary(wtl) == summary(ltl)


def test_commented_whitespace_header_after_comment_lines(tmp_path):
    rows = "".join(f"{T0 + k:.0f}  {u:5.1f}  {90 + 2 * u:6.1f}\n"
                   for k, u in enumerate(starving()))
    text = "# node17 monitor\n# every 1 s\n# epoch   util%   power_W\n" + rows
    log, tl = analyze_file(write(tmp_path, "ws.log", text))
    assert log.kind == "plain" and len(log.samples.time) == 90
    assert log.samples.time[0] == T0 and log.samples.power[0] == 290.0
    assert "data_starvation" in verdicts(tl)


def test_comment_lines_among_the_rows_are_skipped_not_malformed(tmp_path):
    rows = [f"{T0 + k:.0f},{u:.0f}" for k, u in enumerate(starving())]
    rows.insert(40, "# restarted")
    rows.insert(41, "# time,gpu_util %")
    text = "# time,gpu_util %\n" + "\n".join(rows) + "\n"
    log = read_log(write(tmp_path, "c.csv", text))
    assert len(log.samples.time) == 90 and log.malformed.count == 0


def test_comment_lines_before_a_header_line_of_its_own(tmp_path):
    rows = "".join(f"{T0 + k:.0f},0,{u:.0f}\n" for k, u in enumerate(starving()))
    text = "# gpu log, node17, started by cron\n# one row a second\ntime,gpu,util\n" + rows
    log = read_log(write(tmp_path, "p.csv", text))
    assert log.kind == "plain" and len(log.samples.time) == 90 and log.malformed.count == 0
    assert log.samples.time[0] == T0 and any("comment lines" in n for n in log.notes)


# -- column names outside the list ----------------------------------------------------------

def test_elapsed_seconds_and_names_outside_the_list_are_read_with_notes():
    log, tl = analyze_file(path("elapsed.csv"))
    s = log.samples
    assert log.kind == "plain" and len(s.time) == 90 and s.time[0] == 1.0
    assert s.power is not None and s.power[0] == 208.8          # board_watts
    assert "data_starvation" in verdicts(tl)
    assert any("seconds since the start" in n for n in log.notes)
    assert any("one GPU" in n for n in log.notes)


@pytest.mark.parametrize("names,want", [
    (["Time (s)", "GPU Util (%)", "Power (W)"], {"time": 0, "util": 1, "power": 2}),
    (["stamp", "gpu_busy_pct", "fb_used MiB"], {"time": 0, "util": 1, "mem": 2}),
    (["t_sec", "SM %", "mem_util %", "pwr"], {"time": 0, "util": 1, "power": 3}),
    (["ts", "cpu_usage", "gpu usage", "vram_used"], {"time": 0, "util": 2, "mem": 3}),
    (["date", "card", "load_gpu", "power_limit", "power_w"],
     {"time": 0, "util": 2, "power_limit": 3, "power": 4}),
    (["datetime", "GPU (%)"], {"time": 0, "util": 1}),
])
def test_columns_told_by_their_name_patterns(names, want):
    assert choose(names, []).at == want


def test_memory_encoder_and_cpu_columns_are_not_utilization():
    for name in ("mem_util", "memory usage (%)", "enc_util", "cpu_load", "gpu_mem_usage MiB",
                 "fb_usage"):
        assert not choose(["time", name], []).readable, name


def test_time_told_by_content_increasing_numbers_or_date_times(tmp_path):
    rows = "".join(f"{10 * k},{u:.0f}\n" for k, u in enumerate(starving()))
    log = read_log(write(tmp_path, "n.csv", "step_at,gpu_util\n" + rows))
    assert log.samples.time[:3].tolist() == [0, 10, 20]
    assert any("'step_at' read as the time" in n for n in log.notes)
    rows = "".join(f"2024-01-15 10:00:{k % 60:02d},{u:.0f}\n"
                   for k, u in enumerate(starving(60)))
    log = read_log(write(tmp_path, "d.csv", "when,gpu_util\n" + rows))
    assert log.samples.time[0] == T0 and log.samples.time[59] == T0 + 59


@pytest.mark.parametrize("name,scale", [("elapsed_ms", 1e-3), ("time (ms)", 1e-3),
                                        ("t_us", 1e-6), ("time (s)", 1.0)])
def test_time_in_milliseconds_or_microseconds_is_read_as_seconds(tmp_path, name, scale):
    rows = "".join(f"{round(k / scale)},{u:.0f}\n" for k, u in enumerate(starving()))
    log = read_log(write(tmp_path, "ms.csv", f"{name},gpu_util\n" + rows))
    assert log.samples.time[:3].tolist() == [0.0, 1.0, 2.0]
    assert any("converted to seconds" in n for n in log.notes) == (scale != 1.0)


def test_utilization_fractions_are_scaled_to_percent_with_a_note(tmp_path):
    rows = "".join(f"{T0 + k:.0f},{u / 100 * 0.93:.3f}\n" for k, u in enumerate(starving()))
    log = read_log(write(tmp_path, "f.csv", "time,gpu_util\n" + rows))
    assert log.samples.util[0] == pytest.approx(93.0)
    assert any("fractions" in n for n in log.notes)


# -- --columns ------------------------------------------------------------------------------

NAMED = {"time": "wall", "gpu": "card", "util": "sm_activity", "power": "board"}


def test_a_refused_log_lists_its_columns_and_shows_the_option():
    with pytest.raises(UserError) as e:
        read_log(path("named.csv"))
    msg = str(e.value)
    assert "'wall', 'card', 'sm_activity', 'board'" in msg and "--columns" in msg
    assert "\n" not in msg


def test_columns_named_by_the_user_are_read():
    log, tl = analyze_file(path("named.csv"), columns=NAMED)
    s = log.samples
    assert sorted(set(s.gpu.tolist())) == [0, 1] and len(s.time) == 180
    assert s.power[0] == 120.4 and "data_starvation" in verdicts(tl)
    r = cli("--columns", "time=wall,gpu=card,util=sm_activity,power=board", path("named.csv"))
    assert r.returncode == 0, r.stderr
    assert "data_starvation" in r.stdout


def test_columns_option_errors_are_one_line():
    r = cli("--columns", "speed=wall", path("named.csv"))
    assert r.returncode == 2 and "speed" in r.stderr and "Traceback" not in r.stderr
    r = cli("--columns", "time=wall,util=nosuch", path("named.csv"))
    assert r.returncode == 1 and "Traceback" not in r.stderr
    assert "'nosuch'" in r.stderr and "'sm_activity'" in r.stderr
    with pytest.raises(ValueError):
        parse_option("time=wall")                   # no utilization column named
    with pytest.raises(UserError):
        read_log(path("dmon.log"), columns={"util": "sm"})


def test_columns_override_what_gpumon_would_choose(tmp_path):
    rows = "".join(f"{T0 + k:.0f},{u:.0f},{100 - u:.0f}\n" for k, u in enumerate(starving()))
    p = write(tmp_path, "o.csv", "time,gpu_util,other_util\n" + rows)
    assert read_log(p).samples.util[0] == 100
    assert read_log(p, columns={"time": "time", "util": "other_util"}).samples.util[0] == 0


def test_api_analyze_log_takes_columns():
    import gpumon
    rep = gpumon.analyze_log(path("named.csv"), columns=NAMED)
    assert rep.kind == "plain" and "data_starvation" in {d.verdict for d in rep.segments}
    with pytest.raises(ValueError):
        gpumon.analyze_log(path("named.csv"), columns={"speed": "wall"})


# -- whitespace tables with a banner -------------------------------------------------------

def test_banner_table_is_read():
    log, tl = analyze_file(path("banner.txt"))
    s = log.samples
    assert log.kind == "plain" and len(s.time) == 90 and log.malformed.count == 0
    assert s.time[:2].tolist() == [1.0, 2.0] and s.util[0] == 56.8
    assert s.mem[0] == 61440 and s.power[0] == 208.8
    assert "data_starvation" in verdicts(tl)
    assert any("seconds since the start" in n for n in log.notes)


def test_banner_table_with_a_units_row_and_repeated_headers(tmp_path):
    head = ["  elapsed   gpu0_util   gpu1_util", "      (s)         (%)         (%)",
            "  -------   ---------   ---------"]
    lines = ["training monitor", "================"] + head
    for k, u in enumerate(starving()):
        if k and k % 30 == 0:
            lines += head                         # printed again every 30 rows
        lines.append(f"  {k:7d}   {u:9.1f}   {u:9.1f}")
    log, tl = analyze_file(write(tmp_path, "t.txt", "\n".join(lines) + "\n"))
    assert sorted(set(log.samples.gpu.tolist())) == [0, 1]
    assert len(log.samples.time) == 180 and log.malformed.count == 0
    assert "data_starvation" in verdicts(tl)


def test_whitespace_header_over_rows_without_a_banner(tmp_path):
    rows = "".join(f"{k:6d} {u:8.1f} {50 + u:8.1f}\n" for k, u in enumerate(starving()))
    log, tl = analyze_file(write(tmp_path, "w.txt", "  secs  gpu_util  power_w\n" + rows))
    assert len(log.samples.time) == 90 and log.samples.power[0] == 150.0
    assert "data_starvation" in verdicts(tl)


# -- quoted cells holding a line break -------------------------------------------------------

def test_quoted_cell_cut_at_a_line_break_reads_the_first_value():
    log = read_log(path("cut.csv"))
    s = log.samples
    assert len(s.time) == 90 and log.malformed.count == 0
    assert s.util[:2].tolist() == [25.33, 73.17]
    assert any("line break" in n and "90 row" in n for n in log.notes)


def test_notes_say_one_gpu_and_one_second_apart(tmp_path):
    rows = "".join(f"{u:.0f}\n" for u in starving())
    log = read_log(write(tmp_path, "u.csv", "gpu util %,note\n" + rows.replace("\n", ",x\n")))
    assert np.array_equal(log.samples.time, np.arange(90.0))
    assert any("1 s apart" in n for n in log.notes) and any("GPU 0" in n for n in log.notes)
