"""Autograd's own work is never a chain to fuse; backward chains name the forward op they serve.

Synthetic train step (fp32, X = [4096, 1024]): a forward relu → mul → add; the backward of
aten::gru (mul → sigmoid_backward, then AccumulateGrad's add_ into .grad); then the engine's
work in an AddmmBackward0 scope: sum → add_ → add_ (a gradient reduced to the bias shape and
summed into input buffers), a chain a GRU model's profile must not be advised to fuse.
"""
from __future__ import annotations

import pandas as pd
import pytest
from test_recommend_support import BW, CEILINGS, F32, op_row, op_table, run_meta, seq_entry, write_run_dir

from kernel_advisor.collect.rundir import load_run
from kernel_advisor.recommend.evidence import run_context
from kernel_advisor.recommend.subjects import detect_patterns
from kernel_advisor.recommend.report import recommend
from kernel_advisor.recommend.schema import load_rules

X = [4096, 1024]
XB = 4096 * 1024 * 4  # bytes of one X
ACC = "torch::autograd::AccumulateGrad"
SCOPE = "autograd::engine::evaluate_function: "
AUTOGRAD = ("backward_of", "autograd_node", "autograd_internal")

# (name, row id, shapes, dtypes, backward_of, autograd_node, internal)
STEP = [
    ("aten::relu", 0, [X], [F32], "", "", False),
    ("aten::mul", 1, [X, X], [F32, F32], "", "", False),
    ("aten::add", 2, [X, X, []], [F32, F32, "scalar"], "", "", False),
    (SCOPE + "MulBackward0", 10, [], [], "aten::gru", "MulBackward0", True),  # the engine's marker
    ("MulBackward0", 11, [X], [F32], "aten::gru", "MulBackward0", False),  # the node's own event
    ("aten::mul", 3, [X, X], [F32, F32], "aten::gru", "MulBackward0", False),
    ("aten::sigmoid_backward", 4, [X, X], [F32, F32], "aten::gru", "SigmoidBackward0", False),
    ("aten::add_", 5, [X, X, []], [F32, F32, "scalar"], "", ACC, True),
    ("aten::sum", 6, [X, [], [], []], [F32, "", "", ""], "aten::gru", "AddmmBackward0", True),
    ("aten::add_", 7, [X, X, []], [F32, F32, "scalar"], "aten::gru", "AddmmBackward0", True),
    ("aten::add_", 8, [X, X, []], [F32, F32, "scalar"], "aten::gru", "AddmmBackward0", True),
]
ENGINE_ROWS = {5, 6, 7, 8, 10, 11}
OP_S = 1e-3  # per occurrence
STEPS = 2


def sequence(tagged: bool = True) -> pd.DataFrame:
    entries = []
    for step in range(STEPS):
        for name, row_id, shapes, dtypes, fwd, node, internal in STEP:
            e = seq_entry(len(entries), step, name, row_id, shapes, dtypes, OP_S)
            if tagged:
                e.update(backward_of=fwd, autograd_node=node, autograd_internal=internal)
            entries.append(e)
    return pd.DataFrame(entries)


def ops_table() -> pd.DataFrame:
    rows = []
    for name, row_id, shapes, dtypes, fwd, node, internal in STEP:
        tensors = sum(1 for s in shapes if s == X)
        row = op_row(row_id, name, shapes, dtypes, STEPS, STEPS * OP_S, flops=0.0, nbytes=(tensors + 1) * XB, bw=BW)
        rows.append({**row, "backward_of": fwd, "autograd_node": node, "autograd_internal": internal})
    return op_table(rows)


def meta():
    return run_meta(total_device_time_s=STEPS * OP_S * len(STEP), step_wall_s=OP_S * len(STEP), mode="train",
                    ceilings=CEILINGS)


def chains(groups):
    return {g.row_ids: g for g in groups if g.pattern == "elementwise-chain"}


def test_untagged_the_engine_chain_would_be_advised():
    # Control: the same ops without the autograd columns (a run written before them) chain up.
    found = chains(detect_patterns(sequence(tagged=False), ops_table(), run_context(meta())))
    assert any({6, 7, 8} <= set(rows) for rows in found)


def test_engine_work_never_makes_a_chain_and_forward_still_does():
    found = chains(detect_patterns(sequence(), ops_table(), run_context(meta())))
    assert not any(ENGINE_ROWS & set(rows) for rows in found), found
    assert (0, 1, 2) in found  # the forward chain, not extended into the backward behind it
    assert found[(0, 1, 2)].backward_of == ()


def test_backward_chain_points_at_the_forward_op():
    groups = detect_patterns(sequence(), ops_table(), run_context(meta()))
    backward = chains(groups)[(3, 4)]  # AccumulateGrad's add_ right after it does not join
    assert backward.backward_of == ("aten::gru",)
    assert backward.autograd_nodes == ("MulBackward0", "SigmoidBackward0")


def test_recommendations_fuse_the_forward_chain_only(tmp_path):
    run = load_run(write_run_dir(tmp_path / "run", ops_table(), sequence(), meta()))  # through CSV: "" reads as NaN
    report = recommend(run.ops, run.sequence, run.meta, load_rules())
    recs = [r for f in report.findings for r in f.recommendations]
    patterns = {r.subject: r for r in recs if r.scope == "pattern"}
    assert "pattern:elementwise-chain:0-1-2" in patterns
    assert not any(ENGINE_ROWS & set(map(int, key.rsplit(":", 1)[1].split("-"))) for key in patterns)
    fwd = patterns["pattern:elementwise-chain:0-1-2"]
    assert fwd.rule_id == "compile-fuse-elementwise" and fwd.label == "elementwise-chain: relu → mul → add"
    bwd = patterns["pattern:elementwise-chain:3-4"]
    assert bwd.label == "elementwise-chain: mul → sigmoid_backward (backward of aten::gru)"
    assert bwd.evidence["backward_of"] == "aten::gru" and bwd.evidence["phase"] == "backward"
    assert bwd.message.startswith("mul → sigmoid_backward (backward of aten::gru) run as 2 separate kernels")
    # op rows keep their own findings, under names that say whose work they are
    labels = {r.subject: r.label for r in recs if r.scope == "op"}
    assert labels["row:6"] == "aten::sum (autograd engine in AddmmBackward0, backward of aten::gru)"
    assert labels["row:5"] == "aten::add_ (gradient accumulation: AccumulateGrad)"


@pytest.mark.parametrize("missing", [AUTOGRAD, ("autograd_internal",)])
def test_runs_without_the_columns_read_as_forward(missing):
    seq = sequence().drop(columns=list(missing))
    groups = detect_patterns(seq, ops_table().drop(columns=list(missing)), run_context(meta()))
    assert (0, 1, 2) in chains(groups)
