"""Bytes in: a trace file as a stream of decompressed chunks, gzip or plain by magic number."""
from __future__ import annotations

import zlib
from pathlib import Path
from typing import Iterator

from kernel_advisor.errors import UserInputError

GZIP_RATIO = 15  # NB: kineto JSON compresses 15-20x; only used to guess the size up front
READ_BYTES = 1 << 20  # compressed bytes per read
INFLATE_BYTES = 16 << 20  # decompressed bytes per piece
MAX_GZIP_RATIO = 50  # decompressed / compressed bytes a .gz trace may reach (docs/trust.md)
MIN_JSON_CAP = 64 << 20  # small files may inflate this much whatever their ratio


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
        cap = max_json_bytes(path.stat().st_size)
        # A first pass only counts: a bomb is refused in the second or two inflating takes,
        # not after minutes of parsing what it inflated to.
        for _ in _gunzip(f, path.name, cap):
            pass
        f.seek(0)
        yield from _gunzip(f, path.name, cap)


def max_json_bytes(gzip_bytes: int) -> int:
    """The most JSON a gzip file of `gzip_bytes` may inflate to: kineto traces compress
    15-20x, so MAX_GZIP_RATIO leaves room; more is a decompression bomb."""
    return MIN_JSON_CAP + MAX_GZIP_RATIO * gzip_bytes


def _open(path: Path):
    try:
        return open(path, "rb")
    except OSError as e:
        raise UserInputError(f"cannot read trace file {path}: {e.strerror}",
                             "check the path and its permissions") from None


def _gunzip(f, name: str, cap: int) -> Iterator[bytes]:
    """Inflate in pieces of at most INFLATE_BYTES (a bomb never sits in memory whole),
    and stop at `cap` bytes in all."""
    inflater = zlib.decompressobj(16 + zlib.MAX_WBITS)
    read_bytes = written = 0
    while data := f.read(READ_BYTES):
        read_bytes += len(data)
        while data:
            try:
                piece = inflater.decompress(data, INFLATE_BYTES)
            except zlib.error as e:
                raise UserInputError(f"{name} is not a valid gzip file (byte {read_bytes}: {e})",
                                     "re-export the trace, or gunzip it to check it") from None
            written += len(piece)
            if written > cap:
                raise UserInputError(
                    f"{name} inflates to more than {cap >> 20} MiB, over {MAX_GZIP_RATIO}x its compressed "
                    f"size: it is not a torch.profiler trace (a decompression bomb?)",
                    "import the trace as its exporter wrote it; if it is genuine, gunzip it and import the .json")
            yield piece
            data = inflater.unconsumed_tail
            if not data and inflater.unused_data:  # a second gzip member follows (concatenated .gz)
                data = inflater.unused_data
                inflater = zlib.decompressobj(16 + zlib.MAX_WBITS)
    if not inflater.eof:
        raise UserInputError(f"{name} is truncated at byte {read_bytes}: the gzip stream ends early",
                             "re-export the trace; the file was not completely written")
    yield inflater.flush()
