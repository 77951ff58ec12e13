"""Composite and list-taking ops: einsum, RNNs, upsampling, cat/stack, embedding_bag, pads,
triplet_margin_loss, the fused transformer fast paths; op rows grouped by the arguments
their cost depends on; and a held-out model profiled end to end through the CLI."""
from __future__ import annotations

import importlib.util
import json
import math
import random
from pathlib import Path

import pandas as pd
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from test_costs_helpers import DTYPE_NAMES, first, record, recorded, tensor_bytes
from torch.profiler import ProfilerActivity, profile, record_function
from torch.utils.flop_counter import FlopCounterMode

from kernel_advisor.analyze.costs import cost_arguments, op_cost
from kernel_advisor.analyze.costs.einsum import einsum_work
from kernel_advisor.analyze.costs.rnn import GATES, GATE_FLOPS
from kernel_advisor.analyze.costs.sampling import aa_flops_per_output, interpolation_flops_per_output
from kernel_advisor.collect.attribute import PRICED_BY_CHILDREN, attribute
from kernel_advisor.collect.trace import read_trace

DATA = Path(__file__).parent / "data"


def flop_counter(fn) -> int:
    mode = FlopCounterMode(display=False)
    with mode:
        fn()
    return mode.get_total_flops()


# ------------------------------------------------------------------------------ einsum

EINSUMS = [
    ("ij,jk->ik", [(3, 4), (4, 6)]),
    ("bij,bjk->bik", [(2, 3, 5), (2, 5, 7)]),
    ("bhqd,bhkd->bhqk", [(2, 3, 5, 7), (2, 3, 9, 7)]),
    ("bclhn,bcshn->bclhs", [(2, 3, 4, 5, 6), (2, 3, 7, 5, 6)]),  # Mamba2's chunked scan
    ("ij,jk,kl->il", [(3, 4), (4, 5), (5, 6)]),
    ("ijk,ikl,ilm->ijm", [(2, 3, 4), (2, 4, 5), (2, 5, 6)]),
    ("...ij,...jk->...ik", [(2, 3, 4, 5), (3, 5, 6)]),
    ("...d,...d->...", [(2, 3, 8), (2, 3, 8)]),
    ("bij,bjk", [(2, 3, 4), (2, 4, 5)]),  # implicit output
    ("bij,jk->bk", [(2, 3, 4), (4, 5)]),  # i is summed out of the first operand first
    ("i,i->", [(5,), (5,)]),
    ("i,j->ij", [(5,), (6,)]),  # outer product: a multiply, no bmm
    ("bi,bi->bi", [(3, 4), (3, 4)]),
    ("ii->i", [(4, 4)]),
    ("ij->j", [(3, 4)]),
    ("ij,kj->ik", [(1, 4), (3, 4)]),  # size-1 dims broadcast
    ("ij,ij,ij->i", [(3, 4), (3, 4), (3, 4)]),
]


@pytest.mark.parametrize("equation,shapes", EINSUMS)
def test_einsum_bmm_work_matches_flop_counter(equation, shapes):
    operands = [torch.randn(*s) for s in shapes]
    out = torch.einsum(equation, *operands)
    work = einsum_work(equation, shapes)
    assert work.bmm_flops == flop_counter(lambda: torch.einsum(equation, *operands))
    assert work.out_shape == tuple(out.shape)


def test_random_einsums_match_flop_counter():
    # 1 to 3 operands over labels a-e with sizes 1, 2, 3, 5 (broadcast dims included), some
    # with a repeated label (a diagonal), random explicit outputs.
    rng = random.Random(0)
    for _ in range(150):
        sizes = {c: rng.choice([1, 2, 3, 5]) for c in "abcde"}
        terms = []
        for _ in range(rng.choice([1, 2, 2, 3])):
            term = "".join(rng.sample("abcde", rng.randint(1, 4)))
            terms.append(term + term[0] if rng.random() < 0.2 else term)
        used = sorted(set("".join(terms)))
        equation = ",".join(terms) + "->" + "".join(rng.sample(used, rng.randint(0, len(used))))
        shapes = [tuple(sizes[c] for c in t) for t in terms]
        operands = [torch.randn(*s) for s in shapes]
        work = einsum_work(equation, shapes)
        assert work.bmm_flops == flop_counter(lambda: torch.einsum(equation, *operands)), equation
        assert work.out_shape == tuple(torch.einsum(equation, *operands).shape), equation


