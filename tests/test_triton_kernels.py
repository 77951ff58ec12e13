"""Triton reference kernels against float64 PyTorch: values, gradients, edge cases, errors.

On a machine without CUDA the kernels run in Triton's CPU interpreter, so CPU shapes stay
small; the `gpu` tests repeat the matrix at full size (1823x781, 128K vocab, 64K rows).
"""
import math
import os
import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F

from reference_kernels.registry import get_kernel
from reference_kernels.triton import eager
from reference_kernels.triton import _common
from reference_kernels.triton.cross_entropy import cross_entropy
from reference_kernels.triton.gelu import gelu
from reference_kernels.triton.layer_norm import add_layer_norm, layer_norm
from reference_kernels.triton.matmul import matmul
from reference_kernels.triton.rms_norm import add_rms_norm, rms_norm
from reference_kernels.triton.silu import silu
from reference_kernels.triton.softmax import log_softmax, softmax
from reference_kernels.triton.specs import SPECS
from reference_kernels.triton.swiglu import swiglu

# The CPU interpreter evaluates masked-off lanes too (numpy warns about inf/NaN there).
pytestmark = [pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning"),
              pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning"),
              pytest.mark.filterwarnings("ignore:divide by zero encountered:RuntimeWarning")]
DEV = "cuda" if torch.cuda.is_available() else "cpu"
DTYPES = [torch.float32, torch.float16, torch.bfloat16]
ROWS_CPU = [(1, 1), (1, 7), (7, 127), (1823, 7), (3, 781)]
# 1-wide rows normalise to a constant: their gradients are roundoff (test_one_wide_norms).
ROWS_NORM = ROWS_CPU[1:]
ROWS_GPU = [(1823, 781), (64, 8191), (4, 65521)]


def rel_err(out: torch.Tensor, ref: torch.Tensor) -> float:
    diff = out.double() - ref.double()
    return float(diff.norm() / ref.double().norm().clamp_min(1e-30))


def randn(*shape, dtype=torch.float32, scale=1.0, shift=0.0, seed=0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(shape, generator=g, dtype=torch.float64) * scale + shift).to(DEV, dtype)


def check_against_fp64(kernel_id, fn, ref, args, grad_positions, dtype, seed=1):
    """Forward and input gradients of fn against ref on float64 copies, spec tolerances."""
    rtol, atol = get_kernel(kernel_id).tolerance(dtype)
    leaves = [a.detach().clone().requires_grad_(i in grad_positions)
              if isinstance(a, torch.Tensor) else a for i, a in enumerate(args)]
    ref_leaves = [a.detach().double().requires_grad_(i in grad_positions)
                  if isinstance(a, torch.Tensor) and a.is_floating_point() else a
                  for i, a in enumerate(args)]
    outs, ref_outs = fn(*leaves), ref(*ref_leaves)
    outs = outs if isinstance(outs, tuple) else (outs,)
    ref_outs = ref_outs if isinstance(ref_outs, tuple) else (ref_outs,)
    g = torch.Generator().manual_seed(seed)
    ups = [torch.randn(o.shape, generator=g, dtype=torch.float64).to(DEV, o.dtype) for o in outs]
    for o, r in zip(outs, ref_outs):
        assert o.dtype == dtype and o.shape == r.shape
        assert_close_to_fp64(o, r, rtol, atol)
    grads = torch.autograd.grad(outs, [leaves[i] for i in grad_positions], ups)
    ref_grads = torch.autograd.grad(ref_outs, [ref_leaves[i] for i in grad_positions],
                                    [u.double() for u in ups])
    for gr, r in zip(grads, ref_grads):
        assert_close_to_fp64(gr, r, rtol, atol)


def assert_close_to_fp64(out, ref, rtol, atol):
    """||out - ref|| <= rtol ||ref||, or <= twice what rounding ref to out's dtype costs (fp16
    gradients of a mean over many rows are subnormal); atol only for an all-zero ref."""
    out, ref = out.detach(), ref.detach()
    assert torch.isfinite(out).all()
    err = float((out.double() - ref).norm())
    if float(ref.norm()) == 0.0:
        assert float((out.double() - ref).abs().max()) <= atol
        return
    storage = float((ref.to(out.dtype).double() - ref).norm())
    assert err <= max(rtol * float(ref.norm()), 2 * storage), (err, float(ref.norm()), storage)


# ---- hand-worked values ------------------------------------------------------------------

