"""Which bundled reference kernel a triton/cuda rule points at, for one subject.

`kernel: auto` picks a kernel of the rule's backend whose `replaces_aten` covers the op
(or whose `replaces_patterns` covers the pattern); an explicit id must cover it too.
Either way the kernel must support the subject's dtype and the run's GPU capability.
"""
from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any, Iterable

from kernel_advisor.recommend.schema import Rule
from reference_kernels.registry import SPEC_MODULES, KernelSpec

if TYPE_CHECKING:
    from kernel_advisor.recommend.evidence import RunContext

# Our pattern names and the names the kernel registry uses for the same module-level code.
PATTERN_ALIASES = {
    "rmsnorm-chain": ("rmsnorm-chain", "rmsnorm-module", "rmsnorm"),
    "residual-rmsnorm": ("residual-rmsnorm",),
    "swiglu": ("swiglu", "swiglu-mlp"),
    "naive-attention": ("naive-attention", "attention"),
}


# Composite aten ops whose whole body a pattern kernel replaces: `aten::cross_entropy_loss` is
# log_softmax + nll_loss, which the cross-entropy kernel computes in one pass.
COMPOSITE_OP_PATTERNS = {
    "cross_entropy_loss": ("cross-entropy",),
}


def registry_kernels() -> tuple[KernelSpec, ...]:
    """Every declared kernel; a backend whose specs module is not written yet adds none."""
    specs: list[KernelSpec] = []
    for name in SPEC_MODULES:
        try:
            specs.extend(importlib.import_module(name).SPECS)
        except ModuleNotFoundError as e:
            if e.name != name:
                raise
    return tuple(specs)


def op_family(name: str) -> str:
    """The op an outer op and its implementation share: `aten::softmax` / `aten::_softmax.default`
    → `softmax`, `aten::native_layer_norm` → `layer_norm`, `aten::_fused_rms_norm` → `rms_norm`."""
    op = name.split("::", 1)[-1].split(".", 1)[0].strip("_")
    for prefix in ("native_", "fused_"):
        op = op[len(prefix):] if op.startswith(prefix) else op
    return op


def _covers(spec: KernelSpec, scope: str, evidence: dict[str, Any]) -> bool:
    if scope == "op":
        family = op_family(evidence.get("name", ""))
        composite = COMPOSITE_OP_PATTERNS.get(family, ())
        return (family in {op_family(a) for a in spec.replaces_aten}
                or any(p in spec.replaces_patterns for p in composite))
    if scope == "pattern":
        names = PATTERN_ALIASES.get(evidence.get("pattern", ""), (evidence.get("pattern"),))
        return any(n in spec.replaces_patterns for n in names)
    return False


def _runs_here(spec: KernelSpec, evidence: dict[str, Any], ctx: RunContext) -> bool:
    if evidence.get("dtype") not in spec.dtypes:
        return False
    if ctx.device_type == "cuda" and ctx.capability is not None:
        return tuple(ctx.capability) >= tuple(spec.capability.min_compute_capability)
    return not spec.capability.needs_gpu


def resolve_kernel(rule: Rule, scope: str, evidence: dict[str, Any], ctx: RunContext,
                   kernels: Iterable[KernelSpec]) -> KernelSpec | None:
    for spec in kernels:
        if spec.capability.backend != rule.tier:
            continue
        if rule.kernel != "auto" and spec.id != rule.kernel:
            continue
        if _covers(spec, scope, evidence) and _runs_here(spec, evidence, ctx):
            return spec
    return None


def try_kernel_command(model_file: str | None, kernel_id: str) -> str:
    """The exact command; an imported trace has no model file, so the user names theirs."""
    model = model_file if model_file and model_file.endswith(".py") else "MODEL.py"
    return f"advisor try-kernel {model} {kernel_id}"
