"""Roofline formulas, compute-path choice, verdicts and coverage, on hand-worked numbers."""
import math
from dataclasses import dataclass

import pandas as pd
import pytest
import torch

from kernel_advisor.analyze import roofline as R
from kernel_advisor.analyze.ceilings import datasheet_ceilings, make_ceilings
from kernel_advisor.errors import UserInputError

# ---------------------------------------------------------------- formulas

# float64 references: the formulas must agree with exact integer arithmetic.
SHAPES = [(1, 1, 1), (7, 7, 7), (127, 127, 127), (1823, 781, 127)]
ITEMSIZE = {"float32": 4, "bfloat16": 2, "float64": 8}


@pytest.mark.parametrize("m,n,k", SHAPES)
@pytest.mark.parametrize("dtype", ITEMSIZE)
def test_matmul_intensity(m, n, k, dtype):
    flops = 2 * m * n * k
    bytes_ = ITEMSIZE[dtype] * (m * k + k * n + m * n)  # read A, B once, write C once
    assert R.arithmetic_intensity(float(flops), float(bytes_)) == pytest.approx(
        flops / bytes_, rel=1e-15)


def test_intensity_hand_worked():
    # (1823 x 127) @ (127 x 781) fp32: 2*1823*781*127 = 361_635_802 FLOP;
    # 4 * (1823*127 + 127*781 + 1823*781) = 4 * 1_754_471 = 7_017_884 bytes -> 51.53 FLOP/B
    assert R.arithmetic_intensity(361_635_802.0, 7_017_884.0) == pytest.approx(51.5306, rel=1e-5)
    # 7^3 fp32: 2*343 = 686 FLOP over 4*3*49 = 588 bytes = 1.1667 FLOP/B
    assert R.arithmetic_intensity(686.0, 588.0) == pytest.approx(1.1666667)
    assert math.isnan(R.arithmetic_intensity(0.0, 0.0))  # nothing moved: undefined
    assert math.isnan(R.arithmetic_intensity(float("nan"), 8.0))


def test_ridge_point():
    # H100 SXM bf16: 989.5e12 FLOP/s / 3.35e12 B/s = 295.37 FLOP/B
    assert R.ridge_point(989.5e12, 3.35e12) == pytest.approx(295.373, rel=1e-5)
    # H200 measured: 680e12 / 4.282e12 = 158.8 FLOP/B
    assert R.ridge_point(680e12, 4.282e12) == pytest.approx(158.805, rel=1e-5)


def test_roofline_time():
    # 2e12 FLOP at 1e15 FLOP/s = 2 ms; 1e9 B at 1e12 B/s = 1 ms -> compute wins: 2 ms
    assert R.roofline_time_s(2e12, 1e9, 1e15, 1e12) == pytest.approx(2e-3)
    # 1e9 FLOP = 1 us; 4e9 B = 4 ms -> memory wins
    assert R.roofline_time_s(1e9, 4e9, 1e15, 1e12) == pytest.approx(4e-3)
    # unknown FLOPs (Inductor kernel): the memory term alone
    assert R.roofline_time_s(float("nan"), 4e9, 1e15, 1e12) == pytest.approx(4e-3)
    assert math.isnan(R.roofline_time_s(float("nan"), float("nan"), 1e15, 1e12))


def test_efficiency_and_headroom():
    assert R.efficiency_frac(2e-3, 4e-3) == pytest.approx(0.5)  # 2 ms roof / 4 ms taken
    assert math.isnan(R.efficiency_frac(2e-3, 0.0))
    # 10 ms over 4 calls whose roof is 2 ms each: 10 - 4*2 = 2 ms could be saved
    assert R.headroom_s(10e-3, 4, 2e-3) == pytest.approx(2e-3)


# ---------------------------------------------------------------- compute path


