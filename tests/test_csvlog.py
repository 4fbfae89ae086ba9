import csv
import io

import pytest

from gpumon.csvlog import COLUMNS, CsvSink
from gpumon.logs import gpumon_csv
from gpumon.logs.lines import clean
from gpumon.logs.table import header


def read_ticks(text: str):
    lines = clean(text.encode())
    it, cols = gpumon_csv.ticks(lines, header(lines))
    return list(it), cols.body.malformed
from gpumon.diagnosis import Diagnosis
from gpumon.errors import UserError
from gpumon.samples import GpuSample, gpu_columns
from samples_util import tick


def test_columns_come_from_field_metadata():
    assert COLUMNS[:3] == ["time", "gpu", "source"]
    assert COLUMNS[-4:] == ["verdict", "cause", "straggler_gpu", "confidence"]
    assert gpu_columns() == COLUMNS[:len(gpu_columns())]
    assert "proc_util" not in COLUMNS and "jobs" not in COLUMNS
    assert len(set(COLUMNS)) == len(COLUMNS)


def test_one_row_per_sample_and_missing_is_empty(tmp_path):
    path = tmp_path / "run.csv"
    sink = CsvSink(str(path))
    t = tick(1000.0, gpus=2, power_w=None)
    d = Diagnosis("sync_stall", gpus=(0, 1), cause="imbalance", straggler_gpu=1, confidence=0.8)
    sink.write(t, [d])
    sink.close()
    rows = list(csv.DictReader(open(path)))
    assert len(rows) == 12
    assert {r["power_w"] for r in rows} == {""}
    assert rows[0]["verdict"] == "sync_stall" and rows[0]["straggler_gpu"] == "1"
    assert rows[0]["pids"] == "1000" and rows[0]["loader_workers"] == "4"
    times = [float(r["time"]) for r in rows if r["gpu"] == "0"]
    assert times == sorted(times)


def test_roundtrip_rebuilds_ticks(tmp_path):
    path = tmp_path / "run.csv"
    sink = CsvSink(str(path))
    for k in range(3):
        sink.write(tick(1000.0 + k, gpus=2, util=40.0 * k))
    sink.close()
    ticks, _ = read_ticks(open(path).read())
    assert len(ticks) == 3
    assert all(len(t.gpus) == 12 for t in ticks)
    s = ticks[1].gpus[0]
    assert isinstance(s, GpuSample) and s.source == "replay" and s.util_gpu_pct == 40.0
    assert s.pids == (1000,)
    assert ticks[1].host.job_on(1).loader_workers == 4


def test_existing_file_needs_force_or_append(tmp_path):
    path = tmp_path / "run.csv"
    CsvSink(str(path)).close()
    with pytest.raises(UserError, match="--force"):
        CsvSink(str(path))
    CsvSink(str(path), append=True).close()
    CsvSink(str(path), force=True).close()


def test_append_refuses_a_foreign_csv(tmp_path):
    path = tmp_path / "other.csv"
    path.write_text("a,b\n1,2\n")
    with pytest.raises(UserError, match="not a gpumon log"):
        CsvSink(str(path), append=True)


def test_unwritable_path_is_one_line(tmp_path):
    with pytest.raises(UserError, match="cannot write"):
        CsvSink(str(tmp_path / "missing-dir" / "x.csv"))


def test_full_disk_keeps_rows_and_says_so():
    with pytest.raises(UserError, match="disk full"):
        sink = CsvSink("/dev/full")
        for k in range(100):   # the buffer fills, then the flush hits ENOSPC
            sink.write(tick(1000.0 + k))


def test_malformed_rows_are_counted():
    text = io.StringIO()
    w = csv.writer(text)
    w.writerow(COLUMNS)
    good = ["1000.5", "0", "nvml"] + [""] * (len(COLUMNS) - 3)
    w.writerow(good)
    w.writerow(["oops", "0"])
    w.writerow(["x"] + good[1:])
    ticks, bad = read_ticks(text.getvalue())
    assert len(ticks) == 1 and bad.count == 2 and bad.first_line == 3


def test_not_a_gpumon_log(tmp_path):
    from gpumon.replay import ReplaySource
    p = tmp_path / "x.csv"
    p.write_text("a,b,c\n1,2,3\n")
    with pytest.raises(UserError, match="not a gpumon CSV"):
        ReplaySource(str(p))
