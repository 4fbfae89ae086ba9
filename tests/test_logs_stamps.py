"""nvidia-smi's fixed-width date-times read from their digits, every stamp at once
(logs/stamps.py), must give the epoch seconds the one-by-one reading gives
(values._stamp_text), and leave every other layout or an impossible date to it."""
import datetime as dt

import numpy as np
import pytest

from gpumon.logs import stamps, values
from gpumon.logs.table import Cells


def _one_by_one(texts):
    return np.array([values._stamp_text(t) for t in texts])


def _stamps(seed, n=3000, digits=3, iso=False):
    rng = np.random.default_rng(seed)
    secs = rng.integers(0, 4_102_444_800, n)            # 1970 to 2100
    secs[:6] = [0, 951_782_400, 951_868_799, 1_709_164_800, 1_709_251_199, 4_102_444_799]
    out = []
    for s in secs.tolist():      # (2000-02-29, 2024-02-29 and the days around them)
        t = dt.datetime.fromtimestamp(s, dt.timezone.utc).strftime(
            "%Y-%m-%dT%H:%M:%S" if iso else "%Y/%m/%d %H:%M:%S")
        if digits:
            t += "." + "".join(str(d) for d in rng.integers(0, 10, digits))
        out.append(t)
    return out


@pytest.mark.parametrize("digits", [0, 1, 3, 6, 9])
@pytest.mark.parametrize("iso", [False, True])
def test_fixed_width_stamps_match_one_by_one(digits, iso):
    texts = _stamps(digits, digits=digits, iso=iso)
    got, ok = stamps.fixed_stamps(Cells.of(texts))
    assert ok.all()
    want = _one_by_one(texts)
    assert not np.isnan(want).any()
    assert np.array_equal(got, want)
    t, bad, numeric = values.times(Cells.of(texts))
    assert np.array_equal(t, want) and not bad.any() and not numeric


@pytest.mark.parametrize("odd", [
    "2024/13/01 00:00:00.000",       # no 13th month
    "2023/02/29 00:00:00.000",       # not a leap year
    "2024/04/31 10:00:00.000",
    "2024/05/01 24:00:00.000",
    "2024/05/01 10:60:00.000",
    "2024/05/01 10:00:60.000",
    "1969/12/31 23:59:59.000",
    "2024/05/01T10-00:00.000",       # separators out of place
    "2024/05/01 10:00:00.12a",
    "2024/05/01 10:00:00,123",
    "2024/05/01 10:00:00Z123",
    "2024/05/01 10:00:0x.123",
    "2024-05-01T10:00:00.5+02:00",
    "2024/5/1 10:00:00",
])
def test_other_layouts_and_impossible_dates_are_read_one_by_one(odd):
    texts = ["2024/05/01 10:00:00.000", odd, "2024/05/01 10:00:02.000"]
    t, ok = stamps.fixed_stamps(Cells.of(texts))
    assert ok.tolist() == [True, False, True]
    got, bad, _ = values.times(Cells.of(texts))
    want = _one_by_one(texts)
    assert np.array_equal(got, want, equal_nan=True)
    assert np.array_equal(bad, np.isnan(want))


def test_stamps_of_different_widths_read_each_at_its_width():
    texts = ["2024/05/01 10:00:01.5", "2024/05/01 10:00:02.25", "2024/05/01 10:00:00."]
    t, ok = stamps.fixed_stamps(Cells.of(texts))
    assert ok.tolist() == [True, True, False]
    assert t[:2].tolist() == [1714557601.5, 1714557602.25]
    got, bad, _ = values.times(Cells.of(texts))
    assert got.tolist() == [1714557601.5, 1714557602.25, 1714557600.0] and not bad.any()
    assert stamps.fixed_stamps(Cells.of([]))[1].tolist() == []


def test_epoch_seconds_only_when_every_cell_is_a_number():
    t, bad, numeric = values.times(Cells.of(["1714557601.5", " 1714557602", "1.7e9"]))
    assert numeric and t.tolist() == [1714557601.5, 1714557602.0, 1.7e9] and not bad.any()
    t, bad, numeric = values.times(Cells.of(["1714557601", "2024/05/01 10:00:02"]))
    assert not numeric and bad.tolist() == [True, False] and t[1] == 1714557602.0


@pytest.mark.parametrize("digits", [0, 6])
def test_iso_and_date_colon_time_stamps_are_the_same_seconds(digits):
    """ISO 8601 (``2024-05-01T10:00:00``) and ``2022-05-22:16:54:15.760601`` (as monitoring
    scripts write it) give the seconds nvidia-smi's layout of the same date-time gives."""
    texts = _stamps(digits + 10, n=500, digits=digits)
    want, ok = stamps.fixed_stamps(Cells.of(texts))
    assert ok.all()
    for date_sep, sep in (("-", "T"), ("-", ":"), ("-", " ")):
        other = [t[:4] + date_sep + t[5:7] + date_sep + t[8:10] + sep + t[11:] for t in texts]
        got, ok = stamps.fixed_stamps(Cells.of(other))
        assert ok.all() and np.array_equal(got, want)
        t, bad, _ = values.times(Cells.of(other))
        assert np.array_equal(t, want) and not bad.any()

