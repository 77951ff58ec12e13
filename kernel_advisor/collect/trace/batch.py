"""One work item -> one batch ({table: {column: values}}): the regex fast paths first, json
when they cannot read the block. This is what a worker process runs."""
from __future__ import annotations

import json
import re

from kernel_advisor.collect.trace.collectives import collective_batch, collective_rows
from kernel_advisor.collect.trace.columns import (convert, cpu_columns, gpu_annotation_columns, gpu_columns,
                                                  header_columns, runtime_columns)
from kernel_advisor.collect.trace.fast_paths import SlowPath, fast_rows
from kernel_advisor.collect.trace.tables import TABLE_COLUMNS, rows_from_events

_BUILDERS = {"cpu_ops": cpu_columns, "annotations": header_columns, "gpu": gpu_columns,
             "gpu_annotations": gpu_annotation_columns, "runtime": runtime_columns}


def item_batch(item: tuple) -> dict | str:
    """A batch, or what is wrong with a damaged block."""
    try:
        return _item_batch(item)
    except RecursionError:  # args nested `[[[[...]]]]`: json recurses once per level
        return "nests JSON values too deeply"


def _item_batch(item: tuple) -> dict | str:
    kind, _offset, payload = item
    if kind == "events":
        return rows_batch(rows_from_events(payload))
    payload = bytes(payload)
    rows = fast_rows(payload)
    if rows is not None:
        try:
            return rows_batch(rows)
        except (SlowPath, ValueError):  # ValueError: a number field holding something else
            pass
    try:
        events = _events(payload)
    except json.JSONDecodeError as e:
        return f"is not valid JSON: {e.msg}"
    except UnicodeDecodeError as e:
        return f"is not UTF-8 text: {e.reason}"
    return rows_batch(rows_from_events(events))


# kineto writes an event's name as it is, without JSON escaping: a region named `say "hi"`
# (record_function, NVTX) is `"name": "say "hi"",` in its own trace. The name ends where the
# next key, pid, begins.
_KINETO_NAME = re.compile(rb'("name": ")(.*?)(",\s*"pid": )', re.DOTALL)


def _events(payload: bytes) -> list:
    try:
        return json.loads(b"[" + payload + b"]")
    except json.JSONDecodeError:
        repaired = _KINETO_NAME.sub(_escaped_name, payload)
    # strict=False: kineto also leaves control characters (a newline in a name) unescaped
    return json.loads(b"[" + repaired + b"]", strict=False)


def _escaped_name(match: re.Match) -> bytes:
    name = match.group(2).replace(b"\\", b"\\\\").replace(b'"', b'\\"')
    return match.group(1) + name + match.group(3)


def rows_batch(rows: dict[str, list]) -> dict:
    """Header tuples per table -> converted columns per table, and "collectives" when the
    block holds any communication."""
    batch, communication = {}, []
    for table, table_rows in rows.items():
        if table_rows:
            raw = _BUILDERS[table](table_rows)
            batch[table] = {name: convert(raw[name], kind) for name, kind in TABLE_COLUMNS[table]}
            communication += collective_rows(table, table_rows, raw, batch[table])
    if communication:
        batch["collectives"] = collective_batch(communication)
    return batch
