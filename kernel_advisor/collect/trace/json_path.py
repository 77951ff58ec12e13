"""The JSON path: events parsed by json -> the same header tuples the regex path yields.

The header's args are the parsed dict here (bytes on the regex path); the column
builders take either.
"""
from __future__ import annotations

import json

from kernel_advisor.collect.trace.tables import TABLE_COLUMNS, TABLE_OF_CATEGORY


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