def test_einsum_follows_a_recorded_contraction_path():
    # path (1, 2) then (0, 1): [4,5] @ [5,6] first (2*4*5*6 = 240), then [3,4] @ [4,6]
    # (2*3*4*6 = 144), 384 in all; left to right would be 2*3*4*5 + 2*3*5*6 = 120 + 180 = 300.
    shapes = [(3, 4), (4, 5), (5, 6)]
    ops = [torch.randn(*s) for s in shapes]
    counted = flop_counter(lambda: torch.ops.aten.einsum("ij,jk,kl->il", ops, path=[1, 2, 0, 1]))
    assert einsum_work("ij,jk,kl->il", shapes, (1, 2, 0, 1)).bmm_flops == counted == 384
    assert einsum_work("ij,jk,kl->il", shapes).bmm_flops == 300


def test_einsum_with_a_recorded_equation_hand_worked():
    # bqh,bkh->bqk with b=2, q=3, k=5, h=7: one bmm [2,3,7] @ [2,7,5] = 2*2*3*7*5 = 420 flops;
    # bytes (2*3*7 + 2*5*7 + 2*3*5) * 4 = (42 + 70 + 30) * 4 = 568, at the assumed float32.
    c = op_cost("aten::einsum", [[], [[2, 3, 7], [2, 5, 7]], []], ["", "TensorList", ""],
                ["bqh,bkh->bqk", "", ""])
    assert (c.flops, c.bytes, c.compute_dtype, c.uses_tensor_cores) == (420, 568, "float32", True)
    quoted = op_cost("aten::einsum", [[], [[2, 3, 7], [2, 5, 7]], []], ["", "TensorList", ""],
                     ["'bqh,bkh->bqk'", "", ""])
    assert quoted == c


def test_einsum_without_equation_is_priced_by_its_children():
    # torch.profiler (through 2.13) records no string argument: the equation slot is "",
    # attribution hands the work to its children (bmm, copies), and what stays on the einsum
    # row - its own dispatch - is zero work: modelled, and read as overhead
    a, b = torch.randn(3, 4), torch.randn(4, 5)
    event = recorded("aten::einsum", lambda: torch.einsum("ij,jk->ik", a, b))
    assert event.concrete[PRICED_BY_CHILDREN["aten::einsum"]] == ""
    cost = event.cost()
    assert (cost.flops, cost.bytes) == (0, 0)


def test_einsum_rejects_equations_that_do_not_fit():
    for eq, shapes in [("ij,jk->ik", [(3, 4)]), ("ij->ik", [(3, 4)]), ("ij,jk->ik", [(3, 4), (5, 6)]),
                       ("i1,j->ij", [(3,), (4,)])]:
        assert op_cost("aten::einsum", [[], [list(s) for s in shapes], []],
                       ["", "TensorList", ""], [eq, "", ""]) is None


# -------------------------------------------------------------------------------- RNNs

def _rnn_module(kind, i, h, layers, bidirectional, batch_first, proj=0):
    kw = dict(num_layers=layers, bidirectional=bidirectional, batch_first=batch_first)
    if kind == "lstm":
        return nn.LSTM(i, h, proj_size=proj, **kw)
    if kind == "gru":
        return nn.GRU(i, h, **kw)
    return nn.RNN(i, h, nonlinearity=kind.removeprefix("rnn_"), **kw)


def _rnn_case(kind, layers, bidirectional, batch_first, dtype, proj=0, t=7, b=3, i=5, h=11):
    rnn = _rnn_module(kind, i, h, layers, bidirectional, batch_first, proj).to(dtype)
    x = torch.randn((b, t, i) if batch_first else (t, b, i), dtype=dtype)
    with torch.no_grad():
        event = recorded(f"aten::{kind}", lambda: rnn(x))
        with torch.backends.mkldnn.flags(enabled=False):  # FlopCounterMode cannot see oneDNN
            gemm = flop_counter(lambda: rnn(x))
        out, state = rnn(x)
    states = list(state) if isinstance(state, tuple) else [state]
    return rnn, x, event, gemm, out, states


