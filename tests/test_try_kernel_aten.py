"""Scoped torch.library overrides: caught spellings, fallbacks, teardown, autograd, --impl checks."""
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from kernel_advisor.errors import UserInputError
from kernel_advisor.trykernel.capture import CallLog
from kernel_advisor.trykernel.candidates import default_tolerance, signature_problem
from kernel_advisor.trykernel.substitute_aten import (bind_schema, dispatch_cost_s, override_aten,
                                                      reference_adapter, resolve_op, user_adapter)

ALL = ("float32", "float16", "bfloat16")
TOL = {torch.float32: 1e-5, torch.float16: 2e-3, torch.bfloat16: 1e-2}


def softmax_fp64(x, dim=-1):
    """A correct candidate computed another way (float64), so it can be told apart only by counting."""
    return torch.softmax(x.double(), dim).to(x.dtype)


def rel_err(a, b):
    return float(torch.linalg.vector_norm(a.double() - b.double()) / torch.linalg.vector_norm(b.double()))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("shape", [(1,), (7,), (3, 127), (1823, 781)])
def test_every_softmax_spelling_reaches_the_candidate(shape, dtype):
    log = CallLog("aten::_softmax")
    x = torch.randn(shape, generator=torch.Generator().manual_seed(0)).to(dtype)
    want = torch.softmax(x.double(), -1)
    with override_aten(reference_adapter("aten::_softmax", ALL, False), softmax_fp64, "cpu", log, False,
                       default_tolerance):
        outs = [F.softmax(x, dim=-1), torch.softmax(x, -1), x.softmax(-1), nn.Softmax(dim=-1)(x)]
    assert log.candidate_calls == 4 and log.fallback_calls == 0  # 4 spellings, 4 calls
    for out in outs:
        assert out.dtype == dtype and rel_err(out, want) <= TOL[dtype]


def test_teardown_restores_the_original_even_after_an_exception():
    log = CallLog("aten::_softmax")
    adapter = reference_adapter("aten::_softmax", ALL, False)
    x = torch.randn(4, 9)
    with pytest.raises(RuntimeError, match="inside"):
        with override_aten(adapter, softmax_fp64, "cpu", log, False, default_tolerance):
            torch.softmax(x, -1)
            raise RuntimeError("inside")
    assert log.candidate_calls == 1
    torch.softmax(x, -1)
    F.softmax(x, -1)
    assert log.candidate_calls == 1  # nothing reaches the candidate after the context


def test_teardown_on_keyboard_interrupt():
    log = CallLog("aten::gelu")
    adapter = reference_adapter("aten::gelu", ALL, False)
    with pytest.raises(KeyboardInterrupt):
        with override_aten(adapter, F.gelu, "cpu", log, False, default_tolerance):
            raise KeyboardInterrupt
    F.gelu(torch.randn(5))
    assert log.candidate_calls == 0


def test_unsupported_calls_fall_back_with_their_reason():
    log = CallLog("aten::_softmax")
    adapter = reference_adapter("aten::_softmax", ("float32",), False)
    x = torch.randn(6, 5)
    with override_aten(adapter, softmax_fp64, "cpu", log, False, default_tolerance):
        by_col = torch.softmax(x, 0)  # not the last dim
        as_double = torch.softmax(x.double(), -1)  # dtype the kernel does not take
        strided = torch.softmax(x.t(), -1)  # non-contiguous
    assert log.candidate_calls == 0
    assert log.fallback_reasons == {"softmax over dim 0, not the last": 1,
                                    "dtype float64 is not supported (kernel takes float32)": 1,
                                    "non-contiguous input": 1}
    torch.testing.assert_close(by_col, torch.softmax(x, 0))  # the original kernel ran
    torch.testing.assert_close(as_double, torch.softmax(x.double(), -1))
    torch.testing.assert_close(strided, torch.softmax(x.t(), -1))


def test_a_candidate_calling_the_same_op_does_not_recurse():
    log = CallLog("aten::_softmax")
    x = torch.randn(3, 8)
    with override_aten(reference_adapter("aten::_softmax", ALL, False), lambda t, dim=-1: torch.softmax(t, dim),
                       "cpu", log, True, default_tolerance):
        out = F.softmax(x, -1)
    assert log.candidate_calls == 1 and log.fallback_calls == 0  # the inner call went to PyTorch
    torch.testing.assert_close(out, torch.softmax(x, -1))


def test_gelu_keyword_only_argument_is_passed_through():
    seen = []
    log = CallLog("aten::gelu")

    def gelu(x, approximate="none"):
        seen.append(approximate)
        return F.gelu(x.double(), approximate=approximate).to(x.dtype)

    with override_aten(reference_adapter("aten::gelu", ALL, False), gelu, "cpu", log, False, default_tolerance):
        F.gelu(torch.randn(4))
        F.gelu(torch.randn(4), approximate="tanh")
    assert seen == ["none", "tanh"]


class _ScaledLayerNorm(torch.autograd.Function):
    """layer_norm forward; backward scaled by `scale` (1 = correct, 2 = a wrong backward)."""

    @staticmethod
    def forward(ctx, x, w, b, eps, scale):
        with torch.enable_grad():
            xd, wd, bd = (t.detach().requires_grad_() for t in (x, w, b))
            y = F.layer_norm(xd, (x.shape[-1],), wd, bd, eps)
        ctx.save_for_backward(xd, wd, bd, y)
        ctx.scale = scale
        return y.detach()

    @staticmethod
    def backward(ctx, dy):
        xd, wd, bd, y = ctx.saved_tensors
        grads = torch.autograd.grad(y, (xd, wd, bd), dy)
        return (*(g * ctx.scale for g in grads), None, None)


