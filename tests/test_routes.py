"""The measured routes (reference_kernels/routes.py, data/routes.csv): a call goes where the
nearest measured shape of its kernel, dtype and pass went; the shipped file is what
benchmarks/render_kernels.py derives from benchmarks/data/kernels.csv; the as-shipped sweep
(benchmarks/kernel_routes.py) times routed cells as eager."""
import math
import sys
from pathlib import Path

import pandas as pd
import pytest
import torch

from reference_kernels import registry, routes
from reference_kernels.registry import EAGER_ROUTE, all_kernels, get_kernel
from reference_kernels.routes import Point, RouteTable, RoutesFileError, nearest, read_routes

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))
import kernel_routes  # noqa: E402


def _p(rows, cols, route, kernel_ms=0.02, eager_ms=0.01):
    return Point(rows, cols, route, kernel_ms, eager_ms, "GPU X", "abc1234")


def test_nearest_is_taken_in_log_sizes():
    points = (_p(1, 127, "eager"), _p(16, 4096, "kernel"), _p(2048, 1024, "kernel"))
    # (1000, 1000): log2 distance^2 to 2048x1024 is (11 - 9.97)^2 + (10 - 9.97)^2 = 1.07, to
    # 16x4096 (4 - 9.97)^2 + (12 - 9.97)^2 = 39.7; in linear sizes 16x4096 would be nearer in cols.
    assert nearest(points, 1000, 1000).rows == 2048
    assert nearest(points, 2, 200).rows == 1
    assert nearest(points, 8, 4096).rows == 16


def _table():
    return RouteTable("triton.op", {
        ("bfloat16", "fwd"): (_p(1, 127, "eager"), _p(4096, 4096, "kernel")),
        ("bfloat16", "fwd+bwd"): (_p(1, 127, "eager"), _p(4096, 4096, "eager", math.nan, 0.2)),
    })


def test_route_table_decides_by_pass_and_dtype():
    t = _table()
    assert t.eager_reason(2, 100, "bfloat16", False).startswith("triton.op loses at 1x127 bfloat16 fwd")
    assert "20.0 us a call against eager's 10.0 us" in t.eager_reason(2, 100, "bfloat16", False)
    assert t.eager_reason(4000, 4000, "bfloat16", False) == ""
    assert "the kernel was wrong or refused there, eager 200.0 us a call" in t.eager_reason(4000, 4000, "bfloat16", True)
    assert t.eager_reason(2, 100, "float16", False) != ""  # float16 follows bfloat16's points
    assert t.eager_reason(2, 100, "float32", False) == ""  # no points: the kernel keeps it
    assert t.eager_reason(0, 100, "bfloat16", False) == ""


def test_far_past_the_sweep_the_kernel_keeps_the_call():
    t = _table()  # largest measured shape: 4096 x 4096 = 16.8 M elements
    assert t.eager_reason(1, 2 * 4096 * 4096, "bfloat16", True) != ""  # 2x: still decided
    assert t.eager_reason(1, 2 * 4096 * 4096 + 1, "bfloat16", True) == ""


def test_answers_are_cached_per_call_shape():
    t = _table()
    t.eager_reason(2, 100, "bfloat16", False)
    t.points.clear()
    assert t.eager_reason(2, 100, "bfloat16", False) != ""  # the first answer, not recomputed


HEADER = ",".join(routes.FIELDS)


@pytest.mark.parametrize("text, match", [
    ("kernel,dtype,pass,rows,cols,route\n", "columns"),
    (f"{HEADER}\ntriton.x,bfloat16,fwd,1,127,maybe,0.1,0.1,G,c\n", r":2: route 'maybe'"),
    (f"{HEADER}\ntriton.x,bfloat16,bwd,1,127,eager,0.1,0.1,G,c\n", r":2: route 'eager', pass 'bwd'"),
    (f"{HEADER}\ntriton.x,bfloat16,fwd,one,127,eager,0.1,0.1,G,c\n", r":2: invalid literal"),
])
def test_a_malformed_routes_file_fails_loudly(tmp_path, text, match):
    path = tmp_path / "routes.csv"
    path.write_text(text)
    with pytest.raises(RoutesFileError, match=match):
        read_routes(path)


def test_no_routes_file_means_no_routes(tmp_path):
    assert read_routes(tmp_path / "absent.csv") == {}


