"""cuDNN's RNN ops as a GPU trace records them: aten::_cudnn_rnn and aten::_cudnn_rnn_backward.

A GRU or LSTM trained on CUDA spends its backward in one aten::_cudnn_rnn_backward call (in the
H200 run of benchmarks/advice/models/gru_seq.py, 58 % of device time). Its arguments arrive with
the weights flattened to (numel, 1) views of cuDNN's buffer.
"""
from __future__ import annotations

import json

import pytest

from kernel_advisor.analyze.costs import cost_arguments, op_cost
from kernel_advisor.analyze.costs.rnn import GATE_FLOPS, GATES

BACKWARD = "aten::_cudnn_rnn_backward"
FORWARD = "aten::_cudnn_rnn"
MODES = {"rnn_relu": 0, "rnn_tanh": 1, "lstm": 2, "gru": 3}
BYTES = {"float16": 2, "bfloat16": 2, "float32": 4}


def _flat_weights(kind, inp, hidden, layers, directions, biases=True, proj=0):
    """PyTorch's flat weight order per layer and direction: w_ih, w_hh, [b_ih, b_hh], [w_hr]."""
    gates, out = GATES[kind] * hidden, proj or hidden
    shapes = []
    for layer in range(layers):
        width = inp if layer == 0 else out * directions
        for _ in range(directions):
            shapes += [[gates * width, 1], [gates * out, 1]]
            shapes += [[gates, 1], [gates, 1]] if biases else []
            shapes += [[proj * hidden, 1]] if proj else []
    return shapes


def _backward_args(kind, t, b, inp, hidden, layers, directions, dtype="float16", mask=(True, False, False, True),
                   biases=True, proj=0, reserve=1000):
    weights = _flat_weights(kind, inp, hidden, layers, directions, biases, proj)
    buf = sum(s[0] for s in weights)
    out_width = (proj or hidden) * directions
    state = [layers * directions, b, proj or hidden]
    cell = [layers * directions, b, hidden] if kind == "lstm" else []
    shapes = [[b, t, inp], weights, [], [buf], state, cell, [b, t, out_width], [b, t, out_width],
              [], [], [], [], [], [], [], [], [], [], [], [], [reserve], []]
    dtypes = [dtype, "TensorList", "scalar", dtype, dtype, dtype if cell else "", dtype, dtype, "", "",
              *["scalar"] * 8, "ScalarList", "", "uint8", "ScalarList"]
    concrete = ["", "", str(4 if biases else 2), "", "", "", "", "", "", "", str(MODES[kind]), str(hidden),
                str(proj), str(layers), "True", "0.", "True", str(directions == 2), "[]", "", "",
                "[" + ", ".join(map(str, mask)) + "]"]
    return shapes, dtypes, concrete


def test_recorded_h200_gru_backward_hand_worked():
    # The call as the H200 trace of gru_seq (train, autocast) recorded it: 2 layers, bidirectional,
    # input 256, hidden 256, batch 64 x 128 steps, fp16, output_mask [dx, -, -, dw].
    shapes = json.loads('[[64,128,256],[[196608,1],[196608,1],[768,1],[768,1],[196608,1],[196608,1],'
                        '[768,1],[768,1],[393216,1],[196608,1],[768,1],[768,1],[393216,1],[196608,1],[768,1],'
                        '[768,1]],[],[1972224],[4,64,256],[],[64,128,512],[64,128,512],[],[],[],[],[],[],[],[],'
                        '[],[],[],[],[109052160],[]]')
    dtypes = ["float16", "TensorList", "scalar", "float16", "float16", "", "float16", "float16", "", "",
              "scalar", "scalar", "scalar", "scalar", "scalar", "scalar", "scalar", "scalar", "ScalarList", "",
              "uint8", "ScalarList"]
    concrete = ["", "", "4", "", "", "", "", "", "", "", "3", "256", "0", "2", "True", "0.", "True", "True",
                "[]", "", "", "[True, False, False, True]"]
    cost = op_cost(BACKWARD, shapes, dtypes, concrete)
    # N = 64*128 = 8192 rows; weight matrices: 2 x (196608 + 196608) + 2 x (393216 + 196608) = 1966080
    # data pass 2*8192*1966080 = 32,212,254,720, weights pass as much: 64,424,509,440;
    # gate math backward 2 x (10 + 6) x 8192 x 256 x 4 = 268,435,456
    assert cost.flops == 64_424_509_440 + 268_435_456
    # read: x 4,194,304 + weight_buf 3,944,448 + hx 131,072 + output 8,388,608 + grad_output 8,388,608
    # + reserve 109,052,160; written: dx 4,194,304 + dw 3,944,448
    assert cost.bytes == 134_099_200 + 8_138_752
    assert cost.compute_dtype == "float16" and cost.uses_tensor_cores


