"""benchmarks/bench_upstream_paths.py without measuring: the docs block is the CSV's, and a
stale block is caught."""
from __future__ import annotations

import pandas as pd

from benchmarks import bench_upstream_paths as bu


def test_docs_block_is_rendered_from_the_csv(tmp_path):
    assert bu.render_docs(bu.DEFAULT_CSV, bu.DOCS, check=True) == 0, "run bench_upstream_paths.py --render"
    df = pd.read_csv(bu.DEFAULT_CSV)
    df.loc[df.variant == "json_load", "cpu_s"] = df.loc[df.variant == "regex", "cpu_s"].iloc[0] * 7.25
    csv, docs = tmp_path / "u.csv", tmp_path / "a.md"
    df.to_csv(csv, index=False)
    docs.write_text(bu.DOCS.read_text())
    assert bu.render_docs(csv, docs, check=True) == 1
    assert bu.render_docs(csv, docs, check=False) == 0
    row = next(line for line in docs.read_text().splitlines() if line.startswith("| parse | json_load |"))
    assert "| 7.25 |" in row  # CPU time against the regex path's
