"""Evidence: the named values conditions test and messages quote, per op row and per run.

Values are SI (seconds, bytes, fractions). The display fields a message template may use
(`time_per_step_ms`, `efficiency_pct`, ...) are derived in `message_fields`, nowhere else.
"""
from __future__ import annotations

import contextlib
import json
import math
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from kernel_advisor.analyze.costs import rnn
from kernel_advisor.analyze.costs.call import OpCall
from kernel_advisor.analyze.costs.shapes import Unmodelled
from kernel_advisor.analyze.roofline import RECURRENT_OPS
from kernel_advisor.collect.noise import step_noise_s
from kernel_advisor.collect.step_time import step_time_of
from kernel_advisor.dtypes import is_floating
from kernel_advisor.errors import UserInputError
from kernel_advisor.recommend.kernels import op_family
from kernel_advisor.records.run import RunMeta

GEMM_OPS = ("aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::matmul", "aten::linear",
            "aten::addbmm", "aten::_addmm_activation")
CONV_OPS = ("aten::conv1d", "aten::conv2d", "aten::conv3d", "aten::convolution", "aten::_convolution",
            "aten::cudnn_convolution", "aten::conv_transpose1d", "aten::conv_transpose2d",
            "aten::conv_transpose3d", "aten::mkldnn_convolution")
ATTENTION_OPS = ("aten::scaled_dot_product_attention", "aten::_scaled_dot_product_flash_attention",
                 "aten::_scaled_dot_product_efficient_attention", "aten::_scaled_dot_product_cudnn_attention",
                 "aten::_flash_attention_forward", "aten::_efficient_attention_forward",
                 "aten::_scaled_dot_product_flash_attention_backward",
                 "aten::_scaled_dot_product_efficient_attention_backward",
                 "aten::_scaled_dot_product_cudnn_attention_backward")
# The SDPA backend an attention row ran, told by the kernels it launched: cuDNN's fused kernels
# are named cudnn_generated_*_sdpa_*_flash_* (so cuDNN is tested before flash); FlashAttention-2's
# pytorch_flash::flash_fwd/bwd_*; the memory-efficient backend's fmha_cutlass*. The math backend
# launches plain GEMM and softmax kernels.
_ATTENTION_KERNEL_MARKS = (("cudnn", ("cudnn",)), ("flash", ("flash",)),
                           ("efficient", ("fmha", "mem_eff", "efficient_attention")))
# run.json "distributed" numbers a run-scope rule may test (absent for a single process).
DISTRIBUTED_KEYS = ("world_size", "straggler_ratio", "exposed_comm_s", "exposed_comm_pct", "max_comm_wait_s",
                    "max_comm_wait_pct", "waited_for_rank", "overlap_frac", "allreduce_count",
                    "mean_allreduce_bytes", "busbw_frac_of_ceiling", "allgather_overlap_frac")


@dataclass(frozen=True)
class RunContext:
    """What every rule may read about the run as a whole."""

    steps: int
    step_s: float  # run.json's step time (collect/step_time.py): the Amdahl denominator
    device_time_per_step_s: float
    device_busy_per_step_s: float
    device_type: str
    device_name: str
    capability: tuple[int, int] | None
    settings: Mapping[str, Any]
    ceilings: Mapping[str, Any]
    model_file: str | None
    mode: str
    distributed: Mapping[str, Any]  # run.json "distributed" (docs/distributed.md); {} for one process
    step_basis: str = ""  # what step_s is: "median of 10 unprofiled steps"
    step_noise_s: float = 0.0  # median − low of the step's interval: a saving this small is within noise


