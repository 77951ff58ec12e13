"""Op-sequence pattern detection on synthetic sequences, with hand-worked intermediate bytes."""
from __future__ import annotations

import pandas as pd
import pytest
from test_recommend_support import run_meta, seq_entry, sequence_from

from kernel_advisor.recommend.evidence import run_context
from kernel_advisor.recommend.subjects import detect_patterns
from kernel_advisor.recommend.shapes import base_name, link_bytes, output_numel

F32, F16 = "float32", "float16"
NO_OPS = pd.DataFrame({"row_id": pd.Series([], dtype=int), "kind": pd.Series([], dtype=str)})


def ctx(mode="inference", device_type="cuda"):
    return run_context(run_meta(total_device_time_s=1.0, step_wall_s=1.0, mode=mode, device_type=device_type))


def detect(ops, steps=1, mode="inference", kinds=None, region="", device_type="cuda"):
    seq = sequence_from(ops, steps=steps, region=region)
    table = NO_OPS if kinds is None else pd.DataFrame({"row_id": list(kinds), "kind": list(kinds.values())})
    return detect_patterns(seq, table, ctx(mode, device_type))


def by_name(groups, pattern):
    return [g for g in groups if g.pattern == pattern]


# S = [2, 4, 8, 8] fp32: 512 elements, 2048 bytes; the causal mask [8, 8] bool: 64 bytes
ATTENTION = [
    ("aten::matmul", 0, [[2, 4, 8, 16], [2, 4, 16, 8]], [F32, F32], 1e-5),
    ("aten::transpose", 9, [[2, 4, 8, 16], [], []], [F32, "", ""], 0.0),  # a view: dropped
    ("aten::div", 1, [[2, 4, 8, 8], []], [F32, "scalar"], 1e-5),
    ("aten::ones", 2, [[], [], [], [], []], ["", "", "", "", ""], 1e-6),
    ("aten::triu", 3, [[8, 8], []], ["bool", ""], 1e-6),
    ("aten::masked_fill", 4, [[2, 4, 8, 8], [8, 8], []], [F32, "bool", "scalar"], 1e-5),
    ("aten::softmax", 5, [[2, 4, 8, 8], [], []], [F32, "", ""], 1e-5),
    ("aten::matmul", 6, [[2, 4, 8, 8], [2, 4, 8, 16]], [F32, F32], 1e-5),
]


def test_naive_attention_found_with_score_bytes():
    groups = by_name(detect(ATTENTION), "naive-attention")
    assert len(groups) == 1
    g = groups[0]
    assert g.row_ids == (0, 1, 2, 3, 4, 5, 6)
    # links: matmul→div 2048, div→masked_fill 2048 (ones/triu do not carry S), triu→masked_fill 64,
    # masked_fill→softmax 2048, softmax→matmul 2048: 2 × (4 × 2048 + 64) = 16512 bytes
    assert g.intermediate_bytes == 16512


def test_naive_attention_absent_without_the_second_matmul():
    ops = ATTENTION[:-1] + [("aten::linear", 7, [[2, 4, 8, 8], [16, 8]], [F32, F32], 1e-5)]
    assert by_name(detect(ops), "naive-attention") == []


def test_naive_attention_absent_when_scores_do_not_feed_the_second_matmul():
    ops = ATTENTION[:-1] + [("aten::matmul", 6, [[2, 4, 8, 16], [2, 4, 16, 8]], [F32, F32], 1e-5)]
    assert by_name(detect(ops), "naive-attention") == []


def test_sdpa_is_not_naive_attention():
    ops = [("aten::scaled_dot_product_attention", 0, [[2, 4, 8, 16]] * 3, [F16] * 3, 1e-5)]
    assert by_name(detect(ops), "naive-attention") == []


# x = [1000, 1000] fp32 (4e6 bytes); the row statistic [1000, 1] (4000 bytes)
RMSNORM = [
    ("aten::pow", 10, [[1000, 1000], []], [F32, "scalar"], 1e-5),
    ("aten::mean", 11, [[1000, 1000], [], [], []], [F32, "", "", ""], 1e-5),
    ("aten::add", 12, [[1000, 1], []], [F32, "scalar"], 1e-5),
    ("aten::rsqrt", 13, [[1000, 1]], [F32], 1e-5),
    ("aten::to", 16, [[1000, 1000], [], []], [F32, "", ""], 0.0),  # no-op cast: launched nothing
    ("aten::mul", 14, [[1000, 1000], [1000, 1]], [F32, F32], 1e-5),
    ("aten::mul", 15, [[1000], [1000, 1000]], [F32, F32], 1e-5),
]


