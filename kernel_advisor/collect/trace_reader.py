"""Stream a torch.profiler (kineto) chrome trace into column tables, without json.load.

A 1 M-kernel trace is 1-2 GB of JSON; json.load would hold ~10x that as Python objects.
`read_trace` decompresses the file as a stream and cuts the traceEvents array into blocks
of whole events at kineto's event separator (every event opens with "  {" on its own line).
Each block is read with a few regular expressions that capture only the fields the tables
need (C speed, no Python objects for the fields skipped). Anything those expressions do
not recognise - an args layout a future torch writes, escaped strings, a trace that is
not laid out by kineto at all - goes through the stdlib JSON parser instead, one event or
one block at a time, so every valid chrome trace gives the same tables, only slower.
Large files are read by a pool of worker processes, one block per task.

Kept: only "ph": "X" (complete) events of the categories in `TABLE_OF_CATEGORY`; flows,
metadata, instant events, python_function and Trace spans are skipped.

pid / tid: int64 columns. Kineto writes integers except for its own "Spans" / "Traces"
rows; a value that is not an integer (e.g. "PyTorch Profiler") gets a negative id (-1,
-2, ...), the same one wherever that value appears in the trace, so distinct threads stay
distinct. An integer written as a string ("12") is that integer.
"""
from __future__ import annotations

import contextlib
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
import zlib
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Iterator, NamedTuple, Sequence

import numpy as np

from kernel_advisor.errors import UserInputError

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
# Column kinds: "str" plain text, "json" compact JSON text, "id" pid/tid, "int", "float".
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

BLOCK_BYTES = 16 << 20  # decompressed bytes per block (one worker task)
PARALLEL_MIN_JSON_BYTES = 256 << 20  # smaller traces: worker start-up costs more than it saves
GZIP_RATIO = 15  # NB: kineto JSON compresses 15-20x; only used to guess the size up front
READ_BYTES = 1 << 20  # compressed bytes per read


@dataclass(frozen=True)
class TraceData:
    """The trace as tables, rows in file order; columns as in TABLE_COLUMNS.

    Times are the trace's microseconds (ts_us, dur_us: float64). Missing integers are -1
    (ext_id, correlation, seq_nr) or 0 (blocks = prod(grid)); missing texts are "". The
    shape columns of cpu_ops (input_dims, input_types, input_strides, concrete) are compact
    JSON of the profiler's "Input Dims", "Input type", "Input Strides", "Concrete Inputs";
    equal texts are one (interned) string object.
    """
    meta: dict  # every top-level key of the trace except traceEvents
    cpu_ops: pd.DataFrame  # cat "cpu_op"
    annotations: pd.DataFrame  # cat "user_annotation": record_function ranges, ProfilerStep#N
    gpu: pd.DataFrame  # cat "kernel", "gpu_memcpy", "gpu_memset"
    gpu_annotations: pd.DataFrame  # cat "gpu_user_annotation"
    runtime: pd.DataFrame  # cat "cuda_runtime", "cuda_driver"


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
        big = _likely_json_bytes(path) >= PARALLEL_MIN_JSON_BYTES
        workers = min(os.cpu_count() or 1, 8) if big else 1
    with _gc_paused():
        return _read(path, workers)


def shapes_recorded(trace: TraceData) -> bool:
    """Whether any CPU op carries "Input Dims": torch.profiler writes them only with record_shapes=True,
    and without them no op can be costed."""
    return bool(len(trace.cpu_ops)) and bool((trace.cpu_ops["input_dims"] != "").any())


def _read(path: Path, workers: int) -> TraceData:
    splitter = _Splitter(path.name)
    string_ids: dict[str, int] = {}  # shared: one id per non-integer pid / tid in the whole trace
    tables = {name: _TableBuilder(TABLE_COLUMNS[name], string_ids) for name in TABLE_COLUMNS}
    items = splitter.items(_decompressed_chunks(path))
    for offset, batch in _parse_items(items, workers):
        if isinstance(batch, str):
            raise UserInputError(f"{path.name} {batch} (in the events from byte {offset})",
                                 "re-export the trace; the file is damaged")
        for name, columns in batch.items():
            tables[name].add(columns)
    return TraceData(meta=splitter.meta, **{name: t.frame() for name, t in tables.items()})


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


# ---------------------------------------------------------------------------------------
# Bytes in: gzip or plain, by magic number.