def test_softmax_hand_worked():
    x = torch.tensor([[0.0, math.log(3.0)]], device=DEV)
    # e^0 = 1, e^ln3 = 3, sum 4 -> [1/4, 3/4]
    torch.testing.assert_close(softmax(x).cpu(), torch.tensor([[0.25, 0.75]]))
    torch.testing.assert_close(log_softmax(x).cpu(), torch.tensor([[math.log(0.25),
                                                                     math.log(0.75)]]))


def test_layer_norm_and_rms_norm_hand_worked():
    x = torch.tensor([[1.0, 2.0, 3.0, 4.0]], device=DEV)
    # mean 2.5, var (2.25 + 0.25 + 0.25 + 2.25)/4 = 1.25, 1/sqrt(1.25) = 0.894427
    expected = torch.tensor([[-1.5, -0.5, 0.5, 1.5]]) * 0.894427
    torch.testing.assert_close(layer_norm(x, (4,), eps=0.0).cpu(), expected)
    # rms of [3, 4] = sqrt((9 + 16)/2) = 3.535534 -> [0.848528, 1.131371]; weight [1, 2]
    y = rms_norm(torch.tensor([[3.0, 4.0]], device=DEV), (2,), torch.tensor([1.0, 2.0], device=DEV),
                 eps=0.0)
    torch.testing.assert_close(y.cpu(), torch.tensor([[0.848528, 2.262742]]))


def test_fused_residual_norms_hand_worked():
    x, r = torch.tensor([[1.0, 1.0]], device=DEV), torch.tensor([[2.0, 3.0]], device=DEV)
    # h = [3, 4]; rms(h) = 3.535534 -> [0.848528, 1.131371]; layer_norm(h) = [-1, 1]
    normed, h = add_rms_norm(x, r, (2,), eps=0.0)
    torch.testing.assert_close(h.cpu(), torch.tensor([[3.0, 4.0]]))
    torch.testing.assert_close(normed.cpu(), torch.tensor([[0.848528, 1.131371]]))
    normed, h = add_layer_norm(x, r, 2, eps=0.0)
    torch.testing.assert_close(normed.cpu(), torch.tensor([[-1.0, 1.0]]))


def test_activations_hand_worked():
    one = torch.tensor([1.0], device=DEV)
    # gelu(1) = 0.5*(1 + erf(1/sqrt 2)) = 0.841345; tanh form 0.841192
    torch.testing.assert_close(gelu(one).cpu(), torch.tensor([0.841345]))
    torch.testing.assert_close(gelu(one, "tanh").cpu(), torch.tensor([0.841192]))
    # silu(1) = 1/(1 + e^-1) = 0.731059; swiglu(1, 2) = 2 * 0.731059
    torch.testing.assert_close(silu(one).cpu(), torch.tensor([0.731059]))
    torch.testing.assert_close(swiglu(one, 2 * one).cpu(), torch.tensor([1.462117]))


def test_cross_entropy_hand_worked():
    logits = torch.tensor([[0.0, math.log(3.0)], [5.0, 1.0]], device=DEV, requires_grad=True)
    target = torch.tensor([1, -100], device=DEV)
    loss = cross_entropy(logits, target)
    # row 0: p = [1/4, 3/4], loss -ln(3/4) = 0.287682; row 1 ignored -> mean over 1 row
    torch.testing.assert_close(loss.cpu(), torch.tensor(0.287682))
    loss.backward()
    # d/dlogits = (p - onehot)/1 = [0.25, -0.25]; the ignored row gets 0
    torch.testing.assert_close(logits.grad.cpu(), torch.tensor([[0.25, -0.25], [0.0, 0.0]]))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_matmul_hand_worked(dtype):
    a = torch.tensor([[1.0, 2.0], [3.0, 4.0]], device=DEV, dtype=dtype)
    b = torch.tensor([[5.0, 6.0], [7.0, 8.0]], device=DEV, dtype=dtype)
    # [1*5+2*7, 1*6+2*8; 3*5+4*7, 3*6+4*8] = [19, 22; 43, 50], exact in fp16/bf16
    assert torch.equal(matmul(a, b).float().cpu(), torch.tensor([[19.0, 22.0], [43.0, 50.0]]))


# ---- shapes x dtypes against float64 -------------------------------------------------------

@pytest.mark.parametrize("shape", ROWS_CPU)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", ["softmax", "log_softmax"])
def test_softmax_family(name, shape, dtype):
    fn = softmax if name == "softmax" else log_softmax
    check_against_fp64(f"triton.{name}", fn, getattr(eager, name),
                       [randn(*shape, dtype=dtype, scale=2.0)], (0,), dtype)


