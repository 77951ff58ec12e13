"""What a rule is applied to: one op row, one pattern group, or the whole run.

A Subject carries the evidence its rules test and, for Amdahl bookkeeping, the device
time per step of every op row it touches.
"""
from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any, Iterable

import pandas as pd

from kernel_advisor.collect.nesting import op_label
from kernel_advisor.recommend.evidence import (CompileReport, RunContext, decoded, op_evidence, primary_dtype,
                                               run_evidence)
from kernel_advisor.recommend.patterns import Instance, detect_instances
from kernel_advisor.records.columns import flag_value, text_value


@dataclass(frozen=True)
class Subject:
    scope: str  # "op" | "pattern" | "run"
    key: str  # stable id within the run, for records and people: "row:12", "pattern:naive-attention:3-4-5", "run"
    evidence: dict[str, Any] = field(hash=False, compare=False)
    row_time_per_step_s: dict[int, float] = field(hash=False, compare=False)
    row_calls_per_step: dict[int, float] = field(hash=False, compare=False)
    rows: frozenset[int] = field(default=frozenset(), compare=False)  # the op rows it is (none: the run)


@dataclass(frozen=True)
class Subjects:
    run: Subject
    ops: tuple[Subject, ...]
    patterns: tuple[Subject, ...]
    ops_by_row: dict[int, dict] = field(hash=False, compare=False)

    def of_scope(self, scope: str) -> tuple[Subject, ...]:
        return {"op": self.ops, "pattern": self.patterns, "run": (self.run,)}[scope]


def _op_subject(row: dict, ctx: RunContext, run_ev: dict) -> Subject:
    ev = {**run_ev, **op_evidence(row, ctx), **_autograd_evidence(row)}
    row_id = ev["row_id"]
    return Subject("op", f"row:{row_id}", ev, {row_id: ev["time_per_step_s"]}, {row_id: ev["calls_per_step"]},
                   frozenset({row_id}))


def _autograd_evidence(row: dict) -> dict[str, Any]:
    """Which backward an op row belongs to, and its name for people ("aten::mm (backward of
    aten::linear)"); rows of runs written before these columns read as forward ops."""
    fwd, node = text_value(row.get("backward_of")), text_value(row.get("autograd_node"))
    internal = flag_value(row.get("autograd_internal"))
    return {"backward_of": fwd, "autograd_node": node, "autograd_internal": internal,
            "phase": "backward" if fwd or node else "forward",
            "label": op_label(str(row.get("name", "")), fwd, node, internal)}


def _pattern_subject(group: PatternGroup, ops_by_row: dict[int, dict], ctx: RunContext, run_ev: dict) -> Subject:
    ev = {**run_ev, **pattern_evidence(group, ops_by_row, ctx)}
    key = f"pattern:{group.pattern}:" + "-".join(map(str, group.row_ids))
    calls = {r: group.row_ids.count(r) * group.instances / ctx.steps for r in set(group.row_ids)}
    times = {r: t / ctx.steps for r, t in group.row_time_s.items()}
    return Subject("pattern", key, ev, times, calls, frozenset(group.row_ids))


def build_subjects(ops: pd.DataFrame, sequence: pd.DataFrame, ctx: RunContext,
                   compile_report: CompileReport | None = None) -> Subjects:
    rows = ops.to_dict("records")
    ops_by_row = {int(r["row_id"]): r for r in rows}
    run_ev = run_evidence(ctx, ops)
    if compile_report is not None:
        run_ev.update(graph_breaks=compile_report.graph_break_count,
                      graph_break_reasons=compile_report.summary())
    op_subjects = tuple(_op_subject(r, ctx, run_ev) for r in rows)
    groups = detect_patterns(sequence, ops, ctx)
    pattern_subjects = tuple(_pattern_subject(g, ops_by_row, ctx, run_ev) for g in groups)
    all_rows = {s.evidence["row_id"]: s.evidence["time_per_step_s"] for s in op_subjects}
    run = Subject("run", "run", run_ev, all_rows,
                  {s.evidence["row_id"]: s.evidence["calls_per_step"] for s in op_subjects})
    return Subjects(run, op_subjects, pattern_subjects, ops_by_row)


# ------------------------------------------------------------
# Pattern groups: instances over the same rows, and the evidence rules test on them.
#
# Twelve identical layers are one finding with twelve occurrences per step, not twelve
# findings: instances whose occurrences map to the same op rows (op × shapes × dtypes)
# form one PatternGroup. A group on backward ops names the forward ops it is the backward of:
# that is the code the user wrote, and compiling it fuses its backward too (AOTAutograd).

@dataclass(frozen=True)
class PatternGroup:
    """All instances of one pattern over the same rows."""

    pattern: str
    row_ids: tuple[int, ...]
    names: tuple[str, ...]
    instances: int
    occurrences: int
    time_s: float  # over all profiled steps
    intermediate_bytes: float  # over all profiled steps
    row_time_s: dict[int, float] = field(hash=False, compare=False)
    first_seq: int = 0
    variant: str = ""
    shapes: Any = None
    dtypes: Any = None
    backward_of: tuple[str, ...] = ()  # forward ops its backward ops serve, in order; () forward
    autograd_nodes: tuple[str, ...] = ()  # backward nodes they ran under, in order


