"""Rows grouped by GPU (per-GPU logs joined, or a log sorted on its GPU column) are one run
in time order, every GPU kept; a second run of the same GPUs appended stays a run of its own."""
from gpumon.analyze import analyze_file

HEAD = "timestamp, index, utilization.gpu [%], memory.used [MiB]"


def _rows(gpus, seconds, t0=0):
    """nvidia-smi rows, time-major: both GPUs starve (3 s of work, 3 s of nothing)."""
    rows = []
    for k in range(seconds):
        t = t0 + k
        stamp = f"2024/05/01 {t // 3600:02d}:{t // 60 % 60:02d}:{t % 60:02d}.000"
        u = 100 if (k // 3) % 2 == 0 else 0
        rows += [(g, f"{stamp}, {g}, {u} %, 20000 MiB") for g in gpus]
    return rows


def _write(path, rows):
    path.write_text("\n".join([HEAD] + [r for _, r in rows]) + "\n")
    return str(path)


def test_rows_grouped_by_gpu_keep_every_gpu_and_the_verdict(tmp_path):
    rows = _rows((0, 1), 150)
    log, tl = analyze_file(_write(tmp_path / "time.csv", rows))
    glog, gtl = analyze_file(_write(tmp_path / "grouped.csv",
                                    sorted(rows, key=lambda r: r[0])))   # (stable: by time)
    assert sorted({g for d in gtl.segments for g in d.gpus}) == [0, 1]
    assert [(d.verdict, d.gpus) for d in gtl.segments] == [(d.verdict, d.gpus)
                                                          for d in tl.segments]
    assert "data_starvation" in {d.verdict for d in gtl.segments}
    assert any("grouped by GPU" in n for n in glog.notes)
    assert not any("grouped by GPU" in n for n in log.notes)


def test_a_second_run_appended_stays_a_run_of_its_own(tmp_path):
    """The same GPUs logged again, the second run's clock an hour earlier (a file appended
    to on another machine): two runs with a gap between them, not one sorted run."""
    rows = _rows((0, 1), 90, t0=7200) + _rows((0, 1), 90, t0=3600)
    log, tl = analyze_file(_write(tmp_path / "appended.csv", rows))
    assert not any("grouped by GPU" in n for n in log.notes)
    assert tl.gaps


def test_a_gpumon_csv_with_a_byte_order_mark_is_read_as_gpumon_csv(tmp_path):
    """A gpumon CSV saved by an editor that writes a UTF-8 byte order mark first is still
    gpumon's CSV, its host counters read (not a plain log without them)."""
    src = tmp_path / "plain.csv"
    header = ("time,gpu,source,util_gpu_pct,util_mem_pct,mem_used_mib,mem_total_mib,power_w,"
              "power_limit_w")
    rows = [f"{1700000000 + k / 6:.3f},{g},sim,{100 if (k // 18) % 2 else 0},0,20000,81920,"
            f"{300 if (k // 18) % 2 else 90},700" for k in range(6 * 60) for g in (0, 1)]
    text = "\n".join([header] + rows) + "\n"
    src.write_text(text)
    bom = tmp_path / "bom.csv"
    bom.write_bytes(b"\xef\xbb\xbf" + text.encode())
    plain_log, plain_tl = analyze_file(str(src))
    bom_log, bom_tl = analyze_file(str(bom))
    assert plain_log.kind == "gpumon" and bom_log.kind == "gpumon"
    assert [(d.verdict, d.cause) for d in bom_tl.segments] == [(d.verdict, d.cause)
                                                              for d in plain_tl.segments]