@pytest.mark.parametrize("dtype,tc,settings,op,path", [
    ("bfloat16", True, {}, "aten::mm", "bf16_tc"),
    ("float16", True, {}, "aten::bmm", "fp16_tc"),
    ("float8_e4m3fn", True, {}, "aten::_scaled_mm", "fp8_tc"),
    ("torch.bfloat16", True, {}, "aten::mm", "bf16_tc"),
    (torch.float16, True, {}, "aten::mm", "fp16_tc"),
    ("float32", True, {"allow_tf32_matmul": True}, "aten::mm", "tf32"),
    ("float32", True, {"allow_tf32_matmul": False}, "aten::mm", "fp32"),
    ("float32", True, {"float32_matmul_precision": "high"}, "aten::addmm", "tf32"),
    ("float32", True, {}, "aten::mm", "fp32"),  # torch's default: cuBLAS TF32 off
    # convolutions follow the cuDNN flag, not the cuBLAS one
    ("float32", True, {"allow_tf32_matmul": True, "allow_tf32_cudnn": False},
     "aten::convolution", "fp32"),
    ("float32", True, {"allow_tf32_matmul": False, "allow_tf32_cudnn": True},
     "aten::cudnn_convolution", "tf32"),
    ("float32", True, {}, "aten::conv2d", "tf32"),  # torch's default: cuDNN TF32 on
    ("float32", True, {"allow_tf32_matmul": False, "allow_tf32_cudnn": True},
     "prims::convert_element_type", "fp32"),  # "conv" in "convert" is not a convolution
    ("bfloat16", False, {}, "aten::add", "fp32"),  # elementwise: CUDA cores
    ("int64", False, {}, "aten::index", "fp32"),
    ("float64", True, {}, "aten::mm", "fp64"),
    ("float64", False, {}, "aten::add", "fp64"),
])
def test_choose_compute_path(dtype, tc, settings, op, path):
    assert R.choose_compute_path(dtype, tc, settings, op) == path


# ---------------------------------------------------------------- classify

# bf16/fp16 2e14, tf32 1e14, fp32 1e13, fp64 5e12 FLOP/s; 1e12 B/s; 100 SMs; no fp8
CEIL = make_ceilings(
    "Test GPU",
    {"fp64": (5e12, "datasheet"), "fp32": (1e13, "datasheet"), "tf32": (1e14, "datasheet"),
     "fp16_tc": (2e14, "datasheet"), "bf16_tc": (2e14, "datasheet")},
    bandwidth=(1e12, "datasheet"), l2=(50 * 2**20, "datasheet"), sm_count=(100, "datasheet"))


@dataclass(frozen=True)
class Cost:  # the attributes classify reads from costs.OpCost
    flops: float
    bytes: float
    compute_dtype: str
    uses_tensor_cores: bool


def _row(name, shapes, mean_s, *, kind="op", calls=10, cpu_call_s=1e-6, kernel_s=None,
         max_blocks=1000, kernel_file=""):
    return {"name": name, "kind": kind, "input_shapes": shapes, "input_dtypes": "[]",
            "concrete_inputs": "[]", "calls": calls, "device_time_total_s": calls * mean_s,
            "device_time_per_call_s": mean_s, "cpu_time_total_s": calls * cpu_call_s,
            "kernel_time_per_launch_s": mean_s if kernel_s is None else kernel_s,
            "max_blocks": max_blocks, "kernel_file": kernel_file}


# (row, cost or None, expected verdict); shapes only tell rows of one op apart
CASES = {
    # roof max(2e9/2e14, 6e6/1e12) = 10 us; 12.5 us taken -> 80% of the bf16 peak
    "compute": (_row("aten::mm", "[[1]]", 12.5e-6), Cost(2e9, 6e6, "bfloat16", True),
                "compute-bound"),
    # roof max(1e6/1e13, 1.2e7/1e12) = 12 us; 15 us -> 80% of bandwidth
    "memory": (_row("aten::add", "[[2]]", 15e-6), Cost(1e6, 1.2e7, "float32", False),
               "memory-bound"),
    # roof 1.2e4/1e12 = 12 ns in a 3 us kernel: 0.4% -> launch-dominated
    "short": (_row("aten::mul", "[[3]]", 3e-6), Cost(1e3, 1.2e4, "float32", False),
              "latency-bound"),
    # fp32 (TF32 off): roof 2e9/1e13 = 200 us of 1 ms = 20%, on 8 blocks < 100 SMs: a long
    # kernel on a few SMs is under-occupied, not latency-bound
    "underfilled": (_row("aten::mm", "[[4]]", 1e-3, max_blocks=8),
                    Cost(2e9, 6e6, "float32", True), "under-occupied"),
    # the same grid, but a 3 us kernel: launch and ramp-up dominate
    "underfilled-short": (_row("aten::mm", "[[6]]", 3e-6, max_blocks=8),
                          Cost(6e6, 1.8e4, "float32", True), "latency-bound"),
    # roof 12 us of 40 us = 30%, long kernels on a full grid: under the memory roof
    "slow-memory": (_row("aten::sum", "[[5]]", 40e-6), Cost(3e6, 1.2e7, "float32", False),
                    "memory-bound"),
    # roof max(2e10/2e14, 1e7/1e12) = 100 us of 200 us = 50%: under the compute roof
    "slow-compute": (_row("aten::bmm", "[[6]]", 200e-6), Cost(2e10, 1e7, "bfloat16", True),
                     "compute-bound"),
    # 20 us of CPU per call for 2 us of GPU, in a run the GPU was busy 30% of
    "host": (_row("aten::relu", "[[7]]", 2e-6, cpu_call_s=20e-6),
             Cost(1e3, 8e3, "float32", False), "host-bound"),
    "unmodelled": (_row("mylib::thing", "[[8]]", 5e-6), None, "unknown"),
    "no-device-time": (_row("aten::view", "[[9]]", 0.0), Cost(0, 0, "float32", False),
                       "unknown"),
    # no arithmetic and no traffic, yet 50 us on the device: all overhead
    "zero-work": (_row("aten::copy_", "[[10]]", 50e-6), Cost(0, 0, "float32", False),
                  "latency-bound"),
    # Inductor kernel: 2.4e7 B / 1e12 = 24 us roof of 30 us = 80%
    "triton": (_row("triton_poi_fused_add_0", "[]", 30e-6, kind="kernel",
                    kernel_file="/tmp/k.py"), None, "memory-bound"),
    "triton-no-file": (_row("triton_red_fused_sum_1", "[]", 10e-6, kind="kernel"), None,
                       "unknown"),
    "memcpy": (_row("Memcpy HtoD (Pageable -> Device)", "[]", 2e-6, kind="memcpy"), None,
               "unknown"),
}
RUN = {"device": {"type": "cuda", "name": "Test GPU"}, "device_busy_frac": 0.3,
       "settings": {"allow_tf32_matmul": False, "allow_tf32_cudnn": True}}


