"""DCGM logs: `dcgmi dmon -e ...` output and CSV exports of DCGM fields, read by `analyze`
with what they hold (utilization, power, memory) and the profiling fractions kept aside."""
import math
import time
import subprocess
import sys

import numpy as np
import pytest

from gpumon.analyze import analyze_file
from gpumon.logs import read_log
from gpumon.sim import simulate

# dcgmi dmon's layout (DeviceMonitor.cpp): "#Entity" and "ID" in 10 columns, each field in
# its width + 8, values printed with 3 decimals for doubles, N/A for a blank one, the two
# header lines again every 14 polls.
WIDTH = {"GPUTL": 13, "POWER": 18, "FBUSD": 18, "GRACT": 11, "SMACT": 11, "SMOCC": 11,
         "TENSO": 11, "DRAMA": 11, "SMCLK": 13, "SMMAX": 13, "DVCCTR": 13}
UNIT = {"POWER": " W"}


def dmon_text(polls, fields, every=14, others=()):
    """``polls``: a list of {gpu: {field: value or None}}; ``others``: rows of other
    entities printed after each poll's GPUs (("GPU-I", 1), ...)."""
    head = "#Entity".ljust(10) + "".join(f.ljust(WIDTH[f]) for f in fields)
    units = "ID".ljust(10) + "".join(UNIT.get(f, "").ljust(WIDTH[f]) for f in fields)
    out = [head, units]
    for k, poll in enumerate(polls):
        if k and k % every == 0:
            out += [head, units]
        for g, vals in sorted(poll.items()):
            out.append(_row(f"GPU {g}", [vals.get(f) for f in fields], fields))
        for kind, i in others:
            out.append(_row(f"{kind} {i}", [0.5] * len(fields), fields))
    return "\n".join(out) + "\n"


def _row(entity, vals, fields):
    cells = ["N/A" if v is None else (f"{v:.3f}" if isinstance(v, float) else str(v))
             for v in vals]
    return entity.ljust(10) + "".join(c.ljust(WIDTH[f]) for c, f in zip(cells, fields))


def polls_of(n, gpus=2):
    return [{g: {"GPUTL": 90 + g, "POWER": 300.0 + k, "FBUSD": 61440, "GRACT": 0.9,
                 "SMACT": 0.8, "SMOCC": 0.3, "TENSO": 0.4, "DRAMA": 0.5} for g in range(gpus)}
            for k in range(n)]


FIELDS = ["GPUTL", "POWER", "FBUSD", "GRACT", "SMACT", "SMOCC", "TENSO", "DRAMA"]


def test_dmon_output_reads_every_gpu_row_under_repeated_headers(tmp_path):
    polls = polls_of(30)
    polls[3][1]["GPUTL"] = None                    # N/A: a blank value, not a bad line
    path = tmp_path / "dcgm.log"
    path.write_text(dmon_text(polls, FIELDS, others=[("GPU-I", 1), ("GPU-CI", 2)])
                    + "\n\ndmon was stopped do to receiving a signal\n")
    log = read_log(str(path))
    assert log.kind == "dcgm-dmon" and log.malformed.count == 0
    s = log.samples
    for g in (0, 1):
        m = s.gpu == g
        assert m.sum() == 30
        assert np.array_equal(s.time[m], np.arange(30.0))       # 1 s apart by default
        assert np.array_equal(s.power[m], 300.0 + np.arange(30))
        assert (s.mem[m] == 61440).all()
    assert np.isnan(s.util[(s.gpu == 1) & (s.time == 3)]).all()
    assert np.nanmax(s.util) == 91.0
    assert set(log.gpm) == {"gr_active_ratio", "sm_active_ratio", "sm_occupancy_ratio", "tensor_active_ratio",
                            "dram_active_ratio"}
    assert all(len(v) == len(s.time) for v in log.gpm.values())
    assert (log.gpm["sm_active_ratio"] == 0.8).all() and (log.gpm["dram_active_ratio"] == 0.5).all()
    notes = " ".join(log.notes)
    assert "GPUTL" in notes and "1 s apart" in notes
    assert "60 row(s) of other DCGM entities" in notes


