"""No silent misses: each class of miss seen on unseen models, pinned on a synthetic op table."""
from __future__ import annotations

import pytest
from test_recommend_support import BW, CEILINGS, STEPS, op_row, op_table, run_meta, sequence_from

from kernel_advisor.recommend.engine import (Finding, Recommendation, cheaper_first_on_near_ties, near_tie,
                                             rank_findings, split_covered)
from kernel_advisor.recommend.evidence import run_context
from kernel_advisor.recommend.kernels import registry_kernels
from kernel_advisor.recommend.report import recommend
from kernel_advisor.recommend.schema import load_rules
from reference_kernels.routes import Point

RULES = load_rules()
KERNELS = registry_kernels()
BF16 = "bfloat16"


def _report(row, step_s):
    return recommend(op_table([row]), sequence_from([]), run_meta(total_device_time_s=row["device_time_total_s"],
                     step_wall_s=step_s, ceilings=CEILINGS), RULES, KERNELS)


def test_wide_layer_norm_on_few_rows_gets_compile_not_silence():
    # 16 rows x 4 Mi elements bf16: 2 x 16 x 4 Mi x 2 B = 268 MB, roof 268e6 / 4e12 = 67 µs of 8 ms (0.8 %):
    # 16 blocks on 132 SMs for 8 ms is under-occupied (not latency-bound), and compile is offered
    nbytes = 2 * 16 * 4 * 2**20 * 2
    row = op_row(0, "aten::layer_norm", [[16, 4, 1024, 1024], [], [4, 1024, 1024], [4, 1024, 1024]],
                 [BF16] * 4, 2, 16e-3, flops=8.0 * 16 * 4 * 2**20, nbytes=nbytes, verdict="under-occupied", bw=BW)
    row["max_blocks"] = 16
    report = _report(row, 8e-3)
    ids = [f.rule_id for f in report.findings]
    assert "compile-memory-bound-op" in ids
    spot = report.hotspots[0]
    assert spot.chosen_tier == "compile" and "no compile rule" not in " ".join(r for _, r in spot.passed_over)


@pytest.mark.parametrize("op", ["aten::group_norm", "aten::batch_norm", "aten::instance_norm"])
def test_norms_at_low_bandwidth_get_a_rung(op):
    # 40 MB at 19 % of 4 TB/s: roof 10 µs, 52.6 µs per call
    row = op_row(0, op, [[32, 256, 64, 64]], [BF16], 2, 2 * 52.6e-6, flops=1e6, nbytes=40e6, bw=BW)
    report = _report(row, 200e-6)
    assert report.hotspots[0].chosen_tier in ("compile", "triton")


def test_cross_entropy_maps_to_the_bundled_kernel():
    # 4096 x 32000 bf16 logits (262 MB) at 14 % of bandwidth: the composite op is covered by
    # triton.cross_entropy through its pattern, so "kernel is unknown" is not the answer
    row = op_row(0, "aten::cross_entropy_loss", [[4096, 32000], [4096]], [BF16, "int64"], 1, 468e-6,
                 flops=5.0 * 4096 * 32000, nbytes=4096 * 32000 * 2, bw=BW)
    report = _report(row, 600e-6)
    triton = next(f for f in report.findings if f.rule_id == "triton-reference-kernel")
    assert triton.recommendations[0].kernel_id == "triton.cross_entropy"
    assert triton.recommendations[0].action == "kernel:triton.cross_entropy"


@pytest.mark.parametrize("busy, offered", [(0.94, True), (0.66, False)])
def test_gelu_kernel_rung_follows_its_measurements(monkeypatch, busy, offered):
    # 64 MB at 65 % of 4 TB/s: 16 µs roof, 24.6 µs a call; the old fixed cut (< 60 %) said nothing.
    # The kernel's sweep point: 20 µs of GPU time and 45 µs of host time a call, against eager's 25
    # and 10. A device-bound step (busy 94 %) saves 1 − 20/25 = 20 % of the op's time; a
    # host-bound one (66 %) counts 45 against 25 µs a call and claims nothing.
    point = Point(4096, 4096, 0.020, 0.045, 0.025, 0.010, "GPU X", "abc1234")
    monkeypatch.setattr("kernel_advisor.recommend.gain.kernel_point_lookup", lambda kid: (lambda *a: point))
    row = op_row(0, "aten::gelu", [[4096, 4096]], [BF16], 4, 4 * 24.6e-6, flops=4096 * 4096 * 8.0,
                 nbytes=64e6, bw=BW)
    per_step_s = row["device_time_total_s"] / STEPS
    report = _report(row, per_step_s / busy)
    ids = [f.rule_id for f in report.findings]
    assert "compile-memory-bound-op" in ids and ("triton-reference-kernel" in ids) is offered
    if offered:
        triton = next(f for f in report.findings if f.rule_id == "triton-reference-kernel")
        assert triton.saving_per_step_s == pytest.approx(0.2 * per_step_s)