def run_context(meta: Mapping[str, Any]) -> RunContext:
    meta = RunMeta.of(meta)
    steps, device = meta.step_count, meta.device
    device_per_step_s = meta.total_device_time_s / steps
    busy_s = meta.device_busy_s
    busy_per_step_s = float(busy_s) / steps if busy_s is not None else device_per_step_s
    # NB: the unprofiled wall time is the real step; profiler overhead only inflates host time.
    step = step_time_of(meta)
    step_s = step.value_s if step is not None and step.value_s > 0 else device_per_step_s
    basis = step.basis() if step is not None and step.value_s > 0 else "device time per step (no step times)"
    cap = device.get("capability")
    settings = meta.settings
    mode = settings.get("mode") or meta.mode or "inference"
    settings.setdefault("mode", mode)
    return RunContext(
        steps=steps, step_s=step_s, device_time_per_step_s=device_per_step_s,
        device_busy_per_step_s=busy_per_step_s, device_type=str(device.get("type") or "cpu"),
        device_name=str(device.get("name") or ""), capability=tuple(cap) if cap else None,
        settings=settings, ceilings=meta.ceilings, model_file=meta.model_file, mode=mode,
        distributed=meta.distributed, step_basis=basis,
        step_noise_s=step_noise_s(step) if step is not None and step.value_s > 0 else 0.0)


def run_evidence(ctx: RunContext, ops: Any) -> dict[str, Any]:
    kernel_count = float(ops["kernel_count"].sum()) if len(ops) and "kernel_count" in ops else 0.0
    with_kernels = ops[ops["kernel_count"] > 0] if kernel_count else ops.iloc[:0]
    kernel_time_s = float(with_kernels["device_time_total_s"].sum()) if len(with_kernels) else 0.0
    gap_s = max(0.0, ctx.step_s - ctx.device_busy_per_step_s)
    return {
        "device_type": ctx.device_type, "device_name": ctx.device_name,
        "capability": list(ctx.capability) if ctx.capability else None,
        "settings": dict(ctx.settings), "mode": ctx.mode, "steps": ctx.steps, "step_s": ctx.step_s,
        "device_time_per_step_s": ctx.device_time_per_step_s,
        "kernels_per_step": kernel_count / ctx.steps,
        "run_kernel_time_per_launch_s": kernel_time_s / kernel_count if kernel_count else None,
        "device_busy_frac": ctx.device_busy_per_step_s / ctx.step_s if ctx.step_s > 0 else None,
        "host_gap_per_step_s": gap_s, "host_gap_frac": gap_s / ctx.step_s if ctx.step_s > 0 else None,
        "graph_breaks": None, "graph_break_reasons": None, "model_file": ctx.model_file or "MODEL.py",
        "nchw_norm_share_pct": nchw_norm_share_pct(ops),
        **{k: ctx.distributed.get(k) for k in DISTRIBUTED_KEYS},
    }


# Norms whose CUDA kernels (torch 2.11) take a channels_last input by copying it to NCHW and
# back: in benchmarks/advice on the H200, channels_last made a GroupNorm UNet 0.69x and an
# InstanceNorm style network 0.82x as fast, while BatchNorm ResNets gained 1.27-1.28x.
NCHW_NORMS = frozenset({"group_norm", "instance_norm", "group_norm_backward"})  # op_family names


def nchw_norm_share_pct(ops: Any) -> float:
    """Share of device time in NCHW_NORMS ops (0 without op rows)."""
    if not len(ops) or "name" not in ops or "device_time_total_s" not in ops:
        return 0.0
    total = float(ops["device_time_total_s"].sum())
    family = ops["name"].astype(str).map(op_family)
    norms = float(ops.loc[family.isin(NCHW_NORMS), "device_time_total_s"].sum())
    return 100.0 * norms / total if total > 0 else 0.0


def _num(row: Mapping[str, Any], key: str) -> float | None:
    value = row.get(key)
    if value is None or isinstance(value, bool):
        return None
    try:
        out = float(value)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(out) else out


def decoded(value: Any) -> Any:
    """A JSON column value whether or not the run loader already decoded it."""
    if isinstance(value, str):
        try:
            return json.loads(value) if value else []
        except json.JSONDecodeError:
            return []
    return value if isinstance(value, list) else []


def primary_dtype(dtypes: Any) -> str | None:
    names = [d for d in decoded(dtypes) if isinstance(d, str) and d not in ("", "scalar")]
    floats = [d for d in names if is_floating(d)]
    return (floats or names or [None])[0]


