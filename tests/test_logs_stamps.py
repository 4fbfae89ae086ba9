"""nvidia-smi's fixed-width date-times read from their digits (logs/stamps.py) must give the
epoch seconds Arrow's strptime path gives (values._parse_times), and leave every other
layout or an impossible date to it."""
import datetime as dt

import numpy as np
import pytest

pa = pytest.importorskip("pyarrow")

from gpumon.logs import stamps, values  # noqa: E402
from gpumon.logs.arrow import str_array  # noqa: E402


def _arrow_path(texts, monkeypatch):
    with monkeypatch.context() as m:
        m.setattr(values, "fixed_stamps", lambda s: None)
        return values._parse_times(str_array(texts))


def _stamps(seed, n=3000, digits=3):
    rng = np.random.default_rng(seed)
    secs = rng.integers(0, 4_102_444_800, n)            # 1970 to 2100
    secs[:6] = [0, 951_782_400, 951_868_799, 1_709_164_800, 1_709_251_199, 4_102_444_799]
    out = []
    for s in secs.tolist():      # (2000-02-29, 2024-02-29 and the days around them)
        t = dt.datetime.fromtimestamp(s, dt.timezone.utc).strftime("%Y/%m/%d %H:%M:%S")
        if digits:
            t += "." + "".join(str(d) for d in rng.integers(0, 10, digits))
        out.append(t)
    return out


@pytest.mark.parametrize("digits", [0, 1, 3, 6, 9])
def test_fixed_width_stamps_match_strptime(digits, monkeypatch):
    texts = _stamps(digits, digits=digits)
    got = stamps.fixed_stamps(str_array(texts))
    assert got is not None
    want, bad = _arrow_path(texts, monkeypatch)
    assert not bad.any()
    assert np.array_equal(got, want)
    assert got.dtype == want.dtype
    t, b = values._parse_times(str_array(texts))
    assert np.array_equal(t, want) and not b.any()


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
])
def test_other_layouts_and_impossible_dates_are_left_to_strptime(odd, monkeypatch):
    texts = ["2024/05/01 10:00:00.000", odd, "2024/05/01 10:00:02.000"]
    assert stamps.fixed_stamps(str_array(texts)) is None
    got = values._parse_times(str_array(texts))
    want = _arrow_path(texts, monkeypatch)
    assert np.array_equal(got[0], want[0], equal_nan=True)
    assert np.array_equal(got[1], want[1])


@pytest.mark.parametrize("digits", [0, 6])
def test_iso_and_date_colon_time_stamps_are_the_same_seconds(digits, monkeypatch):
    """ISO 8601 (``2024-05-01T10:00:00``) and ``2022-05-22:16:54:15.760601`` (as monitoring
    scripts write it) give the seconds nvidia-smi's layout of the same date-time gives."""
    texts = _stamps(digits + 10, n=500, digits=digits)
    want = stamps.fixed_stamps(str_array(texts))
    for date_sep, sep in (("-", "T"), ("-", ":"), ("-", " ")):
        other = [t[:4] + date_sep + t[5:7] + date_sep + t[8:10] + sep + t[11:] for t in texts]
        assert np.array_equal(stamps.fixed_stamps(str_array(other)), want)
        t, bad = values.times(str_array(other))
        assert np.array_equal(t, want) and not bad.any()
    iso = [t.replace("/", "-").replace(" ", "T") for t in texts]
    assert np.array_equal(_arrow_path(iso, monkeypatch)[0], want)


def test_stamps_of_different_widths_or_with_nulls_are_left_to_strptime():
    assert stamps.fixed_stamps(str_array(["2024/05/01 10:00:00.1",
                                          "2024/05/01 10:00:00.12"])) is None
    assert stamps.fixed_stamps(str_array(["2024/05/01 10:00:00."])) is None
    assert stamps.fixed_stamps(pa.array(["2024/05/01 10:00:00", None])) is None
    assert stamps.fixed_stamps(str_array([])) is None
    sliced = str_array(["x", "2024/05/01 10:00:01.500", "2024/05/01 10:00:02.250"]).slice(1)
    assert stamps.fixed_stamps(sliced).tolist() == [1714557601.5, 1714557602.25]
    large = pa.array(["2024/05/01 10:00:01.500"], pa.large_string())
    assert stamps.fixed_stamps(large).tolist() == [1714557601.5]
