"""Timing, per-op device time and peak memory for the variants that passed the gate."""
from __future__ import annotations

import dataclasses
import math
import statistics
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Callable, Sequence

import torch
from torch.profiler import ProfilerActivity, profile

from kernel_advisor.collect.loader import LoadedModel
from kernel_advisor.collect.loop_timing import (Estimate, TimedStep, autorange_steps, interleaved_windows_s, median_ci,
                                                regime_label, speedup_ci, verdict)
from kernel_advisor.collect.profiler_output import quietly
from kernel_advisor.collect.runner import make_step, timed_loop
from kernel_advisor.trykernel import compiled as kernel_compiled
from kernel_advisor.trykernel.candidates import CandidateSet, TryOptions, activation, baseline_markers, compile_name
from kernel_advisor.trykernel.capture import GateRecord
from kernel_advisor.trykernel.results import (SUSPECT_SPEEDUP, GateSummary, OpTiming, RunEvidence, TryReport,
                                              VariantResult, predict)

EAGER = "eager"
INTERPRETED = "Triton interpreter on CPU: correctness only"


@dataclasses.dataclass(frozen=True)
class GateOutcome:
    """What the gate left for measuring: summaries, call logs and the compiled model."""

    gates: dict[str, GateSummary]
    states: dict[str, GateRecord]
    compiled: object | None
    compile_gate: GateSummary | None
    compile_state: GateRecord
    ref_reason: str
    compile_graphs: kernel_compiled.GraphSummary | None = None  # the plain compiled model's
    with_kernels: tuple[kernel_compiled.KernelCompiled, ...] = ()  # "torch.compile + <set>"
    with_kernels_gates: dict[str, GateSummary] = dataclasses.field(default_factory=dict)
    notes: tuple[str, ...] = ()


def measure(loaded: LoadedModel, sets: Sequence[CandidateSet], outcome: GateOutcome, options: TryOptions,
            evidence: RunEvidence, report) -> TryReport:
    dev = loaded.device
    label, timed_sets, why = timing_plan(sets, outcome.gates, dev.type, options)
    timed_kernels, why_kernels = _with_kernels_plan(outcome, dev.type, label)
    eager_step = make_step(loaded, options.mode)
    timed = [timed_loop(EAGER, loaded, options.mode)]
    compile_ok = outcome.compile_gate is not None and outcome.compile_gate.status == "passed"
    if compile_ok:
        timed.append(timed_loop(compile_name(options), dataclasses.replace(loaded, model=outcome.compiled),
                                options.mode))
    timed += [timed_loop(v.name, dataclasses.replace(loaded, model=v.model), options.mode, v.activate)
              for v in timed_kernels]
    timed += [timed_loop(s.name, loaded, options.mode, activation(s, dev.type)) for s in timed_sets]
    times, peaks, ops, eager_device_s = {}, {}, {}, 0.0
    if label:
        times, label = user_loop_times(timed, options, dev)
        report("timing", 1, 3)
        peaks = {t.name: peak_memory_bytes(t.step, t.activate, dev) for t in timed}
        report("peak memory", 2, 3)
        ops, eager_device_s = _op_times(timed_sets, eager_step, options, dev)
        report("per-op profile", 3, 3)
    results = [_eager(times.get(EAGER), peaks.get(EAGER), label)]
    if outcome.compiled is not None:
        plain = _result(compile_name(options), "compile", outcome.compile_gate, times, peaks,
                        label if compile_ok else "not timed: " + outcome.compile_gate.status,
                        compile_s=outcome.compile_state.compile_s)
        results.append(_with_graphs(plain, outcome.compile_graphs))
    for v in outcome.with_kernels:
        results.append(_with_kernel_result(v, outcome.with_kernels_gates[v.name], times, peaks,
                                           label if v in timed_kernels else f"not timed: {why_kernels[v.name]}",
                                           compile_name(options)))
    for s in sets:
        op = ops.get(s.name)
        gain = _gain(times.get(s.name), times.get(EAGER))
        pred = predict(s.kernel_ids, evidence, op, eager_device_s, gain) if op else None
        results.append(_result(s.name, s.kind, outcome.gates[s.name], times, peaks,
                               label if s in timed_sets else f"not timed: {why[s.name]}",
                               s=s, state=outcome.states[s.name], op=op, prediction=pred))
    return TryReport(model=str(loaded.path), device=_device_name(dev), mode=options.mode, dtype=_dtype_name(loaded),
                     timing=label or "none (check only)", float64_reference=outcome.ref_reason,
                     variants=tuple(results), notes=outcome.notes + tuple(with_kernel_notes(results)))


