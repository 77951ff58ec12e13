"""`kernel:<id>`: a bundled reference kernel substituted into the model, as try-kernel does it."""
from __future__ import annotations

import functools

import torch

from kernel_advisor.actions.base import Action, NotApplicable, NotMeasurable, Variant
from kernel_advisor.collect.loader import LoadedModel
from kernel_advisor.trykernel.candidates import from_spec, installed
from kernel_advisor.trykernel.patterns import find_patterns
from kernel_advisor.trykernel.sets import new_logs, CandidateSet

PREFIX = "kernel:"


def kernel_id(action_name: str) -> str:
    return action_name[len(PREFIX):]


def prepare(action_name: str, loaded: LoadedModel, mode: str) -> Variant:
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
    candidate = from_spec(spec, matches)
    logs = new_logs(CandidateSet(spec.id, (candidate,)))
    log = logs[candidate.id]
    context = functools.partial(installed, (candidate,), logs, loaded.device.type, False)
    return Variant(action_name, loaded.model, f"{spec.id} ({', '.join(candidate.targets) or 'its ops'})",
                   context=context, tolerance=candidate.tolerance, stage="kernel",
                   counters=lambda: (log.candidate_calls, log.fallback_calls))


def action_for(name: str) -> Action:
    # NB: a plan never stacks a kernel on a compiled model; try-kernel's compile + kernel
    # variant measures that pair.
    return Action(name, f"bundled kernel {kernel_id(name)}", "kernel", functools.partial(prepare, name),
                  excludes=("compile",))