def _fake_costs(cases):
    table = {(row["name"], row["input_shapes"]): cost for row, cost, _ in cases.values()}
    calls = []

    def op_cost(name, shapes, dtypes, concrete):
        calls.append((name, shapes, dtypes, concrete))
        return table.get((name, _shapes_key(shapes)))

    def kernel_bytes(kernel_file, kernel_name):
        return 2.4e7 if (kernel_file, kernel_name) == ("/tmp/k.py",
                                                       "triton_poi_fused_add_0") else None
    return op_cost, kernel_bytes, calls


def _shapes_key(shapes):
    return "[]" if not shapes else "[[%d]]" % shapes[0][0]


def _classify(run=RUN, cases=CASES, ceilings=CEIL, thresholds=None):
    ops = pd.DataFrame([row for row, _, _ in cases.values()], index=list(cases))
    op_cost, kernel_bytes, calls = _fake_costs(cases)
    out = R.classify(ops, ceilings, run, thresholds, op_cost_fn=op_cost,
                     kernel_bytes_fn=kernel_bytes)
    return ops, out, calls


@pytest.mark.parametrize("case", CASES)
def test_verdicts(case):
    _, out, _ = _classify()
    assert out.loc[case, "verdict"] == CASES[case][2]


def test_compute_bound_row_numbers():
    _, out, _ = _classify()
    r = out.loc["compute"]
    assert r["modelled"] and r["compute_path"] == "bf16_tc"
    assert r["intensity"] == pytest.approx(333.333, rel=1e-5)  # 2e9 / 6e6
    assert r["peak_flops_per_s"] == 2e14 and r["bandwidth_bytes_per_s"] == 1e12
    assert r["roofline_per_call_s"] == pytest.approx(1e-5)
    assert r["achieved_flops_per_s"] == pytest.approx(1.6e14)  # 2e9 / 12.5e-6
    assert r["achieved_bytes_per_s"] == pytest.approx(4.8e11)  # 6e6 / 12.5e-6
    assert r["efficiency_frac"] == pytest.approx(0.8)
    assert r["headroom_total_s"] == pytest.approx(2.5e-5)  # 10 * 12.5 us - 10 * 10 us


def test_unknown_rows_carry_nan_not_zero():
    _, out, _ = _classify()
    r = out.loc["unmodelled"]
    assert not r["modelled"] and r["compute_path"] == ""
    for column in ("flops_per_call", "bytes_per_call", "intensity", "roofline_per_call_s", "efficiency_frac",
                   "headroom_total_s"):
        assert math.isnan(r[column]), column


def test_inductor_kernel_has_bytes_only():
    _, out, _ = _classify()
    r = out.loc["triton"]
    assert r["modelled"] and math.isnan(r["flops_per_call"]) and r["bytes_per_call"] == 2.4e7
    assert math.isnan(r["intensity"]) and r["roofline_per_call_s"] == pytest.approx(2.4e-5)
    assert r["efficiency_frac"] == pytest.approx(0.8)