@pytest.mark.parametrize("kind", ["gru", "lstm", "rnn_tanh", "rnn_relu"])
@pytest.mark.parametrize("layers,bidirectional", [(1, False), (2, True), (3, False)])
@pytest.mark.parametrize("batch_first", [False, True])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_rnn_matches_flop_counter_plus_gate_math(kind, layers, bidirectional, batch_first, dtype):
    # odd sizes: T=7, B=3, I=5, H=11
    rnn, x, event, gemm, out, states = _rnn_case(kind, layers, bidirectional, batch_first, dtype)
    c = event.cost()
    directions = 2 if bidirectional else 1
    gates = (GATE_FLOPS[kind] + 2 * GATES[kind]) * 7 * 3 * 11 * layers * directions  # biases on
    assert c.flops == gemm + gates
    assert c.bytes == tensor_bytes(x, list(rnn.parameters()), out, states, states)
    assert c.compute_dtype == DTYPE_NAMES[dtype] and c.uses_tensor_cores


def test_gru_hand_worked():
    # GRU(8, 16), T=5, B=3: N = 15 rows; weights w_ih [48,8] + w_hh [48,16] = 1152 elements:
    # 2 * 15 * 1152 = 34560 gemm flops; gates (10 + 2*3 bias adds) * 15 * 16 = 3840.
    # bytes: x 120 + h0 48 + weights 1152 + biases 96 + out 240 + h_n 48 = 1704 floats.
    c = op_cost("aten::gru", [[5, 3, 8], [1, 3, 16], [[48, 8], [48, 16], [48], [48]],
                              [], [], [], [], [], []],
                ["float", "float", "TensorList"] + ["Scalar"] * 6,
                ["", "", "", "True", "1", "0.", "False", "False", "False"])
    assert (c.flops, c.bytes) == (34560 + 3840, 1704 * 4)


def test_lstm_with_projection_and_packed_gru():
    # LSTM(5, 11, proj_size=4, 2 layers, bidirectional): gemm from FlopCounterMode, gates
    # (13 + 8) per unit.
    rnn, x, event, gemm, out, states = _rnn_case("lstm", 2, True, False, torch.float32, proj=4)
    assert event.cost().flops == gemm + 21 * 7 * 3 * 11 * 4
    # packed: 5 + 4 + 2 = 11 rows instead of T*B = 15
    gru = nn.GRU(8, 16)
    packed = nn.utils.rnn.pack_padded_sequence(torch.randn(5, 3, 8), [5, 4, 2])
    with torch.no_grad():
        c = recorded("aten::gru", lambda: gru(packed)).cost()
    assert c.flops == 2 * 11 * (48 * 8 + 48 * 16) + 16 * 11 * 16


def test_mkldnn_rnn_layer():
    # oneDNN runs the CPU LSTM as one mkldnn_rnn_layer per layer and direction: the same count.
    lstm = nn.LSTM(6, 9)
    x = torch.randn(4, 2, 6)
    with torch.no_grad():
        events = record(lambda: lstm(x))
    names = {e.name for e in events}
    if "aten::mkldnn_rnn_layer" not in names:
        pytest.skip("oneDNN does not run this LSTM here")
    layer = first(events, "aten::mkldnn_rnn_layer").cost()
    outer = first(events, "aten::lstm").cost()
    assert layer.flops == outer.flops == 2 * 8 * (36 * 6 + 36 * 9) + (13 + 8) * 8 * 9


# ---------------------------------------------------------------------------- upsample

UPSAMPLES = [
    ("nearest", (2, 3, 7), dict(scale_factor=2.5), 1),
    ("linear", (2, 3, 7), dict(size=12), 2),
    ("linear", (2, 3, 7), dict(scale_factor=1.7, align_corners=True), 2),
    ("nearest", (1, 3, 5, 7), dict(size=(9, 4)), 1),
    ("nearest-exact", (1, 3, 5, 7), dict(scale_factor=1.5), 1),
    ("bilinear", (2, 3, 5, 7), dict(scale_factor=2), 4),
    ("bilinear", (2, 3, 5, 7), dict(scale_factor=(1.5, 3), align_corners=True), 4),
    ("bicubic", (1, 2, 5, 7), dict(size=(11, 3)), 16),
    ("nearest", (1, 2, 3, 5, 4), dict(scale_factor=2), 1),
    ("trilinear", (1, 2, 3, 5, 4), dict(size=(4, 7, 9)), 8),
]