@pytest.mark.parametrize("shape", ROWS_NORM)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("affine", [True, False])
def test_layer_norm(shape, dtype, affine):
    n = shape[-1]
    w = randn(n, dtype=dtype, scale=0.5, shift=1.0, seed=2) if affine else None
    b = randn(n, dtype=dtype, scale=0.1, seed=3) if affine else None
    check_against_fp64("triton.layer_norm", layer_norm, eager.layer_norm,
                       [randn(*shape, dtype=dtype, scale=2.0, shift=0.5), (n,), w, b, 1e-5],
                       (0, 2, 3) if affine else (0,), dtype)


@pytest.mark.parametrize("shape", ROWS_NORM)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("weighted", [True, False])
def test_rms_norm(shape, dtype, weighted):
    n = shape[-1]
    w = randn(n, dtype=dtype, scale=0.5, shift=1.0, seed=2) if weighted else None
    check_against_fp64("triton.rms_norm", rms_norm, eager.rms_norm,
                       [randn(*shape, dtype=dtype, scale=2.0), (n,), w, 1e-6],
                       (0, 2) if weighted else (0,), dtype)


@pytest.mark.parametrize("shape", ROWS_NORM)
@pytest.mark.parametrize("dtype", DTYPES)
def test_add_layer_norm(shape, dtype):
    n = shape[-1]
    args = [randn(*shape, dtype=dtype), randn(*shape, dtype=dtype, seed=4), (n,),
            randn(n, dtype=dtype, shift=1.0, seed=2), randn(n, dtype=dtype, seed=3), 1e-5]
    check_against_fp64("triton.add_layer_norm", add_layer_norm, eager.add_layer_norm, args,
                       (0, 1, 3, 4), dtype)


@pytest.mark.parametrize("shape", ROWS_NORM)
@pytest.mark.parametrize("dtype", DTYPES)
def test_add_rms_norm(shape, dtype):
    n = shape[-1]
    args = [randn(*shape, dtype=dtype), randn(*shape, dtype=dtype, seed=4), (n,),
            randn(n, dtype=dtype, shift=1.0, seed=2), 1e-6]
    check_against_fp64("triton.add_rms_norm", add_rms_norm, eager.add_rms_norm, args,
                       (0, 1, 3), dtype)


@pytest.mark.parametrize("shape", [(1,), (7,), (127,), (7, 127), (3, 5, 781), (40009,)])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", ["gelu-none", "gelu-tanh", "silu", "swiglu"])
def test_elementwise(name, shape, dtype):
    x = randn(*shape, dtype=dtype, scale=3.0)
    if name == "swiglu":
        args, pos = [x, randn(*shape, dtype=dtype, scale=2.0, seed=5)], (0, 1)
        check_against_fp64("triton.swiglu", swiglu, eager.swiglu, args, pos, dtype)
    elif name == "silu":
        check_against_fp64("triton.silu", silu, eager.silu, [x], (0,), dtype)
    else:
        approx = name.split("-")[1]
        check_against_fp64("triton.gelu", lambda t: gelu(t, approx),
                           lambda t: eager.gelu(t, approx), [x], (0,), dtype)


@pytest.mark.parametrize("shape", [(1, 1), (1, 7), (7, 127), (5, 781), (2, 20011)])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_cross_entropy(shape, dtype, reduction):
    rows, vocab = shape
    target = torch.randint(0, vocab, (rows,), generator=torch.Generator().manual_seed(0))
    target[1::3] = -100
    check_against_fp64("triton.cross_entropy",
                       lambda x, t: cross_entropy(x, t, reduction=reduction),
                       lambda x, t: eager.cross_entropy(x, t, reduction=reduction),
                       [randn(*shape, dtype=dtype, scale=3.0), target.to(DEV)], (0,), dtype)


@pytest.mark.parametrize("mkn", [(1, 1, 1), (7, 7, 7), (127, 33, 65), (67, 781, 45)])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("b_transposed", [False, True])
def test_matmul(mkn, dtype, b_transposed):
    m, k, n = mkn
    a = randn(m, k, dtype=dtype)
    b = randn(n, k, dtype=dtype, seed=1).t() if b_transposed else randn(k, n, dtype=dtype, seed=1)
    rtol, atol = get_kernel("triton.matmul").tolerance(dtype)
    ref = a.double() @ b.double()
    out = matmul(a, b)
    assert out.dtype == dtype and out.shape == (m, n)
    assert (out.double() - ref).norm() <= rtol * ref.norm() + atol * math.sqrt(out.numel())


# ---- gradcheck in float64 ------------------------------------------------------------------

def _x64(*shape, seed=0):
    return randn(*shape, dtype=torch.float64, seed=seed).requires_grad_()


