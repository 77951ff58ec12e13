"""The CUDA C++ kernels' gradients (backward.cu, pointwise.cu, cross_entropy.cu, autograd.cpp),
on a GPU.

Every differentiable kernel against float64 autograd over odd shapes (warp and block rows,
scalar and vector accesses, many rows so the parameter gradients sum over several chunks),
gradients asked of a subset of the inputs, and torch.compile: a function calling the kernels
traces with no graph break, forward and backward.
"""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from reference_kernels.cuda import cross_entropy as cuda_ce
from reference_kernels.cuda import norms, pointwise
from reference_kernels.cuda import softmax as cuda_softmax
from reference_kernels.cuda.specs import SPECS

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")]

SPEC_BY_ID = {s.id: s for s in SPECS}
DTYPES = [torch.float32, torch.bfloat16, torch.float64]
# (1, 7) scalar warp rows; (7, 127) odd; (3, 2048) block rows, vectors; (2, 3, 64) leading dims;
# (5, 20000) long rows; (4099, 96) many rows: the parameter gradients sum several row chunks.
SHAPES = [(1, 7), (7, 127), (3, 2048), (2, 3, 64), (5, 20000), (4099, 96)]


def _rand(shape, dtype, seed, scale=1.0, shift=0.0):
    gen = torch.Generator(device="cuda").manual_seed(seed)
    return (torch.randn(shape, generator=gen, device="cuda") * scale + shift).to(dtype)


def _grads(fn, inputs, upstream, wrt=None):
    """Outputs, then the gradients of the inputs (of those at `wrt` positions) for one upstream
    gradient per output (a tensor, or a tuple of them for several outputs; None: unused)."""
    leaves = [t.detach().clone().requires_grad_(i in (wrt or range(len(inputs))))
              if t.is_floating_point() else t for i, t in enumerate(inputs)]
    outs = fn(*leaves)
    outs = outs if isinstance(outs, tuple) else (outs,)
    ups = upstream if isinstance(upstream, tuple) else (upstream,)
    used = [(o, u.to(o.dtype)) for o, u in zip(outs, ups) if u is not None]
    targets = [leaves[i] for i in (wrt or range(len(inputs)))]
    grads = torch.autograd.grad([o for o, _ in used], targets, [u for _, u in used])
    return [o.detach() for o in outs] + list(grads)


def _errors(got, want):
    """(||got - want||, max |got - want|) in float64."""
    diff = got.double() - want.double()
    return float(diff.norm()), float(diff.abs().max()) if diff.numel() else 0.0


def _assert_close(got, want, eager, tol, what):
    """Within the spec's tolerance (rtol on the error norm, atol scaled by max |want|: a
    gradient out of a row reduction carries its row's magnitude), or no further from the
    float64 result than twice eager PyTorch's own error in the same dtype (a 16-bit softmax
    gradient inherits the rounding of the 16-bit output it is computed from)."""
    rtol, atol = tol
    assert torch.isfinite(got).all(), f"{what}: non-finite values"
    norm_err, max_err = _errors(got, want)
    eager_norm_err, eager_max_err = _errors(eager, want)
    scale = max(1.0, float(want.abs().max())) if want.numel() else 1.0
    assert norm_err <= max(2 * rtol * float(want.double().norm()), 2 * eager_norm_err) + 1e-12, \
        f"{what}: error norm {norm_err:.3g}, eager {eager_norm_err:.3g}"
    assert max_err <= max(2 * atol * scale, 2 * eager_max_err), \
        f"{what}: max error {max_err:.3g}, eager {eager_max_err:.3g}"


def _double(u):
    if isinstance(u, tuple):
        return tuple(None if t is None else t.double() for t in u)
    return u.double()


