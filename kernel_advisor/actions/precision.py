"""`float8`, `float8:compile`: the model's nn.Linear layers on FP8 tensor cores through torchao.

A deep copy of the model is converted, so the user's model stays the eager baseline:
- train: torchao.float8.convert_to_float8_training (Float8Linear, dynamic tensorwise
  scaling, e4m3 for the forward and backward GEMMs: torchao's default recipe);
- inference: torchao.quantization.quantize_ with Float8DynamicActivationFloat8WeightConfig
  (e4m3 weights quantised once, activations per call); per-row scales for bfloat16 weights
  (torchao's recommended recipe, bfloat16 only), per-tensor scales otherwise.
Only nn.Linear layers whose in_features and out_features are both multiples of 16 are
converted: torch._scaled_mm needs them, and torchao skips the others (its own filters say so).
`float8:compile` is the same copy under torch.compile, which fuses the casts of dynamic scaling
(see prepare_compiled). torchao is an optional dependency: `pip install torchao` or
`pip install 'kernel_advisor[fp8]'`.
"""
from __future__ import annotations

import contextlib
import copy
import importlib
import types
from typing import Iterator

import torch

from kernel_advisor.actions.base import Action, NotApplicable, Variant
from kernel_advisor.collect.loader import LoadedModel
from kernel_advisor.trykernel.compiled import compile_in_own_frame

MIN_CAPABILITY = (8, 9)  # fp8 tensor cores: Ada (8.9), Hopper (9.0), Blackwell (10.x)
DIM_MULTIPLE = 16  # torch._scaled_mm: both GEMM dims of the weight a multiple of 16
# NB: e4m3 keeps 3 mantissa bits: numbers near 1 are 2^-3 = 0.125 apart (unit roundoff 2^-4).
# One fp8 GEMM lands 2-5 % (relative Frobenius norm) from the float64 result on random data,
# weight gradients 5-11 % after a few layers (measured with torchao's emulation, docs/rules.md);
# a leaf further than one e4m3 step (0.125) from the reference, beyond twice eager's own error,
# is a broken conversion (wrong scale, overflow), not rounding. The gate reports the measured
# error beside the speedup either way.
FLOAT8_TOLERANCE = (0.125, 0.125)
INSTALL_HINT = "pip install torchao (or pip install 'kernel_advisor[fp8]')"


def float8_tolerance(dtype: torch.dtype) -> tuple[float, float]:
    """The gate's (rtol, atol) for every leaf of a float8 variant, whatever its dtype."""
    return FLOAT8_TOLERANCE


def eligible(module: torch.nn.Module) -> bool:
    """An nn.Linear torchao converts: both weight dims multiples of 16."""
    return (isinstance(module, torch.nn.Linear) and module.in_features % DIM_MULTIPLE == 0
            and module.out_features % DIM_MULTIPLE == 0)


def eligible_linears(model: torch.nn.Module) -> list[tuple[str, torch.nn.Linear]]:
    return [(name, m) for name, m in model.named_modules() if eligible(m)]


def prepare_float8(loaded: LoadedModel, mode: str) -> Variant:
    _require_fp8_device(loaded.device)
    model = loaded.model
    if not isinstance(model, torch.nn.Module):
        raise NotApplicable("the model is a callable, not an nn.Module: torchao converts nn.Linear modules")
    linears = [m for m in model.modules() if isinstance(m, torch.nn.Linear)]
    if not linears:
        raise NotApplicable("the model has no nn.Linear layer (torchao's float8 conversion swaps nn.Linear only)")
    targets = eligible_linears(model)
    if not targets:
        dims = ", ".join(sorted({f"{m.in_features}x{m.out_features}" for m in linears})[:4])
        raise NotApplicable(f"no nn.Linear layer has in_features and out_features divisible by {DIM_MULTIPLE} "
                            f"(torchao's float8 requirement, from torch._scaled_mm); found {dims}")
    swapped = [name or "the model" for name, m in model.named_modules()
               if isinstance(m.__dict__.get("forward"), types.FunctionType)]
    if swapped:
        # NB: an earlier action of a plan (sdpa, rms_norm_module, pad_gemm) swapped these forwards for
        # closures over the user's modules; deepcopy shares functions, so the copy would run the
        # originals' bf16 layers (and send their gradients there). Bound methods and partials are
        # remapped by deepcopy and are fine.
        raise NotApplicable(f"module forwards are swapped for closures over the user's modules "
                            f"({', '.join(swapped[:3])}), e.g. by another action of a plan: a float8 copy "
                            "would run the originals")
    torchao = _import_torchao()
    fp8 = copy.deepcopy(model)
    names = {name for name, _ in targets}

    def chosen(module: torch.nn.Module, fqn: str) -> bool:
        return fqn in names and eligible(module)

    if mode == "train":
        fp8 = torchao["convert_to_float8_training"](fp8, module_filter_fn=chosen)
        how = "convert_to_float8_training (tensorwise dynamic scaling, e4m3)"
    else:
        bf16 = all(m.weight.dtype == torch.bfloat16 for _, m in targets)
        granularity = torchao["PerRow"]() if bf16 else torchao["PerTensor"]()
        # set_inductor_config=False: True would change torch._inductor.config for the whole process
        config = torchao["Float8DynamicActivationFloat8WeightConfig"](granularity=granularity,
                                                                      set_inductor_config=False)
        torchao["quantize_"](fp8, config, filter_fn=chosen)
        how = f"quantize_ Float8DynamicActivationFloat8Weight ({'per-row' if bf16 else 'per-tensor'} scales, e4m3)"
    shapes = ", ".join(sorted({f"{m.in_features}x{m.out_features}" for _, m in targets})[:3])
    skipped = len(linears) - len(targets)
    rest = f"; {skipped} Linear(s) with dims off 16 left as they are" if skipped else ""
    return Variant("float8", fp8, f"{len(targets)} Linear layer(s) ({shapes}) through torchao {how}{rest}",
                   params_of=fp8, tolerance=float8_tolerance)


