"""Message templates: `str.format_map` over a fixed table of display fields, never eval.

A template may name only the fields below (`{share_pct:.1f}`), with no attribute or index
access, so a rules file can neither reach Python objects nor run code. The table is the
single place where SI evidence becomes display units (ms, µs, GB/s, TFLOP/s, MB, %).
"""
from __future__ import annotations

import math
import re
import string
from typing import Any, Mapping

# display field -> (evidence key, scale); scale None marks a text field
_RUN_FIELDS = {
    "device_name": ("device_name", None), "device_type": ("device_type", None), "mode": ("mode", None),
    "model_file": ("model_file", None), "step_ms": ("step_s", 1e3),
    "kernels_per_step": ("kernels_per_step", 1.0),
    "run_kernel_time_per_launch_us": ("run_kernel_time_per_launch_s", 1e6),
    "device_busy_pct": ("device_busy_frac", 1e2), "host_gap_ms": ("host_gap_per_step_s", 1e3),
    "host_gap_pct": ("host_gap_frac", 1e2), "graph_breaks": ("graph_breaks", 1.0),
    "graph_break_reasons": ("graph_break_reasons", None),
    "gain_ms": ("gain_per_step_s", 1e3), "gain_pct": ("gain_pct", 1.0),
    "kernel_id": ("kernel_id", None), "kernel_title": ("kernel_title", None),
    "try_kernel_command": ("try_kernel_command", None),
    # distributed runs (docs/distributed.md)
    "world_size": ("world_size", 1.0), "straggler_ratio": ("straggler_ratio", 1.0),
    "exposed_comm_ms": ("exposed_comm_s", 1e3), "exposed_comm_pct": ("exposed_comm_pct", 1.0),
    "max_comm_wait_ms": ("max_comm_wait_s", 1e3), "max_comm_wait_pct": ("max_comm_wait_pct", 1.0),
    "waited_for_rank": ("waited_for_rank", None), "allreduce_count": ("allreduce_count", 1.0),
    "mean_allreduce_mb": ("mean_allreduce_bytes", 1e-6),
    "busbw_pct_of_ceiling": ("busbw_frac_of_ceiling", 1e2), "overlap_pct": ("overlap_frac", 1e2),
    "allgather_overlap_pct": ("allgather_overlap_frac", 1e2),
}
_SUBJECT_FIELDS = {
    "verdict": ("verdict", None), "dtype": ("dtype", None), "region": ("region", None),
    "input_shapes": ("input_shapes", None), "share_pct": ("share_pct", 1.0),
    "efficiency_pct": ("efficiency_frac", 1e2), "time_per_step_ms": ("time_per_step_s", 1e3),
    "bandwidth_gbps": ("bandwidth_bytes_per_s", 1e-9),
}
_OP_FIELDS = {
    "name": ("name", None), "kind": ("kind", None), "compute_path": ("compute_path", None),
    "gemm_dims": ("gemm_dims", None), "memory_format": ("memory_format", None),
    "calls_per_step": ("calls_per_step", 1.0), "kernel_time_per_launch_us": ("kernel_time_per_launch_s", 1e6),
    "kernels_per_call": ("kernels_per_call", 1.0), "achieved_gbps": ("achieved_bytes_per_s", 1e-9),
    "achieved_tflops": ("achieved_flops_per_s", 1e-12), "peak_tflops": ("peak_flops_per_s", 1e-12),
    "headroom_ms": ("headroom_per_step_s", 1e3),
    "cpu_time_per_call_us": ("cpu_time_per_call_s", 1e6),
    "device_time_per_call_us": ("device_time_per_call_s", 1e6),
    "attention_backend": ("attention_backend", None),
    "time_steps": ("time_steps", 1.0), "time_step_us": ("time_step_s", 1e6),
}
_PATTERN_FIELDS = {
    "pattern": ("pattern", None), "variant": ("variant", None), "names": ("names", None),
    "length": ("length", 1.0), "occurrences_per_step": ("occurrences_per_step", 1.0),
    "ops_per_step": ("ops_per_step", 1.0), "intermediate_mb": ("intermediate_bytes_per_step", 1e-6),
}
MESSAGE_FIELDS: Mapping[str, Mapping[str, tuple[str, float | None]]] = {
    "op": {**_RUN_FIELDS, **_SUBJECT_FIELDS, **_OP_FIELDS},
    "pattern": {**_RUN_FIELDS, **_SUBJECT_FIELDS, **_PATTERN_FIELDS},
    "run": dict(_RUN_FIELDS),
}


