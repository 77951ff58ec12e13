"""Header tuples -> column values, one builder per table.

Text columns travel as Coded (codes, distinct values) so that a million repeated shapes
cost one string, also across the pipe from a worker. The cpu_ops and gpu builders also
return "args": the rows' parsed args remainders, Coded, which collectives.py reads.
"""
from __future__ import annotations

import json
from typing import NamedTuple, Sequence

import numpy as np

from kernel_advisor.collect.trace.fast_paths import (CPU_ARGS, GPU_ARGS, RUNTIME_ARGS, args_columns, parse_args,
                                                     unread_args)


class Coded(NamedTuple):
    """A column as codes into its distinct values (which may repeat)."""
    codes: np.ndarray
    distinct: list


_BLOBS: dict[bytes, dict] = {}  # args remainder -> parsed, per process
_JSON_TEXT: dict[str, str] = {}  # compact JSON -> the one copy kept, per process


def header_columns(rows: list) -> dict[str, Sequence]:
    cats, names, pids, tids, ts, durs, _ = zip(*rows)
    return {"cat": cats, "name": names, "pid": pids, "tid": tids, "ts_us": ts, "dur_us": durs}


_SHAPE_COLUMNS = (("input_dims", "Input Dims"), ("input_types", "Input type"),
                  ("input_strides", "Input Strides"), ("concrete", "Concrete Inputs"))


def cpu_columns(rows: list) -> dict[str, Sequence]:
    ext, seq1, seq2, before, after, unread = args_columns(rows, CPU_ARGS, 6)
    columns = header_columns(rows)
    head_seq = ints(list(map(bytes.__add__, seq1, seq2)))  # at most one of the two is set
    for i, args in unread_args(unread):
        ext[i] = _raw_int(args.get("External id"))
    codes, blobs = _blob_codes(list(map(b"\x01".join, zip(before, after))), unread)
    for column, key in _SHAPE_COLUMNS:
        columns[column] = Coded(codes, [compact(blob.get(key)) for blob in blobs])
    files = [blob.get("kernel_file") for blob in blobs]
    columns["kernel_file"] = Coded(codes, [f if isinstance(f, str) else "" for f in files])
    blob_seq = np.array([_int_or(blob.get("Sequence number"), -1) for blob in blobs], np.int64)
    columns["seq_nr"] = np.where(head_seq != -1, head_seq, blob_seq[codes])
    columns["ext_id"] = ext
    columns["args"] = Coded(codes, blobs)
    return columns


def gpu_annotation_columns(rows: list) -> dict[str, Sequence]:
    columns = header_columns(rows)
    columns["device"] = _fill_ints([b""] * len(rows), columns["pid"])
    return columns


def gpu_columns(rows: list) -> dict[str, Sequence]:
    ext, device, stream, corr, blob, unread = args_columns(rows, GPU_ARGS, 6)
    for i, args in unread_args(unread):
        ext[i], device[i], stream[i], corr[i] = (_raw_int(args.get(key)) for key in
                                                 ("External id", "device", "stream", "correlation"))
    codes, blobs = _blob_codes(blob, unread)
    columns = header_columns(rows)
    columns.update(ext_id=ext, correlation=corr, device=_fill_ints(device, columns["pid"]),
                   stream=_fill_ints(stream, columns["tid"]),
                   blocks=np.array([_prod(b.get("grid")) for b in blobs], np.int64)[codes],
                   args=Coded(codes, blobs))
    return columns


def runtime_columns(rows: list) -> dict[str, Sequence]:
    ext, corr, unread = args_columns(rows, RUNTIME_ARGS, 3)
    for i, args in unread_args(unread):
        ext[i], corr[i] = _raw_int(args.get("External id")), _raw_int(args.get("correlation"))
    return {**header_columns(rows), "ext_id": ext, "correlation": corr}


def _blob_codes(blobs: list, unread: list) -> tuple[np.ndarray, list[dict]]:
    """Codes of each row's args remainder and the parsed remainders; unread rows bring
    their whole args."""
    for i, args in unread_args(unread):
        blobs[i] = json.dumps(args, sort_keys=True)[1:-1].encode()
    distinct = list(dict.fromkeys(blobs))
    index = {blob: i for i, blob in enumerate(distinct)}
    codes = np.fromiter(map(index.__getitem__, blobs), np.int32, len(blobs))
    if len(_BLOBS) > 200_000:  # NB: only per-event blobs (memcpy bandwidth, ...) get here
        _BLOBS.clear()
    return codes, [_BLOBS[b] if b in _BLOBS else _BLOBS.setdefault(b, parse_args(b)) for b in distinct]


def _fill_ints(values: list, fallback: Sequence) -> list:
    """Missing values taken from `fallback` where it holds an integer.

    GPU rows without device / stream args: kineto files them under process <device> and
    thread <stream>, so pid / tid stand in.
    """
    if b"" not in values:
        return values
    return [v or (f if f.strip().isdigit() else b"") for v, f in zip(values, fallback)]


def _prod(grid) -> int:
    if not isinstance(grid, list) or not all(type(v) is int for v in grid):
        return 0
    blocks = 1
    for v in grid:
        blocks *= v
    return blocks


def _raw_int(value) -> bytes:
    return str(value).encode() if type(value) is int else b""


def _int_or(value, default: int) -> int:
    return value if type(value) is int else default


def ints(values: list) -> np.ndarray:
    return np.fromiter(map(int, [v or b"-1" for v in values]), np.int64, len(values))


def compact(value) -> str:
    """Compact JSON of an args value, "" when absent; one string object per distinct text."""
    if value is None:
        return ""
    text = json.dumps(value, separators=(",", ":"))
    return _JSON_TEXT.setdefault(text, text)


def convert(values, kind: str):
    """Raw column values (bytes per row) as the kind's array, or Coded for texts and ids."""
    if isinstance(values, (np.ndarray, Coded)):
        return values
    if kind == "float":
        return np.fromiter(map(float, values), np.float64, len(values))
    if kind == "int":
        return ints(values)
    distinct = list(dict.fromkeys(values))
    index = {value: i for i, value in enumerate(distinct)}
    codes = np.fromiter(map(index.__getitem__, values), np.int32, len(values))
    texts = [raw.decode("utf-8") for raw in distinct]
    return Coded(codes, [t.strip() for t in texts] if kind == "id" else texts)
