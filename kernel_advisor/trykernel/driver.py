"""One try-kernel invocation end to end: pick candidates, gate, time, save try_kernel.json."""
from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

from kernel_advisor.collect.loader import LoadedModel
from kernel_advisor.collect.rundir import write_json_atomic
from kernel_advisor.trykernel.candidates import Candidate, from_impl
from kernel_advisor.trykernel.measure import INTERPRETED
from kernel_advisor.trykernel.patterns import find_patterns
from kernel_advisor.trykernel.results import TryReport, report_json
from kernel_advisor.trykernel.selection import (RunContext, build_sets, census_op_names, find_run, kernel_routing,
                                                load_candidates, model_is_module, select_specs)
from kernel_advisor.trykernel.sets import TryOptions
from kernel_advisor.trykernel.variants import try_candidates

RESULT_FILE = "try_kernel.json"


@dataclass(frozen=True)
class TryResult:
    report: TryReport
    payload: dict  # what try_kernel.json holds
    saved_to: Path | None


def run_try_kernel(loaded: LoadedModel, kernel_ids: Sequence[str], together: bool, impl: str | None,
                   op: str | None, run: Path | None, options: TryOptions, args: dict,
                   progress: Callable[[str, int, int], None] | None = None) -> TryResult:
    ctx = find_run(run, loaded)
    cands, notes = _candidates(loaded, kernel_ids, impl, op, ctx, options)
    sets, set_notes = build_sets(cands, together)
    report = try_candidates(loaded, sets, options, ctx.evidence, progress)
    all_notes = [*ctx.notes, *notes, *set_notes, *report.notes, *_timing_notes(report, loaded, options)]
    report = dataclasses.replace(report, notes=tuple(all_notes))
    payload = report_json(report, {"created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                                   "run": str(ctx.path) if ctx.path else None, "args": args})
    saved = None
    if ctx.path is not None:
        saved = ctx.path / RESULT_FILE
        write_json_atomic(saved, payload)
    return TryResult(report, payload, saved)


def _candidates(loaded: LoadedModel, kernel_ids: Sequence[str], impl: str | None, op: str | None,
                ctx: RunContext, options: TryOptions) -> tuple[list[Candidate], list[str]]:
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