def test_classify_adds_exactly_the_documented_columns():
    ops, out, calls = _classify()
    assert list(out.columns) == list(ops.columns) + list(R.ANALYZE_COLUMNS)
    assert "verdict" not in ops.columns  # the input is not modified
    assert out["modelled"].dtype == bool and out["flops_per_call"].dtype == float
    assert set(out["verdict"]) <= set(R.VERDICTS)
    # op rows reach the cost model with parsed JSON; kernel/memcpy rows never do
    assert ("aten::mm", [[1]], [], []) in calls
    assert not any(name.startswith(("triton_", "Memcpy")) for name, *_ in calls)


def test_classify_empty_table():
    ops = pd.DataFrame(columns=list(_row("x", "[]", 1.0)))
    out = R.classify(ops, CEIL, RUN, op_cost_fn=lambda *a: None, kernel_bytes_fn=lambda *a: None)
    assert len(out) == 0 and list(out.columns)[-1] == "verdict"


def test_missing_kernel_file_column_means_none():
    row = _row("triton_poi_fused_add_0", "[]", 30e-6, kind="kernel")
    del row["kernel_file"]
    out = R.classify(pd.DataFrame([row]), CEIL, RUN, op_cost_fn=lambda *a: None,
                     kernel_bytes_fn=lambda *a: pytest.fail("no kernel file to read"))
    assert out["verdict"].tolist() == ["unknown"]


def test_busy_device_is_not_host_bound():
    _, out, _ = _classify(run={**RUN, "device_busy_frac": 0.9})
    assert out.loc["host", "verdict"] == "latency-bound"  # 8 ns roof in a 2 us kernel
    _, out, _ = _classify(run={k: v for k, v in RUN.items() if k != "device_busy_frac"})
    assert out.loc["host", "verdict"] == "latency-bound"  # busy fraction unknown


def test_tf32_setting_changes_the_path():
    cases = {"mm": (_row("aten::mm", "[[4]]", 1e-3), Cost(2e9, 6e6, "float32", True), "")}
    _, out, _ = _classify(run={**RUN, "settings": {"allow_tf32_matmul": True}}, cases=cases)
    assert out.loc["mm", "compute_path"] == "tf32" and out.loc["mm", "peak_flops_per_s"] == 1e14
    _, out, _ = _classify(cases=cases)
    assert out.loc["mm", "compute_path"] == "fp32" and out.loc["mm", "peak_flops_per_s"] == 1e13


def test_missing_unit_reports_the_fallback_path():
    cases = {"fp8": (_row("aten::_scaled_mm", "[[1]]", 1e-3),
                     Cost(2e9, 6e6, "float8_e4m3fn", True), "")}
    _, out, _ = _classify(cases=cases)  # the test GPU has no fp8 tensor cores
    assert out.loc["fp8", "compute_path"] == "fp16_tc"
    assert out.loc["fp8", "peak_flops_per_s"] == 2e14


def test_cpu_runs_use_cpu_ceilings():
    cpu = datasheet_ceilings("cpu", "cpu", cpu_threads=2)  # 2 * 96 GFLOP/s, 51.2 GB/s
    cases = {"mm": (_row("aten::mm", "[[1]]", 20e-3, kernel_s=0.0, max_blocks=0),
                    Cost(2e9, 6e6, "bfloat16", True), "")}
    run = {"device": {"type": "cpu", "name": "cpu"}, "device_busy_frac": 1.0, "settings": {}}
    _, out, _ = _classify(run=run, cases=cases, ceilings=cpu)
    r = out.loc["mm"]
    assert r["compute_path"] == "fp32" and r["peak_flops_per_s"] == pytest.approx(192e9)
    # roof max(2e9/192e9, 6e6/51.2e9) = 10.42 ms of 20 ms = 52%: below the limiter,
    # a 20 ms op is not short -> under the compute roof
    assert r["roofline_per_call_s"] == pytest.approx(2e9 / 192e9)
    assert r["efficiency_frac"] == pytest.approx(2e9 / 192e9 / 20e-3)
    assert r["verdict"] == "compute-bound"


