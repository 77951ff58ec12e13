"""`kernel:<id>`: a bundled reference kernel substituted into the model, as try-kernel does it.

Both commands build the kernel's candidate the same way (`candidate`): the same measured
routes for the run's regime and the same dispatch cost, so one substitution measures the
same whichever command asks.
"""
from __future__ import annotations

import functools

import torch

from kernel_advisor.actions.base import Action, NotApplicable, NotMeasurable, Variant
from kernel_advisor.collect.loader import LoadedModel
from kernel_advisor.trykernel.candidates import Candidate, CandidateSet, from_spec, installed, new_logs
from kernel_advisor.trykernel.patterns import find_patterns
from kernel_advisor.trykernel.selection import kernel_routing

PREFIX = "kernel:"


def kernel_id(action_name: str) -> str:
    return action_name[len(PREFIX):]


def candidate(action_name: str, loaded: LoadedModel, busy_frac: float | None = None) -> Candidate:
    """The kernel's candidate for this model: routes of the run's regime (host-bound unless the
    run's device-busy fraction says otherwise), the substitution's measured dispatch cost."""
    from reference_kernels.registry import all_kernels

    wanted = kernel_id(action_name)
    spec = next((s for s in all_kernels() if s.id == wanted), None)
    if spec is None:
        raise NotApplicable(f"no bundled kernel '{wanted}' (see `advisor kernels`)")
    reason = spec.reason_if_unsatisfied(loaded.device.type)
    if reason:
        raise NotMeasurable(f"{spec.id} cannot run here: {reason}")
    if loaded.device.type == "cpu" and spec.capability.backend == "triton":
        raise NotMeasurable("Triton kernels run in the interpreter on the CPU: correct, but not timeable")
    matches = find_patterns(loaded.model) if isinstance(loaded.model, torch.nn.Module) else []
    bound, dispatch_s = kernel_routing(loaded.device, busy_frac)
    return from_spec(spec, matches, bound, dispatch_s)


def prepare_kernel(action_name: str, loaded: LoadedModel, mode: str, busy_frac: float | None = None) -> Variant:
    c = candidate(action_name, loaded, busy_frac)
    logs = new_logs(CandidateSet(c.id, (c,)))
    log = logs[c.id]
    context = functools.partial(installed, (c,), logs, loaded.device.type, False)
    return Variant(action_name, loaded.model, f"{c.id} ({', '.join(c.targets) or 'its ops'})",
                   context=context, tolerance=c.tolerance, stage="kernel",
                   counters=lambda: (log.candidate_calls, log.fallback_calls))


def action_for(name: str) -> Action:
    return Action(name, f"bundled kernel {kernel_id(name)}", "kernel", functools.partial(prepare_kernel, name))
