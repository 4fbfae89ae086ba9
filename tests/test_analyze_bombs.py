"""Memory and time of `gpumon analyze` follow the samples a log keeps: never its time span, its
blank bytes, or what an endless pipe sends; running out of memory is one line."""
import gzip
import json
import os
import subprocess
import sys
import tracemalloc

import pytest

from gpumon.analyze import analyze_file
from gpumon.report import to_json, to_text
from gpumon.errors import UserError
from gpumon.logs import lines as L
from gpumon.logs import read_log

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DATA = os.path.join(ROOT, "tests", "data", "analyze")
MIB = 1 << 20


def _traced_peak(fn):
    """(fn's result, the most bytes Python and numpy held at once while it ran)."""
    tracemalloc.start()
    try:
        out = fn()
        return out, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def _write(tmp_path, name, text):
    p = tmp_path / name
    p.write_bytes(text if isinstance(text, bytes) else text.encode())
    return str(p)


def _hourly(tmp_path, hours, step=3600):
    rows = ["timestamp,gpu,util"] + [f"{1767225600 + step * k},0,{k * 7 % 100}"
                                     for k in range(hours)]
    return _write(tmp_path, "hourly.csv", "\n".join(rows) + "\n")


def test_a_month_of_hourly_samples_costs_its_samples_not_its_span(tmp_path):
    # 720 samples over 30 days: binned by the second, 2.6 million bins (~370 MB) before.
    path = _hourly(tmp_path, 720)
    (log, tl), peak = _traced_peak(lambda: analyze_file(path))
    assert peak < 20 * MIB
    assert len(tl.gaps) == 719
    assert [d.verdict for d in tl.segments] == ["insufficient_data"]
    assert "one sample every 3600 s" in tl.segments[0].advice
    text = to_text(log, tl)
    assert "no samples in 719 stretches" in text and "29d23h" in text
    assert len(text.splitlines()) < 15          # the gaps summed up, not listed
    assert len(to_json(tl, log)["gaps"]) == 719


