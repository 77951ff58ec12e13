"""Few long rows split over programs (rowsplit.py) and the norms' persistent backward, in
Triton's CPU interpreter against float64: softmax and log_softmax forward and backward with
the split forced at 3 x 1000 (the path 512 x 50257 takes on an H200), and the norms' dx, dweight
and dbias at odd widths. Tiny shapes: the interpreter pays per op."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from reference_kernels.registry import get_kernel
from reference_kernels.triton import rowsplit
from reference_kernels.triton.layer_norm import layer_norm
from reference_kernels.triton.rms_norm import rms_norm
from reference_kernels.triton.softmax import log_softmax, softmax

DEV = "cuda" if torch.cuda.is_available() else "cpu"


@pytest.mark.parametrize("rows, sms, split", [
    (512, 132, True),    # 512 x 50257: under 4 programs per SM, split (2 segments a row)
    (256, 132, True),    # 256 x 151936
    (77, 132, True),     # 77 x 49408
    (528, 132, False),   # 4 rows per SM: one program a row fills the device
    (4096, 132, False),
])
def test_long_rows_split_below_the_target_programs(rows, sms, split):
    assert rowsplit.splits_rows(rows, sms) is split


def test_vocabulary_rows_get_enough_segments():
    # 512 rows of 50257: 2 segments a row reach the 528 programs of an H200 (132 SMs x 4).
    config = rowsplit.split_config(512, 50257, 132 * rowsplit.PROGRAMS_PER_SM)
    assert config.segments == 2 and 512 * config.segments >= 528


def _rand(shape, dtype, seed, scale=1.0, shift=0.0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(shape, generator=g, dtype=torch.float64) * scale + shift).to(DEV, dtype)


def _close(got, want, rtol, what):
    got, want = got.detach().double(), want.detach().double()
    assert torch.isfinite(got).all(), what
    err = float((got - want).norm())
    storage = float((want.to(torch.bfloat16).double() - want).norm()) if rtol > 1e-3 else 0.0
    assert err <= max(rtol * float(want.norm()), 2 * storage), (what, err, float(want.norm()))


def _check(kernel, fn, ref, inputs, dtype):
    """Output and every input gradient of fn against ref on float64 copies."""
    rtol, _ = get_kernel(f"triton.{kernel}").tolerance(dtype)
    leaves = [t.detach().clone().requires_grad_(True) for t in inputs]
    refs = [t.detach().double().requires_grad_(True) for t in inputs]
    out, ref_out = fn(*leaves), ref(*refs)
    up = _rand(out.shape, torch.float64, 7)
    grads = torch.autograd.grad(out, leaves, up.to(dtype))
    ref_grads = torch.autograd.grad(ref_out, refs, up)
    _close(out, ref_out, rtol, "output")
    for k, (g, r) in enumerate(zip(grads, ref_grads)):
        assert g.dtype == dtype
        _close(g, r, rtol, f"grad {k}")


@pytest.mark.parametrize("log, dtype", [(False, torch.float32), (False, torch.bfloat16),
                                        (True, torch.bfloat16)])
def test_forced_split_softmax_matches_fp64(monkeypatch, log, dtype):
    # 256-wide chunks, a 12-program target: 3 rows x 4 segments of 256 columns
    monkeypatch.setattr(rowsplit, "FORCE", (256, 12))
    assert rowsplit.split_for(3, 1000, torch.device(DEV)).segments == 4
    x = _rand((3, 1000), dtype, 1, 3.0)
    fn, ref = (log_softmax, torch.log_softmax) if log else (softmax, torch.softmax)
    _check("log_softmax" if log else "softmax", lambda t: fn(t, -1), lambda t: ref(t, -1),
           [x], dtype)


@pytest.mark.parametrize("shape, dtype", [((1, 127), torch.float32), ((37, 127), torch.bfloat16),
                                          ((5, 1000), torch.float32)])
def test_norm_backward_dx_dweight_dbias_match_fp64(shape, dtype):
    n = shape[-1]
    x = _rand(shape, dtype, 2, 1.0, 0.5)
    w, b = _rand((n,), dtype, 3, 0.1, 1.0), _rand((n,), dtype, 4, 0.1)
    _check("layer_norm", lambda x, w, b: layer_norm(x, (n,), w, b),
           lambda x, w, b: F.layer_norm(x, (n,), w, b), [x, w, b], dtype)
    _check("rms_norm", lambda x, w: rms_norm(x, (n,), w, 1e-6),
           lambda x, w: F.rms_norm(x, (n,), w, 1e-6), [x, w], dtype)
