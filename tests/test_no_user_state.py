"""Tests and the CLI leave the user's working directory alone; typos get a suggestion."""
from __future__ import annotations

import os

from typer.testing import CliRunner

from kernel_advisor.cli import app

runner = CliRunner()


def test_every_test_gets_its_own_advisor_home():
    home = os.environ["ADVISOR_HOME"]
    assert "advisor-home" in home and not home.startswith(os.getcwd())


def test_kernel_id_typo_suggests_the_closest():
    result = runner.invoke(app, ["kernels", "verify", "triton.slu", "--device", "cpu"])
    assert result.exit_code == 1
    assert "did you mean triton.silu" in result.output and "Traceback" not in result.output


def test_model_file_where_a_run_is_expected(tmp_path):
    model = tmp_path / "model.py"
    model.write_text("x = 1\n")
    result = runner.invoke(app, ["recommend", str(model)])
    assert result.exit_code == 1 and "is a model file; this command reads a run directory" in result.output