def test_a_sample_a_minute_costs_its_samples_not_its_span(tmp_path):
    # A week at one sample every 59 s (under the 60 s that ends a run): 600,000 bins
    # before; no window of 20 s can hold 3 such samples, so each is a run of its own.
    path = _hourly(tmp_path, 7 * 86400 // 59, step=59)
    (log, tl), peak = _traced_peak(lambda: analyze_file(path))
    assert peak < 30 * MIB
    assert [d.verdict for d in tl.segments] == ["insufficient_data"]
    assert tl.segments[0].advice.startswith("one sample every 59 s is too few to see bursts "
                                            "and gaps (a 12 s window needs 3)")


def test_rows_a_hundred_million_seconds_apart_are_read(tmp_path):
    # "Unable to allocate 13.1 TiB" before.
    rows = ["timestamp,gpu,util"] + [f"{1 + 10 ** 8 * k},0,50" for k in range(1000)]
    path = _write(tmp_path, "far.csv", "\n".join(rows) + "\n")
    (log, tl), peak = _traced_peak(lambda: analyze_file(path))
    assert peak < 20 * MIB and len(tl.gaps) == 999
    assert tl.segments[0].verdict == "insufficient_data"


def test_an_nvidia_smi_log_every_5_minutes_for_days(tmp_path):
    head = "timestamp, index, utilization.gpu [%], memory.used [MiB], power.draw [W]"
    rows = [head]
    for k in range(2 * 288):             # 2 days of 8 GPUs, one poll every 300 s
        m, s = divmod(k * 300, 60)
        h, m = divmod(m, 60)
        d, h = divmod(h, 24)
        rows += [f"2024/05/{1 + d:02d} {h:02d}:{m:02d}:{s:02d}.000, {g}, {k * 7 % 100} %, "
                 f"1000 MiB, 150.00 W" for g in range(8)]
    path = _write(tmp_path, "nvsmi.csv", "\n".join(rows) + "\n")
    (log, tl), peak = _traced_peak(lambda: analyze_file(path))
    assert peak < 30 * MIB
    assert [d.verdict for d in tl.segments] == ["insufficient_data"]
    assert tl.segments[0].gpus == tuple(range(8))


def test_a_log_with_a_few_minutes_without_samples_is_judged_on_either_side(tmp_path):
    rows = ["timestamp,gpu,util,power"]
    for k in list(range(100)) + list(range(190, 300)):    # 90 s without a sample
        rows.append(f"{1700000000 + k},0,{95 if (k // 3) % 2 == 0 else 5},150")
    path = _write(tmp_path, "hole.csv", "\n".join(rows) + "\n")
    log, tl = analyze_file(path)
    assert tl.gaps == [(1700000099.0, 1700000190.0)]
    assert all(d.verdict != "insufficient_data" for d in tl.segments
               if d.end - d.start > 20)


def _base() -> bytes:
    with open(os.path.join(DATA, "nvsmi_starved.csv"), "rb") as f:
        return f.read()


@pytest.mark.parametrize("tail", ["nul", "blank", "crlf blank"])
def test_blank_and_nul_bytes_cost_no_memory(tmp_path, tail):
    pad = {"nul": b"\0" * (24 * MIB), "blank": b"\n" * (24 * MIB),
           "crlf blank": b"\r\n" * (12 * MIB)}[tail]
    path = _write(tmp_path, "padded.csv", _base() + pad)
    log, peak = _traced_peak(lambda: read_log(path))
    assert peak < 16 * MIB
    plain = read_log(os.path.join(DATA, "nvsmi_starved.csv"))
    assert len(log.samples.time) == len(plain.samples.time)
    assert log.malformed.count == (1 if tail == "nul" else 0)


def test_a_gzip_bomb_of_line_breaks_costs_a_chunk(tmp_path):
    path = str(tmp_path / "bomb.csv.gz")
    with gzip.open(path, "wb") as f:
        f.write(_base())
        for _ in range(48):
            f.write(b"\n" * MIB)
    log, peak = _traced_peak(lambda: read_log(path))
    assert peak < 16 * MIB and len(log.samples.time) > 0


def test_lines_are_the_same_however_the_bytes_are_chunked():
    data = (b"a,b\r\n1,2\r\n\r\n\n3,\x004\n" + b"x" * (L.MAX_LINE_BYTES + 5) + b"\n5,6\r"
            + b"\0" * 300 + b"\n7,8\n\n")
    whole = L.clean_chunks([data])
    for size in (1, 2, 3, 7, 64, 1000):
        parts = L.clean_chunks([data[a:a + size] for a in range(0, len(data), size)])
        assert bytes(parts.data) == bytes(whole.data) == b"a,b\n1,2\n5,6\n7,8\n"
        assert list(parts.lineno) == list(whole.lineno) == [1, 2, 7, 9]
        assert (parts.malformed.count, parts.malformed.first_line) == (3, 5)


def test_more_lines_than_memory_allows_stop_with_how_much_was_read():
    endless = (b"1,0,90\n" * 100_000 for _ in range(10_000))
    with pytest.raises(UserError, match=r"<stdin>: stopped after reading \d+ MiB"):
        L.clean_chunks(endless, limit=8 * MIB, name="<stdin>")


_LIMITED = """
import resource, sys
import gpumon.logs, gpumon.analyze, gpumon.logs.table, gpumon.logs.values
with open("/proc/self/status") as f:
    vm = [int(x.split()[1]) * 1024 for x in f if x.startswith("VmSize:")][0]
resource.setrlimit(resource.RLIMIT_AS, (vm + 600 * 2**20, resource.RLIM_INFINITY))
from gpumon.cli import main
sys.argv = ["gpumon", "analyze", "-"]
sys.exit(main())
"""


def test_an_endless_pipe_under_a_memory_limit_is_one_line(tmp_path):
    """`yes 1,0,90 | gpumon analyze -`: MemoryError's traceback before."""
    yes = subprocess.Popen(["yes", "1,0,90"], stdout=subprocess.PIPE)
    try:
        r = subprocess.run([sys.executable, "-c", _LIMITED], stdin=yes.stdout,
                           capture_output=True, cwd=ROOT, timeout=120)
    finally:
        yes.kill()
        yes.wait()
    err = r.stderr.decode()
    assert r.returncode == 1, err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert err.startswith("gpumon: <stdin>: ") and " MiB" in err


def test_running_out_of_memory_while_analysing_is_one_line(tmp_path, monkeypatch):
    import gpumon.analyze as ga

    def boom(log, th):
        raise MemoryError()
    monkeypatch.setattr(ga, "timeline", boom)
    path = os.path.join(DATA, "nvsmi_starved.csv")
    with pytest.raises(UserError, match=r"out of memory analysing its [\d,]+ samples"):
        ga.analyze_file(path)


def test_json_of_a_sparse_log_is_valid(tmp_path):
    log, tl = analyze_file(_hourly(tmp_path, 50))
    json.dumps(to_json(tl, log))


_READ_PEAK = """
import sys
from gpumon.commands.analyze import _reuse_freed_memory
_reuse_freed_memory()
from gpumon.logs import read_log
import gpumon.logs.gpumon_csv, gpumon.logs.table
read_log(sys.argv[2])                      # pools and threads started
def kib(key):
    with open("/proc/self/status") as f:
        return [int(x.split()[1]) for x in f if x.startswith(key + ":")][0]
with open("/proc/self/clear_refs", "w") as f:
    f.write("5")
base = kib("VmRSS")
log = read_log(sys.argv[1])
print(kib("VmHWM") - base, len(log.samples.time))
"""


def test_a_gpumon_csv_is_not_held_as_a_table_and_as_arrays_at_once(tmp_path):
    """Reading gpumon's own CSV took ~5 times its size on top (a whole table of every
    column, then numpy copies of it); read a block at a time, ~3 times at 100 MB (the text,
    the detector's columns, and a few blocks in flight)."""
    head = ("time,gpu,source,util_gpu_pct,util_mem_pct,mem_used_mib,mem_total_mib,power_w,"
            "power_limit_w,sm_clock_mhz,sm_clock_max_mhz,temp_c,pcie_rx_mbps,pcie_tx_mbps,"
            "clock_events,energy_j,pids,main_pid,main_cpu_pct,main_thread_max_pct,"
            "loader_workers,loader_cpu_pct,loader_busy,loader_age_s,cpu_pct,cpu_max_core_pct,"
            "iowait_pct,disk_read_mbps,disk_write_mbps,verdict,cause,straggler_gpu,confidence")
    p = tmp_path / "big.csv"
    with open(p, "w") as f:
        f.write(head + "\n")
        for k in range(90_000):
            t = 1796531649.167 + k / 6
            f.write("".join(
                f"{t:.3f},{g},nvml,{99 - k % 7},40,61440,81920,{324 + g},400,1350,1410,66,"
                f"240.0,0.8,0,{44853716.2 + k:.1f},{40000 + g},{40000 + g},36,32,4,200,0,13,"
                f"15,58,0.0,0.0,0.0,busy,,,0.87\n" for g in range(8)))
    size_kib = os.path.getsize(p) / 1024
    r = subprocess.run([sys.executable, "-c", _READ_PEAK, str(p),
                        os.path.join(DATA, "gpumon.csv")],
                       capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert r.returncode == 0, r.stderr
    grew, n = map(int, r.stdout.split())
    assert n == 720_000
    assert grew < 3.8 * size_kib, (grew / size_kib)
