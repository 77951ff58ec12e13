"""One try-kernel invocation end to end: pick candidates, gate, time, save try_kernel.json."""
from __future__ import annotations

import contextlib
import dataclasses
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

import torch

from kernel_advisor.collect.loader import LoadedModel
from kernel_advisor.collect.rundir import write_json_atomic
from kernel_advisor.trykernel import compiled as kernel_compiled
from kernel_advisor.trykernel.candidates import (Candidate, CandidateSet, TryOptions, TryRequest, compile_name,
                                                 default_tolerance, from_impl, installed, new_logs)
from kernel_advisor.trykernel.capture import CallLog, GateDraws, GateRecord, capture_step, first_line, gate_draw
from kernel_advisor.trykernel.patterns import find_patterns
from kernel_advisor.trykernel.reference import FULL_FLOAT64, prepare_reference
from kernel_advisor.trykernel.results import (GateSummary, RunEvidence, TryReport, TryRunContext, build_sets,
                                              census_op_names, find_run, kernel_routing, load_candidates,
                                              model_is_module, report_json, select_specs)
from kernel_advisor.trykernel.timing import INTERPRETED, GateOutcome, measure, nothing_timed

RESULT_FILE = "try_kernel.json"


@dataclass(frozen=True)
class TryResult:
    report: TryReport
    payload: dict  # what try_kernel.json holds
    saved_to: Path | None