def _check(spec_id, fn, ref, inputs, dtype, seed, upstream=None, wrt=None):
    if upstream is None:
        upstream = _rand(inputs[0].shape, dtype, seed + 100)
    got = _grads(fn, inputs, upstream, wrt)
    want = _grads(ref, [t.double() if t.is_floating_point() else t for t in inputs],
                  _double(upstream), wrt)
    eager = _grads(ref, inputs, upstream, wrt)
    tol = SPEC_BY_ID[spec_id].tolerance(dtype)
    for k, (g, w, e) in enumerate(zip(got, want, eager)):
        assert g.dtype == dtype and g.shape == w.shape
        _assert_close(g, w, e, tol, f"{spec_id} output/grad {k}")


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("log", [False, True])
def test_softmax_gradients(shape, dtype, log):
    fn = cuda_softmax.log_softmax if log else cuda_softmax.softmax
    ref = (lambda x: torch.log_softmax(x, -1)) if log else (lambda x: torch.softmax(x, -1))
    _check("cuda.log_softmax" if log else "cuda.softmax", fn, ref,
           [_rand(shape, dtype, 1, 2.0)], dtype, 1)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("affine", [True, False])
def test_rms_norm_gradients(shape, dtype, affine):
    n = shape[-1]
    x = _rand(shape, dtype, 2, 1.0, 0.5)
    if affine:
        inputs = [x, _rand((n,), dtype, 3, 0.1, 1.0)]
        fn = lambda x, w: norms.rms_norm(x, n, w, 1e-6)  # noqa: E731
        ref = lambda x, w: F.rms_norm(x, (n,), w, 1e-6)  # noqa: E731
    else:
        inputs = [x]
        fn = lambda x: norms.rms_norm(x, n, None, 1e-6)  # noqa: E731
        ref = lambda x: F.rms_norm(x, (n,), None, 1e-6)  # noqa: E731
    _check("cuda.rms_norm", fn, ref, inputs, dtype, 2)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("params", ["weight+bias", "weight", "none"])
def test_layer_norm_gradients(shape, dtype, params):
    n = shape[-1]
    x = _rand(shape, dtype, 4, 1.0, 0.5)
    w, b = _rand((n,), dtype, 5, 0.1, 1.0), _rand((n,), dtype, 6, 0.1)
    if params == "weight+bias":
        inputs, fn, ref = [x, w, b], (lambda x, w, b: norms.layer_norm(x, n, w, b)), \
            (lambda x, w, b: F.layer_norm(x, (n,), w, b))
    elif params == "weight":
        inputs, fn, ref = [x, w], (lambda x, w: norms.layer_norm(x, n, w)), \
            (lambda x, w: F.layer_norm(x, (n,), w))
    else:
        inputs, fn, ref = [x], (lambda x: norms.layer_norm(x, n)), \
            (lambda x: F.layer_norm(x, (n,)))
    _check("cuda.layer_norm", fn, ref, inputs, dtype, 4)


ACTIVATIONS = {
    "gelu": (pointwise.gelu, F.gelu),
    "gelu_tanh": (lambda x: pointwise.gelu(x, "tanh"), lambda x: F.gelu(x, approximate="tanh")),
    "silu": (pointwise.silu, F.silu),
}


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", SHAPES + [(3, 5, 7)])
@pytest.mark.parametrize("act", list(ACTIVATIONS))
def test_activation_gradients(shape, dtype, act):
    fn, ref = ACTIVATIONS[act]
    spec = "cuda.silu" if act == "silu" else "cuda.gelu"
    _check(spec, fn, ref, [_rand(shape, dtype, 7, 3.0)], dtype, 7)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", SHAPES + [(3, 5, 7)])
def test_swiglu_gradients(shape, dtype):
    _check("cuda.swiglu", pointwise.swiglu, lambda a, b: F.silu(a) * b,
           [_rand(shape, dtype, 8, 3.0), _rand(shape, dtype, 9, 2.0)], dtype, 8)


