"""CUDA C++ reference kernels: softmax, log_softmax, rms_norm, layer_norm and their residual
forms, cross-entropy, GELU/SiLU/SwiGLU (with backward) and bias + activation (forward only).

Sources (*.cu, *.cpp, *.h) sit beside the Python wrappers (softmax.py, norms.py,
cross_entropy.py, pointwise.py, bias_act.py); build.load_extension() JIT-compiles them on
first use. specs.py registers them without building anything.
"""
