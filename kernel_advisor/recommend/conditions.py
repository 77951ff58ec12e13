"""Rule conditions as data: each key has a parser (validation at load) and a matcher.

Nothing here evaluates user text as code. A condition key names one evidence field and
one comparison (a glob list, a set of choices, a numeric range, ...); the engine builds the
evidence, this module compares. Every comparison returns a Check that records the
threshold and the actual value, so a recommendation can show why it fired and a hotspot
can show why a rule did not.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from fnmatch import fnmatchcase
from typing import Any, Callable, Mapping

from kernel_advisor.analyze.ceilings import PATHS
from kernel_advisor.analyze.roofline import VERDICTS
from kernel_advisor.records.columns import renamed_ops_column

SCOPES = ("op", "pattern", "run")
KINDS = ("op", "kernel", "memcpy", "memset")
COMPUTE_PATHS = PATHS  # the ceilings' paths (analyze/ceilings.py), one list
DEVICE_TYPES = ("cuda", "cpu")
MEMORY_FORMATS = ("contiguous", "channels_last", "other")
ATTENTION_BACKENDS = ("flash", "efficient", "cudnn", "math", "unknown")  # evidence.attention_backend
# The patterns recommend/patterns.py detects: it names each instance from this list.
PATTERNS = ("naive-attention", "rmsnorm-chain", "residual-rmsnorm", "elementwise-chain", "swiglu",
            "unfused-optimizer", "custom-op-boundary")
# run.json "settings" keys a rule may test, with the values each may take (None: any bool).
SETTINGS: Mapping[str, tuple[str, ...] | None] = {
    "allow_tf32_matmul": None, "allow_tf32_cudnn": None, "cudnn_benchmark": None,
    "float32_matmul_precision": ("highest", "high", "medium"),
    "mode": ("inference", "train"),
    "dtype": ("keep", "float32", "bfloat16", "float16"),
}


class ConditionValueError(ValueError):
    """A condition value of the wrong type or outside its vocabulary (message names the key)."""


@dataclass(frozen=True)
class Range:
    """min inclusive, max exclusive: `share_pct: {max: 2}` reads "under 2 %"."""

    min: float | None = None
    max: float | None = None

    def contains(self, x: float) -> bool:
        if self.min is not None and not x >= self.min:
            return False
        return self.max is None or x < self.max

    def describe(self) -> str:
        if self.min is not None and self.max is not None:
            return f">= {self.min:g} and < {self.max:g}"
        return f">= {self.min:g}" if self.min is not None else f"< {self.max:g}"


@dataclass(frozen=True)
class Check:
    """One condition against one subject: what it wanted, what it found, whether it held."""

    key: str
    expected: str
    actual: Any
    ok: bool


@dataclass(frozen=True)
class CondSpec:
    parse: Callable[[str, Any], Any]
    match: Callable[[Any, Any], bool]
    describe: Callable[[Any], str]
    scopes: tuple[str, ...]
    evidence_key: str


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _str_list(key: str, value: Any, vocabulary: tuple[str, ...] | None = None) -> tuple[str, ...]:
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, list) or not items or not all(isinstance(i, str) for i in items):
        raise ConditionValueError(f"'{key}' must be a string or a non-empty list of strings")
    if vocabulary is not None:
        bad = [i for i in items if i not in vocabulary]
        if bad:
            raise ConditionValueError(f"'{key}': unknown value(s) {bad}; expected one of {list(vocabulary)}")
    return tuple(items)


def _parse_range(key: str, value: Any) -> Range:
    if not isinstance(value, dict) or not value:
        raise ConditionValueError(f"'{key}' must be a mapping like {{min: 0.1, max: 0.6}}")
    unknown = sorted(set(value) - {"min", "max"})
    if unknown:
        raise ConditionValueError(f"'{key}': unknown range key(s) {unknown}; use min and/or max")
    if not all(_is_number(v) for v in value.values()):
        raise ConditionValueError(f"'{key}': min and max must be numbers")
    lo, hi = value.get("min"), value.get("max")
    if lo is not None and hi is not None and not lo < hi:
        raise ConditionValueError(f"'{key}': min ({lo}) must be below max ({hi})")
    return Range(lo, hi)


def _parse_capability(key: str, value: Any) -> Range:
    if not isinstance(value, dict) or not value or set(value) - {"min", "max"}:
        raise ConditionValueError(f"'{key}' must be a mapping like {{min: [8, 0]}}")
    out = {}
    for bound, cap in value.items():
        ok = isinstance(cap, list) and len(cap) == 2 and all(isinstance(c, int) for c in cap)
        if not ok:
            raise ConditionValueError(f"'{key}.{bound}' must be [major, minor], e.g. [8, 0]")
        out[bound] = cap[0] + cap[1] / 10  # NB: minor < 10 on every CUDA capability so far
    return _parse_range(key, out)


def _parse_settings(key: str, value: Any) -> Mapping[str, tuple]:
    if not isinstance(value, dict) or not value:
        raise ConditionValueError(f"'{key}' must be a mapping like {{allow_tf32_matmul: false}}")
    parsed = {}
    for name, want in value.items():
        if name not in SETTINGS:
            raise ConditionValueError(f"'{key}': unknown setting '{name}'; known: {list(SETTINGS)}")
        vocabulary = SETTINGS[name]
        if vocabulary is None:
            if not isinstance(want, bool):
                raise ConditionValueError(f"'{key}.{name}' must be true or false")
            parsed[name] = (want,)
        else:
            parsed[name] = _str_list(f"{key}.{name}", want, vocabulary)
    return parsed


def _parse_multiple(key: str, value: Any) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 2:
        raise ConditionValueError(f"'{key}' must be an integer >= 2 (e.g. 8)")
    return value


def _glob_match(globs: tuple[str, ...], name: Any) -> bool:
    return isinstance(name, str) and any(fnmatchcase(name, g) for g in globs)


def _range_match(rng: Range, actual: Any) -> bool:
    return _is_number(actual) and not math.isnan(actual) and rng.contains(float(actual))


def _capability_match(rng: Range, actual: Any) -> bool:
    return isinstance(actual, (list, tuple)) and len(actual) == 2 and rng.contains(actual[0] + actual[1] / 10)


def _settings_match(want: Mapping[str, tuple], actual: Any) -> bool:
    return isinstance(actual, Mapping) and all(actual.get(k) in v for k, v in want.items())


def _misaligned(multiple: int, dims: Any) -> bool:
    return isinstance(dims, Mapping) and any(d % multiple for d in dims.values())


def _choices(vocabulary: tuple[str, ...] | None, scopes: tuple[str, ...], key: str) -> CondSpec:
    return CondSpec(lambda k, v: _str_list(k, v, vocabulary), lambda want, a: a in want,
                    lambda want: "one of " + ", ".join(want), scopes, key)


def _range(scopes: tuple[str, ...], key: str) -> CondSpec:
    return CondSpec(_parse_range, _range_match, Range.describe, scopes, key)


_OP, _PAT, _ALL = ("op",), ("pattern",), SCOPES
_SUBJECT = ("op", "pattern")
CONDITIONS: Mapping[str, CondSpec] = {
    "ops": CondSpec(_str_list, _glob_match, lambda g: "matches " + ", ".join(g), _OP, "name"),
    "not_ops": CondSpec(_str_list, lambda g, a: not _glob_match(g, a),
                        lambda g: "matches none of " + ", ".join(g), _OP, "name"),
    "kind": _choices(KINDS, _OP, "kind"),
    "verdict": _choices(VERDICTS, _SUBJECT, "verdict"),
    "dtypes": _choices(None, _SUBJECT, "dtype"),
    "compute_path": _choices(COMPUTE_PATHS, _OP, "compute_path"),
    "memory_format": _choices(MEMORY_FORMATS, _OP, "memory_format"),
    "attention_backend": _choices(ATTENTION_BACKENDS, _OP, "attention_backend"),
    "pattern": _choices(PATTERNS, _PAT, "pattern"),
    "device_type": _choices(DEVICE_TYPES, _ALL, "device_type"),
    "capability": CondSpec(_parse_capability, _capability_match,
                           lambda r: "capability " + r.describe(), _ALL, "capability"),
    "settings": CondSpec(_parse_settings, _settings_match,
                         lambda w: ", ".join(f"{k} in {list(v)}" for k, v in w.items()), _ALL, "settings"),
    "dims_not_multiple_of": CondSpec(_parse_multiple, _misaligned,
                                     lambda m: f"a GEMM/conv dim not a multiple of {m}", _OP, "alignment_dims"),
    **{k: _range(_SUBJECT, k) for k in (
        "share_pct", "efficiency_frac", "time_per_step_s", "occurrences_per_step")},
    **{k: _range(_OP, k) for k in (
        "calls_per_step", "kernel_time_per_launch_s", "kernels_per_call", "intensity", "max_blocks")},
    **{k: _range(_PAT, k) for k in ("length", "ops_per_step", "intermediate_bytes_per_step")},
    **{k: _range(("run",), k) for k in (
        "kernels_per_step", "run_kernel_time_per_launch_s", "device_busy_frac", "host_gap_frac",
        # distributed runs (docs/distributed.md); the evidence is absent for one process
        "world_size", "straggler_ratio", "exposed_comm_pct", "max_comm_wait_pct", "overlap_frac",
        "allreduce_count", "mean_allreduce_bytes", "busbw_frac_of_ceiling", "allgather_overlap_frac")},
    "graph_breaks": _range(_ALL, "graph_breaks"),
    "nchw_norm_share_pct": _range(_ALL, "nchw_norm_share_pct"),
}


# Conditions named after a column whose name now carries its scope (records/columns.py): a
# rule naming the old one is told the new name, never left silently unmatched.
RENAMED_CONDITIONS = {"mean_kernel_s": "kernel_time_per_launch_s",
                      "run_mean_kernel_s": "run_kernel_time_per_launch_s"}


def parse_condition(key: str, value: Any, scope: str) -> Any:
    """The parsed value of one condition; ConditionValueError names what is wrong."""
    spec = CONDITIONS.get(key)
    if spec is None:
        raise ConditionValueError(_unknown_condition(key))
    if scope not in spec.scopes:
        raise ConditionValueError(f"condition '{key}' does not apply to scope '{scope}' "
                                  f"(only {', '.join(spec.scopes)})")
    return spec.parse(key, value)


def _unknown_condition(key: str) -> str:
    new = RENAMED_CONDITIONS.get(key) or renamed_ops_column(key)
    if new in CONDITIONS:
        return f"'{key}' is now '{new}'"
    renamed = f" ('{key}' is now '{new}', which is an ops.csv column, not a condition)" if new else ""
    return f"unknown condition '{key}'{renamed}; known: {sorted(CONDITIONS)}"


def check(key: str, parsed: Any, evidence: Mapping[str, Any]) -> Check:
    spec = CONDITIONS[key]
    actual = evidence.get(spec.evidence_key)
    ok = actual is not None and bool(spec.match(parsed, actual))
    if key == "settings" and isinstance(actual, Mapping):
        actual = {k: actual.get(k) for k in parsed}  # only the settings this rule asked about
    return Check(key=key, expected=spec.describe(parsed), actual=actual, ok=ok)


def evaluate(conditions: Mapping[str, Any], evidence: Mapping[str, Any]) -> tuple[Check, ...]:
    """All checks, in the rule's order; the rule fires when every one holds."""
    return tuple(check(key, parsed, evidence) for key, parsed in conditions.items())