def user_loop_times(timed: Sequence[TimedStep], options: TryOptions, dev) -> tuple[dict[str, list[float]], str]:
    """Every variant in the user's loop regime (collect/loop_timing.py), as `recommend --measure`
    times them."""
    eager = timed[0]
    with eager.activate():
        eager.step()
        steps = autorange_steps(eager.step, dev)  # the window's size, on eager's steps back to back
    times = interleaved_windows_s(timed, options.reps, steps, options.warmup, dev)
    return times, regime_label(dev, steps)


def nothing_timed(options: TryOptions) -> str:
    """Why no variant is timed at all ("" when timing runs).

    On CPU eager and compile are timed even when every candidate is interpreted: the
    compile-against-eager answer is worth having there too.
    """
    return "--check-only" if options.check_only else ""


def timing_plan(sets: Sequence[CandidateSet], gates: dict[str, GateSummary], device_type: str,
                options: TryOptions) -> tuple[str, list[CandidateSet], dict[str, str]]:
    """(timing label, "" for none; the sets timed; why each other set is not)."""
    untimed = nothing_timed(options)
    if untimed:
        return "", [], {s.name: untimed for s in sets}
    timed, why = [], {}
    for s in sets:
        status = gates[s.name].status
        if status != "passed":
            why[s.name] = status
        elif device_type == "cpu" and s.interpreted_on_cpu:
            why[s.name] = INTERPRETED
        else:
            timed.append(s)
    return ("CUDA events" if device_type == "cuda" else "CPU timing"), timed, why


def _with_kernels_plan(outcome: GateOutcome, device_type: str, label: str
                       ) -> tuple[list[kernel_compiled.KernelCompiled], dict[str, str]]:
    """The "torch.compile + <set>" variants timed, and why each other one is not."""
    timed, why = [], {}
    for v in outcome.with_kernels:
        status = outcome.with_kernels_gates[v.name].status
        if not label:
            why[v.name] = "nothing is timed"
        elif status != "passed":
            why[v.name] = status
        elif device_type == "cpu" and v.set.interpreted_on_cpu:
            why[v.name] = INTERPRETED
        else:
            timed.append(v)
    return timed, why


def _with_graphs(result: VariantResult, graphs: kernel_compiled.GraphSummary | None) -> VariantResult:
    if graphs is None:
        return result
    return dataclasses.replace(result, graph_breaks=graphs.breaks, break_reasons=graphs.break_reasons)


def _with_kernel_result(v: kernel_compiled.KernelCompiled, gate: GateSummary, times: dict, peaks: dict,
                        label: str, compile_label: str) -> VariantResult:
    base = _result(v.name, kernel_compiled.KIND, gate, times, peaks, label, s=v.set, compile_s=v.state.compile_s)
    sites = v.member_sites()
    mine, plain = times.get(v.name), times.get(compile_label)
    vs_compile = speedup_ci(plain, mine) if mine and plain else None
    return _with_graphs(dataclasses.replace(base, calls=sum(n for _, n in sites), member_calls=sites,
                                            speedup_vs_compile=vs_compile,
                                            verdict_vs_compile=verdict(vs_compile) if vs_compile else ""),
                        v.graphs)


