"""The experiment engine: configurations of a model prepared, gated, timed in the user's loop
regime, and searched within a budget. `recommend --measure` and the API run it; try-kernel
times with the same harness (collect/loop_timing.py) and builds kernels the same way."""