# Which outputs of add_*_norm reach the loss: both, y only (h's gradient undefined), h only.
USES = {"y+h": (True, True), "y": (True, False), "h": (False, True)}


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("uses", list(USES))
@pytest.mark.parametrize("kind", ["rms", "rms+weight", "layer", "layer+affine"])
def test_add_norm_gradients(shape, dtype, uses, kind):
    n = shape[-1]
    x, r = _rand(shape, dtype, 20, 1.0, 0.5), _rand(shape, dtype, 21)
    params = []
    if kind.endswith("weight") or kind.endswith("affine"):
        params.append(_rand((n,), dtype, 22, 0.1, 1.0))
    if kind.endswith("affine"):
        params.append(_rand((n,), dtype, 23, 0.1))
    if kind.startswith("rms"):
        fn = lambda x, r, *p: norms.add_rms_norm(x, r, n, *p, eps=1e-6)  # noqa: E731
        ref = lambda x, r, *p: (F.rms_norm(x + r, (n,), *p, eps=1e-6), x + r)  # noqa: E731
        spec = "cuda.add_rms_norm"
    else:
        fn = lambda x, r, *p: norms.add_layer_norm(x, r, n, *p)  # noqa: E731
        ref = lambda x, r, *p: (F.layer_norm(x + r, (n,), *p), x + r)  # noqa: E731
        spec = "cuda.add_layer_norm"
    dy, dh = _rand(shape, dtype, 24), _rand(shape, dtype, 25)
    use_y, use_h = USES[uses]
    _check(spec, fn, ref, [x, r, *params], dtype, 20,
           upstream=(dy if use_y else None, dh if use_h else None),
           wrt=None if use_y else [0, 1])


CE_SHAPES = [(1, 7), (7, 127), (3, 2048), (5, 20000), (4099, 96), (64, 32000)]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", CE_SHAPES)
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_cross_entropy_gradients(shape, dtype, reduction):
    rows, classes = shape
    logits = _rand(shape, dtype, 30, 3.0)
    gen = torch.Generator(device="cuda").manual_seed(31)
    target = torch.randint(0, classes, (rows,), generator=gen, device="cuda")
    target[1::3] = -100  # every third row ignored
    upstream = _rand((rows,) if reduction == "none" else (), dtype, 32)
    _check("cuda.cross_entropy", lambda x, t: cuda_ce.cross_entropy(x, t, reduction=reduction),
           lambda x, t: F.cross_entropy(x, t, reduction=reduction), [logits, target], dtype, 30,
           upstream=upstream, wrt=[0])


def test_cross_entropy_edge_cases():
    logits = _rand((4, 10), torch.float32, 33)
    ignored = torch.full((4,), -100, device="cuda")
    assert torch.isnan(cuda_ce.cross_entropy(logits, ignored))  # mean of nothing, as eager
    assert float(cuda_ce.cross_entropy(logits, ignored, reduction="sum")) == 0.0
    out_of_range = torch.tensor([0, 10, 3, -5], device="cuda")
    losses = cuda_ce.cross_entropy(logits, out_of_range, reduction="none")
    assert torch.isnan(losses[1]) and torch.isnan(losses[3]) and torch.isfinite(losses[0])
    int32 = torch.tensor([1, 2, 3, 4], device="cuda", dtype=torch.int32)
    torch.testing.assert_close(cuda_ce.cross_entropy(logits, int32),
                               F.cross_entropy(logits, int32.long()))


def test_backward_nodes_are_named():
    x = _rand((8, 32), torch.float32, 34).requires_grad_(True)
    r = _rand((8, 32), torch.float32, 35)
    assert norms.rms_norm(x, 32).grad_fn.name() == "AdvisorRmsNormBackward"
    y, h = norms.add_layer_norm(x, r, 32)
    assert y.grad_fn is h.grad_fn and y.grad_fn.name() == "AdvisorAddLayerNormBackward"
    assert cuda_softmax.log_softmax(x).grad_fn.name() == "AdvisorLogSoftmaxBackward"


def test_saved_input_modified_in_place_is_refused():
    x = _rand((8, 32), torch.float32, 36).requires_grad_(True)
    h = x * 1.0
    y = pointwise.gelu(h)
    h.add_(1.0)  # the saved input changed: the gradient would be wrong
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.sum().backward()


