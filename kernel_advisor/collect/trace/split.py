"""The splitter: decompressed bytes in, work items out, the keys around traceEvents kept as the header.

Kineto writes one event per "  {" ... "  }" block at indent 2, so traceEvents is cut into
blocks of whole events at that separator, BLOCK_BYTES or more each ("block" items, read
by the regex fast paths). What that cut cannot handle - the keys around traceEvents, a
layout kineto did not write, the tail - goes through the stdlib JSON decoder, at most
_EVENTS_PER_ITEM events at a time ("events" items).
"""
from __future__ import annotations

import json
import re
from typing import Iterator

from kernel_advisor.errors import UserInputError

BLOCK_BYTES = 16 << 20  # decompressed bytes per block (one worker task)
# What may wait for more bytes after a chunk is drained: whole events go out in blocks of
# about BLOCK_BYTES, so only one enormous value (a hostile file) keeps more than this.
MAX_PENDING_BYTES = 64 << 20
SEP = b"\n  },\n  {\n"  # kineto writes one event per "  {" ... "  }" at indent 2
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


class Splitter:
    """Turns decompressed bytes into ("block", offset, bytes) and ("events", offset, list) items."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.header: dict = {}
        self.state = "start"  # start -> members -> events -> members -> done
        self.buf = b""
        self.base = 0  # file offset of buf[0]
        self.decoder = json.JSONDecoder()

    def items(self, chunks: Iterator[bytes]) -> Iterator[tuple]:
        for chunk in chunks:
            self.buf += chunk
            yield from self._drain(final=False)
            if len(self.buf) > MAX_PENDING_BYTES:
                raise UserInputError(
                    f"{self.name} holds a single value over {MAX_PENDING_BYTES >> 20} MiB near byte {self.base} "
                    f"(one event, or the data around traceEvents): no torch.profiler trace does",
                    "re-export the trace; the file is damaged or not a chrome trace")
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
        end = self.buf.rfind(SEP, start)
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
            except RecursionError:  # `[[[[...]]]]`: the stdlib parser recurses per level
                raise UserInputError(f"{self.name} nests JSON values too deeply near byte {self.base}",
                                     "re-export the trace; the file is damaged or not a chrome trace") from None
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
            if "traceEvents" not in self.header:
                raise UserInputError(f"{self.name} has no traceEvents key",
                                     "pass a chrome trace written by torch.profiler's export_chrome_trace")
            del self.header["traceEvents"]
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
        self.header[key] = value
        return end

    def _open_events(self, text: str, pos: int) -> int:
        if pos >= len(text):
            raise _NeedMore
        if text[pos] != "[":
            raise UserInputError(f"{self.name}: traceEvents is not a list",
                                 "pass a chrome trace written by torch.profiler's export_chrome_trace")
        self.header["traceEvents"] = None  # seen; removed from the header at the closing brace
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


