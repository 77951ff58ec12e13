"""Registry entries of the CUDA C++ reference kernels. Builds and imports no extension.

Every kernel but bias_act has a backward (C++ autograd nodes, autograd.cpp).

Tolerances: (rtol on ||out - ref|| / ||ref||, atol on max |out - ref|) against a float64
reference. The kernels accumulate in float (double for fp64) and round the output once, so the
error is about half an ulp of the output dtype at the output's magnitude.
"""
from __future__ import annotations

import torch

from reference_kernels.cuda import reference
from reference_kernels.registry import DEFAULT_TOLERANCES, Capability, KernelSpec, ShapeClass

_PKG = "reference_kernels.cuda"
_CUDA = Capability(backend="cuda", needs_gpu=True, min_compute_capability=(7, 0))
_DTYPES = ("float32", "float16", "bfloat16", "float64")

# Softmax outputs lie in [0, 1]: half an ulp there is 2^-12 (fp16) and 2^-9 (bf16).
_SOFTMAX_TOL = dict(DEFAULT_TOLERANCES)
# Norms and activations reach |y| ~ 5 on randn-scale inputs; for |y| < 8 half an ulp is
# 2^-9 = 2.0e-3 (fp16) and 2^-6 = 1.6e-2 (bf16), so atol doubles that.
_WIDE_TOL = {**DEFAULT_TOLERANCES, "float16": (2e-3, 4e-3), "bfloat16": (1e-2, 3.2e-2)}

# torch >= 2.9 routes F.rms_norm through aten::_fused_rms_norm; older releases decompose it
# into pow/mean/rsqrt, so only the module pattern can swap it there.
_RMS_ATEN = ("aten::_fused_rms_norm",) if hasattr(torch.ops.aten, "_fused_rms_norm") else ()

_BIAS_ACT_NOTE = (
    "Fuses a per-column bias add and the activation (one read and one write instead of two "
    "each) where the bias is added by its own op; aten::linear already folds its bias into "
    "the GEMM (addmm), so a linear followed by the activation gains nothing from it.")


# The row kernels index rows and columns with 32-bit ints (binding.cpp's TORCH_CHECKs): such
# calls go to eager instead of raising.
_INT32_MAX = 2**31 - 1
_ROW_LIMITS = (ShapeClass("more than 2^31 - 1 rows", min_rows=_INT32_MAX + 1),
               ShapeClass("rows of more than 2^31 - 1 elements", min_cols=_INT32_MAX + 1))


def _spec(name: str, title: str, module: str, **kw) -> KernelSpec:
    # Kernels with no reference here share the Triton launchers' (same signatures).
    kw.setdefault("reference", f"{_PKG}.reference:{name}" if hasattr(reference, name)
                  else f"reference_kernels.triton.eager:{name}")
    if module in ("softmax", "norms", "cross_entropy"):
        kw.setdefault("refuses", _ROW_LIMITS)
    kw.setdefault("has_backward", module != "bias_act")
    return KernelSpec(id=f"cuda.{name}", title=title, capability=_CUDA,
                      loader=f"{_PKG}.{module}:{name}", dtypes=_DTYPES, **kw)


SPECS: tuple[KernelSpec, ...] = (
    _spec("softmax", "softmax over the last dim (CUDA C++: warp per short row, block per long "
          "row, row cached in shared memory)", "softmax", replaces_aten=("aten::_softmax",),
          tolerances=_SOFTMAX_TOL,
          notes="Last dim only; the output keeps x's dtype (no half_to_float)."),
    _spec("log_softmax", "log_softmax over the last dim (CUDA C++, softmax's row kernels)",
          "softmax", replaces_aten=("aten::_log_softmax",), tolerances=_WIDE_TOL,
          notes="Last dim only; the output keeps x's dtype (no half_to_float)."),
    _spec("rms_norm", "RMSNorm (CUDA C++, float accumulation)", "norms",
          replaces_aten=_RMS_ATEN, replaces_patterns=("rmsnorm-module",),
          tolerances=_WIDE_TOL),
    _spec("layer_norm", "LayerNorm (CUDA C++, two-pass variance over the cached row)",
          "norms", replaces_aten=("aten::native_layer_norm",), tolerances=_WIDE_TOL,
          notes="native_layer_norm in reference_kernels.cuda.norms also returns mean and rstd."),
    _spec("add_rms_norm", "residual add + RMSNorm, returns (normed, new residual) (CUDA C++: "
          "add kernel, then the rms_norm row kernel; one fused backward row kernel)", "norms",
          replaces_patterns=("residual-rmsnorm",), tolerances=_WIDE_TOL),
    _spec("add_layer_norm", "residual add + LayerNorm, returns (normed, new residual) (CUDA "
          "C++: add kernel, then the layer_norm row kernel; one fused backward row kernel)",
          "norms", replaces_patterns=("residual-layernorm",), tolerances=_WIDE_TOL),
    _spec("cross_entropy", "cross-entropy over (rows, classes) logits (CUDA C++: one row pass "
          "for the loss and logsumexp, one pass for the gradient)", "cross_entropy",
          replaces_patterns=("cross-entropy",), tolerances=_WIDE_TOL,
          notes="ignore_index, reduction mean/sum/none; class-index targets only"),
    _spec("gelu", "GELU, erf or tanh approximation (CUDA C++)", "pointwise",
          replaces_aten=("aten::gelu",), tolerances=_WIDE_TOL),
    _spec("silu", "SiLU (CUDA C++)", "pointwise", replaces_aten=("aten::silu",),
          tolerances=_WIDE_TOL),
    _spec("swiglu", "SwiGLU gate: silu(a) * b in one pass (CUDA C++)", "pointwise",
          replaces_patterns=("swiglu-mlp",), tolerances=_WIDE_TOL),
    _spec("bias_gelu", "bias + GELU (erf or tanh) fused (CUDA C++)", "bias_act",
          replaces_patterns=("bias-gelu",), tolerances=_WIDE_TOL, notes=_BIAS_ACT_NOTE),
    _spec("bias_silu", "bias + SiLU fused (CUDA C++)", "bias_act",
          replaces_patterns=("bias-silu",), tolerances=_WIDE_TOL, notes=_BIAS_ACT_NOTE),
)