def test_fast_path_runs_the_kernels_and_leaves_bad_calls_to_the_checked_path():
    from reference_kernels.cuda import _dispatch
    from reference_kernels.errors import KernelInputError

    x = _rand((6, 32), torch.float32, 37)
    cuda_softmax.softmax(x)  # loads the extension
    assert _dispatch.FAST is not None
    torch.testing.assert_close(_dispatch.fast_call("softmax", x, -1, False), torch.softmax(x, -1))
    assert _dispatch.fast_call("softmax", x.cpu(), -1, False) is None
    assert _dispatch.fast_call("rms_norm", "not a tensor", 32, None, None) is None
    target = torch.zeros(6, dtype=torch.long, device="cuda")
    bad = [(lambda: norms.rms_norm(x, (6,)), "trailing dims"),
           (lambda: norms.rms_norm(x, 32, x[0, :16]), "shape"),
           (lambda: norms.add_layer_norm(x, x[:3], 32), "residual has shape"),
           (lambda: cuda_softmax.softmax(x, dim=0), "last dim"),
           (lambda: cuda_softmax.log_softmax(x.t()), "not contiguous"),
           (lambda: pointwise.gelu(x, "fast"), "approximate"),
           (lambda: pointwise.swiglu(x, x.double()), "dtype"),
           (lambda: cuda_ce.cross_entropy(x, target, reduction="avg"), "reduction"),
           (lambda: cuda_ce.cross_entropy(x, target[:3]), "target has shape")]
    for call, message in bad:
        with pytest.raises(KernelInputError, match=message):
            call()


def test_only_the_inputs_that_require_grad_get_one():
    n = 256
    x = _rand((64, n), torch.float32, 10).requires_grad_(True)
    w = _rand((n,), torch.float32, 11, 0.1, 1.0)  # no grad
    b = _rand((n,), torch.float32, 12, 0.1).requires_grad_(True)
    norms.layer_norm(x, n, w, b).sum().backward()
    assert x.grad is not None and b.grad is not None and w.grad is None
    torch.testing.assert_close(b.grad, torch.full((n,), 64.0, device="cuda"))


def test_no_graph_is_recorded_without_grad():
    x = _rand((8, 32), torch.float32, 13).requires_grad_(True)
    with torch.no_grad():
        assert norms.rms_norm(x, 32).grad_fn is None
    assert norms.rms_norm(x, 32).grad_fn is not None
    assert cuda_softmax.softmax(x.detach()).grad_fn is None


def _block(x, w, b):
    h = norms.layer_norm(x, x.shape[-1], w, b)
    h = pointwise.gelu(h) + pointwise.swiglu(h, x)
    h = norms.rms_norm(h, x.shape[-1], w) + pointwise.silu(x)
    h, res = norms.add_rms_norm(h, x, x.shape[-1], w)
    h, res = norms.add_layer_norm(h, res, x.shape[-1], w, b)
    out = cuda_softmax.log_softmax(h) + cuda_softmax.softmax(res)
    target = torch.arange(x.shape[0], device=x.device) % x.shape[-1]
    return out + cuda_ce.cross_entropy(out, target)


def test_compiled_function_has_no_graph_break_and_matches_eager():
    torch._dynamo.reset()
    n = 512
    x = _rand((32, n), torch.float32, 14).requires_grad_(True)
    w = _rand((n,), torch.float32, 15, 0.1, 1.0).requires_grad_(True)
    b = _rand((n,), torch.float32, 16, 0.1).requires_grad_(True)
    explained = torch._dynamo.explain(_block)(x, w, b)
    assert explained.graph_break_count == 0, explained.break_reasons
    assert explained.graph_count == 1
    compiled = torch.compile(_block, fullgraph=True)
    eager_out = _block(x, w, b)
    assert eager_out.grad_fn is not None
    eager_grads = torch.autograd.grad(eager_out.sum(), [x, w, b])
    out = compiled(x, w, b)
    grads = torch.autograd.grad(out.sum(), [x, w, b])
    torch.testing.assert_close(out, eager_out, rtol=1e-5, atol=1e-5)
    for g, e in zip(grads, eager_grads):
        torch.testing.assert_close(g, e, rtol=1e-4, atol=1e-4)


def test_profiler_sees_the_operators():
    x = _rand((16, 64), torch.float32, 17).requires_grad_(True)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        cuda_softmax.softmax(x).sum().backward()
    names = {e.name for e in prof.events()}
    assert "advisor_cuda::softmax" in names and "advisor_cuda::softmax_backward" in names