def test_dmon_interval_sets_the_spacing_of_rows(tmp_path):
    path = tmp_path / "dcgm.log"
    path.write_text(dmon_text(polls_of(5), FIELDS))
    log = read_log(str(path), interval=0.1)
    assert np.allclose(log.samples.time[log.samples.gpu == 0], np.arange(5) * 0.1)
    assert "0.1 s apart" in " ".join(log.notes)


def test_without_gputl_utilization_is_gract_as_a_percent(tmp_path):
    """GRACT is a 0-1 fraction: 0.9 is 90 % of the time busy, never 0.9 %."""
    path = tmp_path / "dcgm.log"
    path.write_text(dmon_text(polls_of(4), ["POWER", "GRACT", "SMACT"]))
    log = read_log(str(path))
    assert np.allclose(log.samples.util, 90.0)
    assert np.allclose(log.gpm["gr_active_ratio"], 0.9) and np.allclose(log.gpm["sm_active_ratio"], 0.8)
    assert any("GRACT" in n and "fraction" in n for n in log.notes)


def test_gputl_all_blank_falls_back_to_gract(tmp_path):
    polls = polls_of(4)
    for p in polls:
        for v in p.values():
            v["GPUTL"] = None
    path = tmp_path / "dcgm.log"
    path.write_text(dmon_text(polls, FIELDS))
    log = read_log(str(path))
    assert np.allclose(log.samples.util, 90.0)


def test_malformed_dmon_lines_are_counted_with_their_line_number(tmp_path):
    text = dmon_text(polls_of(4), FIELDS).splitlines()
    text[4] = text[4][:25]                       # a row cut short
    text[6] = text[6].replace("61440", "6x440")  # a cell that is no number
    path = tmp_path / "dcgm.log"
    path.write_text("\n".join(text) + "\n")
    log = read_log(str(path))
    assert log.malformed.count == 2 and log.malformed.first_line == 5
    assert len(log.samples.time) == 6


# -- CSV exports ----------------------------------------------------------------------------

def test_csv_by_short_name_with_microsecond_timestamps(tmp_path):
    t0 = 1_700_000_000_000_000
    rows = ["EntityId,GRACT,FBUSD,TimeStamp"]
    for k in range(10):
        for g in range(2):
            rows.append(f"GPU {g},{0.25 * (g + 1):.3f},{1000 + k},{t0 + k * 1_000_000}")
    path = tmp_path / "dcgm.csv"
    path.write_text("\n".join(rows) + "\n")
    log = read_log(str(path))
    assert log.kind == "dcgm-csv" and log.malformed.count == 0
    s = log.samples
    assert np.allclose(s.time[s.gpu == 1], 1.7e9 + np.arange(10))
    assert np.allclose(s.util[s.gpu == 0], 25.0) and np.allclose(s.util[s.gpu == 1], 50.0)
    assert np.array_equal(s.mem[s.gpu == 0], 1000.0 + np.arange(10))
    assert any("microseconds" in n for n in log.notes)
    assert any("GRACT" in n for n in log.notes)


def test_csv_by_long_name_in_epoch_seconds(tmp_path):
    rows = ["timestamp,gpu,DCGM_FI_DEV_GPU_UTIL,DCGM_FI_DEV_POWER_USAGE,"
            "DCGM_FI_PROF_SM_ACTIVE,DCGM_FI_PROF_PIPE_TENSOR_ACTIVE"]
    for k in range(6):
        rows += [f"{1.7e9 + k:.3f},{g},{70 + g},{250.5},0.6,N/A" for g in range(2)]
    path = tmp_path / "dcgm.csv"
    path.write_text("\n".join(rows) + "\n")
    log = read_log(str(path))
    assert log.kind == "dcgm-csv"
    assert np.allclose(log.samples.util[log.samples.gpu == 1], 71.0)
    assert np.allclose(log.samples.power, 250.5)
    assert np.allclose(log.gpm["sm_active_ratio"], 0.6) and np.isnan(log.gpm["tensor_active_ratio"]).all()
    assert not any("seconds since the epoch" in n for n in log.notes)