def run_try_kernel(loaded: LoadedModel, request: TryRequest,
                   progress: Callable[[str, int, int], None] | None = None) -> TryResult:
    ctx = find_run(request.run, loaded)
    options = request.options
    cands, notes = _candidates(loaded, request.kernel_ids, request.impl, request.op, ctx, options)
    sets, set_notes = build_sets(cands, request.together)
    report = try_candidates(loaded, sets, options, ctx.evidence, progress)
    all_notes = [*ctx.notes, *notes, *set_notes, *report.notes, *_timing_notes(report, loaded, options)]
    report = dataclasses.replace(report, notes=tuple(all_notes))
    payload = report_json(report, {"created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                                   "run": str(ctx.path) if ctx.path else None, "args": dict(request.record_args)})
    saved = None
    if ctx.path is not None:
        saved = ctx.path / RESULT_FILE
        write_json_atomic(saved, payload)
    return TryResult(report, payload, saved)


def _candidates(loaded: LoadedModel, kernel_ids: Sequence[str], impl: str | None, op: str | None,
                ctx: TryRunContext, options: TryOptions) -> tuple[list[Candidate], list[str]]:
    cands: list[Candidate] = []
    if impl is not None and op is not None:
        cands.append(from_impl(impl, op))
    if impl is not None and not kernel_ids:
        return cands, []
    matches = find_patterns(loaded.model) if model_is_module(loaded) else []
    names = ctx.op_names if ctx.op_names is not None else (
        frozenset() if kernel_ids else census_op_names(loaded, options.mode))
    specs, notes = select_specs(kernel_ids, names, matches, loaded.device.type)
    if not specs and not cands:
        notes.append("no reference kernel applies to this model's ops or modules (see `advisor kernels`)")
    bound, dispatch_s = kernel_routing(loaded.device, ctx.device_busy_frac) if specs else (True, 0.0)
    if specs and loaded.device.type == "cuda":
        notes.append(route_note(ctx.device_busy_frac, bound))
        if bound:
            notes.append(dispatch_note(dispatch_s))
    return cands + load_candidates(specs, matches, bound, dispatch_s), notes


def dispatch_note(dispatch_s: float) -> str:
    return (f"substituting a kernel costs {dispatch_s * 1e6:.1f} us of host time per call here "
            "(measured); in a host-bound step it counts against the kernel, so a kernel must beat "
            "eager's host time by that much to keep a call")


def route_note(busy: float | None, bound: bool) -> str:
    """Which measured routes the kernels follow, and why."""
    if busy is None:
        return ("measured routes: a call goes to eager where the kernel lost counting host time too "
                "(no profiled run of this model says whether its step is host-bound)")
    regime = "host-bound" if bound else "device-bound"
    rule = "counting host time too" if bound else "on GPU time"
    return (f"measured routes: the run's device is busy {busy:.0%} of the step ({regime}), so a call "
            f"goes to eager where the kernel lost {rule}")


def _timing_notes(report: TryReport, loaded: LoadedModel, options: TryOptions) -> list[str]:
    notes = []
    untimed = report.timing.startswith("none")
    if untimed and options.compile:
        notes.append("torch.compile variant left out: nothing is timed, so compiling would buy nothing")
    if loaded.device.type != "cpu" or untimed:
        return notes
    notes.append("CPU timing: back-to-back steps as in a training loop, variants interleaved; "
                 "it says nothing about GPU performance")
    if any(v.timing_label.endswith(INTERPRETED) for v in report.variants):
        notes.append("on CPU, Triton kernels run in the interpreter: they are checked for correctness, "
                     "not timed; eager, torch.compile and native kernels are timed")
    return notes


# ------------------------------------------------------------
# Eager, torch.compile, every candidate and "torch.compile + candidate": gate, then timing.
#
# Order of work: (0) Dynamo's graphs of the compiled variants (graph breaks, the kernels' call
# sites; compiled.py), before anything is compiled; (1) the correctness gate on fresh input
# draws for every variant, with the candidates counted and checked call by call; compile time
# is a compiled model's first call here, never inside the timing; (2) interleaved step timing
# of the variants that passed; (3) per-op device time from torch.profiler and peak memory, per
# variant.

Progress = Callable[[str, int, int], None]


def try_candidates(loaded: LoadedModel, sets: Sequence[CandidateSet], options: TryOptions,
                   evidence: RunEvidence, progress: Progress | None = None) -> TryReport:
    """Gate every variant, then time, profile and predict the ones that passed."""
    report = progress or (lambda phase, done, total: None)
    # NB: with nothing timed, compiling (minutes on a large model) would buy nothing.
    timed = not nothing_timed(options)
    compiled = _compile(loaded, options) if options.compile and timed else None
    with_kernels, notes = kernel_compiled.plan(loaded, sets, options) if compiled is not None else ([], [])
    with kernel_compiled.recompile_room(len(with_kernels)):
        plain_graphs = None
        if compiled is not None:  # NB: explain resets Dynamo: before anything is compiled
            plain_graphs, graph_error = kernel_compiled.explain_all(loaded, with_kernels, options.mode)
            notes += [f"{compile_name(options)}: no graph-break count ({graph_error})"] if graph_error else []
            report("torch.compile graphs", 1, 1)
        states, compile_state, ref_reason = gate_candidates(loaded, sets, compiled, options, report, with_kernels)
        outcome = GateOutcome(gates={s.name: summarize_gate(states[s.name], s) for s in sets}, states=states,
                              compiled=compiled,
                              compile_gate=summarize_compile(compile_state) if compiled is not None else None,
                              compile_state=compile_state, ref_reason=ref_reason, compile_graphs=plain_graphs,
                              with_kernels=tuple(with_kernels),
                              with_kernels_gates={v.name: summarize_with_kernel(v) for v in with_kernels},
                              notes=tuple(notes))
        return measure(loaded, sets, outcome, options, evidence, report)


def _compile(loaded: LoadedModel, options: TryOptions):
    return kernel_compiled.compile_in_own_frame(loaded.model, options.compile_mode)


def gate_candidates(loaded: LoadedModel, sets: Sequence[CandidateSet], compiled, options: TryOptions,
             report: Progress, with_kernels: Sequence[kernel_compiled.KernelCompiled] = ()
             ) -> tuple[dict[str, GateRecord], GateRecord, str]:
    """Gate every variant on fresh draws; returns their records and how the reference went
    ("" for a float64 reference on every batch item, else reference.py's reason). The
    "torch.compile + <set>" variants keep their record on themselves."""
    reference = prepare_reference(loaded, options.mode)
    draws = GateDraws(loaded, options.mode, reference, options.draws, options.seed)
    records = {s.name: GateRecord(logs=new_logs(s)) for s in sets}
    compile_record = GateRecord()
    for d in range(options.draws):
        inputs, base, ref = draws[d]
        if compiled is not None:
            _gate_compiled(loaded, compiled, inputs, base, ref, compile_record, options.mode)
        for v in with_kernels:
            _gate_compiled(loaded, v.model, inputs, base, ref, v.state, options.mode, v.activate,
                           v.set.tolerance)
        for s in sets:
            _gate_set(loaded, s, inputs, base, ref, records[s.name], options.mode)
        report("correctness gate", d + 1, options.draws)
    return records, compile_record, "" if reference.reason == FULL_FLOAT64 else reference.reason


def _gate_compiled(loaded, compiled, inputs, base, ref, record: GateRecord, mode: str,
                   activate=contextlib.nullcontext, tolerance=default_tolerance) -> None:
    sync = torch.cuda.synchronize if loaded.device.type == "cuda" else (lambda: None)

    def run():
        t0 = time.perf_counter()
        with activate():
            got = capture_step(loaded, compiled, loaded.model, inputs, mode)
        sync()
        if record.compile_s is None:
            record.compile_s = time.perf_counter() - t0
        return got, tolerance
    gate_draw(record, run, base, ref, failure=lambda e: f"torch.compile failed: {first_line(e)}")


def _gate_set(loaded, s: CandidateSet, inputs, base, ref, record: GateRecord, mode: str) -> None:
    invalid = next((c.invalid for c in s.members if c.invalid), "")
    record.error = record.error or invalid

    def run():
        with installed(s.members, record.logs, loaded.device.type, check=True):
            return capture_step(loaded, loaded.model, loaded.model, inputs, mode), s.tolerance

    def failure(e: Exception) -> str:
        problem = _candidate_problem(record.logs)
        if not problem:
            raise e  # the model itself failed: not the candidate's verdict to give
        return problem
    gate_draw(record, run, base, ref, failure)


def _candidate_problem(logs: dict[str, CallLog]) -> str:
    for log in logs.values():
        if log.error:
            return log.error
        if log.failures:
            return log.failures[0]
    return ""


def summarize_gate(state: GateRecord, s: CandidateSet) -> GateSummary:
    calls = sum(log.candidate_calls for log in state.logs.values())
    problem = state.error or _candidate_problem(state.logs)
    if not problem and calls == 0:
        return _summary(state, "not applied", _not_applied_reason(s, state.logs))
    bad = next((c for c in state.comparisons if not c.ok), None)
    if not problem and bad is not None:
        problem = f"{bad.path}: {bad.problem}"
    return _summary(state, "FAILED" if problem else "passed", problem)


def summarize_compile(state: GateRecord) -> GateSummary:
    return _summary(state, "FAILED" if state.problem else "passed", state.problem)


def summarize_with_kernel(v: kernel_compiled.KernelCompiled) -> GateSummary:
    """As torch.compile's gate; "not applied" when the compiled graphs never call the kernels."""
    gate = summarize_compile(v.state)
    idle = kernel_compiled.not_applied_reason(v)
    if gate.status == "passed" and idle:
        return _summary(v.state, "not applied", idle)
    return gate


def _summary(state: GateRecord, status: str, reason: str) -> GateSummary:
    comps = state.comparisons
    worst = max(comps, key=lambda c: _finite(c.rel_err), default=None)
    return GateSummary(
        status=status, reason=reason, draws=state.draws, leaves=len(comps) // max(state.draws, 1),
        max_abs_err=max((_finite(c.max_abs_err) for c in comps), default=float("nan")),
        rel_err=_finite(worst.rel_err) if worst else float("nan"),
        ref_rel_err=max((c.ref_rel_err for c in comps), default=float("nan")),
        baseline_ref_rel_err=max((c.baseline_ref_rel_err for c in comps), default=float("nan")),
        worst_leaf=worst.path if worst else "")


def _not_applied_reason(s: CandidateSet, logs: dict[str, CallLog]) -> str:
    reasons = [f"{r} (×{n})" for log in logs.values() for r, n in log.fallback_reasons.most_common()]
    if reasons:
        return "every call fell back to PyTorch: " + "; ".join(reasons)
    targets = ", ".join(t for c in s.members for t in c.targets) or "its ops"
    return f"the model never called {targets}"


def _finite(x: float) -> float:
    return x if x == x else float("-inf")  # NaN sorts last


