"""Place every op on the device roofline and say what limits it.

One pure function per formula, then `classify`, which adds the analyze columns of
docs/architecture.md to an op table. The reasoning behind the verdicts and their
thresholds (data/verdict_thresholds.yaml) is in docs/methodology.md.
"""
from __future__ import annotations

import dataclasses
import json
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping

import pandas as pd

from kernel_advisor.analyze.ceilings import Ceilings, calibration_provenance, resolve_ceilings
from kernel_advisor.collect.trace import is_comm_op
from kernel_advisor.errors import UserInputError
from kernel_advisor.located_yaml import load_checked
from kernel_advisor.records.columns import ANALYSIS_COLUMNS
from kernel_advisor.records.run import RunMeta

THRESHOLDS_FILE = Path(__file__).resolve().parent.parent / "data" / "verdict_thresholds.yaml"
# The one list of verdicts; rules, tables and the report read it from here.
VERDICTS = ("compute-bound", "memory-bound", "under-occupied", "latency-bound", "sequential", "host-bound",
            "unknown")
# Recurrent layers: T time steps per layer, each waiting on the last, so below the limiter their
# time is a chain of per-step latencies, not a roof they fall short of ("sequential").
RECURRENT_OPS = frozenset({"aten::gru", "aten::lstm", "aten::rnn_tanh", "aten::rnn_relu", "aten::_cudnn_rnn",
                           "aten::_cudnn_rnn_backward", "aten::mkldnn_rnn_layer",
                           "aten::mkldnn_rnn_layer_backward"})
ANALYZE_COLUMNS = ANALYSIS_COLUMNS  # records/columns.py, the one list of ops.csv's names
NAN = float("nan")

# ---------------------------------------------------------------- formulas


def arithmetic_intensity(flops: float, bytes_: float) -> float:
    """FLOP per byte of DRAM traffic; NaN when either is unknown or nothing moves."""
    if math.isnan(flops) or math.isnan(bytes_) or bytes_ <= 0:
        return NAN
    return flops / bytes_


def ridge_point(peak_flops_per_s: float, bandwidth_bytes_per_s: float) -> float:
    """The intensity (FLOP/byte) where the memory roof meets the compute roof."""
    return peak_flops_per_s / bandwidth_bytes_per_s


def roofline_time_s(flops: float, bytes_: float, peak_flops_per_s: float,
                    bandwidth_bytes_per_s: float) -> float:
    """Least time the work can take: max(flops / peak, bytes / bandwidth).

    An unknown (NaN) term is left out, so a kernel with bytes but no FLOP count
    (Inductor's) gets the memory bound alone; both unknown -> NaN.
    """
    terms = [t for t in (flops / peak_flops_per_s, bytes_ / bandwidth_bytes_per_s)
             if not math.isnan(t)]
    return max(terms) if terms else NAN


def efficiency_frac(roofline_s: float, measured_s: float) -> float:
    """Fraction of the roofline reached: 1 = at the roof. NaN without a measured time."""
    if math.isnan(measured_s) or measured_s <= 0:
        return NAN
    return roofline_s / measured_s


def headroom_s(device_time_total_s: float, calls: int, roofline_per_call_s: float) -> float:
    """Device time over the run that the roofline says is not needed.

    NB: clipped at 0. Measured time under the roof happens when data stays in L2 across calls
    (the roof counts DRAM bytes) or when an op only viewed memory and launched nothing; neither
    is time a better kernel could save.
    """
    return max(device_time_total_s - calls * roofline_per_call_s, 0.0)


# ---------------------------------------------------------------- compute path

_TENSOR_CORE_PATHS = {
    "bfloat16": "bf16_tc", "float16": "fp16_tc",
    "float8_e4m3fn": "fp8_tc", "float8_e5m2": "fp8_tc",
    "float8_e4m3fnuz": "fp8_tc", "float8_e5m2fnuz": "fp8_tc",
}
# cuDNN convolutions follow torch.backends.cudnn.allow_tf32; everything else
# (matmul, bmm, addmm, linear, SDPA's GEMMs) follows the cuBLAS flag.
_CONV_OP = re.compile(r"convolution|conv\d+d|conv_transpose|conv_tbc|cudnn_conv", re.IGNORECASE)


def _dtype_name(dtype: Any) -> str:
    return str(dtype).removeprefix("torch.")