def group_instances(instances: Iterable[Instance]) -> tuple[PatternGroup, ...]:
    buckets: dict[tuple, list[Instance]] = defaultdict(list)
    for inst in instances:
        buckets[(inst.pattern, tuple(o.row_id for o in inst.occs))].append(inst)
    groups = []
    for (pattern, row_ids), insts in buckets.items():
        row_time: dict[int, float] = defaultdict(float)
        for inst in insts:
            for o in inst.occs:
                row_time[o.row_id] += o.time_s
        head = insts[0].occs[0]
        groups.append(PatternGroup(
            pattern=pattern, row_ids=row_ids, names=tuple(o.name for o in insts[0].occs),
            instances=len(insts), occurrences=sum(len(i.occs) for i in insts),
            time_s=sum(row_time.values()), intermediate_bytes=float(sum(i.intermediate_bytes for i in insts)),
            row_time_s=dict(row_time), first_seq=min(i.occs[0].seq for i in insts),
            variant=insts[0].variant, shapes=head.shapes, dtypes=head.dtypes,
            backward_of=_distinct(o.backward_of for o in insts[0].occs),
            autograd_nodes=_distinct(o.autograd_node for o in insts[0].occs)))
    return tuple(sorted(groups, key=lambda g: (-g.time_s, g.first_seq)))


def _distinct(values: Iterable[str]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(v for v in values if v))


def chain_label(group: PatternGroup) -> str:
    """"add → mul" for forward ops; "mul → neg (backward of aten::gru)" for backward ones."""
    names = " → ".join(n.split("::", 1)[-1] for n in group.names)
    if group.backward_of:
        return f"{names} (backward of {', '.join(group.backward_of)})"
    if group.autograd_nodes:
        return f"{names} (backward: {', '.join(group.autograd_nodes)})"
    return names


def detect_patterns(sequence: pd.DataFrame, ops: pd.DataFrame, ctx: RunContext) -> tuple[PatternGroup, ...]:
    return group_instances(detect_instances(sequence, ops, ctx))


def _row_value(ops_by_row: dict[int, dict], row_id: int, key: str) -> float | None:
    value = ops_by_row.get(row_id, {}).get(key)
    try:
        out = float(value)
    except (TypeError, ValueError):
        return None
    return None if out != out else out  # NaN: unmodelled


def _per_row_total(group: PatternGroup, ops_by_row: dict[int, dict], key: str) -> float | None:
    """Sum of a per-call column over every occurrence in the group; None if any is unknown."""
    total = 0.0
    for row_id in set(group.row_ids):
        value = _row_value(ops_by_row, row_id, key)
        if value is None:
            return None
        total += value * group.row_ids.count(row_id) * group.instances
    return total


def pattern_evidence(group: PatternGroup, ops_by_row: dict[int, dict], ctx: RunContext) -> dict[str, Any]:
    steps = ctx.steps
    total_device_s = ctx.device_time_per_step_s * steps
    roofline_s = _per_row_total(group, ops_by_row, "roofline_per_call_s")
    min_bytes = _per_row_total(group, ops_by_row, "bytes_per_call")
    flops = _per_row_total(group, ops_by_row, "flops_per_call")
    peaks = [p for p in (_row_value(ops_by_row, r, "peak_flops_per_s") for r in group.row_ids) if p]
    bandwidths = [b for b in (_row_value(ops_by_row, r, "bandwidth_bytes_per_s") for r in group.row_ids) if b]
    top_row = max(group.row_time_s, key=group.row_time_s.get)
    return {
        "pattern": group.pattern, "variant": group.variant,
        "names": chain_label(group),
        "backward_of": ", ".join(group.backward_of),
        "phase": "backward" if group.backward_of or group.autograd_nodes else "forward",
        "row_ids": list(group.row_ids), "length": len(group.row_ids),
        "occurrences_per_step": group.instances / steps, "ops_per_step": group.occurrences / steps,
        "time_per_step_s": group.time_s / steps,
        "share_pct": 100.0 * group.time_s / total_device_s if total_device_s > 0 else None,
        "intermediate_bytes_per_step": group.intermediate_bytes / steps,
        "min_bytes_per_step": min_bytes / steps if min_bytes is not None else None,
        "bandwidth_bytes_per_s": max(bandwidths) if bandwidths else None,
        "flops_per_step": flops / steps if flops is not None else None,
        "peak_flops_per_s": max(peaks) if peaks else None,
        "efficiency_frac": roofline_s / group.time_s if roofline_s is not None and group.time_s > 0 else None,
        "verdict": str(ops_by_row.get(top_row, {}).get("verdict") or "unknown"),
        "dtype": primary_dtype(group.dtypes), "region": str(ops_by_row.get(group.row_ids[0], {}).get("region") or ""),
        "input_shapes": json.dumps(decoded(group.shapes)),
    }
