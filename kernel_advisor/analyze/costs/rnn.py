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
torch.profiler records a Tensor[] of more than 30 tensors as [] (a 4-layer bidirectional GRU has
32 parameters): the parameter shapes are then rebuilt from the input width, the states, the
layer count, the direction count and has_biases, which fix them (`parameter_shapes`).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from kernel_advisor.analyze.costs import dtypes as dt
from kernel_advisor.analyze.costs.call import OpCall, Tensor
from kernel_advisor.analyze.costs.registry import OpCost, io_cost, register, written
from kernel_advisor.analyze.costs.shapes import Unmodelled

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


def parameter_shapes(kind: str, input_size: int, hidden: int, proj: int, layers: int,
                     directions: int, has_biases: bool) -> list[tuple[int, ...]]:
    """PyTorch's parameter list of a recurrent layer (nn.RNNBase._flat_weights order).

    Per layer and direction: w_ih (G*H, in), w_hh (G*H, out), [b_ih (G*H,), b_hh (G*H,)],
    [w_hr (P, H)], with out = P when LSTM's proj_size P > 0 else H, and in = input_size for the
    first layer, out * directions for the others.
    """
    gates, out = GATES[kind] * hidden, proj or hidden
    shapes: list[tuple[int, ...]] = []
    for layer in range(layers):
        width = input_size if layer == 0 else out * directions
        for _ in range(directions):
            shapes += [(gates, width), (gates, out)]
            shapes += [(gates,), (gates,)] if has_biases else []
            shapes += [(proj, hidden)] if proj else []
    return shapes


def _kind(call: OpCall) -> str:
    return call.name.removeprefix("aten::")


def _layout(call: OpCall, kind: str) -> tuple[int, int, int, int]:
    """(state position, params position, flags position, batch_sizes position or -1).

    input overloads: (input, hx, params, has_biases, num_layers, dropout, train,
    bidirectional, batch_first); data overloads (packed): (data, batch_sizes, hx, params,
    has_biases, num_layers, dropout, train, bidirectional). LSTM's hx is a Tensor[] (h, c).
    """
    padded = _is_list(call, 1) if kind == "lstm" else _is_list(call, 2)
    if padded:
        return 1, 2, 3, -1
    if _is_list(call, 3):
        return 2, 3, 4, 1
    raise Unmodelled(f"{call.name}: unknown overload")


def _is_list(call: OpCall, i: int) -> bool:
    """A Tensor[] argument, also one the profiler recorded as [] (more than 30 tensors)."""
    return call.is_list_arg(i) or (i < len(call.dtypes) and call.dtypes[i] == dt.TENSOR_LIST)


def _states(call: OpCall, kind: str, pos: int, dtype: str) -> list[Tensor]:
    if kind == "lstm":
        return [Tensor(s, dtype) for s in call.list_shapes(pos)]
    return [call.tensor(pos)]


def _unrecorded_params(kind: str, x: Tensor, states: list[Tensor], layers: int, directions: int,
                       has_biases: bool) -> list[tuple[int, ...]]:
    """The parameter shapes of a call whose list the profiler left empty, from its states:
    h's width is the output size, LSTM's c the cell size (they differ with a projection)."""
    out, hidden = states[0].shape[-1], states[-1].shape[-1]
    proj = out if kind == "lstm" and out != hidden else 0
    return parameter_shapes(kind, x.shape[-1], hidden, proj, layers, directions, has_biases)


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
    has_biases = call.bool_at(flags)
    num_layers = call.int_at(flags + 1)
    bidirectional = call.bool_at(flags + 4)
    directions = 2 if bidirectional else 1
    groups = num_layers * directions
    params = call.list_shapes(params_pos) or _unrecorded_params(kind, x, states, num_layers,
                                                                directions, has_biases)
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


# cuDNN's cudnnRNNMode_t: the same codes as oneDNN's.
_CUDNN_MODES = _MKLDNN_MODES


# Position of `mode` in aten::_cudnn_rnn(input, weight[], weight_stride0, weight_buf?, hx, cx?,
# mode, ...) and _cudnn_rnn_backward(input, weight[], weight_stride0, weight_buf, hx, cx?, output,
# grad_output?, grad_hy?, grad_cy?, mode, ..., dropout_state?, reserve, output_mask[4]). After it
# both take hidden_size, proj_size, num_layers, batch_first, dropout, train, bidirectional,
# batch_sizes.
_FORWARD_MODE, _BACKWARD_MODE = 6, 10
_HIDDEN, _PROJ, _LAYERS, _BIDIRECTIONAL = 1, 2, 3, 7  # offsets from mode