def tf32_allowed(settings: Mapping[str, Any], op_name: str = "") -> bool:
    """Did the run allow TF32 for this op? Missing flags take torch's defaults
    (cuBLAS off, cuDNN on)."""
    if _CONV_OP.search(op_name or ""):
        return bool(settings.get("allow_tf32_cudnn", True))
    return bool(settings.get("allow_tf32_matmul", False)) or \
        settings.get("float32_matmul_precision", "highest") in ("high", "medium")


def choose_compute_path(compute_dtype: Any, uses_tensor_cores: bool,
                        settings: Mapping[str, Any], op_name: str = "") -> str:
    """Which peak bounds this op's arithmetic: fp64, fp32, tf32, fp16_tc, bf16_tc, fp8_tc."""
    dtype = _dtype_name(compute_dtype)
    if dtype == "float64":
        return "fp64"
    if not uses_tensor_cores:
        # NB: elementwise ops and reductions run on CUDA cores; packed half2 FMA (2x fp32
        # rate) is ignored because such ops are memory-bound long before it matters.
        return "fp32"
    if dtype in _TENSOR_CORE_PATHS:
        return _TENSOR_CORE_PATHS[dtype]
    if dtype == "float32" and tf32_allowed(settings, op_name):
        return "tf32"
    return "fp32"


# ---------------------------------------------------------------- thresholds


@dataclass(frozen=True)
class VerdictThresholds:
    limiter_frac: float
    short_kernel_s: float
    short_kernel_efficiency_frac: float
    host_device_busy_frac: float
    host_cpu_to_device_ratio: float


_THRESHOLDS_SCHEMA = {
    "version": "int",
    "speed_of_light": {"limiter_frac": "pos"},
    "latency": {"short_kernel_s": "pos", "short_kernel_efficiency_frac": "pos"},
    "host": {"device_busy_frac": "pos", "cpu_to_device_ratio": "pos"},
}


def load_thresholds(path: Path | str = THRESHOLDS_FILE) -> VerdictThresholds:
    data, _ = load_checked(Path(path), _THRESHOLDS_SCHEMA)
    return VerdictThresholds(
        limiter_frac=float(data["speed_of_light"]["limiter_frac"]),
        short_kernel_s=float(data["latency"]["short_kernel_s"]),
        short_kernel_efficiency_frac=float(data["latency"]["short_kernel_efficiency_frac"]),
        host_device_busy_frac=float(data["host"]["device_busy_frac"]),
        host_cpu_to_device_ratio=float(data["host"]["cpu_to_device_ratio"]))


def is_host_bound_run(run: Mapping[str, Any], thresholds: VerdictThresholds) -> bool:
    """The device sat idle for much of each step: the host did not keep it fed."""
    busy = run.get("device_busy_frac")
    return busy is not None and not math.isnan(busy) and busy < thresholds.host_device_busy_frac


# ---------------------------------------------------------------- per-row analysis

OpCostFn = Callable[[str, list, list, list], Any]  # costs.op_cost
KernelBytesFn = Callable[[str, str], "float | None"]  # costs.inductor_kernel_bytes


def _json_list(row: Mapping[str, Any], column: str) -> list:
    value = row.get(column)
    if isinstance(value, (list, tuple)):
        return list(value)
    if not isinstance(value, str) or not value.strip():
        return []
    try:
        return json.loads(value)
    except ValueError as e:
        raise UserInputError(f"op table row '{row.get('name')}': {column} is not JSON ({e})",
                             "re-create the run with `advisor profile` or `advisor import`") from e


def _inductor_cost(row: Mapping[str, Any], kernel_bytes_fn: KernelBytesFn
                   ) -> tuple[bool, float, float, str]:
    kernel_file = row.get("kernel_file")  # absent column, "" or NaN: no source to read
    if not isinstance(kernel_file, str) or not kernel_file:
        return False, NAN, NAN, ""
    bytes_ = kernel_bytes_fn(kernel_file, str(row["name"]))
    if bytes_ is None:
        return False, NAN, NAN, ""
    # NB: Inductor kernels get bytes only; their FLOPs stay unknown (NaN), so the
    # roofline is the memory roof alone and the CUDA-core path is a placeholder.
    return True, NAN, float(bytes_), "fp32"


def _row_cost(row: Mapping[str, Any], settings: Mapping[str, Any], op_cost_fn: OpCostFn,
              kernel_bytes_fn: KernelBytesFn) -> tuple[bool, float, float, str]:
    """(modelled, flops per call, bytes per call, compute path before device fallback)."""
    name, kind = str(row["name"]), row.get("kind", "op")
    if kind == "kernel" and name.startswith("triton_"):
        return _inductor_cost(row, kernel_bytes_fn)
    if kind != "op":
        return False, NAN, NAN, ""
    cost = op_cost_fn(name, _json_list(row, "input_shapes"), _json_list(row, "input_dtypes"),
                      _json_list(row, "concrete_inputs"))
    if cost is None:
        return False, NAN, NAN, ""
    path = choose_compute_path(cost.compute_dtype, cost.uses_tensor_cores, settings, name)
    return True, float(cost.flops), float(cost.bytes), path


