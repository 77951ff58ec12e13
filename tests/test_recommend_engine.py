"""The rules engine on synthetic runs: exact rule ids, hand-worked gains, Amdahl totals, ranking."""
from __future__ import annotations

import textwrap

import pytest
from reference_kernels.registry import Capability, KernelSpec
from test_recommend_support import ADD, BW, USER_RULE, CEILINGS, F32, SOFTMAX, fp32_run, op_row, op_table, run_meta, \
    sequence_from

from kernel_advisor.recommend.evidence import CompileReport, GraphBreak
from kernel_advisor.recommend.report import recommend
from kernel_advisor.recommend.schema import load_rules

KERNELS = (
    KernelSpec(id="softmax", title="Row softmax", capability=Capability("triton"), loader="m:f", reference="m:g",
               replaces_aten=("aten::_softmax",), dtypes=(F32, "float16", "bfloat16")),
    KernelSpec(id="rmsnorm", title="Fused RMSNorm", capability=Capability("triton"), loader="m:f",
               reference="m:g", replaces_patterns=("rmsnorm-module",)),
)


BUILTIN_RULES = load_rules()


def run(ops, seq, meta, rules=None, kernels=KERNELS, compile_report=None):
    return recommend(ops, seq, meta, rules if rules is not None else BUILTIN_RULES, kernels, compile_report)


def gains(report):
    return [(f.rule_id, f.saving_per_step_s) for f in report.findings]


def test_fp32_run_exact_findings_and_gains():
    report = run(*fp32_run())
    # compile (0.98571 ms) and Triton (0.98824 ms) nearly tie on the softmax: the cheaper rung first
    assert [f.rule_id for f in report.findings] == [
        "lib-bf16-autocast", "lib-tf32-matmul", "compile-gemm-autotune", "compile-memory-bound-op",
        "triton-reference-kernel", "leave-small-op"]
    got = dict(gains(report))
    # linear: roof max(20e9/50e12, 40e6/4e12) = 0.4 ms, 2 ms per call (20 % of the roof)
    # bf16: roof 20e9/800e12 = 25 µs → 2 ms × 25/400 = 0.125 ms per call; (2 − 0.125) × 2 calls = 3.75 ms
    assert got["lib-bf16-autocast"] == pytest.approx(3.75e-3)
    # tf32: roof 20e9/400e12 = 50 µs → 2 ms × 50/400 = 0.25 ms per call; (2 − 0.25) × 2 = 3.5 ms
    assert got["lib-tf32-matmul"] == pytest.approx(3.5e-3)
    # softmax: roof 40e6/4e12 = 10 µs; the Triton kernel at 85 %: 1 ms − 10/0.85 µs = 0.98823529 ms
    assert got["triton-reference-kernel"] == pytest.approx(1e-3 - 1e-5 / 0.85)
    # compile at 70 % of the roof: 1 ms − 10/0.7 µs = 0.98571 ms
    assert got["compile-memory-bound-op"] == pytest.approx(1e-3 - 1e-5 / 0.7)
    assert got["leave-small-op"] == 0.0
    # autotune to 70 % of the fp32 roof: 0.4 / 0.7 = 0.5714 ms per call; (2 − 0.5714) × 2 = 2.857 ms
    assert got["compile-gemm-autotune"] == pytest.approx((2e-3 - 0.4e-3 / 0.7) * 2)
    # Amdahl: the linear row counts once (max 3.75 ms, not 3.75 + 3.5); + 0.98824 = 4.73824 ms of 6 ms
    assert report.total_saving_per_step_s == pytest.approx(3.75e-3 + 1e-3 - 1e-5 / 0.85)
    assert report.total_saving_pct == pytest.approx(100 * (4.75e-3 - 1e-5 / 0.85) / 6e-3)
    assert report.findings[0].saving_pct == pytest.approx(62.5)  # 3.75 / 6


def test_triton_finding_names_the_kernel_and_the_command():
    report = run(*fp32_run())
    rec = next(f for f in report.findings if f.rule_id == "triton-reference-kernel").recommendations[0]
    assert rec.kernel_id == "softmax"
    assert rec.command == "advisor try-kernel examples/model.py softmax"
    assert rec.command in rec.message


def test_evidence_and_thresholds_are_recorded():
    report = run(*fp32_run())
    rec = next(f for f in report.findings if f.rule_id == "triton-reference-kernel").recommendations[0]
    checks = {c.key: c for c in rec.checks}
    assert checks["verdict"].actual == "memory-bound"  # no efficiency cut: the gain model decides
    assert rec.evidence["efficiency_frac"] == pytest.approx(0.01)  # 10 µs roof / 1 ms
    assert checks["kernel"].actual == "softmax"
    assert rec.evidence["share_pct"] == pytest.approx(100 * 2e-3 / 10.1e-3)


