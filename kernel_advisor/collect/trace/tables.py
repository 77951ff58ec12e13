"""The tables a trace becomes (TraceData), their columns, and the builder that joins batches.

Column kinds: "str" plain text, "json" compact JSON text, "id" pid/tid, "int", "float".
pid / tid: int64 columns. Kineto writes integers except for its own "Spans" / "Traces"
rows; a value that is not an integer (e.g. "PyTorch Profiler") gets a negative id (-1,
-2, ...), the same one wherever that value appears in the trace, so distinct threads stay
distinct. An integer written as a string ("12") is that integer.
"""
from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import pandas as pd

TABLE_OF_CATEGORY = {
    "cpu_op": "cpu_ops",
    "user_annotation": "annotations",
    "kernel": "gpu",
    "gpu_memcpy": "gpu",
    "gpu_memset": "gpu",
    "gpu_user_annotation": "gpu_annotations",
    "cuda_runtime": "runtime",
    "cuda_driver": "runtime",
}
TABLE_COLUMNS = {
    "cpu_ops": (("name", "str"), ("pid", "id"), ("tid", "id"), ("ts_us", "float"), ("dur_us", "float"),
                ("ext_id", "int"), ("input_dims", "json"), ("input_types", "json"),
                ("input_strides", "json"), ("concrete", "json"), ("kernel_file", "str"), ("seq_nr", "int")),
    "annotations": (("name", "str"), ("pid", "id"), ("tid", "id"), ("ts_us", "float"), ("dur_us", "float")),
    "gpu": (("cat", "str"), ("name", "str"), ("device", "int"), ("stream", "int"), ("ts_us", "float"),
            ("dur_us", "float"), ("ext_id", "int"), ("correlation", "int"), ("blocks", "int")),
    "gpu_annotations": (("name", "str"), ("device", "int"), ("ts_us", "float"), ("dur_us", "float")),
    "runtime": (("name", "str"), ("pid", "id"), ("tid", "id"), ("ts_us", "float"), ("dur_us", "float"),
                ("ext_id", "int"), ("correlation", "int")),
}
# The communication events of the trace, with the args the per-category tables leave out
# (collective metadata, a gloo range's shapes); see collectives.py for which events.
COLLECTIVE_COLUMNS = (
    ("cat", "str"), ("name", "str"), ("tid", "id"), ("ts_us", "float"), ("dur_us", "float"),
    ("ext_id", "int"), ("device", "int"), ("stream", "int"), ("collective", "str"),
    ("in_nelems", "float"), ("out_nelems", "float"), ("group_size", "float"), ("dtype", "str"),
    ("input_dims", "json"), ("input_types", "json"))


@dataclass(frozen=True)
class TraceData:
    """The trace as tables; columns as in TABLE_COLUMNS and COLLECTIVE_COLUMNS.

    Rows in file order, except `collectives`: by start time. Times are the trace's
    microseconds (ts_us, dur_us: float64). Missing integers are -1 (ext_id, correlation,
    seq_nr, device, stream) or 0 (blocks = prod(grid)); missing numbers NaN; missing texts
    are "". The shape columns (input_dims, input_types, input_strides, concrete) are compact
    JSON of the profiler's "Input Dims", "Input type", "Input Strides", "Concrete Inputs";
    equal texts are one (interned) string object.
    """
    header: dict  # every top-level key of the trace except traceEvents
    cpu_ops: pd.DataFrame  # cat "cpu_op"
    annotations: pd.DataFrame  # cat "user_annotation": record_function ranges, ProfilerStep#N
    gpu: pd.DataFrame  # cat "kernel", "gpu_memcpy", "gpu_memset"
    gpu_annotations: pd.DataFrame  # cat "gpu_user_annotation"
    runtime: pd.DataFrame  # cat "cuda_runtime", "cuda_driver"
    collectives: pd.DataFrame  # NCCL kernels, gloo ranges, ops described by "Collective name"

    @property
    def meta(self) -> dict:
        """The header under its former name (distributed/import_ranks.py still reads it so)."""
        return self.header

    # What the header says (kineto writes these; a foreign trace may lack any of them).
    @property
    def device_properties(self) -> list:
        return self.header.get("deviceProperties") or []

    @property
    def trace_schema_version(self):
        return self.header.get("schemaVersion")

    @property
    def cuda_runtime_version(self):
        return self.header.get("cuda_runtime_version")

    @property
    def cuda_driver_version(self):
        return self.header.get("cuda_driver_version")


