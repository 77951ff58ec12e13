"""Shared by the hostile-input tests: a small real trace to damage, and the checks every case makes.

A hostile case must end with exactly one stderr line (`advisor: error: <problem> — <fix>`),
nothing on stdout, the documented exit code, and the user's files as they were.
"""
from __future__ import annotations

import copy
import gzip
import json
from pathlib import Path

import pytest

from battery.checks import BATTERY, assert_result_fails, invoke

TRACE = BATTERY / "trace_small.json.gz"  # torch.profiler on CPU: softmax_model.py, 2 steps


def trace_doc() -> dict:
    return json.loads(gzip.decompress(TRACE.read_bytes()))


def ops(doc: dict) -> list[dict]:
    return [e for e in doc["traceEvents"] if e.get("cat") == "cpu_op"]


def write_trace(path: Path, doc: dict, gz: bool = False) -> Path:
    text = json.dumps(doc, indent=2).encode()
    path.write_bytes(gzip.compress(text) if gz else text)
    return path


def renamed_trace(path: Path, old: str, new: str) -> Path:
    doc = copy.deepcopy(trace_doc())
    for event in doc["traceEvents"]:
        if event.get("name") == old:
            event["name"] = new
    return write_trace(path, doc)


def fails_cleanly(result, code: int, says: tuple[str, ...] = ()) -> str:
    """Exactly one stderr line, the error; stdout empty; the documented code."""
    line = assert_result_fails(result, code, says)
    assert result.stderr.count("\n") == 1, result.stderr
    assert result.stdout == "", result.stdout[-2000:]
    return line


def snapshot(*paths: Path) -> dict:
    """Bytes and mtime of each file, to prove a refusal touched nothing."""
    return {p: (p.read_bytes(), p.stat().st_mtime_ns) for p in paths}


__all__ = ["TRACE", "trace_doc", "ops", "write_trace", "renamed_trace", "fails_cleanly", "snapshot", "invoke"]


@pytest.fixture
def home(tmp_path, monkeypatch):
    """A fresh ADVISOR_HOME in the test's tmp dir, which is also the working directory."""
    home = tmp_path / ".advisor"
    monkeypatch.setenv("ADVISOR_HOME", str(home))
    monkeypatch.delenv("ADVISOR_DEBUG", raising=False)
    monkeypatch.chdir(tmp_path)
    return home
