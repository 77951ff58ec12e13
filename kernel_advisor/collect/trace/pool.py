"""The worker pool: blocks go to worker processes over pipes, batches come back in file order.

Large files only (read.py decides); a pool that cannot start, or a worker that dies, leaves
its items to this process.
"""
from __future__ import annotations

import gc
import json
import os
import pickle
import queue
import re
import struct
import subprocess
import sys
import threading
import traceback
from collections import deque
from pathlib import Path
from typing import Iterator

from kernel_advisor.collect.trace.collectives import collective_batch, collective_rows
from kernel_advisor.collect.trace.columns import (convert, cpu_columns, gpu_annotation_columns, gpu_columns,
                                                  header_columns, runtime_columns)
from kernel_advisor.collect.trace.fast_paths import SlowPath, fast_rows
from kernel_advisor.collect.trace.tables import TABLE_COLUMNS, rows_from_events


def parse_items(items: Iterator[tuple], workers: int) -> Iterator[tuple[int, dict | str]]:
    pool = WorkerPool.start(workers) if workers > 1 else None
    if pool is None:
        for item in items:
            yield item[1], item_batch(item)
        return
    try:
        yield from pool.map_in_order(items)
    finally:
        pool.close()


_WORKER_CODE = "from kernel_advisor.collect.trace.pool import _worker_main; _worker_main()"


class WorkerPool:
    """Worker processes fed blocks over pipes; item i goes to worker i % n, so results come
    back in file order by reading the workers in turn. A worker that dies (or cannot start
    Python) leaves its items to this process.

    Plain subprocesses rather than multiprocessing: spawn re-imports the caller's __main__
    (fails for stdin, re-runs unguarded scripts) and fork copies whatever threads CUDA or
    the profiler left running.
    """

    def __init__(self, procs: list[subprocess.Popen]) -> None:
        self.procs = procs
        self.dead: set[int] = set()
        # A writer thread per worker: a blocked write must never stop us reading results.
        self.inboxes = [queue.Queue(maxsize=1) for _ in procs]
        self.writers = [threading.Thread(target=_feed, args=(p.stdin, q), daemon=True)
                        for p, q in zip(procs, self.inboxes)]
        for writer in self.writers:
            writer.start()

    @classmethod
    def start(cls, n_workers: int) -> WorkerPool | None:
        package_root = str(Path(__file__).resolve().parents[3])
        path = os.pathsep.join(filter(None, [package_root, os.environ.get("PYTHONPATH")]))
        command = [sys.executable, "-c", _WORKER_CODE]
        procs: list[subprocess.Popen] = []
        try:
            for _ in range(n_workers):
                procs.append(subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                              env={**os.environ, "PYTHONPATH": path}))
        except OSError:  # no sys.executable, no processes allowed: read in this process
            for proc in procs:
                proc.kill()
            return None
        return cls(procs)

    def map_in_order(self, items: Iterator[tuple]) -> Iterator[tuple[int, dict | str]]:
        n = len(self.procs)
        pending: deque = deque()  # (index, item) sent, result not read yet
        for index, item in enumerate(items):
            if len(pending) >= 2 * n:  # bound the blocks in flight (memory)
                yield self._next(pending)
            if index % n not in self.dead:
                self.inboxes[index % n].put(item)
            pending.append((index, item))
        while pending:
            yield self._next(pending)

    def _next(self, pending: deque) -> tuple[int, dict | str]:
        index, item = pending.popleft()
        worker = index % len(self.procs)
        result = None if worker in self.dead else self._result(worker)
        if result is None:  # re-run here: a bug in the parser then raises with its traceback
            self.dead.add(worker)
            result = item_batch(item)
        return item[1], result

    def _result(self, worker: int) -> dict | str | None:
        data = _read_message(self.procs[worker].stdout)
        if data is None:
            return None
        kind, value = pickle.loads(data)
        return value if kind == "ok" else None

    def close(self) -> None:
        for inbox in self.inboxes:
            try:
                inbox.put_nowait(None)
            except queue.Full:
                pass  # its writer is blocked on the pipe, which the kill below breaks
        for proc in self.procs:
            proc.kill()
            proc.wait()
            proc.stdout.close()
        for writer in self.writers:
            writer.join(timeout=5)


def _feed(pipe, inbox: queue.Queue) -> None:
    try:
        while (item := inbox.get()) is not None:
            kind, offset, payload = item
            if kind == "events":
                payload = pickle.dumps(payload, protocol=pickle.HIGHEST_PROTOCOL)
            # A block goes as it is (often a memoryview): no pickling, no copy.
            pipe.write(_ITEM_HEADER.pack(kind[0].encode(), offset, len(payload)))
            pipe.write(payload)
            pipe.flush()
    except (BrokenPipeError, OSError, ValueError):
        pass  # the worker died or was killed; its reader reports it
    finally:
        try:
            pipe.close()
        except OSError:
            pass


_ITEM_HEADER = struct.Struct("<cQQ")  # kind initial, file offset, payload bytes


def _read_item(pipe) -> tuple | None:
    header = pipe.read(_ITEM_HEADER.size)
    if len(header) < _ITEM_HEADER.size:
        return None
    kind, offset, size = _ITEM_HEADER.unpack(header)
    payload = pipe.read(size)
    if len(payload) < size:
        return None
    if kind == b"e":
        return "events", offset, pickle.loads(payload)
    return "block", offset, payload


def _read_message(pipe) -> bytes | None:
    header = pipe.read(8)
    if len(header) < 8:
        return None
    size = int.from_bytes(header, "little")
    data = pipe.read(size)
    return data if len(data) == size else None


def _worker_main() -> None:
    """Entry point of a worker process: items in on stdin, batches out on the real stdout."""
    gc.disable()  # see read._gc_paused
    results = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # stray prints from imports must not corrupt the result stream
    items = sys.stdin.buffer
    while (item := _read_item(items)) is not None:
        try:
            result = ("ok", item_batch(item))
        except Exception:  # report, do not die: the parent raises it with this traceback
            result = ("crash", traceback.format_exc())
        message = pickle.dumps(result, protocol=pickle.HIGHEST_PROTOCOL)
        results.write(len(message).to_bytes(8, "little"))
        results.write(message)
        results.flush()


# ------------------------------------------------------------
# One work item -> one batch ({table: {column: values}}): the regex fast paths first, json
# when they cannot read the block. This is what a worker process runs.

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
