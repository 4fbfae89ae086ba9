import csv
import io
import re
import subprocess
import sys

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


# -- the log in operations: rotation, --append after a crash or right after a run, errors ------

def _rows(path):
    return list(csv.DictReader(open(path)))


def test_copytruncate_leaves_no_hole_and_starts_again_with_the_header(tmp_path):
    """logrotate's copytruncate cuts the file to nothing while gpumon writes: the next rows
    land at its start (O_APPEND), after the header, not at the old offset after NUL bytes."""
    path = tmp_path / "run.csv"
    sink = CsvSink(str(path))
    sink.write(tick(1000.0))
    path.write_bytes(b"")                            # what copytruncate does, after the copy
    sink.write(tick(1001.0))
    sink.close()
    data = path.read_bytes()
    assert b"\0" not in data
    ticks, bad = read_ticks(data.decode())
    assert len(ticks) == 1 and bad.count == 0 and ticks[0].gpus[0].time > 1000.0


def test_reopen_continues_in_a_new_file_after_a_rename(tmp_path):
    path = tmp_path / "run.csv"
    sink = CsvSink(str(path))
    sink.write(tick(1000.0))
    path.rename(tmp_path / "run.csv.1")
    sink.request_reopen()                            # SIGUSR1 (logrotate's postrotate)
    sink.write(tick(1001.0))
    sink.close()
    old, new = _rows(tmp_path / "run.csv.1"), _rows(path)
    assert len(old) == 12 and len(new) == 12
    assert min(float(r["time"]) for r in new) > max(float(r["time"]) for r in old)


def test_append_cuts_a_partial_last_row_first(tmp_path):
    """A write cut short (full disk, power loss) left half a row: --append must not glue its
    first row onto it."""
    path = tmp_path / "run.csv"
    sink = CsvSink(str(path))
    sink.write(tick(1000.0))
    sink.close()
    with open(path, "a") as f:
        f.write("1000.5,0,si")
    sink = CsvSink(str(path), append=True)
    sink.write(tick(1001.0))
    sink.close()
    ticks, bad = read_ticks(path.read_text())
    assert bad.count == 0 and sum(len(t.gpus) for t in ticks) == 24
    assert sink.cut == len("1000.5,0,si")


def test_append_skips_samples_the_file_already_holds(tmp_path):
    """Right after a run the driver still holds its last second: no (time, gpu) twice, no
    time going back."""
    path = tmp_path / "run.csv"
    sink = CsvSink(str(path))
    for t in (1000.0, 1001.0, 1002.0):
        sink.write(tick(t))
    sink.close()
    sink = CsvSink(str(path), append=True)
    sink.write(tick(1002.5))                         # samples 1001.67 .. 1002.5
    sink.write(tick(1003.5))
    sink.close()
    rows = _rows(path)
    pairs = [(r["time"], r["gpu"]) for r in rows]
    assert len(pairs) == len(set(pairs))
    for gpu in ("0", "1"):
        times = [float(r["time"]) for r in rows if r["gpu"] == gpu]
        assert times == sorted(times) and len(times) == 18 + 3 + 6


@pytest.mark.parametrize("mode", [{}, {"force": True}, {"append": True}])
def test_a_directory_is_one_line_with_a_suggestion_that_works(tmp_path, mode):
    d = tmp_path / "adir"
    d.mkdir()
    with pytest.raises(UserError) as err:
        CsvSink(str(d), **mode)
    assert str(err.value) == f"{d} is a directory; give a file in it, e.g. {d}/run.csv"
    assert "--force" not in str(err.value)


def test_append_to_an_unreadable_file_is_one_line(tmp_path, monkeypatch):
    import builtins
    import gpumon.csvlog
    path = tmp_path / "run.csv"
    CsvSink(str(path)).close()

    def refuse(*a, **kw):
        raise PermissionError(13, "Permission denied")
    monkeypatch.setattr(gpumon.csvlog, "open", refuse, raising=False)
    monkeypatch.setattr(builtins, "open", refuse)    # (the code before this used it)
    try:
        with pytest.raises(UserError, match="cannot append to .*Permission denied; log to a "
                                             "new file instead"):
            CsvSink(str(path), append=True)
    finally:
        monkeypatch.undo()


