"""Compute-bound GEMMs and attention below their roof, and host-bound ops: each gets a rung."""
from __future__ import annotations

import pandas as pd
import pytest
from test_recommend_support import BW, CEILINGS, PEAKS, STEPS, op_row, op_table, run_meta, sequence_from

from kernel_advisor.recommend import kernel_gain
from kernel_advisor.recommend.evidence import attention_backend
from kernel_advisor.recommend.kernels import registry_kernels
from kernel_advisor.recommend.report import recommend
from kernel_advisor.recommend.schema import load_rules

RULES = load_rules()
KERNELS = registry_kernels()
BF16 = "bfloat16"
BF16_PEAK = PEAKS["bf16_tc"]


def _report(rows, step_s, **meta):
    total = sum(r["device_time_total_s"] for r in rows)
    return recommend(op_table(rows), sequence_from([]),
                     run_meta(total_device_time_s=total, step_wall_s=step_s, ceilings=CEILINGS, **meta),
                     RULES, KERNELS)


def _gemm(efficiency: float) -> dict:
    # 8192 x 4096 x 4096 bf16: 2 * 8192 * 4096 * 4096 = 2.75e11 FLOPs, roof 344 µs at 800 TFLOP/s
    flops = 2.0 * 8192 * 4096 * 4096
    row = op_row(0, "aten::linear", [[8192, 4096], [4096, 4096], [4096]], [BF16] * 3, 1,
                 flops / BF16_PEAK / efficiency, flops=flops, nbytes=2.0 * (2 * 8192 * 4096 + 4096 * 4096),
                 verdict="compute-bound", compute_path="bf16_tc", peak=BF16_PEAK, bw=BW)
    assert row["efficiency_frac"] == pytest.approx(efficiency)
    return row


@pytest.mark.parametrize("efficiency, rung, not_rung", [
    (0.3, "compile-gemm-autotune", "leave-gemm-at-roof"),
    (0.69, "compile-gemm-autotune", "lib-fp8-gemm"),
    (0.75, "lib-fp8-gemm", "compile-gemm-autotune"),
])
def test_a_compute_bound_gemm_below_the_roof_gets_autotuning_and_at_the_roof_fp8(efficiency, rung, not_rung):
    row = _gemm(efficiency)
    report = _report([row], row["device_time_total_s"] * 1.05)
    ids = [f.rule_id for f in report.findings]
    assert rung in ids and not_rung not in ids
    spot = report.hotspots[0]
    assert spot.chosen_tier != "none"
    if rung == "compile-gemm-autotune":
        rec = next(f for f in report.findings if f.rule_id == rung).recommendations[0]
        assert rec.action == "compile:max-autotune-no-cudagraphs"
        # roofline at 70 %: saving = t − t × efficiency / 0.7 over the run's STEPS steps
        t = row["device_time_total_s"]
        assert rec.saving_per_step_s == pytest.approx((t - t * efficiency / 0.7) / STEPS, rel=1e-6)


def _sdpa(kernel_name: str, efficiency: float = 0.3, verdict: str = "compute-bound") -> dict:
    # b=8, h=16, s=4096, d=128 causal=False: 4 * b * h * s^2 * d = 2.81e12 FLOPs a call
    flops = 4.0 * 8 * 16 * 4096 * 4096 * 128
    q = [8, 16, 4096, 128]
    row = op_row(0, "aten::scaled_dot_product_attention", [q, q, q], [BF16] * 3, 1, flops / BF16_PEAK / efficiency,
                 flops=flops, nbytes=4 * 2.0 * 8 * 16 * 4096 * 128, verdict=verdict,
                 compute_path="bf16_tc", peak=BF16_PEAK, bw=BW)
    row["kernels"] = [{"name": kernel_name, "count": 1, "time_total_s": row["device_time_total_s"],
                       "max_blocks": 512}]
    return row


