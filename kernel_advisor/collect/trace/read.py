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
from pathlib import Path
from typing import Iterator

from kernel_advisor.collect.trace.collectives import by_start
from kernel_advisor.collect.trace.pool import parse_items
from kernel_advisor.collect.trace.source import decompressed_chunks, likely_json_bytes
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
