"""Regular expressions that read kineto's own layout at C speed, no json objects made.

A block's events become header tuples (cat, name, pid, tid, ts, dur, args text) per
table; the args text is then cut by one pattern per table into the fields that differ
per event (ids, captured one by one) and the rest, which repeats (shapes, dtypes, launch
config) and is parsed with json once per distinct text. Whatever a pattern does not
recognise falls back to json: one event, or (SlowPath) the whole block.
"""
from __future__ import annotations

import json
import re
from typing import Iterator

from kernel_advisor.collect.trace.split import SEP
from kernel_advisor.collect.trace.tables import TABLE_COLUMNS, TABLE_OF_CATEGORY, header_of


class SlowPath(Exception):
    """The fast path met something it cannot read; redo the block with the JSON parser."""


# Header of a complete event in kineto's key order (2.11 writes it on two lines, 2.13 one
# key per line): cat, name, pid, tid, ts, dur and the args text. args must close the event.
_HEADER = re.compile(
    rb'"ph": "X",\s*"cat": "([^"]*)",\s*"name": "([^"]*)",\s*"pid": ([^,]*),\s*"tid": ([^,]*),'
    rb'\s*"ts": ([^,]*),\s*"dur": ([^,]*),\s*"args": \{([^}]*)\}\s*\}')


def fast_rows(block: bytes) -> dict[str, list] | None:
    """Header tuples per table, or None when the block is not plainly kineto-shaped."""
    if b"\\" in block:  # escaped strings: let json decode them
        return None
    # NB: no check that every piece between separators is one event: the splitter cuts
    # blocks inside traceEvents only, where kineto's "\n  }," closes nothing but events.
    headers = _HEADER.findall(block)
    if len(headers) != block.count(b'"ph": "X"'):  # an X event in a layout we do not know
        headers = _headers_event_by_event(block)
        if headers is None:
            return None
    rows: dict[str, list] = {name: [] for name in TABLE_COLUMNS}
    table_of = {cat.encode(): rows[table] for cat, table in TABLE_OF_CATEGORY.items()}
    for header in headers:
        target = table_of.get(header[0])
        if target is not None:
            target.append(header)
    return rows


def _headers_event_by_event(block: bytes) -> list | None:
    """Header tuples of a block holding some X events the regex misses (kineto's own "Trace"
    span, say): those go through json, the others through the regex, in file order."""
    texts = block[1:-1].split(SEP)
    headers = []
    for text in texts:
        event = b"{" + text + b"\n  }"
        match = _HEADER.search(event)
        if match is not None:
            headers.append(match.groups())
        elif b'"ph": "X"' in text:
            try:
                parsed = json.loads(event)
            except json.JSONDecodeError:
                return None
            if isinstance(parsed, dict) and parsed.get("cat") in TABLE_OF_CATEGORY:
                headers.append(header_of(parsed))
    return headers


# Each pattern ends at the \x01 that separates joined args texts; its last branch catches
# any other layout, which is then read with json, event by event.
_SEQ = rb'(?:"Sequence number": (-?\d+), "Fwd thread id": \d+, )?'
CPU_ARGS = re.compile(  # the remainder is what comes before "Ev Idx" (aten ops: shapes) and
    # after it (Inductor launches: shapes and kernel; with_flops: flops)
    rb'\s*"External id": (\d+),' + _SEQ + rb'"Record function id": \d+, ' + _SEQ
    + rb'(?:([^\x01]*), )?"Ev Idx": \d+(?:, ([^\x01]*))?\s*\x01|([^\x01]*)\x01')
GPU_ARGS = re.compile(
    rb'\s*"External id": (\d+),\s*(?:"queued": \d+, )?"device": (\d+), "context": \d+,\s*"stream": (\d+), '
    rb'"correlation": (\d+),?([^\x01]*)\x01|([^\x01]*)\x01')
RUNTIME_ARGS = re.compile(
    rb'\s*(?:"External id": (\d+),\s*)?"cbid": \d+, "correlation": (\d+)\s*\x01|([^\x01]*)\x01')


def args_columns(rows: list, pattern: re.Pattern, n_groups: int) -> list[list]:
    """The captures of `pattern`, one list per group; where the last branch caught the args,
    the last list holds the args as a dict and the others b""."""
    args = [row[6] for row in rows]
    parsed = dict in set(map(type, args))  # rows from the JSON path carry parsed args
    texts = [a if type(a) is bytes else b"" for a in args] if parsed else args
    matches = pattern.findall(b"\x01".join(texts) + b"\x01")
    if len(matches) != len(rows):  # every branch ends at one \x01; anything else is a surprise
        raise SlowPath
    columns = [list(column) for column in zip(*matches)]
    unread = columns[-1]
    if parsed:
        for i, a in enumerate(args):
            if type(a) is dict:
                unread[i] = a
    if any(unread):
        for i, text in enumerate(unread):
            if type(text) is bytes and text.strip():
                unread[i] = parse_args(text)
    return columns


def parse_args(text: bytes) -> dict:
    """The args object from its inner text (pieces of it joined by \x01)."""
    pieces = [piece for piece in text.split(b"\x01") if piece.strip()]
    try:
        args = json.loads(b"{" + b", ".join(pieces) + b"}")
    except json.JSONDecodeError:
        raise SlowPath from None
    return args


def unread_args(unread: list) -> Iterator[tuple[int, dict]]:
    """(row, args) of the rows whose args no pattern matched."""
    if not any(unread):  # the common case: every args text matched a known layout
        return iter(())
    return ((i, a) for i, a in enumerate(unread) if type(a) is dict)
