"""Ctrl-C at the few points where it must wait, and what a Ctrl-C leaves behind.

`deferred_sigint()` holds SIGINT over a critical section: torch.profiler stopping and
exporting its trace (a KeyboardInterrupt raised in the middle of the export has been seen
to crash the process with SIGSEGV), and a run directory's rename + `latest`. The signal is
recorded, the section finishes, then KeyboardInterrupt is raised as if Ctrl-C had landed
right after it.

`kept_runs()` counts the run directories this process completed, so the CLI's Ctrl-C line
can tell "nothing partial was kept" from "the run was already complete and kept".

`hold_for_tests(point)` lets a test stop a real process at a named point and interrupt it
there (ADVISOR_TEST_HOLD_AT / ADVISOR_TEST_HOLD_MARKER); unset, it does nothing.
"""
from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

HOLD_AT_ENV = "ADVISOR_TEST_HOLD_AT"  # tests only: the point to stop at
HOLD_MARKER_ENV = "ADVISOR_TEST_HOLD_MARKER"  # tests only: the file written on reaching it
HOLD_MAX_S = 60.0

class _Deferral:
    """One active deferral: whether a SIGINT came during it, and the frame it came in."""

    def __init__(self) -> None:
        self.received = False
        self.frame = None


_ACTIVE: list[_Deferral] = []


@contextlib.contextmanager
def deferred_sigint() -> Iterator[None]:
    """Hold SIGINT until the block ends, then raise KeyboardInterrupt (once, however many came).

    Only the main thread receives signals and may install handlers: elsewhere (the Python
    API called from a worker thread) this is a plain block. A handler other than Python's
    default one is called after the block instead (an enclosing deferral's records it), and
    an ignored SIGINT stays ignored. When the block raises, its exception goes on as it is.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    deferral = _Deferral()

    def record(signum, frame):  # noqa: ARG001 - a signal handler's signature
        deferral.received, deferral.frame = True, frame

    try:
        previous = signal.signal(signal.SIGINT, record)
    except (ValueError, OSError):  # no signal support here (an embedded interpreter)
        yield
        return
    _ACTIVE.append(deferral)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
        _ACTIVE.remove(deferral)
    if deferral.received:
        _deliver(previous, deferral.frame)


def _deliver(previous, frame) -> None:
    if previous is signal.SIG_IGN:
        return
    if previous in (signal.default_int_handler, signal.SIG_DFL, None):
        raise KeyboardInterrupt
    previous(signal.SIGINT, frame)


def sigint_recorded() -> bool:
    """True inside a deferral that has already recorded a SIGINT."""
    return any(d.received for d in _ACTIVE)


# ---------------------------------------------------------------- a clock that interrupts


class OutOfTime(KeyboardInterrupt):
    """Raised by `alarm_after` in the main thread when its time is up.

    A KeyboardInterrupt, so that every handler that lets Ctrl-C through (the model's step,
    torch.compile's own error handling) lets the clock through too; whoever set the alarm
    catches it.
    """


@contextlib.contextmanager
def alarm_after(seconds: float) -> Iterator[None]:
    """Raise OutOfTime in the main thread after `seconds` of wall time (nothing elsewhere, or
    for an infinite or non-positive limit: a plain block). The timer is gone on exit."""
    usable = threading.current_thread() is threading.main_thread() and 0 < seconds < float("inf")
    if not usable:
        yield
        return

    def ring(signum, frame):  # noqa: ARG001 - a signal handler's signature
        raise OutOfTime(f"over its {seconds:.0f} s")

    try:
        previous = signal.signal(signal.SIGALRM, ring)
    except (ValueError, OSError):
        yield
        return
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


# ---------------------------------------------------------------- runs this process kept


@dataclass(frozen=True)
class KeptRun:
    path: Path
    latest: bool  # made `latest` too


_KEPT: list[KeptRun] = []


def record_kept_run(path: Path, latest: bool) -> None:
    _KEPT.append(KeptRun(Path(path), latest))


def kept_runs() -> tuple[KeptRun, ...]:
    """Every run directory this process renamed into place, oldest first."""
    return tuple(_KEPT)


def interrupted_message(kept_since: int) -> str:
    """The Ctrl-C line: true whether or not a run was completed before the interrupt landed.

    `kept_since` is len(kept_runs()) when the command started."""
    kept = kept_runs()[kept_since:]
    if not kept:
        return "interrupted — nothing partial was kept; the last complete run is unchanged"
    last = kept[-1]
    more = f" (the last of {len(kept)} this command completed)" if len(kept) > 1 else ""
    if last.latest:
        return (f"interrupted after the run was complete: it was kept as {last.path}{more} and is now `latest` "
                "— nothing to redo: `advisor recommend` and `advisor report` read it")
    return (f"interrupted after the run was complete: it was kept as {last.path}{more} "
            "— nothing to redo: pass that directory to `advisor recommend` or `advisor report`")


# ---------------------------------------------------------------- a stop for tests


def hold_for_tests(point: str) -> None:
    """When ADVISOR_TEST_HOLD_AT names `point`: write ADVISOR_TEST_HOLD_MARKER, then wait until
    a SIGINT arrives (raised at once outside a deferral, recorded inside one) or HOLD_MAX_S."""
    if os.environ.get(HOLD_AT_ENV) != point:
        return
    marker = os.environ.get(HOLD_MARKER_ENV)
    if marker:
        Path(marker).write_text(f"{point}\n")
    deadline = time.monotonic() + HOLD_MAX_S
    while time.monotonic() < deadline and not sigint_recorded():
        time.sleep(0.02)
    if marker and sigint_recorded():  # the test's proof that the signal was held, not raised here
        with open(marker, "a") as f:
            f.write("held\n")
