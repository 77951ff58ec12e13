"""Host cost of one call of a bundled Triton kernel against eager PyTorch, layer by layer.

Answers where a short call's host time goes:
the public function, its KernelOp, the torch.library operator, the bare launcher, and eager,
forward and forward + backward, at 2048 x 4096 bf16 on the current GPU; forward + backward also
with the autograd engine on the calling thread (`set_multithreading_enabled(False)`), beside a
one-op Python autograd.Function (`clone`), the floor of any Python backward. Host microseconds
per call: wall time of 200 back-to-back calls, no synchronisation inside. `--cprofile` adds
cProfile listings of the forward + backward calls.

    python3 benchmarks/studies/launch_cost.py [--cprofile]
"""
from __future__ import annotations

import cProfile
import io
import pstats
import sys
import time

import torch
import torch.nn.functional as F

from reference_kernels.triton.gelu import gelu
from reference_kernels.triton.norm import norm_fwd, rms_norm_op
from reference_kernels.triton.rms_norm import rms_norm


def host_us(fn, calls: int = 200) -> float:
    for _ in range(10):
        fn()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    t1 = time.perf_counter()
    torch.cuda.synchronize()
    return (t1 - t0) / calls * 1e6


class _Clone(torch.autograd.Function):
    """The floor of any Python autograd.Function: one aten op forward, none backward."""

    @staticmethod
    def forward(ctx, x):
        return x.clone()

    @staticmethod
    def backward(ctx, dy):
        return dy


def cases() -> dict:
    x = torch.randn(2048, 4096, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(4096, device="cuda", dtype=torch.bfloat16)
    xg, wg, dy = x.clone().requires_grad_(True), w.clone().requires_grad_(True), torch.randn_like(x)
    return {
        "rms_norm fwd, eager": lambda: F.rms_norm(x, (4096,), w, 1e-6),
        "rms_norm fwd, bundled": lambda: rms_norm(x, (4096,), w, 1e-6),
        "rms_norm fwd, KernelOp": lambda: rms_norm_op(x, [4096], w, 1e-6),
        "rms_norm fwd, torch.ops operator": lambda: torch.ops.advisor_kernels.rms_norm(x, [4096], w, 1e-6),
        "rms_norm fwd, bare launcher": lambda: norm_fwd(x, None, w, None, 1e-6, True),
        "gelu fwd, eager": lambda: F.gelu(x),
        "gelu fwd, bundled": lambda: gelu(x),
        "rms_norm fwd+bwd, eager": lambda: torch.autograd.grad(F.rms_norm(xg, (4096,), wg, 1e-6), (xg, wg), dy),
        "rms_norm fwd+bwd, bundled": lambda: torch.autograd.grad(rms_norm(xg, (4096,), wg, 1e-6), (xg, wg), dy),
        "clone fwd+bwd, aten": lambda: torch.autograd.grad(xg.clone(), (xg,), dy),
        "clone fwd+bwd, Python Function": lambda: torch.autograd.grad(_Clone.apply(xg), (xg,), dy),
        "gelu fwd+bwd, eager": lambda: torch.autograd.grad(F.gelu(xg), (xg,), dy),
        "gelu fwd+bwd, bundled": lambda: torch.autograd.grad(gelu(xg), (xg,), dy),
    }


def main() -> None:
    calls = cases()
    for name, fn in calls.items():
        print(f"{name:34s} {host_us(fn):8.1f} us/call", flush=True)
    # On CUDA the autograd engine runs a backward on its device worker thread: a Python backward
    # then runs there, after a GIL handoff. The same calls with the engine on the calling thread:
    with torch.autograd.set_multithreading_enabled(False):
        for name, fn in calls.items():
            if "fwd+bwd" in name:
                print(f"{name + ', calling thread':34s} {host_us(fn):8.1f} us/call", flush=True)
    if "--cprofile" in sys.argv:
        for name in ("rms_norm fwd+bwd, bundled", "gelu fwd+bwd, bundled"):
            prof = cProfile.Profile()
            prof.enable()
            for _ in range(50):
                calls[name]()
            prof.disable()
            out = io.StringIO()
            pstats.Stats(prof, stream=out).sort_stats("tottime").print_stats(25)
            print(f"===== {name}\n{out.getvalue()}")


if __name__ == "__main__":
    main()
