"""The fused CUDA norm backward (norm_backward.cu) on a GPU: dx, dweight and dbias from one read
of x and dy, against float64 autograd.

Widths: 127 (scalar rows), the transformer widths 3000, 5120, 7168, 14336 (16-byte vectors,
1 to 4 vectors a thread for bf16, up to 8 for fp32), and 16392 (past the fused kernel's 32
columns a thread for bf16: the two-kernel path). Rows: 1 (one block writes the gradients
itself), 37 (fewer rows than blocks) and 1500 (each block sums several rows, the partials
summed by a second launch). Misaligned copies take the scalar kernel.
"""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from reference_kernels.cuda import norms
from reference_kernels.cuda.specs import SPECS
from test_cuda_kernels import _randn as _rand  # values in fp32, optionally misaligned

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")]

SPEC_BY_ID = {s.id: s for s in SPECS}
WIDTHS = [127, 3000, 5120, 7168, 14336, 16392]
ROWS = [1, 37, 1500]


def _grads(fn, inputs, upstream):
    leaves = [t.detach().clone().requires_grad_(True) for t in inputs]
    out = fn(*leaves)
    return [out.detach(), *torch.autograd.grad(out, leaves, upstream.to(out.dtype))]


def _check(spec_id, fn, ref, inputs, dtype):
    upstream = _rand(inputs[0].shape, dtype, 99)
    got = _grads(fn, inputs, upstream)
    want = _grads(ref, [t.double() for t in inputs], upstream.double())
    eager = _grads(ref, inputs, upstream)
    rtol, _ = SPEC_BY_ID[spec_id].tolerance(dtype)
    for name, g, w, e in zip(["y", "dx", "dweight", "dbias"], got, want, eager):
        assert g.dtype == dtype and g.shape == w.shape
        assert torch.isfinite(g).all(), name
        err = float((g.double() - w).norm())
        eager_err = float((e.double() - w).norm())
        # within the spec's tolerance, or no further from float64 than twice eager's own error
        assert err <= max(rtol * float(w.norm()), 2 * eager_err) + 1e-12, (name, err, eager_err)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("rows", ROWS)
@pytest.mark.parametrize("cols", WIDTHS)
@pytest.mark.parametrize("kind", ["rms_norm", "layer_norm"])
def test_fused_norm_backward_matches_fp64(kind, cols, rows, dtype):
    x = _rand((rows, cols), dtype, 1, 1.0, 0.5)
    w = _rand((cols,), dtype, 2, 0.1, 1.0)
    if kind == "rms_norm":
        _check("cuda.rms_norm", lambda x, w: norms.rms_norm(x, cols, w, 1e-6),
               lambda x, w: F.rms_norm(x, (cols,), w, 1e-6), [x, w], dtype)
    else:
        b = _rand((cols,), dtype, 3, 0.1)
        _check("cuda.layer_norm", lambda x, w, b: norms.layer_norm(x, cols, w, b),
               lambda x, w, b: F.layer_norm(x, (cols,), w, b), [x, w, b], dtype)


@pytest.mark.parametrize("cols", [3000, 5120])
def test_fused_norm_backward_misaligned_rows_take_the_scalar_kernel(cols):
    x = _rand((65, cols), torch.bfloat16, 4, 1.0, 0.5, aligned=False)
    w = _rand((cols,), torch.bfloat16, 5, 0.1, 1.0, aligned=False)
    b = _rand((cols,), torch.bfloat16, 6, 0.1, aligned=False)
    _check("cuda.layer_norm", lambda x, w, b: norms.layer_norm(x, cols, w, b),
           lambda x, w, b: F.layer_norm(x, (cols,), w, b), [x, w, b], torch.bfloat16)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_fused_norm_backward_is_bitwise_repeatable(dtype):
    x = _rand((3001, 5120), dtype, 7, 1.0, 0.5)
    w, b = _rand((5120,), dtype, 8, 0.1, 1.0), _rand((5120,), dtype, 9, 0.1)
    dy = _rand((3001, 5120), dtype, 10)
    first, second = (_grads(lambda x, w, b: norms.layer_norm(x, 5120, w, b), [x, w, b], dy)
                     for _ in range(2))
    for a, c in zip(first, second):
        assert torch.equal(a, c)
