"""Attribute every microsecond of device time to the op users recognise.

A GPU kernel belongs to the outermost recognisable op above the CPU op that launched it
(`aten::linear` → `aten::addmm` → cuBLAS kernel is one `aten::linear` occurrence), unless
that op's recorded arguments cannot price it and its children's can (`aten::einsum`,
whose equation the profiler does not record: its bmm/sum/copies become the rows). Kernels
whose launcher has no recognisable op above it (Inductor's `triton_*`, extensions) or that
have no launcher at all (NCCL, stray work) become rows named after the kernel. Each GPU
event in the profiled steps goes to exactly one occurrence, so the rows add up to the
total device time. On CPU, "device time" is the self time of each CPU op, rolled up the
same way.

Rows group occurrences by name, input shapes and dtypes, and - when the caller passes the
cost model's `cost_arguments` (analyze.costs; collect does not import analyze) - by every
concrete argument the op's cost depends on (stride, padding, groups, dims, scale factors:
the values its cost formula reads), so calls that cost differently never share a row.

Backward work is kept apart from forward work: every occurrence carries the autograd node it
ran under (`autograd_node`, the innermost `autograd::engine::evaluate_function: <Node>`
scope), the forward op that node serves (`backward_of`: the node and the forward ops that
created it carry the same profiler "Sequence number"), and whether it is the engine's own
work rather than the node's formula (`autograd_internal`: gradients summed into the next
node's input buffer, a gradient reduced to its input's shape, AccumulateGrad). Rows are split
by all three, so a forward occurrence never shares a row with a backward one.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np
import pandas as pd
import torch

from kernel_advisor.collect.nesting import (AUTOGRAD_COLUMNS, assign_steps, autograd_columns, innermost_region,
                                            is_step_name, last_steps, marked_windows, nest_ops, self_time_us)
from kernel_advisor.collect.trace import TraceData
from kernel_advisor.dtypes import profiler_dtype_name

# Namespaced ops a user recognises; autograd engine wrappers and profiler markers are not.
_RECOGNISED = re.compile(r"^[A-Za-z_][\w.]*::\w")
_NOT_RECOGNISED = ("autograd::", "torch::autograd::", "profiler::", "ProfilerStep")
GPU_KIND = {"kernel": "kernel", "gpu_memcpy": "memcpy", "gpu_memset": "memset"}
# Ops whose cost hangs on an argument torch.profiler does not record (a str: it records
# scalars only) while their children's recorded arguments price them: when that argument
# is missing the op owns nothing and its children get their own rows. aten::einsum's
# equation (argument 0) decides its bmm shapes; FlopCounterMode counts those bmm calls too.
PRICED_BY_CHILDREN = {"aten::einsum": 0}
# (name, input shapes, input dtypes, concrete inputs) -> the concrete arguments the cost
# depends on: analyze.costs.cost_arguments.
CostArguments = Callable[[str, list, list, list], Sequence]


@dataclass(frozen=True)
class Attribution:
    ops: pd.DataFrame  # docs/architecture.md, "ops.csv columns (collect)"
    sequence: pd.DataFrame
    total_device_time_s: float
    device_busy_s: float
    step_wall_s: tuple[float, ...]  # trace-side duration of each step window
    step_device_time_s: tuple[float, ...]  # per step window
    # Steps the per-step figures divide by: one per step window, or, for a trace with no step
    # markers (one window spanning it all), the count the caller says it holds (import --steps).
    steps: int = 1
    step_markers: str = ""  # "advisor::step#N", "ProfilerStep#N", or "" (none: one whole-trace window)


def is_recognised(name: str) -> bool:
    return bool(_RECOGNISED.match(name)) and not name.startswith(_NOT_RECOGNISED)


def attribute(trace: TraceData, device_type: str,
              cost_arguments: CostArguments | None = None, steps_hint: int | None = None,
              priced: Callable[[str], bool] | None = None) -> Attribution:
    """Rows of device time per op. With `cost_arguments`, calls whose cost arguments differ
    (a stride-2 conv beside a stride-1 one of the same shapes) get rows of their own.

    `steps_hint` (import --steps N): with step markers, only the last N marked steps count
    (earlier ones are warm-up); with none, the whole trace counts as N steps.
    `priced(name)`: whether the cost model has a formula for an op. An op without one that torch
    implements only through other aten ops (CompositeImplicitAutograd: it launches nothing of
    its own) leaves its time to its children, which get rows of their own.
    """
    steps, marker = marked_windows(trace)
    if steps_hint is not None:
        steps = last_steps(steps, marker, steps_hint)
    cpu = trace.cpu_ops.reset_index(drop=True)
    cpu = cpu.assign(step=assign_steps(cpu["ts_us"].to_numpy(float), steps))
    cpu = cpu[cpu["step"] >= 0].reset_index(drop=True)
    recognised = _per_unique(cpu["name"], is_recognised).to_numpy(bool) & ~_priced_by_children(cpu)
    if priced is not None:
        recognised &= ~_per_unique(cpu["name"], lambda n: not priced(n) and composite_implicit(n)).to_numpy(bool)
    parent, owner = nest_ops(cpu, recognised)
    cpu = _index_sizes_from_views(cpu, parent)
    cpu = cpu.assign(owner=owner, region=innermost_region(cpu, trace.annotations, is_step_name),
                     **autograd_columns(cpu, parent, owner))
    if device_type == "cpu":
        occ, work = _cpu_work(cpu, parent)
    else:
        occ, work = _gpu_work(cpu, trace, steps)
    n_steps = len(steps) if marker else (steps_hint or 1)
    return _summarise(occ, work, steps, device_type, cost_arguments, n_steps, marker)


def _priced_by_children(cpu: pd.DataFrame) -> np.ndarray:
    """Calls of PRICED_BY_CHILDREN ops whose deciding argument was not recorded."""
    split = np.zeros(len(cpu), dtype=bool)
    candidates = cpu["name"].isin(list(PRICED_BY_CHILDREN)).to_numpy()
    if candidates.any():
        rows = cpu.loc[candidates, ["name", "concrete"]]
        split[candidates] = [not _recorded(_json_list(c), PRICED_BY_CHILDREN[n])
                             for n, c in zip(rows["name"], rows["concrete"])]
    return split


def composite_implicit(name: str) -> bool:
    """torch implements `name` only by calling other aten ops: a CompositeImplicitAutograd kernel
    and no CPU or CUDA kernel that a backend would pick first."""
    has = torch._C._dispatch_has_kernel_for_dispatch_key
    try:
        return bool(has(name, "CompositeImplicitAutograd")) and not (has(name, "CUDA") or has(name, "CPU"))
    except RuntimeError:  # not an operator of this torch (a trace from another version, a user range)
        return False


INDEX_OPS = ("aten::index", "aten::_unsafe_index")


def _index_sizes_from_views(cpu: pd.DataFrame, parent: np.ndarray) -> pd.DataFrame:
    """aten::index calls with their output's size in the concrete slot of their indices.

    torch.profiler records nothing for a Tensor?[] argument, so `x[:, idx]` arrives without its
    index shapes. ATen's first step views `self` in the output's shape (restride_src: an
    aten::as_strided child of `self`'s shape), and that child's recorded size is the output's;
    it fills the empty slot, where the cost model (analyze/costs/indexing.py) reads it.
    """
    names = cpu["name"].to_numpy(dtype=object)
    is_index = np.isin(names, INDEX_OPS)
    if not is_index.any():
        return cpu
    dims, concrete = cpu["input_dims"].to_numpy(dtype=object), cpu["concrete"].to_numpy(dtype=object).copy()
    views = np.flatnonzero((parent >= 0) & (names == "aten::as_strided"))
    views = views[is_index[parent[views]]]
    for view in views[np.argsort(cpu["ts_us"].to_numpy(float)[views], kind="stable")]:
        call = parent[view]
        values, view_values = _json_list(concrete[call]), _json_list(concrete[view])
        own_dims, view_dims = _json_list(dims[call]), _json_list(dims[view])
        if (len(values) > 1 and values[1] in ("", None) and len(view_values) > 1 and view_values[1]
                and own_dims[:1] == view_dims[:1]):
            values[1] = view_values[1]
            concrete[call] = json.dumps(values)
    return cpu.assign(concrete=concrete)


def _recorded(concrete: list, pos: int) -> bool:
    value = concrete[pos] if pos < len(concrete) else None
    return isinstance(value, str) and value.strip() not in ("", "None")


def _cpu_work(cpu: pd.DataFrame, parent: np.ndarray):
    """CPU: each op's self time goes to its owner, or to itself when it has none."""
    self_us = self_time_us(cpu, parent)
    owner = cpu["owner"].to_numpy()
    target = np.where(owner >= 0, owner, np.arange(len(cpu)))
    occ = _occurrences_from_cpu(cpu, np.unique(target))
    work = pd.DataFrame({"occ_cpu": target, "dur_us": self_us, "name": "", "blocks": 0,
                         "ts_us": cpu["ts_us"].to_numpy(float), "is_kernel": False})
    return occ, work


def _occurrences_from_cpu(cpu: pd.DataFrame, idx: np.ndarray, name=None, kind="op") -> pd.DataFrame:
    rows = cpu.iloc[idx]
    return pd.DataFrame({
        "occ_cpu": idx, "name": rows["name"].to_numpy() if name is None else name, "kind": kind,
        "input_dims": rows["input_dims"].to_numpy(), "input_types": rows["input_types"].to_numpy(),
        "input_strides": rows["input_strides"].to_numpy(), "concrete": rows["concrete"].to_numpy(),
        "kernel_file": rows["kernel_file"].to_numpy(), "step": rows["step"].to_numpy(),
        "start_us": rows["ts_us"].to_numpy(float), "cpu_time_us": rows["dur_us"].to_numpy(float),
        "region": rows["region"].to_numpy(),
        **{c: rows[c].to_numpy() for c in AUTOGRAD_COLUMNS},
    })


def _gpu_work(cpu: pd.DataFrame, trace: TraceData, steps: pd.DataFrame):
    gpu = trace.gpu.reset_index(drop=True)
    launcher = _launchers(cpu, gpu, trace.runtime)
    in_step = np.where(launcher >= 0, cpu["step"].to_numpy()[np.clip(launcher, 0, None)] if len(cpu) else -1,
                       assign_steps(gpu["ts_us"].to_numpy(float), steps))
    keep = in_step >= 0
    gpu, launcher = gpu[keep].reset_index(drop=True), launcher[keep]
    owner = np.where(launcher >= 0, cpu["owner"].to_numpy()[np.clip(launcher, 0, None)] if len(cpu) else -1, -1)
    owned = owner >= 0
    # Owners that launched nothing (views, CPU-side ops) still belong in the op sequence.
    owners = np.unique(np.concatenate([cpu["owner"].to_numpy()[cpu["owner"].to_numpy() >= 0], owner[owned]]))
    occ_owned = _occurrences_from_cpu(cpu, owners)
    occ_named, occ_key = _kernel_named_occurrences(cpu, gpu, launcher, owned, in_step[keep])
    occ = pd.concat([occ_owned, occ_named], ignore_index=True)
    work = pd.DataFrame({"occ_cpu": np.where(owned, owner, occ_key), "dur_us": gpu["dur_us"].to_numpy(float),
                         "name": gpu["name"].to_numpy(), "blocks": gpu["blocks"].to_numpy(),
                         "ts_us": gpu["ts_us"].to_numpy(float), "is_kernel": True,
                         "end_us": (gpu["ts_us"] + gpu["dur_us"]).to_numpy(float)})
    return occ, work


def _kernel_named_occurrences(cpu, gpu, launcher, owned, step):
    """Rows named after the kernel: one occurrence per launching CPU event, or per event."""
    n_cpu = len(cpu)
    unowned = np.flatnonzero(~owned)
    # Key space: CPU index for a launcher, n_cpu + gpu index for launcher-less events.
    key = np.full(len(gpu), -1, dtype=np.int64)
    key[unowned] = np.where(launcher[unowned] >= 0, launcher[unowned], n_cpu + unowned)
    if not len(unowned):
        return pd.DataFrame(columns=["occ_cpu"]), key
    first = pd.DataFrame({"key": key[unowned], "g": unowned}).drop_duplicates("key")
    g = first["g"].to_numpy()
    lch = launcher[g]
    cat = gpu["cat"].to_numpy()[g]
    occ = pd.DataFrame({
        "occ_cpu": first["key"].to_numpy(), "name": gpu["name"].to_numpy()[g],
        "kind": [GPU_KIND.get(c, "kernel") for c in cat],
        "input_dims": _from_cpu(cpu, lch, "input_dims", ""), "input_types": _from_cpu(cpu, lch, "input_types", ""),
        "input_strides": _from_cpu(cpu, lch, "input_strides", ""), "concrete": _from_cpu(cpu, lch, "concrete", ""),
        "kernel_file": _from_cpu(cpu, lch, "kernel_file", ""), "step": step[g],
        "start_us": np.where(lch >= 0, _from_cpu(cpu, lch, "ts_us", 0.0), gpu["ts_us"].to_numpy(float)[g]),
        "cpu_time_us": _from_cpu(cpu, lch, "dur_us", 0.0), "region": _from_cpu(cpu, lch, "region", ""),
        "backward_of": _from_cpu(cpu, lch, "backward_of", ""),
        "autograd_node": _from_cpu(cpu, lch, "autograd_node", ""),
        "autograd_internal": _from_cpu(cpu, lch, "autograd_internal", 0.0).astype(bool),
    })
    return occ, key


def _from_cpu(cpu: pd.DataFrame, idx: np.ndarray, col: str, default):
    values = cpu[col].to_numpy()
    return np.array([values[i] if i >= 0 else default for i in idx], dtype=object if isinstance(default, str) else float)


def _launchers(cpu: pd.DataFrame, gpu: pd.DataFrame, runtime: pd.DataFrame) -> np.ndarray:
    """CPU-op index that launched each GPU event (-1 when none is known).

    The kernel's External id names the innermost op active at launch; when a trace lacks
    it, the runtime call with the same correlation id gives it instead.
    """
    ext_to_cpu = pd.Series(np.arange(len(cpu)), index=cpu["ext_id"].to_numpy())
    ext_to_cpu = ext_to_cpu[~ext_to_cpu.index.duplicated()]
    ext = gpu["ext_id"].to_numpy()
    if len(runtime) and (ext < 0).any():
        corr_to_ext = pd.Series(runtime["ext_id"].to_numpy(), index=runtime["correlation"].to_numpy())
        corr_to_ext = corr_to_ext[~corr_to_ext.index.duplicated()]
        via_rt = corr_to_ext.reindex(gpu["correlation"].to_numpy()).fillna(-1).to_numpy(np.int64)
        ext = np.where(ext >= 0, ext, via_rt)
    found = ext_to_cpu.reindex(ext).to_numpy()
    return np.where(np.isnan(found), -1, found).astype(np.int64)


def _summarise(occ: pd.DataFrame, work: pd.DataFrame, steps: pd.DataFrame, device_type: str,
               cost_arguments: CostArguments | None, n_steps: int, marker: str) -> Attribution:
    occ = occ.sort_values(["start_us", "occ_cpu"], kind="stable").reset_index(drop=True)
    occ["seq"] = np.arange(len(occ))
    occ["step"] = occ["step"].astype(np.int64)
    occ["input_dtypes"] = _per_unique(occ["input_types"], _dtypes)
    occ["dev_us"] = occ["occ_cpu"].map(work.groupby("occ_cpu")["dur_us"].sum()).fillna(0.0).to_numpy()
    occ["cost_args"] = _cost_args(occ, cost_arguments) if cost_arguments else ""
    occ["autograd_internal"] = occ["autograd_internal"].astype(bool)
    keys = ["name", "kind", "input_dims", "input_dtypes", "cost_args", *AUTOGRAD_COLUMNS]
    occ["row_id"] = occ.groupby(keys, sort=False, dropna=False).ngroup()
    n_steps = max(n_steps, 1)
    total_us = float(work["dur_us"].sum())
    ops = _rows(occ, work, keys, n_steps, total_us)
    sequence = pd.DataFrame({
        "seq": occ["seq"], "step": occ["step"], "name": occ["name"], "row_id": occ["row_id"],
        "input_shapes": _per_unique(occ["input_dims"], _json_or_empty), "input_dtypes": occ["input_dtypes"],
        "device_time_per_call_s": occ["dev_us"] * 1e-6, "start_us": occ["start_us"], "region": occ["region"],
        **{c: occ[c] for c in AUTOGRAD_COLUMNS},
    })
    wall = tuple(((steps["end_us"] - steps["ts_us"]) * 1e-6).tolist())
    per_step = _per_step_device_s(occ, max(len(steps), 1))
    busy_s = _busy_s(work) if device_type != "cpu" else total_us * 1e-6
    return Attribution(ops=ops, sequence=sequence, total_device_time_s=total_us * 1e-6,
                       device_busy_s=busy_s, step_wall_s=wall, step_device_time_s=per_step,
                       steps=n_steps, step_markers=marker)


def _rows(occ, work, keys, n_steps, total_us) -> pd.DataFrame:
    g = occ.groupby("row_id", sort=True)
    first = g.first()
    dev_us = g["dev_us"].sum()
    calls = g.size()
    ops = pd.DataFrame({
        "name": first["name"], "kind": first["kind"],
        "input_shapes": first["input_dims"].map(_json_or_empty),
        "input_dtypes": first["input_dtypes"], "input_strides": first["input_strides"].map(_json_or_empty),
        "concrete_inputs": first["concrete"].map(_json_or_empty), "calls": calls,
        "device_time_total_s": dev_us * 1e-6, "device_time_per_step_s": dev_us * 1e-6 / n_steps,
        "device_time_per_call_s": dev_us * 1e-6 / calls,
        "share_pct": (100.0 * dev_us / total_us) if total_us > 0 else 0.0 * dev_us,
        "cpu_time_total_s": g["cpu_time_us"].sum() * 1e-6,
    })
    ops = ops.join(_kernel_stats(occ, work))
    ops["kernels"] = ops["kernels"].where(ops["kernels"].notna(), "[]")
    for col in ("kernel_count", "max_blocks"):
        ops[col] = ops[col].fillna(0).astype(np.int64)
    ops["kernel_time_per_launch_s"] = np.where(ops["kernel_count"] > 0,
                                               ops["device_time_total_s"] / ops["kernel_count"].clip(lower=1), 0.0)
    ops["first_seq"] = g["seq"].min()
    ops["region"] = first["region"]
    ops["kernel_file"] = first["kernel_file"]
    for col in AUTOGRAD_COLUMNS:
        ops[col] = first[col]
    ops = ops.rename_axis("row_id").reset_index()
    return ops.sort_values("device_time_total_s", ascending=False, kind="stable").reset_index(drop=True)


def _kernel_stats(occ: pd.DataFrame, work: pd.DataFrame) -> pd.DataFrame:
    kernels = work[work["is_kernel"]]
    if not len(kernels):
        return pd.DataFrame(columns=["kernels", "kernel_count", "max_blocks"])
    row_of = occ.set_index("occ_cpu")["row_id"]
    k = kernels.assign(row_id=kernels["occ_cpu"].map(row_of).to_numpy())
    per = k.groupby(["row_id", "name"]).agg(count=("dur_us", "size"), time_us=("dur_us", "sum"),
                                           max_blocks=("blocks", "max")).reset_index()
    per = per.sort_values(["row_id", "time_us"], ascending=[True, False])
    lists = per.groupby("row_id").apply(_kernel_list, include_groups=False)
    totals = per.groupby("row_id").agg(kernel_count=("count", "sum"), max_blocks=("max_blocks", "max"))
    return totals.assign(kernels=lists)


def _kernel_list(df: pd.DataFrame) -> str:
    return json.dumps([{"name": n, "count": int(c), "time_total_s": float(t) * 1e-6, "max_blocks": int(b)}
                       for n, c, t, b in zip(df["name"], df["count"], df["time_us"], df["max_blocks"])])


def _per_step_device_s(occ: pd.DataFrame, n_steps: int) -> tuple[float, ...]:
    per = occ.groupby("step")["dev_us"].sum()
    return tuple(float(per.get(i, 0.0)) * 1e-6 for i in range(n_steps))


def _busy_s(work: pd.DataFrame) -> float:
    """Union of GPU busy intervals: overlapping streams are counted once."""
    if not len(work):
        return 0.0
    order = np.argsort(work["ts_us"].to_numpy())
    starts = work["ts_us"].to_numpy()[order]
    ends = work["end_us"].to_numpy()[order]
    run_end = np.maximum.accumulate(ends)
    new_block = np.concatenate([[True], starts[1:] > run_end[:-1]])
    block_id = np.cumsum(new_block) - 1
    block_start = starts[new_block]
    block_end = pd.Series(run_end).groupby(block_id).max().to_numpy()
    return float((block_end - block_start).sum()) * 1e-6


def _per_unique(values: pd.Series, fn) -> pd.Series:
    """fn applied once per distinct value: names and shapes repeat across millions of events."""
    codes, uniques = pd.factorize(values, use_na_sentinel=False)
    mapped = np.array([fn(u) for u in uniques], dtype=object)
    return pd.Series(mapped[codes] if len(codes) else [], index=values.index, dtype=object)


def _cost_args(occ: pd.DataFrame, cost_arguments: CostArguments) -> pd.Series:
    """The concrete arguments each occurrence's cost depends on, as text ("" for none),
    computed once per distinct (name, kind, shapes, types, concrete inputs)."""
    signature = occ["name"].astype(str) + "\x1f" + occ["kind"].astype(str) + "\x1f" + \
        occ["input_dims"].astype(str) + "\x1f" + occ["input_types"].astype(str) + "\x1f" + \
        occ["concrete"].astype(str)

    def one(sig: str) -> str:
        name, kind, dims, types, concrete = sig.split("\x1f")
        if kind != "op" or not concrete:
            return ""
        read = cost_arguments(name, _json_list(dims), _json_list(types), _json_list(concrete))
        return json.dumps([list(r) for r in read]) if read else ""

    return _per_unique(signature, one)


def _json_list(text) -> list:
    if not isinstance(text, str) or not text:
        return []
    try:
        value = json.loads(text)
    except ValueError:
        return []
    return value if isinstance(value, list) else []


def _dtypes(types_json: str) -> str:
    if not types_json:
        return "[]"
    return json.dumps([profiler_dtype_name(t) if isinstance(t, str) else t for t in json.loads(types_json)])


def _json_or_empty(text: str) -> str:
    return text if text else "[]"