def _per_call(total: float, calls: float) -> float:
    return total / calls if calls and calls > 0 else NAN


def _number(row: Mapping[str, Any], key: str, default: float = 0.0) -> float:
    value = row.get(key, default)
    return default if value is None or (isinstance(value, float) and math.isnan(value)) \
        else float(value)


def _occupancy_verdict(rec: Mapping[str, Any], row: Mapping[str, Any], sm_count: int,
                       thr: VerdictThresholds) -> str:
    """"latency-bound" for short kernels, "under-occupied" for longer ones on a grid smaller
    than the SM count, "" when neither explains the shortfall."""
    # CPU rows have no kernels (kernel_time_per_launch_s = 0): the op's own time stands in.
    kernel_s = _number(row, "kernel_time_per_launch_s") or _number(row, "device_time_per_call_s")
    short = kernel_s <= thr.short_kernel_s
    if short and rec["efficiency_frac"] < thr.short_kernel_efficiency_frac:
        return "latency-bound"
    max_blocks = _number(row, "max_blocks")
    if 0 < max_blocks < sm_count:  # 0 = grid unknown
        return "latency-bound" if short else "under-occupied"
    return ""


def _verdict(rec: Mapping[str, Any], row: Mapping[str, Any], sm_count: int,
             host_bound_run: bool, thr: VerdictThresholds) -> str:
    mean_s = _number(row, "device_time_per_call_s", NAN)
    if not mean_s > 0:
        return "unknown"  # nothing ran on the device: there is no time to explain
    cpu_per_call_s = _per_call(_number(row, "cpu_time_total_s", NAN), _number(row, "calls", NAN))
    if host_bound_run and cpu_per_call_s > thr.host_cpu_to_device_ratio * mean_s:
        return "host-bound"
    if not rec["modelled"]:
        return "unknown"
    compute_frac = rec["achieved_flops_per_s"] / rec["peak_flops_per_s"]
    memory_frac = rec["achieved_bytes_per_s"] / rec["bandwidth_bytes_per_s"]
    if max(_or_minus_inf(compute_frac), _or_minus_inf(memory_frac)) >= thr.limiter_frac:
        return ("compute-bound" if _or_minus_inf(compute_frac) >= _or_minus_inf(memory_frac)
                else "memory-bound")
    if str(row.get("name")) in RECURRENT_OPS:
        return "sequential"
    if rec["roofline_per_call_s"] == 0:
        return "latency-bound"
    occupancy = _occupancy_verdict(rec, row, sm_count, thr)
    if occupancy:
        return occupancy
    # Below the limiter on both roofs, but long kernels on a full grid: name the roof
    # the op is under (its side of the ridge); the shortfall shows as headroom_total_s.
    compute_s = rec["flops_per_call"] / rec["peak_flops_per_s"]
    memory_s = rec["bytes_per_call"] / rec["bandwidth_bytes_per_s"]
    return "compute-bound" if _or_minus_inf(compute_s) > _or_minus_inf(memory_s) else "memory-bound"


def _or_minus_inf(x: float) -> float:
    return -math.inf if math.isnan(x) else x


def _analyze_row(row: Mapping[str, Any], ceilings: Ceilings, settings: Mapping[str, Any],
                 host_bound_run: bool, thr: VerdictThresholds, op_cost_fn: OpCostFn,
                 kernel_bytes_fn: KernelBytesFn) -> dict:
    modelled, flops, bytes_, path = _row_cost(row, settings, op_cost_fn, kernel_bytes_fn)
    path = ceilings.effective_path(path) if modelled else ""
    peak = ceilings.peak_flops_per_s[path] if path else NAN
    bandwidth = ceilings.bandwidth_bytes_per_s
    mean_s = _number(row, "device_time_per_call_s", NAN)
    roof_s = roofline_time_s(flops, bytes_, peak, bandwidth) if modelled else NAN
    rec = {
        "modelled": modelled, "flops_per_call": flops, "bytes_per_call": bytes_,
        "intensity": arithmetic_intensity(flops, bytes_), "compute_path": path,
        "peak_flops_per_s": peak, "bandwidth_bytes_per_s": bandwidth, "roofline_per_call_s": roof_s,
        "achieved_flops_per_s": flops / mean_s if mean_s > 0 else NAN,
        "achieved_bytes_per_s": bytes_ / mean_s if mean_s > 0 else NAN,
        "efficiency_frac": efficiency_frac(roof_s, mean_s),
        "headroom_total_s": headroom_s(_number(row, "device_time_total_s", NAN), _number(row, "calls", NAN),
                                       roof_s),
    }
    rec["verdict"] = _verdict(rec, row, ceilings.sm_count, host_bound_run, thr)
    return rec


