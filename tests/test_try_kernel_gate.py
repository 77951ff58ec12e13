"""The correctness gate: per-leaf model comparisons and per-call checks, with hand-worked numbers."""
import math

import pytest
import torch

from kernel_advisor.trykernel.gate import check_call_output, compare_leaf
from reference_kernels.registry import DEFAULT_TOLERANCES

DTYPES = [torch.float32, torch.float16, torch.bfloat16]
SHAPES = [(1,), (7,), (127,), (1823, 781)]


def tol(dtype):
    return DEFAULT_TOLERANCES[str(dtype).replace("torch.", "")]


def perturbed(base: torch.Tensor, rel: float, seed: int = 0) -> torch.Tensor:
    """base + a random direction of norm rel * ||base||, computed in float64, rounded to base's dtype."""
    b = base.double()
    d = torch.randn(b.shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    return (b + d * (rel * torch.linalg.vector_norm(b) / torch.linalg.vector_norm(d))).to(base.dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", SHAPES)
def test_within_and_beyond_the_dtype_tolerance(shape, dtype):
    base = (torch.randn(shape, generator=torch.Generator().manual_seed(1)) + 2.0).to(dtype)
    rtol, _ = tol(dtype)
    near = compare_leaf("output", perturbed(base, 0.3 * rtol), base, None, tol(dtype))
    far = compare_leaf("output", perturbed(base, 3.0 * rtol), base, None, tol(dtype))
    assert near.ok, near.problem
    assert not far.ok and "exceeds" in far.problem
    assert far.rel_err > rtol


def test_relative_error_norm_hand_worked():
    base = torch.tensor([3.0, 4.0])  # ||base|| = 5
    got = torch.tensor([3.0, 4.04])  # ||got - base|| = 0.04 -> rel 0.04 / 5 = 0.008
    c = compare_leaf("output", got, base, None, (1e-2, 1e-2))
    assert c.rel_err == pytest.approx(0.008, rel=1e-5)
    assert c.max_abs_err == pytest.approx(0.04, rel=1e-5)
    assert c.ok  # 0.008 <= 0.01
    assert not compare_leaf("output", got, base, None, (1e-5, 1e-5)).ok  # 0.008 > 1e-5


def test_float64_reference_bounds_the_variant_by_eager_error():
    ref = torch.tensor([3.0, 4.0], dtype=torch.float64)  # ||ref|| = 5
    base = torch.tensor([3.0, 4.01])  # eager is 0.01 / 5 = 0.002 from the reference
    ok = torch.tensor([3.0, 4.02])  # 0.02 / 5 = 0.004 <= 2 * 0.002 + 1e-5 = 0.00401
    bad = torch.tensor([3.0, 4.03])  # 0.03 / 5 = 0.006 > 0.00401
    c_ok = compare_leaf("output", ok, base, ref, (1e-5, 1e-5))
    c_bad = compare_leaf("output", bad, base, ref, (1e-5, 1e-5))
    assert c_ok.ok and c_ok.limit == pytest.approx(0.00401, rel=1e-4)
    assert c_ok.baseline_ref_rel_err == pytest.approx(0.002, rel=1e-4)
    assert not c_bad.ok and "float64 result" in c_bad.problem


def test_nan_where_the_baseline_is_finite_fails_with_infinite_error():
    base = torch.randn(7)
    got = base.clone()
    got[3] = float("nan")
    c = compare_leaf("output", got, base, None, tol(torch.float32))
    assert not c.ok and "1 NaN/Inf of 7" in c.problem
    assert math.isinf(c.rel_err) and math.isinf(c.max_abs_err)


def test_nan_in_both_is_not_an_error():
    base = torch.tensor([1.0, float("nan"), 2.0])
    c = compare_leaf("output", base.clone(), base, None, tol(torch.float32))
    assert c.ok and c.rel_err == 0.0


def test_constant_output_where_the_baseline_varies_fails():
    base = torch.randn(127)
    c = compare_leaf("output", torch.zeros(127), base, None, (1e9, 1e9))  # fails even with huge tolerances
    assert not c.ok and "constant output" in c.problem


def test_all_zero_baseline_uses_the_absolute_tolerance():
    base = torch.zeros(7)
    assert compare_leaf("output", torch.full((7,), 1e-6), base, None, (1e-5, 1e-5)).ok  # 1e-6 <= atol 1e-5
    c = compare_leaf("output", torch.full((7,), 1e-3), base, None, (1e-5, 1e-5))
    assert not c.ok and c.max_abs_err == pytest.approx(1e-3)


def test_integer_outputs_must_match_exactly():
    base = torch.tensor([1, 2, 3])
    assert compare_leaf("output", base.clone(), base, None, (1.0, 1.0)).ok
    assert not compare_leaf("output", torch.tensor([1, 2, 4]), base, None, (1.0, 1.0)).ok


def test_missing_or_reshaped_leaf_fails():
    base = torch.randn(3, 4)
    assert "missing" in compare_leaf("grad[w]", None, base, None, (1e-5, 1e-5)).problem
    c = compare_leaf("output", torch.randn(4, 3), base, None, (1e-5, 1e-5))
    assert not c.ok and "[4, 3]" in c.problem


@pytest.mark.parametrize("dtype", DTYPES)
def test_call_check_structural_problems_are_fatal(dtype):
    expected = torch.randn(2, 7).to(dtype)
    assert check_call_output(expected[:, :-1], expected, tol(dtype)) == ("shape [2, 6], expected [2, 7]", True)
    problem, fatal = check_call_output(expected.double(), expected, tol(dtype))
    assert fatal and "dtype float64" in problem
    problem, fatal = check_call_output((expected,), (expected, expected), tol(dtype))
    assert fatal and "1 tensors, expected 2" in problem
    problem, fatal = check_call_output(None, expected, tol(dtype))
    assert fatal and "returned NoneType" in problem


@pytest.mark.parametrize("dtype", DTYPES)
def test_call_check_value_problems_are_recorded_not_fatal(dtype):
    expected = (torch.randn(5, 127, generator=torch.Generator().manual_seed(2)) + 1).to(dtype)
    assert check_call_output(expected.clone(), expected, tol(dtype)) == ("", False)
    problem, fatal = check_call_output(perturbed(expected, 5 * tol(dtype)[0]), expected, tol(dtype))
    assert not fatal and "exceeds" in problem
    nan = torch.full_like(expected, float("nan"))
    problem, fatal = check_call_output(nan, expected, tol(dtype))
    assert not fatal and f"{5 * 127} NaN/Inf" in problem


def test_call_check_compares_every_output_of_a_tuple():
    a, b = torch.randn(3), torch.randn(3)
    problem, fatal = check_call_output((a, b * 2), (a, b), (1e-5, 1e-5))
    assert problem.startswith("output 1:") and not fatal


def test_uninitialized_memory_is_poisoned_inside_the_gate_and_restored_after():
    from kernel_advisor.trykernel.gate import uninitialized_memory_poisoned

    x = torch.randn(4, 16)
    torch.softmax(x, 1)  # freed: an empty_like of the same size may get this buffer back
    with uninitialized_memory_poisoned():
        assert torch.isnan(torch.empty_like(x)).all()
        assert (torch.empty(3, dtype=torch.int32) == torch.iinfo(torch.int32).max).all()
    assert not torch.are_deterministic_algorithms_enabled()
    assert not torch.is_deterministic_algorithms_warn_only_enabled()


def test_a_user_setting_of_deterministic_algorithms_survives_the_gate():
    from kernel_advisor.trykernel.gate import uninitialized_memory_poisoned

    torch.use_deterministic_algorithms(True)
    try:
        with uninitialized_memory_poisoned():
            assert torch.is_deterministic_algorithms_warn_only_enabled()
        assert torch.are_deterministic_algorithms_enabled()
        assert not torch.is_deterministic_algorithms_warn_only_enabled()
    finally:
        torch.use_deterministic_algorithms(False)
