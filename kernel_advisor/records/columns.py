"""The column names of a run's tables (ops.csv, sequence.csv), in one place.

A name carries its scope: `_total_s` is summed over every profiled step, `_per_step_s` is that
total / steps, `_per_call_s` / `_per_call` is one call (the mean over a row's calls in ops.csv;
the occurrence itself in sequence.csv), `_per_launch_s` one kernel launch. Ratios and rates
(`share_pct`, `efficiency_frac`, `intensity`, `achieved_flops_per_s`) need no scope.
docs/architecture.md describes every column.

RENAMED_SINCE is the migration for runs written under an older run schema (records/run.py):
the schema a run declares -> per place, old name -> name now. collect/rundir.py applies it when
it loads a run, keyed by the declared version (never by which names a file happens to hold).
"""
from __future__ import annotations

from typing import Mapping

# What every reader needs in ops.csv (written since the first run), and what analyze adds,
# all in one version: a table holds all of ANALYSIS_COLUMNS or (not analysed) none.
OPS_REQUIRED = ("row_id", "name", "kind", "input_shapes", "input_dtypes", "calls", "device_time_total_s",
                "share_pct")
ANALYSIS_COLUMNS = ("modelled", "flops_per_call", "bytes_per_call", "intensity", "compute_path",
                    "peak_flops_per_s", "bandwidth_bytes_per_s", "roofline_per_call_s", "achieved_flops_per_s",
                    "achieved_bytes_per_s", "efficiency_frac", "headroom_total_s", "verdict")
SEQUENCE_REQUIRED = ("seq", "step", "name", "row_id", "input_shapes", "input_dtypes", "device_time_per_call_s")
# Columns that must hold numbers when present (a damaged cell turns the whole column into text);
# `bytes` is comms.csv's (one collective call's payload, distributed/comms.py).
NUMERIC_COLUMNS = ("row_id", "calls", "device_time_total_s", "device_time_per_step_s", "device_time_per_call_s",
                   "share_pct", "cpu_time_total_s", "kernel_count", "kernel_time_per_launch_s", "max_blocks",
                   "first_seq", "seq", "step", "start_us", "flops_per_call", "bytes_per_call", "intensity",
                   "roofline_per_call_s", "headroom_total_s", "bytes")
# What a run's reader refuses (collect/rundir.py): ±inf in any number column; a negative value
# in these, which no profile writes (headroom_total_s is not one: runs written before analyze
# clipped it at 0 hold negative headroom); NaN (a blank cell) in OPS_REQUIRED_NUMBERS, which
# every op has (an unmodelled op's analyze columns are blank by design).
OPS_NON_NEGATIVE = ("row_id", "calls", "device_time_total_s", "device_time_per_step_s", "device_time_per_call_s",
                    "share_pct", "cpu_time_total_s", "kernel_count", "kernel_time_per_launch_s", "flops_per_call",
                    "bytes_per_call", "intensity", "peak_flops_per_s", "bandwidth_bytes_per_s",
                    "roofline_per_call_s", "achieved_flops_per_s", "achieved_bytes_per_s", "efficiency_frac")
OPS_REQUIRED_NUMBERS = ("row_id", "calls", "device_time_total_s", "share_pct")
SEQUENCE_NON_NEGATIVE = ("device_time_per_call_s",)

# Places RENAMED_SINCE covers: a table's columns, the keys of each item of ops.csv's `kernels`
# cells, the keys of each item of run.json's coverage["unmodelled"].
OPS, KERNELS, SEQUENCE, UNMODELLED = "ops.csv", "ops.csv kernels", "sequence.csv", "run.json coverage.unmodelled"
RENAMED_SINCE: Mapping[int, Mapping[str, Mapping[str, str]]] = {
    1: {
        OPS: {"device_time_s": "device_time_total_s", "mean_device_time_s": "device_time_per_call_s",
              "cpu_time_s": "cpu_time_total_s", "mean_kernel_s": "kernel_time_per_launch_s",
              "flops": "flops_per_call", "bytes": "bytes_per_call", "roofline_s": "roofline_per_call_s",
              "headroom_s": "headroom_total_s"},
        KERNELS: {"time_s": "time_total_s"},
        SEQUENCE: {"device_time_s": "device_time_per_call_s"},
        UNMODELLED: {"device_time_s": "device_time_total_s"},
    },
}


def renames(declared_version: int, place: str) -> dict[str, str]:
    """Old name -> name now, for a run of `declared_version` (every step up to now, chained)."""
    out: dict[str, str] = {}
    for version in sorted(v for v in RENAMED_SINCE if v >= declared_version):
        step = RENAMED_SINCE[version].get(place, {})
        out = {old: step.get(new, new) for old, new in out.items()}
        out.update({old: new for old, new in step.items() if old not in out})
    return out


def renamed_ops_column(old: str) -> str | None:
    """What an ops.csv column of an older schema is called now (None: not one of them)."""
    for version in sorted(RENAMED_SINCE):
        if old in RENAMED_SINCE[version].get(OPS, {}):
            return renames(version, OPS)[old]
    return None


def renamed_items(items: list, renamed: Mapping[str, str]) -> list:
    """Each dict of `items` with its keys renamed (old -> new); other items as they are."""
    if not renamed:
        return items
    return [{renamed.get(k, k): v for k, v in item.items()} if isinstance(item, dict) else item
            for item in items]


def text_value(value: object) -> str:
    """A text cell as read back from CSV: "" for missing (NaN)."""
    return "" if value is None or (isinstance(value, float) and value != value) else str(value)


def flag_value(value: object) -> bool:
    """A bool cell as read back from CSV (bool, "True"/"False", NaN = not set)."""
    if isinstance(value, str):
        return value.strip().lower() in ("true", "1")
    return bool(value) and bool(value == value)  # NaN: not set
