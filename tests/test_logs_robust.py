"""Issue 17's "what fails today": logs people really have, and inputs that used to refuse a
whole file or crash. Each test failed before gpumon.logs existed."""
from __future__ import annotations

import gzip
import os
import subprocess
import sys

import numpy as np
import pytest

from gpumon.analyze import analyze_file
from gpumon.report import to_json, to_text
from gpumon.errors import UserError
from gpumon.logs import read_log
from gpumon.replay import ReplaySource

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DATA = os.path.join(ROOT, "tests", "data", "analyze")
GPUMON_HEAD = "time,gpu,source,util_gpu_pct\n"


def write(tmp_path, name: str, content) -> str:
    p = tmp_path / name
    (p.write_bytes if isinstance(content, bytes) else p.write_text)(content)
    return str(p)


def cli(*args: str, stdin: bytes = b"") -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "gpumon", "analyze", *args], input=stdin,
                          capture_output=True, cwd=ROOT, timeout=120)


def gpumon_rows(n: int = 60, gpus: int = 1, t0: float = 1_700_000_000.0) -> str:
    rows = [f"{t0 + k:.3f},{g},nvml,{50 + 40 * (k % 2)}" for k in range(n) for g in range(gpus)]
    return GPUMON_HEAD + "\n".join(rows) + "\n"


def dmon_body(header: bool, cols: int) -> str:
    """60 s of one GPU, dmon's 9- or 12-column default set."""
    rows = []
    for k in range(60):
        if cols == 9:
            rows.append(f"    0   200    50    {90 if k % 2 else 10}    20     0     0  1593  1380")
        else:
            rows.append(f"    0   200    50     -    {90 if k % 2 else 10}    20     0     0"
                        "     0     0  1593  1380")
    head = ("# gpu    pwr  gtemp  mtemp     sm    mem    enc    dec    jpg    ofa   mclk   pclk\n"
            "# Idx      W      C      C      %      %      %      %      %      %    MHz    MHz\n")
    return (head if header else "") + "\n".join(rows) + "\n"


@pytest.mark.parametrize("cols,names", [(9, "gpu pwr temp sm mem enc dec mclk pclk"),
                                        (12, "gpu pwr gtemp mtemp sm mem enc dec jpg ofa "
                                             "mclk pclk")])
def test_dmon_without_header_takes_the_default_columns_and_says_so(tmp_path, cols, names):
    log = read_log(write(tmp_path, "d.log", dmon_body(False, cols)))
    assert log.kind == "dmon" and len(log.samples.time) == 60
    assert sorted(set(log.samples.util.tolist())) == [10.0, 90.0]
    assert log.samples.power[0] == 200.0 and log.samples.clock[0] == 1380.0
    assert any(names in n for n in log.notes)
    _, tl = analyze_file(write(tmp_path, "d2.log", dmon_body(False, cols)))
    assert "dmon's default set" in to_text(log, tl)


def test_dmon_without_header_and_an_unknown_column_count_is_refused_with_the_reason(tmp_path):
    p = write(tmp_path, "d.log", "0 200 50 90 20 0 0\n" * 10)
    with pytest.raises(UserError, match="7 columns"):
        read_log(p)


def test_plain_csv_without_gpu_column_is_gpu_0(tmp_path):
    rows = "".join(f"{1700000000 + k},{90 if k % 3 else 5}\n" for k in range(60))
    log = read_log(write(tmp_path, "p.csv", "Timestamp,GPU Utilization (%)\n" + rows))
    assert log.kind == "plain" and set(log.samples.gpu.tolist()) == {0}
    assert len(log.samples.time) == 60 and any("GPU 0" in n for n in log.notes)


def test_quoted_cell_with_a_line_break_is_read_up_to_the_break_with_a_note(tmp_path):
    body = "".join(f"{k},0,{50 + k % 2}\n" for k in range(40))
    text = "time,gpu,util\n" + body + '40,0,"45\n46"\n' + "41,0,50\n" + '42,0,"x\n'
    log = read_log(write(tmp_path, "q.csv", text))
    assert log.samples.time.tolist() == list(range(42))
    assert log.samples.util[40] == 45 and log.samples.util[41] == 50
    assert any("line break" in n for n in log.notes)
    # a quote never closed is still a malformed line, at its own line number
    assert log.malformed.count == 1 and log.malformed.first_line == 45


