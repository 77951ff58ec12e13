"""read_trace: a torch.profiler (kineto) chrome trace, streamed into column tables without json.load.

A 1 M-kernel trace is 1-2 GB of JSON; json.load would hold ~10x that as Python objects.
The file is decompressed as a stream (source.py), cut into blocks of whole events
(split.py), each block read by regular expressions (fast_paths.py) or, for anything
they do not recognise, by the stdlib JSON parser (json_path.py) - so every valid chrome
trace gives the same tables, only slower. Large files are read by a pool of worker
processes (pool.py), one block per task; the batches are joined into tables (tables.py).

Kept: only "ph": "X" (complete) events of the categories in TABLE_OF_CATEGORY; flows,
metadata, instant events, python_function and Trace spans are skipped.
"""
from __future__ import annotations

import contextlib
import gc
import os
import zlib
from pathlib import Path
from typing import Iterator

from kernel_advisor.collect.trace.collectives import by_start
from kernel_advisor.collect.trace.pool import parse_items
from kernel_advisor.collect.trace.split import Splitter
from kernel_advisor.collect.trace.tables import COLLECTIVE_COLUMNS, TABLE_COLUMNS, TableBuilder, TraceData
from kernel_advisor.errors import UserInputError

PARALLEL_MIN_JSON_BYTES = 256 << 20  # smaller traces: worker start-up costs more than it saves


def read_trace(path: str | os.PathLike, workers: int | None = None) -> TraceData:
    """Read a chrome trace (.json or .json.gz, detected by content) into tables.

    `workers`: processes that parse blocks; None picks one per CPU for large files and
    reads small files in this process. Raises UserInputError for a missing, truncated or
    malformed file.
    """
    path = Path(path)
    if not path.is_file():
        raise UserInputError(f"trace file {path} does not exist or is not a file",
                             "pass the path of a chrome trace written by torch.profiler (.json or .json.gz)")
    if workers is None:
        big = likely_json_bytes(path) >= PARALLEL_MIN_JSON_BYTES
        workers = min(os.cpu_count() or 1, 8) if big else 1
    with _gc_paused():
        return _read(path, workers)


def _read(path: Path, workers: int) -> TraceData:
    splitter = Splitter(path.name)
    string_ids: dict[str, int] = {}  # shared: one id per non-integer pid / tid in the whole trace
    tables = {name: TableBuilder(columns, string_ids)
              for name, columns in {**TABLE_COLUMNS, "collectives": COLLECTIVE_COLUMNS}.items()}
    items = splitter.items(decompressed_chunks(path))
    for offset, batch in parse_items(items, workers):
        if isinstance(batch, str):
            raise UserInputError(f"{path.name} {batch} (in the events from byte {offset})",
                                 "re-export the trace; the file is damaged")
        for name, columns in batch.items():
            tables[name].add(columns)
    frames = {name: t.frame() for name, t in tables.items()}
    for name, frame in frames.items():
        _check_times(path.name, name, frame)
    return TraceData(header=splitter.header, **{**frames, "collectives": by_start(frames["collectives"])})


MAX_DUR_US = 1e11  # ~28 hours: no profiled event lasts longer
MIN_DUR_US = 1e-3  # kineto's resolution (1 ns); a shorter non-zero duration makes FLOP/s absurd


def _check_times(file_name: str, table: str, frame) -> None:
    """Refuse timestamps and durations no profiler writes: every rate and share in the run
    divides by them, and NaN, inf or a negative value would be printed as a figure."""
    import numpy as np

    for column in ("ts_us", "dur_us"):
        if column not in frame:
            continue
        values = frame[column].to_numpy()
        bad = ~np.isfinite(values)
        if column == "dur_us":
            bad |= (values < 0) | (values > MAX_DUR_US) | ((values > 0) & (values < MIN_DUR_US))
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            what = "duration" if column == "dur_us" else "timestamp"
            raise UserInputError(
                f"{file_name} holds an impossible {what} ({float(values[i])!r} µs, event {frame['name'].iloc[i]!r}"
                f"{f' and {int(bad.sum()) - 1} more' if bad.sum() > 1 else ''})",
                "re-export the trace; the file is damaged or was edited")


@contextlib.contextmanager
def _gc_paused() -> Iterator[None]:
    """No cyclic GC while reading: the millions of tuples made here hold no cycles, and
    collections triggered by them cost ~20% of the parse. The caller's setting comes back."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


# ------------------------------------------------------------
# Bytes in: a trace file as a stream of decompressed chunks, gzip or plain by magic number.

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
