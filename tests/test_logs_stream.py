"""Issue 22: nvidia-smi logs are read in blocks of rows (logs.table.read_cells) into arrays
allocated once (logs.batches.Columns), so memory follows the batch, not the file. Reading
in many small batches must give exactly what one batch gives, whatever the log holds."""
from __future__ import annotations

import numpy as np
import pytest

from gpumon.logs import batches, read_log, table
from gpumon.logs.lines import clean
from gpumon.logs.log import SAMPLE_COLUMNS, runs

HEAD = ("timestamp, index, name, utilization.gpu [%], memory.used [MiB], power.draw [W], "
        "power.limit [W], clocks.sm [MHz], clocks.max.sm [MHz], clocks_event_reasons.active\n")


def row(t: int, gpu, util="97 %", power="300.50 W", events="0x0000000000000000",
        stamp=None) -> str:
    stamp = stamp or f"2024/01/15 10:{t // 60 % 60:02d}:{t % 60:02d}.{t % 1000:03d}"
    return (f"{stamp}, {gpu}, NVIDIA H100, {util}, 1024 MiB, {power}, 700.00 W, 1980 MHz, "
            f"1980 MHz, {events}\n")


def messy_log() -> str:
    """Every kind of cell the reader treats specially, spread over the whole log."""
    out = [HEAD]
    for t in range(400):
        for g in range(4):
            util, power, events = f"{(t * 7 + g) % 101} %", f"{100 + t % 50}.25 W", "0x0"
            if t % 37 == 3 and g == 1:
                util = "[N/A]"
            if t % 53 == 5 and g == 2:
                power = "[Not Supported]"
            if t % 41 == 7:
                events = "0x0000000000000020"
            if t % 97 == 11 and g == 3:
                util = "12abc %"              # unreadable: a malformed row
            out.append(row(t, g, util, power, events))
        if t == 150:
            out.append("2024/01/15 10:02:30.000, 0, short row\n")   # wrong width
    return "".join(out)


def read_with_block(monkeypatch, path: str, block: int):
    monkeypatch.setattr(table, "BLOCK_BYTES", block)
    return read_log(path)


def same_log(a, b) -> None:
    assert (a.kind, a.rows, a.malformed.count, a.malformed.first_line) == \
        (b.kind, b.rows, b.malformed.count, b.malformed.first_line)
    for name in SAMPLE_COLUMNS:
        x, y = getattr(a.samples, name), getattr(b.samples, name)
        assert (x is None) == (y is None), name
        if x is not None:
            assert x.dtype == y.dtype, name
            np.testing.assert_array_equal(x, y, err_msg=name)


def test_many_batches_read_as_one(tmp_path, monkeypatch):
    p = tmp_path / "messy.csv"
    p.write_text(messy_log())
    whole = read_with_block(monkeypatch, str(p), 1 << 24)
    small = read_with_block(monkeypatch, str(p), 4096)        # ~50 batches
    assert whole.malformed.count >= 5 and whole.malformed.first_line is not None
    assert len(whole.samples.time) > 1500
    same_log(whole, small)


def test_batches_without_gpu_index(tmp_path, monkeypatch):
    """GPUs named by UUID only: codes in order of first appearance over the whole log, not
    per batch (GPU 2 first appears in a later batch)."""
    lines = ["timestamp, uuid, utilization.gpu [%]\n"]
    for t in range(300):
        for g in ((0, 1) if t < 200 else (2, 0, 1)):
            lines.append(f"2024/01/15 10:{t // 60:02d}:{t % 60:02d}.000, GPU-{g}abc, 50 %\n")
    p = tmp_path / "uuid.csv"
    p.write_text("".join(lines))
    whole = read_with_block(monkeypatch, str(p), 1 << 24)
    small = read_with_block(monkeypatch, str(p), 2048)
    same_log(whole, small)
    assert sorted(set(small.samples.gpu.tolist())) == [0, 1, 2]


