"""The verification harness catches what it claims to: unwritten elements, wrong values,
wrong gradients, nondeterminism, crashes; and passes correct kernels (Triton ones included).

Deliberately broken kernels live in this module; fake KernelSpecs point at them by name.
"""
import dataclasses
import json
import math
import os
import sys

import pytest
import torch

from reference_kernels.errors import KernelUnavailableError
from reference_kernels import verify
from reference_kernels.registry import Capability, KernelSpec
from reference_kernels.triton.cases import FAMILIES
from reference_kernels.triton.specs import SPECS

pytestmark = [pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning"),
              pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning"),
              pytest.mark.filterwarnings("ignore:divide by zero encountered:RuntimeWarning")]
DEV = "cuda" if torch.cuda.is_available() else "cpu"
_CALLS = {"n": 0}


# ---- kernels under test (softmax family: inputs (x,), kwargs dim=-1) -----------------------

def good_softmax(x, dim=-1):
    return torch.softmax(x, dim)


def softmax_skips_last_column(x, dim=-1):
    y = torch.empty_like(x)  # the harness poisons this with NaN
    y[..., :-1] = torch.softmax(x, dim)[..., :-1]
    return y


def softmax_scaled(x, dim=-1):
    return torch.softmax(x, dim) * (1 + 1e-3)  # within fp16/bf16 tolerance, not fp32's


def softmax_flips_last_bit(x, dim=-1):
    _CALLS["n"] += 1
    y = torch.softmax(x, dim)
    return torch.nextafter(y, torch.full_like(y, math.inf)) if _CALLS["n"] % 2 else y


class _WrongGradSoftmax(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        y = torch.softmax(x, -1)
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx, dy):
        (y,) = ctx.saved_tensors
        return 1.01 * y * (dy - (dy * y).sum(-1, keepdim=True))  # 1% too large


def softmax_wrong_grad(x, dim=-1):
    return _WrongGradSoftmax.apply(x)


def softmax_no_float64(x, dim=-1):
    if x.dtype == torch.float64:
        raise TypeError("softmax_no_float64: dtype float64 is not supported")
    return torch.softmax(x, dim)


def softmax_crashes(x, dim=-1):
    raise RuntimeError("boom")


