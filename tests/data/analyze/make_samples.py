"""Writes the sample logs of tests/test_analyze.py from the simulator (run once; the output is
committed so the tests do not depend on the simulator's numbers):

    python tests/data/analyze/make_samples.py
"""
from __future__ import annotations

import datetime as dt
import os
import random

from gpumon.csvlog import CsvSink
from gpumon.sim import simulate

HERE = os.path.dirname(os.path.abspath(__file__))
T0 = 1_705_312_800.0   # 2024-01-15 10:00:00 UTC


def per_second(name, gpus, seconds, seed=3):
    """(time, gpu, mean util, last sample) per GPU per second."""
    for tk in simulate(name, gpus=gpus, seconds=seconds, seed=seed, start_time=T0):
        by = {}
        for s in tk.gpus:
            by.setdefault(s.gpu, []).append(s)
        for g in sorted(by):
            ss = by[g]
            yield tk.time, g, sum(s.util_gpu_pct for s in ss) / len(ss), ss[-1]


def stamp(t):
    return dt.datetime.fromtimestamp(t, dt.timezone.utc).strftime("%Y/%m/%d %H:%M:%S.%f")[:-3]


def write(name, lines):
    with open(os.path.join(HERE, name), "w") as f:
        f.write("\n".join(lines) + "\n")


def main():
    # nvidia-smi --query-gpu=index,timestamp,power.draw,utilization.gpu,memory.used,power.limit
    #   --format=csv -l 1   (fields in an unusual order, values with units)
    lines = ["index, timestamp, power.draw [W], utilization.gpu [%], memory.used [MiB], "
             "power.limit [W]"]
    for t, g, u, s in per_second("data_starvation", 2, 90):
        lines.append(f"{g}, {stamp(t)}, {s.power_w:.2f} W, {u:.0f} %, {s.mem_used_mib:.0f} MiB, "
                     f"{s.power_limit_w:.2f} W")
    write("nvsmi_starved.csv", lines)
    # --format=csv,nounits, with clock event reasons as hex and [N/A] power limit
    lines = ["timestamp, index, utilization.gpu [%], power.draw [W], power.limit [W], "
             "clocks.sm [MHz], clocks.max.sm [MHz], clocks_event_reasons.active"]
    for t, g, u, s in per_second("throttled", 2, 60):
        lines.append(f"{stamp(t)}, {g}, {u:.0f}, {s.power_w:.2f}, [N/A], {s.sm_clock_mhz:.0f}, "
                     f"{s.sm_clock_max_mhz:.0f}, 0x{int(s.clock_events or 0):016x}")
    write("nvsmi_nounits.csv", lines)
    # nvidia-smi dmon (newer driver names; header every 10 samples; no time column)
    head = ["# gpu    pwr  gtemp  mtemp     sm    mem    enc    dec    jpg    ofa   mclk   pclk",
            "# Idx      W      C      C      %      %      %      %      %      %    MHz    MHz"]
    lines = []
    for i, (t, g, u, s) in enumerate(per_second("sync_stall", 2, 60)):
        if i % 20 == 0:
            lines += head
        lines.append(f"  {g:>3} {s.power_w:>6.0f} {s.temp_c:>6.0f}      - {u:>6.0f} "
                     f"{s.util_mem_pct:>6.0f}      0      0      0      0   1593 "
                     f"{s.sm_clock_mhz:>6.0f}")
    write("dmon.log", lines)
    # nvidia-smi dmon -o DT (older driver names)
    lines = []
    for i, (t, g, u, s) in enumerate(per_second("data_starvation", 1, 60)):
        if i % 30 == 0:
            lines += ["#Date       Time        gpu   pwr  temp    sm   mem   enc   dec  mclk  pclk",
                      "#YYYYMMDD   HH:MM:SS    Idx     W     C     %     %     %     %   MHz   MHz"]
        d = dt.datetime.fromtimestamp(t, dt.timezone.utc)
        lines.append(f" {d:%Y%m%d}   {d:%H:%M:%S}    {g:>3} {s.power_w:>5.0f} {s.temp_c:>5.0f} "
                     f"{u:>5.0f} {s.util_mem_pct:>5.0f}     0     0  1593 {s.sm_clock_mhz:>5.0f}")
    write("dmon_dt.log", lines)
    # a plain CSV from a user's own pynvml loop
    lines = ["timestamp,gpu_index,util,power_w"]
    for t, g, u, s in per_second("busy", 2, 60):
        lines.append(f"{t:.3f},{g},{u:.1f},{s.power_w:.1f}")
    write("plain.csv", lines)
    # a gpumon CSV log
    path = os.path.join(HERE, "gpumon.csv")
    if os.path.exists(path):
        os.remove(path)
    sink = CsvSink(path)
    for tk in simulate("rank_data_stall", gpus=2, seconds=40, seed=3, start_time=T0):
        sink.write(tk)
    sink.close()
    # malformed lines: a short line (5), an unreadable value (9), a bad timestamp (12)
    rnd = random.Random(1)
    lines = ["timestamp, index, utilization.gpu [%], power.draw [W]"]
    for t, g, u, s in per_second("busy", 1, 40):
        lines.append(f"{stamp(t)}, {g}, {u:.0f} %, {s.power_w:.2f} W")
    lines[4] = lines[4].rsplit(",", 1)[0]
    lines[8] = f"{stamp(T0 + 8)}, 0, abc %, {rnd.uniform(100, 200):.2f} W"
    lines[11] = f"yesterday, 0, 50 %, 100.00 W"
    write("malformed.csv", lines)
    write("empty.csv", [""])


if __name__ == "__main__":
    main()
