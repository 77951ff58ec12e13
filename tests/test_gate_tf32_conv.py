"""The measure gate's TF32 rule: float32 convolutions on CUDA with cudnn.allow_tf32 on give a
variant TF32's tolerance, stated in its gate record. The choice is a pure function, tested on CPU."""
from __future__ import annotations

import dataclasses

import torch
import torch.nn as nn
from test_actions import loaded_of, seeded

from kernel_advisor.actions.flags import TF32_TOLERANCE
from kernel_advisor.experiment.trial import TF32_CONV_NOTE, _float32_convolutions, tf32_conv_tolerance
from kernel_advisor.trykernel.candidates import default_tolerance
from kernel_advisor.trykernel.capture import GateRecord
from kernel_advisor.trykernel.gate import compare_leaf


def test_float32_leaves_get_tf32_tolerance_on_cuda_with_tf32_convolutions():
    tolerance, note = tf32_conv_tolerance(default_tolerance, "cuda", True, True)
    assert tolerance(torch.float32) == TF32_TOLERANCE == (2e-2, 2e-2)  # default float32: (1e-5, 1e-5)
    assert tolerance(torch.bfloat16) == (1e-2, 1e-2)  # TF32 touches float32 math only
    assert note == TF32_CONV_NOTE and "cudnn.allow_tf32" in note and "0.02" in note


def test_a_looser_variant_tolerance_is_kept():
    autocast_like = lambda dtype: (5e-2, 5e-2)  # noqa: E731 - as bf16_autocast states its own
    tolerance, _ = tf32_conv_tolerance(autocast_like, "cuda", True, True)
    assert tolerance(torch.float32) == (5e-2, 5e-2)


def test_each_condition_is_needed():
    for device, tf32, convs in (("cpu", True, True), ("cuda", False, True), ("cuda", True, False)):
        tolerance, note = tf32_conv_tolerance(default_tolerance, device, tf32, convs)
        assert tolerance is default_tolerance and note == "", (device, tf32, convs)


def test_the_h200_channels_last_errors_fail_the_default_and_pass_tf32():
    # The H200 failure: channels_last 4.9e-5 from the float64 reference. Eager here is the
    # reference rounded to float32 (its distance ~0, the H200's was 1.3e-7), so the bound is
    # 2 · 0 + rtol: float32's 1e-5 < 4.9e-5 fails, TF32's 2e-2 > 4.9e-5 passes.
    ref = torch.linspace(1.0, 2.0, 1000, dtype=torch.float64)
    eager = ref.float()
    variant = (ref * (1 + 4.9e-5)).float()
    strict = compare_leaf("out", variant, eager, ref, default_tolerance(torch.float32))
    tolerance, _ = tf32_conv_tolerance(default_tolerance, "cuda", True, True)
    loose = compare_leaf("out", variant, eager, ref, tolerance(torch.float32))
    assert abs(strict.ref_rel_err - 4.9e-5) < 1e-6 and strict.baseline_ref_rel_err < 1e-7
    assert not strict.ok and "exceeds" in strict.problem
    assert loose.ok and loose.limit >= 2e-2


def _convnet(dtype=torch.float32) -> nn.Module:
    return nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU(), nn.Flatten(), nn.LazyLinear(2)).to(dtype)


def test_float32_convolutions_are_found_in_the_model():
    loaded = loaded_of(_convnet(), seeded(1, 3, 5, 5))
    assert _float32_convolutions(loaded.model, loaded)
    assert not _float32_convolutions(nn.Linear(4, 4), loaded)  # no convolution
    assert not _float32_convolutions(_convnet(torch.bfloat16), loaded)  # convolutions in 16 bits
    assert not _float32_convolutions(loaded.model, dataclasses.replace(loaded, autocast=torch.bfloat16))
    with torch.autocast("cpu", dtype=torch.bfloat16):  # a variant's own autocast (bf16_autocast)
        assert not _float32_convolutions(loaded.model, loaded)


def test_the_gate_record_states_the_tolerance():
    c = compare_leaf("out", torch.ones(3), torch.ones(3), None, (1e-5, 1e-5))
    assert "tolerance" not in GateRecord([c], draws=1).worst()
    assert GateRecord([c], draws=1, tolerance=TF32_CONV_NOTE).worst()["tolerance"] == TF32_CONV_NOTE


def test_gate_variant_gates_channels_last_with_the_stated_tolerance(monkeypatch):
    # The device is only labelled cuda: the tensors stay on the CPU, and the gate reads nothing
    # but the label, the cudnn flag and the modules, so the wiring is tested without a GPU.
    from kernel_advisor.actions.module_rewrites import prepare_channels_last
    from kernel_advisor.experiment.trial import gate_variant
    from kernel_advisor.trykernel.capture import capture_step

    monkeypatch.setattr(torch.backends.cudnn, "allow_tf32", True)
    net = nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU()).eval()
    loaded = dataclasses.replace(loaded_of(net, seeded(2, 3, 6, 6)), device=torch.device("cuda"))
    variant = prepare_channels_last(loaded, "inference")
    inputs = loaded.make_inputs(1)
    base = capture_step(loaded, net, net, inputs, "inference")
    record = GateRecord()
    gate_variant(loaded, variant, inputs, base, None, "inference", record)
    assert record.problem == "" and record.tolerance == TF32_CONV_NOTE
    assert record.comparisons[0].limit == TF32_TOLERANCE[0]  # no reference: the bound is rtol alone
    assert record.worst()["tolerance"] == TF32_CONV_NOTE
