"""A log's bytes, from wherever the user points: a file, ``-`` (standard input), a pipe or
FIFO (``/dev/stdin``, ``<(zcat x)``), gzip-compressed or not.

The whole input is read once, front to back, without seeking (a pipe cannot seek), so every
reader works on bytes in memory: a log's size, not its time span, sets what it costs.
"""
from __future__ import annotations

import sys
import zlib

from gpumon.errors import UserError

GZIP_MAGIC = b"\x1f\x8b"


def read_bytes(path: str) -> bytes:
    """The log at ``path`` (``-``: standard input), decompressed when it is gzip."""
    data = _stdin() if path == "-" else _file(path)
    if data[:2] == GZIP_MAGIC:
        data = gunzip(data, path)
    return data


def display_name(path: str) -> str:
    return "<stdin>" if path == "-" else path


def _stdin() -> bytes:
    try:
        return sys.stdin.buffer.read()
    except (OSError, AttributeError, ValueError) as exc:
        raise UserError(f"cannot read standard input: {exc}") from None


def _file(path: str) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read()
    except IsADirectoryError:
        raise UserError(f"{path} is a directory, not a log") from None
    except MemoryError:
        raise UserError(f"{path}: too large to read into memory") from None
    except OSError as exc:
        raise UserError(f"cannot read {path}: {exc.strerror or exc}") from None


def gunzip(data: bytes, path: str) -> bytes:
    """Every gzip member in ``data``, decompressed; a truncated or corrupt end keeps what came
    before it (a log still being written, a download cut short)."""
    out = []
    while data[:2] == GZIP_MAGIC:
        d = zlib.decompressobj(wbits=31)
        try:
            out.append(d.decompress(data))
        except zlib.error:
            if not out:
                raise UserError(f"{display_name(path)}: not a readable gzip file") from None
            break
        if not d.eof:          # truncated: what was decompressed is kept
            break
        data = d.unused_data
    return b"".join(out)
