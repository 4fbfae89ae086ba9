"""A log's bytes, from wherever the user points: a file, ``-`` (standard input), a pipe or
FIFO (``/dev/stdin``, ``<(zcat x)``), gzip-compressed or not.

The whole input is read once, front to back, without seeking (a pipe cannot seek), a chunk
at a time (``chunks``): lines.clean_chunks keeps the clean lines of each and drops the rest
as it goes, so blank lines, NULs and a gzip bomb of line breaks cost one chunk, and every
reader then works on the kept lines in memory: a log's size, not its time span, sets what it
costs.
"""
from __future__ import annotations

import os
import sys
import zlib
from typing import BinaryIO, Iterator, Optional

from gpumon.errors import UserError

GZIP_MAGIC = b"\x1f\x8b"


def read_bytes(path: str) -> bytes:
    """The log at ``path`` (``-``: standard input), decompressed when it is gzip."""
    data = _stdin() if path == "-" else _file(path)
    if data[:2] == GZIP_MAGIC:
        data = gunzip(data, path)
    return data


# Bytes read (and decompressed) at once.
CHUNK_BYTES = 1 << 20


def chunks(path: str) -> Iterator[bytes]:
    """The log at ``path`` (``-``: standard input) in chunks of at most CHUNK_BYTES,
    decompressed when it is gzip."""
    f = _stdin_file() if path == "-" else _open(path)
    try:
        first = _read(f, path)
        if first[:2] == GZIP_MAGIC:
            yield from _gunzip_chunks(first, f, path)
            return
        while first:
            yield first
            first = _read(f, path)
    finally:
        if path != "-":
            f.close()


def _stdin_file() -> BinaryIO:
    if sys.stdin is None:
        raise UserError("cannot read standard input: it is closed")
    try:
        return sys.stdin.buffer
    except AttributeError as exc:
        raise UserError(f"cannot read standard input: {exc}") from None


def _open(path: str) -> BinaryIO:
    try:
        f = open(path, "rb")
    except IsADirectoryError:
        raise UserError(f"{path} is a directory, not a log") from None
    except OSError as exc:
        raise UserError(f"cannot read {path}: {exc.strerror or exc}") from None
    if os.path.isdir(path):
        f.close()
        raise UserError(f"{path} is a directory, not a log")
    return f


def _read(f: BinaryIO, path: str) -> bytes:
    try:
        return f.read(CHUNK_BYTES) or b""
    except IsADirectoryError:
        raise UserError(f"{path} is a directory, not a log") from None
    except (OSError, ValueError) as exc:
        what = "standard input" if path == "-" else path
        raise UserError(f"cannot read {what}: {getattr(exc, 'strerror', None) or exc}") from None


def _gunzip_chunks(data: bytes, f: BinaryIO, path: str) -> Iterator[bytes]:
    """gunzip's output a chunk at a time, the compressed bytes read as they are needed."""
    d = zlib.decompressobj(wbits=31)
    produced = False
    while True:
        if not data:
            data = _read(f, path)
            if not data:          # truncated: what was decompressed is kept
                return
        try:
            out = d.decompress(data, CHUNK_BYTES)
        except zlib.error:
            if not produced:
                raise UserError(f"{display_name(path)}: not a readable gzip file") from None
            return
        data = d.unconsumed_tail
        if out:
            produced = True
            yield out
        if d.eof:                 # the next member, if there is one
            data = d.unused_data
            if len(data) < 2:
                data += _read(f, path)
            if data[:2] != GZIP_MAGIC:
                return
            d = zlib.decompressobj(wbits=31)


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
