"""`gpumon log --format jsonl`: a write cut short leaves no cut object, --append never glues a
line onto a partial one, and neither format's --append writes into a log of the other."""
import json
import re
import subprocess
import sys

import pytest

from gpumon.csvlog import COLUMNS, CsvSink
from gpumon.errors import UserError
from gpumon.jsonlog import JsonlSink
from samples_util import tick


def _lines(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_a_short_write_takes_the_cut_line_out_and_counts_the_whole_ones(tmp_path, clean_env):
    """A file size limit cuts a write short, as a full disk does."""
    script = ("import resource, signal\n"
              "signal.signal(signal.SIGXFSZ, signal.SIG_IGN)\n"
              "resource.setrlimit(resource.RLIMIT_FSIZE, (6000, 6000))\n"
              "from gpumon.cli import main\n"
              "raise SystemExit(main(['log', '-o', 'run.jsonl', '--format', 'jsonl', '--sim',"
              " 'busy:2', '-q', '--interval', '0.05']))\n")
    r = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, capture_output=True,
                       text=True, timeout=60, env=clean_env)
    assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr
    assert "disk full" in r.stderr or "File too large" in r.stderr, r.stderr
    said = int(re.search(r"\((\d+) lines were written before this\)", r.stderr).group(1))
    data = (tmp_path / "run.jsonl").read_bytes()
    assert data.endswith(b"\n")
    assert said == data.count(b"\n") == len(_lines(tmp_path / "run.jsonl")) > 0


def test_append_cuts_a_partial_last_line_first(tmp_path):
    path = tmp_path / "run.jsonl"
    sink = JsonlSink(str(path), source="sim")
    sink.write(tick(1000.0), [])
    sink.close()
    partial = b'{"time":1001.0,"local":"2026-'
    with open(path, "ab") as f:
        f.write(partial)
    sink = JsonlSink(str(path), source="sim", append=True)
    sink.write(tick(1002.0), [])
    sink.close()
    assert sink.cut == len(partial)
    assert [obj["time"] for obj in _lines(path)] == [1000.0, 1002.0]


def test_append_to_a_file_of_one_partial_line_starts_it_again(tmp_path):
    """The first write of a log was cut short: nothing whole to keep."""
    path = tmp_path / "run.jsonl"
    path.write_bytes(b'{"time":1000.0,"local":"20')
    sink = JsonlSink(str(path), source="sim", append=True)
    sink.write(tick(1001.0), [])
    sink.close()
    assert [obj["time"] for obj in _lines(path)] == [1001.0]


def test_jsonl_append_refuses_a_csv_log(tmp_path):
    path = tmp_path / "run.csv"
    sink = CsvSink(str(path))
    sink.write(tick(1000.0))
    sink.close()
    before = path.read_bytes()
    with pytest.raises(UserError) as err:
        JsonlSink(str(path), source="sim", append=True)
    assert str(err.value).startswith(f"{path} is a CSV log (")
    assert "--format csv --append" in str(err.value) and "\n" not in str(err.value)
    assert path.read_bytes() == before


def test_csv_append_refuses_a_jsonl_log(tmp_path):
    path = tmp_path / "run.jsonl"
    sink = JsonlSink(str(path), source="sim")
    sink.write(tick(1000.0), [])
    sink.close()
    before = path.read_bytes()
    with pytest.raises(UserError) as err:
        CsvSink(str(path), append=True)
    assert str(err.value).startswith(f"{path} is a JSON-lines log (")
    assert "--format jsonl --append" in str(err.value)
    assert path.read_bytes() == before


@pytest.mark.parametrize("text", [b"a,b\n1,2\n", b"[1, 2]\n", b'{"a": 1}\n', b"\n", b"hello"])
def test_jsonl_append_refuses_what_is_not_gpumons(tmp_path, text):
    path = tmp_path / "other.jsonl"
    path.write_bytes(text)
    with pytest.raises(UserError, match="not a JSON-lines log of gpumon's"):
        JsonlSink(str(path), source="sim", append=True)
    assert path.read_bytes() == text


def test_the_command_refuses_the_other_format_in_one_line(tmp_path, clean_env):
    path = tmp_path / "run.csv"
    path.write_text(",".join(COLUMNS) + "\n")
    r = subprocess.run([sys.executable, "-m", "gpumon", "log", "-o", str(path), "--format",
                        "jsonl", "--append", "--sim", "busy:1", "-n", "1"],
                       capture_output=True, text=True, timeout=60, env=clean_env, cwd=tmp_path)
    assert r.returncode == 1 and r.stderr.count("\n") == 1, r.stderr
    assert r.stderr.startswith(f"gpumon: {path} is a CSV log")
    assert path.read_text() == ",".join(COLUMNS) + "\n"
