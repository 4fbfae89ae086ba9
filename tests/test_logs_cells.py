"""A CSV log's text to columns (logs/table.py read_cells) and its cells to numbers
(logs/values.py), on the core install: numpy and the standard library only. Numbers read by
numpy, every cell at once, must be the doubles Python's float() gives; rows the commas cannot
cut (quoted cells) are cut by the csv module and read like the others."""
import numpy as np
import pytest

from gpumon.logs import read_log, table, values
from gpumon.logs.lines import clean
from gpumon.logs.table import Cells


def _cells(text: str, want):
    lines = clean(text.encode())
    names = table.header(lines)
    got, rows = table.read_cells(lines, names, want,
                                 lambda c: {w: np.array(c[w].texts(), object) for w in want})
    return [got.get(w).tolist() if got.rows else [] for w in want], rows, lines.malformed


def test_cells_are_cut_at_commas_and_trimmed():
    text = "a, b ,c\n 1 ,\t2\t, x y \n3,,\n"
    (a, b, c), rows, bad = _cells(text, ["a", "b", "c"])
    assert (a, b, c) == (["1", "3"], ["2", ""], ["x y", ""])
    assert rows.line_of(np.arange(2)).tolist() == [2, 3] and bad.count == 0


def test_quoted_cells_other_widths_blank_rows_and_repeated_headers():
    text = ('t,util,name\n1,5,"a, b"\n2,6\n , ,\nt,util,name\n3,"7",x\n'
            '4,8,"two\nlines"\n5,9,y\n')
    (t, u, n), rows, bad = _cells(text, ["t", "util", "name"])
    assert t == ["1", "3", "5"] and u == ["5", "7", "9"] and n == ["a, b", "x", "y"]
    assert rows.line_of(np.arange(3)).tolist() == [2, 6, 9]
    assert (bad.count, bad.first_line) == (2, 3)       # the short row, the line break


def test_rows_over_many_blocks_read_as_in_one(monkeypatch):
    body = "".join(f"{k},{k % 7} %,{'  ' * (k % 3)}{k * 0.25} W\n" for k in range(3000))
    text = "t,util,power\n" + body.replace("\n1500,", "\n1500,1,2,3\n1500,", 1)
    whole = _cells(text, ["t", "util", "power"])
    monkeypatch.setattr(table, "BLOCK_BYTES", 512)
    small = _cells(text, ["t", "util", "power"])
    assert whole[0] == small[0] and len(whole[0][0]) == 3000
    assert whole[1].kept.tolist() == small[1].kept.tolist()
    assert (whole[2].count, whole[2].first_line) == (small[2].count, small[2].first_line) \
        == (1, 1502)


def _python_num(text: str):
    return values._num_text(text.strip())


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_numbers_read_at_once_are_the_doubles_float_gives(seed):
    rng = np.random.default_rng(seed)
    texts = []
    for _ in range(4000):
        whole = int(rng.integers(0, 10 ** int(rng.integers(1, 9))))
        frac = "".join(str(d) for d in rng.integers(0, 10, int(rng.integers(0, 8))))
        sign = ["", "-", "+"][int(rng.integers(0, 3))]
        unit = ["", " %", " W", " MiB", " MHz", "W", " kB/s"][int(rng.integers(0, 7))]
        texts.append(f"{sign}{whole}{'.' + frac if frac or rng.random() < 0.1 else ''}{unit}")
    texts += [".5", "5.", "-0", "0.1", "123456789012345", "1234567890123456", "1e5 W",
              "[N/A]", "N/A", "-", "", "[Not Supported]", "nan", "1.2.3", "- 5", "5 W 5", "+",
              "12abc %", "0x10", " 7 \t%", "inf", "9" * 40]
    v, bad = values.num(Cells.of(texts))
    want = [_python_num(t) for t in texts]
    assert np.array_equal(v, np.array([w[0] for w in want]), equal_nan=True)
    assert bad.tolist() == [w[1] for w in want]
    fast, ok = values.decimals(Cells.of(texts), units=True)
    assert ok[:4000].all() and np.array_equal(fast[ok], v[ok])
    assert np.signbit(v[texts.index("-0")])


def test_clock_event_masks_in_hex_or_as_numbers():
    texts = ["0x0000000000000004", "0X20", "0xffffffffffffffff", "5", "[N/A]", "zz", "0x",
             "0x1_0", "0x00000000000000001"]
    v, bad = values.hex_or_num(Cells.of(texts))
    assert v[:4].tolist() == [4.0, 32.0, float(2 ** 64 - 1), 5.0] and np.isnan(v[4:6]).all()
    assert bad.tolist() == [False] * 5 + [True, True, False, False]
    assert v[7] == 16.0 and v[8] == 1.0


