"""A plain CSV: a utilization column and a time or GPU column, as people's own loops write
them (column names matched loosely, see sniff). Without a GPU column it is one GPU, GPU 0;
without a time column its rows are one second apart."""
from __future__ import annotations

import numpy as np

from gpumon.detect.bins import SampleCols
from gpumon.logs.lines import Lines
from gpumon.logs.log import Log, empty_samples, finish, gpu_index, row_times
from gpumon.logs.sniff import (PLAIN_GPU, PLAIN_LIMIT, PLAIN_MEM, PLAIN_POWER, pick,
                               plain_key, plain_time, plain_util)
from gpumon.logs.table import read_table
from gpumon.logs.values import num, times


def read(lines: Lines, names: list[str], path: str) -> Log:
    keys = [plain_key(h) for h in names]
    at = {"util": plain_util(keys), "time": plain_time(keys), "gpu": pick(keys, PLAIN_GPU),
          "power": pick(keys, PLAIN_POWER), "power_limit": pick(keys, PLAIN_LIMIT),
          "mem": pick(keys, PLAIN_MEM)}
    at = {k: i for k, i in at.items() if i is not None}
    table, body = read_table(lines, names, list(dict.fromkeys(names[i] for i in at.values())))
    if table is None:
        return Log(path, "plain", empty_samples(), malformed=body.malformed)
    n = table.num_rows
    bad = np.zeros(n, bool)

    def col(k, fn=num):
        if k not in at:
            return None
        v, b = fn(table.column(names[at[k]]))
        bad[:] |= b
        return v

    util = col("util")
    t = col("time", times)
    g = col("gpu")
    gpu, bad_gpu = gpu_index(np.zeros(n) if g is None else g)
    bad |= bad_gpu
    notes = [] if "gpu" in at else ["no GPU column: read as one GPU, GPU 0"]
    if t is None:
        t = row_times(gpu, 1.0)
        notes.append("no time column: rows read as 1 s apart")
    samples = SampleCols(t, gpu, util, col("power"), col("power_limit"), None, None, None,
                         col("mem"), None)
    log = Log(path, "plain", samples, None, None, {}, body.malformed, n, notes)
    return finish(log, bad, body.line_of)
