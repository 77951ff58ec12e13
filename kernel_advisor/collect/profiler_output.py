"""What torch.profiler prints while it starts, steps, stops and exports, kept off the user's stderr.

Kineto logs `USDT: … profiler_start` / `profiler_stop` (and on some versions `STAGE: …
Completed Stage: …`) from C++ straight to file descriptor 2, so no Python redirection sees
them: they land in the middle of rich's progress bars. And torch.profiler.profile warns,
once per process, that it "clears events at the end of each cycle", which is what we want
(the one cycle we need is exported from on_trace_ready).

`profiler_output_filtered()` goes around each profiler call (not around the model's steps):
fd 2 points at a temporary file for its duration and is restored in `finally`; lines that
match the known noise are dropped, and everything else is written on to stderr afterwards,
in order, so a real error from the profiler (or another thread) is never lost.
`quietly(prof)` enters and exits a profiler that way.
"""
from __future__ import annotations

import contextlib
import os
import re
import sys
import tempfile
import warnings
from typing import IO, Iterator, TypeVar

P = TypeVar("P")

# Kineto's own log prefix: `USDT:2026-11-25 10:50:05 19650:19650 SyncActivityProfilerHandler.cpp:52] `.
NOISE = re.compile(rb"(?:USDT|STAGE):\S+ \S+ \d+:\d+ \S+:\d+\] (?:profiler_start|profiler_stop|Completed Stage: .*)\r?\n?")
CYCLE_WARNING = r".*Profiler clears events at the end of each cycle"


@contextlib.contextmanager
def profiler_output_filtered() -> Iterator[None]:
    """Drop the profiler's known noise on fd 2 and its per-cycle UserWarning; pass the rest on."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=CYCLE_WARNING, category=UserWarning)
        with _fd2_filtered():
            yield


@contextlib.contextmanager
def quietly(prof: P) -> Iterator[P]:
    """`with quietly(profile(...)) as prof:`: the profiler's start and stop go through the filter.

    Calls made inside the block (prof.step(), which can stop a cycle, export the trace and
    start the next) need their own `with profiler_output_filtered():`.
    """
    with profiler_output_filtered():
        prof.__enter__()  # type: ignore[attr-defined]
    try:
        yield prof
    finally:
        with profiler_output_filtered():
            prof.__exit__(None, None, None)  # type: ignore[attr-defined]


def without_noise(data: bytes) -> bytes:
    """`data` without the lines that are the profiler's known noise (line endings kept as they were)."""
    return b"".join(line for line in re.split(rb"(?<=\n)", data) if line and not NOISE.fullmatch(line))


@contextlib.contextmanager
def _fd2_filtered() -> Iterator[None]:
    _flush(sys.stderr)  # what Python has buffered for stderr goes out before fd 2 is borrowed
    borrowed = _borrow_fd2()
    if borrowed is None:  # no fd 2, or no temporary file: nothing to filter, nothing to lose
        yield
        return
    capture, saved = borrowed
    try:
        yield
    finally:
        _flush(sys.stderr)  # Python writes to a real stderr went to fd 2 as well: into the capture
        os.dup2(saved, 2)
        os.close(saved)
        capture.seek(0)
        kept = without_noise(capture.read())
        capture.close()
        if kept:
            _emit(kept)


def _borrow_fd2() -> tuple[IO[bytes], int] | None:
    try:
        capture = tempfile.TemporaryFile()
    except OSError:
        return None
    try:
        saved = os.dup(2)
    except OSError:
        capture.close()
        return None
    try:
        os.dup2(capture.fileno(), 2)
    except OSError:
        os.close(saved)
        capture.close()
        return None
    return capture, saved


def _emit(data: bytes) -> None:
    stream = sys.stderr
    try:
        if stream is None:
            os.write(2, data)
        elif hasattr(stream, "buffer"):
            stream.flush()
            stream.buffer.write(data)
            stream.buffer.flush()
        else:
            stream.write(data.decode(errors="replace"))
            stream.flush()
    except (OSError, ValueError):  # a closed stderr: nowhere to write to
        pass


def _flush(stream) -> None:
    try:
        if stream is not None:
            stream.flush()
    except (OSError, ValueError):
        pass