FLASH = "void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128, 64, 4>, false>(Flash_fwd_params)"
CUDNN = "cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_7_64x128x128_4x1x1_kernel0_0"
EFFICIENT = "fmha_cutlassF_bf16_aligned_64x128_rf_sm80(PyTorchMemEffAttention::AttentionKernel<...>::Params)"


@pytest.mark.parametrize("name, backend", [
    (FLASH, "flash"), (CUDNN, "cudnn"), (EFFICIENT, "efficient"),
    ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64", "math"),
])
def test_attention_backend_is_read_from_the_kernel_names(name, backend):
    assert attention_backend("aten::scaled_dot_product_attention", [{"name": name}]) == backend
    assert attention_backend("aten::scaled_dot_product_attention", []) == "unknown"
    assert attention_backend("aten::linear", [{"name": name}]) is None


def _table(cudnn_ms: float, flash_ms: float, gpu: str = "NVIDIA H200") -> pd.DataFrame:
    """A measured backend table: bf16 forward at seq 1024 and 4096, head sizes 64 and 128, both masks."""
    rows = [{"gpu": gpu, "dtype": BF16, "pass": "fwd", "seq": seq, "head_dim": d, "causal": causal,
             "backend": backend, "ms": ms * (seq / 4096) ** 2, "status": "ok"}
            for seq in (1024, 4096) for d in (64, 128) for causal in (False, True)
            for backend, ms in (("cudnn", cudnn_ms), ("flash", flash_ms))]
    return pd.DataFrame(rows)


@pytest.fixture
def backend_table(monkeypatch):
    def use(table: pd.DataFrame) -> None:
        monkeypatch.setattr(kernel_gain, "read_backend_table", lambda *a: table)
    return use


@pytest.mark.parametrize("verdict", ["compute-bound", "memory-bound"])
def test_flash_attention_below_the_roof_on_hopper_is_offered_cudnn(verdict, backend_table):
    # short sequences put attention on the memory side of the ridge: the backend is still the
    # rung, and compile (which calls the same fused kernel) is not offered for it
    backend_table(_table(cudnn_ms=0.8, flash_ms=1.0))
    row = _sdpa(FLASH, verdict=verdict)
    report = _report([row], row["device_time_total_s"] * 1.05)
    assert "compile-memory-bound-op" not in [f.rule_id for f in report.findings]
    finding = next(f for f in report.findings if f.rule_id == "lib-sdpa-cudnn")
    rec = finding.recommendations[0]
    assert rec.action == "sdpa_cudnn" and "ran the flash backend at 30 %" in rec.message
    assert report.hotspots[0].chosen_rule == "lib-sdpa-cudnn"
    # the table's cell at seq 4096, head size 128: cuDNN 0.8 ms against flash's 1.0 ms, so the
    # saving is 20 % of the op's time, whatever its headroom under the roof
    assert rec.saving_per_step_s == pytest.approx(0.2 * row["device_time_total_s"] / STEPS, rel=1e-6)


def test_a_backend_the_table_measured_slower_predicts_no_saving(backend_table):
    backend_table(_table(cudnn_ms=1.1, flash_ms=1.0))
    row = _sdpa(FLASH)
    report = _report([row], row["device_time_total_s"] * 1.05)
    assert "lib-sdpa-cudnn" not in [f.rule_id for f in report.findings]
    why = dict(report.hotspots[0].passed_over)["library"]  # the leave-it names the measured figure
    assert "estimates no saving" in why and "cudnn measured at 1.10× flash's time" in why


def test_a_gpu_the_backend_table_lacks_gets_no_estimate_and_says_how_to_measure(backend_table):
    backend_table(_table(cudnn_ms=0.8, flash_ms=1.0, gpu="NVIDIA A100-SXM4-80GB"))
    row = _sdpa(FLASH)
    report = _report([row], row["device_time_total_s"] * 1.05)
    rec = next(f for f in report.findings if f.rule_id == "lib-sdpa-cudnn").recommendations[0]
    assert rec.saving_per_step_s is None and "bench_sdpa_backends.py" in rec.gain_basis


