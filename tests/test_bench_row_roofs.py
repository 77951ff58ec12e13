"""benchmarks/bench_row_roofs.py: the roof cells it measures (no GPU needed for the plan)."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))

import bench_row_roofs as roofs  # noqa: E402


def test_norm_cells_hold_at_least_32_mib_of_bf16_rows_at_every_target_width():
    cells = roofs.roof_cells(["rms_norm", "layer_norm"], ["bfloat16"], ["fwd+bwd"])
    assert {c.cols for c in cells} == {3000, 4096, 5120, 7168, 8192, 14336}
    assert all(c.rows * c.cols * 2 >= 32 * 2**20 for c in cells)


def test_long_row_cells_have_fewer_rows_than_four_programs_per_sm_of_an_h200():
    from reference_kernels.triton import rowsplit

    cells = roofs.roof_cells(["softmax", "log_softmax"], None, None)
    assert {(c.pass_, c.dtype) for c in cells} == {(p, d) for p in ("fwd", "fwd+bwd")
                                                   for d in ("bfloat16", "float32")}
    assert all(rowsplit.splits_rows(c.rows, 132) and c.cols > 32768 for c in cells)


def test_plan_needs_no_gpu(capsys):
    assert roofs.main(["--plan", "--ops", "softmax"]) == 0
    assert "12 cells" in capsys.readouterr().out