def test_thresholds_are_data(tmp_path):
    thr = R.load_thresholds()
    assert thr.limiter_frac == 0.6 and thr.short_kernel_s == 5e-6
    # raise the limiter above 80%: the 80% rows drop below it. The 12.5 us matmul is
    # neither short nor underfilled, so it stays under the compute roof ...
    strict = R.VerdictThresholds(0.9, thr.short_kernel_s, thr.short_kernel_efficiency_frac,
                                 thr.host_device_busy_frac, thr.host_cpu_to_device_ratio)
    _, out, _ = _classify(thresholds=strict)
    assert out.loc["compute", "verdict"] == "compute-bound"
    # ... but counts as short once short means <= 20 us, with a low-efficiency bar of 90%
    loose = R.VerdictThresholds(0.9, 20e-6, 0.9, 0.5, 2.0)
    _, out, _ = _classify(thresholds=loose)
    assert out.loc["compute", "verdict"] == "latency-bound"


def test_threshold_file_errors_name_the_line(tmp_path):
    path = tmp_path / "t.yaml"
    path.write_text(R.THRESHOLDS_FILE.read_text().replace(
        "  limiter_frac: 0.6", "  limiter_frac: 0.6\n  limitter: 0.7"))
    line = path.read_text().splitlines().index("  limitter: 0.7") + 1
    with pytest.raises(UserInputError) as e:
        R.load_thresholds(path)
    assert e.value.problem.startswith(f"{path}:{line}: unknown key 'limitter'")


def test_coverage():
    ops = pd.DataFrame({
        "name": ["aten::mm", "x", "x", "y", "z"],
        "device_time_total_s": [3e-3, 1e-3, 0.5e-3, 0.5e-3, 0.0],
        "modelled": [True, False, False, False, False],
    })
    cov = R.coverage(ops)
    assert cov["modelled_time_pct"] == pytest.approx(60.0)  # 3 of 5 ms
    # x's two shapes add up; z spent no device time and is not listed
    assert cov["unmodelled"] == [{"name": "x", "device_time_total_s": pytest.approx(1.5e-3)},
                                 {"name": "y", "device_time_total_s": pytest.approx(0.5e-3)}]
    assert R.coverage(ops.iloc[:0])["modelled_time_pct"] == 100.0
    assert cov["communication_time_pct"] == 0.0


def test_coverage_counts_collectives_as_communication():
    # A DDP rank on 2 x H200: the all-reduce was 41 % of device time and left the run at 49 %
    # modelled; it belongs to the interconnect roof (comms.csv), not to the unmodelled list.
    ops = pd.DataFrame({
        "name": ["c10d::allreduce_", "aten::mm", "mystery"],
        "device_time_total_s": [4e-3, 5e-3, 1e-3],
        "modelled": [False, True, False],
    })
    cov = R.coverage(ops)
    assert cov["modelled_time_pct"] == pytest.approx(90.0)  # (4 + 5) of 10 ms
    assert cov["communication_time_pct"] == pytest.approx(40.0)
    assert [u["name"] for u in cov["unmodelled"]] == ["mystery"]


def test_real_cost_model_feeds_classify():
    costs = pytest.importorskip("kernel_advisor.analyze.costs")
    if not hasattr(costs, "op_cost"):
        pytest.skip("kernel_advisor.analyze.costs does not export op_cost yet")
    row = _row("aten::mm", "[[64, 32], [32, 16]]", 1e-6)
    row["input_dtypes"] = '["float32", "float32"]'
    row["concrete_inputs"] = '["", ""]'
    out = R.classify(pd.DataFrame([row]), CEIL, RUN)
    r = out.iloc[0]
    assert r["modelled"] and r["flops_per_call"] == 2 * 64 * 16 * 32  # 65_536
    assert r["bytes_per_call"] == 4 * (64 * 32 + 32 * 16 + 64 * 16)  # 4 * 3584 = 14_336
    assert r["compute_path"] == "fp32"  # TF32 off in RUN


def test_malformed_shapes_are_bad_input():
    row = _row("aten::mm", "[[1, 2]", 1e-6)  # truncated JSON
    with pytest.raises(UserInputError) as e:
        R.classify(pd.DataFrame([row]), CEIL, RUN, op_cost_fn=lambda *a: None,
                   kernel_bytes_fn=lambda *a: None)
    assert "input_shapes is not JSON" in e.value.problem


@pytest.mark.parametrize("comm_pct, shown", [(41.2, "100% of device time modelled (41% collectives, on the bus roof)"),
                                             (0.0, "100% of device time modelled ·")])
def test_summary_line_names_the_collectives_share(comm_pct, shown):
    from kernel_advisor.render.profile_render import summary_line

    meta = {"coverage": {"modelled_time_pct": 100.0, "communication_time_pct": comm_pct, "unmodelled": []}}
    assert shown in summary_line(meta, "run")