def layer_norm_with_backward(x, normalized_shape, weight=None, bias=None, eps=1e-5):
    return _ScaledLayerNorm.apply(x, weight, bias, eps, 1.0)


@pytest.mark.parametrize("shape", [(1, 7), (5, 127)])
def test_composite_layer_norm_trains_through_a_candidate_with_backward(shape):
    log = CallLog("aten::layer_norm")
    ln = nn.LayerNorm(shape[-1])
    x = torch.randn(shape, requires_grad=True)
    F.layer_norm(x, ln.normalized_shape, ln.weight, ln.bias).square().sum().backward()
    want = [t.grad.clone() for t in (x, ln.weight, ln.bias)]
    for t in (x, ln.weight, ln.bias):
        t.grad = None
    with override_aten(reference_adapter("aten::native_layer_norm", ALL, True), layer_norm_with_backward, "cpu",
                       log, False, default_tolerance):
        ln(x).square().sum().backward()
    assert log.candidate_calls == 1
    for t, w in zip((x, ln.weight, ln.bias), want):
        torch.testing.assert_close(t.grad, w, rtol=1e-5, atol=1e-5)


def test_composite_op_without_backward_falls_back_only_when_a_gradient_is_needed():
    log = CallLog("aten::layer_norm")
    ln = nn.LayerNorm(8)
    adapter = reference_adapter("aten::layer_norm", ALL, False)
    x = torch.randn(2, 8)
    with override_aten(adapter, layer_norm_with_backward, "cpu", log, False, default_tolerance):
        ln(x)  # weight requires grad: fallback
        with torch.no_grad():
            ln(x)  # no gradient needed: the candidate
    assert log.candidate_calls == 1
    assert log.fallback_reasons == {"a gradient is needed and the kernel has no backward": 1}


def test_rms_norm_override_catches_the_functional_and_the_module():
    log = CallLog("aten::rms_norm")
    norm = nn.RMSNorm(16, eps=None)

    def rms(x, shape, weight=None, eps=None):
        y = x.double() * torch.rsqrt(x.double().pow(2).mean(-1, keepdim=True) + eps)
        return (y * weight.double()).to(x.dtype)

    x = torch.randn(3, 16)
    with torch.no_grad(), override_aten(reference_adapter("aten::_fused_rms_norm", ALL, False), rms, "cpu",
                                        log, True, default_tolerance):
        a = norm(x)
        b = F.rms_norm(x, (16,), norm.weight, 1e-6)
    assert log.candidate_calls == 2 and not log.failures
    with torch.no_grad():
        torch.testing.assert_close(a, norm(x))
        torch.testing.assert_close(b, F.rms_norm(x, (16,), norm.weight, 1e-6))


def test_bind_schema_fills_the_defaults_python_kernels_do_not_receive():
    x = torch.randn(2)
    gelu = torch.ops.aten.gelu.default._schema
    assert bind_schema(gelu, (x,), {})["approximate"] == "none"
    assert bind_schema(gelu, (x,), {"approximate": "tanh"})["approximate"] == "tanh"
    ln = bind_schema(torch.ops.aten.layer_norm.default._schema, (x, [2]), {})
    assert ln["weight"] is None and ln["bias"] is None and ln["eps"] == pytest.approx(1e-5) and ln["cudnn_enable"]


def test_resolve_op_spellings_and_errors():
    assert resolve_op("aten::_softmax") is torch.ops.aten._softmax.default
    assert resolve_op("_softmax") is torch.ops.aten._softmax.default
    assert resolve_op("aten::softmax.int") is torch.ops.aten.softmax.int
    with pytest.raises(UserInputError, match="unknown aten op"):
        resolve_op("aten::no_such_op")
    with pytest.raises(UserInputError) as err:
        resolve_op("aten::add")  # several tensor overloads; add.default is Scalar + Scalar
    assert "aten::add.Tensor" in err.value.fix


def test_a_bare_name_means_the_tensor_default_overload():
    # torch 2.13 has aten.mm.default and aten.mm.dtype; the profiler's "aten::mm" is the default
    assert resolve_op("aten::mm") is torch.ops.aten.mm.default


def test_signature_check_against_the_schema():
    op = torch.ops.aten._softmax.default
    assert signature_problem(lambda self, dim, half_to_float: self, op) == ""
    assert signature_problem(lambda *args: args[0], op) == ""
    assert "cannot take the 3 arguments" in signature_problem(lambda self, dim: self, op)
    gelu = torch.ops.aten.gelu.default
    assert signature_problem(lambda self, *, approximate="none": self, gelu) == ""
    assert "approximate" in signature_problem(lambda self, approx="none": self, gelu)


def test_user_adapter_passes_aten_arguments_as_they_are():
    got = []
    log = CallLog("aten::_softmax")

    def impl(self, dim, half_to_float):
        got.append((dim, half_to_float))
        return torch.softmax(self.double(), dim).to(self.dtype)

    with override_aten(user_adapter(resolve_op("aten::_softmax")), impl, "cpu", log, False, default_tolerance):
        torch.softmax(torch.randn(2, 3), 0)
    assert got == [(0, False)] and log.candidate_calls == 1  # dim 0 too: a user kernel gets every call


def test_dispatch_cost_is_measured_and_leaves_no_override_behind():
    cost = dispatch_cost_s("cpu", calls=50, repeats=2)
    # A Python kernel in the dispatcher costs microseconds a call, never seconds or nothing.
    assert 1e-7 < cost < 1e-2
    x = torch.tensor([2.0])
    assert torch.equal(torch.neg(x), torch.tensor([-2.0]))  # the override is gone: neg negates