class TemplateError(ValueError):
    pass


def template_fields(template: str) -> list[tuple[str, str]]:
    """(field, format spec) per placeholder; TemplateError for syntax, access paths, conversions."""
    try:
        parsed = list(string.Formatter().parse(template))
    except ValueError as e:
        raise TemplateError(f"message template: {e}") from None
    out = []
    for _, field, spec, conversion in parsed:
        if field is None:
            continue
        if not field.isidentifier():
            raise TemplateError(f"message field '{{{field}}}' must be a plain name (no '.', '[', or position)")
        if conversion:
            raise TemplateError(f"message field '{{{field}!{conversion}}}': conversions are not allowed")
        if "{" in (spec or ""):
            raise TemplateError(f"message field '{{{field}}}': nested fields in a format spec are not allowed")
        _check_spec_size(field, spec or "")
        out.append((field, spec or ""))
    return out


MAX_SPEC_NUMBER = 64  # width and precision: a message is a line, and `{x:>999999999}` a 1 GB string
MAX_MESSAGE_CHARS = 2000  # a filled message longer than this is cut (evidence text can be long)


def _check_spec_size(field: str, spec: str) -> None:
    numbers = spec[2:] if spec[1:2] in ("<", ">", "=", "^") else spec  # the fill character may be a digit
    for number in re.findall(r"\d+", numbers):
        if len(number) > 3 or int(number) > MAX_SPEC_NUMBER:
            raise TemplateError(f"message field '{{{field}:{spec}}}': width and precision are at most "
                                f"{MAX_SPEC_NUMBER}")


# Display fields named after a column whose name now carries its scope (records/columns.py).
RENAMED_FIELDS = {"mean_kernel_us": "kernel_time_per_launch_us",
                  "run_mean_kernel_us": "run_kernel_time_per_launch_us"}


def validate_template(template: str, scope: str) -> None:
    fields = MESSAGE_FIELDS[scope]
    for name, spec in template_fields(template):
        if name in RENAMED_FIELDS:
            raise TemplateError(f"message field '{{{name}}}' is now '{{{RENAMED_FIELDS[name]}}}'")
        if name not in fields:
            raise TemplateError(f"message field '{{{name}}}' is not available in scope '{scope}'; "
                                f"available: {', '.join(sorted(fields))}")
        sample: Any = 1.0 if fields[name][1] is not None else "text"
        try:
            format(sample, spec)
        except ValueError as e:
            raise TemplateError(f"message field '{{{name}:{spec}}}': {e}") from None


def display_values(evidence: Mapping[str, Any], scope: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, (key, scale) in MESSAGE_FIELDS[scope].items():
        value = evidence.get(key)
        if scale is None:
            out[name] = "unknown" if value is None else str(value)
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            out[name] = float(value) * scale
        else:
            out[name] = math.nan  # formats as "nan" under any numeric spec
    return out


def fill_message(template: str, evidence: Mapping[str, Any], scope: str) -> str:
    template_fields(template)  # the size bound again: a template may not have come through a rules file
    message = template.format_map(display_values(evidence, scope))
    return message if len(message) <= MAX_MESSAGE_CHARS else message[:MAX_MESSAGE_CHARS - 1] + "…"


def ms_text(seconds: float) -> str:
    """A time in a gain's basis or a hotspot's reason: "1.23 ms"."""
    return f"{seconds * 1e3:.3g} ms"
