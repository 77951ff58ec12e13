"""benchmarks/advice/coverage.py: rows from run.json, upserted by key, rendered per GPU."""
from __future__ import annotations

import importlib.util
from pathlib import Path

import pandas as pd

_PATH = Path(__file__).resolve().parents[1] / "benchmarks" / "advice" / "coverage.py"
_spec = importlib.util.spec_from_file_location("advice_coverage", _PATH)
cov = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(cov)


def _run_json(pct, unmodelled):
    return {"coverage": {"modelled_time_pct": pct, "unmodelled": unmodelled},
            "device": {"name": "NVIDIA H200"}, "versions": {"torch": "2.11.0+cu130"}}


def test_row_keeps_the_three_largest_unmodelled_ops(monkeypatch):
    monkeypatch.setenv("ADVISOR_COMMIT", "abc1234")
    ops = [{"name": f"aten::op{i}", "device_time_total_s": t} for i, t in enumerate([1e-6, 5e-3, 2e-4, 3e-3])]
    row = cov.coverage_row("m", "train", _run_json(21.0779, ops))
    assert row["modelled_pct"] == 21.08 and row["unmodelled"] == "aten::op1; aten::op3; aten::op2"
    assert row["gpu"] == "NVIDIA H200" and set(row) == set(cov.COLUMNS)


def test_merge_upserts_by_model_mode_and_gpu_and_render_counts_the_aim(tmp_path):
    data = tmp_path / "coverage.csv"
    base = {"gpu": "NVIDIA H200", "torch": "2.11.0+cu130", "commit": "c1", "date": "2026-11-27"}
    first = tmp_path / "a.csv"
    pd.DataFrame([{**base, "model": "m", "mode": "train", "modelled_pct": 21.1, "unmodelled": "aten::x"},
                  {**base, "model": "m", "mode": "inference", "modelled_pct": 100.0, "unmodelled": ""}]).to_csv(first)
    cov.merge([first], data)
    again = tmp_path / "b.csv"
    pd.DataFrame([{**base, "model": "m", "mode": "train", "modelled_pct": 99.5, "unmodelled": "aten::y"}]).to_csv(again)
    df = cov.merge([again], data)
    assert len(df) == 2 and df.set_index("mode").loc["train", "modelled_pct"] == 99.5
    block = cov.render_block(df)
    assert "2 of 2 runs at least 98 % modelled (lowest 99.5 %)" in block
    assert "| m | 100.0 % | 99.5 % | aten::y |" in block


def test_render_counts_the_runs_timed_by_the_timing_pass_and_names_the_others(tmp_path):
    base = {"gpu": "NVIDIA H200", "torch": "2.11.0+cu130", "commit": "c1", "date": "2026-11-27", "unmodelled": ""}
    df = pd.DataFrame([{**base, "model": "a", "mode": "train", "modelled_pct": 100.0, "kernel_timing": "kernels-only"},
                       {**base, "model": "b", "mode": "inference", "modelled_pct": 100.0, "kernel_timing": "shapes",
                        "kernel_timing_reason": "the timing pass ran 9 GPU events, the shapes pass 10"}])
    block = cov.render_block(df)
    assert "CUDA-only timing pass (matched to the shapes pass by launch order): 1 of 2 runs." in block
    assert "- b inference: shapes pass times (the timing pass ran 9 GPU events, the shapes pass 10)" in block
    assert "timing pass" not in cov.render_block(df.drop(columns=["kernel_timing", "kernel_timing_reason"]))


def test_rows_from_before_the_timing_column_still_merge(tmp_path):
    data = tmp_path / "coverage.csv"
    pd.DataFrame([{"model": "m", "mode": "train", "gpu": "G", "modelled_pct": 99.0, "unmodelled": "",
                   "torch": "t", "commit": "c", "date": "d"}]).to_csv(data, index=False)
    new = tmp_path / "n.csv"
    pd.DataFrame([{"model": "m", "mode": "inference", "gpu": "G", "modelled_pct": 98.0, "unmodelled": "",
                   "kernel_timing": "kernels-only", "kernel_timing_reason": "", "torch": "t", "commit": "c2",
                   "date": "d"}]).to_csv(new, index=False)
    df = cov.merge([new], data)
    assert list(df.columns) == cov.COLUMNS and len(df) == 2