GRADCHECKS = {
    "softmax-dim1": (lambda x: softmax(x, 1), lambda: (_x64(2, 3, 4),)),
    "log_softmax": (lambda x: log_softmax(x), lambda: (_x64(3, 7),)),
    "layer_norm": (lambda x, w, b: layer_norm(x, 7, w, b), lambda: (_x64(3, 7), _x64(7, seed=1),
                                                                   _x64(7, seed=2))),
    "rms_norm": (lambda x, w: rms_norm(x, [7], w, 1e-6), lambda: (_x64(3, 7), _x64(7, seed=1))),
    "add_layer_norm": (lambda x, r, w: add_layer_norm(x, r, (7,), w),
                       lambda: (_x64(3, 7), _x64(3, 7, seed=1), _x64(7, seed=2))),
    "add_rms_norm": (lambda x, r: add_rms_norm(x, r, (7,), eps=1e-6),
                     lambda: (_x64(3, 7), _x64(3, 7, seed=1))),
    "gelu-tanh": (lambda x: gelu(x, "tanh"), lambda: (_x64(3, 7),)),
    "gelu": (gelu, lambda: (_x64(3, 7),)),
    "silu": (silu, lambda: (_x64(3, 7),)),
    "swiglu": (swiglu, lambda: (_x64(3, 7), _x64(3, 7, seed=1))),
    "cross_entropy": (lambda x: cross_entropy(x, torch.tensor([1, -100, 6, 0], device=DEV)),
                      lambda: (_x64(4, 7),)),
}


@pytest.mark.parametrize("name", sorted(GRADCHECKS))
def test_gradcheck_float64(name):
    fn, make = GRADCHECKS[name]
    assert torch.autograd.gradcheck(fn, make(), eps=1e-6, atol=1e-5, rtol=1e-3)


# ---- layouts, dims, special values ---------------------------------------------------------

def test_softmax_other_dim_and_non_contiguous_input():
    x = randn(6, 5, 9)
    torch.testing.assert_close(softmax(x, dim=1), torch.softmax(x, 1))
    xt = x.transpose(1, 2)  # last dim has stride 9: copied once, result still correct
    torch.testing.assert_close(log_softmax(xt), torch.log_softmax(xt, -1))
    torch.testing.assert_close(softmax(torch.tensor(2.0, device=DEV)).cpu(), torch.tensor(1.0))


@pytest.mark.parametrize("layout", ["3-D", "transposed", "channels_last"])
def test_elementwise_kernels_keep_any_layout(layout):
    # The elementwise launchers walk a contiguous tensor as it is and copy any other once; the
    # outputs and gradients keep the input's shape (float32 against float32 eager).
    x, b = randn(3, 5, 7, 9, seed=2), randn(3, 5, 7, 9, seed=3)
    if layout == "transposed":
        x, b = x.transpose(1, 3), b.transpose(1, 3)
    elif layout == "channels_last":
        x, b = (t.contiguous(memory_format=torch.channels_last) for t in (x, b))
    for fn, ref in ((gelu, F.gelu), (silu, F.silu), (swiglu, lambda p, q: F.silu(p) * q)):
        args = (x, b)[:2 if fn is swiglu else 1]
        leaves = [a.detach().clone().requires_grad_(True) for a in args]
        refs = [a.detach().clone().requires_grad_(True) for a in args]
        out, want = fn(*leaves), ref(*refs)
        assert out.shape == want.shape
        torch.testing.assert_close(out, want)
        grads = torch.autograd.grad(out.sum(), leaves)
        torch.testing.assert_close(grads, torch.autograd.grad(want.sum(), refs))


def test_row_stride_views_are_read_in_place():
    wide = randn(5, 200)
    x = wide[:, 10:137]  # rows 200 apart, unit column stride: no copy needed
    torch.testing.assert_close(softmax(x), torch.softmax(x, -1))
    torch.testing.assert_close(layer_norm(x, (127,)), F.layer_norm(x, (127,)))
    torch.testing.assert_close(rms_norm(x, (127,), eps=1e-6), F.rms_norm(x, (127,), eps=1e-6))


def test_masked_softmax_rows_and_fully_masked_row():
    x = randn(3, 40009)  # longer than one block: the online-softmax path
    x[0, 5:] = float("-inf")
    x[1, ::2] = float("-inf")
    x[2] = float("-inf")  # torch gives NaN for an all -inf row; so do we
    y, ref = softmax(x), torch.softmax(x, -1)
    torch.testing.assert_close(y[:2], ref[:2])
    assert torch.isnan(y[2]).all() and torch.isnan(ref[2]).all()
    torch.testing.assert_close(log_softmax(x[:2]), torch.log_softmax(x[:2], -1))


