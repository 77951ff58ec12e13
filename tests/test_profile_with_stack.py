"""`--with-stack` / `with_stack=True`: Python call stacks in the trace only when asked for,
and the op table the same either way (stack events are not ops)."""
from __future__ import annotations

import gzip
import json

import pandas as pd
import torch
from torch import nn
from typer.testing import CliRunner

import kernel_advisor
import kernel_advisor.cli

runner = CliRunner()


def _categories(run_dir) -> set[str]:
    with gzip.open(run_dir / "trace.json.gz", "rt") as f:
        return {str(e.get("cat")) for e in json.load(f)["traceEvents"]}


def test_stacks_only_on_request_and_the_ops_do_not_change(tmp_path):
    model, inputs = nn.Sequential(nn.Linear(16, 32), nn.ReLU()), [torch.randn(4, 16)]
    plain = kernel_advisor.profile(model, inputs, device="cpu", steps=1, warmup=1, out=tmp_path / "plain")
    stacked = kernel_advisor.profile(model, inputs, device="cpu", steps=1, warmup=1, out=tmp_path / "stacked",
                                     with_stack=True)
    assert "python_function" not in _categories(tmp_path / "plain")
    assert "python_function" in _categories(tmp_path / "stacked")
    assert plain.meta["args"]["with_stack"] is False and stacked.meta["args"]["with_stack"] is True
    pd.testing.assert_series_equal(plain.ops["name"], stacked.ops["name"])


def test_the_cli_flag_reaches_the_trace(tmp_path, examples_dir):
    out = tmp_path / "run"
    done = runner.invoke(kernel_advisor.cli.app, ["profile", f"{examples_dir}/mlp.py", "--device", "cpu",
                                                  "--steps", "1", "--warmup", "1", "--with-stack", "--out", str(out)])
    assert done.exit_code == 0, done.output
    assert "python_function" in _categories(out)


def test_not_with_ranks_yet(examples_dir):
    done = runner.invoke(kernel_advisor.cli.app, ["profile", f"{examples_dir}/mlp.py", "--device", "cpu",
                                                  "--nproc-per-node", "2", "--with-stack"])
    assert done.exit_code == 1 and "--with-stack is not supported with --nproc-per-node" in done.stderr
