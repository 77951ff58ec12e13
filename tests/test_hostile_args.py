"""Arguments and run directories that fight back: one line, exit 1, before any work."""
from __future__ import annotations

import json
import shutil

import pytest

from battery.checks import BATTERY, previous_run
from battery.hostile import TRACE, fails_cleanly, invoke, snapshot
from battery.hostile import home  # noqa: F401 - fixture


@pytest.mark.parametrize("args", [
    ("import", str(TRACE), "--top", "-3"),
    ("profile", str(BATTERY / "softmax_model.py"), "--device", "cpu", "--top", "-1"),
    ("report", "{run}", "--top", "-2"),
    ("compare", "{run}", "{run}", "--top", "-5"),
], ids=["import", "profile", "report", "compare"])
def test_negative_top(home, args):
    run = previous_run(home)
    fails_cleanly(invoke(*[a.replace("{run}", str(run)) for a in args]), 1, ("--top cannot be negative",))


@pytest.mark.parametrize("seed", [str(1 << 64), str(-(1 << 63) - 1), "9" * 300])
def test_seed_beyond_64_bits(home, seed):
    fails_cleanly(invoke("profile", BATTERY / "softmax_model.py", "--device", "cpu", "--seed", seed), 1,
                  ("--seed must fit in 64 bits",))


def _damaged(home, tmp_path, edit) -> str:
    run = previous_run(home)
    copy = tmp_path / "damaged"
    shutil.copytree(run, copy)
    meta = json.loads((copy / "run.json").read_text())
    edit(meta)
    (copy / "run.json").write_text(json.dumps(meta))
    return str(copy)


@pytest.mark.parametrize("command", ["recommend", "report"])
@pytest.mark.parametrize("edit, says", [
    (lambda m: m.__setitem__("steps", "five"), "steps has the wrong type"),
    (lambda m: m.__setitem__("step_s", {"value": -0.001, "low": None, "high": None}), "step_s.value"),
    (lambda m: m.__setitem__("step_s", {"value": float("inf")}), "step_s.value"),
    (lambda m: m.__setitem__("step_s", {"value": 0.0}), "step_s.value"),
    (lambda m: m.__setitem__("step_wall_s", [0.01, float("nan")]), "step_wall_s"),
    (lambda m: m.__setitem__("total_device_time_s", -1.0), "total_device_time_s"),
], ids=["string-steps", "negative-step", "inf-step", "zero-step", "nan-list", "negative-total"])
def test_damaged_run_values(home, tmp_path, command, edit, says):
    fails_cleanly(invoke(command, _damaged(home, tmp_path, edit)), 1, ("damaged", says))


@pytest.mark.parametrize("content", [bytes(range(256)), b"x" * 10_000, b"", b"\x00runs\n"],
                         ids=["binary", "huge", "empty", "nul"])
def test_damaged_latest(home, content):
    previous_run(home)
    latest = home / "runs" / "latest"
    latest.write_bytes(content)
    before = snapshot(latest)
    fails_cleanly(invoke("recommend"), 1, ("latest",))
    assert snapshot(latest) == before


def test_a_long_model_file_name(home, tmp_path):
    model = tmp_path / ("m" * 245 + ".py")
    shutil.copy(BATTERY / "softmax_model.py", model)
    result = invoke("profile", model, "--device", "cpu", "--steps", "1", "--warmup", "0", "--json")
    assert result.exit_code == 0, result.stderr
    assert len((home / "runs" / "latest").read_text().strip()) < 255