def test_rmsnorm_chain_found_with_bytes():
    groups = by_name(detect(RMSNORM), "rmsnorm-chain")
    assert [g.row_ids for g in groups] == [(10, 11, 12, 13, 14, 15)]
    # pow→mean 4e6, mean→add 4000, add→rsqrt 4000, rsqrt→mul 4000, mul→mul 4e6:
    # 2 × 8_012_000 = 16_024_000 bytes
    assert groups[0].intermediate_bytes == 16_024_000


def profiled_rmsnorm(cast_time_s):
    """The order torch.profiler records for `w * (x.float() * rsqrt(x.float().pow(2).mean(-1) + eps))`:
    the left operand x.float() runs before rsqrt, and eps arrives as a 0-d float64."""
    x, scalar4 = [[2, 128, 256], [], [], [], []], [F32, "scalar", "scalar", "scalar", ""]
    return [("aten::to", 70, x, scalar4, cast_time_s),
            ("aten::pow", 71, [[2, 128, 256], []], [F32, "scalar"], 1e-5),
            ("aten::mean", 72, [[2, 128, 256], [], [], []], [F32, "ScalarList", "scalar", ""], 1e-5),
            ("aten::to", 70, x, scalar4, cast_time_s),
            ("aten::add", 73, [[2, 128, 1], [], []], [F32, "float64", "scalar"], 1e-5),
            ("aten::rsqrt", 74, [[2, 128, 1]], [F32], 1e-5),
            ("aten::mul", 75, [[2, 128, 256], [2, 128, 1]], [F32, F32], 1e-5),
            ("aten::to", 70, x, scalar4, cast_time_s),
            ("aten::mul", 76, [[256], [2, 128, 256]], [F32, F32], 1e-5)]


@pytest.mark.parametrize("device_type, cast_time_s, expected_bytes", [
    # GPU: the casts of an fp32 tensor launch nothing and drop out:
    # pow→mean 262144, mean→add 1024, add→rsqrt 1024, rsqrt→mul 1024, mul→mul 262144 → × 2 = 1_054_720
    ("cuda", 0.0, 1_054_720),
    # CPU: the casts stay, and x.float() feeds the first mul (262144) as does the second cast
    # (262144): 2 × (4 × 262144 + 3 × 1024) = 2_103_296
    ("cpu", 2e-7, 2_103_296)])
def test_rmsnorm_as_profiled(device_type, cast_time_s, expected_bytes):
    groups = by_name(detect(profiled_rmsnorm(cast_time_s), device_type=device_type), "rmsnorm-chain")
    assert len(groups) == 1
    assert groups[0].intermediate_bytes == expected_bytes


def test_residual_rmsnorm():
    residual = [("aten::add", 80, [[2, 128, 256], [2, 128, 256], []], [F32, F32, "scalar"], 1e-5)]
    groups = detect(residual + profiled_rmsnorm(0.0))
    assert [g.row_ids for g in by_name(groups, "rmsnorm-chain")] == [(71, 72, 73, 74, 75, 76)]
    assert [g.row_ids for g in by_name(groups, "residual-rmsnorm")] == [(80, 71, 72, 73, 74, 75, 76)]
    # the residual sum is handed on once more: 1_054_720 + 2 × 262144
    assert by_name(groups, "residual-rmsnorm")[0].intermediate_bytes == 1_054_720 + 2 * 262144
    assert by_name(detect(profiled_rmsnorm(0.0)), "residual-rmsnorm") == []


def test_rmsnorm_chain_is_also_one_elementwise_chain():
    chains = by_name(detect(RMSNORM), "elementwise-chain")
    assert [(g.row_ids, g.intermediate_bytes) for g in chains] == [((10, 11, 12, 13, 14, 15), 16_024_000)]


def test_rmsnorm_absent_without_rsqrt():
    ops = [op for op in RMSNORM if op[0] != "aten::rsqrt"]
    assert by_name(detect(ops), "rmsnorm-chain") == []