def classify(ops: pd.DataFrame, ceilings: Ceilings, run: Mapping[str, Any],
             thresholds: VerdictThresholds | None = None, op_cost_fn: OpCostFn | None = None,
             kernel_bytes_fn: KernelBytesFn | None = None) -> pd.DataFrame:
    """A copy of `ops` with the analyze columns (docs/architecture.md) added.

    `op_cost_fn` / `kernel_bytes_fn` default to analyze.costs; tests pass their own.
    """
    if op_cost_fn is None or kernel_bytes_fn is None:
        from kernel_advisor.analyze import costs

        op_cost_fn = op_cost_fn or costs.op_cost
        kernel_bytes_fn = kernel_bytes_fn or costs.inductor_kernel_bytes
    thr = thresholds or load_thresholds()
    settings = run.get("settings") or {}
    host_bound_run = is_host_bound_run(run, thr)
    records = [_analyze_row(row, ceilings, settings, host_bound_run, thr, op_cost_fn,
                            kernel_bytes_fn) for row in ops.to_dict("records")]
    added = pd.DataFrame.from_records(records, index=ops.index, columns=list(ANALYZE_COLUMNS))
    out = ops.drop(columns=[c for c in ANALYZE_COLUMNS if c in ops.columns])
    for column in ANALYZE_COLUMNS:
        out[column] = added[column]
    out["modelled"] = out["modelled"].astype(bool)
    float_columns = [c for c in ANALYZE_COLUMNS if c not in ("modelled", "compute_path", "verdict")]
    out[float_columns] = out[float_columns].astype(float)
    return out


def coverage(ops: pd.DataFrame) -> dict:
    """Share of device time with a cost model, and the unmodelled ops by time.

    Collectives (c10d ops, NCCL and gloo ranges) are modelled on the interconnect roof from
    their message sizes (comms.csv, the Communication table), not on the HBM roofline: their
    time counts as modelled and is also reported apart as `communication_time_pct`.
    """
    total_s = float(ops["device_time_total_s"].sum())
    comm = ops["name"].astype(str).map(is_comm_op).astype(bool)
    modelled = ops["modelled"].astype(bool) | comm
    modelled_s = float(ops.loc[modelled, "device_time_total_s"].sum())
    comm_s = float(ops.loc[comm, "device_time_total_s"].sum())
    missing = ops.loc[~modelled & (ops["device_time_total_s"] > 0)]
    by_name = missing.groupby("name")["device_time_total_s"].sum().reset_index()
    by_name = by_name.sort_values(["device_time_total_s", "name"], ascending=[False, True])
    return {
        # no device time at all leaves nothing unexplained
        "modelled_time_pct": 100.0 * modelled_s / total_s if total_s > 0 else 100.0,
        "communication_time_pct": 100.0 * comm_s / total_s if total_s > 0 else 0.0,
        "unmodelled": [{"name": str(n), "device_time_total_s": float(t)}
                       for n, t in zip(by_name["name"], by_name["device_time_total_s"])],
    }


# ------------------------------------------------------------
# Analyze a freshly attributed op table: costs, ceilings, roofline verdicts, coverage.

def analyze_ops(ops: pd.DataFrame, meta: RunMeta) -> tuple[pd.DataFrame, dict, dict]:
    """(ops with analyze columns, ceilings as recorded in run.json, coverage)."""
    device = RunMeta.of(meta).device
    ceilings = resolve_ceilings(device["name"], device.get("driver", ""), device_type=device["type"])
    analyzed = classify(ops, ceilings, meta)
    recorded = dataclasses.asdict(ceilings)
    if "measured" in ceilings.origins.values():
        # When and how noisily the cached figures were measured travels with the run, so every
        # reader of it (profile's summary, the report) can say so.
        recorded["calibration"] = calibration_provenance(device["name"], device.get("driver", ""))
    return analyzed, recorded, coverage(analyzed)
