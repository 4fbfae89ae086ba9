"""The mutations of bench/fuzz_logs.py do what they say (not gpumon's robustness: that is
tests/test_analyze*.py's), and a case rebuilds from its seed and number alone."""
import csv
import gzip
import io
import random

import pytest

from bench import fuzz_logs as fz

PLAIN = fz.base_bytes("plain.csv")          # timestamp,gpu_index,util,power_w; epoch times
NVSMI = fz.base_bytes("nvsmi_starved.csv")  # index, timestamp, ... with units
DMON_DT = fz.base_bytes("dmon_dt.log")      # '#Date Time gpu ...', whitespace-separated


def rng(n=0):
    return random.Random(n)


def rows(data: bytes) -> list:
    return list(csv.reader(io.StringIO(data.decode())))


def test_gzip_gives_a_gzip_file_of_the_input():
    out = fz.gzip_file(PLAIN, rng())
    assert out[:2] == b"\x1f\x8b"
    assert gzip.decompress(out) == PLAIN
    case = next(fz.make_case(0, n) for n in range(1000) if fz.make_case(0, n).gz)
    assert case.name.endswith(".gz")
    assert fz.build(case)[:2] == b"\x1f\x8b"


@pytest.mark.parametrize("seed", range(3))
def test_long_line_is_2_mib(seed):
    out = fz.long_line(NVSMI, rng(seed))
    longest = max(len(ln.rstrip(b"\r\n")) for ln in out.splitlines(keepends=True))
    assert longest == fz.LONG_LINE == 2 * 1024 * 1024
    assert out.startswith(NVSMI.splitlines(keepends=True)[0])      # the header stays first


@pytest.mark.parametrize("seed", range(3))
def test_long_field_is_200000_characters(seed):
    out = fz.long_field(PLAIN, rng(seed))
    cells = [c for ln in out.splitlines() for c in ln.split(b",")]
    assert max(len(c) for c in cells) == fz.LONG_FIELD == 200_000     # quotes included
    assert max(len(ln) for ln in out.splitlines()) < 2 * fz.LONG_FIELD + 100


@pytest.mark.parametrize("seed", range(5))
def test_truncate_cuts_inside_a_line(seed):
    out = fz.truncate(PLAIN, rng(seed))
    assert PLAIN.startswith(out) and len(out) < len(PLAIN)
    assert not out.endswith(b"\n")
    last = out.splitlines()[-1]
    assert any(ln.startswith(last) and ln != last for ln in PLAIN.splitlines())


def test_dup_header_repeats_the_header_after_the_start():
    out = fz.dup_header(PLAIN, rng(1))
    head = PLAIN.splitlines()[0]
    lines = out.splitlines()
    assert lines[0] == head and lines.count(head) >= 2
    out = fz.dup_header(DMON_DT, rng(1))
    assert out.count(b"#Date") >= 2 and out.count(b"#YYYYMMDD") >= 2


def test_cell_counts_change():
    width = len(rows(PLAIN)[0])
    assert any(len(r) < width for r in rows(fz.drop_cells(PLAIN, rng())))
    assert any(len(r) > width for r in rows(fz.add_cells(PLAIN, rng())))


@pytest.mark.parametrize("fn, values", [(fz.nan_inf, fz.NAN_INF), (fz.negative_values, fz.NEGATIVE),
                                        (fz.huge_values, fz.HUGE)])
def test_bad_numbers_land_in_numeric_cells(fn, values):
    out = fn(NVSMI, rng())
    cells = [c.strip() for r in rows(out)[1:] for c in r]
    hit = [c for c in cells if c.split(" ")[0] in values]
    assert hit
    assert all(c.split(" ")[0] not in values for c in (r[0].strip() for r in rows(out)[1:]))


def test_huge_values_include_38_digit_numbers_and_1e308():
    assert "1e308" in fz.HUGE and any(len(v) == 38 and v.isdigit() for v in fz.HUGE)


