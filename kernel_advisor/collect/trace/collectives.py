"""The communication events, picked out while the tables are built (the trace is read once).

Which events:
- kernels whose name starts with "nccl", any case: NCCL's ncclKernel_* / ncclDevKernel_*;
- cpu_op / user_annotation ranges named "gloo:<collective>": gloo runs a collective on its
  own threads, with the tensor's "Input Dims" and "Input type";
- cpu_op / user_annotation events whose args carry "Collective name": record_param_comms,
  which describes the collective its kernels run (same External id).
Their collective metadata ("Collective name", "In msg nelems", "Out msg nelems", "Group
size", "dtype") and shapes become the columns of COLLECTIVE_COLUMNS. A trace holds a few
hundred of these among a million events, so the selection works on distinct names and
args (codes), and only the chosen rows are read one by one.
"""
from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

from kernel_advisor.collect.trace.columns import Coded, compact, convert
from kernel_advisor.collect.trace.fast_paths import parse_args
from kernel_advisor.collect.trace.tables import COLLECTIVE_COLUMNS

if TYPE_CHECKING:
    import pandas as pd

GLOO_PREFIX = "gloo:"
COMM_OP_PREFIXES = ("c10d::", "record_param_comms", "nccl:", GLOO_PREFIX)
_DESCRIBED = "Collective name"
_CATEGORY = {"cpu_ops": "cpu_op", "annotations": "user_annotation", "gpu": "kernel"}


def is_nccl_kernel(name: str) -> bool:
    """NCCL launches kernels named ncclKernel_* (< 2.19) or ncclDevKernel_* (≥ 2.19)."""
    return name.lower().startswith("nccl")


def is_comm_op(name: str) -> bool:
    """CPU-side events of a collective: c10d ops, record_param_comms, nccl:/gloo: ranges."""
    return name.startswith(COMM_OP_PREFIXES)


def collective_rows(table: str, rows: list, raw: dict, columns: dict) -> list[tuple]:
    """Rows (as COLLECTIVE_COLUMNS) of one table's batch: `rows` its header tuples, `raw` the
    builder's values per row, `columns` the converted batch."""
    if table == "gpu":
        chosen = _distinct_mask(columns["cat"], lambda cat: cat == "kernel")
        chosen &= _distinct_mask(columns["name"], is_nccl_kernel)
    elif table in ("cpu_ops", "annotations"):
        chosen = _distinct_mask(columns["name"], lambda name: name.startswith(GLOO_PREFIX))
        chosen |= _described(rows, raw.get("args"))
    else:
        return []
    return [_row(table, rows, raw, i) for i in np.flatnonzero(chosen)]


def collective_batch(rows: list[tuple]) -> dict:
    """The batch of a table built with COLLECTIVE_COLUMNS from rows of `collective_rows`."""
    values = dict(zip([name for name, _ in COLLECTIVE_COLUMNS], zip(*rows)))
    batch = {}
    for name, kind in COLLECTIVE_COLUMNS:
        column = list(values[name])
        if kind in ("str", "json"):
            batch[name] = Coded(np.arange(len(column), dtype=np.int32), column)
        elif kind == "id":
            batch[name] = convert(column, kind)
        else:
            batch[name] = np.array(column, np.float64 if kind == "float" else np.int64)
    return batch


def by_start(collectives: pd.DataFrame) -> pd.DataFrame:
    """Rows by start time; equal times by category, then file order (stable), so the order
    does not depend on how the trace was cut into blocks."""
    return collectives.sort_values(["ts_us", "cat"], kind="stable").reset_index(drop=True)


def _distinct_mask(column: Coded, keep) -> np.ndarray:
    return np.array([keep(value) for value in column.distinct], dtype=bool)[column.codes]


def _described(rows: list, args: Coded | None) -> np.ndarray:
    """Rows whose args carry "Collective name"; cpu_ops bring parsed args per distinct text."""
    if args is not None:
        return _distinct_mask(args, lambda a: _DESCRIBED in a)
    key = _DESCRIBED.encode()
    return np.fromiter(((key if type(row[6]) is bytes else _DESCRIBED) in row[6] for row in rows),
                       bool, len(rows))


def _row(table: str, rows: list, raw: dict, i: int) -> tuple:
    header = rows[i]
    args = _args(header[6], raw.get("args"), i)
    ext = raw["ext_id"][i] if "ext_id" in raw else _int_text(args.get("External id"))
    device, stream = (raw["device"][i], raw["stream"][i]) if table == "gpu" else (b"", b"")
    return (_CATEGORY[table], header[1].decode("utf-8"), header[3], float(header[4]), float(header[5]),
            _int(ext), _int(device), _int(stream), _text(args, _DESCRIBED),
            _number(args.get("In msg nelems")), _number(args.get("Out msg nelems")),
            _number(args.get("Group size")), _text(args, "dtype"),
            compact(args.get("Input Dims")), compact(args.get("Input type")))


def _args(header_args, parsed: Coded | None, i: int) -> dict:
    """The row's args: the parsed remainder where the builder made one, else its own."""
    if parsed is not None:
        return parsed.distinct[parsed.codes[i]]
    return header_args if type(header_args) is dict else parse_args(header_args)


def _int_text(value) -> bytes:
    return str(value).encode() if type(value) is int else b""


def _int(raw: bytes) -> int:
    return int(raw) if raw else -1


def _text(args: dict, key: str) -> str:
    return str(args[key]) if key in args else ""


def _number(value) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        return math.nan

