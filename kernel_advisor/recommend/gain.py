"""Gain models: how much device (or host) time per step a recommendation could save.

Every estimate says how it was computed (`basis`) and which op rows the saving comes
from, so the engine can take the per-row maximum across recommendations (Amdahl: two
fixes of the same op cannot both remove its time) and total the union.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Mapping

import pandas as pd

from kernel_advisor.dtypes import dtype_name
from kernel_advisor.recommend import kernel_gain
from kernel_advisor.recommend.evidence import RunContext
from kernel_advisor.recommend.kernel_gain import kernel_point_lookup, measured_saving, row_record
from kernel_advisor.recommend.messages import ms_text
from kernel_advisor.recommend.schema import GainSpec
from kernel_advisor.recommend.subjects import Subject
from reference_kernels.routes import host_bound

MEASURED_KERNEL = "measured-kernel"  # a kernel rung's saving from the kernel's own sweep


@dataclass(frozen=True, order=True)
class Bucket:
    """A slice of the step a saving comes out of: one op row's time, the device's idle gaps
    between kernels, or communication no compute hides. The Amdahl union caps each at its time."""

    kind: str  # "row", "host-gaps" or "exposed-comm"
    row_id: int = -1  # the op row, for kind "row"

    @property
    def is_row(self) -> bool:
        return self.kind == "row"

    def key(self) -> str:
        """Its key in recommendations.json's row_gain_per_step_s: the row id, or the bucket's name."""
        return str(self.row_id) if self.is_row else self.kind


def row_bucket(row_id: int) -> Bucket:
    return Bucket("row", int(row_id))


def bucket_keys(savings: Mapping[Bucket, float]) -> dict[str, float]:
    """Savings keyed as recommendations.json keys them (Bucket.key), in their order."""
    return {b.key(): s for b, s in savings.items()}


HOST_GAPS = Bucket("host-gaps")  # device idle time between kernels, what CUDA graphs remove
EXPOSED_COMM = Bucket("exposed-comm")  # communication no compute hides (distributed runs)


@dataclass(frozen=True)
class GainEstimate:
    saving_per_step_s: float | None  # None: this run lacks what the model needs
    row_saving_per_step_s: Mapping[Bucket, float]
    basis: str
    measured: bool = False  # read off measurements of the fix itself: no fitted scale applies


def _unknown(why: str) -> GainEstimate:
    return GainEstimate(None, {}, f"not estimated: {why}")



def _apportion(subject: Subject, saving_s: float) -> dict[Bucket, float]:
    """Split a saving over the rows a subject touches, in proportion to their time."""
    total = sum(subject.row_time_per_step_s.values())
    if total <= 0 or saving_s <= 0:
        return {}
    return {row_bucket(r): saving_s * t / total for r, t in subject.row_time_per_step_s.items() if t > 0}


def _none(spec: GainSpec, subject: Subject, ctx: RunContext, ops: pd.DataFrame) -> GainEstimate:
    return GainEstimate(0.0, {}, "no time saving claimed")


def _roofline(spec: GainSpec, subject: Subject, ctx: RunContext, ops: pd.DataFrame) -> GainEstimate:
    target = spec.target_efficiency_frac
    rooflines = (dict(zip(ops["row_id"].astype(int), ops["roofline_per_call_s"]))
                 if "roofline_per_call_s" in ops else {})
    rows: dict[Bucket, float] = {}
    floor_total = 0.0
    for row_id, time_s in subject.row_time_per_step_s.items():
        roof = rooflines.get(row_id)
        if roof is None or not math.isfinite(float(roof)):
            return _unknown(f"row {row_id} has no roofline (unmodelled op)")
        # NB: a replacement kernel is assumed to reach `target` of the roofline, no more.
        floor_s = subject.row_calls_per_step[row_id] * float(roof) / target
        floor_total += floor_s
        if time_s > floor_s:
            rows[row_bucket(row_id)] = time_s - floor_s
    saving = sum(rows.values())
    spent = sum(subject.row_time_per_step_s.values())
    return GainEstimate(saving, rows, f"{ms_text(spent)} measured − {ms_text(floor_total)} at "
                                      f"{target:.0%} of the roofline")


def _fusion_bytes(spec: GainSpec, subject: Subject, ctx: RunContext, ops: pd.DataFrame) -> GainEstimate:
    ev = subject.evidence
    removed, bw = ev.get("intermediate_bytes_per_step") or 0.0, ev.get("bandwidth_bytes_per_s")
    if not bw:
        return _unknown("no memory bandwidth ceiling on these rows (unmodelled ops)")
    spent = ev["time_per_step_s"]
    saving = removed / bw
    basis = f"{removed / 1e6:.3g} MB of intermediates written and re-read / {bw / 1e9:.0f} GB/s"
    min_bytes = ev.get("min_bytes_per_step")
    if min_bytes is not None:
        # NB: the fused kernel still moves what the chain needs minus what it no longer writes.
        cap = spent - max(0.0, min_bytes - removed) / bw
        if cap < saving:
            saving, basis = cap, basis + f", capped at {ms_text(spent)} − fused roofline"
    saving = max(0.0, min(saving, spent))
    return GainEstimate(saving, _apportion(subject, saving), basis)


def fused_time_s(fused_bytes: float, flops: float, bandwidth_bytes_per_s: float,
                 peak_flops_per_s: float | None, target_efficiency_frac: float) -> float:
    """Time of the one fused kernel that replaces a chain: its own roofline over a target efficiency.

    NB: the fused kernel moves the chain's minimum bytes minus the intermediates it no longer
    writes and re-reads, and does the chain's FLOPs at the fastest path among its rows (the
    tensor-core peak for attention's matmuls). A causal mask halves attention's real work; the
    full count keeps this estimate on the safe side.
    """
    memory_s = max(fused_bytes, 0.0) / bandwidth_bytes_per_s
    compute_s = flops / peak_flops_per_s if peak_flops_per_s else 0.0
    return max(memory_s, compute_s) / target_efficiency_frac


def _fused_roofline(spec: GainSpec, subject: Subject, ctx: RunContext, ops: pd.DataFrame) -> GainEstimate:
    ev = subject.evidence
    bw, min_bytes = ev.get("bandwidth_bytes_per_s"), ev.get("min_bytes_per_step")
    if not bw or min_bytes is None:
        return _unknown("no byte model or bandwidth ceiling on these rows (unmodelled ops)")
    target = spec.target_efficiency_frac
    removed = ev.get("intermediate_bytes_per_step") or 0.0
    fused_s = fused_time_s(min_bytes - removed, ev.get("flops_per_step") or 0.0, bw,
                           ev.get("peak_flops_per_s"), target)
    spent = ev["time_per_step_s"]
    saving = max(0.0, spent - fused_s)
    basis = f"{ms_text(spent)} measured − {ms_text(fused_s)} for one fused kernel at {target:.0%} of its roofline"
    return GainEstimate(saving, _apportion(subject, saving), basis)


def _fraction(spec: GainSpec, subject: Subject, ctx: RunContext, ops: pd.DataFrame) -> GainEstimate:
    spent = sum(subject.row_time_per_step_s.values())
    saving = spec.value * spent
    return GainEstimate(saving, _apportion(subject, saving), f"{spec.value:.0%} of {ms_text(spent)}")


def target_peak_flops_per_s(ctx: RunContext, ops: pd.DataFrame, path: str) -> float | None:
    """The ceiling of compute path `path`: run.json ceilings, else a row that ran on that path."""
    peaks = ctx.ceilings.get("peak_flops_per_s")
    if isinstance(peaks, Mapping) and isinstance(peaks.get(path), (int, float)):
        return float(peaks[path])
    if "compute_path" in ops and "peak_flops_per_s" in ops:
        on_path = ops.loc[ops["compute_path"] == path, "peak_flops_per_s"].dropna()
        if len(on_path):
            return float(on_path.iloc[0])
    return None


def _precision(spec: GainSpec, subject: Subject, ctx: RunContext, ops: pd.DataFrame) -> GainEstimate:
    ev, path = subject.evidence, spec.target_path
    need = ("flops_per_call", "bytes_per_call", "peak_flops_per_s", "bandwidth_bytes_per_s",
            "device_time_per_call_s")
    missing = [k for k in need if not ev.get(k)]
    if missing:
        return _unknown(f"missing {', '.join(missing)} (unmodelled op?)")
    peak_new = target_peak_flops_per_s(ctx, ops, path)
    if peak_new is None:
        return _unknown(f"no {path} ceiling in run.json")
    memory_s = ev["bytes_per_call"] / ev["bandwidth_bytes_per_s"]
    old_roof_s = max(ev["flops_per_call"] / ev["peak_flops_per_s"], memory_s)
    new_roof_s = max(ev["flops_per_call"] / peak_new, memory_s)
    # NB: the kernel keeps its efficiency against the roofline on the new path; only the
    # compute roof moves, so a memory-bound op gains nothing.
    new_mean_s = ev["device_time_per_call_s"] * new_roof_s / old_roof_s
    saving = max(0.0, ev["device_time_per_call_s"] - new_mean_s) * ev["calls_per_step"]
    basis = (f"roofline {old_roof_s * 1e6:.3g} → {new_roof_s * 1e6:.3g} µs per call "
             f"({ev.get('compute_path')} {ev['peak_flops_per_s'] / 1e12:.3g} → {path} {peak_new / 1e12:.3g} TFLOP/s), "
             "same efficiency")
    return GainEstimate(saving, {row_bucket(ev["row_id"]): saving} if saving > 0 else {}, basis)


def _tf32(spec: GainSpec, subject: Subject, ctx: RunContext, ops: pd.DataFrame) -> GainEstimate:
    return _precision(GainSpec(model="precision", target_path="tf32"), subject, ctx, ops)


def _launch_overhead(spec: GainSpec, subject: Subject, ctx: RunContext, ops: pd.DataFrame) -> GainEstimate:
    gap = subject.evidence.get("host_gap_per_step_s") or 0.0
    # NB: upper bound: graph replay still costs a few µs per step and kernels keep their time.
    return GainEstimate(gap, {HOST_GAPS: gap} if gap > 0 else {},
                        f"device idle {ms_text(gap)} per step ({ms_text(ctx.step_s)} step − "
                        f"{ms_text(ctx.device_busy_per_step_s)} busy)")


def _exposed_comm(spec: GainSpec, subject: Subject, ctx: RunContext, ops: pd.DataFrame) -> GainEstimate:
    exposed = subject.evidence.get("exposed_comm_s")
    if exposed is None:
        return _unknown("run.json has no distributed exposed_comm_s")
    saving = spec.value * exposed
    return GainEstimate(saving, {EXPOSED_COMM: saving} if saving > 0 else {},
                        f"{spec.value:.0%} of {ms_text(exposed)} exposed communication per step")


def _measured_backend(spec: GainSpec, subject: Subject, ctx: RunContext, ops: pd.DataFrame) -> GainEstimate:
    """The target backend's measured time over the current one's (recommend/kernel_gain.py), per row."""
    current, target = subject.evidence.get("attention_backend"), spec.backend
    dtype = dtype_name(str(subject.evidence.get("dtype") or ""))
    pass_ = "fwd+bwd" if ctx.mode == "train" else "fwd"
    table = kernel_gain.read_backend_table()
    rows, whys = {}, []
    for row_id, time_s in subject.row_time_per_step_s.items():
        shape = kernel_gain.attention_shape(row_record(ops, row_id).get("input_shapes"))
        r = kernel_gain.backend_ratio(table, ctx.device_name, dtype, pass_, shape, current, target) if shape else None
        if r is None:
            return _unknown(f"no measured {target} against {current} attention on {ctx.device_name} ({dtype} {pass_}): "
                            "benchmarks/bench_sdpa_backends.py measures the table")
        rows[row_bucket(row_id)] = max(time_s * (1.0 - r.ratio), 0.0)
        whys.append(kernel_gain.describe(r, current, target, ctx.device_name, dtype, pass_))
    return GainEstimate(sum(rows.values()), {k: v for k, v in rows.items() if v > 0},
                        "; ".join(dict.fromkeys(whys)), measured=True)


MODELS: Mapping[str, Callable[[GainSpec, Subject, RunContext, pd.DataFrame], GainEstimate]] = {
    "none": _none, "roofline": _roofline, "fusion-bytes": _fusion_bytes, "fused-roofline": _fused_roofline, "fraction": _fraction,
    "tf32": _tf32, "precision": _precision, "launch-overhead": _launch_overhead,
    "exposed-comm": _exposed_comm, "measured-backend": _measured_backend,
}


def _measured_kernel(spec: GainSpec, subject: Subject, ctx: RunContext, ops: pd.DataFrame,
                     kernel_id: str | None) -> GainEstimate:
    """The kernel's own sweep at the op's shape (recommend/kernel_gain.py); else the roofline."""
    lookup = kernel_point_lookup(kernel_id) if kernel_id and subject.scope == "op" else None
    savings, whys = {}, []
    for row_id, time_s in subject.row_time_per_step_s.items():
        row = row_record(ops, row_id) if lookup else None
        got = measured_saving(str(row.get("name", "")), row.get("input_shapes"),
                              str(subject.evidence.get("dtype") or ""), ctx.mode == "train",
                              time_s, lookup, _host_bound(ctx)) if row else None
        if got is None:
            roof = _roofline(spec, subject, ctx, ops)
            why = f"the sweep did not measure {kernel_id} here" if kernel_id else "no kernel"
            return GainEstimate(roof.saving_per_step_s, roof.row_saving_per_step_s, f"{roof.basis} ({why})")
        savings[row_bucket(row_id)] = got[0]
        whys.append(got[1])
    return GainEstimate(sum(savings.values()), {r: v for r, v in savings.items() if v > 0},
                        f"{kernel_id} measured (benchmarks/data/kernels.csv): {'; '.join(whys)}",
                        measured=True)


def _host_bound(ctx: RunContext) -> bool:
    """The step's regime for the kernel's measured routes (reference_kernels/routes.py)."""
    return host_bound(ctx.device_busy_per_step_s / ctx.step_s if ctx.step_s > 0 else None)


def estimate_gain(spec: GainSpec, subject: Subject, ctx: RunContext, ops: pd.DataFrame,
                  kernel_id: str | None = None) -> GainEstimate:
    """`kernel_id`: the bundled kernel a kernel rung resolved to (the measured-kernel model's)."""
    if spec.model == MEASURED_KERNEL:
        return _measured_kernel(spec, subject, ctx, ops, kernel_id)
    return MODELS[spec.model](spec, subject, ctx, ops)


AT_ROOF_FRAC = 0.85  # an op at this share of its roofline has nothing left for a faster kernel of it
# Gain models that move the roof itself rather than chase it: a number format, fewer bytes
# (a fused chain), time that is no op's (host gaps, exposed communication); or that read the
# saving off a measurement of the switch itself (a library backend table), which no roof bounds.
ROOF_CHANGING_MODELS = ("precision", "tf32", "fusion-bytes", "fused-roofline", "launch-overhead", "exposed-comm",
                        "none", "measured-backend")
# Actions that change the algorithm or the compute path, so the op's present roof does not bound them.
ROOF_CHANGING_ACTIONS = ("sdpa", "float8", "float8:compile", "tf32", "bf16_autocast", "pad_gemm")


def changes_roof(gain_model: str, action: str) -> bool:
    return gain_model in ROOF_CHANGING_MODELS or action in ROOF_CHANGING_ACTIONS


def without_at_roof_rows(gain: GainEstimate, efficiency_frac_by_row: Mapping[Bucket, float]) -> GainEstimate:
    """`gain` less its savings on ops already at >= AT_ROOF_FRAC of their roofline; the basis names each figure."""
    at_roof = {row: eff for row, eff in efficiency_frac_by_row.items()
               if row in gain.row_saving_per_step_s and math.isfinite(eff) and eff >= AT_ROOF_FRAC}
    if not at_roof or gain.saving_per_step_s is None:
        return gain
    rows = {r: s for r, s in gain.row_saving_per_step_s.items() if r not in at_roof}
    figures = ", ".join(f"row {r.row_id} at {eff:.0%}" for r, eff in sorted(at_roof.items()))
    return GainEstimate(sum(rows.values()), rows,
                        f"{gain.basis}; leave it: {figures} of its roofline (>= {AT_ROOF_FRAC:.0%}) saves nothing",
                        gain.measured)


def profiled_to_step_factor(step_s: float, profiled_op_time_per_step_s: float) -> float:
    """What converts profiled op time into the unprofiled step's time (1 unless the ops outlast the step).

    # NB: the profiler's overhead is taken to inflate every op in proportion to its time (on CPU the
    # ops' own time is host time, which the profiler slows); device kernels it does not slow never
    # outlast the step, so on a GPU this is 1.
    """
    if step_s <= 0 or profiled_op_time_per_step_s <= step_s:
        return 1.0
    return step_s / profiled_op_time_per_step_s


def in_step_time(gain: GainEstimate, factor: float) -> GainEstimate:
    """Op-row savings scaled by `factor` (profiled_to_step_factor); host gaps and communication already are."""
    if factor == 1.0 or gain.saving_per_step_s is None:
        return gain
    rows = {r: (s * factor if r.is_row else s) for r, s in gain.row_saving_per_step_s.items()}
    unattributed = gain.saving_per_step_s - sum(gain.row_saving_per_step_s.values())
    return GainEstimate(sum(rows.values()) + unattributed * factor, rows,
                        f"{gain.basis}; × {factor:.2f} profiled → unprofiled step time", gain.measured)


def gain_frac_of_step(saving_per_step_s: float | None, step_s: float) -> float | None:
    """A saving as a share of the one step time every figure uses; no saving exceeds the step."""
    if saving_per_step_s is None or step_s <= 0:
        return None
    return min(max(saving_per_step_s, 0.0) / step_s, 1.0)


def evidence_with_gain(evidence: dict[str, Any], gain: GainEstimate, ctx: RunContext) -> dict[str, Any]:
    frac = gain_frac_of_step(gain.saving_per_step_s, ctx.step_s)
    pct = 100.0 * frac if frac is not None else None
    return {**evidence, "gain_per_step_s": gain.saving_per_step_s, "gain_pct": pct}
