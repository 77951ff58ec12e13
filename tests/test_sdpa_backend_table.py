"""The SDPA backend table's script: declared cells, upsert by key, and the docs grid."""
from __future__ import annotations

import sys
from pathlib import Path

import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import bench_sdpa_backends as bench  # noqa: E402


def _rows(cudnn_ms: float, flash_ms: float, date: str = "2026-11-28T12:00:00Z") -> pd.DataFrame:
    return pd.DataFrame([{"gpu": "NVIDIA H200", "dtype": "bfloat16", "pass": "fwd", "seq": 1024, "head_dim": 128,
                          "causal": causal, "backend": b, "batch": 8, "heads": 16,
                          "ms": ms * (2 if causal else 1), "status": "ok", "reason": "", "torch": "2.11.0",
                          "commit": "abc1234", "date": date}
                         for causal in (False, True) for b, ms in (("cudnn", cudnn_ms), ("flash", flash_ms))])


def test_the_declared_sweep_keeps_float16_to_two_head_sizes():
    cells = list(bench.cells())
    # bfloat16: 2 passes x 7 seqs x 5 head sizes x 2 masks = 140; float16: 2 x 7 x 2 x 2 = 56
    assert len(cells) == 196 and {c[3] for c in cells if c[0] == "float16"} == {64, 128}
    assert all(bench.batch_for(s) * bench.HEADS * s <= bench.ROWS_PER_CELL for s in bench.SEQS)


def test_the_grid_shows_cudnn_over_flash_per_cell():
    # 0.9 / 1.0 without a mask and 1.8 / 2.0 with one: 0.90 either way, so their geometric mean is 0.90
    text = bench.render(_rows(0.9, 1.0))
    assert "**NVIDIA H200, bfloat16, fwd**" in text and "| 1024 | 0.90 |" in text


def test_merge_replaces_rows_of_the_same_key(tmp_path):
    table, part = tmp_path / "t.csv", tmp_path / "part.csv"
    _rows(0.9, 1.0).to_csv(table, index=False)
    _rows(1.2, 1.0, date="2026-11-29T12:00:00Z").to_csv(part, index=False)
    assert bench.main(["--table", str(table), "--merge", str(part), "--docs", str(tmp_path / "b.md")]) == 0
    merged = pd.read_csv(table)
    assert len(merged) == 4 and set(merged["date"]) == {"2026-11-29T12:00:00Z"}
    assert "| 1024 | 1.20 |" in (tmp_path / "b.md").read_text()
