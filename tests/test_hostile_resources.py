"""Hostile inputs that try to exhaust memory, time or the stack: each is refused with one line.

Decompression bombs, a value too large to hold, nesting deeper than a parser recurses, YAML
alias bombs and format widths that would print a gigabyte. Every case: exit 1, one stderr
line, nothing on stdout, well under a second or two here; the bomb also runs as a real
process under a memory measurement.
"""
from __future__ import annotations

import gzip
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

import pytest

from battery.checks import REPO
from battery.hostile import fails_cleanly, invoke, ops, trace_doc, write_trace
from battery.hostile import home  # noqa: F401 - fixture


def gzip_members(*parts: tuple[bytes, int]) -> bytes:
    """Concatenated gzip members, each compressed once and repeated: a bomb costs milliseconds."""
    return b"".join(gzip.compress(data, 9) * times for data, times in parts)


def string_bomb(path: Path, inflated_mib: int) -> Path:
    """One event whose name is a string of `inflated_mib` MiB."""
    path.write_bytes(gzip_members((b'{"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "', 1),
                                  (b"A" * (1 << 20), inflated_mib), (b'"}]}', 1)))
    return path


def events_bomb(path: Path) -> Path:
    """Valid, tiny instant events, about 470 MiB of them, from 1 MB."""
    event = b'  {"ph": "i", "name": "x", "ts": 1, "pid": 1, "tid": 1},\n' * (1 << 16)
    path.write_bytes(gzip_members((b'{"traceEvents": [\n', 1), (event, 128), (b'  {"ph": "i"}\n]}', 1)))
    return path


def test_string_bomb_is_refused_by_its_ratio(home, tmp_path):
    bomb = string_bomb(tmp_path / "bomb.json.gz", 1024)  # 1 MB that inflates to 1 GiB
    started = time.perf_counter()
    fails_cleanly(invoke("import", bomb), 1, ("bomb.json.gz inflates to more than", "decompression bomb"))
    assert time.perf_counter() - started < 15
    assert not home.exists() or not any(home.rglob("*.partial-*"))


def test_events_bomb_is_refused_before_it_is_parsed(home, tmp_path):
    started = time.perf_counter()
    fails_cleanly(invoke("import", events_bomb(tmp_path / "events.json.gz")), 1, ("inflates to more than",))
    assert time.perf_counter() - started < 15


def test_one_value_too_large_to_hold(home, tmp_path, monkeypatch):
    from kernel_advisor.collect.trace import split

    monkeypatch.setattr(split, "MAX_PENDING_BYTES", 1 << 20)  # the same code path, at 1 MiB
    path = tmp_path / "big.json"
    path.write_bytes(b'{"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "' + b"A" * (40 << 20) + b'"}]}')
    fails_cleanly(invoke("import", path), 1, ("holds a single value over 1 MiB",))


def _deep(depth: int) -> str:
    return "[" * depth + "]" * depth


@pytest.mark.parametrize("where", ["args", "metadata", "event", "top-level"])
def test_deep_json_in_a_trace(home, tmp_path, where):
    text = json.dumps(trace_doc(), indent=2)
    deep = _deep(100_000)
    if where == "args":
        text = text.replace('"External id": 3,', f'"External id": 3, "deep": {deep},', 1)
    elif where == "metadata":
        text = text.replace('"deviceProperties": []', f'"deviceProperties": {deep}', 1)
    elif where == "event":
        text = text.replace('"traceEvents": [', f'"traceEvents": [{deep},', 1)
    else:
        text = deep
    path = tmp_path / "deep.json"
    path.write_text(text)
    line = fails_cleanly(invoke("import", path), 1, ("deep.json",))
    assert "RecursionError" not in line and "internal error" not in line


@pytest.mark.parametrize("gz", [False, True])
@pytest.mark.parametrize("dur", [float("nan"), float("inf"), -5.0, 1e300, 1e-30], ids=["nan", "inf", "negative", "1e300", "1e-30"])
def test_impossible_durations_in_a_trace(home, tmp_path, dur, gz):
    doc = trace_doc()
    ops(doc)[0]["dur"] = dur
    path = write_trace(tmp_path / ("t.json.gz" if gz else "t.json"), doc, gz)
    fails_cleanly(invoke("import", path, "--out", tmp_path / "run"), 1, ("holds an impossible duration",))
    assert not (tmp_path / "run").exists()