def shapes_recorded(trace: TraceData) -> bool:
    """Whether any CPU op carries "Input Dims": torch.profiler writes them only with record_shapes=True,
    and without them no op can be costed."""
    return bool(len(trace.cpu_ops)) and bool((trace.cpu_ops["input_dims"] != "").any())


class TableBuilder:
    """Joins a table's batches (text columns as codes into distinct values) into one DataFrame."""

    def __init__(self, columns: tuple, string_ids: dict[str, int]) -> None:
        self.columns = columns
        self.parts: dict[str, list] = {name: [] for name, _ in columns}
        self.distinct: dict[str, dict] = {name: {} for name, kind in columns if kind in ("str", "json")}
        self.ids = string_ids  # non-integer pid / tid -> negative id, shared by every table

    def add(self, batch: dict) -> None:
        for name, kind in self.columns:
            value = batch[name]
            if kind in ("str", "json"):
                codes, distinct = value
                table = self.distinct[name]
                remap = np.fromiter((table.setdefault(sys.intern(s), len(table)) for s in distinct),
                                    np.int32, len(distinct))
                value = remap[codes]
            elif kind == "id":
                codes, distinct = value
                value = np.array([self._id(s) for s in distinct], np.int64)[codes]
            self.parts[name].append(value)

    def _id(self, raw: str) -> int:
        try:
            return int(raw)
        except ValueError:
            text = json.loads(raw) if raw.startswith('"') else raw
            if isinstance(text, str) and text.lstrip("-").isdigit():
                return int(text)
            return self.ids.setdefault(raw, -1 - len(self.ids))

    def frame(self) -> pd.DataFrame:
        import pandas as pd

        data = {}
        for name, kind in self.columns:
            parts, self.parts[name] = self.parts[name], []  # let each column's pieces go early
            dtype = np.float64 if kind == "float" else np.int32 if kind in ("str", "json") else np.int64
            joined = np.concatenate(parts) if parts else np.empty(0, dtype)
            if kind in ("str", "json"):
                distinct = np.empty(len(self.distinct[name]), dtype=object)
                distinct[:] = list(self.distinct[name])
                joined = distinct[joined]
            data[name] = joined
        return pd.DataFrame(data)


# ------------------------------------------------------------
# The JSON path: events parsed by json -> the same header tuples the regex path yields.
#
# The header's args are the parsed dict here (bytes on the regex path); the column
# builders take either.

def rows_from_events(events: list) -> dict[str, list]:
    rows: dict[str, list] = {name: [] for name in TABLE_COLUMNS}
    for event in events:
        if not isinstance(event, dict) or event.get("ph") != "X":
            continue
        table = TABLE_OF_CATEGORY.get(event.get("cat"))
        if table is not None:
            rows[table].append(header_of(event))
    return rows


def header_of(event: dict) -> tuple:
    args = event.get("args")
    return (str(event["cat"]).encode(), str(event.get("name", "")).encode(), _raw_id(event.get("pid")),
            _raw_id(event.get("tid")), _raw_float(event.get("ts")), _raw_float(event.get("dur")),
            args if isinstance(args, dict) else {})


def _raw_id(value) -> bytes:
    return json.dumps(value).encode()


def _raw_float(value) -> bytes:
    # repr round-trips exactly, so float(bytes) below gives back the parsed value.
    return repr(float(value)).encode() if isinstance(value, (int, float)) else b"nan"
