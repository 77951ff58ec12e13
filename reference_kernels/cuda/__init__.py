"""CUDA C++ reference kernels: softmax, rms_norm, layer_norm and bias + activation, forward only.

Sources (*.cu, binding.cpp, *.h) sit beside the Python wrappers (softmax.py, norms.py,
bias_act.py); build.load_extension() JIT-compiles them on first use. specs.py registers them
without building anything.
"""