def test_stdin_pipe_and_gzip(tmp_path):
    data = open(os.path.join(DATA, "nvsmi_starved.csv"), "rb").read()
    gz = write(tmp_path, "n.csv.gz", gzip.compress(data))
    for args, stdin in ((["-"], data), (["/dev/stdin"], gzip.compress(data)), ([gz], b"")):
        r = cli(*args, stdin=stdin)
        assert r.returncode == 0, r.stderr
        assert b"nvidia-smi log" in r.stdout and b"Traceback" not in r.stderr


def test_truncated_gzip_keeps_what_came_before(tmp_path):
    gz = gzip.compress(gpumon_rows(200).encode())
    log = read_log(write(tmp_path, "t.csv.gz", gz[: len(gz) * 2 // 3]))
    assert 0 < len(log.samples.time) < 200


def test_a_bad_byte_or_a_huge_line_costs_one_line_not_the_file(tmp_path):
    text = open(os.path.join(DATA, "nvsmi_starved.csv"), "rb").read().split(b"\n")
    n = len([x for x in text[1:] if x])
    bad = text[:5] + [text[5].replace(b"%", b"\xff %", 1)] + text[6:]
    long = text[:7] + [b"2" * (2 << 20)] + text[7:]
    for content, line in ((bad, 6), (long, 8)):
        log = read_log(write(tmp_path, "b.csv", b"\n".join(content)))
        assert log.malformed.count == 1 and log.malformed.first_line == line
        assert len(log.samples.time) == n - (1 if content is bad else 0)


def test_time_jump_is_a_gap_with_no_verdict_and_memory_follows_the_data(tmp_path):
    p = write(tmp_path, "j.csv", GPUMON_HEAD + "0,0,nvml,50\n1000000000,0,nvml,60\n")
    log, tl = analyze_file(p)
    assert tl.gaps == [(0.0, 1e9)]
    assert all(d.verdict == "insufficient_data" for d in tl.segments)
    assert "busy" not in to_json(tl, log)["summary"]["fractions"]
    # Two runs of real work 1e7 s apart: each judged on its own, the gap left out.
    a, b = gpumon_rows(60), gpumon_rows(60, t0=1_710_000_000.0)
    log, tl = analyze_file(write(tmp_path, "two.csv", a + b.split("\n", 1)[1]))
    assert len(tl.gaps) == 1 and tl.gaps[0][1] - tl.gaps[0][0] > 9e6
    assert sum(d.end - d.start for d in tl.segments) < 200
    assert "2 runs" in to_text(log, tl)


def test_a_second_run_with_its_clock_going_back_is_its_own_run(tmp_path):
    a, b = gpumon_rows(60, t0=1_700_000_500.0), gpumon_rows(60)
    log, tl = analyze_file(write(tmp_path, "back.csv", a + b.split("\n", 1)[1]))
    assert len(tl.gaps) == 1 and len(log.samples.time) == 120


@pytest.mark.parametrize("gpu", ["-1", "1e12", "0.5"])
def test_impossible_gpu_index_is_a_malformed_line(tmp_path, gpu):
    text = gpumon_rows(30).replace("\n1700000010.000,0,", f"\n1700000010.000,{gpu},")
    log = read_log(write(tmp_path, "g.csv", text))
    assert log.malformed.count == 1 and set(log.samples.gpu.tolist()) == {0}
    analyze_file(write(tmp_path, "g2.csv", text))


def test_a_200000_character_field_is_a_malformed_line(tmp_path):
    text = gpumon_rows(30).replace("\n1700000010.000,0,nvml,", "\n1700000010.000,0," +
                                   "x" * 200_000 + ",")
    log = read_log(write(tmp_path, "f.csv", text))
    assert log.malformed.count == 1 and len(log.samples.time) == 29


def test_unreadable_and_empty_time_cells_are_malformed(tmp_path):
    text = gpumon_rows(30).replace("\n1700000010.000,", "\nabc,").replace(
        "\n1700000011.000,", "\n,")
    log = read_log(write(tmp_path, "t.csv", text))
    assert log.malformed.count == 2 and log.malformed.first_line == 12


@pytest.mark.parametrize("cell", ["1e308", "12345678901234567890123456789012345678", "inf",
                                  "-5", "[N/A]"])
def test_values_outside_their_physical_range_are_malformed(tmp_path, cell):
    text = "timestamp, index, utilization.gpu [%], power.draw [W]\n" + "".join(
        f"2024/01/15 10:00:{k:02d}.000, 0, {50 + k % 2} %, "
        f"{cell if k == 7 else '150.00'} W\n" for k in range(40))
    with np.errstate(all="raise"):
        log = read_log(write(tmp_path, "r.csv", text))
    bad = 0 if cell == "[N/A]" else 1      # unsupported is missing, not malformed
    assert log.malformed.count == bad and len(log.samples.time) == 40 - bad


def test_replay_skips_a_bad_byte_and_a_negative_gpu(tmp_path):
    text = gpumon_rows(30, gpus=2).encode()
    text = text.replace(b"\n1700000003.000,0,nvml,", b"\n1700000003.000,0,nv\xffml,")
    text = text.replace(b"\n1700000005.000,1,", b"\n1700000005.000,-1,")
    src = ReplaySource(write(tmp_path, "r.csv", text), speed=1e9)
    n = 0
    while not src.done:
        n += len(src.read().gpus)
    assert n == 58 and src.bad.count == 2 and src.bad.first_line == 8


def test_every_readable_file_is_reported_and_each_unreadable_one_in_a_line(tmp_path):
    good = os.path.join(DATA, "nvsmi_starved.csv")
    r = cli(good, str(tmp_path / "missing.csv"), write(tmp_path, "x.txt", "hello\n"))
    assert r.returncode == 1
    assert b"nvidia-smi log" in r.stdout
    err = r.stderr.decode().strip().splitlines()
    assert len(err) == 2 and "missing.csv" in err[0] and "x.txt" in err[1]
    assert "Traceback" not in r.stderr.decode()


def test_timeline_marks_its_clock_as_local_time():
    log, tl = analyze_file(os.path.join(DATA, "nvsmi_starved.csv"))
    assert "times: local time" in to_text(log, tl)


def test_nvidia_smi_without_index_column_numbers_gpus_by_their_place_in_each_poll(tmp_path):
    """Each poll writes one row per GPU a few ms apart (not one stamp); a torn poll (a row
    lost) does not shift the GPUs of the polls after it."""
    rows, k = [], 0
    for poll in range(40):
        for g in range(4):
            if poll == 10 and g == 2:
                continue                              # torn poll: GPU 2's row is missing
            ms = 100 * poll + 2 * g
            rows.append(f"2025/07/26 22:32:{56 + ms // 1000:02d}.{ms % 1000:03d}, "
                        f"{100 + g} W, {10 * g} %")
            k += 1
    text = "timestamp, power.draw [W], utilization.gpu [%]\n" + "\n".join(rows) + "\n"
    log = read_log(write(tmp_path, "noidx.csv", text))
    s = log.samples
    after = s.time > s.time.min() + 1.05
    assert np.array_equal(s.util[after], 10.0 * s.gpu[after])
    assert np.bincount(s.gpu[after]).tolist() == [29, 29, 29, 29]


def test_a_shell_loop_of_nvidia_smi_repeats_its_header_before_every_row(tmp_path):
    """`while true; do nvidia-smi --query-gpu=utilization.gpu --format=csv; sleep 1; done`
    writes the header before every row (a real log of this form: Unshapendwarf/SlowFast's
    out/mvit32_base.out). The repeated headers are dropped, not counted as malformed rows, and
    the rows (no timestamps: 1 s apart) span their own count, not the file's lines."""
    from gpumon.logs import read_log
    util = [0, 0, 97, 100, 100, 12, 0, 88, 100, 100] * 12
    p = tmp_path / "loop.csv"
    p.write_text("".join(f"utilization.gpu [%]\n{u} %\n" for u in util))
    log = read_log(str(p))
    assert log.malformed.count == 0
    assert len(log.samples.util) == len(util)
    t = log.samples.time
    assert float(t.max() - t.min()) == len(util) - 1