def alignment_dims(name: str, shapes: Any) -> dict[str, int] | None:
    """The dims tensor-core alignment depends on: K and N of a GEMM, channels of a conv."""
    tensors = [s for s in decoded(shapes) if isinstance(s, list) and all(isinstance(d, int) for d in s)]
    a, b = _gemm_operands(name, tensors)
    if a is not None and b is not None and len(a) >= 1 and len(b) >= 1:
        if name == "aten::linear":  # weight is [N, K]
            return {"K": b[-1], "N": b[0]} if len(b) == 2 else None
        return {"K": a[-1], "N": b[-1]} if len(b) >= 2 else {"K": a[-1]}
    if name in CONV_OPS and len(tensors) >= 2 and len(tensors[0]) >= 3 and len(tensors[1]) >= 3:
        return {"C_in": tensors[0][1], "C_out": tensors[1][0]}
    return None


def _gemm_operands(name: str, tensors: list[list[int]]) -> tuple[list[int] | None, list[int] | None]:
    if name not in GEMM_OPS:
        return None, None
    # addmm/baddbmm/addbmm(bias, a, b); the others (a, b[, bias])
    first = 1 if name in ("aten::addmm", "aten::baddbmm", "aten::addbmm") else 0
    if len(tensors) < first + 2:
        return None, None
    return tensors[first], tensors[first + 1]


def memory_format(name: str, shapes: Any, strides: Any) -> str | None:
    if name not in CONV_OPS:
        return None
    shapes, strides = decoded(shapes), decoded(strides)
    if not shapes or not strides or len(shapes[0]) != 4 or len(strides[0]) != 4:
        return None
    n, c, h, w = shapes[0]
    if list(strides[0]) == [c * h * w, h * w, w, 1]:
        return "contiguous"
    if list(strides[0]) == [h * w * c, 1, w * c, c]:
        return "channels_last"
    return "other"


def attention_backend(name: str, kernels: Any) -> str | None:
    """"flash", "efficient", "cudnn", "math" for an attention row (by its kernels' names),
    "unknown" when it launched none on record; None for any other op."""
    if name not in ATTENTION_OPS:
        return None
    names = [str(k.get("name", "")).lower() for k in decoded(kernels) if isinstance(k, Mapping)]
    for backend, marks in _ATTENTION_KERNEL_MARKS:
        if any(m in n for n in names for m in marks):
            return backend
    return "math" if names else "unknown"


def recurrence_steps_of_row(name: str, row: Mapping[str, Any]) -> int | None:
    """The cell steps a recurrent-layer row runs one after another per call (T x layers), None
    for other ops or arguments the profiler did not record."""
    if name not in RECURRENT_OPS:
        return None
    try:
        call = OpCall.from_trace(name, decoded(row.get("input_shapes")), decoded(row.get("input_dtypes")),
                                 decoded(row.get("concrete_inputs")))
        steps = rnn.recurrence_steps(call)
    except Unmodelled:
        return None
    return steps if steps > 0 else None


def op_evidence(row: Mapping[str, Any], ctx: RunContext) -> dict[str, Any]:
    name = str(row.get("name", ""))
    calls = _num(row, "calls") or 0.0
    kernels = _num(row, "kernel_count") or 0.0
    time_s = _num(row, "device_time_total_s") or 0.0
    headroom_s = _num(row, "headroom_total_s")
    dims = alignment_dims(name, row.get("input_shapes"))
    per_call_s, steps = _num(row, "device_time_per_call_s"), recurrence_steps_of_row(name, row)
    return {
        "row_id": int(row.get("row_id", -1)), "name": name, "kind": str(row.get("kind") or "op"),
        "verdict": str(row.get("verdict") or "unknown"), "dtype": primary_dtype(row.get("input_dtypes")),
        "compute_path": str(row.get("compute_path") or "") or None, "region": str(row.get("region") or ""),
        "input_shapes": json.dumps(decoded(row.get("input_shapes"))),
        "share_pct": _num(row, "share_pct"), "efficiency_frac": _num(row, "efficiency_frac"),
        "calls": calls, "calls_per_step": calls / ctx.steps, "time_per_step_s": time_s / ctx.steps,
        "device_time_per_call_s": _num(row, "device_time_per_call_s"),
        "cpu_time_per_call_s": cpu_s / calls if (cpu_s := _num(row, "cpu_time_total_s")) is not None and calls
        else None,
        "kernel_time_per_launch_s": _num(row, "kernel_time_per_launch_s") if kernels else None,
        "kernels_per_call": kernels / calls if calls else None,
        "intensity": _num(row, "intensity"), "max_blocks": _num(row, "max_blocks"),
        "flops_per_call": _num(row, "flops_per_call"), "bytes_per_call": _num(row, "bytes_per_call"),
        "roofline_per_call_s": _num(row, "roofline_per_call_s"),
        "headroom_per_step_s": headroom_s / ctx.steps if headroom_s is not None else None,
        "achieved_flops_per_s": _num(row, "achieved_flops_per_s"),
        "achieved_bytes_per_s": _num(row, "achieved_bytes_per_s"),
        "bandwidth_bytes_per_s": _num(row, "bandwidth_bytes_per_s"),
        "peak_flops_per_s": _num(row, "peak_flops_per_s"),
        "alignment_dims": dims,
        "gemm_dims": ", ".join(f"{k}={v}" for k, v in (dims or {}).items()),
        "memory_format": memory_format(name, row.get("input_shapes"), row.get("input_strides")),
        "attention_backend": attention_backend(name, row.get("kernels")),
        "time_steps": steps,
        "time_step_s": per_call_s / steps if steps and per_call_s is not None else None,
    }


