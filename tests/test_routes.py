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
import shape_draws  # noqa: E402


def _p(rows, cols, kernel_ms, eager_ms, kernel_host_ms=0.005, eager_host_ms=0.005):
    return Point(rows, cols, kernel_ms, kernel_host_ms, eager_ms, eager_host_ms, "GPU X", "abc1234")


def test_nearest_is_taken_in_log_sizes():
    points = (_p(1, 127, 0.02, 0.01), _p(16, 4096, 0.01, 0.02), _p(2048, 1024, 0.01, 0.02))
    # (1000, 1000): log2 distance^2 to 2048x1024 is (11 - 9.97)^2 + (10 - 9.97)^2 = 1.07, to
    # 16x4096 (4 - 9.97)^2 + (12 - 9.97)^2 = 39.7; in linear sizes 16x4096 would be nearer in cols.
    assert nearest(points, 1000, 1000).rows == 2048
    assert nearest(points, 2, 200).rows == 1
    assert nearest(points, 8, 4096).rows == 16


def test_the_regime_decides_which_time_counts():
    # GPU time 20 us against eager's 30, host 60 us a call against eager's 12: the kernel wins a
    # device-bound step and loses a host-bound one (a call every 60 us against every 30).
    p = _p(2048, 1024, 0.020, 0.030, kernel_host_ms=0.060, eager_host_ms=0.012)
    assert not p.loses(False) and p.loses(True)
    assert p.times_ms(True) == (0.060, 0.030) and p.times_ms(False) == (0.020, 0.030)
    assert _p(1, 1, math.nan, 0.01).loses(False)  # wrong or refused: eager


def _table():
    return RouteTable("triton.op", {
        ("bfloat16", "fwd"): (_p(1, 127, 0.02, 0.01), _p(4096, 4096, 0.01, 0.02, kernel_host_ms=0.05)),
        ("bfloat16", "fwd+bwd"): (_p(1, 127, 0.02, 0.01), _p(4096, 4096, math.nan, 0.2)),
    })


def test_route_table_decides_by_pass_dtype_and_regime():
    t = _table()
    assert t.eager_reason(2, 100, "bfloat16", False).startswith("triton.op loses at 1x127 bfloat16 fwd")
    # 2x100 is 200/127 = 1.57x the point's elements: a larger call keeps the point's GPU times
    assert "20.0 us against eager's 10.0 us a call (GPU or host time" in t.eager_reason(2, 100, "bfloat16", False)
    assert "of GPU time" in t.eager_reason(2, 100, "bfloat16", False, False)
    # 4096x4096: 10 us of GPU time against 20 wins a device-bound step; 50 us of host time loses
    # (4000x4000 is 0.954x the point: eager's 20 us of GPU time scales to 19.1)
    assert t.eager_reason(4000, 4000, "bfloat16", False, False) == ""
    assert "50.0 us against eager's 19.1 us" in t.eager_reason(4000, 4000, "bfloat16", False, True)
    assert "the kernel was wrong or refused there, eager 190.7 us" in t.eager_reason(4000, 4000, "bfloat16", True)
    assert t.eager_reason(2, 100, "float16", False) != ""  # float16 follows bfloat16's points
    assert t.eager_reason(2, 100, "float32", False) == ""  # no points: the kernel keeps it
    assert t.eager_reason(0, 100, "bfloat16", False) == ""
    assert t.eager_counts(True) == {"fwd": (2, 2), "fwd+bwd": (2, 2)}
    assert t.eager_counts(False) == {"fwd": (1, 2), "fwd+bwd": (2, 2)}


def test_a_smaller_call_of_a_host_bound_step_scales_the_gpu_time_not_the_host_time():
    # H200 sweep, triton.gelu bf16 fwd at 4096x4096: GPU 21.9 us against eager's 27.5, host
    # 17.3 us against 7.1: the kernel wins the point itself even counting host time. A ViT's
    # 6304x768 call has 0.289x its elements: GPU 6.3 against 7.9 us, so the host time decides,
    # 17.3 against 7.9 us, and the call goes to eager (it made the ViT 0.77x as fast).
    p = _p(4096, 4096, 0.0219, 0.0275, kernel_host_ms=0.0173, eager_host_ms=0.0071)
    t = RouteTable("triton.gelu", {("bfloat16", "fwd"): (p,)})
    assert not p.loses(True)
    assert t.eager_reason(4096, 4096, "bfloat16", False, True) == ""
    reason = t.eager_reason(6304, 768, "bfloat16", False, True)
    assert "17.3 us against eager's 7.9 us" in reason and "scaled 0.289x" in reason
    assert t.eager_reason(6304, 768, "bfloat16", False, False) == ""  # device-bound: GPU ratio