@pytest.mark.parametrize("kind", ["gru", "lstm", "rnn_tanh", "rnn_relu"])
@pytest.mark.parametrize("directions", [1, 2])
@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32"])
def test_backward_is_the_data_pass_plus_the_weights_pass(kind, directions, dtype):
    t, b, inp, hidden, layers = 7, 3, 5, 11, 2
    with_dw = op_cost(BACKWARD, *_backward_args(kind, t, b, inp, hidden, layers, directions, dtype))
    no_dw = op_cost(BACKWARD, *_backward_args(kind, t, b, inp, hidden, layers, directions, dtype,
                                              mask=(True, True, True, False)))
    rows, groups = t * b, layers * directions
    weights = sum(s[0] for s in _flat_weights(kind, inp, hidden, layers, directions) if s[0] != GATES[kind] * hidden)
    gates = 2 * (GATE_FLOPS[kind] + 2 * GATES[kind]) * rows * hidden * groups
    assert with_dw.flops == 2 * (2 * rows * weights) + gates
    assert no_dw.flops == 2 * rows * weights + gates
    buf_bytes = sum(s[0] for s in _flat_weights(kind, inp, hidden, layers, directions)) * BYTES[dtype]
    state_bytes = groups * b * hidden * BYTES[dtype] * (2 if kind == "lstm" else 1)
    # dropping dw drops its write; asking for dhx (and dcx) adds the state gradients'
    assert with_dw.bytes - no_dw.bytes == buf_bytes - state_bytes


def test_lstm_with_a_projection_counts_w_hr():
    # hidden 11 projected to 4: per layer-direction w_ih (44 x in), w_hh (44 x 4), b, b, w_hr (4 x 11)
    args = _backward_args("lstm", 7, 3, 5, 11, 1, 1, proj=4)
    cost = op_cost(BACKWARD, *args)
    weights = 44 * 5 + 44 * 4 + 4 * 11
    assert cost.flops == 2 * (2 * 21 * weights) + 2 * (13 + 8) * 21 * 11


def test_forward_matches_the_module_level_formula():
    # aten::_cudnn_rnn with flattened weights costs what aten::gru costs with 2-D ones
    t, b, inp, hidden = 7, 3, 5, 11
    flat = _flat_weights("gru", inp, hidden, 1, 1)
    shapes = [[b, t, inp], flat, [], [sum(s[0] for s in flat)], [1, b, hidden], [], [], [], [], [], [], [], [], [],
              [], []]
    dtypes = ["float32", "TensorList", "scalar", "float32", "float32", "", *["scalar"] * 8, "ScalarList", ""]
    concrete = ["", "", "4", "", "", "", "3", str(hidden), "0", "1", "True", "0.", "False", "False", "[]", ""]
    fwd = op_cost(FORWARD, shapes, dtypes, concrete)
    gru = op_cost("aten::gru", [[b, t, inp], [1, b, hidden], [[33, 5], [33, 11], [33], [33]], [], [], [], [], [], []],
                  ["float32", "float32", "TensorList", *["scalar"] * 6],
                  ["", "", "", "True", "1", "0.", "False", "False", "True"])
    assert fwd.flops == gru.flops == 2 * 21 * (33 * 5 + 33 * 11) + (10 + 6) * 21 * 11


@pytest.mark.parametrize("change, why", [(lambda c: c.__setitem__(10, "7"), "unknown mode"),
                                         (lambda c: c.__setitem__(13, "3"), "weights do not split into 3 layers")])
def test_arguments_that_do_not_fit_are_unmodelled(change, why):
    shapes, dtypes, concrete = _backward_args("gru", 7, 3, 5, 11, 2, 1)
    change(concrete)
    assert op_cost(BACKWARD, shapes, dtypes, concrete) is None, why


def test_rows_group_by_mode_sizes_and_mask():
    args = _backward_args("gru", 7, 3, 5, 11, 2, 2)
    read = dict(cost_arguments(BACKWARD, *args))
    assert {10, 11, 12, 13, 17, 21} <= set(read)



@pytest.mark.parametrize("kind, proj", [("gru", 0), ("lstm", 0), ("lstm", 4), ("rnn_tanh", 0)])
@pytest.mark.parametrize("biases", [True, False])
def test_a_weight_list_the_profiler_left_empty_is_rebuilt(kind, proj, biases):
    # a list of more than 30 weights is recorded as []: 4 layers x 2 directions x (2, 4 or 5)
    shapes, dtypes, concrete = _backward_args(kind, 7, 3, 5, 11, 4, 2, biases=biases, proj=proj)
    concrete[2] = str((4 if biases else 2) + (1 if proj else 0))  # weight_stride0
    full = op_cost(BACKWARD, shapes, dtypes, concrete)
    shapes[1] = []
    empty = op_cost(BACKWARD, shapes, dtypes, concrete)
    assert empty is not None and (empty.flops, empty.bytes) == (full.flops, full.bytes)
    # the forward of the same call, its list empty too: (x, [], stride0, weight_buf, hx, cx, mode, ...)
    fwd = op_cost(FORWARD, [shapes[0], [], [], shapes[3], shapes[4], shapes[5], *[[]] * 10],
                  [*dtypes[:6], *["scalar"] * 8, "ScalarList", ""],
                  ["", "", concrete[2], "", "", "", *concrete[10:18], "[]", ""])
    # backward with dw = data pass + weights pass (2 x the GEMMs) + 2 x the gate math
    assert fwd is not None and empty.flops == 2 * fwd.flops