def _cudnn_recurrence(call: OpCall, mode: int) -> tuple[Recurrence, Tensor]:
    """The recurrence and the input of a cuDNN RNN call.

    NB: the weight list arrives flattened, each entry (numel, 1) in PyTorch's order per layer and
    direction (w_ih, w_hh, [b_ih, b_hh], [w_hr]); only the numels matter to the GEMM count.
    """
    x = call.tensor(0)
    kind = _CUDNN_MODES.get(call.int_at(mode))
    if kind is None:
        raise Unmodelled(f"{call.name}: unknown mode {call.int_at(mode)}")
    hidden, proj = call.int_at(mode + _HIDDEN), call.int_at(mode + _PROJ)
    layers, directions = call.int_at(mode + _LAYERS), 2 if call.bool_at(mode + _BIDIRECTIONAL) else 1
    groups = layers * directions
    has_proj = int(proj > 0)
    params = call.list_shapes(1) or _unrecorded_cudnn_params(call, kind, x, hidden, proj, layers,
                                                             directions)
    if groups <= 0 or not params or len(params) % groups:
        raise Unmodelled(f"{call.name}: {len(params)} weights for {groups} layer-directions")
    per_group = len(params) // groups
    has_biases = per_group - 2 - has_proj == 2
    if per_group - 2 - has_proj not in (0, 2) or len(x.shape) not in (2, 3):
        raise Unmodelled(f"{call.name}: {per_group} weights per layer-direction, input {x.shape}")
    matrices = [0, 1] + ([per_group - 1] if has_proj else [])
    weights = tuple(Tensor((math.prod(params[g * per_group + i]),), x.dtype)
                    for g in range(groups) for i in matrices)
    rows = x.shape[0] if len(x.shape) == 2 else x.numel // max(x.shape[-1], 1)
    return Recurrence(kind, rows, hidden, groups, weights, has_biases), x


def _unrecorded_cudnn_params(call: OpCall, kind: str, x: Tensor, hidden: int, proj: int,
                             layers: int, directions: int) -> list[tuple[int, ...]]:
    """The weight shapes of a cuDNN call whose list the profiler left empty. weight_stride0
    (argument 2) is the count per layer-direction: 2 matrices, 2 biases if any, w_hr if any."""
    has_biases = call.int_at(2) - int(proj > 0) == 4
    return parameter_shapes(kind, x.shape[-1], hidden, proj, layers, directions, has_biases)


@register("_cudnn_rnn")
def cudnn_rnn(call: OpCall) -> OpCost:
    r, x = _cudnn_recurrence(call, _FORWARD_MODE)
    states = call.tensors((4, 5))  # hx, cx
    out_width = (2 if call.bool_at(_FORWARD_MODE + _BIDIRECTIONAL) else 1) * states[0].shape[-1]
    out = written(x.shape[:-1] + (out_width,), x.dtype)
    buf = call.optional_tensor(3)
    weights = [buf] if buf is not None else list(r.weights)
    return io_cost(recurrence_flops(r), [x, *states, *weights],
                   [out, *(written(s.shape, s.dtype) for s in states)], x.dtype, tensor_cores=True)


@register("_cudnn_rnn_backward")
def cudnn_rnn_backward(call: OpCall) -> OpCost:
    """cuDNN's backward data pass, then (output_mask[3]) its backward weights pass.

    FLOPs: the data pass multiplies the gate gradients by every weight once (dx and the
    recurrent dh), 2*N*numel(w) each; the weights pass the gate gradients by the layer inputs
    and states, as much again. NB: the gate math backward counts twice the forward's.
    Bytes: input, weights, states, output, the output and state gradients and the reserve space
    (the forward's saved gate activations) read once; the gradients asked for written once.
    """
    r, x = _cudnn_recurrence(call, _BACKWARD_MODE)
    need_dx, need_dhx, need_dcx, need_dw = call.bools_at(21)
    flops = gemm_flops(r) * (1 + int(need_dw)) + 2 * gate_flops(r)
    hx, cx, buf = call.tensor(4), call.optional_tensor(5), call.tensor(3)
    reads = [x, buf, hx, cx, *call.tensors((6, 7, 8, 9)), call.tensor(20)]
    writes = [x if need_dx else None, hx if need_dhx else None,
              cx if need_dcx else None, buf if need_dw else None]
    return io_cost(flops, reads, writes, x.dtype, tensor_cores=True)


@register("gru_cell", "lstm_cell", "rnn_tanh_cell", "rnn_relu_cell")
def rnn_cell(call: OpCall) -> OpCost:
    # gru_cell(input [B, I], hx [B, H], w_ih, w_hh, b_ih, b_hh) | lstm_cell(input, hx: (h, c),
    # w_ih, w_hh, b_ih, b_hh): one step of one layer, the recurrence's formula with N = B rows.
    kind = call.name.removeprefix("aten::").removesuffix("_cell")
    x = call.tensor(0)
    states = ([Tensor(s, x.dtype) for s in call.list_shapes(1)] if kind == "lstm" else [call.tensor(1)])
    w_ih, w_hh = call.tensor(2), call.tensor(3)
    biases = [b for b in (call.optional_tensor(4), call.optional_tensor(5)) if b is not None]
    hidden = w_hh.shape[-1] if len(w_hh.shape) == 2 else 0
    if not hidden or w_ih.shape[0] != GATES[kind] * hidden or len(x.shape) not in (1, 2):
        raise Unmodelled(f"{call.name}: weights {w_ih.shape}, {w_hh.shape} do not fit {kind}")
    rows = x.shape[0] if len(x.shape) == 2 else 1
    r = Recurrence(kind, rows, hidden, 1, (w_ih, w_hh), bool(biases))
    return io_cost(recurrence_flops(r), [x, *states, w_ih, w_hh, *biases],
                   [written(s.shape, s.dtype) for s in states], x.dtype, tensor_cores=True)