def test_without_a_covering_kernel_there_is_no_triton_finding():
    report = run(*fp32_run(), kernels=())
    assert "triton-reference-kernel" not in [f.rule_id for f in report.findings]


def test_tf32_already_on_leaves_only_bf16():
    report = run(*fp32_run(allow_tf32=True))
    got = dict(gains(report))
    assert "lib-tf32-matmul" not in got
    # tf32 roof 50 µs, 2 ms per call → bf16 roof 25 µs → 1 ms per call; (2 − 1) × 2 = 2 ms
    assert got["lib-bf16-autocast"] == pytest.approx(2e-3)


def test_cpu_run_gets_only_device_independent_rules():
    report = run(*fp32_run(device_type="cpu"))
    # torch.compile generates CPU kernels too; the CUDA library and kernel rungs stay out
    assert [f.rule_id for f in report.findings] == ["compile-memory-bound-op", "leave-small-op"]


def test_hotspots_explain_the_rung_and_what_was_passed_over():
    spots = {h.row_id: h for h in run(*fp32_run()).hotspots}
    assert (spots[0].chosen_tier, spots[0].chosen_rule) == ("library", "lib-bf16-autocast")
    assert spots[0].passed_over == ()
    assert (spots[1].chosen_tier, spots[1].chosen_rule) == ("compile", "compile-memory-bound-op")
    assert spots[1].passed_over == (("library", "no library rule covers aten::softmax"),)
    assert (spots[2].chosen_tier, spots[2].chosen_rule) == ("leave-it", "leave-small-op")


def test_hotspot_with_no_saving_lists_the_nearest_miss():
    ops, seq, meta = fp32_run()
    report = run(ops, seq, meta, rules=[r for r in BUILTIN_RULES if r.id != "compile-memory-bound-op"], kernels=())
    spot = next(h for h in report.hotspots if h.row_id == 1)
    assert spot.chosen_tier == "none"
    triton = dict(spot.passed_over)["triton"]
    assert triton.startswith("triton-reference-kernel: kernel is unknown")


# ---------------------------------------------------------------- leave-it


def gemm_at_roof_run():
    # bf16 linear: roof 20e9/800e12 = 25 µs; 30 µs per call → 83 % of the roof
    rows = [op_row(0, "aten::linear", [[1024, 512], [2048, 512]], ["bfloat16"] * 2, 2, 6e-5, flops=20e9,
                   nbytes=4e6, verdict="compute-bound", compute_path="bf16_tc", peak=800e12, bw=BW),
            op_row(1, *SOFTMAX, 2, 2e-5, flops=0.0, nbytes=40e6, bw=BW)]
    return op_table(rows), sequence_from([]), run_meta(total_device_time_s=8e-5, step_wall_s=5e-5,
                                                        ceilings=CEILINGS)


def test_gemm_at_roof_is_left_alone_and_suppresses_kernel_rungs(tmp_path):
    extra = tmp_path / "team.yaml"
    extra.write_text(textwrap.dedent("""\
        version: 1
        rules:
          - id: team-triton-gemm
            title: Our Triton GEMM
            tier: triton
            conditions: {ops: [aten::linear]}
            message: "try ours for {name}"
            gain: {model: fraction, value: 0.1}
          - id: team-library-gemm
            title: A library switch
            tier: library
            conditions: {ops: [aten::linear]}
            message: "flip it for {name}"
            gain: {model: fraction, value: 0.05}
        """), encoding="utf-8")
    report = run(*gemm_at_roof_run(), rules=load_rules([extra]))
    ids = [f.rule_id for f in report.findings]
    assert "leave-gemm-at-roof" in ids and "team-triton-gemm" not in ids
    assert [r.rule_id for r in report.suppressed] == ["team-triton-gemm"]
    # the library rung stays: 5 % of 60 µs / 2 steps = 1.5 µs per step
    assert dict(gains(report))["team-library-gemm"] == pytest.approx(0.05 * 3e-5)
    spot = next(h for h in report.hotspots if h.row_id == 0)
    assert (spot.chosen_tier, spot.chosen_rule) == ("library", "team-library-gemm")


def test_valid_user_rule_is_applied_with_its_gain(tmp_path):
    extra = tmp_path / "mine.yaml"
    extra.write_text(USER_RULE, encoding="utf-8")
    report = run(*fp32_run(), rules=load_rules([extra]))
    finding = next(f for f in report.findings if f.rule_id == "team-softmax-budget")
    assert finding.saving_per_step_s == pytest.approx(0.25e-3)  # 25 % of 1 ms per step
    assert finding.recommendations[0].message == "aten::softmax takes 19.8 % of device time"  # 2 / 10.1
    assert finding.recommendations[0].source == f"{extra}:3"


