"""Multi-layer and bidirectional recurrences are priced whole, on CPU (oneDNN) and CUDA (cuDNN).

torch.profiler records a Tensor[] of more than 30 tensors as [] (4 layers x 2 directions x 4
parameters = 32), so the cost model rebuilds the parameter shapes from the call's other
arguments (rnn.parameter_shapes). These tests hold the rebuilt list against the modules' own
parameters and profile small models through the real path, reading the modelled share of
device time from the run's records.
"""
from __future__ import annotations

import json

import pytest
import torch
import torch.nn as nn

import kernel_advisor as ka
from kernel_advisor.analyze.costs import op_cost
from kernel_advisor.analyze.costs.rnn import parameter_shapes

MODELLED_MIN_PCT = 98.0
FLAGS = ["scalar"] * 6


def _module(kind, layers=4, bidirectional=True, bias=True, batch_first=False, proj=0):
    extra = {"proj_size": proj} if proj else {}
    cls = {"gru": nn.GRU, "lstm": nn.LSTM, "rnn_tanh": nn.RNN}[kind]
    return cls(8, 16, num_layers=layers, bidirectional=bidirectional, bias=bias, batch_first=batch_first,
               **extra)


@pytest.mark.parametrize("kind", ["gru", "lstm", "rnn_tanh"])
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("bidirectional", [True, False])
def test_parameter_shapes_are_the_modules_own(kind, bias, bidirectional):
    m = _module(kind, layers=3, bidirectional=bidirectional, bias=bias)
    directions = 2 if bidirectional else 1
    assert parameter_shapes(kind, 8, 16, 0, 3, directions, bias) == [tuple(p.shape) for p in m._flat_weights]


def test_parameter_shapes_with_a_projection():
    m = _module("lstm", layers=2, proj=4)
    assert parameter_shapes("lstm", 8, 16, 4, 2, 2, True) == [tuple(p.shape) for p in m._flat_weights]
    # per layer-direction: w_ih, w_hh (64 x 4: h is projected), b_ih, b_hh, w_hr (4 x 16);
    # layer 1 reads both directions' projected outputs, 2 x 4 = 8 wide
    assert parameter_shapes("lstm", 8, 16, 4, 2, 2, True)[:5] == [(64, 8), (64, 4), (64,), (64,), (4, 16)]
    assert parameter_shapes("lstm", 8, 16, 4, 2, 2, True)[10] == (64, 8)


def _gru_call(params, dtype="float32", batch_first=False, bias=True):
    # aten::gru(input, hx, params, has_biases, num_layers, dropout, train, bidirectional, batch_first)
    x = [2, 5, 8] if batch_first else [5, 2, 8]
    shapes = [x, [8, 2, 16], params, [], [], [], [], [], []]
    dtypes = [dtype, dtype, "TensorList", *FLAGS]
    concrete = ["", "", "", str(bias), "4", "0.", "False", "True", str(batch_first)]
    return shapes, dtypes, concrete


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("batch_first", [True, False])
def test_a_list_the_profiler_left_empty_costs_what_the_recorded_list_costs(dtype, bias, batch_first):
    recorded = [list(s) for s in parameter_shapes("gru", 8, 16, 0, 4, 2, bias)]
    full = op_cost("aten::gru", *_gru_call(recorded, dtype, batch_first, bias))
    empty = op_cost("aten::gru", *_gru_call([], dtype, batch_first, bias))
    assert empty is not None and (empty.flops, empty.bytes) == (full.flops, full.bytes)