def with_kernel_notes(results: Sequence[VariantResult]) -> list[str]:
    """Per "torch.compile + <set>": its graph breaks next to torch.compile's, its call sites, and
    whether the kernel still pays once the rest of the model is compiled."""
    plain = next((r for r in results if r.kind == "compile"), None)
    notes = []
    for r in results:
        if r.kind != kernel_compiled.KIND or r.graph_breaks is None:
            continue
        alone = f" (torch.compile alone: {plain.graph_breaks})" if plain and plain.graph_breaks is not None else ""
        line = f"{r.name}: {r.graph_breaks} graph break(s){alone}"
        if r.calls:
            line += f"; the kernel is called at {r.calls} site(s) of the compiled graphs"
        added = [x for x in r.break_reasons if not plain or x not in plain.break_reasons]
        if added:
            line += f"; break: {added[0]}"
        notes.append(line)
        e = r.speedup_vs_compile
        if e is not None:
            notes.append(f"{r.name}: {e.value:.2f}× [{e.low:.2f}, {e.high:.2f}] against torch.compile alone — "
                         + VS_COMPILE.get(r.verdict_vs_compile, r.verdict_vs_compile))
    return notes


VS_COMPILE = {"faster": "the kernel still pays once the rest of the model is compiled",
              "slower": "torch.compile alone is faster: the kernel does not pay here",
              "no measurable difference": "no measurable difference from torch.compile alone"}


def _op_times(timed_sets, eager_step, options: TryOptions, dev) -> tuple[dict[str, OpTiming], float]:
    """Each set's ops (or pattern ranges) in eager and with the set installed, per step."""
    out: dict[str, OpTiming] = {}
    eager_device_s = 0.0
    for s in timed_sets:
        names = set(s.profile_names)
        base = profiled_op_times(eager_step, lambda s=s: baseline_markers(s.members), names,
                                 options.profile_steps, dev)
        cand = profiled_op_times(eager_step, activation(s, dev.type, marker=True), names,
                                 options.profile_steps, dev)
        eager_device_s = max(eager_device_s, base.total_s)
        b, c = sum(base.per_name_s.values()), sum(cand.per_name_s.values())
        # NB: the candidate ran (the gate counted its calls) yet the profiler tied no device time to
        # it — seen for module-swapped CUDA extension kernels, whose launches the profiler does not
        # correlate with the enclosing range. Unmeasured is NaN, never 0 (which would read "free").
        c = c if c > 0 else float("nan")
        out[s.name] = OpTiming(tuple(sorted(names)), c, b, b / c if b > 0 and c > 0 else float("nan"))
    return out, eager_device_s


def _eager(times, peak: int | None, label: str) -> VariantResult:
    return VariantResult(name=EAGER, kind="eager", kernel_ids=(), targets=(), status="baseline", reason="",
                         calls=0, fallback_calls=0, fallback_reasons=(), gate=None,
                         timing_label=label or "not timed", step_s=median_ci(times) if times else None,
                         speedup=None, verdict="", op=None, peak_memory_bytes=peak, prediction=None,
                         suspect="", compile_s=None)


def _result(name: str, kind: str, gate: GateSummary, times: dict, peaks: dict, label: str, *,
            s: CandidateSet | None = None, state: GateRecord | None = None, op: OpTiming | None = None,
            prediction=None, compile_s: float | None = None) -> VariantResult:
    mine, eager = times.get(name), times.get(EAGER)
    speed = speedup_ci(eager, mine) if mine and eager else None
    calls, fallbacks, reasons = _call_counts(state)
    return VariantResult(name=name, kind=kind, kernel_ids=s.kernel_ids if s else (),
                         targets=s.targets if s else (), status=gate.status, reason=gate.reason, calls=calls,
                         fallback_calls=fallbacks, fallback_reasons=reasons, gate=gate, timing_label=label,
                         step_s=median_ci(mine) if mine else None, speedup=speed,
                         verdict=verdict(speed) if speed else "", op=op, peak_memory_bytes=peaks.get(name),
                         prediction=prediction, suspect=_suspect(speed, op), compile_s=compile_s,
                         member_calls=tuple((k, log.candidate_calls) for k, log in state.logs.items()) if state
                         else (), **_eager_routes(state))