def test_long_rows_match_single_block_path():
    x = randn(2, 40009, dtype=torch.float64)
    torch.testing.assert_close(softmax(x), torch.softmax(x, -1), rtol=1e-12, atol=1e-15)


def test_layer_norm_multi_dim_shape_bias_only_and_mixed_weight_dtype():
    x = randn(4, 3, 5)
    b = randn(3, 5, seed=1)
    torch.testing.assert_close(layer_norm(x, (3, 5), None, b), F.layer_norm(x, (3, 5), None, b))
    xb = randn(6, 33, dtype=torch.bfloat16).requires_grad_()
    w = randn(33, seed=2).requires_grad_()  # float32 weight, bfloat16 activations
    y = rms_norm(xb, (33,), w, 1e-6)
    assert y.dtype == torch.bfloat16
    y.float().sum().backward()
    assert w.grad.dtype == torch.float32 and xb.grad.dtype == torch.bfloat16


def test_one_wide_norms():
    x, w, b = randn(5, 1), randn(1, seed=1), randn(1, seed=2)
    # one element: x - mean = 0, so layer_norm returns the bias exactly
    assert torch.equal(layer_norm(x, (1,), w, b), b.expand(5, 1))
    # rms of one element is |x|: rms_norm returns sign(x) (eps = 0)
    torch.testing.assert_close(rms_norm(x, (1,), eps=0.0), torch.sign(x))


def test_rms_norm_default_eps_is_dtype_epsilon():
    x = randn(2, 16, dtype=torch.float16) * 1e-3  # small enough for eps to matter
    ref = F.rms_norm(x.double(), (16,), eps=torch.finfo(torch.float16).eps)  # 9.77e-4
    assert rel_err(rms_norm(x, (16,)), ref) < 2e-3
    assert rel_err(rms_norm(x, (16,), eps=1e-9), ref) > 1e-2


def test_add_norm_gradient_through_residual_only():
    x, r = randn(4, 9).requires_grad_(), randn(4, 9, seed=1).requires_grad_()
    _, h = add_rms_norm(x, r, (9,), eps=1e-6)
    h.sum().backward()  # the normed output is unused: only d(h)/d(x) = d(h)/d(r) = 1 flows
    torch.testing.assert_close(x.grad, torch.ones_like(x))
    torch.testing.assert_close(r.grad, torch.ones_like(r))


def test_norm_backward_is_bitwise_deterministic():
    x, w = randn(300, 127).requires_grad_(), randn(127, seed=1).requires_grad_()
    grads = []
    for _ in range(2):
        y = layer_norm(x, (127,), w, None)
        grads.append(torch.autograd.grad(y, (x, w), torch.ones_like(y)))
    assert all(torch.equal(a, b) for a, b in zip(*grads))


def test_cross_entropy_edges():
    logits = randn(4, 11)
    every_row_ignored = torch.full((4,), -100, device=DEV)
    assert torch.isnan(cross_entropy(logits, every_row_ignored))  # 0/0, as torch
    assert torch.isnan(F.cross_entropy(logits, every_row_ignored))
    out_of_range = torch.tensor([1, 2, 11, 0], device=DEV)
    losses = cross_entropy(logits, out_of_range, reduction="none")
    assert torch.isnan(losses[2]) and torch.isfinite(losses[[0, 1, 3]]).all()
    t32 = torch.tensor([1, 2, 3, -1], device=DEV, dtype=torch.int32)
    torch.testing.assert_close(cross_entropy(logits, t32, ignore_index=-1),
                               F.cross_entropy(logits, t32.long(), ignore_index=-1))


@pytest.mark.parametrize("fn", [softmax, silu, lambda x: layer_norm(x, (0,))])
def test_empty_inputs(fn):
    assert fn(torch.empty(3, 0, device=DEV)).shape == (3, 0)


# ---- bad input -----------------------------------------------------------------------------

@pytest.mark.parametrize("call", [
    lambda: softmax(torch.ones(3, 4, dtype=torch.int32, device=DEV)),
    lambda: silu(torch.ones(3, dtype=torch.complex64, device=DEV)),
    lambda: matmul(randn(2, 2), randn(2, 2)),  # float32: the matmul is fp16/bf16 only
    lambda: cross_entropy(randn(2, 3), torch.tensor([0.0, 1.0], device=DEV)),
    lambda: swiglu(randn(3), randn(3, dtype=torch.float16)),
    lambda: softmax([1.0, 2.0]),
])
def test_unsupported_types_raise_type_error(call):
    with pytest.raises(TypeError, match="softmax|silu|matmul|cross_entropy|swiglu"):
        call()


