"""Bytes in: a trace file as a stream of decompressed chunks, gzip or plain by magic number."""
from __future__ import annotations

import zlib
from pathlib import Path
from typing import Iterator

from kernel_advisor.errors import UserInputError

GZIP_RATIO = 15  # NB: kineto JSON compresses 15-20x; only used to guess the size up front
READ_BYTES = 1 << 20  # compressed bytes per read


def likely_json_bytes(path: Path) -> int:
    with _open(path) as f:
        gzipped = f.read(2) == b"\x1f\x8b"
    return path.stat().st_size * (GZIP_RATIO if gzipped else 1)


def decompressed_chunks(path: Path) -> Iterator[bytes]:
    with _open(path) as f:
        head = f.read(2)
        f.seek(0)
        if head != b"\x1f\x8b":
            yield from iter(lambda: f.read(READ_BYTES * 16), b"")
            return
        yield from _gunzip(f, path.name)


def _open(path: Path):
    try:
        return open(path, "rb")
    except OSError as e:
        raise UserInputError(f"cannot read trace file {path}: {e.strerror}",
                             "check the path and its permissions") from None


def _gunzip(f, name: str) -> Iterator[bytes]:
    inflater = zlib.decompressobj(16 + zlib.MAX_WBITS)
    read_bytes = 0
    while data := f.read(READ_BYTES):
        read_bytes += len(data)
        while data:
            try:
                yield inflater.decompress(data)
            except zlib.error as e:
                raise UserInputError(f"{name} is not a valid gzip file (byte {read_bytes}: {e})",
                                     "re-export the trace, or gunzip it to check it") from None
            data = inflater.unused_data  # a second gzip member follows (concatenated .gz)
            if data:
                inflater = zlib.decompressobj(16 + zlib.MAX_WBITS)
    if not inflater.eof:
        raise UserInputError(f"{name} is truncated at byte {read_bytes}: the gzip stream ends early",
                             "re-export the trace; the file was not completely written")
    yield inflater.flush()