def test_nan_timestamp_in_a_trace(home, tmp_path):
    doc = trace_doc()
    ops(doc)[0]["ts"] = float("nan")
    fails_cleanly(invoke("import", write_trace(tmp_path / "t.json", doc)), 1, ("impossible timestamp",))


# ---------------------------------------------------------------- rules files

BILLION_LAUGHS = "\n".join(
    ['a0: &a0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    + [f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 9) + "]" for i in range(1, 10)]
    + ["version: 1", "rules: *a9", ""])

RULE = """version: 1
rules:
  - id: team-wide
    title: Softmax over budget
    tier: library
    conditions:
      ops: [aten::softmax]
    message: "{MESSAGE}"
    gain: {model: none}
"""


@pytest.mark.parametrize("name, text, says", [
    ("laughs", BILLION_LAUGHS, ("alias bomb",)),
    ("deep-seq", "rules: " + _deep(20_000) + "\n", ("nested too deeply",)),
    ("deep-map", "rules: " + "{a: " * 20_000 + "1" + "}" * 20_000 + "\n", ("nested too deeply",)),
    ("wide", RULE.replace("{MESSAGE}", "{name:>999999999} is slow"), ("width and precision are at most 64",)),
    ("fill-digit", RULE.replace("{MESSAGE}", "{name:0>99999} is slow"), ("width and precision are at most 64",)),
    ("precision", RULE.replace("{MESSAGE}", "{share_pct:.999999999f} of the step"), ("at most 64",)),
])
def test_hostile_rules_file(home, tmp_path, name, text, says):
    path = tmp_path / f"{name}.yaml"
    path.write_text(text)
    started = time.perf_counter()
    fails_cleanly(invoke("rules", "validate", path), 1, (f"{name}.yaml", *says))
    assert time.perf_counter() - started < 10


def test_a_sane_width_still_validates(home, tmp_path):
    path = tmp_path / "ok.yaml"
    path.write_text(RULE.replace("{MESSAGE}", "{name:>20} is slow"))
    result = invoke("rules", "validate", path)
    assert result.exit_code == 0, result.stderr


def test_filled_messages_are_bounded():
    from kernel_advisor.recommend.messages import MAX_MESSAGE_CHARS, TemplateError, fill_message

    long_name = "x" * 100_000
    assert len(fill_message("{name} is slow", {"name": long_name}, "op")) == MAX_MESSAGE_CHARS
    with pytest.raises(TemplateError):
        fill_message("{name:>99999999}", {"name": "x"}, "op")


# ---------------------------------------------------------------- memory, as a real process

def test_bomb_import_stays_under_a_gigabyte(tmp_path):
    """`advisor import` of a 1 MB gzip that inflates to 1 GiB: one line, exit 1, < 1 GB RSS."""
    bomb = string_bomb(tmp_path / "bomb.json.gz", 1024)
    # NB: the peak of this process's own memory map (VmHWM): ru_maxrss survives exec, so a child of a
    # large pytest process would report pytest's size, not its own
    code = ("import runpy, sys; sys.argv = ['advisor', 'import', sys.argv[1]]\n"
            "try:\n    runpy.run_module('kernel_advisor', run_name='__main__')\n"
            "finally:\n    hwm = [l.split()[1] for l in open('/proc/self/status') if l.startswith('VmHWM')][0]\n"
            "    print('maxrss_kb', hwm, file=sys.stderr)")
    env = {"ADVISOR_HOME": str(tmp_path / ".advisor"), "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    started = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", code, str(bomb)], capture_output=True, text=True, cwd=tmp_path,
                          env={**env, "PYTHONPATH": str(REPO)}, timeout=60)
    elapsed = time.perf_counter() - started
    lines = proc.stderr.splitlines()
    rss_kb = int(lines[-1].split()[1])
    assert proc.returncode == 1 and proc.stdout == "", proc.stderr
    assert len(lines) == 2 and lines[0].startswith("advisor: error: bomb.json.gz inflates"), proc.stderr
    assert rss_kb < 1 << 20, f"{rss_kb >> 10} MiB"
    assert elapsed < 30