def _open(path: Path):
    try:
        return open(path, "rb")
    except OSError as e:
        raise UserInputError(f"cannot read trace file {path}: {e.strerror}",
                             "check the path and its permissions") from None


def _likely_json_bytes(path: Path) -> int:
    with _open(path) as f:
        gzipped = f.read(2) == b"\x1f\x8b"
    return path.stat().st_size * (GZIP_RATIO if gzipped else 1)


def _decompressed_chunks(path: Path) -> Iterator[bytes]:
    with _open(path) as f:
        head = f.read(2)
        f.seek(0)
        if head != b"\x1f\x8b":
            yield from iter(lambda: f.read(READ_BYTES * 16), b"")
            return
        yield from _gunzip(f, path.name)


def _gunzip(f, name: str) -> Iterator[bytes]:
    inflater = zlib.decompressobj(16 + zlib.MAX_WBITS)
    read_bytes = 0
    while data := f.read(READ_BYTES):
        read_bytes += len(data)
        while data:
            try:
                yield inflater.decompress(data)
            except zlib.error as e:
                raise UserInputError(f"{name} is not a valid gzip file (byte {read_bytes}: {e})",
                                     "re-export the trace, or gunzip it to check it") from None
            data = inflater.unused_data  # a second gzip member follows (concatenated .gz)
            if data:
                inflater = zlib.decompressobj(16 + zlib.MAX_WBITS)
    if not inflater.eof:
        raise UserInputError(f"{name} is truncated at byte {read_bytes}: the gzip stream ends early",
                             "re-export the trace; the file was not completely written")
    yield inflater.flush()


# ---------------------------------------------------------------------------------------
# The top level: parse the keys around traceEvents, cut traceEvents into work items.

_SEP = b"\n  },\n  {\n"  # kineto writes one event per "  {" ... "  }" at indent 2
_SKIP = re.compile(rb"[\s,]*")
_WS = re.compile(r"\s*")
_NON_ASCII = bytes(range(128, 256))


_EVENTS_PER_ITEM = 20_000  # events parsed by json per work item (bounds the dicts held)
_LITERALS = ("true", "false", "null", "NaN", "Infinity", "-Infinity")


class _NeedMore(Exception):
    """The buffer ends inside the value being parsed."""


def _cut_short(text: str, error: json.JSONDecodeError) -> bool:
    """True if `error` only says that `text` ends too early (more bytes may fix it)."""
    rest = text[error.pos:].rstrip()
    return (error.msg.startswith("Unterminated") or len(rest) <= 1
            or any(literal.startswith(rest) for literal in _LITERALS)
            or (error.msg.startswith("Invalid \\uXXXX") and len(rest) < 6))