@pytest.mark.parametrize("seq, d, cell", [(4096, 128, (4096, 128)), (3000, 120, (4096, 128)),
                                          (1500, 64, (1024, 64)), (100_000, 256, (4096, 128))])
def test_the_backend_ratio_is_read_at_the_nearest_measured_cell(seq, d, cell):
    # 1500 is nearer 1024 than 4096 in log2 (0.55 against 1.45); head size 120 is nearest 128
    r = kernel_gain.backend_ratio(_table(0.8, 1.0), "NVIDIA H200", BF16, "fwd",
                                   kernel_gain.AttentionShape(seq, d), "flash", "cudnn")
    assert (r.seq, r.head_dim) == cell and r.ratio == pytest.approx(0.8) and r.masks == 2


def test_cudnn_attention_is_not_offered_before_hopper():
    row = _sdpa(FLASH)
    report = _report([row], row["device_time_total_s"] * 1.05, capability=[8, 0])
    assert "lib-sdpa-cudnn" not in [f.rule_id for f in report.findings]
    reasons = " ".join(r for _, r in report.hotspots[0].passed_over)
    assert "lib-sdpa-cudnn: capability is [8, 0]" in reasons  # the nearest miss names the failed check


def test_cudnn_attention_below_the_roof_is_offered_flash_instead(backend_table):
    backend_table(_table(cudnn_ms=1.0, flash_ms=0.9))
    row = _sdpa(CUDNN)
    report = _report([row], row["device_time_total_s"] * 1.05)
    ids = [f.rule_id for f in report.findings]
    assert "lib-sdpa-flash" in ids and "lib-sdpa-cudnn" not in ids
    rec = next(f for f in report.findings if f.rule_id == "lib-sdpa-flash").recommendations[0]
    assert rec.action == "sdpa_flash" and report.hotspots[0].chosen_rule == "lib-sdpa-flash"


def test_a_host_bound_op_in_a_run_without_launch_gaps_names_its_host_cost():
    # 10 calls a step of 20 µs CPU and 5 µs device each (host-bound), STEPS steps
    row = op_row(0, "aten::reshape", [[4096, 8, 512]], [BF16], 10 * 10, 5e-6 * 10 * 10, flops=0.0,
                 nbytes=2.0 * 4096 * 8 * 512 * 2, verdict="host-bound", bw=BW)
    row["cpu_time_total_s"] = 20e-6 * 100
    report = _report([row], 60e-6)
    rec = next(f for f in report.findings if f.rule_id == "compile-host-bound-op").recommendations[0]
    assert rec.action == "compile"
    assert "costs 20 µs of CPU time per call against 5.0 µs on the GPU" in rec.message


def test_a_memory_bound_op_past_compiles_target_is_left_with_that_evidence():
    # A skinny bf16 linear (8192 x 64 by 64 x 64) is memory-bound: 2 x (8192 x 64 x 2 + 64 x 64) B
    # = 2.11 MB, roof 2.11e6 / 4e12 = 0.527 µs; at 0.685 µs a call it runs at 77 % of bandwidth:
    # past compile's 70 % target and under leave-op-at-bandwidth's 80 %.
    nbytes = 2.0 * (2 * 8192 * 64 + 64 * 64)
    row = op_row(0, "aten::linear", [[8192, 64], [64, 64]], [BF16] * 2, 100, 100 * nbytes / BW / 0.77,
                 flops=2.0 * 8192 * 64 * 64, nbytes=nbytes, verdict="memory-bound", compute_path="bf16_tc",
                 peak=BF16_PEAK, bw=BW)
    spot = _report([row], row["device_time_total_s"]).hotspots[0]
    assert spot.chosen_tier == "leave-it" and spot.chosen_rule is None
    assert spot.why.startswith("already where compile-memory-bound-op would bring it: ")
    assert "at 70% of the roofline" in spot.why
