"""Every --json output is strict JSON (no NaN/Infinity) with a top-level schema_version."""
from __future__ import annotations

import json
import os

import pytest
from typer.testing import CliRunner

from kernel_advisor.cli import app

runner = CliRunner()


def _strict(text: str) -> dict:
    def refuse(constant):
        raise AssertionError(f"non-standard JSON constant {constant}")
    return json.loads(text, parse_constant=refuse)


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("strict")
    model = tmp / "m.py"
    # aten::to on a no-op has no device time: NaN efficiency cells the JSON must write as null
    model.write_text("import torch, torch.nn as nn\n"
                     "class Model(nn.Module):\n"
                     "    def forward(self, x):\n"
                     "        return torch.nn.functional.gelu(x.to(torch.float32)) @ x.T\n"
                     "def get_inputs():\n"
                     "    return [torch.randn(33, 17)]\n")
    out = tmp / "run"
    result = runner.invoke(app, ["profile", str(model), "--device", "cpu", "--steps", "2", "--warmup", "1",
                                 "--out", str(out), "--json"])
    assert result.exit_code == 0, result.output
    return out, result.stdout


def test_profile_json(run_dir):
    _, text = run_dir
    doc = _strict(text)
    assert doc["schema_version"] == doc["run"]["schema_version"] and doc["hotspots"]


def test_import_json(run_dir, tmp_path):
    out, _ = run_dir
    result = runner.invoke(app, ["import", str(out / "trace.json.gz"), "--out", str(tmp_path / "imp"), "--json"])
    assert result.exit_code == 0, result.output
    assert "schema_version" in _strict(result.stdout)


@pytest.mark.parametrize("args", [["kernels", "--device", "cpu", "--json"]])
def test_other_json_outputs(args):
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "schema_version" in _strict(result.stdout)


def test_recommend_json(run_dir):
    out, _ = run_dir
    result = runner.invoke(app, ["recommend", str(out), "--format", "json"])
    assert result.exit_code == 0, result.output
    assert _strict(result.stdout)["schema_version"] == 3