# ---------------------------------------------------------------- patterns, Amdahl, graph breaks

X = [[1000, 1000], []]


def rmsnorm_run():
    """One hand-written RMSNorm per step, 10 µs per op, plus a 40 µs gather at 90 % of bandwidth."""
    chain = [("aten::pow", 10, [[1000, 1000], []], [F32, "scalar"], 8e6),
             ("aten::mean", 11, [[1000, 1000], [], [], []], [F32, "", "", ""], 4.004e6),
             ("aten::add", 12, [[1000, 1], []], [F32, "scalar"], 8e3),
             ("aten::rsqrt", 13, [[1000, 1]], [F32], 8e3),
             ("aten::mul", 14, [[1000, 1000], [1000, 1]], [F32, F32], 8.004e6),
             ("aten::mul", 15, [[1000], [1000, 1000]], [F32, F32], 8.004e6)]
    rows = [op_row(r, n, s, d, 2, 2e-5, flops=0.0, nbytes=b, bw=BW) for n, r, s, d, b in chain]
    # 144e6 bytes / 4e12 B/s = 36 µs of 40 µs per call: at bandwidth, nothing to gain alone
    rows.append(op_row(0, "aten::embedding", [[50304, 1024], [8, 1024]], [F32, "int64"], 2, 8e-5, flops=0.0,
                       nbytes=144e6, bw=BW))
    seq = sequence_from([(n, r, s, d, 1e-5) for n, r, s, d, _ in chain])
    return op_table(rows), seq, run_meta(total_device_time_s=2e-4, step_wall_s=1e-4, ceilings=CEILINGS)


def test_rmsnorm_findings_share_rows_and_count_once():
    report = run(*rmsnorm_run())
    got = dict(gains(report))
    # fused-roofline (lib-rms-norm, compile-fuse-elementwise): the fused kernel moves
    # 28.028e6 − 16.024e6 = 12.004e6 bytes / 4e12 B/s = 3.001 µs, at 70 % of its roof 4.2871 µs;
    # saving = 60 µs − 4.2871 µs = 55.7129 µs
    for rule in ("lib-rms-norm", "compile-fuse-elementwise"):
        assert got[rule] == pytest.approx(60e-6 - 3.001e-6 / 0.7), rule
    # fusion-bytes (triton-reference-pattern): removed 2 × (4e6 + 4e3 + 4e3 + 4e3 + 4e6)
    # = 16.024e6 bytes / 4e12 B/s = 4.006 µs (cap 60 − 3.001 = 56.999 µs, not reached)
    assert got["triton-reference-pattern"] == pytest.approx(4.006e-6)
    # three findings on the same six rows: the union is the largest, 55.7129 µs, not their sum
    assert report.total_saving_per_step_s == pytest.approx(60e-6 - 3.001e-6 / 0.7)
    assert [f.rule_id for f in report.findings][:3] == [
        "lib-rms-norm", "compile-fuse-elementwise", "triton-reference-pattern"]  # equal gains first: ladder order
    rec = next(f for f in report.findings if f.rule_id == "triton-reference-pattern").recommendations[0]
    assert rec.kernel_id == "rmsnorm" and rec.command == "advisor try-kernel examples/model.py rmsnorm"


def test_equal_gains_choose_the_cheapest_rung():
    spot = next(h for h in run(*rmsnorm_run()).hotspots if h.row_id == 10)
    assert (spot.chosen_tier, spot.chosen_rule) == ("library", "lib-rms-norm")


def test_graph_breaks_rank_before_the_compile_rungs():
    breaks = CompileReport(graph_count=3, graph_break_count=2, op_count=9, breaks=(
        GraphBreak("Unsupported Tensor.item() call", ("model.py:12 in forward",)),
        GraphBreak("print", ("model.py:20 in forward",))))
    report = run(*rmsnorm_run(), compile_report=breaks)
    ids = [f.rule_id for f in report.findings]
    assert ids == ["lib-rms-norm", "compile-fix-graph-breaks", "compile-fuse-elementwise",
                   "triton-reference-pattern", "leave-op-at-bandwidth"]
    message = report.findings[1].recommendations[0].message
    assert "found 2 graph break(s)" in message and "Unsupported Tensor.item() call at model.py:12" in message


def test_no_graph_break_finding_without_breaks():
    clean = CompileReport(graph_count=1, graph_break_count=0, op_count=9, breaks=())
    assert "compile-fix-graph-breaks" not in [f.rule_id for f in run(*rmsnorm_run(), compile_report=clean).findings]