def _call_counts(state: GateRecord | None) -> tuple[int, int, tuple[str, ...]]:
    if state is None:
        return 0, 0, ()
    logs = state.logs.values()
    reasons = tuple(f"{r} (×{n})" for log in logs for r, n in log.fallback_reasons.most_common())
    return sum(log.candidate_calls for log in logs), sum(log.fallback_calls for log in logs), reasons


def _eager_routes(state: GateRecord | None) -> dict:
    """VariantResult's eager_routed_calls and eager_routes: the registry's fallbacks."""
    routes = [(r, n) for log in (state.logs.values() if state else ()) for r, n in log.eager_routes.most_common()]
    return {"eager_routed_calls": sum(n for _, n in routes), "eager_routes": tuple(f"{r} (×{n})" for r, n in routes)}


def _suspect(speed: Estimate | None, op: OpTiming | None) -> str:
    if speed is not None and speed.value > SUSPECT_SPEEDUP:
        return f"step speedup {speed.value:.1f}× is above {SUSPECT_SPEEDUP:.0f}×: check the work is the same"
    if op is not None and math.isfinite(op.speedup) and op.speedup > SUSPECT_SPEEDUP:
        return f"op speedup {op.speedup:.1f}× is above {SUSPECT_SPEEDUP:.0f}×: check the work is the same"
    return ""


def _gain(times, eager_times) -> float:
    if not times or not eager_times:
        return float("nan")
    return 1.0 - statistics.median(times) / statistics.median(eager_times)


def _device_name(dev: torch.device) -> str:
    return torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu"


def _dtype_name(loaded: LoadedModel) -> str:
    if isinstance(loaded.model, torch.nn.Module):
        for p in loaded.model.parameters():
            if p.is_floating_point():
                return str(p.dtype).replace("torch.", "")
    return str(loaded.dtype).replace("torch.", "") if loaded.dtype else "keep"


# ------------------------------------------------------------
# Per-op device time from torch.profiler, and peak memory, of a variant's step.
#
# Step timing is the user's loop's (collect/loop_timing.py), shared with every command.

@dataclass(frozen=True)
class OpTimes:
    per_name_s: dict[str, float]  # device time per step of each requested name (outermost only)
    total_s: float  # all device time per step


def profiled_op_times(step: Callable[[], object], activate: Callable[[], AbstractContextManager],
                      names: set[str], steps: int, device: torch.device) -> OpTimes:
    """Device time per step of ops (or try_kernel:: ranges) named `names`, from torch.profiler.

    An event counts only when no enclosing event has a name in `names` (aten::softmax
    encloses aten::_softmax: counted once). On CPU "device time" is the ops' CPU time.
    """
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    with activate():
        step()  # one untimed step: lazy initialisation stays out of the profile
        _sync(device)
        with quietly(profile(activities=activities)) as prof:
            for _ in range(steps):
                step()
            _sync(device)
    return _sum_events(prof.events(), names, steps, device.type == "cuda")


def _sum_events(events, names: set[str], steps: int, cuda: bool) -> OpTimes:
    per_name = {n: 0.0 for n in names}
    total_us = 0.0
    for e in events:
        if e.device_type != torch.autograd.DeviceType.CPU:
            continue  # GPU-side copies of ranges would count the same kernels twice
        total_us += e.self_device_time_total if cuda else e.self_cpu_time_total
        if e.name in names and not _has_named_ancestor(e, names):
            per_name[e.name] += e.device_time_total if cuda else e.cpu_time_total
    return OpTimes({n: t * 1e-6 / steps for n, t in per_name.items()}, total_us * 1e-6 / steps)


def _has_named_ancestor(event, names: set[str]) -> bool:
    parent = event.cpu_parent
    while parent is not None:
        if parent.name in names:
            return True
        parent = parent.cpu_parent
    return False


def peak_memory_bytes(step: Callable[[], object], activate: Callable[[], AbstractContextManager],
                      device: torch.device) -> int | None:
    """torch.cuda.max_memory_allocated over one step; None on CPU."""
    if device.type != "cuda":
        return None
    with activate():
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        step()
        torch.cuda.synchronize(device)
    return int(torch.cuda.max_memory_allocated(device))


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