def _finding(rule_id, tier, saving):
    return Finding(rule_id, rule_id, tier, (), saving, None)


@pytest.mark.parametrize("a,b,tie", [(1.0, 0.86, True), (1.0, 0.84, False), (0.0, 0.0, True), (None, 0.1, False)])
def test_near_tie(a, b, tie):
    assert near_tie(a, b) is tie


def test_near_ties_go_to_the_cheaper_rung():
    ordered = [_finding("t", "triton", 1.0), _finding("c", "compile", 0.9), _finding("l", "library", 0.87),
               _finding("x", "cuda", 0.2)]
    # 0.9 and 0.87 are within 15 % of 1.0 and of each other: library, compile, triton; cuda stays last
    assert [f.rule_id for f in cheaper_first_on_near_ties(ordered)] == ["l", "c", "t", "x"]


def test_a_flag_goes_before_a_code_change_on_the_same_rung():
    # channels_last and cudnn.benchmark claim the same conv row (0.058 of the step each): the flag,
    # which changes no code, ranks first; alphabetical order would have put channels_last first.
    recs = [Recommendation(rule_id=rid, title=rid, tier="library", scope="op", subject="row:0", label="",
                           message="", saving_per_step_s=0.058, saving_pct=5.8, row_saving_per_step_s={},
                           action=action)
            for rid, action in (("lib-channels-last", "channels_last"), ("lib-cudnn-benchmark", "cudnn_benchmark"))]
    ranked = rank_findings(recs, [], run_context({"step_s": 1.0}))
    assert [f.rule_id for f in ranked] == ["lib-cudnn-benchmark", "lib-channels-last"]


def _rec(rule_id, tier, subject, saving):
    """A recommendation on `subject` ("pattern:<name>:<row>-<row>..."), its rows as Subject.rows holds them."""
    rows = frozenset(int(r) for r in subject.rsplit(":", 1)[-1].split("-"))
    return Recommendation(rule_id=rule_id, title=rule_id, tier=tier, scope="pattern", subject=subject, label="",
                          message="", saving_per_step_s=saving, saving_pct=None, row_saving_per_step_s={},
                          subject_rows=rows)


def test_recommendations_carry_their_subjects_rows():
    # one wide layer_norm row (row 0, as in the first test): the op subject is that row, no other
    nbytes = 2 * 16 * 4 * 2**20 * 2
    row = op_row(0, "aten::layer_norm", [[16, 4, 1024, 1024], [], [4, 1024, 1024], [4, 1024, 1024]],
                 [BF16] * 4, 2, 16e-3, flops=8.0 * 16 * 4 * 2**20, nbytes=nbytes, verdict="under-occupied", bw=BW)
    row["max_blocks"] = 16
    recs = [r for f in _report(row, 8e-3).findings for r in f.recommendations]
    assert recs and {r.subject_rows for r in recs if r.scope == "op"} == {frozenset({0})}
    assert all(r.subject_rows == frozenset() for r in recs if r.scope == "run")


def test_a_chain_inside_attention_is_covered_by_sdpa():
    sdpa = _rec("lib-sdpa", "library", "pattern:naive-attention:12-13-14-15-16", 1.0e-3)
    chain = _rec("compile-fuse-elementwise", "compile", "pattern:elementwise-chain:14-15", 1.05e-3)
    other = _rec("compile-fuse-elementwise", "compile", "pattern:elementwise-chain:21-22", 0.4e-3)
    kept, covered = split_covered([sdpa, chain, other])
    assert kept == [sdpa, other]
    assert covered[0].evidence["covered_by"] == "lib-sdpa on pattern:naive-attention:12-13-14-15-16"


def test_a_much_larger_inner_claim_is_kept():
    sdpa = _rec("lib-sdpa", "library", "pattern:naive-attention:12-13-14", 0.5e-3)
    chain = _rec("compile-fuse-elementwise", "compile", "pattern:elementwise-chain:13-14", 1.0e-3)
    assert split_covered([sdpa, chain]) == ([sdpa, chain], [])