def launch_bound_run(step_wall_s):
    """100 adds of 4 µs per step: 0.4 ms busy."""
    rows = [op_row(0, *ADD, 200, 8e-4, flops=64.0, nbytes=768.0, verdict="latency-bound", bw=BW)]
    seq = sequence_from([(ADD[0], 0, ADD[1], ADD[2], 4e-6)])
    return op_table(rows), seq, run_meta(total_device_time_s=8e-4, step_wall_s=step_wall_s, ceilings=CEILINGS)


@pytest.mark.parametrize("step_wall_s, fires", [(2e-3, True), (5e-4, False)])
def test_cuda_graphs_for_launch_bound_steps(step_wall_s, fires):
    report = run(*launch_bound_run(step_wall_s))
    got = dict(gains(report))
    assert ("compile-cuda-graphs" in got) is fires
    if fires:
        # idle = 2 ms step − 0.4 ms busy = 1.6 ms per step (80 %); fusing the 100 short adds
        # claims half their 0.4 ms (compile-latency-op): (1.6 + 0.2) / 2 ms = 90 %
        assert got["compile-cuda-graphs"] == pytest.approx(1.6e-3)
        assert got["compile-latency-op"] == pytest.approx(0.2e-3)
        assert report.total_saving_pct == pytest.approx(90.0)


@pytest.mark.parametrize("shapes, misaligned", [
    ([[7, 127], [1823, 127]], True),  # K = 127
    ([[1823, 781], [1024, 781]], True),  # K = 781
    ([[8, 1024], [50257, 1024]], True),  # N = 50257 (the GPT-2 vocabulary)
    ([[1, 1024], [1024, 1024]], False),  # M = 1 is the batch, not a weight dim
    ([[127, 1024], [4096, 1024]], False)])
@pytest.mark.parametrize("dtype, fires", [("float16", True), ("bfloat16", True), ("float32", False)])
def test_tensor_core_alignment(shapes, misaligned, dtype, fires):
    # roof 400e9 / 800e12 = 0.5 ms of 1 ms per call (50 %); at 70 %: 0.5 / 0.7 = 0.714 ms → saves 0.286 ms
    rows = [op_row(0, "aten::linear", shapes, [dtype] * 2, 2, 2e-3, flops=400e9, nbytes=1e6,
                   verdict="compute-bound", compute_path="fp16_tc", peak=800e12, bw=BW)]
    report = run(op_table(rows), sequence_from([]), run_meta(total_device_time_s=2e-3, step_wall_s=1e-3,
                                                             ceilings=CEILINGS))
    got = dict(gains(report))
    assert ("lib-tensor-core-alignment" in got) is (misaligned and fires)
    if misaligned and fires:
        assert got["lib-tensor-core-alignment"] == pytest.approx(1e-3 - 0.5e-3 / 0.7)


DIST_RULES = """\
version: 1
rules:
  - id: dist-exposed-communication
    title: Communication the step waits for
    tier: library
    scope: run
    conditions: {world_size: {min: 2}, exposed_comm_pct: {min: 10}}
    message: "{exposed_comm_ms:.2f} ms ({exposed_comm_pct:.0f} %) of communication overlaps no compute"
    gain: {model: exposed-comm, value: 0.5}
  - id: dist-straggler
    title: One rank holds the others back
    tier: library
    scope: run
    conditions: {world_size: {min: 2}, max_comm_wait_pct: {min: 5}}
    message: "ranks wait {max_comm_wait_ms:.2f} ms per step for rank {waited_for_rank}"
    gain: {model: exposed-comm, value: 1.0}
"""


@pytest.mark.parametrize("distributed", [True, False])
def test_distributed_run_rules_share_the_exposed_communication(tmp_path, distributed):
    extra = tmp_path / "dist.yaml"
    extra.write_text(DIST_RULES, encoding="utf-8")
    ops, seq, meta = fp32_run()
    if distributed:
        meta["distributed"] = {"world_size": 2, "exposed_comm_s": 1e-3, "exposed_comm_pct": 20.0,
                               "max_comm_wait_s": 4e-4, "max_comm_wait_pct": 8.0, "waited_for_rank": 1}
    report = run(ops, seq, meta, rules=load_rules([extra], include_builtin=False))
    got = dict(gains(report))
    if not distributed:
        assert got == {}  # the evidence is absent for one process: nothing fires
        return
    # 50 % and 100 % of the 1 ms exposed per step; both claim the same pseudo-row: the union is 1 ms
    assert got == {"dist-straggler": pytest.approx(1e-3), "dist-exposed-communication": pytest.approx(0.5e-3)}
    assert report.total_saving_per_step_s == pytest.approx(1e-3)
    straggler = report.findings[0].recommendations[0]
    assert straggler.message == "ranks wait 0.40 ms per step for rank 1"
