"""reference_kernels/triton/_launch.py: launches through the cached compiled kernel agree with
`kernel[grid](...)`, and every specialization Triton makes gets its own cache entry.

GPU only: under the interpreter there is no compiled kernel and FastLaunch is never used.
"""
import pytest
import torch

triton = pytest.importorskip("triton")
import triton.language as tl  # noqa: E402

from reference_kernels.triton import _launch  # noqa: E402

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
              pytest.mark.skipif(not _launch.ENABLED, reason="the fast launch is off here")]


@triton.jit
def _axpy(x_ptr, y_ptr, out_ptr, n, alpha, SCALE: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask).to(tl.float32)
    y = tl.load(y_ptr + offs, mask=mask).to(tl.float32)
    tl.store(out_ptr + offs, (alpha * x * SCALE + y).to(out_ptr.dtype.element_ty), mask=mask)


def _launch_axpy(kernel, x, y, alpha, scale=1.0):
    out = torch.empty_like(x)
    n = x.numel()
    kernel[(triton.cdiv(n, 256),)](x, y, out, n, alpha, SCALE=scale, BLOCK=256, num_warps=4)
    return out


def _reference(x, y, alpha, scale=1.0):
    return (alpha * x.double() * scale + y.double()).to(x.dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("n", [1, 16, 1000, 4097])
def test_fast_launch_matches_triton_launch(dtype, n):
    fast = _launch.FastLaunch(_axpy)
    x = torch.randn(n, device="cuda", dtype=dtype)
    y = torch.randn(n, device="cuda", dtype=dtype)
    for alpha in (0.5, 2.0):  # the first call compiles through run; the second is the cached launch
        for _ in range(2):
            got = _launch_axpy(fast, x, y, alpha)
            torch.testing.assert_close(got, _launch_axpy(_axpy, x, y, alpha), rtol=0, atol=0)
            torch.testing.assert_close(got, _reference(x, y, alpha))


def test_each_specialization_gets_its_own_entry():
    fast = _launch.FastLaunch(_axpy)
    base = torch.randn(4096 + 8, device="cuda", dtype=torch.bfloat16)
    y = torch.randn(4096, device="cuda", dtype=torch.bfloat16)
    aligned, misaligned = base[:4096], base[1:4097]  # 2-byte offset: not 16-byte aligned
    _launch_axpy(fast, aligned, y, 1.5)
    _launch_axpy(fast, misaligned, y, 1.5)
    _launch_axpy(fast, aligned, y, 1.5, scale=3.0)  # a constexpr value
    _launch_axpy(fast, aligned[:4001], y[:4001], 1.5)  # n = 4001: not divisible by 16
    assert len(fast.compiled) == 4
    torch.testing.assert_close(_launch_axpy(fast, misaligned, y, 1.5), _reference(misaligned, y, 1.5))
    torch.testing.assert_close(_launch_axpy(fast, aligned, y, 1.5, scale=3.0),
                               _reference(aligned, y, 1.5, 3.0))


def test_launch_hook_takes_the_triton_path(monkeypatch):
    fast = _launch.FastLaunch(_axpy)
    x = torch.randn(300, device="cuda")
    _launch_axpy(fast, x, x, 1.0)
    seen = []
    hook = _launch._knobs.runtime.launch_enter_hook
    if hasattr(hook, "add"):  # triton >= 3.5: a HookChain, empty unless proton or a user adds one
        hook.add(seen.append)
        try:
            _launch_axpy(fast, x, x, 1.0)
        finally:
            hook.remove(seen.append)
    else:
        monkeypatch.setattr(_launch._knobs.runtime, "launch_enter_hook", seen.append)
        _launch_axpy(fast, x, x, 1.0)
    assert seen, "a launch hook (proton's) must see the launch"


def test_bundled_kernels_launch_through_the_cache():
    from reference_kernels.triton._ops import launcher
    from reference_kernels.triton.rms_norm import rms_norm
    from reference_kernels.triton.norm import _norm_fwd

    x = torch.randn(37, 781, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(781, device="cuda", dtype=torch.bfloat16)
    first = rms_norm(x, (781,), w, 1e-6)
    again = rms_norm(x, (781,), w, 1e-6)
    assert isinstance(launcher(_norm_fwd), _launch.FastLaunch)
    assert launcher(_norm_fwd).compiled, "the second call found the compiled kernel"
    torch.testing.assert_close(first, again, rtol=0, atol=0)
    ref = torch.nn.functional.rms_norm(x.double(), (781,), w.double(), 1e-6).to(x.dtype)
    torch.testing.assert_close(first, ref, rtol=1e-2, atol=1e-2)