def test_non_utf8_is_not_utf8():
    for seed in range(5):
        with pytest.raises(UnicodeDecodeError):
            fz.non_utf8(PLAIN, rng(seed)).decode("utf-8")


def test_byte_flip_keeps_the_length():
    out = fz.byte_flip(PLAIN, rng())
    assert len(out) == len(PLAIN) and out != PLAIN


def test_crlf():
    out = fz.crlf(PLAIN, rng(0))
    assert b"\r\n" in out and b"\r\r" not in out
    assert out.replace(b"\r\n", b"\n") == PLAIN


def _epochs(data):
    return [float(r[0]) for r in rows(data)[1:] if r]


def test_time_jump_is_1e9_seconds_forward():
    t = _epochs(fz.time_jump(PLAIN, rng()))
    steps = [b - a for a, b in zip(t, t[1:])]
    assert max(steps) >= fz.TIME_JUMP_S
    out = fz.time_jump(NVSMI, rng())
    assert any(r[1].strip().startswith("2055/09/23") for r in rows(out)[1:])   # 2024 + 1e9 s


def test_time_backwards():
    t = _epochs(fz.time_backwards(PLAIN, rng()))
    assert min(b - a for a, b in zip(t, t[1:])) < 0
    out = fz.time_backwards(DMON_DT, rng(2))
    stamps = [" ".join(ln.split()[:2]) for ln in out.decode().splitlines()
              if not ln.startswith("#")]
    assert stamps != sorted(stamps)


def test_gpu_indices():
    gpus = {r[1] for r in rows(fz.negative_gpu(PLAIN, rng()))[1:]}
    assert gpus & set(fz.NEG_GPU)
    gpus = {r[1] for r in rows(fz.huge_gpu(PLAIN, rng()))[1:]}
    assert gpus & set(fz.HUGE_GPU)
    out = fz.negative_gpu(NVSMI, rng())          # the index column is the first there
    assert {r[0].strip() for r in rows(out)[1:]} & set(fz.NEG_GPU)


def test_quoted_newline_is_one_csv_cell_with_a_line_break():
    out = fz.quoted_newline(PLAIN, rng())
    assert any("\n" in c for r in rows(out) for c in r)


def test_empty_and_header_only():
    assert fz.empty(PLAIN, rng()) == b""
    assert fz.header_only(PLAIN, rng()).rstrip(b"\r\n") == PLAIN.splitlines()[0]
    assert fz.header_only(DMON_DT, rng()).count(b"\n") <= 2
    assert fz.header_only(DMON_DT, rng()).lstrip().startswith(b"#")


def test_cases_rebuild_from_seed_and_number():
    a = [fz.build(fz.make_case(0, n)) for n in range(30)]
    assert a == [fz.build(fz.make_case(0, n)) for n in range(30)]
    assert a != [fz.build(fz.make_case(1, n)) for n in range(30)]


def test_every_mutation_is_drawn_and_some_go_through_a_pipe():
    cases = [fz.make_case(0, n) for n in range(1000)]
    drawn = {m for c in cases for m in c.mutations}
    assert drawn == set(fz.MUTATIONS) | set(fz.WHOLE)
    assert sum(c.gz for c in cases) > 50
    assert {c.cli for c in cases} >= {"file", "-", "/dev/stdin"}


def test_the_new_formats_and_columns_are_drawn():
    cases = [fz.make_case(0, n) for n in range(1000)]
    bases = {c.base for c in cases}
    assert {"commented.csv", "elapsed.csv", "banner.txt", "cut.csv", "named.csv"} <= bases
    assert all(c.columns == fz.BASE_COLUMNS["named.csv"] for c in cases
               if c.base == "named.csv")
    drawn = [c for c in cases if c.columns and c.base != "named.csv"]
    assert len(drawn) > 20 and all(c.columns.startswith("util=") for c in drawn)
    assert any(c.columns and c.cli for c in cases)