def test_a_larger_call_keeps_the_points_gpu_times():
    # H200 sweep, triton.layer_norm bf16 fwd at 2048x127: GPU 8.0 us against eager's 19.9
    # (eager's odd-width path), host 41.1 us against 15.5. A ViT's 6304x192 call has 4.65x its
    # elements; scaled up, eager's latency would count 92.6 us and keep the kernel, which made
    # that ViT 0.56x as fast. Unscaled: 41.1 us against 19.9, eager.
    p = _p(2048, 127, 0.0080, 0.0199, kernel_host_ms=0.0411, eager_host_ms=0.0155)
    big = _p(16384, 8192, 0.10, 0.20)  # the sweep's far end: 6304x192 is inside it
    t = RouteTable("triton.layer_norm", {("bfloat16", "fwd"): (p, big)})
    assert p.scale_to(6304, 192) == 1.0 and p.scale_to(1024, 127) == 0.5
    reason = t.eager_reason(6304, 192, "bfloat16", False, True)
    assert "41.1 us against eager's 19.9 us a call (GPU or host time" in reason
    assert t.eager_reason(6304, 192, "bfloat16", False, False) == ""  # device-bound: GPU ratio


def test_a_substituted_call_pays_its_dispatch_in_a_host_bound_step():
    # H200 sweep, cuda.layer_norm bf16 fwd at 2048x127: host 15.5 us against eager's 17.2, GPU
    # 6 against 20. Bare, the kernel keeps the call (max(6, 15.5) = 15.5 < 20); through
    # try-kernel's override, 12 us more a call: 27.5 us against eager's 20.0, eager. A
    # device-bound step hides host time: the kernel keeps it either way.
    p = _p(2048, 127, 0.006, 0.020, kernel_host_ms=0.0155, eager_host_ms=0.0172)
    t = RouteTable("cuda.layer_norm", {("bfloat16", "fwd"): (p, _p(16384, 8192, 0.1, 0.2))})
    assert t.eager_reason(2048, 127, "bfloat16", False, True) == ""
    reason = t.eager_reason(2048, 127, "bfloat16", False, True, 0.012)
    assert "27.5 us against eager's 20.0 us" in reason and "12.0 us of dispatch added" in reason
    assert t.eager_reason(2048, 127, "bfloat16", False, False, 0.012) == ""


def test_host_bound_is_below_the_busy_threshold():
    assert routes.host_bound(None) and routes.host_bound(0.79) and not routes.host_bound(0.8)


HEADER = ",".join(routes.FIELDS)