def test_a_short_write_counts_the_rows_that_reached_the_file(tmp_path, clean_env):
    """A file size limit cuts a write short, as a full disk does: the message counts the
    complete rows in the file, and the partial one is taken out."""
    script = ("import resource, signal\n"
              "signal.signal(signal.SIGXFSZ, signal.SIG_IGN)\n"
              "resource.setrlimit(resource.RLIMIT_FSIZE, (6000, 6000))\n"
              "from gpumon.cli import main\n"
              "raise SystemExit(main(['log', '-o', 'run.csv', '--sim', 'busy:2', '-q',"
              " '--interval', '0.05']))\n")
    r = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, capture_output=True,
                       text=True, timeout=60, env=clean_env)
    assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr
    said = int(re.search(r"\((\d+) rows were written before this\)", r.stderr).group(1))
    data = (tmp_path / "run.csv").read_bytes()
    assert data.endswith(b"\n")
    assert said == data.count(b"\n") - 1 == len(_rows(tmp_path / "run.csv"))


# -- rows formatted in bulk: byte for byte what csv.writer writes cell by cell -------------------
def _cell_by_cell(samples, host, diagnoses) -> str:
    """The log's rows as the sink wrote them before: every cell formatted, then csv.writer."""
    from gpumon import csvlog as C
    by_gpu = {g: d for d in diagnoses for g in d.gpus}
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    for s in samples:
        job = host.job_on(s.gpu) if host else None
        row = ([fmt(getattr(s, name)) for name, fmt in C._GPU_FMT]
               + [fmt(getattr(job, name)) if job else "" for name, fmt in C._JOB_FMT]
               + [fmt(getattr(host, name)) if host else "" for name, fmt in C._HOST_FMT]
               + C._verdict_cells(by_gpu.get(s.gpu)))
        w.writerow([c.replace("\0", "") for c in row])     # (a NUL is dropped)
    return buf.getvalue()


def test_bulk_rows_are_csv_writers_byte_for_byte():
    from dataclasses import replace
    from gpumon.csvlog import rows_text
    from gpumon.detect import Detector
    from gpumon.sim import simulate
    det = Detector()
    checked = 0
    for i, tk in enumerate(simulate("rank_data_stall", seconds=40, seed=2, interval=0.5)):
        diagnoses = det.update(tk)
        if i % 3 == 1:              # as NVML gives them: a GPU's samples share all but two cells
            last = {s.gpu: s for s in tk.gpus}
            tk = replace(tk, gpus=tuple(replace(last[s.gpu], time=s.time,
                                                util_gpu_pct=s.util_gpu_pct) for s in tk.gpus))
        host = None if i % 5 == 2 else tk.host
        assert rows_text(tk.gpus, host, diagnoses) == _cell_by_cell(tk.gpus, host, diagnoses)
        checked += bool(diagnoses and tk.gpus)
    assert checked > 20


@pytest.mark.parametrize("odd", ['sim,"x"', "a\nb", "a\rb", "nul\0here", "comma,"])
def test_cells_csv_quotes_are_quoted_as_csv_writer_does(odd, tmp_path):
    from gpumon.csvlog import rows_text
    t = tick(1000.0, gpus=2, source=odd)
    d = Diagnosis("sync_stall", gpus=(0,), cause="imbalance", straggler_gpu=1, confidence=0.8)
    text = rows_text(t.gpus, t.host, [d])
    assert text == _cell_by_cell(t.gpus, t.host, [d])
    d2 = Diagnosis('odd "verdict"', gpus=(1,), cause="a,b")
    assert rows_text(t.gpus, t.host, [d2]) == _cell_by_cell(t.gpus, t.host, [d2])
    if "\r" in odd:                 # (csv.writer leaves a lone CR unquoted: as before)
        return
    path = tmp_path / "odd.csv"
    sink = CsvSink(str(path))
    sink.write(t, [d])
    sink.close()
    rows = list(csv.DictReader(open(path, newline="")))
    assert len(rows) == len(t.gpus) and {r["source"] for r in rows} == {odd.replace("\0", "")}
