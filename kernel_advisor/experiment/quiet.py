"""The compilers' chatter goes to a log file, never to the user's terminal.

Inductor prints autotuning tables and `select_algorithm` errors, Dynamo and Triton log and
warn, and compile workers (subprocesses) write to file descriptor 2 directly. While a search
runs, all of it is sent to one file in the run directory: Python logging of the `torch` and
`triton` loggers, Python warnings, and fd 2 itself. The caller gets a stream to the real
stderr for its own lines (progress, warnings).
"""
from __future__ import annotations

import contextlib
import logging
import os
import sys
import warnings
from pathlib import Path
from typing import Iterator, TextIO

LOG_FILE = "measure.log"
LOGGERS = ("torch", "triton")


@contextlib.contextmanager
def compilers_to_log(path: Path) -> Iterator[TextIO]:
    """Everything but our own lines to `path` (appended); yields a stream to the real stderr."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a", buffering=1, encoding="utf-8", errors="replace") as log, \
            _fd2_to(log) as terminal, _loggers_to(log), _warnings_to(log):
        yield terminal


@contextlib.contextmanager
def _fd2_to(log: TextIO) -> Iterator[TextIO]:
    sys.stderr.flush()
    saved = os.dup(2)
    terminal = os.fdopen(os.dup(saved), "w", buffering=1, encoding="utf-8", errors="replace")
    os.dup2(log.fileno(), 2)
    try:
        yield terminal
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)
        terminal.close()


@contextlib.contextmanager
def _loggers_to(log: TextIO) -> Iterator[None]:
    handler = logging.StreamHandler(log)
    handler.setFormatter(logging.Formatter("%(asctime)s %(name)s %(levelname)s %(message)s"))
    saved = []
    for name in LOGGERS:
        logger = logging.getLogger(name)
        saved.append((logger, list(logger.handlers), logger.propagate))
        logger.handlers = [handler]
        logger.propagate = False
    try:
        yield
    finally:
        for logger, handlers, propagate in saved:
            logger.handlers, logger.propagate = handlers, propagate


@contextlib.contextmanager
def _warnings_to(log: TextIO) -> Iterator[None]:
    with warnings.catch_warnings():
        warnings.simplefilter("default")

        def show(message, category, filename, lineno, file=None, line=None):  # noqa: ARG001 - warnings' hook
            log.write(warnings.formatwarning(message, category, filename, lineno, line))

        warnings.showwarning = show
        yield