@pytest.mark.parametrize("call, match", [
    (lambda: layer_norm(randn(2, 8), (4,)), "normalized_shape"),
    (lambda: rms_norm(randn(2, 8), (8,), randn(4)), "weight has shape"),
    (lambda: add_layer_norm(randn(2, 8), randn(3, 8), (8,)), "residual"),
    (lambda: swiglu(randn(2, 3), randn(3, 2)), "must match"),
    (lambda: gelu(randn(3), "fast"), "approximate"),
    (lambda: softmax(randn(2, 3), dim=2), "out of range"),
    (lambda: cross_entropy(randn(2, 3, 4), torch.zeros(2, 4, dtype=torch.long)), "rows, vocab"),
    (lambda: cross_entropy(randn(2, 3), torch.zeros(2, dtype=torch.long), reduction="avg"),
     "reduction"),
    (lambda: matmul(randn(2, 3, dtype=torch.float16), randn(2, 3, dtype=torch.float16)), "K"),
])
def test_bad_shapes_and_options_raise_value_error(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_cpu_tensor_without_interpreter_is_refused(monkeypatch):
    monkeypatch.setattr(_common, "INTERPRETED", False)
    with pytest.raises(ValueError, match="TRITON_INTERPRET=1"):
        softmax(torch.ones(2, 2))


# ---- registry entries ----------------------------------------------------------------------

def test_specs_load_and_mirror_their_references():
    assert len({s.id for s in SPECS}) == len(SPECS) == 11
    for spec in SPECS:
        assert spec.id.startswith("triton.") and spec.capability.backend == "triton"
        assert spec.load().__name__ == spec.load_reference().__name__ == spec.id.split(".")[1]
        assert spec.replaces_aten or spec.replaces_patterns
        rtol_fp32, rtol_bf16 = spec.tolerance("float32")[0], spec.tolerance("bfloat16")[0]
        assert rtol_bf16 <= 1e-2 and (spec.id == "triton.matmul" or rtol_fp32 <= 1e-5)


def test_specs_module_does_not_import_triton():
    code = ("import sys, reference_kernels.triton.specs as s; "
            "assert 'triton' not in sys.modules, 'triton imported'; print(len(s.SPECS))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "11"


# ---- GPU: the full-size matrix -------------------------------------------------------------

@pytest.mark.parametrize("shape", ROWS_GPU)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", ["softmax", "log_softmax", "layer_norm", "rms_norm",
                                  "add_layer_norm", "add_rms_norm"])
@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_rowwise_full_size_gpu(name, shape, dtype):
    n = shape[-1]
    x, r = randn(*shape, dtype=dtype, scale=2.0), randn(*shape, dtype=dtype, seed=4)
    w, b = randn(n, dtype=dtype, shift=1.0, seed=2), randn(n, dtype=dtype, seed=3)
    table = {
        "softmax": ([x], (0,)), "log_softmax": ([x], (0,)),
        "layer_norm": ([x, (n,), w, b, 1e-5], (0, 2, 3)), "rms_norm": ([x, (n,), w, 1e-6], (0, 2)),
        "add_layer_norm": ([x, r, (n,), w, b, 1e-5], (0, 1, 3, 4)),
        "add_rms_norm": ([x, r, (n,), w, 1e-6], (0, 1, 3)),
    }
    args, pos = table[name]
    spec = get_kernel(f"triton.{name}")
    check_against_fp64(spec.id, spec.load(), spec.load_reference(), args, pos, dtype)


@pytest.mark.parametrize("shape", [(1823, 781), (64, 128256), (3, 300007)])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cross_entropy_large_vocab_gpu(shape, dtype):
    target = torch.randint(0, shape[1], (shape[0],), device=DEV)
    target[::5] = -100
    check_against_fp64("triton.cross_entropy", cross_entropy, eager.cross_entropy,
                       [randn(*shape, dtype=dtype, scale=3.0), target], (0,), dtype)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_matmul_autotuned_gpu(dtype):
    a, b = randn(1823, 781, dtype=dtype), randn(1023, 781, dtype=dtype, seed=1).t()
    rtol, _ = get_kernel("triton.matmul").tolerance(dtype)
    assert rel_err(matmul(a, b), a.double() @ b.double()) <= rtol


# ---- launch settings (benchmarks/tune_rowwise.py measured them on an H200) ---------------