def test_the_layout_of_a_banner_table_and_a_commented_header():
    lay = fz.layout(fz.base_bytes("banner.txt"))
    assert lay.ws and lay.header == [0, 1, 2, 3] and lay.time_cols == (0,)
    lay = fz.layout(fz.base_bytes("commented.csv"))
    assert not lay.ws and lay.header == [0, 1, 2] and lay.time_cols == (0,)
    assert fz.layout(DMON_DT).header == [0, 1] and fz.layout(DMON_DT).time_cols == (0, 1)


def test_a_case_with_columns_reads_through_the_worker_path():
    path = fz.os.path.join(fz.DATA, "named.csv")
    assert fz.run_one(path, 1 << 40)["outcome"] == "user_error"
    assert fz.run_one(path, 1 << 40, fz.BASE_COLUMNS["named.csv"])["outcome"] == "ok"


def test_the_classifier_on_good_and_empty_input(tmp_path):
    p = tmp_path / "empty.csv"
    p.write_bytes(b"")
    assert fz.run_one(str(p), 1 << 40)["outcome"] == "user_error"
    assert fz.run_one(str(fz.os.path.join(fz.DATA, "plain.csv")), 1 << 40)["outcome"] == "ok"


# -- memory bombs ---------------------------------------------------------------------------------
def test_bombs_are_what_they_say(tmp_path):
    p = str(tmp_path / "b")
    fz.bomb_hourly_year(p, 1.0)
    t = [float(r[0]) for r in rows(open(p, "rb").read())[1:]]
    assert len(t) == 8760 and {b - a for a, b in zip(t, t[1:])} == {3600.0}
    fz.bomb_far_apart(p, 1.0)
    t = [float(r[0]) for r in rows(open(p, "rb").read())[1:]]
    assert len(t) == 1000 and t[-1] - t[0] == 999e8
    fz.bomb_nvsmi_5min(p, 1 / 30)               # a day of it
    r = rows(open(p, "rb").read())
    assert len(r) == 1 + 288 * 8 and r[9][0].endswith("00:05:00.000")
    fz.bomb_nul_tail(p, 1 / 16)
    data = open(p, "rb").read()
    assert data.startswith(NVSMI) and data[len(NVSMI):] == b"\0" * (4 << 20)
    fz.bomb_blank_tail(p, 1 / 32)
    assert open(p, "rb").read()[len(NVSMI):] == b"\n" * (4 << 20)
    fz.bomb_newline_gzip(p, 1 / 256)
    assert gzip.decompress(open(p, "rb").read()) == NVSMI + b"\n" * (4 << 20)


def test_bombs_run_through_the_worker_and_the_command_line_with_their_peaks():
    args = fz.parser().parse_args(["--count", "0"])
    bombs = fz.run_bombs(args, log=lambda m: None, scale=1 / 64)
    assert [b.name for b in bombs] == list(fz.BOMBS)
    for b in bombs:
        for r in (b.res, b.cli):
            if r:
                assert r["outcome"] in ("ok", "user_error"), (b.name, r)
                assert r["peak_mib"] > 0
    pipe = bombs[-1]
    assert pipe.name == "endless_pipe" and not pipe.res
    assert pipe.cli["outcome"] == "user_error" and "stopped after reading" in pipe.cli["msg"]
    text = "\n".join(fz.bomb_lines(bombs))
    assert "largest peak RSS" in text and "`nul_tail`" in text


def test_the_measured_line_names_the_bombs_and_the_largest_peak():
    s = fz.Summary(0, 0, 0.0, bombs=[fz.Bomb("nul_tail", 1, {"outcome": "ok", "peak_mib": 90.0},
                                             {"outcome": "ok", "peak_mib": 120.0})])
    assert s.measured().endswith("; 1 memory bombs, 0 failing; largest peak RSS 120 MiB")
