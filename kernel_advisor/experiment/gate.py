"""The correctness gate for prepared actions: every variant against eager on fresh input draws.

The gate try-kernel uses too (trykernel/capture.py drives it, trykernel/gate.py compares): every output leaf and, in train mode,
every parameter gradient, against eager at the run's dtype and against the reference
(float64 where memory allows, trykernel/reference.py). A variant's first call is where
torch.compile compiles, so compile time is spent here and never inside the timing.

Tolerances: the variant's own (actions that change numerics on purpose state one), else the
kernel default for the leaf's dtype. One rule loosens them: see `tf32_conv_tolerance`.
"""
from __future__ import annotations

import dataclasses

import torch
import torch.nn as nn

from kernel_advisor.actions import Variant
from kernel_advisor.actions.base import Tolerance
from kernel_advisor.actions.flags import TF32_TOLERANCE
from kernel_advisor.collect.loader import LoadedModel
from kernel_advisor.trykernel.candidates import default_tolerance
from kernel_advisor.trykernel.capture import Captured, GateRecord, capture_step, gate_draw

TF32_CONV_NOTE = (f"float32 leaves held to TF32's {TF32_TOLERANCE[0]:g}: the model runs float32 convolutions "
                  "on CUDA with cudnn.allow_tf32 on, and cuDNN may pick a TF32 algorithm for the variant "
                  "and not for eager")


def gate_variant(loaded: LoadedModel, v: Variant, inputs: list, base: Captured, ref: Captured | None,
                 mode: str, record: GateRecord) -> None:
    """One draw of one variant; a variant that raises is recorded, never re-raised."""
    def run():
        with v.context():
            got = capture_step(loaded, v.model, v.params_of or loaded.model, v.convert_inputs(inputs), mode)
            # read inside the context: the variant itself may switch TF32 or autocast on
            tolerance, record.tolerance = tf32_conv_tolerance(
                v.tolerance or default_tolerance, loaded.device.type, torch.backends.cudnn.allow_tf32,
                _float32_convolutions(v.model, loaded))
        return _like(got, base), tolerance
    gate_draw(record, run, base, ref)


def tf32_conv_tolerance(tolerance: Tolerance, device_type: str, cudnn_allow_tf32: bool,
                        float32_convolutions: bool) -> tuple[Tolerance, str]:
    """The tolerance a variant is gated with, and the note stating it ("" when unchanged).

    NB: with cudnn.allow_tf32 on (PyTorch's default) cuDNN may run a float32 convolution on
    TF32 tensor cores, choosing the algorithm per layout and shape. Eager may get an exact
    algorithm and the variant (channels_last, a compiled or benchmarked conv) a TF32 one, so
    eager's own distance from the reference no longer bounds the variant's: float32 leaves get
    the tf32 action's tolerance. Other dtypes keep theirs; TF32 touches float32 math only.
    """
    if device_type != "cuda" or not cudnn_allow_tf32 or not float32_convolutions:
        return tolerance, ""

    def loosened(dtype: torch.dtype) -> tuple[float, float]:
        rtol, atol = tolerance(dtype)
        if dtype != torch.float32:
            return rtol, atol
        return max(rtol, TF32_TOLERANCE[0]), max(atol, TF32_TOLERANCE[1])

    return loosened, TF32_CONV_NOTE


def _float32_convolutions(model, loaded: LoadedModel) -> bool:
    """Does the model hold a torch.nn convolution that runs in float32 (no autocast around it)?"""
    if loaded.autocast is not None or torch.is_autocast_enabled(loaded.device.type):
        return False  # autocast runs convolutions in 16 bits
    modules = model.modules() if isinstance(model, nn.Module) else ()
    return any(isinstance(m, nn.modules.conv._ConvNd) and m.weight.dtype == torch.float32 for m in modules)


def _like(got: Captured, base: Captured) -> Captured:
    """The variant's leaves in eager's dtypes: autocast returns bfloat16 where eager gave float32."""
    dtypes = dict((path, t.dtype) for path, t in base.leaves)
    leaves = tuple((path, t.to(dtypes[path]) if path in dtypes and t.is_floating_point()
                    and dtypes[path].is_floating_point else t) for path, t in got.leaves)
    return dataclasses.replace(got, leaves=leaves)


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