@pytest.mark.parametrize("norm_time_s, offered", [(0.0, True), (60e-6, False)])
def test_channels_last_is_not_offered_where_group_norm_takes_time(norm_time_s, offered):
    # A bf16 conv at 40 % of its roof; beside it a GroupNorm taking 60 of 460 µs of device time
    # (13 %): GroupNorm copies a channels_last input to NCHW and back, so the rung is withheld.
    conv = op_row(0, "aten::conv2d", [[32, 64, 56, 56], [64, 64, 3, 3]], [BF16, BF16], 1, 400e-6,
                  flops=2 * 32 * 64 * 56 * 56 * 64 * 9.0, nbytes=2 * 2 * 32 * 64 * 56 * 56, bw=BW)
    conv["input_strides"] = "[[200704, 3136, 56, 1], [576, 9, 3, 1]]"
    rows = [conv]
    if norm_time_s:
        rows.append(op_row(1, "aten::group_norm", [[32, 64, 56, 56]], [BF16], 1, norm_time_s,
                           flops=1e6, nbytes=2 * 2 * 32 * 64 * 56 * 56, bw=BW))
    total = sum(r["device_time_total_s"] for r in rows)
    report = recommend(op_table(rows), sequence_from([]), run_meta(total_device_time_s=total,
                       step_wall_s=total / STEPS, ceilings=CEILINGS), RULES, KERNELS)
    assert ("lib-channels-last" in [f.rule_id for f in report.findings]) is offered


@pytest.mark.parametrize("step_s, chosen", [(2e-3, "compile-cuda-graphs"), (5e-4, "compile-host-bound-op")])
def test_a_host_bound_hotspot_takes_the_runs_launch_rung_or_its_own(step_s, chosen):
    # 200 batch_norm calls of 4 µs a step (0.8 ms over STEPS steps): host-bound. A 2 ms step idles
    # 1.6 ms (80 %): CUDA graphs fire and the hotspot names them; a 0.5 ms step has no gaps, and
    # the op's own compile rung (its host cost) is the answer: 0.5 × 0.8 ms = 0.4 ms of profiled
    # time, which outlasts the 0.5 ms step, so in step time × 0.5 / 0.8: 0.25 ms.
    row = op_row(0, "aten::batch_norm", [[64, 64, 8, 8]], [BF16], 200 * STEPS, 8e-4 * STEPS, flops=1e5,
                 nbytes=1e5, verdict="host-bound", bw=BW)
    spot = _report(row, step_s).hotspots[0]
    assert spot.chosen_rule == chosen and spot.chosen_tier == "compile"
    if chosen == "compile-cuda-graphs":
        assert spot.why.startswith("host-bound: its launches")
    else:
        assert spot.why.endswith("saves 0.25 ms")


def test_a_latency_bound_hotspot_without_a_rung_says_which_launch_condition_failed():
    # 2 short calls a step (under compile-latency-op's 4, and under the launch rule's 10 kernels a
    # step): no op rung, no launch rung; the reason is the launch rule's failed check.
    row = op_row(0, "aten::batch_norm", [[64, 64, 8, 8]], [BF16], 2 * STEPS, 8e-6 * STEPS, flops=1e5,
                 nbytes=1e5, verdict="latency-bound", bw=BW)
    spot = _report(row, 5e-4).hotspots[0]
    assert spot.chosen_tier == "none"
    assert spot.why.startswith("latency-bound: launch overhead is a run-level matter, and "
                               "compile-cuda-graphs: kernels_per_step is 2 (needs >= 10)")




def test_every_rule_is_evaluated_once_per_subject(monkeypatch):
    # the hotspots' explanations read the engine's evaluations instead of applying rules again
    from kernel_advisor.recommend import engine as engine_module

    seen = []
    real = engine_module.evaluate_rule
    monkeypatch.setattr(engine_module, "evaluate_rule",
                        lambda eng, rule, subject: seen.append((rule.id, subject.key)) or real(eng, rule, subject))
    nbytes = 2 * 16 * 4 * 2**20 * 2
    row = op_row(0, "aten::layer_norm", [[16, 4, 1024, 1024], [], [4, 1024, 1024], [4, 1024, 1024]],
                 [BF16] * 4, 2, 16e-3, flops=8.0 * 16 * 4 * 2**20, nbytes=nbytes, verdict="under-occupied", bw=BW)
    report = _report(row, 8e-3)
    assert report.hotspots and seen and len(seen) == len(set(seen))
