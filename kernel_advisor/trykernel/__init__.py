"""`advisor try-kernel`: substitute a kernel into the real model, gate it, measure the gain.

Layers, in the order a run uses them (docs/try-kernel.md has the full story):
selection (which kernels) → candidates (registry spec or --impl, with adapters and pattern
matches) → substitute_aten / substitute_module (scoped swaps, counted by calls) → gate
(per call and per model, against eager and float64; capture drives it) → driver (the
variants gated, then measured) → measure (interleaved step times, per-op profiler times, peak
memory) → results (predictions, try_kernel.json).
"""
from kernel_advisor.trykernel.candidates import CandidateSet, TryOptions
from kernel_advisor.trykernel.driver import TryResult, run_try_kernel, try_candidates
from kernel_advisor.trykernel.patterns import find_patterns
from kernel_advisor.trykernel.substitute_aten import override_aten
from kernel_advisor.trykernel.substitute_module import swap_modules

__all__ = ["CandidateSet", "TryOptions", "TryResult", "find_patterns", "override_aten", "run_try_kernel",
           "swap_modules", "try_candidates"]
