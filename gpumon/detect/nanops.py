"""Exact stand-ins for numpy's NaN helpers, without their Python-level checks (the live
detector calls them hundreds of times a second on (GPUs, 1) arrays)."""
from __future__ import annotations

import numpy as np

_BIG = np.finfo(np.float64).max


def nan_to_num(a: np.ndarray, nan: float = 0.0) -> np.ndarray:
    """np.nan_to_num(a, nan=nan) for float64 arrays: NaN -> nan, +-inf -> +-largest float."""
    out = np.where(np.isnan(a), nan, a)
    np.minimum(out, _BIG, out=out)
    np.maximum(out, -_BIG, out=out)
    return out


def nanmean(a: np.ndarray, axis: int = 0) -> np.ndarray:
    """np.nanmean(a, axis) (NaN where all are NaN; call under np.errstate(invalid="ignore"))."""
    miss = np.isnan(a)
    return np.where(miss, 0.0, a).sum(axis=axis) / (~miss).sum(axis=axis)


def div(a: np.ndarray, b) -> np.ndarray:
    """a / b where b > 0, else NaN (call under np.errstate(all="ignore")); ``a`` or ``b`` an
    array."""
    q = np.true_divide(a, b)
    np.copyto(q, np.nan, where=b <= 0)     # (b NaN: the quotient is NaN already)
    return q


def throttle_share(therm: np.ndarray, pcap: np.ndarray, hws: np.ndarray) -> np.ndarray:
    """np.fmax(np.fmax(nan_to_num(therm), nan_to_num(pcap)), nan_to_num(hws)) for shares
    (never negative): the largest known one, 0 where none is known."""
    return nan_to_num(np.fmax(np.fmax(therm, pcap), hws))