def test_an_nvidia_smi_log_reads_on_the_core_install(tmp_path):
    """The reader imports neither pyarrow nor pandas; a quoted name and a wide cell read."""
    p = tmp_path / "q.csv"
    p.write_text("timestamp, index, name, utilization.gpu [%], power.draw [W]\n"
                 '2024/05/01 10:00:00.000, 0,"H100, SXM", 95 %, 300.50 W\n'
                 "2024/05/01 10:00:00.000, 1, H100, 90 %, " + "0" * 60 + "299.25 W\n"
                 "2024/05/01 10:00:01.000, 0, H100, [N/A], 301.00 W\n")
    log = read_log(str(p))
    assert log.samples.gpu.tolist() == [0, 1, 0]
    assert np.array_equal(log.samples.util, [95.0, 90.0, np.nan], equal_nan=True)
    assert log.samples.power.tolist() == [300.5, 299.25, 301.0]


def test_clock_event_masks_of_one_width_read_at_once_as_one_by_one():
    texts = ["0x%016x" % v for v in (0, 4, 2 ** 63, 2 ** 64 - 1, 0x20)]
    texts += ["0x000000000000000g", "1x0000000000000004", "0X00000000000000A0"]
    v, bad = values.hex_or_num(Cells.of(texts))
    want = [values._hex_text(t) for t in texts]
    assert np.array_equal(v, [w[0] for w in want], equal_nan=True)
    assert bad.tolist() == [w[1] for w in want] == [False] * 5 + [True, True, False]


@pytest.mark.parametrize("fmt,unit", [("{:.2f}", " W"), ("{:.0f}", " %"), ("{:.3f}", ""),
                                      ("{:.0f}", " MiB"), ("{:.6f}", " s")])
def test_a_column_of_one_layout_read_at_once_is_the_doubles_float_gives(fmt, unit):
    rng = np.random.default_rng(5)
    vals = rng.random(3000) * 10.0 ** rng.integers(0, 9, 3000)
    texts = [fmt.format(x) + unit for x in vals if len(fmt.format(x)) <= 16]
    want = [float(t[:len(t) - len(unit)]) for t in texts]
    got = values._aligned(Cells.of(texts), True)
    assert got is not None and np.array_equal(got, want)
    assert np.array_equal(values.num(Cells.of(texts))[0], want)
    assert values._aligned(Cells.of(texts + ["[N/A]"]), True) is None
    assert values._aligned(Cells.of(texts + ["-1" + unit]), True) is None


def test_a_floats_own_words_are_values_not_unreadable():
    """"nan", "-nan", "inf" (what C's printf and Python write) read as NaN or infinity in
    every reader; in a time column of epoch seconds they leave the column numbers, and only
    their own rows without a time."""
    v, bad = values.num(Cells.of(["nan", "-nan", "+NaN", "inf", "-inf W", "5"]))
    assert np.array_equal(v, [np.nan, np.nan, np.nan, np.inf, -np.inf, 5.0], equal_nan=True)
    assert not bad.any()
    t, bad, numeric = values.times(Cells.of(["1714557601", "nan", "1714557603.5"]))
    assert numeric and bad.tolist() == [False, True, False] and t[2] == 1714557603.5


_CORE_ONLY = """
import sys
class Block:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("pyarrow", "pandas", "polars", "duckdb"):
            raise ImportError("not on the core install: " + name)
sys.meta_path.insert(0, Block())
from gpumon.logs import read_log
from gpumon.errors import UserError
for p in sys.argv[1:]:
    try:
        log = read_log(p)
        print(p.rsplit("/", 1)[-1], log.kind, len(log.samples.time), log.malformed.count)
    except UserError as e:
        print(p.rsplit("/", 1)[-1], "user_error")
"""


def test_every_fixture_reads_on_the_core_install():
    """Every log under tests/data reads with pyarrow and pandas unimportable, as in process."""
    import os
    import subprocess
    import sys
    data = os.path.join(os.path.dirname(__file__), "data", "analyze")
    paths = sorted(p for p in (os.path.join(data, f) for f in os.listdir(data))
                   if os.path.isfile(p) and not p.endswith(".py"))      # (no __pycache__)
    r = subprocess.run([sys.executable, "-c", _CORE_ONLY, *paths], capture_output=True,
                       text=True, timeout=120, cwd=os.path.dirname(os.path.dirname(__file__)))
    assert r.returncode == 0, r.stderr
    want = []
    for p in paths:
        try:
            log = read_log(p)
            want.append(f"{os.path.basename(p)} {log.kind} {len(log.samples.time)} "
                        f"{log.malformed.count}")
        except Exception:
            want.append(f"{os.path.basename(p)} user_error")
    assert r.stdout.split("\n")[:-1] == want
    unread = {w.split()[0] for w in want if w.endswith(" user_error")}
    assert unread <= {"empty.csv", "named.csv"}     # (named.csv: read with --columns only)
