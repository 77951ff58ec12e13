"""Registry entries of the Triton reference kernels. Imports neither triton nor the kernels.

Tolerances: (rtol on ||out - ref|| / ||ref||, atol) against a float64 reference; see
reference_kernels/verify.py. float32 math with outputs rounded once to the output dtype
leaves ~1e-7 (fp32), ~2-4e-4 (fp16), ~2-7e-3 (bf16; the CPU interpreter truncates rather than
rounds to bf16, which doubles the error there); each bound keeps a ~3-5x margin over that.
"""
from __future__ import annotations

import torch

from reference_kernels.registry import Capability, KernelSpec, Loss, ShapeClass

_PKG = "reference_kernels.triton"
_TRITON = Capability(backend="triton", min_compute_capability=(7, 0))
_TRITON_BF16_DOT = Capability(backend="triton", min_compute_capability=(8, 0))

_ELEMENTWISE_TOL = {
    "float32": (1e-5, 1e-5), "float16": (2e-3, 2e-3), "bfloat16": (1e-2, 1e-2),
    "float64": (1e-10, 1e-12),
}
# Matmul: exact products, float32 accumulation over K, one rounding of C; the error is the
# output rounding plus ~sqrt(K)*2^-24 relative from the sum.
_MATMUL_TOL = {"float16": (2e-3, 2e-3), "bfloat16": (1e-2, 1e-2)}

# torch >= 2.9 routes F.rms_norm through aten::_fused_rms_norm; older releases decompose it
# into pow/mean/rsqrt, so only the module pattern can swap it there.
_RMS_ATEN = ("aten::_fused_rms_norm",) if hasattr(torch.ops.aten, "_fused_rms_norm") else ()


# Shape classes measured to lose (KernelSpec.loses): try-kernel leaves them to eager.
# NB: triton.softmax has none: few long rows (16x4194304 bf16) lost on the row loop at 0.046 of
# copy; the split path (rowsplit.py) runs them at 175 us forward against eager's 1078 us and
# torch.compile's 177 us (benchmarks/studies/row_shapes.py, H200, 2026-11-26).
_SWEEP = "benchmarks/results/triton_kernels_h200_2026-11-21.md, (b) forward sweep, why = kernel"


def _point(rows: int, cols: int, dtype: str) -> ShapeClass:
    """One measured shape: the sweep measured points, and says nothing of their neighbours."""
    return ShapeClass(f"{rows}x{cols} {dtype}", rows, rows, cols, cols, (dtype,))


# log_softmax: where the GPU time too is above eager's (the host-bound losses of that sweep
# are not listed: the host cost of a launch changed after that sweep).
_LOG_SOFTMAX_LOSES = (
    Loss(_point(1024, 127, "float32"), "5.9 us against eager's 5.3, GPU time 2.0 against 1.7 us",
         _SWEEP, path="in-register block, several rows per program"),
    Loss(_point(8192, 1024, "float32"), "23.8 us against eager's 22.2, GPU time 19.1 against 16.7 us",
         _SWEEP, path="in-register block, several rows per program"),
    Loss(_point(64, 127, "bfloat16"), "5.8 us against eager's 5.4, GPU time 1.9 against 1.7 us",
         _SWEEP, path="in-register block, several rows per program"),
)


def _spec(name: str, title: str, module: str, **kw) -> KernelSpec:
    kw.setdefault("capability", _TRITON)
    kw.setdefault("tolerances", dict(_ELEMENTWISE_TOL))
    return KernelSpec(id=f"triton.{name}", title=title, loader=f"{_PKG}.{module}:{name}",
                      reference=f"{_PKG}.eager:{name}", **kw)


SPECS: tuple[KernelSpec, ...] = (
    _spec("softmax", "softmax over the last dim; online max/sum for rows over 32K", "softmax",
          replaces_aten=("aten::_softmax",), has_backward=True),
    _spec("log_softmax", "log_softmax over the last dim; online max/sum for rows over 32K",
          "softmax", replaces_aten=("aten::_log_softmax",), has_backward=True,
          loses=_LOG_SOFTMAX_LOSES),
    _spec("layer_norm", "LayerNorm (affine optional), rows up to 64K in registers, longer split",
          "layer_norm", replaces_aten=("aten::native_layer_norm",), has_backward=True),
    _spec("rms_norm", "RMSNorm (weight optional), rows up to 64K in registers, longer split",
          "rms_norm",
          replaces_aten=_RMS_ATEN, replaces_patterns=("rmsnorm-module",), has_backward=True),
    _spec("gelu", "GELU, erf or tanh approximation", "gelu", replaces_aten=("aten::gelu",),
          has_backward=True),
    _spec("silu", "SiLU (x * sigmoid(x))", "silu", replaces_aten=("aten::silu",),
          has_backward=True),
    _spec("swiglu", "SwiGLU gate: silu(a) * b in one pass", "swiglu",
          replaces_patterns=("swiglu-mlp",), has_backward=True),
    _spec("add_layer_norm", "residual add + LayerNorm, returns (normed, new residual)",
          "layer_norm", replaces_patterns=("residual-layernorm",), has_backward=True),
    _spec("add_rms_norm", "residual add + RMSNorm, returns (normed, new residual)",
          "rms_norm", replaces_patterns=("residual-rmsnorm",), has_backward=True),
    _spec("cross_entropy", "cross-entropy chunked over the vocab, logits read twice in all",
          "cross_entropy", replaces_patterns=("cross-entropy",), has_backward=True,
          notes="ignore_index, reduction mean/sum/none; (rows, vocab) logits only"),
    _spec("matmul", "tiled tl.dot matmul, fp32 accumulation, autotuned (cuBLAS should win)",
          "matmul", replaces_aten=("aten::mm",), dtypes=("float16", "bfloat16"),
          layouts=("contiguous", "transposed"), memory_bound=False,
          capability=_TRITON_BF16_DOT, tolerances=dict(_MATMUL_TOL)),
)
