"""rules/distributed.yaml on synthetic rank-0 tables: the small-all-reduce rule fires only on many tiny calls."""
from pathlib import Path

import pytest
from run_factory import OpSpec, h200_ceilings, ops_frame, run_meta, sequence_frame

from kernel_advisor.recommend.report import recommend
from kernel_advisor.recommend.schema import load_rule_file

RULES = load_rule_file(Path(__file__).parents[1] / "rules" / "distributed.yaml")
STEPS = 2
GEMM = OpSpec("aten::mm", [[4096, 4096], [4096, 4096]], ["bfloat16"] * 2, 4, 4e-3, flops=1.37e11, bytes=1e8,
              compute_path="bf16_tc", verdict="compute-bound")


def fired(ops):
    frame = ops_frame(ops, STEPS, h200_ceilings())
    meta = run_meta(STEPS, [0.01] * STEPS, h200_ceilings(), sum(o.device_time_total_s for o in ops))
    report = recommend(frame, sequence_frame(ops, STEPS), meta, RULES, ())
    return [(f.rule_id, r.label, r.message) for f in report.findings for r in f.recommendations]


def allreduce(name, calls_per_step, mean_s):
    return OpSpec(name, [], ["float32"], calls_per_step * STEPS, calls_per_step * STEPS * mean_s)


@pytest.mark.parametrize("name", ["c10d::allreduce_", "ncclDevKernel_AllReduce_Sum_f32_RING_LL(x)"])
def test_many_tiny_allreduces_fire(name):
    found = fired([GEMM, allreduce(name, 40, 15e-6)])  # 40 calls per step of 15 µs
    assert [(rule, label) for rule, label, _ in found] == [("dist-small-allreduces", name)]
    assert "40 all-reduces per step averaging 15 µs" in found[0][2]


@pytest.mark.parametrize("calls_per_step,mean_s", [
    (8, 15e-6),  # few calls: below calls_per_step min 16
    (40, 80e-6),  # 80 µs per call: large enough to be bandwidth-bound (~25 MB on NVLink)
])
def test_few_or_large_allreduces_do_not_fire(calls_per_step, mean_s):
    assert fired([GEMM, allreduce("c10d::allreduce_", calls_per_step, mean_s)]) == []
