"""Which kernels to try on this model, and which run they belong to.

With kernel ids: exactly those (a capability the machine lacks is an error, exit 2).
Without: every registry kernel that applies to the model — its aten ops appear in the
model's run (ops.csv names) or, with no run of this model, in one profiled census step;
or its module patterns are detected in the model. Kernels this machine cannot run are
skipped with their reason.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

import torch
from torch.profiler import ProfilerActivity, profile

from kernel_advisor.collect.loader import LoadedModel
from kernel_advisor.collect.profiler_output import quietly
from kernel_advisor.collect.rundir import load_run, resolve_run
from kernel_advisor.collect.runner import make_step
from kernel_advisor.errors import EnvironmentCapabilityError, UserInputError
from kernel_advisor.records.run import RunMeta
from kernel_advisor.trykernel.candidates import Candidate, CandidateSet, applies, combine, from_spec
from kernel_advisor.trykernel.patterns import PatternMatch
from kernel_advisor.trykernel.results import RunEvidence, evidence_from_run
from kernel_advisor.trykernel.substitute_aten import dispatch_cost_s
from reference_kernels.routes import host_bound


@dataclass(frozen=True)
class TryRunContext:
    path: Path | None  # the run try_kernel.json is saved into; None: no run of this model
    evidence: RunEvidence
    op_names: frozenset[str] | None  # names in its ops.csv; None without a run
    notes: tuple[str, ...] = field(default=())
    device_busy_frac: float | None = None  # of its step; None: no run (routes assume host-bound)


def find_run(run: Path | None, loaded: LoadedModel) -> TryRunContext:
    """The explicit --run (must be of this model), else `latest` when it profiled this model."""
    try:
        path = resolve_run(run)
    except UserInputError:
        if run is not None:
            raise
        return TryRunContext(None, RunEvidence(), None, ("no run yet: results are not saved (run `advisor profile` "
                                                      "first, or read them with --json)",))
    r = load_run(path)
    meta = RunMeta.of(r.meta)
    model = meta.model
    same = model.get("sha256") == loaded.sha256 or _same_file(model.get("file"), loaded.path)
    if not same:
        if run is not None:
            raise UserInputError(f"run {path} profiled {model.get('file')}, not {loaded.path.name}",
                                 "pass a run of this model with --run, or leave --run out")
        return TryRunContext(None, RunEvidence(), None, (f"the latest run ({path.name}) is of another model: results "
                                                      "are not saved (profile this model first)",))
    names = frozenset(str(n) for n in r.ops["name"]) if "name" in r.ops.columns else frozenset()
    busy = meta.device_busy_frac
    return TryRunContext(path, evidence_from_run(path, r.ops), names,
                      device_busy_frac=float(busy) if isinstance(busy, (int, float)) else None)


def _same_file(recorded: str | None, path: Path) -> bool:
    try:
        return recorded is not None and Path(recorded).resolve() == path.resolve()
    except OSError:
        return False


def census_op_names(loaded: LoadedModel, mode: str) -> frozenset[str]:
    """Outermost ops of one step (as ops.csv names them), from torch.profiler's CPU events."""
    step = make_step(loaded, mode)
    with quietly(profile(activities=[ProfilerActivity.CPU])) as prof:
        step()
    return frozenset(e.name for e in prof.events() if e.cpu_parent is None)


def select_specs(ids: Sequence[str], op_names: frozenset[str], matches: Sequence[PatternMatch],
                 device_type: str) -> tuple[list, list[str]]:
    """(specs to try, notes about the ones skipped)."""
    from reference_kernels.registry import get_kernel

    if ids:
        specs = [get_kernel(i) for i in dict.fromkeys(ids)]
        for spec in specs:
            reason = spec.reason_if_unsatisfied(device_type)
            if reason:
                raise EnvironmentCapabilityError(f"kernel {spec.id} cannot run here: {reason}",
                                                 "run on a machine that has it, or pick another kernel")
        return specs, []
    patterns = {m.pattern for m in matches}
    candidates = [s for s in _registry() if applies(s, set(op_names), patterns)]
    usable = [s for s in candidates if not s.reason_if_unsatisfied(device_type)]
    notes = [f"skipped {s.id}: {s.reason_if_unsatisfied(device_type)}" for s in candidates if s not in usable]
    if candidates and not usable:
        raise EnvironmentCapabilityError("no kernel that applies to this model can run here: " + "; ".join(notes),
                                         "run on a machine with a GPU (and triton / nvcc)")
    return usable, notes


def _registry() -> tuple:
    from reference_kernels.registry import all_kernels

    try:
        return all_kernels()
    except ImportError as e:
        raise EnvironmentCapabilityError(f"the reference kernel registry cannot be loaded ({e})",
                                         "reinstall kernel_advisor, or try your own kernel with --impl") from e


def build_sets(cands: Sequence[Candidate], together: bool) -> tuple[list[CandidateSet], list[str]]:
    """One set per candidate; with --all, also one with every candidate that can share a run."""
    sets = [CandidateSet(c.id, (c,)) for c in cands]
    if not together or len(cands) < 2:
        return sets, (["--all needs two or more kernels to combine"] if together else [])
    kept, notes = combine(cands)
    if len(kept) >= 2:
        sets.append(CandidateSet("all together", tuple(kept), combined=True))
    return sets, notes


def kernel_routing(device: torch.device, busy_frac: float | None) -> tuple[bool, float]:
    """(host-bound?, dispatch seconds a substituted call pays): which measured routes the kernels
    follow for a step whose device is busy `busy_frac` of it (None: unknown, host-bound assumed),
    and, in a host-bound step on a GPU, the substitution's own host cost, measured once here."""
    bound = host_bound(busy_frac)
    return bound, (_dispatch_s(str(device)) if bound and device.type == "cuda" else 0.0)


@functools.lru_cache(maxsize=None)
def _dispatch_s(device: str) -> float:
    return dispatch_cost_s(torch.device(device))


def load_candidates(specs: Sequence, matches: Sequence[PatternMatch],
                    host_bound: bool = True, dispatch_host_s: float = 0.0) -> list[Candidate]:
    return [from_spec(s, matches, host_bound, dispatch_host_s) for s in specs]


def model_is_module(loaded: LoadedModel) -> bool:
    return isinstance(loaded.model, torch.nn.Module)