@pytest.mark.parametrize("text, match", [
    ("kernel,dtype,pass,rows,cols,route\n", "columns"),
    (f"{HEADER}\ntriton.x,bfloat16,bwd,1,127,0.1,0.01,0.1,0.01,G,c\n", r":2: pass 'bwd'"),
    (f"{HEADER}\ntriton.x,bfloat16,fwd,1,127,0.1,0.01,0,0.01,G,c\n", r":2: .*eager_ms 0.0"),
    (f"{HEADER}\ntriton.x,bfloat16,fwd,one,127,0.1,0.01,0.1,0.01,G,c\n", r":2: invalid literal"),
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
    measured = pd.read_csv(REPO / "benchmarks" / "data" / "kernels.csv", keep_default_na=False,
                           na_values={"ms": [""], "host_us_per_call": [""]})
    gpu = shape_draws.fit_rows(measured)["gpu"].value_counts().idxmax()
    derived = kernel_routes.routes_table(shape_draws.fit_rows(measured[measured["gpu"] == gpu]))
    assert list(shipped.columns) == list(routes.FIELDS)
    key = ["kernel", "dtype", "pass", "rows", "cols", "draw"]  # a fit draw may repeat a grid shape
    both = shipped.merge(derived, on=key, suffixes=("", "_derived"))
    assert len(both) == len(shipped) == len(derived)
    for col in ("kernel_ms", "kernel_host_ms", "eager_ms", "eager_host_ms"):
        assert both[col].fillna(-1).to_numpy() == pytest.approx(both[col + "_derived"].fillna(-1).to_numpy(), rel=1e-5)
    ids = {s.id for s in all_kernels()}
    assert set(shipped["kernel"]) <= ids
    assert all(shape_draws.is_fit_draw(d) for d in shipped["draw"])  # fit on fit draws only


def test_cuda_calls_follow_the_routes_and_cpu_calls_do_not(monkeypatch):
    monkeypatch.setattr(registry, "routes", lambda: {"triton.softmax": _routes_for("triton.softmax")})
    spec = get_kernel("triton.softmax")
    assert spec.eager_route(2, 100, torch.bfloat16, False).startswith(EAGER_ROUTE + "triton.softmax loses at 1x127")
    assert spec.eager_route(2, 100, torch.bfloat16, False, device="cpu") == ""
    assert spec.eager_route(4000, 4000, torch.bfloat16, False, host_bound=False) == ""
    assert spec.eager_route(4000, 4000, torch.bfloat16, False) != ""  # host-bound unless told


def _routes_for(kernel_id):
    t = _table()
    return RouteTable(kernel_id, t.points)


def _sweep(rows_ms, host_us=5.0):  # noqa: D401
    """kernels.csv rows: (rows, cols, provider, ms[, host us]) for op softmax, bfloat16, fwd."""
    return pd.DataFrame([{"op": "softmax", "rows": r, "cols": c, "dtype": "bfloat16", "pass": "fwd",
                          "provider": p, "gpu": "G", "shape_class": "mid", "status": "ok", "reason": "",
                          "ms": ms, "host_us_per_call": host[0] if host else host_us, "commit": "abc"}
                         for r, c, p, ms, *host in rows_ms])


def test_as_shipped_times_a_routed_cell_as_eager():
    df = _sweep([(1, 127, "ours_triton", 0.03), (1, 127, "eager", 0.01),
                 (4096, 4096, "ours_triton", 0.05), (4096, 4096, "eager", 0.08)])
    table = kernel_routes.routes_table(df)
    assert list(table["kernel_ms"]) == [0.03, 0.05] and list(table["eager_ms"]) == [0.01, 0.08]
    shipped = kernel_routes.as_shipped(df).set_index(["rows", "provider"])["ms"]
    assert shipped[(1, "ours_triton")] == 0.01 and shipped[(4096, "ours_triton")] == 0.05


def test_host_time_routes_only_the_host_bound_view():
    # GPU time 20 us against eager's 30, but 60 us of host time a call against eager's 12
    df = _sweep([(2048, 1024, "ours_triton", 0.020, 60.0), (2048, 1024, "eager", 0.030, 12.0)])
    (row,) = kernel_routes.routes_table(df).itertuples()
    assert row.kernel_host_ms == pytest.approx(0.060) and row.eager_host_ms == pytest.approx(0.012)
    device = kernel_routes.as_shipped(df).set_index("provider")["ms"]
    host = kernel_routes.as_shipped(df, host_bound_step=True).set_index("provider")["ms"]
    assert device["ours_triton"] == 0.020 and host["ours_triton"] == 0.030


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


def test_try_kernel_binds_the_runs_regime(monkeypatch):
    from kernel_advisor.trykernel.candidates import from_spec
    from kernel_advisor.trykernel.driver import route_note

    monkeypatch.setattr(registry, "routes", lambda: {"triton.softmax": _routes_for("triton.softmax")})
    spec = get_kernel("triton.softmax")
    # 4096x4096: 10 us of GPU time against eager's 20, but 50 us of host time a call
    assert from_spec(spec, [], host_bound=False).route(4000, 4000, torch.bfloat16, False, "cuda") == ""
    assert "50.0 us against" in from_spec(spec, [], host_bound=True).route(4000, 4000, torch.bfloat16, False, "cuda")
    assert "busy 94% of the step (device-bound)" in route_note(0.94, False)
    assert "on GPU time" in route_note(0.94, False) and "counting host time" in route_note(0.5, True)
    assert "no profiled run" in route_note(None, True)