def test_rmsnorm_x_times_x_variant():
    ops = [("aten::mul", 20, [[1000, 1000], [1000, 1000]], [F32, F32], 1e-5)] + RMSNORM[1:]
    assert len(by_name(detect(ops), "rmsnorm-chain")) == 1


@pytest.mark.parametrize("dtype, itemsize", [(F32, 4), (F16, 2), ("bfloat16", 2)])
def test_elementwise_chain_bytes_per_dtype(dtype, itemsize):
    ops = [("aten::add", 0, [[8, 32], [8, 32]], [dtype, dtype], 1e-5),
           ("aten::gelu", 1, [[8, 32], []], [dtype, ""], 1e-5),
           ("aten::mul", 2, [[8, 32], []], [dtype, "scalar"], 1e-5),
           ("aten::linear", 3, [[8, 32], [64, 32]], [dtype, dtype], 1e-5),
           ("aten::relu", 4, [[8, 64]], [dtype], 1e-5)]
    chains = by_name(detect(ops), "elementwise-chain")
    assert [g.row_ids for g in chains] == [(0, 1, 2)]
    assert chains[0].intermediate_bytes == 2 * 2 * 256 * itemsize  # 2 links × (write + read) × 256 elements


def test_unlinked_fusible_ops_are_not_a_chain():
    ops = [("aten::add", 0, [[8, 32], [8, 32]], [F32, F32], 1e-5),
           ("aten::exp", 1, [[7]], [F32], 1e-5)]
    assert by_name(detect(ops), "elementwise-chain") == []


def test_swiglu_counts_only_the_activation_round_trip():
    ops = [("aten::linear", 0, [[8, 32], [64, 32]], [F32, F32], 1e-5),
           ("aten::silu", 1, [[8, 64]], [F32], 1e-5),
           ("aten::linear", 2, [[8, 32], [64, 32]], [F32, F32], 1e-5),
           ("aten::mul", 3, [[8, 64], [8, 64]], [F32, F32], 1e-5)]
    groups = by_name(detect(ops), "swiglu")
    assert [g.row_ids for g in groups] == [(1, 3)]  # the GEMM between them stays as it is
    assert groups[0].intermediate_bytes == 2 * 8 * 64 * 4  # silu output written and read: 4096
    assert groups[0].variant == "silu"


OPTIMIZER = [("aten::lerp_", 30, [[100], [100], []], [F32, F32, "scalar"], 1e-6),
             ("aten::mul_", 31, [[100], []], [F32, "scalar"], 1e-6),
             ("aten::addcmul_", 32, [[100], [100], [100], []], [F32, F32, F32, "scalar"], 1e-6),
             ("aten::addcdiv_", 33, [[100], [100], [100], []], [F32, F32, F32, "scalar"], 1e-6)]


def test_unfused_optimizer_in_train_mode_only():
    groups = by_name(detect(OPTIMIZER, mode="train", region="Optimizer.step#AdamW.step"), "unfused-optimizer")
    assert len(groups) == 1 and groups[0].variant == "per-parameter" and groups[0].occurrences == 4
    assert by_name(detect(OPTIMIZER, mode="inference", region="Optimizer.step#AdamW.step"),
                   "unfused-optimizer") == []


def test_fused_optimizer_is_not_reported():
    ops = OPTIMIZER + [("aten::_fused_adamw_", 40, [], [], 1e-6)]
    assert by_name(detect(ops, mode="train"), "unfused-optimizer") == []


def test_foreach_variant():
    ops = [("aten::_foreach_mul_", 41, [[[100], [10]], []], [F32, "scalar"], 1e-6),
           ("aten::_foreach_add_", 42, [[[100], [10]], [[100], [10]]], [F32, F32], 1e-6)]
    groups = by_name(detect(ops, mode="train"), "unfused-optimizer")
    assert groups[0].variant == "foreach"
    assert groups[0].intermediate_bytes == 2 * 110 * 4  # the 110-element list handed on once


def test_custom_op_boundary():
    ops = [("mylib::fused_attn", 50, [[8, 64]], [F16], 1e-5),
           ("aten::add", 51, [[8, 64], [8, 64]], [F16, F16], 1e-5),
           ("aten::linear", 52, [[8, 64], [64, 64]], [F16, F16], 1e-5)]
    groups = by_name(detect(ops), "custom-op-boundary")
    assert [g.row_ids for g in groups] == [(50, 51)]


