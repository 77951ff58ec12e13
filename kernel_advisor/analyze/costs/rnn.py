"""Recurrent layers: aten::gru, aten::lstm, aten::rnn_tanh, aten::rnn_relu (padded and packed
overloads) and oneDNN's one-layer aten::mkldnn_rnn_layer.

FLOPs: every 2-D weight of the parameter list multiplies each of the N = T*B input rows of
its layer and direction once (the input projection w_ih over all steps, the recurrent w_hh
per step, LSTM's projection w_hr per step): 2*N*numel(w) per weight, i.e.
2*T*B*(I_l + H)*G*H per layer and direction with G = 3 (GRU), 4 (LSTM), 1 (RNN). That is
what FlopCounterMode counts for the mm/addmm calls the CPU path decomposes into.
Plus the gate math per hidden unit, row, layer and direction (a transcendental counts 1):
LSTM 13 (4 adds joining the projections, 3 sigmoids, 2 tanh, c = f*c + i*g 3, h = o*tanh 1),
GRU 10 (r, z: add + sigmoid 4; n = tanh(x_n + r*h_n) 3; h = n + z*(h - n) 3),
RNN 2 (add, activation); biases add 2*G more when present.
Bytes: weights, input and initial states read once, output and final states written once.
NB: activations passed between layers and the per-step gate tensors are not counted
(a fused kernel keeps them on chip); nor is the training-mode reserve space.
NB: dropout between layers (train=True, dropout > 0) is not counted.
NB: torch.profiler records no dtype for the Tensor[] parameter and state lists; RNNs require
them to match the input's dtype, which is used.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from kernel_advisor.analyze.costs.call import OpCall, Tensor
from kernel_advisor.analyze.costs.common import io_cost, written
from kernel_advisor.analyze.costs.errors import Unmodelled
from kernel_advisor.analyze.costs.registry import OpCost, register

GATES = {"gru": 3, "lstm": 4, "rnn_tanh": 1, "rnn_relu": 1}
GATE_FLOPS = {"gru": 10, "lstm": 13, "rnn_tanh": 2, "rnn_relu": 2}
# oneDNN's mode codes in mkldnn_rnn_layer(..., mode, ...): ideep's rnn_kind.
_MKLDNN_MODES = {0: "rnn_relu", 1: "rnn_tanh", 2: "lstm", 3: "gru"}


@dataclass(frozen=True)
class Recurrence:
    kind: str  # a GATES key
    rows: int  # N: input rows, T*B padded or sum(batch_sizes) packed
    hidden: int  # H, the cell size
    layer_directions: int  # num_layers * (2 if bidirectional else 1)
    weights: tuple[Tensor, ...]  # every 2-D weight (w_ih, w_hh, w_hr)
    has_biases: bool


def gemm_flops(r: Recurrence) -> int:
    """2 * N * numel(w) for each weight matrix: the mm/addmm work FlopCounterMode counts."""
    return sum(2 * r.rows * w.numel for w in r.weights)


def gate_flops(r: Recurrence) -> int:
    per_unit = GATE_FLOPS[r.kind] + (2 * GATES[r.kind] if r.has_biases else 0)
    return per_unit * r.rows * r.hidden * r.layer_directions


def recurrence_flops(r: Recurrence) -> int:
    return gemm_flops(r) + gate_flops(r)


def _kind(call: OpCall) -> str:
    return call.name.removeprefix("aten::")


def _layout(call: OpCall, kind: str) -> tuple[int, int, int, int]:
    """(state position, params position, flags position, batch_sizes position or -1).

    input overloads: (input, hx, params, has_biases, num_layers, dropout, train,
    bidirectional, batch_first); data overloads (packed): (data, batch_sizes, hx, params,
    has_biases, num_layers, dropout, train, bidirectional). LSTM's hx is a Tensor[] (h, c).
    """
    padded = call.is_list_arg(1) if kind == "lstm" else call.is_list_arg(2)
    if padded:
        return 1, 2, 3, -1
    if call.is_list_arg(3):
        return 2, 3, 4, 1
    raise Unmodelled(f"{call.name}: unknown overload")


def _states(call: OpCall, kind: str, pos: int, dtype: str) -> list[Tensor]:
    if kind == "lstm":
        return [Tensor(s, dtype) for s in call.list_shapes(pos)]
    return [call.tensor(pos)]


@register("gru", "lstm", "rnn_tanh", "rnn_relu")
def recurrent(call: OpCall) -> OpCost:
    kind = _kind(call)
    state_pos, params_pos, flags, sizes_pos = _layout(call, kind)
    x = call.tensor(0)
    if len(x.shape) not in (2, 3) or (sizes_pos >= 0 and len(x.shape) != 2):
        raise Unmodelled(f"{call.name}: input must be 2-D or 3-D, got {x.shape}")
    states = _states(call, kind, state_pos, x.dtype)
    if not states or any(len(s.shape) not in (2, 3) for s in states):
        raise Unmodelled(f"{call.name}: bad hidden state shapes")
    params = call.list_shapes(params_pos)
    has_biases = call.bool_at(flags)
    num_layers = call.int_at(flags + 1)
    bidirectional = call.bool_at(flags + 4)
    directions = 2 if bidirectional else 1
    groups = num_layers * directions
    if groups <= 0 or len(params) % groups:
        raise Unmodelled(f"{call.name}: {len(params)} parameters for {groups} layer-directions")
    per_group = len(params) // groups
    has_proj = per_group - 2 - 2 * has_biases
    if has_proj not in (0, 1) or (has_proj and kind != "lstm"):
        raise Unmodelled(f"{call.name}: {per_group} parameters per layer-direction")
    hidden = states[-1].shape[-1]  # LSTM: c has the cell size; h may be projected
    weights = tuple(Tensor(s, x.dtype) for s in params if len(s) == 2)
    if len(weights) != groups * (2 + has_proj) or any(
            w.shape[0] != GATES[kind] * hidden for w in weights[::2 + has_proj]):
        raise Unmodelled(f"{call.name}: weights {params} do not fit hidden size {hidden}")
    rows = x.numel // max(x.shape[-1], 1)
    r = Recurrence(kind, rows, hidden, groups, weights, has_biases)
    out_width = directions * states[0].shape[-1]
    out = written(x.shape[:-1] + (out_width,), x.dtype)
    biases = [Tensor(s, x.dtype) for s in params if len(s) == 1]
    reads = [x, *states, *weights, *biases]
    if sizes_pos >= 0:
        reads.append(call.tensor(sizes_pos))
    writes = [out, *(written(s.shape, s.dtype) for s in states)]
    return io_cost(recurrence_flops(r), reads, writes, x.dtype, tensor_cores=True)


@register("mkldnn_rnn_layer")
def mkldnn_rnn_layer(call: OpCall) -> OpCost:
    # mkldnn_rnn_layer(input, w_ih, w_hh, b_ih, b_hh, hx, cx, reverse, batch_sizes, mode,
    #                  hidden_size, num_layers, has_biases, bidirectional, batch_first, train)
    # -> (output, hy, cy, workspace): one layer, one direction.
    x, w_ih, w_hh = call.tensor(0), call.tensor(1), call.tensor(2)
    kind = _MKLDNN_MODES.get(call.int_at(9))
    if kind is None:
        raise Unmodelled(f"{call.name}: unknown mode {call.int_at(9)}")
    hidden = call.int_at(10)
    if len(x.shape) != 3 or w_ih.shape[0] != GATES[kind] * hidden:
        raise Unmodelled(f"{call.name}: shapes do not fit mode {kind}, hidden {hidden}")
    biases = [b for b in (call.optional_tensor(3), call.optional_tensor(4)) if b is not None]
    hx, cx = call.tensor(5), call.optional_tensor(6) if kind == "lstm" else None
    has_biases = call.bool_at(12)
    rows = math.prod(x.shape[:-1])
    r = Recurrence(kind, rows, hidden, 1, (w_ih, w_hh), has_biases)
    out = written(x.shape[:-1] + (hidden,), x.dtype)
    states = [s for s in (hx, cx) if s is not None]
    return io_cost(recurrence_flops(r), [x, w_ih, w_hh, *biases, *states],
                   [out, *(written(s.shape, s.dtype) for s in states)], x.dtype,
                   tensor_cores=True)
