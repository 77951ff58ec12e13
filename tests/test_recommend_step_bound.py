"""A tiny CPU model profiled for 2 steps: its profiled op times outlast the unprofiled step; no
share of the step may exceed 100 %."""
from __future__ import annotations

import json

from typer.testing import CliRunner

from kernel_advisor.cli import app

TINY = '''import torch, torch.nn as nn
class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(16, 16); self.b = nn.Linear(16, 16)
    def forward(self, x):
        return torch.relu(self.b(torch.relu(self.a(x)))) + x
def get_inputs():
    return [torch.randn(4, 16)]
'''


def _advisor(*args):
    return CliRunner().invoke(app, list(args))


def test_tiny_cpu_model_gain_reads_at_most_the_step(tmp_path, monkeypatch):
    monkeypatch.setenv("ADVISOR_HOME", str(tmp_path / ".advisor"))
    monkeypatch.chdir(tmp_path)
    (tmp_path / "tiny.py").write_text(TINY)
    p = _advisor("profile", "tiny.py", "--device", "cpu", "--steps", "2", "--out", "run")
    assert p.exit_code == 0, p.output
    r = _advisor("recommend", "run", "--format", "json")
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert doc["total_estimated_gain_frac"] is not None and doc["total_estimated_gain_frac"] <= 1.0
    assert all(rec["estimated_gain_frac"] <= 1.0 for rec in doc["recommendations"]
               if rec["estimated_gain_frac"] is not None)
    for a in doc["action_predictions"]:
        iv = a["predicted_gain"]
        assert -1.0 <= iv["low"] <= iv["value"] <= iv["high"] <= 1.0