def test_the_shipped_routes_are_derived_from_kernels_csv():
    shipped = pd.read_csv(routes.ROUTES_CSV, keep_default_na=False)
    measured = pd.read_csv(REPO / "benchmarks" / "data" / "kernels.csv")
    gpu = measured["gpu"].value_counts().idxmax()
    derived = kernel_routes.routes_table(measured[measured["gpu"] == gpu])
    assert list(shipped.columns) == list(routes.FIELDS)
    key = ["kernel", "dtype", "pass", "rows", "cols"]
    both = shipped.merge(derived, on=key, suffixes=("", "_derived"))
    assert len(both) == len(shipped) == len(derived)
    assert (both["route"] == both["route_derived"]).all()
    ids = {s.id for s in all_kernels()}
    assert set(shipped["kernel"]) <= ids


def test_cuda_calls_follow_the_routes_and_cpu_calls_do_not(monkeypatch):
    monkeypatch.setattr(registry, "routes", lambda: {"triton.softmax": _routes_for("triton.softmax")})
    spec = get_kernel("triton.softmax")
    assert spec.eager_route(2, 100, torch.bfloat16, False).startswith(EAGER_ROUTE + "triton.softmax loses at 1x127")
    assert spec.eager_route(2, 100, torch.bfloat16, False, device="cpu") == ""
    assert spec.eager_route(4000, 4000, torch.bfloat16, False) == ""


def _routes_for(kernel_id):
    t = _table()
    return RouteTable(kernel_id, t.points)


def _sweep(rows_ms, host_us=5.0):
    """kernels.csv rows: (rows, cols, provider, ms[, host us]) for op softmax, bfloat16, fwd."""
    return pd.DataFrame([{"op": "softmax", "rows": r, "cols": c, "dtype": "bfloat16", "pass": "fwd",
                          "provider": p, "gpu": "G", "shape_class": "mid", "status": "ok", "reason": "",
                          "ms": ms, "host_us_per_call": host[0] if host else host_us, "commit": "abc"}
                         for r, c, p, ms, *host in rows_ms])


def test_as_shipped_times_a_routed_cell_as_eager():
    df = _sweep([(1, 127, "ours_triton", 0.03), (1, 127, "eager", 0.01),
                 (4096, 4096, "ours_triton", 0.05), (4096, 4096, "eager", 0.08)])
    table = kernel_routes.routes_table(df)
    assert list(table["route"]) == ["eager", "kernel"]
    shipped = kernel_routes.as_shipped(df).set_index(["rows", "provider"])["ms"]
    assert shipped[(1, "ours_triton")] == 0.01 and shipped[(4096, "ours_triton")] == 0.05


def test_host_time_counts_when_it_is_the_longer():
    # GPU time 20 us against eager's 30, but 60 us of host time a call against eager's 12:
    # back to back (as inside a host-bound model) the kernel delivers a call every 60 us -> eager.
    df = _sweep([(2048, 1024, "ours_triton", 0.020, 60.0), (2048, 1024, "eager", 0.030, 12.0)])
    (row,) = kernel_routes.routes_table(df).itertuples()
    assert row.route == "eager" and row.kernel_ms == pytest.approx(0.060) and row.eager_ms == pytest.approx(0.030)


def test_leave_one_out_routes_each_cell_by_its_neighbours():
    # Three shapes: at 2x128 the kernel loses, but its nearest other shape (1x127) says
    # "kernel", so leave-one-out keeps the kernel's 0.05 ms there; 1x127 follows 2x128 (eager),
    # and so does 4096x4096 (log2 distance^2 146 to 2x128 against 169 to 1x127).
    df = _sweep([(1, 127, "ours_triton", 0.010), (1, 127, "eager", 0.02),
                 (2, 128, "ours_triton", 0.05), (2, 128, "eager", 0.03),
                 (4096, 4096, "ours_triton", 0.05), (4096, 4096, "eager", 0.08)])
    loo = kernel_routes.as_shipped(df, leave_one_out=True).set_index(["rows", "provider"])["ms"]
    assert loo[(2, "ours_triton")] == 0.05
    assert loo[(1, "ours_triton")] == 0.02
    assert loo[(4096, "ours_triton")] == 0.08