def test_norm_launch_settings_hand_worked():
    from reference_kernels.triton.norm import BwdConfig, FwdConfig, bwd_config, fwd_config

    # 8192 columns, one row per program: fp32 tiles of 32 KiB get 16 warps; a bf16 tile of
    # 16 KiB gets what 8192 * 2 / 4 = 4096 fp32 elements get, 8 warps.
    assert fwd_config(16384, 8192, torch.float32) == FwdConfig(1, 16)
    assert fwd_config(16384, 8192, torch.bfloat16) == FwdConfig(1, 8)
    # under MANY_ROWS (4096) rows the forward is latency-bound: warps by elements again
    assert fwd_config(64, 8192, torch.bfloat16) == FwdConfig(1, 16)
    # backward: 16 // 16 = 1 program per SM, 3 cp.async stages; layer_norm warps by bytes
    # (bf16: 8), rms_norm by elements (16)
    assert bwd_config(16384, 8192, torch.float32, is_rms=False) == BwdConfig(1, 16, 3)
    assert bwd_config(16384, 8192, torch.bfloat16, is_rms=False) == BwdConfig(1, 8, 3)
    assert bwd_config(16384, 8192, torch.float16, is_rms=True) == BwdConfig(1, 16, 3)
    # stages shrink to what shared memory holds (227 KiB - 16 KiB = 216 KiB for buffers):
    # bf16 32768 columns, x + dy = 128 KiB per stage: 2 stages (one buffered block), not 3
    assert bwd_config(4096, 32768, torch.bfloat16, is_rms=True).stages == 2
    # fp32 32768 columns fused (x, dy, dres): 384 KiB per stage: no pipelining
    assert bwd_config(4096, 32768, torch.float32, is_rms=False, fused=True).stages == 1
    # a 64 KiB device: 64 - 16 = 48 KiB of buffers hold one 32 KiB stage (bf16 8192: x + dy)
    assert bwd_config(16384, 8192, torch.bfloat16, False, smem_bytes=64 * 1024).stages == 2


@pytest.mark.parametrize("is_rms", [False, True])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("shape", [(1, 7), (37, 300), (300, 1024)])
def test_norm_backward_pipelining_is_bitwise_neutral(shape, dtype, is_rms):
    # cp.async stages move loads, not arithmetic: pipelined and plain loops give the same bits.
    from reference_kernels.triton.norm import BwdConfig, norm_bwd, norm_fwd

    x, dy = randn(*shape, dtype=dtype), randn(*shape, dtype=dtype, seed=3)
    w = randn(shape[-1], dtype=dtype, seed=2)
    b = None if is_rms else randn(shape[-1], dtype=dtype, seed=4)
    _, _, mean, rstd = norm_fwd(x, None, w, b, 1e-5, is_rms)
    runs = [norm_bwd(x, w, mean, rstd, dy, None, True, not is_rms, is_rms,
                     BwdConfig(1, 4, stages)) for stages in (3, 1)]
    for pipelined, plain in zip(*runs):
        if pipelined is not None:
            assert torch.equal(pipelined, plain)


@pytest.mark.parametrize("is_rms", [False, True])
def test_norm_backward_round_robin_row_blocks(is_rms):
    # 1001 rows of 257 columns: 512-column blocks of 8 rows, 126 blocks (the last holds row
    # 1000 alone) dealt round-robin to the programs (4 in the interpreter, SMs on a GPU).
    n = 257
    w = randn(n, scale=0.5, shift=1.0, seed=2)
    if is_rms:
        check_against_fp64("triton.rms_norm", rms_norm, eager.rms_norm,
                           [randn(1001, n, scale=2.0), (n,), w, 1e-6], (0, 2), torch.float32)
    else:
        check_against_fp64("triton.layer_norm", layer_norm, eager.layer_norm,
                           [randn(1001, n, scale=2.0, shift=0.5), (n,), w,
                            randn(n, scale=0.1, seed=3), 1e-5], (0, 2, 3), torch.float32)


def test_sum_tile_hand_worked():
    from reference_kernels.triton.norm import _sum_tile

    assert _sum_tile(132) == (256, 64)  # an H200's 132 partial rows: 16384 // 256 = 64 columns
    assert _sum_tile(300) == (256, 64)  # more than 256 rows: two tiles down the column
    assert _sum_tile(7) == (8, 1024)  # 16384 // 8 = 2048, capped at 1024 columns
    assert _sum_tile(1) == (1, 1024)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("programs", [1, 7, 132, 300])