class _Splitter:
    """Turns decompressed bytes into ("block", offset, bytes) and ("events", offset, list) items."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.meta: dict = {}
        self.state = "start"  # start -> members -> events -> members -> done
        self.buf = b""
        self.base = 0  # file offset of buf[0]
        self.decoder = json.JSONDecoder()

    def items(self, chunks: Iterator[bytes]) -> Iterator[tuple]:
        for chunk in chunks:
            self.buf += chunk
            yield from self._drain(final=False)
        yield from self._drain(final=True)
        if self.state != "done":
            total = self.base + len(self.buf)
            if total == 0 or (self.state == "start" and not self.buf.strip()):
                raise UserInputError(f"{self.name} is empty", "re-export the trace")
            where = "inside traceEvents" if self.state == "events" else "before the end of the JSON object"
            raise UserInputError(f"{self.name} is truncated at byte {total} ({where})",
                                 "re-export the trace; the file was not completely written")
        if self.buf.strip():
            raise UserInputError(f"{self.name} has extra data after the JSON object at byte {self.base}",
                                 "re-export the trace; the file is damaged")

    def _drain(self, final: bool) -> Iterator[tuple]:
        while self.state != "done":
            if self.state == "events":
                item = self._fast_block(final)
                if item is not None:
                    yield item
                    continue
                if not final and len(self.buf) < BLOCK_BYTES:
                    return  # wait: the next chunk may complete a kineto block
            before = (self.state, self.base)
            item = self._generic(final)
            if item is not None:
                yield item
            elif (self.state, self.base) == before:
                return  # no progress: needs more bytes (or, when final, is truncated)

    def _fast_block(self, final: bool) -> tuple | None:
        """The longest run of whole events ending at an event separator, once it is big enough."""
        start = _SKIP.match(self.buf).end()
        if start >= len(self.buf) or self.buf[start] != ord("{"):
            return None
        if not final and len(self.buf) - start < BLOCK_BYTES:
            return None
        end = self.buf.rfind(_SEP, start)
        if end < 0:
            return None
        # A view, not a copy: the old buffer lives on until the block has been parsed.
        item = ("block", self.base + start, memoryview(self.buf)[start:end + 4])
        self._consume(end + 5)
        return item

    def _consume(self, n_bytes: int) -> None:
        self.buf = self.buf[n_bytes:]
        self.base += n_bytes

    def _generic(self, final: bool) -> tuple | None:
        """Parse what the fast path cannot: the keys around traceEvents, odd layouts, the tail."""
        cut = len(self.buf) if final else len(self.buf.rstrip(_NON_ASCII))  # never split a UTF-8 char
        try:
            text = self.buf[:cut].decode("utf-8")
        except UnicodeDecodeError as e:
            raise UserInputError(f"{self.name} is not UTF-8 text at byte {self.base + e.start}",
                                 "re-export the trace; the file is damaged") from None
        offset = self.base
        pos, events = self._scan(text, final)
        self._consume(len(text[:pos].encode("utf-8")))
        return ("events", offset, events) if events else None

    def _scan(self, text: str, final: bool) -> tuple[int, list]:
        """Parse values from `text` until it runs out; return the end of the last whole one."""
        pos, events = 0, []
        while self.state != "done":
            pos = _WS.match(text, pos).end()
            state = self.state
            try:
                if state == "events":
                    pos = self._scan_event(text, pos, events)
                else:
                    pos = self._scan_member(text, pos, final)
            except _NeedMore:
                break
            except json.JSONDecodeError as e:
                if final or not _cut_short(text, e):
                    raise self._invalid(text, pos, e) from None
                break  # cut by the chunk boundary: retry with more bytes
            if state != "events" and self.state == "events":
                break  # traceEvents opened: let the fast path have a go
            if len(events) >= _EVENTS_PER_ITEM:
                break
        return pos, events

    def _scan_event(self, text: str, pos: int, events: list) -> int:
        if pos >= len(text):
            raise _NeedMore
        if text[pos] == ",":
            return pos + 1
        if text[pos] == "]":
            self.state = "members"
            return pos + 1
        event, end = self.decoder.raw_decode(text, pos)  # an object: complete once it parses
        events.append(event)
        return end

    def _scan_member(self, text: str, pos: int, final: bool) -> int:
        if pos >= len(text):
            raise _NeedMore
        char = text[pos]
        if self.state == "start":
            if char != "{":
                raise UserInputError(
                    f"{self.name} has no traceEvents: it does not hold a JSON object (starts with {char!r})",
                    "pass a chrome trace written by torch.profiler's export_chrome_trace")
            self.state = "members"
            return pos + 1
        if char == ",":
            return pos + 1
        if char == "}":
            if "traceEvents" not in self.meta:
                raise UserInputError(f"{self.name} has no traceEvents key",
                                     "pass a chrome trace written by torch.profiler's export_chrome_trace")
            del self.meta["traceEvents"]
            self.state = "done"
            return pos + 1
        key, end = self.decoder.raw_decode(text, pos)
        end = _WS.match(text, end).end()
        if end >= len(text):
            raise _NeedMore
        if text[end] != ":":
            raise json.JSONDecodeError("Expecting ':' delimiter", text, end)
        end = _WS.match(text, end + 1).end()
        if key == "traceEvents":
            return self._open_events(text, end)
        value, end = self.decoder.raw_decode(text, end)
        if not final and _WS.match(text, end).end() >= len(text):
            raise _NeedMore  # a number at the very end may continue in the next chunk
        self.meta[key] = value
        return end

    def _open_events(self, text: str, pos: int) -> int:
        if pos >= len(text):
            raise _NeedMore
        if text[pos] != "[":
            raise UserInputError(f"{self.name}: traceEvents is not a list",
                                 "pass a chrome trace written by torch.profiler's export_chrome_trace")
        self.meta["traceEvents"] = None  # seen; removed from meta at the closing brace
        self.state = "events"
        return pos + 1

    def _invalid(self, text: str, pos: int, error: json.JSONDecodeError) -> UserInputError:
        near = self.base + len(text[:error.pos].encode("utf-8"))
        if _cut_short(text, error):
            return UserInputError(f"{self.name} is truncated at byte {self.base + len(self.buf)} "
                                  f"(a value starting near byte {near} never ends)",
                                  "re-export the trace; the file was not completely written")
        return UserInputError(f"{self.name} is not valid JSON near byte {near}: {error.msg}",
                              "re-export the trace; the file is damaged or not a chrome trace")


# ---------------------------------------------------------------------------------------
# Work items -> batches, in this process or in a pool; results come back in file order.

def _parse_items(items: Iterator[tuple], workers: int) -> Iterator[tuple[int, dict | str]]:
    pool = _WorkerPool.start(workers) if workers > 1 else None
    if pool is None:
        for item in items:
            yield item[1], _item_batch(item)
        return
    try:
        yield from pool.map_in_order(items)
    finally:
        pool.close()


class _WorkerPool:
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
    def start(cls, n_workers: int) -> _WorkerPool | None:
        package_root = str(Path(__file__).resolve().parents[2])
        path = os.pathsep.join(filter(None, [package_root, os.environ.get("PYTHONPATH")]))
        command = [sys.executable, "-c", "from kernel_advisor.collect.trace_reader import _worker_main; _worker_main()"]
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
            result = _item_batch(item)
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
    gc.disable()  # see _gc_paused
    results = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # stray prints from imports must not corrupt the result stream
    items = sys.stdin.buffer
    while (item := _read_item(items)) is not None:
        try:
            result = ("ok", _item_batch(item))
        except Exception:  # report, do not die: the parent raises it with this traceback
            result = ("crash", traceback.format_exc())
        message = pickle.dumps(result, protocol=pickle.HIGHEST_PROTOCOL)
        results.write(len(message).to_bytes(8, "little"))
        results.write(message)
        results.flush()


def _item_batch(item: tuple) -> dict | str:
    """A batch ({table: {column: values}}), or what is wrong with a damaged block."""
    kind, _offset, payload = item
    if kind == "events":
        return _rows_batch(_rows_from_events(payload))
    payload = bytes(payload)
    rows = _fast_rows(payload)
    if rows is not None:
        try:
            return _rows_batch(rows)
        except (_SlowPath, ValueError):  # ValueError: a number field holding something else
            pass
    try:
        events = json.loads(b"[" + payload + b"]")
    except json.JSONDecodeError as e:
        return f"is not valid JSON: {e.msg}"
    except UnicodeDecodeError as e:
        return f"is not UTF-8 text: {e.reason}"
    return _rows_batch(_rows_from_events(events))


class _SlowPath(Exception):
    """The fast path met something it cannot read; redo the block with the JSON parser."""


# Header of a complete event in kineto's key order (2.11 writes it on two lines, 2.13 one
# key per line): cat, name, pid, tid, ts, dur and the args text. args must close the event.
_HEADER = re.compile(
    rb'"ph": "X",\s*"cat": "([^"]*)",\s*"name": "([^"]*)",\s*"pid": ([^,]*),\s*"tid": ([^,]*),'
    rb'\s*"ts": ([^,]*),\s*"dur": ([^,]*),\s*"args": \{([^}]*)\}\s*\}')


def _fast_rows(block: bytes) -> dict[str, list] | None:
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
    texts = block[1:-1].split(_SEP)
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
                headers.append(_header_of(parsed))
    return headers


# The args of an event are split into the fields that differ per event (ids, captured
# one by one) and the rest, which repeats (shapes, dtypes, launch config): that "blob" is
# parsed with json once per distinct text, in whatever key order it comes. Each pattern
# ends at the \x01 that separates joined args texts; its last branch catches any other
# layout, which is then read with json, event by event.
_SEQ = rb'(?:"Sequence number": (-?\d+), "Fwd thread id": \d+, )?'
_CPU_ARGS = re.compile(  # the remainder is what comes before "Ev Idx" (aten ops: shapes) and
    # after it (Inductor launches: shapes and kernel; with_flops: flops)
    rb'\s*"External id": (\d+),' + _SEQ + rb'"Record function id": \d+, ' + _SEQ
    + rb'(?:([^\x01]*), )?"Ev Idx": \d+(?:, ([^\x01]*))?\s*\x01|([^\x01]*)\x01')
_GPU_ARGS = re.compile(
    rb'\s*"External id": (\d+),\s*(?:"queued": \d+, )?"device": (\d+), "context": \d+,\s*"stream": (\d+), '
    rb'"correlation": (\d+),?([^\x01]*)\x01|([^\x01]*)\x01')
_RUNTIME_ARGS = re.compile(
    rb'\s*(?:"External id": (\d+),\s*)?"cbid": \d+, "correlation": (\d+)\s*\x01|([^\x01]*)\x01')


class _Coded(NamedTuple):
    """A text column as codes into its distinct values (which may repeat)."""
    codes: np.ndarray
    distinct: list


def _args_columns(rows: list, pattern: re.Pattern, n_groups: int) -> list[list]:
    """The captures of `pattern`, one list per group; where the last branch caught the args,
    the last list holds the args as a dict and the others b""."""
    args = [row[6] for row in rows]
    parsed = dict in set(map(type, args))  # rows from the JSON path carry parsed args
    texts = [a if type(a) is bytes else b"" for a in args] if parsed else args
    matches = pattern.findall(b"\x01".join(texts) + b"\x01")
    if len(matches) != len(rows):  # every branch ends at one \x01; anything else is a surprise
        raise _SlowPath
    columns = [list(column) for column in zip(*matches)]
    unread = columns[-1]
    if parsed:
        for i, a in enumerate(args):
            if type(a) is dict:
                unread[i] = a
    if any(unread):
        for i, text in enumerate(unread):
            if type(text) is bytes and text.strip():
                unread[i] = _parse_args(text)
    return columns


def _parse_args(text: bytes) -> dict:
    """The args object from its inner text (pieces of it joined by \x01)."""
    pieces = [piece for piece in text.split(b"\x01") if piece.strip()]
    try:
        args = json.loads(b"{" + b", ".join(pieces) + b"}")
    except json.JSONDecodeError:
        raise _SlowPath from None
    return args


def _unread(unread: list) -> Iterator[tuple[int, dict]]:
    if not any(unread):  # the common case: every args text matched a known layout
        return iter(())
    return ((i, a) for i, a in enumerate(unread) if type(a) is dict)


_BLOBS: dict[bytes, dict] = {}  # args remainder -> parsed, per process


def _blob_codes(blobs: list, unread: list) -> tuple[np.ndarray, list[dict]]:
    """Codes of each row's args remainder and the parsed remainders; unread rows bring
    their whole args."""
    for i, args in _unread(unread):
        blobs[i] = json.dumps(args, sort_keys=True)[1:-1].encode()
    distinct = list(dict.fromkeys(blobs))
    index = {blob: i for i, blob in enumerate(distinct)}
    codes = np.fromiter(map(index.__getitem__, blobs), np.int32, len(blobs))
    if len(_BLOBS) > 200_000:  # NB: only per-event blobs (memcpy bandwidth, ...) get here
        _BLOBS.clear()
    return codes, [_BLOBS[b] if b in _BLOBS else _BLOBS.setdefault(b, _parse_args(b)) for b in distinct]


def _rows_batch(rows: dict[str, list]) -> dict:
    builders = {"cpu_ops": _cpu_columns, "annotations": _header_columns, "gpu": _gpu_columns,
                "gpu_annotations": _gpu_annotation_columns, "runtime": _runtime_columns}
    batch = {}
    for table, table_rows in rows.items():
        if table_rows:
            raw = builders[table](table_rows)
            batch[table] = {name: _convert(raw[name], kind) for name, kind in TABLE_COLUMNS[table]}
    return batch


def _header_columns(rows: list) -> dict[str, Sequence]:
    cats, names, pids, tids, ts, durs, _ = zip(*rows)
    return {"cat": cats, "name": names, "pid": pids, "tid": tids, "ts_us": ts, "dur_us": durs}


_SHAPE_COLUMNS = (("input_dims", "Input Dims"), ("input_types", "Input type"),
                  ("input_strides", "Input Strides"), ("concrete", "Concrete Inputs"))


def _cpu_columns(rows: list) -> dict[str, Sequence]:
    ext, seq1, seq2, before, after, unread = _args_columns(rows, _CPU_ARGS, 6)
    columns = _header_columns(rows)
    head_seq = _ints(list(map(bytes.__add__, seq1, seq2)))  # at most one of the two is set
    for i, args in _unread(unread):
        ext[i] = _raw_int(args.get("External id"))
    codes, blobs = _blob_codes(list(map(b"\x01".join, zip(before, after))), unread)
    for column, key in _SHAPE_COLUMNS:
        columns[column] = _Coded(codes, [_compact(blob.get(key)) for blob in blobs])
    files = [blob.get("kernel_file") for blob in blobs]
    columns["kernel_file"] = _Coded(codes, [f if isinstance(f, str) else "" for f in files])
    blob_seq = np.array([_int_or(blob.get("Sequence number"), -1) for blob in blobs], np.int64)
    columns["seq_nr"] = np.where(head_seq != -1, head_seq, blob_seq[codes])
    columns["ext_id"] = ext
    return columns


def _gpu_annotation_columns(rows: list) -> dict[str, Sequence]:
    columns = _header_columns(rows)
    columns["device"] = _fill_ints([b""] * len(rows), columns["pid"])
    return columns


def _gpu_columns(rows: list) -> dict[str, Sequence]:
    ext, device, stream, corr, blob, unread = _args_columns(rows, _GPU_ARGS, 6)
    for i, args in _unread(unread):
        ext[i], device[i], stream[i], corr[i] = (_raw_int(args.get(key)) for key in
                                                 ("External id", "device", "stream", "correlation"))
    codes, blobs = _blob_codes(blob, unread)
    columns = _header_columns(rows)
    columns.update(ext_id=ext, correlation=corr, device=_fill_ints(device, columns["pid"]),
                   stream=_fill_ints(stream, columns["tid"]),
                   blocks=np.array([_prod(b.get("grid")) for b in blobs], np.int64)[codes])
    return columns


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


def _runtime_columns(rows: list) -> dict[str, Sequence]:
    ext, corr, unread = _args_columns(rows, _RUNTIME_ARGS, 3)
    for i, args in _unread(unread):
        ext[i], corr[i] = _raw_int(args.get("External id")), _raw_int(args.get("correlation"))
    return {**_header_columns(rows), "ext_id": ext, "correlation": corr}


def _raw_int(value) -> bytes:
    return str(value).encode() if type(value) is int else b""


def _int_or(value, default: int) -> int:
    return value if type(value) is int else default


def _ints(values: list) -> np.ndarray:
    return np.fromiter(map(int, [v or b"-1" for v in values]), np.int64, len(values))


def _compact(value) -> str:
    """Compact JSON of an args value, "" when absent; one string object per distinct text."""
    if value is None:
        return ""
    text = json.dumps(value, separators=(",", ":"))
    return _JSON_TEXT.setdefault(text, text)


# ---------------------------------------------------------------------------------------
# The JSON path: parsed events -> the same header tuples the regex path yields.

def _rows_from_events(events: list) -> dict[str, list]:
    rows: dict[str, list] = {name: [] for name in TABLE_COLUMNS}
    for event in events:
        if not isinstance(event, dict) or event.get("ph") != "X":
            continue
        table = TABLE_OF_CATEGORY.get(event.get("cat"))
        if table is not None:
            rows[table].append(_header_of(event))
    return rows


def _header_of(event: dict) -> tuple:
    args = event.get("args")
    return (str(event["cat"]).encode(), str(event.get("name", "")).encode(), _raw_id(event.get("pid")),
            _raw_id(event.get("tid")), _raw_float(event.get("ts")), _raw_float(event.get("dur")),
            args if isinstance(args, dict) else {})


def _raw_id(value) -> bytes:
    return json.dumps(value).encode()


def _raw_float(value) -> bytes:
    # repr round-trips exactly, so float(bytes) below gives back the parsed value.
    return repr(float(value)).encode() if isinstance(value, (int, float)) else b"nan"


# ---------------------------------------------------------------------------------------
# Raw bytes -> column values. Text columns travel as (codes, distinct values) so that a
# million repeated shapes cost one string, also across the pipe from a worker.

_JSON_TEXT: dict[str, str] = {}  # compact JSON -> the one copy kept, per process


def _convert(values, kind: str):
    if isinstance(values, (np.ndarray, _Coded)):
        return values
    if kind == "float":
        return np.fromiter(map(float, values), np.float64, len(values))
    if kind == "int":
        return _ints(values)
    distinct = list(dict.fromkeys(values))
    index = {value: i for i, value in enumerate(distinct)}
    codes = np.fromiter(map(index.__getitem__, values), np.int32, len(values))
    texts = [raw.decode("utf-8") for raw in distinct]
    return _Coded(codes, [t.strip() for t in texts] if kind == "id" else texts)


# ---------------------------------------------------------------------------------------
# Batches -> DataFrames.

class _TableBuilder:
    def __init__(self, columns: tuple, string_ids: dict[str, int]) -> None:
        self.columns = columns
        self.parts: dict[str, list] = {name: [] for name, _ in columns}
        self.distinct: dict[str, dict] = {name: {} for name, kind in columns if kind in ("str", "json")}
        self.ids = string_ids  # non-integer pid / tid -> negative id

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