@pytest.mark.parametrize("mode,shape,kwargs,taps", UPSAMPLES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_upsample_recorded(mode, shape, kwargs, taps, dtype):
    x = torch.randn(*shape, dtype=dtype)
    out = F.interpolate(x, mode=mode, **kwargs)
    events = [e for e in record(lambda: F.interpolate(x, mode=mode, **kwargs))
              if "upsample" in e.name]
    assert events  # the .vec overload F.interpolate calls, and the one it dispatches to
    for event in events:
        c = event.cost()
        assert c.bytes == tensor_bytes(x, out)
        assert c.flops == interpolation_flops_per_output(taps) * out.numel()


def test_upsample_hand_worked():
    # bilinear [1,2,4,4] x2 -> [1,2,8,8] = 128 outputs * 7 flops (4 taps) = 896;
    # bytes (32 + 128) * 4 = 640. floor(5 * 1.5) = 7 for the scale-factor overload.
    c = op_cost("aten::upsample_bilinear2d", [[1, 2, 4, 4], [], [], []],
                ["float", "", "Scalar", "ScalarList"], ["", "", "False", "[2., 2.]"])
    assert (c.flops, c.bytes) == (896, 640)
    c = op_cost("aten::upsample_nearest1d", [[1, 1, 5], [], []], ["float", "", "ScalarList"],
                ["", "", "[1.5]"])
    assert (c.flops, c.bytes) == (0, (5 + 7) * 4)


def test_antialiased_downsample():
    # bilinear aa 8x8 -> 3x3: scale 8/3, support = 1 * 8/3 -> ceil 3 -> 7 taps per dim,
    # separable: 2 * 7 * 2 dims = 28 flops per output; 2 channels * 9 outputs -> 504.
    x = torch.randn(1, 2, 8, 8)
    c = recorded("aten::_upsample_bilinear2d_aa",
                 lambda: F.interpolate(x, size=(3, 3), mode="bilinear", antialias=True)).cost()
    assert aa_flops_per_output(2, (8, 8), (3, 3)) == 28
    assert (c.flops, c.bytes) == (504, (128 + 18) * 4)


def test_upsample_backward():
    x = torch.randn(1, 2, 5, 7, requires_grad=True)
    out = F.interpolate(x, scale_factor=2, mode="bilinear")
    events = record(lambda: out.sum().backward())
    c = first(events, "aten::upsample_bilinear2d_backward").cost()
    assert c.bytes == tensor_bytes(out, x)  # grad_output read, grad_input written
    assert c.flops == 7 * out.numel()


# ------------------------------------------------------------------ lists, gathers, pads

@pytest.mark.parametrize("fn,name", [
    (lambda ts: torch.cat(ts, dim=1), "aten::cat"),
    (lambda ts: torch.stack(ts[:2]), "aten::stack"),
])
def test_cat_and_stack_recorded(fn, name):
    # The trace records the list as nested shapes with dtype "TensorList": float32 assumed.
    ts = [torch.randn(3, 5, 7), torch.randn(3, 5, 7), torch.randn(3, 2, 7)]
    event = recorded(name, lambda: fn(ts))
    assert event.dtypes[0] == "TensorList" and isinstance(event.shapes[0][0], list)
    elements = sum(t.numel() for t in (ts if name == "aten::cat" else ts[:2]))
    assert event.cost().bytes == 2 * elements * 4 and event.cost().flops == 0


@pytest.mark.parametrize("mode,flops_per", [("sum", 1), ("mean", 1), ("max", 1)])
def test_embedding_bag_offsets(mode, flops_per):
    # 9 indices into 4 bags (offsets [0,2,5,5]: one empty bag), width 6:
    # gathered 9*6 = 54 elements (+ 4*6 divides for mean); bytes: indices 9*8, offsets 4*8,
    # gathered rows 54*4, output 24*4.
    bag = nn.EmbeddingBag(10, 6, mode=mode)
    idx, offsets = torch.tensor([1, 2, 3, 4, 5, 6, 7, 8, 9]), torch.tensor([0, 2, 5, 5])
    c = recorded("aten::embedding_bag", lambda: bag(idx, offsets)).cost()
    assert c.flops == flops_per * 54 + (24 if mode == "mean" else 0)
    assert c.bytes == 9 * 8 + 4 * 8 + 54 * 4 + 24 * 4


def test_embedding_bag_2d_weighted_and_last_offset():
    # 2-D input [5, 3] = 5 bags of 3, per_sample_weights [5,3]: 2 flops per gathered element
    # (multiply, add): 2 * 15 * 4 = 120. F.embedding_bag flattens the input and passes
    # offsets arange(0, 15, 3) = [5] to ATen: bytes idx 15*8 + offsets 5*8 + weights 15*4
    # + rows 60*4 + out 20*4. The same with the 2-D call priced directly, minus offsets.
    bag = nn.EmbeddingBag(7, 4, mode="sum")
    idx, w = torch.randint(0, 7, (5, 3)), torch.rand(5, 3)
    c = recorded("aten::embedding_bag", lambda: bag(idx, per_sample_weights=w)).cost()
    assert (c.flops, c.bytes) == (120, 15 * 8 + 5 * 8 + 15 * 4 + 60 * 4 + 20 * 4)
    c = op_cost("aten::embedding_bag", [[7, 4], [5, 3], [], [], [], [], [5, 3], [], []],
                ["float", "long int", "", "Scalar", "Scalar", "Scalar", "float", "Scalar", ""],
                ["", "", "", "False", "0", "False", "", "False", ""])
    assert (c.flops, c.bytes) == (120, 15 * 8 + 15 * 4 + 60 * 4 + 20 * 4)
    # include_last_offset: offsets [0, 2, 4] are 2 bags
    bag = nn.EmbeddingBag(7, 4, mode="sum", include_last_offset=True)
    c = recorded("aten::embedding_bag",
                 lambda: bag(torch.tensor([1, 2, 3, 4]), torch.tensor([0, 2, 4]))).cost()
    assert (c.flops, c.bytes) == (16, 4 * 8 + 3 * 8 + 16 * 4 + 8 * 4)


@pytest.mark.parametrize("mode", ["constant", "reflect", "replicate", "circular"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_pads(mode, dtype):
    x = torch.randn(2, 3, 6, 7).to(dtype)
    out = F.pad(x, (1, 2, 3, 1), mode=mode)
    for event in record(lambda: F.pad(x, (1, 2, 3, 1), mode=mode)):
        if "pad" in event.name:
            assert event.cost().bytes == tensor_bytes(x, out), event.name
            assert event.cost().flops == 0


def test_scatter_add_index_select_gather_cumsum_recorded():
    x, src = torch.zeros(4, 5, 3), torch.randn(4, 9, 3)
    idx = torch.randint(0, 5, (4, 9, 3))
    c = recorded("aten::scatter_add", lambda: x.scatter_add(1, idx, src)).cost()
    # copy self (2 * 60 floats), index 108 int64, src 108 floats, read-modify-write 2 * 108
    assert (c.flops, c.bytes) == (108, 2 * 60 * 4 + 108 * 8 + 108 * 4 + 2 * 108 * 4)
    c = recorded("aten::cumsum", lambda: src.cumsum(1)).cost()
    assert (c.flops, c.bytes) == (108, 2 * 108 * 4)
    sel = torch.tensor([0, 2, 2, 4])
    c = recorded("aten::index_select", lambda: x.index_select(1, sel)).cost()
    assert c.bytes == 4 * 8 + 2 * 4 * 4 * 3 * 4
    c = recorded("aten::gather", lambda: src.gather(1, idx)).cost()
    assert c.bytes == 108 * 8 + 2 * 108 * 4


def test_arange():
    # arange(0, 1024, 4) -> 256 int64; arange(0.5, 3, 0.7) -> ceil(2.5/0.7) = 4 float32
    assert op_cost("aten::arange", [[]] * 7, ["Scalar"] * 3 + ["", "", "", "Scalar"],
                   ["0", "1024", "4", "", "", "", "False"]).bytes == 256 * 8
    event = recorded("aten::arange", lambda: torch.arange(0.5, 3.0, 0.7))
    assert event.cost().bytes == 4 * 4


# ------------------------------------------------------------- losses and fast paths

@pytest.mark.parametrize("swap", [False, True])
@pytest.mark.parametrize("reduction", ["mean", "none"])
def test_triplet_margin_loss(swap, reduction):
    # [6, 8]: 48 elements, 4 flops each per distance, 2 distances (3 with swap)
    a, p, n = torch.randn(6, 8), torch.randn(6, 8), torch.randn(6, 8)
    loss = F.triplet_margin_loss(a, p, n, swap=swap, reduction=reduction)
    c = recorded("aten::triplet_margin_loss",
                 lambda: F.triplet_margin_loss(a, p, n, swap=swap, reduction=reduction)).cost()
    assert c.flops == 4 * 48 * (3 if swap else 2)
    assert c.bytes == tensor_bytes(a, p, n, loss)


@pytest.mark.parametrize("activation,act_flops", [("relu", 1), ("gelu", 5)])
def test_transformer_encoder_fast_path(activation, act_flops):
    # B=2, T=5, E=16, h=4, F=24. The GEMMs and attention match what FlopCounterMode counts on
    # the unfused (training) path with the math attention backend (it has no formula for the
    # CPU flash kernel); norms (2 * 8), activation and residuals (2) come on top.
    from torch.nn.attention import SDPBackend, sdpa_kernel

    layer = nn.TransformerEncoderLayer(16, 4, 24, dropout=0.0, batch_first=True,
                                       activation=activation)
    x = torch.randn(2, 5, 16)
    with torch.no_grad():
        event = recorded("aten::_transformer_encoder_layer_fwd", lambda: layer.eval()(x))
    layer.train()
    with sdpa_kernel(SDPBackend.MATH):
        gemm_and_attention = flop_counter(lambda: layer(x))
    # QKV 2*10*768 + out 2*10*256 + FFN 2*2*10*384 + attention 4*2*4*5*5*4 = 39040
    assert gemm_and_attention == 15360 + 5120 + 15360 + 3200
    rows = 10
    assert event.cost().flops == gemm_and_attention + rows * (16 * 16 + act_flops * 24 + 2 * 16)
    params = sum(p.numel() for p in layer.parameters())
    assert event.cost().bytes == (2 * 2 * 5 * 16 + params) * 4


def test_native_multi_head_attention_fast_path():
    # self-attention, B=2, T=5, E=16, h=4: in-projection 2*10*768 = 15360, attention
    # 4*2*4*5*5*4 = 3200, out projection 2*10*256 = 5120: 23680, as FlopCounterMode counts the
    # unfused math path. Bytes: q, k, v (one tensor, read thrice: NB), weights, biases, output.
    from torch.nn.attention import SDPBackend, sdpa_kernel

    mha = nn.MultiheadAttention(16, 4, batch_first=True).eval()
    q = torch.randn(2, 5, 16)
    with torch.no_grad():
        events = record(lambda: mha(q, q, q, need_weights=False))
    if "aten::_native_multi_head_attention" not in {e.name for e in events}:
        pytest.skip("the MHA fast path did not run")
    c = first(events, "aten::_native_multi_head_attention").cost()
    mha.train()
    with sdpa_kernel(SDPBackend.MATH):
        assert c.flops == flop_counter(lambda: mha(q, q, q, need_weights=False)) == 23680
    params = sum(p.numel() for p in mha.parameters())
    assert c.bytes == (4 * 160 + params) * 4


# ---------------------------------------------------- rows grouped by cost arguments

def test_cost_arguments_are_what_the_formula_reads():
    conv = ["float", "float", "float", "ScalarList", "ScalarList", "ScalarList", "Scalar"]
    shapes = [[1, 16, 32, 32], [16, 1, 3, 3], [16], [], [], [], []]
    stride1 = cost_arguments("aten::conv2d", shapes, conv, ["", "", "", "[1, 1]", "[1, 1]", "[1, 1]", "16"])
    stride2 = cost_arguments("aten::conv2d", shapes, conv, ["", "", "", "[2, 2]", "[1, 1]", "[1, 1]", "16"])
    assert stride1 != stride2 and (3, "[2, 2]") in stride2
    # a view's offsets change nothing: slices at different offsets share a row
    sl = ["float", "Scalar", "Scalar", "Scalar", "Scalar"]
    assert cost_arguments("aten::slice", [[8, 4], [], [], [], []], sl, ["", "0", "0", "2", "1"]) == \
        cost_arguments("aten::slice", [[8, 4], [], [], [], []], sl, ["", "0", "4", "6", "1"]) == ()
    # a Scalar operand counts by its promotion category, not its value
    mul = [[4, 4], []], ["float", "Scalar"]
    assert cost_arguments("aten::mul", *mul, ["", "0.5"]) == \
        cost_arguments("aten::mul", *mul, ["", "0.25"]) == ((1, "<scalar category 2>"),)
    assert cost_arguments("aten::no_such_op", [[1]], ["float"], [""]) == ()


def _cpu_trace(tmp_path, fn, steps=2):
    path = tmp_path / "trace.json"
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        for i in range(steps):
            with record_function(f"advisor::step#{i}"):
                fn()
    prof.export_chrome_trace(str(path))
    return read_trace(path)


def test_depthwise_convs_differing_only_in_stride_get_their_own_rows(tmp_path):
    # Same input shapes, stride 1 vs 2: [1,16,32,32] -> 32x32 or 16x16 outputs, 4x the FLOPs.
    conv1 = nn.Conv2d(16, 16, 3, stride=1, padding=1, groups=16)
    conv2 = nn.Conv2d(16, 16, 3, stride=2, padding=1, groups=16)
    x = torch.randn(1, 16, 32, 32)
    with torch.no_grad():
        trace = _cpu_trace(tmp_path, lambda: (conv1(x), conv2(x)))
    merged = attribute(trace, "cpu")  # without the cost model: name, shapes and dtypes only
    assert len(merged.ops[merged.ops["name"] == "aten::conv2d"]) == 1
    att = attribute(trace, "cpu", cost_arguments=cost_arguments)
    rows = att.ops[att.ops["name"] == "aten::conv2d"]
    assert len(rows) == 2 and set(rows["calls"]) == {2}
    costs = sorted(op_cost("aten::conv2d", json.loads(r.input_shapes), json.loads(r.input_dtypes),
                           json.loads(r.concrete_inputs)).flops for r in rows.itertuples())
    assert costs == [2 * 16 * 16 * 16 * 9, 2 * 16 * 32 * 32 * 9]


@pytest.mark.parametrize("name", ["cuda_gpt_inference", "cuda_gpt_train", "cuda_gpt_compiled"])
def test_grouping_by_cost_arguments_keeps_every_microsecond(name):
    trace = read_trace(DATA / f"{name}.json.gz")
    plain, keyed = attribute(trace, "cuda"), attribute(trace, "cuda", cost_arguments=cost_arguments)
    assert keyed.total_device_time_s == plain.total_device_time_s
    assert keyed.ops["device_time_total_s"].sum() == pytest.approx(plain.ops["device_time_total_s"].sum())
    assert len(keyed.ops) >= len(plain.ops)
    assert keyed.ops["calls"].sum() == plain.ops["calls"].sum()


def test_views_at_different_offsets_still_share_a_row(tmp_path):
    x = torch.randn(8, 6)
    att = attribute(_cpu_trace(tmp_path, lambda: [x[i] for i in range(8)]), "cpu",
                    cost_arguments=cost_arguments)
    select = att.ops[att.ops["name"] == "aten::select"]
    assert len(select) == 1 and int(select["calls"].iloc[0]) == 16


def test_einsum_children_are_rows_on_cpu(tmp_path):
    a, b = torch.randn(4, 32, 16), torch.randn(4, 16, 8)
    att = attribute(_cpu_trace(tmp_path, lambda: torch.einsum("bij,bjk->bik", a, b)), "cpu")
    names = set(att.ops["name"])
    assert "aten::bmm" in names  # priced by its own row, no longer folded into einsum
    bmm = att.ops[att.ops["name"] == "aten::bmm"].iloc[0]
    assert json.loads(bmm["input_shapes"]) == [[4, 32, 16], [4, 16, 8]]
    assert att.ops["device_time_total_s"].sum() == pytest.approx(att.total_device_time_s, rel=1e-9)


def _X(cat, name, ts, dur, tid=1, **args):
    return {"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": tid, "ts": ts, "dur": dur,
            "args": args}


@pytest.mark.parametrize("equation,owner", [("", "aten::bmm"), ("bij,bjk->bik", "aten::einsum")])
def test_einsum_kernels_go_to_bmm_unless_the_equation_is_recorded(tmp_path, equation, owner):
    events = [
        _X("user_annotation", "ProfilerStep#1", 0, 100),
        _X("cpu_op", "aten::einsum", 10, 50, **{
            "External id": 1, "Input Dims": [[], [[4, 32, 16], [4, 16, 8]], []],
            "Input type": ["", "TensorList", ""], "Concrete Inputs": [equation, "", ""]}),
        _X("cpu_op", "aten::bmm", 20, 20, **{
            "External id": 2, "Input Dims": [[4, 32, 16], [4, 16, 8]],
            "Input type": ["float", "float"], "Concrete Inputs": ["", ""]}),
        _X("kernel", "gemm_kernel", 30, 7, tid=7, **{"External id": 2, "correlation": 1}),
    ]
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"schemaVersion": 1, "traceEvents": events}))
    att = attribute(read_trace(path), "cuda")
    assert list(att.ops["name"]) == [owner]
    row = att.ops.iloc[0]
    assert row["device_time_total_s"] == pytest.approx(7e-6)
    cost = op_cost(owner, json.loads(row["input_shapes"]), json.loads(row["input_dtypes"]),
                   json.loads(row["concrete_inputs"]))
    assert cost.flops == 2 * 4 * 32 * 16 * 8  # counted once, by whichever row owns the kernel


