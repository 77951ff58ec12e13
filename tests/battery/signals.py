"""Ctrl-C as a terminal delivers it, for the interrupt tests, whatever pytest itself inherited."""
from __future__ import annotations

import signal

import pytest


@pytest.fixture(autouse=True)
def default_sigint():
    """Ctrl-C as a terminal delivers it, even when pytest itself runs with SIGINT ignored (a
    background job: `trap '' INT`, `nohup`), which Python keeps instead of its own handler."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


def default_sigint_in_child() -> None:
    """Popen's preexec_fn: an ignored SIGINT survives exec, so the child would never see Ctrl-C;
    SIG_DFL lets its Python install the handler that raises KeyboardInterrupt."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
