"""nvidia-smi's own screen logged again and again (`nvidia-smi -l 1 > log`, or a loop of
`nvidia-smi >> log`): the layouts of old and new drivers, several screens in one second, the
processes table, N/A, a broken line, and `gpumon analyze` on such a log."""
from __future__ import annotations

import datetime as dt

import numpy as np
import pytest

from gpumon.analyze import analyze_file, read_log, summary
from gpumon.logs import sniff
from gpumon.logs.lines import clean

T0 = dt.datetime(2024, 10, 29, 19, 11, 46)

NEW_HEAD = """+-----------------------------------------------------------------------------------------+
| NVIDIA-SMI 550.54.15              Driver Version: 550.54.15      CUDA Version: 12.4     |
|-----------------------------------------+------------------------+----------------------+
| GPU  Name                 Persistence-M | Bus-Id          Disp.A | Volatile Uncorr. ECC |
| Fan  Temp   Perf          Pwr:Usage/Cap |           Memory-Usage | GPU-Util  Compute M. |
|                                         |                        |               MIG M. |
|=========================================+========================+======================|
"""
NEW_GPU = """|   {g}  NVIDIA L40S                    On  |   00000000:4{g}:00.0 Off |                    0 |
| N/A   53C    P0            {p}W /  350W |   {m}MiB /  46068MiB |     {u}%      Default |
|                                         |                        |                  N/A |
+-----------------------------------------+------------------------+----------------------+
"""
OLD_HEAD = """+-----------------------------------------------------------------------------+
| NVIDIA-SMI 470.57.02    Driver Version: 470.57.02    CUDA Version: 11.4     |
|-------------------------------+----------------------+----------------------+
| GPU  Name        Persistence-M| Bus-Id        Disp.A | Volatile Uncorr. ECC |
| Fan  Temp  Perf  Pwr:Usage/Cap|         Memory-Usage | GPU-Util  Compute M. |
|                               |                      |               MIG M. |
|===============================+======================+======================|
"""
OLD_GPU = """|   {g}  Tesla V100-SXM2...  On   | 00000000:00:1{g}.0 Off |                    0 |
| N/A   41C    P0   {p}W / 300W |  {m}MiB / 16160MiB |     {u}%      Default |
|                               |                      |                  N/A |
+-------------------------------+----------------------+----------------------+
"""
PROCS = """
+-----------------------------------------------------------------------------------------+
| Processes:                                                                              |
|  GPU   GI   CI        PID   Type   Process name                              GPU Memory |
|        ID   ID                                                               Usage      |
|=========================================================================================|
"""
PROC_ROW = "|    {g}   N/A  N/A   {pid}      C   python                                      {m}MiB |\n"


def screen(t: dt.datetime, gpus: list[tuple], old: bool = False) -> str:
    """One screen: ``gpus`` as (index, util %, power W, memory MiB, pid or None)."""
    head, block = (OLD_HEAD, OLD_GPU) if old else (NEW_HEAD, NEW_GPU)
    out = t.strftime("%a %b %d %H:%M:%S %Y") + "       \n" + head
    for g, u, p, m, _ in gpus:
        out += block.format(g=g, u=u, p=p, m=m)
    out += PROCS
    rows = [PROC_ROW.format(g=g, pid=pid, m=m) for g, _, _, m, pid in gpus if pid]
    out += "".join(rows) or "|  No running processes found                                 |\n"
    return out + "+" + "-" * 89 + "+\n"


def write(tmp_path, screens: list[str], name="smi.log"):
    p = tmp_path / name
    p.write_text("".join(screens))
    return str(p)


def test_screens_are_sniffed_and_read_with_their_values(tmp_path):
    gpus = [(0, 93, 305, 11948, 3794277), (1, 0, 32, 0, None)]
    p = write(tmp_path, [screen(T0, gpus)])
    assert sniff(clean(open(p, "rb").read()).head(40)) == "nvidia-smi-screen"
    log = read_log(p)
    s = log.samples
    assert log.kind == "nvidia-smi-screen" and log.malformed.count == 0
    assert s.gpu.tolist() == [0, 1] and s.util.tolist() == [93.0, 0.0]
    assert s.power.tolist() == [305.0, 32.0] and s.power_limit.tolist() == [350.0, 350.0]
    assert s.mem.tolist() == [11948.0, 0.0]
    assert s.has_pid.tolist() == [1.0, 0.0] and log.pids == {0: (3794277,)}
    # Whole-second dates, read as nvidia-smi's CSV stamps are (no zone: as UTC).
    assert s.time[0] == pytest.approx(T0.replace(tzinfo=dt.timezone.utc).timestamp() + 0.5)