# --------------------------------------------------------------- held-out model, CLI

def _load_model(path: Path):
    spec = importlib.util.spec_from_file_location("composite_seq", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_held_out_sequence_model_is_modelled_and_counts_like_flop_counter(advisor_home, tmp_path):
    from typer.testing import CliRunner

    import kernel_advisor.cli

    model_file = DATA / "composite_seq.py"
    out = tmp_path / "run"
    res = CliRunner().invoke(kernel_advisor.cli.app, [
        "profile", str(model_file), "--device", "cpu", "--steps", "2", "--warmup", "1",
        "--out", str(out)])
    assert res.exit_code == 0, res.output
    ops = pd.read_csv(out / "ops.csv")
    run = json.loads((out / "run.json").read_text())

    coverage = run["coverage"]["modelled_time_pct"]
    assert coverage >= 95.0, run["coverage"]
    names = set(ops.loc[ops["modelled"], "name"])
    assert {"aten::gru", "aten::lstm", "aten::embedding_bag", "aten::bmm", "aten::cat",
            "aten::stack", "aten::scatter_add", "aten::cumsum", "aten::upsample_linear1d",
            "aten::upsample_bilinear2d", "aten::upsample_nearest2d"} <= names

    steps = run["steps"]
    tool_flops = float((ops["flops_per_call"].fillna(0.0) * ops["calls"]).sum()) / steps

    module = _load_model(model_file)
    torch.manual_seed(0)
    model = module.Model(*module.get_init_inputs()).eval()
    inputs = module.get_inputs()
    # FlopCounterMode has no formula for aten::mkldnn_rnn_layer, so it counts an LSTM that
    # oneDNN runs as 0; with oneDNN off the same LSTM decomposes into mm/addmm it counts.
    with torch.no_grad(), torch.backends.mkldnn.flags(enabled=False):
        reference = flop_counter(lambda: model(*inputs))
    ratio = tool_flops / reference
    print(f"held-out model: {coverage:.2f}% of device time modelled, "
          f"{tool_flops:.4g} FLOPs vs FlopCounterMode {reference:.4g} (ratio {ratio:.4f})")
    assert 0.99 <= ratio <= 1.2
    assert math.isfinite(ratio)


def test_profile_splits_rows_by_stride(tmp_path):
    """Through `advisor profile`: a stride-2 depthwise conv with the stride-1 one's input shapes
    gets a row of its own, costed at stride 2 (a quarter of the output, so a quarter of the FLOPs)."""
    from typer.testing import CliRunner

    from kernel_advisor.cli import app

    model = tmp_path / "strides.py"
    model.write_text(
        "import torch, torch.nn as nn\n"
        "class Model(nn.Module):\n"
        "    def __init__(self):\n"
        "        super().__init__()\n"
        "        self.a = nn.Conv2d(32, 32, 3, padding=1, groups=32)\n"
        "        self.b = nn.Conv2d(32, 32, 3, stride=2, padding=1, groups=32)\n"
        "    def forward(self, x):\n"
        "        return self.a(x).sum() + self.b(x).sum()\n"
        "def get_inputs():\n"
        "    return [torch.randn(2, 32, 16, 16)]\n")
    out = tmp_path / "run"
    result = CliRunner().invoke(app, ["profile", str(model), "--device", "cpu", "--steps", "2", "--warmup", "1",
                                      "--out", str(out)])
    assert result.exit_code == 0, result.output
    ops = pd.read_csv(out / "ops.csv")
    convs = sorted(ops.loc[ops["name"] == "aten::conv2d", "flops_per_call"])
    # stride 1: 2·(2·32·16·16)·9 = 294,912; stride 2: 8·8 outputs → 73,728
    assert convs == [73728, 294912]