def test_csv_rows_of_the_wrong_width_or_entity_are_skipped_and_counted(tmp_path):
    rows = ["EntityId,GPUTL,POWER,TimeStamp", "0,50,100,1700000000", "0,50,1700000001",
            "GPU-I 3,50,100,1700000001", "1,abc,100,1700000001", "1,60,100,1700000002",
            "EntityId,GPUTL,POWER,TimeStamp", "1,61,100,1700000003"]
    path = tmp_path / "dcgm.csv"
    path.write_text("\n".join(rows) + "\n")
    log = read_log(str(path))
    assert log.malformed.count == 2 and log.malformed.first_line == 3
    assert sorted(log.samples.util.tolist()) == [50.0, 60.0, 61.0]
    assert any("other DCGM entities" in n for n in log.notes)


# -- analyze -------------------------------------------------------------------------------

def _starved_polls(seconds=240, gpus=2):
    """One DCGM row per GPU per second, from a simulated data-starved job: GPUTL the mean of
    the second's driver samples, POWER and FBUSD the last."""
    polls, nvsmi = [], []
    for tick in simulate("data_starvation", gpus=gpus, seconds=seconds, seed=2):
        per = {}
        for s in tick.gpus:
            per.setdefault(s.gpu, []).append(s)
        poll = {g: {"GPUTL": round(float(np.mean([s.util_gpu_pct for s in ss]))),
                    "POWER": round(ss[-1].power_w, 3), "FBUSD": round(ss[-1].mem_used_mib)}
                for g, ss in per.items()}
        polls.append(poll)
        nvsmi += [(tick.time, g, v) for g, v in sorted(poll.items())]
    return polls, nvsmi


def test_a_dmon_log_is_judged_as_the_same_readings_in_nvidia_smi_csv(tmp_path):
    polls, rows = _starved_polls()
    dcgm = tmp_path / "dcgm.log"
    dcgm.write_text(dmon_text(polls, ["GPUTL", "POWER", "FBUSD"]))
    nvsmi = tmp_path / "nvsmi.csv"
    t0 = math.floor(rows[0][0])
    nvsmi.write_text("timestamp, index, utilization.gpu [%], power.draw [W], "
                     "memory.used [MiB]\n" + "".join(
                         f"{t - t0:.0f}, {g}, {v['GPUTL']} %, {v['POWER']} W, "
                         f"{v['FBUSD']} MiB\n" for t, g, v in rows))
    _, a = analyze_file(str(dcgm))
    _, b = analyze_file(str(nvsmi))
    got = [(d.verdict, d.cause) for d in a.segments]
    assert got == [(d.verdict, d.cause) for d in b.segments]
    assert got[0] == ("data_starvation", "input_pipeline")


@pytest.mark.parametrize("text", [
    "#Entity   GPUTL\nID\nGPU x     12\n",              # no row readable
    "#Entity   GPUTL\n",                                # a header alone
    "EntityId,GPUTL\n\x00\x01,3\n",
])
def test_unreadable_dcgm_logs_are_one_line_errors(tmp_path, text, clean_env):
    path = tmp_path / "bad.log"
    path.write_text(text)
    r = subprocess.run([sys.executable, "-m", "gpumon", "analyze", str(path)],
                       capture_output=True, text=True, timeout=60, env=clean_env)
    assert r.returncode != 0 and "Traceback" not in r.stderr, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and str(path) in r.stderr


def test_a_quote_left_open_spoils_its_own_line_only(tmp_path):
    rows = ["EntityId,GPUTL,TimeStamp", '0,"50,1700000000', "0,51,1700000001",
            "0,52,1700000002"]
    path = tmp_path / "dcgm.csv"
    path.write_text("\n".join(rows) + "\n")
    log = read_log(str(path))
    assert log.malformed.count == 1 and log.malformed.first_line == 2
    assert log.samples.util.tolist() == [51.0, 52.0]