def test_screens_of_one_second_spread_evenly_over_it(tmp_path):
    gpus = [(0, 90, 300, 1000, 7)]
    p = write(tmp_path, [screen(T0, gpus)] * 3 + [screen(T0 + dt.timedelta(seconds=1), gpus)])
    log = read_log(p)
    t = log.samples.time - T0.replace(tzinfo=dt.timezone.utc).timestamp()
    assert t.tolist() == pytest.approx([1 / 6, 3 / 6, 5 / 6, 1.5])
    assert any("spread evenly" in n for n in log.notes)


def test_old_driver_layout_and_missing_power(tmp_path):
    text = screen(T0, [(0, 71, 59, 2048, 11)], old=True).replace("59W / 300W", "N/A /  N/A")
    log = read_log(write(tmp_path, [text]))
    s = log.samples
    assert s.util.tolist() == [71.0] and s.mem.tolist() == [2048.0]
    assert np.isnan(s.power[0]) and np.isnan(s.power_limit[0])


def test_a_broken_metrics_line_is_malformed_and_the_rest_read(tmp_path):
    good = screen(T0, [(0, 90, 300, 1000, 7)])
    bad = screen(T0 + dt.timedelta(seconds=1), [(0, 90, 300, 1000, 7)]).replace(
        "|     90%      Default |", "|   ##garbled##     |")
    log = read_log(write(tmp_path, [good, bad, good.replace("19:11:46", "19:11:48")]))
    assert log.malformed.count == 1 and len(log.samples.time) == 2


def run(tmp_path, seconds: int, util) -> dict:
    """A 2-GPU job logged by `nvidia-smi -l 1`: util(t) for both GPUs."""
    out = []
    for k in range(seconds):
        u = util(k)
        out.append(screen(T0 + dt.timedelta(seconds=k),
                          [(g, u, 300 if u > 50 else 90, 30000, 100 + g) for g in (0, 1)]))
    _, tl = analyze_file(write(tmp_path, out))
    return summary(tl)


def test_analyze_reads_a_busy_job_from_screens(tmp_path):
    sm = run(tmp_path, 90, lambda k: 97)
    assert sm["verdict"] == "busy" and sm["gpus"] == [0, 1]


def test_analyze_reads_a_starved_job_from_screens(tmp_path):
    # 2 s bursts between 3 s at 0%, every GPU together, for 90 s.
    sm = run(tmp_path, 90, lambda k: 100 if k % 5 < 2 else 0)
    assert sm["verdict"] == "data_starvation"


def test_mutated_screens_never_raise_more_than_a_user_error(tmp_path):
    """Bytes flipped, cut, repeated and replaced by absurd numbers: each log is read (bad
    lines counted) or refused in one line; nothing else escapes."""
    import random

    from gpumon.errors import UserError
    base = "".join(screen(T0 + dt.timedelta(seconds=k), [(0, 90, 300, 1000, 7),
                                                         (1, 5, 80, 900, None)])
                   for k in range(40)).encode()
    for n in range(40):
        r, d = random.Random(n), bytearray(base)
        for _ in range(r.randint(1, 20)):
            i = r.randrange(len(d))
            op = r.random()
            if op < 0.4:
                d[i] = r.randrange(256)
            elif op < 0.6:
                del d[i:i + r.randint(1, 200)]
            elif op < 0.8:
                d[i:i] = d[r.randrange(len(d)):][:r.randint(1, 300)]
            else:
                d[i:i] = r.choice([b"1" * 40, b"-5", b"1e308", b"N/A", b"999%", b"99999W"])
        p = tmp_path / f"m{n}.log"
        p.write_bytes(bytes(d))
        try:
            analyze_file(str(p))
        except UserError as e:
            assert "\n" not in str(e)


def test_a_gpu_the_driver_lost_is_said_not_counted_malformed(tmp_path):
    """nvidia-smi prints ERR! and 'GPU is lost' for a GPU fallen off the bus (a real RTX
    3070 log, 76 such screens): a note says so, with when; no line is malformed."""
    good = [screen(T0 + dt.timedelta(seconds=k), [(0, 5, 30, 51, None)]) for k in range(3)]
    lost = [screen(T0 + dt.timedelta(seconds=3 + k), [(0, 5, 30, 51, None)]).replace(
        "| N/A   53C    P0            30W /  350W |   51MiB /  46068MiB |     5%      Default |",
        "|ERR!  ERR! ERR!              ERR! / ERR! | GPU is lost          |    ERR!         ERR! |")
        for k in range(2)]
    assert "GPU is lost" in lost[0]
    log = read_log(write(tmp_path, good + lost))
    assert log.malformed.count == 0 and len(log.samples.time) == 3
    [note] = [n for n in log.notes if "GPU is lost" in n]
    assert note.startswith("GPU 0: 'GPU is lost' in 2 screens (19:11:49 to 19:11:50)")
