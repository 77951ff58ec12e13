"""Reference kernels that `advisor try-kernel` substitutes into a real model.

`reference_kernels.registry.all_kernels()` lists them as data (registry.KernelSpec).
"""
