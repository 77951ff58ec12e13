"""benchmarks/bench_profile.py without a GPU: the upsert by key and the docs block it renders."""
import pandas as pd
import pytest

from benchmarks import bench_profile as bp


def _row(model, mode, overhead, busy, gpu="NVIDIA H200", commit="abc1234", shapes=2.0):
    return {"model": model, "mode": mode, "steps": 20, "step_unprofiled_s": 1e-3, "step_profiled_s": 1e-3 * overhead,
            "overhead": overhead, "overhead_low": overhead - 0.01, "overhead_high": overhead + 0.02,
            "kernel_timing": "kernels-only", "shapes_pass_overhead": shapes, "shapes_pass_overhead_low": shapes - 0.1,
            "shapes_pass_overhead_high": shapes + 0.1, "device_busy_frac": busy, "modelled_time_pct": 100.0, "gpu": gpu, "torch": "2.11.0",
            "triton": "3.6.0", "commit": commit, "date": "2026-11-26"}


def test_upsert_replaces_only_the_same_key():
    old = pd.DataFrame([_row("vit_tiny", "inference", 1.30, 0.4), _row("vit_tiny", "train", 1.2, 0.5),
                        _row("vit_tiny", "inference", 1.5, 0.4, gpu="NVIDIA H100")])
    new = pd.DataFrame([_row("vit_tiny", "inference", 1.10, 0.4, commit="def5678")])
    merged = bp.upsert_rows(old, new, bp.KEY)
    assert len(merged) == 3
    h200 = merged[(merged["gpu"] == "NVIDIA H200") & (merged["mode"] == "inference")]
    assert h200["overhead"].tolist() == [1.10] and h200["commit"].tolist() == ["def5678"]


def test_render_judges_only_host_bound_rows_against_the_aim():
    df = pd.DataFrame([_row("gpt_block", "inference", 1.30, 0.95), _row("vit_tiny", "inference", 1.12, 0.40),
                       _row("resnet_basic", "inference", 1.40, 0.55)])
    text = bp.render(df)
    rows = {line.split(" | ")[0].lstrip("| "): line for line in text.splitlines() if line.startswith("| ")}
    assert rows["gpt_block"].endswith("| no | – |")  # device-bound: not held to 1.15x
    assert rows["vit_tiny"].endswith("| yes | yes |")
    assert rows["resnet_basic"].endswith("| yes | **no** |")
    assert "1 of 2 within 1.15×; the largest overhead 1.400× (resnet_basic). The shapes pass alone: 2.00–2.00×." in text


def test_rows_measured_before_the_timing_pass_render_dashes():
    old = {k: v for k, v in _row("vit_tiny", "inference", 2.1, 0.2).items() if "shapes" not in k and k != "kernel_timing"}
    line = [x for x in bp.render(pd.DataFrame([old])).splitlines() if x.startswith("| vit_tiny")][0]
    assert "| 2.100× [2.090–2.120] | – | – | – | 20 % |" in line


def test_render_docs_splices_and_checks(tmp_path):
    csv, docs = tmp_path / "p.csv", tmp_path / "b.md"
    pd.DataFrame([_row("vit_tiny", "inference", 1.12, 0.40)]).to_csv(csv, index=False)
    docs.write_text(f"# B\n\n## Profiling overhead\n\n{bp.BEGIN}\n{bp.END}\n\n## Next\n", encoding="utf-8")
    assert bp.render_docs(csv, docs, check=True) == 1  # stale
    assert bp.render_docs(csv, docs, check=False) == 0
    assert ("| vit_tiny | inference | 1.000 ms | 1.120× [1.110–1.140] | – | kernels-only | 2.000× [1.900–2.100] "
            "| 40 % | yes | yes |") in docs.read_text()
    assert bp.render_docs(csv, docs, check=True) == 0
    assert bp.render_docs(tmp_path / "missing.csv", docs, check=False) == 1


@pytest.mark.parametrize("w", bp.WORKLOADS, ids=lambda w: f"{w.name}-{w.mode}")
def test_declared_workloads_exist(w):
    assert (bp.REPO / w.model).is_file()


def test_repeated_runs_keep_the_median_run_and_list_every_overhead():
    runs = [{"overhead": v, "tag": i} for i, v in enumerate([1.19, 1.10, 1.13])]
    row = bp.median_run(runs)
    assert row["tag"] == 2 and row["repeats"] == 3 and row["overhead_runs"] == "1.190;1.100;1.130"
    assert bp.median_run(runs[:2])["tag"] == 1  # even count: the lower middle run
    df = pd.DataFrame([{**_row("vit_tiny", "inference", 1.13, 0.4), "overhead_runs": "1.190;1.100;1.130"}])
    assert "| 1.190× · 1.100× · 1.130× | kernels-only |" in bp.render(df)