def _require_fp8_device(device: torch.device) -> None:
    if device.type != "cuda":
        raise NotApplicable(f"float8 matmuls need the fp8 tensor cores of a CUDA device of compute capability "
                            f"{MIN_CAPABILITY[0]}.{MIN_CAPABILITY[1]} or newer; this run is on the {device.type}")
    capability = tuple(torch.cuda.get_device_capability(device))
    if capability < MIN_CAPABILITY:
        raise NotApplicable(f"float8 matmuls need compute capability {MIN_CAPABILITY[0]}.{MIN_CAPABILITY[1]} or "
                            f"newer (Ada, Hopper, Blackwell); {torch.cuda.get_device_name(device)} is "
                            f"{capability[0]}.{capability[1]}")


def _import_torchao() -> dict:
    """The torchao entry points the action uses; NotApplicable when torchao is not installed."""
    try:
        float8 = importlib.import_module("torchao.float8")
        quantization = importlib.import_module("torchao.quantization")
    except ImportError as e:
        raise NotApplicable(f"torchao is not installed ({e}): {INSTALL_HINT}") from None
    try:
        return {"convert_to_float8_training": float8.convert_to_float8_training,
                "quantize_": quantization.quantize_,
                "Float8DynamicActivationFloat8WeightConfig": quantization.Float8DynamicActivationFloat8WeightConfig,
                "PerRow": quantization.PerRow, "PerTensor": quantization.PerTensor}
    except AttributeError as e:
        version = getattr(importlib.import_module("torchao"), "__version__", "?")
        raise NotApplicable(f"torchao {version} lacks {e.name}: "
                            "pip install -U torchao") from None


def prepare_compiled(loaded: LoadedModel, mode: str) -> Variant:
    """`float8:compile`: the float8 copy under torch.compile, the way torchao means it to run.

    NB: in eager the dynamic-scaling casts (amax, scale, cast: one memory-bound kernel each per
    tensor per call) cost more than the fp8 GEMM saves; on an H100, examples/mlp.py in bf16 ran
    8.0 ms with float8 against 6.3 ms eager (inference) and 47 ms against 18.5 ms (train), while
    compiled float8 ran 4.2 ms and 14.4 ms (bf16 compiled: 6.7 and 18.8 ms). A plan stacks only
    actions that measured faster alone, so float8 + compile is an action of its own.
    """
    if isinstance(loaded.model, torch._dynamo.eval_frame.OptimizedModule):
        raise NotApplicable("the model is already compiled")
    v = prepare_float8(loaded, mode)
    compiled = compile_in_own_frame(v.model)
    # params_of: the compiled wrapper names its parameters `_orig_mod.*`; gradients are compared by name.
    variant = Variant("float8:compile", compiled, f"{v.applied}; torch.compile(model)", params_of=v.model,
                      tolerance=float8_tolerance, stage="compile")
    variant.closers.append(torch._dynamo.reset)  # each variant compiles afresh
    return variant


# One number format per plan: never stacked with bf16_autocast.
FLOAT8 = Action("float8", "FP8 (e4m3) nn.Linear through torchao", "library", prepare_float8, exclusive="precision")
# One compile mode and one number format per plan; it carries out what float8 and compile recommend.
FLOAT8_COMPILED = Action("float8:compile", "FP8 (e4m3) nn.Linear through torchao, under torch.compile", "compile",
                  prepare_compiled, exclusive="compile", excludes=("precision",),
                  also_fixes=("float8", "compile", "pad_gemm"))