def test_four_layer_bidirectional_gru_hand_worked():
    cost = op_cost("aten::gru", *_gru_call([]))
    # N = 5 x 2 = 10 rows; per direction, layer 0: w_ih 48 x 8 + w_hh 48 x 16 = 1152,
    # layers 1-3: 48 x 32 + 48 x 16 = 2304; GEMMs 2 x 10 x 2 x (1152 + 3 x 2304) = 322,560
    # gate math (10 + 2 x 3 for the biases) x 10 rows x 16 x 8 layer-directions = 20,480
    assert cost.flops == 322_560 + 20_480
    # read: x 80 + hx 256 + weights 2 x (1152 + 3 x 2304) = 16,128 + biases 16 x 48 = 768;
    # written: output 5 x 2 x 32 = 320, hy 256; 17,808 floats of 4 bytes
    assert cost.bytes == 4 * (80 + 256 + 16_128 + 768 + 320 + 256)


def _modelled_pct(run) -> float:
    """The share of device time on modelled rows, from ops.csv (coverage()'s definition)."""
    ops = run.ops
    total = float(ops["device_time_total_s"].sum())
    return 100.0 * float(ops.loc[ops["modelled"].astype(bool), "device_time_total_s"].sum()) / total


class _Packed(nn.Module):
    """A bidirectional GRU over a packed batch of two lengths (the data overload)."""

    def __init__(self):
        super().__init__()
        self.rnn = _module("gru")

    def forward(self, x):
        packed = nn.utils.rnn.pack_padded_sequence(x, torch.tensor([5, 3]), enforce_sorted=True)
        return nn.utils.rnn.pad_packed_sequence(self.rnn(packed)[0])[0]


CASES = {
    "gru": lambda: _module("gru"),
    "gru-batch-first-no-bias": lambda: _module("gru", bias=False, batch_first=True),
    "lstm": lambda: _module("lstm"),
    "lstm-batch-first-no-bias": lambda: _module("lstm", bias=False, batch_first=True),
    "lstm-proj": lambda: _module("lstm", proj=4),
    "gru-packed": _Packed,
}


@pytest.mark.parametrize("case", list(CASES))
def test_bidirectional_multi_layer_recurrences_are_modelled_on_cpu(case, advisor_home, recwarn):
    model = CASES[case]()
    x = torch.randn(2, 5, 8) if getattr(model, "batch_first", False) else torch.randn(5, 2, 8)
    run = ka.profile(model, [x], device="cpu", steps=2, warmup=1)
    assert _modelled_pct(run) >= MODELLED_MIN_PCT, run.meta["coverage"]["unmodelled"]
    assert run.meta["coverage"]["modelled_time_pct"] == pytest.approx(_modelled_pct(run))
    rnn_rows = run.ops[run.ops["name"].isin(["aten::gru", "aten::lstm"])]
    assert len(rnn_rows) == 1 and bool(rnn_rows["modelled"].iloc[0])
    shapes = rnn_rows["input_shapes"].iloc[0]
    shapes = json.loads(shapes) if isinstance(shapes, str) else shapes
    count = len(getattr(model, "rnn", model)._flat_weights)
    assert (shapes[3 if "packed" in case else 2] == []) == (count > 30), count  # the profiler's limit


@pytest.mark.gpu
@pytest.mark.parametrize("mode", ["inference", "train"])
@pytest.mark.parametrize("case", ["gru", "lstm", "gru-batch-first-no-bias", "lstm-proj"])
def test_bidirectional_multi_layer_recurrences_are_modelled_on_cuda(case, mode, advisor_home, recwarn):
    # cuDNN: aten::gru / aten::lstm over aten::_cudnn_rnn forward, aten::_cudnn_rnn_backward in
    # training; both lists of 32 or more weights arrive as [].
    model = CASES[case]()
    x = torch.randn(2, 5, 8) if model.batch_first else torch.randn(5, 2, 8)
    run = ka.profile(model, [x], device="cuda", mode=mode, steps=2, warmup=1)
    rnn = run.ops["name"].isin(["aten::gru", "aten::lstm", "aten::_cudnn_rnn_backward"])
    assert run.ops.loc[rnn, "modelled"].astype(bool).all(), run.ops.loc[rnn, ["name", "input_shapes"]]
    assert _modelled_pct(run) >= MODELLED_MIN_PCT, run.meta["coverage"]["unmodelled"]
