"""A cheaper `kernel[grid](...)`: the compiled kernel cached under a key computed in Python.

`JITFunction.run` binds the arguments, specializes each one, builds the cache key, looks the
compiled kernel up, checks the globals it read and then launches: ~20 µs of host time a
launch on an H200 host (triton 3.6), more than the GPU time of a mid-size row op
(benchmarks/studies/launch_cost.py). `FastLaunch` keeps what `run` found for each
specialization and launches it through the compiled kernel's own launcher, which is what
`run` itself ends with.

The key is a superset of Triton's: per tensor its dtype and 16-byte alignment, every other
argument and launch option by type and value, and the current device. Two calls with equal
keys therefore always select the same compiled kernel. The first call of a key, a call while
a launch hook is installed (proton, or anything else reading launch metadata) and every call
under the interpreter go through `JITFunction.run` unchanged.
"""
from __future__ import annotations

import functools
import inspect
import os
import re
from typing import Any, Callable

import torch
import triton
from triton.runtime.jit import JITFunction

from reference_kernels.triton._common import INTERPRETED

try:  # triton >= 3.3 keeps the launch hooks in knobs
    from triton import knobs as _knobs
except ImportError:  # pragma: no cover - older triton: no fast path
    _knobs = None

# `ADVISOR_FAST_LAUNCH=0` (read at import) launches every call through JITFunction.run: the
# A/B switch of benchmarks/studies/launch_cost.py.
ENABLED = (not INTERPRETED and _knobs is not None
           and os.environ.get("ADVISOR_FAST_LAUNCH", "1") != "0")

_EMPTY = object()
# Compiled kernels kept per FastLaunch; past this many keys the cache starts over.
MAX_KEYS = 4096

# What FastLaunch takes from Triton's internals (tests/test_upstream_pins.py pins each on the
# installed triton): a JITFunction's `params` and their PARAM_ATTRS; the CompiledKernel that
# `fn[grid](...)` returns, with KERNEL_ATTRS; knobs.runtime.launch_enter_hook; and the launcher
# call that ends JITFunction.run, whose argument order `launch` repeats (all bound arguments,
# constexprs included, as triton >= 3.3 passes them). Where any differs, JITFunction.run launches.
PARAM_ATTRS = ("name", "default", "has_default")
KERNEL_ATTRS = ("run", "function", "packed_metadata")
LAUNCH_CALL = re.compile(  # on the source with all whitespace removed
    r"kernel\.run\(\w+,\w+,\w+,\w+,kernel\.function,kernel\.packed_metadata,\w+,"
    r"knobs\.runtime\.launch_enter_hook,knobs\.runtime\.launch_exit_hook,\*bound_args\.values\(\)\)")


@functools.cache
def triton_launches_as_expected() -> bool:
    """JITFunction.run ends in the launcher call FastLaunch repeats, and the launch hooks live
    where FastLaunch looks for them."""
    runtime = getattr(_knobs, "runtime", None)
    if not hasattr(runtime, "launch_enter_hook"):
        return False
    try:
        source = inspect.getsource(JITFunction.run)
    except (OSError, TypeError):  # no source shipped: nothing to check the call against
        return False
    return LAUNCH_CALL.search("".join(source.split())) is not None


class FastLaunch:
    """`FastLaunch(jit_fn)[grid](*args, **kwargs)` launches as `jit_fn[grid](...)` does."""

    def __init__(self, fn: triton.runtime.JITFunction):
        self.fn = fn
        self.names = tuple(p.name for p in fn.params)
        defaults = tuple(p.default if p.has_default else _EMPTY for p in fn.params)
        # (name, default) of the parameters after the first n, for every n: what _bind fills in
        self.tail = [tuple(zip(self.names[n:], defaults[n:])) for n in range(len(self.names) + 1)]
        self.compiled: dict[tuple, tuple[Callable, Any, Any]] = {}

    def __getitem__(self, grid: tuple[int, ...]) -> Callable[..., None]:
        return lambda *args, **kwargs: self.launch(grid, args, kwargs)

    def launch(self, grid: tuple[int, ...], args: tuple, kwargs: dict) -> None:
        values = self._bind(args, kwargs)
        if values is None or _hooked(_knobs.runtime.launch_enter_hook):
            self.fn[grid](*args, **kwargs)
            return
        device = torch.cuda.current_device()
        key = self._key(device, args, kwargs)
        hit = self.compiled.get(key)
        if hit is None:
            kernel = self.fn[grid](*args, **kwargs)
            if all(hasattr(kernel, a) for a in KERNEL_ATTRS):  # a CompiledKernel, as triton >= 3.3 returns
                if len(self.compiled) >= MAX_KEYS:
                    self.compiled.clear()
                self.compiled[key] = (kernel.run, kernel.function, kernel.packed_metadata)
            return
        run, function, packed = hit
        stream = torch._C._cuda_getCurrentRawStream(device)
        g1 = grid[1] if len(grid) > 1 else 1
        g2 = grid[2] if len(grid) > 2 else 1
        run(grid[0], g1, g2, stream, function, packed, None, None, None, *values)

    def _bind(self, args: tuple, kwargs: dict) -> list | None:
        """The arguments in parameter order, or None when a call does not bind (run reports it)."""
        values = list(args)
        for name, default in self.tail[len(args)]:
            value = kwargs.get(name, default)
            if value is _EMPTY:
                return None
            values.append(value)
        return values

    def _key(self, device: int, args: tuple, kwargs: dict) -> tuple:
        # Tensors by dtype and 16-byte alignment, everything else by value: a superset of what
        # Triton specializes on, and cheaper to compute than its exact rules. A model calls
        # with few distinct sizes, so keying sizes by value costs a few more entries.
        key: list = [device]
        for v in args:
            if isinstance(v, torch.Tensor):
                key.append(v.dtype)
                key.append(v.data_ptr() % 16 == 0)
            else:  # with its type: True and 1 are equal keys, not equal specializations
                key.append(type(v))
                key.append(v)
        key.extend(kwargs.items())
        return tuple(key)


def _hooked(hook: Any) -> bool:
    """A launch hook to honour: a plain callable, or a HookChain (triton >= 3.5's default, empty
    until proton or a user adds one) that holds any."""
    return hook is not None and bool(getattr(hook, "calls", True))


def _readable_params(fn) -> bool:
    params = getattr(fn, "params", None)
    return isinstance(params, list) and all(hasattr(p, a) for p in params for a in PARAM_ATTRS)


_LAUNCHERS: dict[int, FastLaunch] = {}


def fast(fn):
    """The FastLaunch of a @triton.jit kernel (one per kernel), or `fn` itself when the fast
    path is off, `fn` is not a plain JITFunction (an autotuner picks its config per call) or
    this triton does not launch the way FastLaunch repeats."""
    if not ENABLED or not isinstance(fn, JITFunction) or not _readable_params(fn) \
            or not triton_launches_as_expected():
        return fn
    launch = _LAUNCHERS.get(id(fn))
    if launch is None:
        launch = _LAUNCHERS[id(fn)] = FastLaunch(fn)
    return launch