# ------------------------------------------------------------
# `bf16_autocast`: run the float32 model's steps under torch.autocast(dtype=bfloat16).

# NB: bfloat16 keeps 8 mantissa bits (relative rounding 2^-9 per product input); over a
# model's depth the output drifts by a few 1e-3 to 1e-2, so the gate allows 5e-2 — the
# measured error is reported beside the speedup either way.
AUTOCAST_TOLERANCE = (5e-2, 5e-2)


def prepare_bf16_autocast(loaded: LoadedModel, mode: str) -> Variant:
    if getattr(loaded, "autocast", None) is not None:
        raise NotApplicable("the run already uses --autocast")
    dtypes = _float_param_dtypes(loaded.model)
    if dtypes and dtypes != {torch.float32}:
        names = ", ".join(sorted(str(d).replace("torch.", "") for d in dtypes))
        raise NotApplicable(f"the model's parameters are {names}, not float32: nothing to autocast")
    if loaded.device.type == "cuda" and not torch.cuda.is_bf16_supported():
        raise NotApplicable("this GPU has no bfloat16 tensor cores")
    device_type = loaded.device.type
    return Variant("bf16_autocast", loaded.model, f"torch.autocast('{device_type}', dtype=torch.bfloat16)",
                   context=lambda: torch.autocast(device_type, dtype=torch.bfloat16),
                   tolerance=lambda dtype: AUTOCAST_TOLERANCE)


def _float_param_dtypes(model) -> set[torch.dtype]:
    if not isinstance(model, torch.nn.Module):
        return set()
    return {p.dtype for p in model.parameters() if p.is_floating_point()}


BF16_AUTOCAST = Action("bf16_autocast", "bfloat16 autocast", "library", prepare_bf16_autocast, exclusive="precision")


# ------------------------------------------------------------
# `compile`, `compile:reduce-overhead`, `compile:max-autotune-no-cudagraphs`: torch.compile the model.

MODES = {"compile": "default", "compile:reduce-overhead": "reduce-overhead",
         "compile:max-autotune-no-cudagraphs": "max-autotune-no-cudagraphs"}


def _preparer(name: str):
    mode = MODES[name]

    def prepare(loaded: LoadedModel, run_mode: str) -> Variant:
        if mode == "reduce-overhead" and loaded.device.type != "cuda":
            raise NotApplicable("CUDA graphs (mode='reduce-overhead') need a CUDA device; this run is on the CPU")
        if isinstance(loaded.model, torch._dynamo.eval_frame.OptimizedModule):
            raise NotApplicable("the model is already compiled")
        compiled = compile_in_own_frame(loaded.model, mode)
        # params_of: the compiled wrapper names its parameters `_orig_mod.*`; gradients are compared by name.
        variant = Variant(name, compiled, f"torch.compile(model, mode={mode!r})", params_of=loaded.model,
                          stage="compile", context=_quiet_autotune if "autotune" in mode else contextlib.nullcontext)
        # Each variant compiles afresh; the cache must not hand one mode's code to another.
        variant.closers.append(torch._dynamo.reset)
        return variant

    return prepare


@contextlib.contextmanager
def _quiet_autotune() -> Iterator[None]:
    """Inductor writes each GEMM's autotuning table straight to stderr; the advisor's stderr
    carries only its own lines, and the compile happens inside the first timed step's context."""
    from torch._inductor import select_algorithm

    saved = select_algorithm.PRINT_AUTOTUNE
    select_algorithm.PRINT_AUTOTUNE = False
    try:
        yield
    finally:
        select_algorithm.PRINT_AUTOTUNE = saved


# NB: inductor pads misaligned matmul dimensions itself (torch._inductor.config.shape_padding, on
# by default), so a compiled model gets what pad_gemm would give.
_ALSO_FIXES = {"compile": ("pad_gemm",), "compile:reduce-overhead": ("compile", "pad_gemm"),
               "compile:max-autotune-no-cudagraphs": ("compile", "pad_gemm")}

# The default mode's recommendations are also measured with CUDA graphs: once compile has fused
# the step, what is left is often launch overhead, which the run's eager trace cannot show.
_REFINEMENTS = {"compile": ("compile:reduce-overhead",)}

ACTIONS = tuple(Action(name, f"torch.compile (mode {mode!r})", "compile", _preparer(name), exclusive="compile",
                       also_fixes=_ALSO_FIXES[name], refinements=_REFINEMENTS.get(name, ()),
                       slow_to_prepare="autotune" in mode)
                for name, mode in MODES.items())