@pytest.mark.parametrize("n_cols", [1, 7, 127, 781])
def test_sum_parts_against_fp64(n_cols, programs, dtype):
    from reference_kernels.triton.norm import _sum_partials

    parts = randn(2, programs, n_cols, dtype=dtype, scale=3.0, shift=1.0)
    # n_elements past TRITON_SUM_MIN_ELEMENTS: the Triton sum on a GPU too
    out = _sum_partials(parts, programs, n_elements=1 << 40)
    assert out.shape == (2, n_cols) and out.dtype == dtype
    ref = parts.double().sum(1)
    # any order of n additions errs by at most n * u * sum|x| (u = 2^-24 fp32, 2^-53 fp64)
    unit = 2.0 ** (-53 if dtype == torch.float64 else -24)
    bound = programs * unit * parts.double().abs().sum(1)
    assert ((out.double() - ref).abs() <= bound).all()
    assert torch.equal(out, _sum_partials(parts, programs, n_elements=1 << 40))


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_norm_backward_sum_paths_agree(monkeypatch):
    # the two partial-row sums (torch's below TRITON_SUM_MIN_ELEMENTS, _sum_parts above)
    # differ only in summation order
    from reference_kernels.triton import norm

    x, dy = randn(4096, 1024, dtype=torch.bfloat16), randn(4096, 1024, dtype=torch.bfloat16, seed=3)
    w = randn(1024, dtype=torch.bfloat16, seed=2)
    _, _, mean, rstd = norm.norm_fwd(x, None, w, w, 1e-5, False)
    runs = []
    for threshold in (0, 1 << 40):
        monkeypatch.setattr(norm, "TRITON_SUM_MIN_ELEMENTS", threshold)
        runs.append(norm.norm_bwd(x, w, mean, rstd, dy, None, True, True, False))
    assert torch.equal(runs[0][0], runs[1][0])  # dx does not depend on the sum
    for a, b in zip(runs[0][1:], runs[1][1:]):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-3)


def test_cross_entropy_launch_settings_hand_worked():
    from reference_kernels.triton.cross_entropy import FwdConfig, fwd_config

    # 16 KiB blocks: 8192 bf16 or 4096 fp32 logits, 16384 B / (32 threads * 128 B) = 4 warps;
    # 16-byte loads: 16 / 2 = 8 bf16, 16 / 4 = 4 fp32 logits each; evict-first for 16-bit only.
    assert fwd_config(8192, torch.bfloat16) == FwdConfig(8192, 4, 8, evict_first=True)
    assert fwd_config(8192, torch.float32) == FwdConfig(4096, 4, 4, evict_first=False)
    # longer rows loop over the blocks; a 3-column row is one 4-column block, 1 warp
    assert fwd_config(50257, torch.float32) == FwdConfig(4096, 4, 4, evict_first=False)
    assert fwd_config(3, torch.bfloat16) == FwdConfig(4, 1, 4, evict_first=True)


def test_softmax_launch_settings_hand_worked():
    from reference_kernels.triton.softmax import BlockConfig, block_config

    # 127 columns -> 128-column blocks: one warp, 1024 // 128 = 8 rows per program
    assert block_config(32768, 127) == BlockConfig(8, 1)
    assert block_config(3, 127) == BlockConfig(4, 1)  # next power of two of 3 rows
    # 1024 columns: 4096 // 1024 = 4 rows per program, 4 * 1024 elements -> 8 warps
    assert block_config(32768, 1024) == BlockConfig(4, 8)


@pytest.mark.parametrize("n_cols", [1, 7, 127, 781, 8192, 8193])
@pytest.mark.parametrize("config", [(4096, 4, 8, True), (8192, 8, 4, False), (1024, 2, 16, True)])
def test_cross_entropy_forward_launch_settings_agree(config, n_cols):
    # Any block, warp count, load width and cache hint gives the same loss up to rounding. A GPU
    # takes the one-program-per-row path (which reads the config) from SMs * 8 rows.
    from reference_kernels.triton.cross_entropy import FwdConfig, cross_entropy_fwd

    n_rows = 5 if DEV == "cpu" else torch.cuda.get_device_properties(DEV).multi_processor_count * 8
    logits = randn(n_rows, n_cols, dtype=torch.float32) * 4
    target = torch.randint(0, n_cols, (n_rows,), device=logits.device)
    ref = torch.nn.functional.cross_entropy(logits.double(), target, reduction="none")
    block, warps, group, evict_first = config
    losses, _ = cross_entropy_fwd(logits, target, -100,
                                  FwdConfig(block, warps, min(group, block), evict_first))
    torch.testing.assert_close(losses.double(), ref, rtol=1e-5, atol=1e-5)