# ------------------------------------------------------------
# --check-compile: does torch.compile see the model as one graph? (torch._dynamo.explain)
#
# Graph breaks split the model into several compiled graphs with eager Python between them:
# fusion stops at every break and CUDA graphs cannot span them. The report names each
# break's reason and the user's own frames, so "fix graph breaks first" points at lines.

@dataclass(frozen=True)
class GraphBreak:
    reason: str
    frames: tuple[str, ...]  # "file.py:LINE in function", innermost last

    def where(self) -> str:
        return self.frames[-1] if self.frames else "unknown location"


@dataclass(frozen=True)
class CompileReport:
    graph_count: int
    graph_break_count: int
    op_count: int
    breaks: tuple[GraphBreak, ...]  # one per distinct (reason, location)

    def summary(self, limit: int = 3) -> str:
        if not self.breaks:
            return "none"
        shown = [f"{b.reason.splitlines()[0][:160]} at {b.where()}" for b in self.breaks[:limit]]
        more = len(self.breaks) - limit
        return "; ".join(shown) + (f"; and {more} more" if more > 0 else "")


def _frames(stack: Sequence[Any], model_file: Path | None) -> tuple[str, ...]:
    picked = [f for f in stack if model_file is None or Path(f.filename).resolve() == model_file]
    picked = picked or list(stack)[-2:]
    return tuple(f"{Path(f.filename).name}:{f.lineno} in {f.name}" for f in picked)


def report_from_explain(output: Any, model_file: Path | None = None) -> CompileReport:
    """Map an ExplainOutput (graphs, graph_break_count, break_reasons, op_count) to our record."""
    seen: dict[tuple[str, tuple[str, ...]], GraphBreak] = {}
    for reason in output.break_reasons:
        brk = GraphBreak(str(reason.reason), _frames(reason.user_stack, model_file))
        seen.setdefault((brk.reason, brk.frames), brk)
    return CompileReport(graph_count=int(output.graph_count), graph_break_count=int(output.graph_break_count),
                         op_count=int(output.op_count), breaks=tuple(seen.values()))


def explain_callable(model: Callable, inputs: Sequence[Any], model_file: Path | None = None) -> CompileReport:
    import torch._dynamo

    torch._dynamo.reset()
    try:
        with torch.no_grad():
            output = torch._dynamo.explain(model)(*inputs)
    except Exception as e:  # noqa: BLE001 - Dynamo raises many types; all mean "could not trace"
        raise UserInputError(f"torch._dynamo.explain could not trace the model: {type(e).__name__}: {e}",
                             "run the model eagerly first (`advisor profile`), or drop --check-compile") from None
    finally:
        torch._dynamo.reset()
    return report_from_explain(output, model_file)


def check_compile(model_file: str | Path, entry: str | None = None, device: str = "cpu") -> CompileReport:
    from kernel_advisor.collect.loader import load_model

    # The model's own prints must not land in stdout, where --format json goes.
    with contextlib.redirect_stdout(sys.stderr):
        loaded = load_model(model_file, entry=entry, device=device, dtype="keep", seed=0)
        return explain_callable(loaded.model, loaded.inputs, Path(loaded.path).resolve())
