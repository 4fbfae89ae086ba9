"""Writes the sample logs of tests/test_logs_columns.py (commented headers, column names outside
the known ones, whitespace tables with a banner, quoted cells cut at a line break) from the
simulator (run once; the output is committed):

    python tests/data/analyze/make_headers.py
"""
from __future__ import annotations

import datetime as dt
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_samples import T0, per_second, write  # noqa: E402


def by_time(rows):
    """(time, [(gpu, util, sample) of each GPU]) in time order."""
    out: dict = {}
    for t, g, u, s in rows:
        out.setdefault(t, []).append((g, u, s))
    return sorted(out.items())


def main():
    # a monitoring script's CSV: its own comment lines, the header in a comment, a column per
    # GPU per field (GPU prefix and unit in each name), date:time stamps with microseconds
    names = ["timestamp"] + [f"{g} {f}" for g in (0, 1)
                             for f in ("gpu_util %", "mem_used MiB", "power_draw W")]
    lines = ["# gpu_monitor.py v0.3 on node17 (2 GPUs)", "# interval 1.0 s",
             "# " + ",".join(names)]
    for t, gs in by_time(per_second("data_starvation", 2, 90)):
        d = dt.datetime.fromtimestamp(t + 0.760601, dt.timezone.utc)
        cells = [d.strftime("%Y-%m-%d:%H:%M:%S.%f")]
        for g, u, s in gs:
            cells += [f"{u:.1f}", f"{s.mem_used_mib:.0f}", f"{s.power_w:.2f}"]
        lines.append(",".join(cells))
    write("commented.csv", lines)
    # a training script's own CSV: seconds since its start, names outside gpumon's list
    lines = ["elapsed_sec,gpu_util_pct,board_watts"]
    for t, g, u, s in per_second("data_starvation", 1, 90):
        lines.append(f"{t - T0:.1f},{u:.2f},{s.power_w:.1f}")
    write("elapsed.csv", lines)
    # names nothing recognises: read with --columns wall=...,sm_activity=...
    lines = ["wall,card,sm_activity,board"]
    for t, g, u, s in per_second("data_starvation", 2, 90):
        lines.append(f"{t:.3f},{g},{u:.1f},{s.power_w:.1f}")
    write("named.csv", lines)
    # what a script printed to its terminal, saved: title, rule, header with units, numbers
    lines = ["GPU monitor: resnet50 on node17 (GPU 0)", "=" * 52,
             "  time (s)   GPU util (%)   mem used (MiB)   power (W)",
             "  --------   ------------   --------------   ---------"]
    for k, (t, g, u, s) in enumerate(per_second("data_starvation", 1, 90)):
        lines.append(f"  {t - T0:8.1f}   {u:12.1f}   {s.mem_used_mib:14.0f}   {s.power_w:9.1f}")
    write("banner.txt", lines)
    # a script's CSV whose last cell held nvidia-smi's whole answer: the first GPU's value,
    # a line break, the second GPU's
    lines = ["time,util"]
    for t, gs in by_time(per_second("data_starvation", 2, 90)):
        (_, u0, _), (_, u1, _) = gs
        lines.append(f'{t:.3f},"{u0:.2f}\n{u1:.0f}"')
    write("cut.csv", lines)


if __name__ == "__main__":
    main()