def test_batches_that_disagree_on_time_read_as_one_column(tmp_path, monkeypatch):
    """Epoch seconds in the first rows and date-times later: a whole column that is not all
    numbers is read as date-times (the epoch rows are malformed), in batches as at once."""
    out = [HEAD]
    for t in range(200):
        stamp = f"{1705312800 + t}" if t < 100 else None
        for g in range(2):
            out.append(row(t, g, stamp=stamp))
    p = tmp_path / "mixed.csv"
    p.write_text("".join(out))
    whole = read_with_block(monkeypatch, str(p), 1 << 24)
    small = read_with_block(monkeypatch, str(p), 2048)
    assert whole.malformed.count == 200
    same_log(whole, small)


def test_read_cells_hands_over_block_by_block(tmp_path, monkeypatch):
    """convert sees several blocks, none the whole log, and every row but the header and the
    short one (counted malformed, at its line)."""
    monkeypatch.setattr(table, "BLOCK_BYTES", 4096)
    text = messy_log()
    lines = clean(text.encode())
    names = table.header(lines)
    seen = []

    def convert(cells):
        seen.append(len(cells[names[3]]))
        return {"util": np.zeros(len(cells[names[3]]))}

    got, rows = table.read_cells(lines, names, [names[3]], convert)
    assert len(seen) > 10 and max(seen) < sum(seen) // 5
    assert got.rows == sum(seen) == text.count("\n") - 2
    short = text.split("\n").index("2024/01/15 10:02:30.000, 0, short row") + 1
    assert (lines.malformed.count, lines.malformed.first_line) == (1, short)
    assert rows.line_of(np.array([0, got.rows - 1])).tolist() == [2, text.count("\n")]


def test_columns_fill_like_concatenate():
    rng = np.random.default_rng(1)
    parts = [rng.random(n) for n in (5, 0, 17, 3)]
    flags = [p > 0.5 for p in parts]
    c = batches.Columns(10)             # fewer rows counted than come: it grows
    for p, f in zip(parts, flags):
        c.put({"v": p, "bad": f}, len(p))
    np.testing.assert_array_equal(c.get("v"), np.concatenate(parts))
    np.testing.assert_array_equal(c.get("bad"), np.concatenate(flags))
    assert c.get("v").dtype == np.float64 and c.get("bad").dtype == bool
    assert c.rows == 25 and c.get("nothing") is None and "v" in c


def test_columns_promote_a_wider_batch():
    c = batches.Columns(4)
    c.put({"v": np.array([1, 2], np.int64)}, 2)
    c.put({"v": np.array([0.5, np.nan])}, 2)
    np.testing.assert_array_equal(c.get("v"), [1.0, 2.0, 0.5, np.nan])


def test_clean_drops_the_lines_with_a_nul_or_not_utf8():
    """A line with a NUL or a byte that is not UTF-8 is malformed; UTF-8 text is kept."""
    data = (b"a,b\n1,2\n3,\x004\n" + "5,\u00e96\n".encode() + b"7,\xff8\n9,10\n") * 50
    got = clean(data)
    assert got.malformed.count == 100 and got.malformed.first_line == 3
    assert got.data == (b"a,b\n1,2\n" + "5,\u00e96\n".encode() + b"9,10\n") * 50
    np.testing.assert_array_equal(got.lineno[:4], [1, 2, 4, 6])


@pytest.mark.parametrize("shuffle", [False, True])
def test_runs_keeps_an_ordered_log_as_it_is(tmp_path, shuffle):
    lines = [HEAD] + [row(t, g) for t in range(120) for g in range(2)]
    if shuffle:
        lines[1:] = lines[1:][::-1]
    p = tmp_path / "run.csv"
    p.write_text("".join(lines))
    log = read_log(str(p))
    parts = list(runs(log, 60.0))
    assert len(parts) == 1
    assert (parts[0] is log) is (not shuffle)
    assert np.all(np.diff(parts[0].samples.time) >= 0)