class _BackwardCrashes(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return torch.softmax(x, -1)

    @staticmethod
    def backward(ctx, dy):
        raise RuntimeError("no backward today")


def softmax_backward_crashes(x, dim=-1):
    return _BackwardCrashes.apply(x)


@pytest.fixture(autouse=True)
def tiny_softmax_family(monkeypatch):
    """The softmax family's inputs on three small shapes: the fakes run in a blink."""
    family = dataclasses.replace(FAMILIES["softmax"], shapes={
        "cpu": ((1, 1), (7, 127), (2, 781)), "cuda": ((1, 1), (7, 127), (2, 781))})
    monkeypatch.setitem(FAMILIES, "tinysoftmax", family)


def fake_spec(fn_name, family="tinysoftmax", has_backward=False, capability=None) -> KernelSpec:
    return KernelSpec(id=f"fake.{family}", title=fn_name,
                      capability=capability or Capability(backend="python-test"),
                      loader=f"{__name__}:{fn_name}", reference=f"{__name__}:good_softmax",
                      has_backward=has_backward)


def failed(result, check=None):
    return [c for c in result.cases if not c.passed and (check is None or c.check == check)]


# ---- the harness on fake kernels -----------------------------------------------------------

def test_correct_kernel_passes_every_check():
    result = verify.verify_kernel(fake_spec("good_softmax", has_backward=True), DEV)
    assert result.passed and not failed(result)
    checks = {c.check for c in result.cases}
    assert checks == {"forward", "backward", "deterministic", "gradcheck"}
    # 3 shapes x 3 dtypes x 2 variants x 3 checks + 1 gradcheck (variant "plain") = 55
    assert len(result.cases) == 55


def test_unwritten_elements_are_caught_by_poisoned_allocations():
    result = verify.verify_kernel(fake_spec("softmax_skips_last_column"), DEV)
    forward = [c for c in result.cases if c.check == "forward"]
    assert not result.passed and forward and all(not c.passed for c in forward)
    assert all("NaN" in c.reason for c in forward)


def test_relative_error_over_tolerance_fails_in_fp32_only():
    result = verify.verify_kernel(fake_spec("softmax_scaled"), DEV)
    bad = failed(result, "forward")
    assert bad and {c.dtype for c in bad} == {"float32"}
    assert any("relative error norm" in c.reason for c in bad)
    assert all(0.99e-3 < c.rel_err_norm < 1.01e-3 for c in bad)


def test_nondeterminism_is_caught_even_when_values_are_close():
    result = verify.verify_kernel(fake_spec("softmax_flips_last_bit"), DEV)
    assert not failed(result, "forward")  # one ulp is within every tolerance
    assert failed(result, "deterministic")
    assert "two runs differ" in failed(result, "deterministic")[0].reason


def test_wrong_gradient_fails_backward_and_gradcheck():
    result = verify.verify_kernel(fake_spec("softmax_wrong_grad", has_backward=True), DEV)
    assert not failed(result, "forward")
    assert {c.dtype for c in failed(result, "backward")} == {"float32", "float16", "bfloat16"}
    assert failed(result, "gradcheck") and "Jacobian" in failed(result, "gradcheck")[0].reason


def test_kernel_without_float64_skips_gradcheck_with_a_note():
    result = verify.verify_kernel(fake_spec("softmax_no_float64", has_backward=True), DEV)
    assert result.passed and not [c for c in result.cases if c.check == "gradcheck"]
    assert any("rejects float64" in n for n in result.notes)


def test_a_kernel_that_raises_fails_with_the_reason():
    result = verify.verify_kernel(fake_spec("softmax_crashes"), DEV)
    assert not result.passed
    assert all(c.reason == "RuntimeError: boom" for c in result.cases)


def test_a_backward_that_raises_is_reported_as_backward():
    result = verify.verify_kernel(fake_spec("softmax_backward_crashes", has_backward=True), DEV)
    bad = [c for c in result.cases if c.check != "gradcheck"]
    assert bad and all(c.check == "backward" and not c.passed for c in bad)
    assert bad[0].reason == "RuntimeError: no backward today"


def test_unknown_family_fails_with_a_fix():
    result = verify.verify_kernel(fake_spec("good_softmax", family="nosuchop"), DEV)
    assert not result.passed and "no verification family 'nosuchop'" in result.cases[0].reason


def test_unmet_capability_raises():
    spec = fake_spec("good_softmax", capability=Capability(backend="cuda", needs_gpu=True))
    with pytest.raises(KernelUnavailableError):
        verify.verify_kernel(spec, "cpu")


# ---- comparison rule, poisoning, records ---------------------------------------------------

@pytest.mark.parametrize("out, ref, tol, rel, reason", [
    # ||[0, 0.06]|| / ||[3, 4]|| = 0.06/5 = 0.012 > 0.01
    ([3.0, 4.06], [3.0, 4.0], (1e-2, 0.0), 0.012, "relative error norm 1.20e-02"),
    ([3.0, 4.04], [3.0, 4.0], (1e-2, 0.0), 0.008, ""),  # 0.04/5 = 0.008
    # equal infinities are exact
    ([-math.inf, 0.5], [-math.inf, 0.5], (1e-5, 1e-5), 0.0, ""),
    ([1.0, 0.5], [-math.inf, 0.5], (1e-2, 1e-2), math.inf, "infinite"),
    ([math.nan, 0.5], [1.0, 0.5], (1e-2, 1e-2), math.nan, "NaN element"),
    ([1.0, 0.5], [math.nan, 0.5], (1e-2, 1e-2), math.nan, "reference produced NaN"),
    # an all-zero reference has no relative error: atol judges max |d| (1e-6 <= 1e-5)
    ([1e-6, -1e-6], [0.0, 0.0], (1e-5, 1e-5), math.nan, ""),
    ([1e-4, 0.0], [0.0, 0.0], (1e-5, 1e-5), math.nan, "max abs error 1.00e-04"),
    # tiny values are held to rtol too: 1% off on 1e-10 gradients fails (no atol floor)
    ([1.01e-10, 1.01e-10], [1e-10, 1e-10], (1e-3, 1e-5), 0.01, "relative error norm"),
])
def test_compare_one_hand_worked(out, ref, tol, rel, reason):
    abs_err, rel_err, why = verify._compare_one(torch.tensor(out, dtype=torch.float64),
                                                torch.tensor(ref, dtype=torch.float64), tol)
    assert reason in why if reason else why == ""
    if math.isnan(rel):
        assert math.isnan(rel_err)
    else:
        assert rel_err == pytest.approx(rel, rel=1e-9, abs=1e-12)


def test_one_element_far_off_fails_although_the_norm_passes():
    ref = torch.ones(10000, dtype=torch.float64)
    out = ref.clone()
    out[1234] = 1.5  # ||d|| / ||ref|| = 0.5/100 = 0.005 < 0.01, but 0.5 > 0.01*(1 + 1)
    _, rel_err, why = verify._compare_one(out, ref, (1e-2, 0.0))
    assert rel_err == pytest.approx(0.005) and why.startswith("element [1234]: 1.5")


def test_fp16_subnormal_outputs_are_held_to_their_storage_rounding():
    ref = torch.linspace(1e-7, 2e-6, 101, dtype=torch.float64)  # fp16 subnormals: ulp 6e-8
    rounded = ref.to(torch.float16)
    _, rel_err, why = verify._compare_one(rounded, ref, (2e-3, 2e-3))
    assert rel_err > 2e-3 and why == ""  # ~1% off, and no fp16 result can do better
    tripled = (ref + 3 * (rounded.double() - ref)).to(torch.float16)
    assert "relative error norm" in verify._compare_one(tripled, ref, (2e-3, 2e-3))[2]


def test_poisoned_allocations_fill_and_restore():
    original = torch.empty
    with verify._poisoned_allocations():
        assert torch.isnan(torch.empty(3)).all()
        assert torch.isnan(torch.empty_like(torch.zeros(2, 2))).all()
        assert torch.isnan(torch.zeros(1).new_empty(4)).all()
        assert (torch.empty(2, dtype=torch.int32) == 2**31 - 1).all()
        assert torch.empty(2, dtype=torch.bool).all()
    assert torch.empty is original


def test_verify_result_to_dict_is_strict_json():
    case = verify.CaseResult((2, 3), "float32", math.nan, math.inf, False, "x", "gradcheck")
    d = verify.VerifyResult("k", "cpu", False, (case,)).to_dict()
    text = json.dumps(d, allow_nan=False)  # NaN would make this raise
    assert json.loads(text)["cases"][0]["max_abs_err"] is None


def test_prepare_backend_sets_or_refuses_the_interpreter(monkeypatch):
    spec = SPECS[0]
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    monkeypatch.setitem(sys.modules, "triton", sys.modules.get("triton", object()))
    monkeypatch.delitem(sys.modules, "reference_kernels.triton._common", raising=False)
    with pytest.raises(KernelUnavailableError, match="TRITON_INTERPRET=1"):
        verify.prepare_backend(spec, "cpu")
    monkeypatch.delitem(sys.modules, "triton")
    verify.prepare_backend(spec, "cpu")
    assert os.environ["TRITON_INTERPRET"] == "1"
    verify.prepare_backend(spec, "cuda")  # nothing to do off the CPU


# ---- the harness on the real Triton kernels ------------------------------------------------

@pytest.mark.slow
@pytest.mark.parametrize("spec", SPECS, ids=[s.id for s in SPECS])
def test_triton_kernels_pass_the_harness(spec):
    result = verify.verify_kernel(spec, DEV)
    assert result.passed, [c for c in result.cases if not c.passed][:3]
    assert not result.notes  # every Triton kernel takes float64, so gradcheck ran