def test_a_log_of_mig_instances_alone_reads_them_as_gpus(tmp_path):
    """As a script logging `dcgmi dmon -e 1001,252 -i i:0` writes it: instance id, profile,
    GRACT, FBUSD, epoch seconds."""
    rows = ["EntityId,Profile,GRACT,FBUSD,TimeStamp"]
    rows += [f"GPU-I {i},1g.10gb,0.{i + 4},{900 + k},{1700000000 + k}"
             for k in range(8) for i in (1, 2)]
    path = tmp_path / "dcgm.csv"
    path.write_text("\n".join(rows) + "\n")
    log = read_log(str(path))
    assert sorted(set(log.samples.gpu.tolist())) == [1, 2]
    assert np.allclose(log.samples.util[log.samples.gpu == 2], 60.0)
    assert any("MIG GPU instances (GPU-I) read as GPUs" in n for n in log.notes)


def test_clock_fields_and_event_reasons_are_read(tmp_path):
    fields = ["GPUTL", "POWER", "SMCLK", "SMMAX", "DVCCTR"]
    polls = [{0: {"GPUTL": 99, "POWER": 400.0, "SMCLK": 1100, "SMMAX": 1980, "DVCCTR": 64}}
             for _ in range(3)]
    path = tmp_path / "dcgm.log"
    path.write_text(dmon_text(polls, fields))
    s = read_log(str(path)).samples
    assert (s.clock == 1100).all() and (s.clock_max == 1980).all() and (s.events == 64).all()


@pytest.mark.parametrize("stamp", [lambda t: f"{t:.3f}",
                                   lambda t: time.strftime("%Y-%m-%d %H:%M:%S",
                                                           time.gmtime(t))])
def test_dmon_lines_stamped_in_a_pipe_keep_their_times(tmp_path, stamp):
    """`dcgmi dmon ... | while read l; do echo "$(date +%s.%N) $l"; done`, or `| ts`."""
    text = dmon_text(polls_of(20), FIELDS).splitlines()
    t0, out, k = 1_700_000_000, [], 0
    for line in text:
        if line.startswith("GPU 0"):
            k += 1
        out.append(f"{stamp(t0 + 2 * k)} {line}")
    path = tmp_path / "dcgm.log"
    path.write_text("\n".join(out) + "\n")
    log = read_log(str(path))
    assert log.malformed.count == 0 and len(log.samples.time) == 40
    assert np.array_equal(log.samples.time[log.samples.gpu == 1], t0 + 2.0 * np.arange(1, 21))
    assert not any("apart" in n for n in log.notes)


def test_a_csv_without_an_entity_column_is_one_gpu_and_says_so(tmp_path):
    path = tmp_path / "dcgm.csv"
    path.write_text("TimeStamp,GPUTL\n" + "".join(f"{1700000000 + k},{50 + k}\n"
                                                 for k in range(5)))
    log = read_log(str(path))
    assert (log.samples.gpu == 0).all() and log.samples.util.tolist() == [50, 51, 52, 53, 54]
    assert "no entity (GPU) column: read as one GPU, GPU 0" in log.notes


def test_gpus_named_by_uuid_are_numbered_by_first_appearance(tmp_path):
    uuids = ["GPU-34bf77d1-c686-6821-79a8-32d326c5039c", "GPU-f5046fa5-3db4-45e8-870a-dc1376becaa5"]
    rows = ["timestamp,gpu,DCGM_FI_DEV_GPU_UTIL"]
    rows += [f"{1700000000 + k},{u},{40 + 10 * i}" for k in range(4) for i, u in
             enumerate(reversed(uuids))]
    path = tmp_path / "dcgm.csv"
    path.write_text("\n".join(rows) + "\n")
    log = read_log(str(path))
    assert log.malformed.count == 0
    assert (log.samples.util[log.samples.gpu == 0] == 40).all()     # (f5046fa5 came first)
    assert (log.samples.util[log.samples.gpu == 1] == 50).all()
    assert any("UUID" in n for n in log.notes)