def test_inductor_kernels_are_not_custom_ops():
    ops = [("triton_poi_fused_add_0", 60, [], [], 1e-5), ("aten::add", 61, [[8], [8]], [F32, F32], 1e-5)]
    assert by_name(detect(ops, kinds={60: "kernel", 61: "op"}), "custom-op-boundary") == []


def test_instances_with_the_same_rows_group_across_layers_and_steps():
    groups = by_name(detect(ATTENTION * 3, steps=2), "naive-attention")
    assert len(groups) == 1
    assert groups[0].instances == 6  # 3 layers × 2 steps
    assert groups[0].intermediate_bytes == 6 * 16512
    assert groups[0].time_s == pytest.approx(6 * (4 * 1e-5 + 2 * 1e-6 + 1e-5))


def test_steps_do_not_chain_into_each_other():
    ops = [("aten::add", 0, [[8, 32], [8, 32]], [F32, F32], 1e-5)]
    assert detect(ops, steps=3) == ()


def test_zero_time_ops_are_kept_on_cpu():
    seq = pd.DataFrame([seq_entry(0, 0, "aten::add", 0, [[4], [4]], [F32, F32], 0.0),
                        seq_entry(1, 0, "aten::relu", 1, [[4]], [F32], 0.0)])
    cpu = detect_patterns(seq, NO_OPS, ctx(device_type="cpu"))
    gpu = detect_patterns(seq, NO_OPS, ctx(device_type="cuda"))
    assert [g.pattern for g in cpu] == ["elementwise-chain"] and gpu == ()


def test_a_cast_modelled_at_zero_bytes_is_not_a_link_on_cpu():
    # add → to(float32 → float32, an alias: 0 bytes in ops.csv) → relu over [8, 32] fp32 (1024 B):
    # one intermediate, written once and read once: 2 × 1024 B a step (4096 B through the cast)
    steps = [("aten::add", 0, [[8, 32], [8, 32]], [F32, F32], 1e-5),
             ("aten::to", 1, [[8, 32], [], [], [], []], [F32, "", "", "", ""], 1e-6),
             ("aten::relu", 2, [[8, 32]], [F32], 1e-5)]
    seq = sequence_from(steps)
    table = pd.DataFrame({"row_id": [0, 1, 2], "name": ["aten::add", "aten::to", "aten::relu"],
                          "kind": ["op"] * 3, "modelled": [True] * 3,
                          "bytes_per_call": [3072.0, 0.0, 2048.0], "flops_per_call": [256.0, 0.0, 256.0]})
    (chain,) = by_name(detect_patterns(seq, table, ctx(device_type="cpu")), "elementwise-chain")
    assert chain.row_ids == (0, 2) and chain.intermediate_bytes == 2 * (2 * 1024)  # 2 steps


# ---------------------------------------------------------------- shape helpers


@pytest.mark.parametrize("name, base", [("aten::add_.Tensor", "add"), ("aten::_softmax", "_softmax"),
                                        ("aten::__and__", "__and__"), ("aten::_foreach_add_", "_foreach_add")])
def test_base_name(name, base):
    assert base_name(name) == base


@pytest.mark.parametrize("name, shapes, numel", [
    ("aten::matmul", [[2, 4, 8, 16], [16, 8]], 2 * 4 * 8 * 8),
    ("aten::linear", [[7, 127], [1823, 127], [1823]], 7 * 1823),
    ("aten::addmm", [[781], [1823, 127], [127, 781]], 1823 * 781),
    ("aten::add", [[1, 781], [1823, 1]], 1823 * 781),
    ("aten::add", [[3], [4]], None),  # not broadcastable
    ("aten::conv2d", [[1, 3, 8, 8], [4, 3, 3, 3]], None),  # output size not in the record
])
def test_output_numel(name, shapes, numel):
    assert output_numel(name, shapes, [F32] * len(shapes)) == numel


def test_reduction_link_picks_the_largest_smaller_dividing_input():
    # mean over [1823, 781] hands [1823, 1] (1823 × 4 bytes) to the add, not the 0-d eps (8 bytes)
    assert link_bytes(("aten::mean", [[1823, 781]], [F32]), ("aten::add", [[1823, 1], []], [F32, "float64"])) \
        == 1823 * 4
