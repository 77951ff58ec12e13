"""`rms_norm_module`: every hand-written RMSNorm module computes through F.rms_norm instead.

Detection is try-kernel's (trykernel/patterns.py): a leaf module with one 1-D weight and
an eps whose forward takes a mean and an rsqrt, confirmed by a probe against RMSNorm.
The swap keeps the module, its weight and its eps; only its forward changes.
"""
from __future__ import annotations

import copy
import functools

import torch
import torch.nn.functional as F

from kernel_advisor.actions.base import Action, NotApplicable, NotMeasurable, Variant, instance_forwards
from kernel_advisor.collect.loader import LoadedModel
from kernel_advisor.collect.user_code import map_tensors
from kernel_advisor.trykernel.candidates import Candidate, CandidateSet, from_spec, installed, new_logs
from kernel_advisor.trykernel.patterns import RMSNormMatch, find_patterns
from kernel_advisor.trykernel.results import kernel_routing

_RMSNORM_CLASS = getattr(torch.nn, "RMSNorm", None)


def prepare_rms_norm_module(loaded: LoadedModel, mode: str) -> Variant:
    if not isinstance(loaded.model, torch.nn.Module):
        raise NotApplicable("the model is a callable, not an nn.Module")
    if not hasattr(F, "rms_norm"):
        raise NotApplicable(f"F.rms_norm needs torch >= 2.4 (this is {torch.__version__})")
    matches = [m for m in find_patterns(loaded.model) if isinstance(m, RMSNormMatch)
               and not (_RMSNORM_CLASS is not None and isinstance(m.module, _RMSNORM_CLASS))]
    if not matches:
        raise NotApplicable("no hand-written RMSNorm module found (nn.RMSNorm modules are left as they are)")
    tally = [0, 0]
    patches = [(m.module, _rms_forward(m, tally)) for m in matches]
    return Variant("rms_norm_module", loaded.model, f"{len(matches)} RMSNorm module(s) through F.rms_norm",
                   context=lambda: instance_forwards(patches), counters=lambda: (tally[0], tally[1]))


def _rms_forward(match: RMSNormMatch, tally: list[int]):
    original, weight = match.module.forward, match.weight

    def forward(x, *args, **kwargs):
        # The hand-written form promotes to the weight's dtype; F.rms_norm wants one dtype.
        if args or kwargs or not isinstance(x, torch.Tensor) or x.dtype != weight.dtype:
            tally[1] += 1
            return original(x, *args, **kwargs)
        tally[0] += 1
        eps = torch.finfo(x.dtype).eps if match.eps is None else match.eps
        return F.rms_norm(x, (x.shape[-1],), weight, eps)

    return forward


RMS_NORM_MODULE = Action("rms_norm_module", "nn.RMSNorm / F.rms_norm for hand-written RMSNorm", "library", prepare_rms_norm_module)


# ------------------------------------------------------------
# `pad_gemm`: nn.Linear layers with a dim off 16-byte alignment run on a zero-padded weight.
#
# out = linear(pad(x), pad(W), pad(b))[..., :N] equals linear(x, W, b): the padded input
# columns meet zero weight rows, the padded output columns are cut off. In inference the
# padded copies are made once; in training they are padded per call so gradients reach the
# user's own weight.

ALIGN_BYTES = 16  # cuBLAS tensor-core kernels want leading dimensions on 16-byte boundaries


def padded_size(n: int, itemsize: int) -> int:
    align = max(ALIGN_BYTES // itemsize, 1)
    return -(-n // align) * align


def prepare_pad_gemm(loaded: LoadedModel, mode: str) -> Variant:
    if not isinstance(loaded.model, torch.nn.Module):
        raise NotApplicable("the model is a callable, not an nn.Module")
    linears = [m for m in loaded.model.modules() if isinstance(m, torch.nn.Linear) and _misaligned(m)]
    if not linears:
        raise NotApplicable("every nn.Linear already has 16-byte aligned dims")
    patches = [(m, _padded_forward(m, train=mode == "train")) for m in linears]
    shapes = ", ".join(f"{m.in_features}x{m.out_features}" for m in linears[:3])
    more = f" (+{len(linears) - 3} more)" if len(linears) > 3 else ""
    return Variant("pad_gemm", loaded.model, f"{len(linears)} Linear layer(s) padded: {shapes}{more}",
                   context=lambda: instance_forwards(patches))


def _misaligned(m: torch.nn.Linear) -> bool:
    size = m.weight.element_size()
    return padded_size(m.in_features, size) != m.in_features or padded_size(m.out_features, size) != m.out_features


def _padded_forward(m: torch.nn.Linear, train: bool):
    size = m.weight.element_size()
    n, k = m.out_features, m.in_features
    pad_n, pad_k = padded_size(n, size) - n, padded_size(k, size) - k
    frozen = None
    if not train:
        with torch.no_grad():
            frozen = _padded(m, pad_n, pad_k)

    def forward(x):
        weight, bias = frozen if frozen is not None else _padded(m, pad_n, pad_k)
        if pad_k:
            x = F.pad(x, (0, pad_k))
        return F.linear(x, weight, bias)[..., :n]

    return forward


def _padded(m: torch.nn.Linear, pad_n: int, pad_k: int):
    bias = F.pad(m.bias, (0, pad_n)) if m.bias is not None else None
    return F.pad(m.weight, (0, pad_k, 0, pad_n)), bias


PAD_GEMM = Action("pad_gemm", "pad Linear dims to 16-byte multiples", "library", prepare_pad_gemm)


# ------------------------------------------------------------
# `channels_last`: the model's 4-D weights and the 4-D inputs in NHWC memory order.

def prepare_channels_last(loaded: LoadedModel, mode: str) -> Variant:
    model = loaded.model
    if not isinstance(model, torch.nn.Module):
        raise NotApplicable("the model is a callable, not an nn.Module")
    weights = [p for p in model.parameters() if p.dim() == 4]
    if not weights:
        raise NotApplicable("the model has no 4-D (convolution) weights")
    if all(p.is_contiguous(memory_format=torch.channels_last) for p in weights):
        raise NotApplicable("the 4-D weights are already channels_last")

    def to_nhwc(inputs: list) -> list:
        # Done once per input draw, as a data loader would: the conversion is not in the step.
        return map_tensors(inputs, lambda t: t.contiguous(memory_format=torch.channels_last) if t.dim() == 4 else t)

    # A copy: converting the user's model in place would change eager's layout too.
    nhwc = copy.deepcopy(model).to(memory_format=torch.channels_last)
    return Variant("channels_last", nhwc, f"{len(weights)} 4-D weights and the 4-D inputs in channels_last",
                   params_of=nhwc, convert_inputs=to_nhwc)


CHANNELS_LAST = Action("channels_last", "channels_last memory format", "library", prepare_channels_last)


# ------------------------------------------------------------
# `kernel:<id>`: a bundled reference kernel substituted into the model, as try-kernel does it.
#
# Both commands build the kernel's candidate the same way (`candidate`): the same measured
# routes for the run's regime and the same dispatch cost, so one substitution measures the
# same whichever command asks.

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
