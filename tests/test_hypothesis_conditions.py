"""Rule conditions on random op tables (columns as docs/architecture.md): a share range fires on
exactly the rows in range, an op glob on exactly what fnmatch matches, and the whole rule set
never raises on any such table.
"""
from __future__ import annotations

import json
import math
from fnmatch import fnmatchcase
from pathlib import Path

import pandas as pd
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_recommend_support import run_meta, sequence_from

from kernel_advisor.recommend.conditions import COMPUTE_PATHS, KINDS, VERDICTS
from kernel_advisor.recommend.engine import build_engine, run_rules
from kernel_advisor.recommend.kernels import registry_kernels
from kernel_advisor.recommend.report import recommend
from kernel_advisor.recommend.schema import load_rules
from kernel_advisor.recommend.schema import parse_rule_text

NAMES = ["aten::mm", "aten::addmm", "aten::linear", "aten::softmax", "aten::_softmax", "aten::add", "aten::mul",
         "aten::layer_norm", "aten::conv2d", "aten::copy_", "mylib::fused_rope", "triton_per_fused_add_0",
         "Memcpy HtoD (Pageable -> Device)", "ncclKernel_AllReduce", "weird[name]*?", ""]
DTYPES = ["float32", "bfloat16", "float16", "int64", "bool", "scalar", ""]
SHAPES = st.lists(st.lists(st.integers(0, 4096), max_size=4), max_size=4)
SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


NAN = math.nan
STEPS = 2


def op_row(row_id: int, name: str, shapes: list, dtypes: list, calls: int, time_s: float, flops, nbytes,
           kernel_count: int, **text) -> dict:
    """One ops.csv row, every column as docs/architecture.md defines it (NaN where unknown)."""
    mean_s = time_s / calls
    modelled = flops is not None
    peak, bandwidth = 989e12, 4.8e12
    roof_s = max(flops / peak, nbytes / bandwidth) if modelled else NAN
    return {
        "row_id": row_id, "name": name, "input_shapes": shapes, "input_dtypes": dtypes, "input_strides": [],
        "concrete_inputs": [], "calls": calls, "device_time_total_s": time_s,
        "device_time_per_step_s": time_s / STEPS, "device_time_per_call_s": mean_s, "cpu_time_total_s": 2 * time_s,
        "kernels": [], "kernel_count": kernel_count,
        "kernel_time_per_launch_s": time_s / kernel_count if kernel_count else 0.0, "max_blocks": 132,
        "first_seq": row_id, "modelled": modelled, "flops_per_call": flops if modelled else NAN,
        "bytes_per_call": nbytes if modelled else NAN,
        "intensity": flops / nbytes if modelled else NAN, "peak_flops_per_s": peak,
        "bandwidth_bytes_per_s": bandwidth, "roofline_per_call_s": roof_s,
        "achieved_flops_per_s": flops / mean_s if modelled and mean_s > 0 else NAN,
        "achieved_bytes_per_s": nbytes / mean_s if modelled and mean_s > 0 else NAN,
        "efficiency_frac": roof_s / mean_s if modelled and mean_s > 0 else NAN,
        "headroom_total_s": max(time_s - calls * roof_s, 0.0) if modelled else NAN, **text,
    }


@st.composite
def op_rows(draw, row_id: int) -> dict:
    shapes = draw(SHAPES)
    modelled = draw(st.booleans())
    return op_row(
        row_id, draw(st.sampled_from(NAMES)), shapes, [draw(st.sampled_from(DTYPES)) for _ in shapes],
        draw(st.integers(1, 50)), draw(st.one_of(st.just(0.0), st.floats(1e-7, 1e-1))),
        draw(st.floats(0, 1e12)) if modelled else None, draw(st.floats(1, 1e10)) if modelled else None,
        draw(st.integers(0, 100)), verdict=draw(st.sampled_from(VERDICTS)),
        compute_path=draw(st.sampled_from(COMPUTE_PATHS)), kind=draw(st.sampled_from(KINDS)),
        region=draw(st.sampled_from(["", "attn", "mlp"])))


@st.composite
def runs(draw):
    """(ops, sequence, run.json) of one random run, two profiled steps."""
    rows = [draw(op_rows(i)) for i in range(draw(st.integers(1, 8)))]
    ops = pd.DataFrame(rows)
    ops["share_pct"] = 100 * ops["device_time_total_s"] / ops["device_time_total_s"].sum()  # NaN when all are 0
    per_step = [(r["name"], r["row_id"], r["input_shapes"], r["input_dtypes"], r["device_time_total_s"] / 2)
                for r in rows]
    total_s = float(ops["device_time_total_s"].sum())
    device = draw(st.sampled_from(["cuda", "cpu"]))
    meta = run_meta(total_device_time_s=total_s, step_wall_s=total_s / 2 + draw(st.floats(0, 1e-2)),
                    device_type=device, capability=draw(st.sampled_from([None, [8, 0], [9, 0]])),
                    mode=draw(st.sampled_from(["inference", "train"])), allow_tf32=draw(st.booleans()))
    return ops, sequence_from(per_step), meta


def one_rule(conditions: dict):
    text = (f"version: 1\nrules:\n  - id: team-probe\n    title: probe\n    tier: library\n"
            f"    conditions: {json.dumps(conditions)}\n    message: \"{{name}}\"\n    gain: {{model: none}}\n")
    (rule,) = parse_rule_text(text, Path("team.yaml"))
    return rule


def fired_rows(run, rule) -> set[int]:
    ops, sequence, meta = run
    recs, suppressed = run_rules(build_engine(ops, sequence, meta, [rule]))
    return {int(r.subject.removeprefix("row:")) for r in [*recs, *suppressed] if r.rule_id == rule.id}


@SETTINGS
@given(run=runs(), bounds=st.tuples(st.integers(0, 10_000), st.integers(1, 10_000)))
def test_a_share_range_fires_on_exactly_the_rows_in_range(run, bounds):
    lo = bounds[0] / 100  # 0.00 .. 100.00 % in steps of 0.01, written exactly in YAML
    hi = lo + bounds[1] / 100
    rule = one_rule({"share_pct": {"min": lo, "max": hi}})
    ops = run[0]
    want = {int(r) for r, s in zip(ops["row_id"], ops["share_pct"]) if not math.isnan(s) and lo <= s < hi}
    assert fired_rows(run, rule) == want  # min inclusive, max exclusive


GLOB_CHARS = st.sampled_from(list("at:mn_*?[]!xe ") + ["aten::", "triton_", "soft"])


@SETTINGS
@given(run=runs(), globs=st.lists(st.lists(GLOB_CHARS, min_size=1, max_size=5).map("".join), min_size=1,
                                  max_size=3))
def test_an_op_glob_fires_on_exactly_what_fnmatch_matches(run, globs):
    ops = run[0]
    want = {int(r) for r, name in zip(ops["row_id"], ops["name"]) if any(fnmatchcase(name, g) for g in globs)}
    assert fired_rows(run, one_rule({"ops": globs})) == want
    assert fired_rows(run, one_rule({"not_ops": globs})) == set(map(int, ops["row_id"])) - want


BUILTIN_RULES = load_rules(())
KERNELS = registry_kernels()


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(run=runs())
def test_the_built_in_rules_never_raise_on_a_well_formed_table(run):
    ops, sequence, meta = run
    report = recommend(ops, sequence, meta, BUILTIN_RULES, KERNELS)
    assert report.total_saving_per_step_s >= 0
    for finding in report.findings:
        assert finding.saving_per_step_s is None or finding.saving_per_step_s >= 0
