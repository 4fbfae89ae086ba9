"""pyarrow for the log readers: imported here only, lazily (the monitor never loads it), and
moved to and from numpy through Arrow's buffers rather than pyarrow's pandas bridge."""
from __future__ import annotations

import contextlib
from typing import Iterator, Optional

import numpy as np

from gpumon.errors import UserError

_MODULES: Optional[tuple] = None
# While a log is read (reading_pool): whether Arrow should allocate from jemalloc, and the
# default pool to put back once it has.
_READING = False
_DEFAULT_POOL = None


def pa_modules():
    """(pyarrow, its compute kernels, pyarrow.csv), imported once."""
    global _MODULES
    if _MODULES is None:
        try:
            import pyarrow as pa
            import pyarrow.csv as pcsv
        except ImportError:
            raise UserError("gpumon analyze needs pyarrow, which this install left out: "
                            "pip install pyarrow") from None
        try:
            from gpumon.logs.compute import Compute
            pc = Compute()
        except (ImportError, AttributeError):
            import pyarrow.compute as pc
        _MODULES = (pa, pc, pcsv)
        if _READING:
            _use_jemalloc()
    return _MODULES


@contextlib.contextmanager
def reading_pool() -> Iterator[None]:
    """Arrow's allocations inside the block from its jemalloc pool, where pyarrow has one,
    and the memory that pool keeps from freed arrays handed back to the system at the end
    (its allocator holds on to it for reuse, which the analysis after reading never does).

    pyarrow's default pool, mimalloc, asks for transparent huge pages on its arena; where
    the kernel then compacts memory to find a free 2 MiB page on the fault (the same
    ``defrag = madvise`` default as in memory.small_pages), reading a day-long log spent
    0.2-0.3 s in the kernel on the development VM, against ~0.06 s in jemalloc's pages.
    pyarrow is not imported for this: the pool is chosen when the readers import it. (Only
    the allocator changes: every buffer frees into the pool it came from, and a reader in
    another thread at worst allocates from the other pool.)"""
    global _READING
    _READING = True
    if _MODULES is not None:
        _use_jemalloc()
    try:
        yield
    finally:
        _READING = False
        _put_back()


def _use_jemalloc() -> None:
    global _DEFAULT_POOL
    pa = _MODULES[0]
    if _DEFAULT_POOL is not None:
        return
    try:
        pool = pa.jemalloc_memory_pool()
    except (NotImplementedError, AttributeError):    # (a build without jemalloc)
        return
    _DEFAULT_POOL = pa.default_memory_pool()
    pa.set_memory_pool(pool)


def _put_back() -> None:
    """Release what the pool used while reading keeps, and restore the default pool."""
    global _DEFAULT_POOL
    if _MODULES is None:
        return
    pa = _MODULES[0]
    pa.default_memory_pool().release_unused()
    if _DEFAULT_POOL is not None:
        pa.set_memory_pool(_DEFAULT_POOL)
        _DEFAULT_POOL = None


def pc():
    return pa_modules()[1]


# Arrow -> numpy and numpy -> Arrow without pyarrow's pandas bridge: pyarrow imports pandas
# (when installed) the first time it converts to or from Python or numpy objects (to_numpy,
# pa.array, pa.scalar, a Python value as a compute argument), and that import alone costs
# more than reading a day-long log. Readers therefore move data through Arrow buffers.
def to_np(a) -> np.ndarray:
    """An Arrow array (or chunks of one) of numbers or booleans as a numpy array of its own,
    nulls as NaN (numbers; integers then become floats), as ``to_numpy(zero_copy_only=False)``
    gives them."""
    if hasattr(a, "chunks"):
        if a.num_chunks > 1 and _plain(a.type):     # joined once, by numpy
            return np.concatenate([np1(c, copy=False) for c in a.chunks])
        a = a.combine_chunks()
    if not _plain(a.type):
        return a.to_numpy(zero_copy_only=False)
    return np1(a, copy=True)


def _plain(t) -> bool:
    """Numbers and booleans, which np1 reads from Arrow's buffers."""
    pa = pa_modules()[0]
    return pa.types.is_boolean(t) or ((pa.types.is_integer(t) or pa.types.is_floating(t))
                                      and not pa.types.is_float16(t))


def np1(a, copy: bool) -> np.ndarray:
    """to_np of one Array of _plain type (``copy=False``: may be a view of Arrow's memory)."""
    pa = pa_modules()[0]
    n, off, t = len(a), a.offset, a.type
    if pa.types.is_boolean(t):
        if a.null_count:
            return a.to_numpy(zero_copy_only=False)   # objects with None, as ever (rare)
        return _bits(a.buffers()[1], off, n)
    kind = "f" if pa.types.is_floating(t) else "i" if pa.types.is_signed_integer(t) else "u"
    dt = np.dtype(f"{kind}{t.bit_width // 8}")
    if n == 0:
        return np.zeros(0, dt if not a.null_count else np.float64)
    v = np.frombuffer(a.buffers()[1], dtype=dt, count=n, offset=off * dt.itemsize)
    if a.null_count:
        v = v.astype(np.float64)
        v[~_bits(a.buffers()[0], off, n)] = np.nan
    elif copy:
        v = v.copy()
    return v


def _bits(buf, off: int, n: int) -> np.ndarray:
    """Arrow's bit-packed booleans (validity or values) as a numpy bool array."""
    return np.unpackbits(np.frombuffer(buf, np.uint8), count=off + n,
                         bitorder="little")[off:].astype(bool)


def arrow_mask(m: np.ndarray):
    """A numpy bool array as an Arrow boolean array."""
    pa = pa_modules()[0]
    return pa.BooleanArray.from_buffers(
        pa.bool_(), len(m), [None, pa.py_buffer(np.packbits(m, bitorder="little").tobytes())])


def str_array(words) -> object:
    """Python strings as an Arrow string array."""
    pa = pa_modules()[0]
    data = [w.encode() for w in words]
    offsets = np.cumsum([0] + [len(d) for d in data]).astype(np.int32)
    return pa.StringArray.from_buffers(len(data), pa.py_buffer(offsets.tobytes()),
                                       pa.py_buffer(b"".join(data)))


def fill(a, value: bool):
    """pc.fill_null(a, value) for a boolean array (without making a Python scalar)."""
    pc = pa_modules()[1]
    return pc.or_kleene(a, pc.is_null(a)) if value else pc.and_kleene(a, pc.is_valid(a))


def nulls_where(mask, a):
    """``a`` with nulls where ``mask`` is true (pc.if_else(mask, None, a))."""
    pa, pc, _ = pa_modules()
    return pc.if_else(mask, pa.nulls(len(a), a.type), a)


def text_matrix(s, max_width: int) -> Optional[np.ndarray]:
    """The bytes of an Arrow text array (no nulls) as a (rows, width) view, when every text is
    as wide as the others and at most ``max_width`` bytes; None otherwise."""
    pa = pa_modules()[0]
    if s.null_count or len(s) == 0 or not (pa.types.is_string(s.type)
                                           or pa.types.is_large_string(s.type)):
        return None
    off_t = np.dtype(np.int64 if pa.types.is_large_string(s.type) else np.int32)
    _, offs, data = s.buffers()
    o = np.frombuffer(offs, off_t, count=len(s) + 1, offset=s.offset * off_t.itemsize)
    width = int(o[1] - o[0])
    if not 0 < width <= max_width or not (np.diff(o) == width).all():
        return None
    return np.frombuffer(data, np.uint8, count=width * len(s), offset=int(o[0])).reshape(
        len(s), width)