@register("mkldnn_rnn_layer_backward")
def mkldnn_rnn_layer_backward(call: OpCall) -> OpCost:
    # mkldnn_rnn_layer_backward(input, w_ih, w_hh, b_ih, b_hh, hx, cx, output, hy, cy,
    #     grad_output, grad_hy, grad_cy, reverse, mode, hidden_size, num_layers, has_biases,
    #     train, bidirectional, batch_sizes, batch_first, workspace): one layer and direction,
    # the data pass and the weights pass as cuDNN's backward (2 x the GEMMs, 2 x the gate math).
    x, w_ih, w_hh = call.tensor(0), call.tensor(1), call.tensor(2)
    kind = _MKLDNN_MODES.get(call.int_at(14))
    if kind is None or len(x.shape) != 3 or w_ih.shape[0] != GATES[kind] * call.int_at(15):
        raise Unmodelled(f"{call.name}: shapes do not fit mode {call.int_at(14)}")
    r = Recurrence(kind, math.prod(x.shape[:-1]), call.int_at(15), 1, (w_ih, w_hh), call.bool_at(17))
    reads = call.tensors(range(0, 13)) + call.tensors((22,))
    writes = [written(t.shape, t.dtype) for t in call.tensors((0, 1, 2, 3, 4, 5, 6))]
    return io_cost(2 * gemm_flops(r) + 2 * gate_flops(r), reads, writes, x.dtype, tensor_cores=True)


@register("_pack_padded_sequence")
def pack_padded_sequence(call: OpCall) -> OpCost:
    """_pack_padded_sequence(input, lengths, batch_first) -> (data, batch_sizes): a gather of
    the rows inside each sequence's length into time-major order, no arithmetic.

    NB: the lengths' values are not recorded, so every sequence counts at full length: data is
    the input's size (an upper bound; shorter sequences pack fewer rows).
    """
    x, lengths = call.tensor(0), call.tensor(1)
    if len(x.shape) < 2:
        raise Unmodelled(f"{call.name}: input {x.shape} has no time and batch dims")
    steps = x.shape[1] if call.bool_at(2) else x.shape[0]
    return io_cost(0, [x, lengths], [written(x.shape, x.dtype), written((steps,), "int64")], x.dtype)


@register("_pad_packed_sequence")
def pad_packed_sequence(call: OpCall) -> OpCost:
    """_pad_packed_sequence(data, batch_sizes, batch_first, padding_value, total_length) ->
    (output, lengths): a scatter of the packed rows into a padded batch, no arithmetic.

    NB: the batch size (batch_sizes[0]) is not recorded, so the output counts the packed rows
    alone (a lower bound: the padding it also writes is left out).
    """
    data, batch_sizes = call.tensor(0), call.tensor(1)
    return io_cost(0, [data, batch_sizes], [written(data.shape, data.dtype)], data.dtype)


def recurrence_steps(call: OpCall) -> int:
    """The cell steps a recurrent-layer call runs one after another: T time steps per layer.

    T is the input's time dim (dim 1 with batch_first, else 0; an unbatched 2-D input's 0), or the
    length of batch_sizes for a packed input. NB: the layers count as a chain of T * L steps;
    cuDNN may start layer l+1 before layer l ends (a wavefront), so the chain can be as short as
    T + L - 1. The directions of a bidirectional layer run side by side and count once.
    """
    kind = _kind(call)
    if kind in GATES:
        _, _, flags, sizes_pos = _layout(call, kind)
        layers = call.int_at(flags + 1)
        if sizes_pos >= 0:
            return call.tensor(sizes_pos).shape[0] * layers
        return _time_dim(call.tensor(0), call.bool_at(flags + 5)) * layers
    mode = {"_cudnn_rnn": _FORWARD_MODE, "_cudnn_rnn_backward": _BACKWARD_MODE}.get(kind)
    if mode is not None:
        batch_sizes = call.ints_at(mode + _BIDIRECTIONAL + 1, ())
        layers = call.int_at(mode + _LAYERS)
        if batch_sizes:
            return len(batch_sizes) * layers
        return _time_dim(call.tensor(0), call.bool_at(mode + _LAYERS + 1)) * layers
    first = {"mkldnn_rnn_layer": 14, "mkldnn_rnn_layer_backward": 21}.get(kind)
    if first is None:
        raise Unmodelled(f"{call.name}: not a recurrent layer")
    return _time_dim(call.tensor(0), call.bool_at(first))


def _time_dim(x: Tensor, batch_first: bool) -> int:
    if len(x.shape) == 2:  # unbatched (T, I)
        return x.shape[0]
    if len(x.shape) != 3:
        raise Unmodelled(f"recurrent input {x.shape} is not (T, B, I) or (B, T, I)")
    return x.shape[1] if batch_first else x.shape[0]
