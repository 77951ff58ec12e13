"""Ops a KernelBench-style model uses that are neither GEMMs nor plain elementwise: similarities,
selection, scans, sampling, binning, cells, losses. Each recorded on CPU as the profiler records
it and priced by hand (f32 unless said: 4 bytes an element, int64 indices 8)."""
from __future__ import annotations

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from test_costs_helpers import recorded

torch.manual_seed(0)
X2, Y2 = torch.randn(32, 64), torch.randn(32, 64)  # 2048 elements each
P2 = torch.rand(32, 64)
X4 = torch.randn(2, 8, 16, 16)  # 4096 elements
T = torch.randint(0, 64, (32,))
S = torch.randn(32, 32)
GRU, LSTM = nn.GRUCell(64, 32), nn.LSTMCell(64, 32)
BIL = nn.Bilinear(64, 64, 8)
POOLED, INDICES = F.max_pool2d(X4, 2, return_indices=True)  # [2, 8, 8, 8]: 1024 each
COLS = F.unfold(X4, 3)  # [2, 72, 196]: 28224 elements
GRID = torch.rand(2, 8, 8, 2) * 2 - 1

CASES = [  # (id, aten op, call, flops, bytes)
    ("cosine", "aten::cosine_similarity", lambda: F.cosine_similarity(X2, Y2), 6 * 2048, (2 * 2048 + 32) * 4),
    ("pairwise", "aten::pairwise_distance", lambda: F.pairwise_distance(X2, Y2), 3 * 2048, (2 * 2048 + 32) * 4),
    # [2,20,8] x [2,30,8], p=2: 2 * 9600 pair terms + 2 * 800 for the squared norms; out [2,20,30]
    ("cdist-p2", "aten::cdist", lambda: torch.cdist(torch.randn(2, 20, 8), torch.randn(2, 30, 8)),
     2 * 9600 + 2 * 800, (320 + 480 + 1200) * 4),
    ("cdist-p1", "aten::cdist", lambda: torch.cdist(torch.randn(2, 20, 8), torch.randn(2, 30, 8), p=1),
     3 * 9600, (320 + 480 + 1200) * 4),
    # 2 * 32 rows * 8*64*64 weight elements + 32*8 bias adds
    ("bilinear", "aten::bilinear", lambda: BIL(X2, Y2), 2 * 32 * 32768 + 256, (2048 * 2 + 32768 + 8 + 256) * 4),
    ("outer", "aten::outer", lambda: torch.outer(X2[0], Y2[0]), 4096, (64 + 64 + 4096) * 4),
    ("kron", "aten::kron", lambda: torch.kron(S[:4, :4], S[:4, :4]), 256, (16 + 16 + 256) * 4),
    ("cross", "aten::linalg_cross", lambda: torch.linalg.cross(X2[:, :3], Y2[:, :3]), 3 * 96, 3 * 96 * 4),
    ("topk", "aten::topk", lambda: torch.topk(X2, 5, 1), 2048, 2048 * 4 + 160 * 4 + 160 * 8),
    ("sort", "aten::sort", lambda: torch.sort(X2, 1), 2048 * 6, 2048 * (4 + 4 + 8)),  # log2(64) = 6
    ("kthvalue", "aten::kthvalue", lambda: torch.kthvalue(X2, 3, 1), 2048, 2048 * 4 + 32 * (4 + 8)),
    ("median-dim", "aten::median", lambda: torch.median(X2, 1), 2048, 2048 * 4 + 32 * (4 + 8)),
    ("median-all", "aten::median", lambda: torch.median(X2), 2048, 2048 * 4 + 4),
    ("cummax", "aten::cummax", lambda: torch.cummax(X2, 1), 2048, 2048 * (4 + 4 + 8)),
    ("logcumsumexp", "aten::logcumsumexp", lambda: torch.logcumsumexp(X2, 1), 3 * 2048, 2 * 2048 * 4),
    ("log_sigmoid", "aten::log_sigmoid", lambda: F.logsigmoid(X2), 4 * 2048, 2 * 2048 * 4),
    ("rrelu-eval", "aten::rrelu", lambda: F.rrelu(X2, training=False), 2 * 2048, 2 * 2048 * 4),
    ("tile", "aten::tile", lambda: torch.tile(X2, (2, 1)), 0, (2048 + 4096) * 4),
    ("pixel_shuffle", "aten::pixel_shuffle", lambda: F.pixel_shuffle(X4, 2), 0, 2 * 4096 * 4),
    ("im2col", "aten::im2col", lambda: F.unfold(X4, 3), 0, (4096 + 28224) * 4),
    ("col2im", "aten::col2im", lambda: F.fold(COLS, 16, 3), 28224, (28224 + 4096) * 4),
    # GRU: 2 * 32 * (96*64 + 96*32) + (10 + 6) * 32 * 32; LSTM: 2 * 32 * (128*64 + 128*32) + (13 + 8) * 32 * 32
    ("gru_cell", "aten::gru_cell", lambda: GRU(X2), 589_824 + 16_384,
     (2048 + 1024 + 6144 + 3072 + 96 + 96 + 1024) * 4),
    ("lstm_cell", "aten::lstm_cell", lambda: LSTM(X2), 786_432 + 21_504,
     (2048 + 2 * 1024 + 8192 + 4096 + 128 + 128 + 2 * 1024) * 4),
    ("hinge", "aten::hinge_embedding_loss", lambda: F.hinge_embedding_loss(X2, Y2.sign()), 3 * 2048,
     (2 * 2048 + 1) * 4),
    ("margin_ranking", "aten::margin_ranking_loss", lambda: F.margin_ranking_loss(X2[:, 0], Y2[:, 0], T.float().sign()),
     4 * 32, (3 * 32 + 1) * 4),
    ("cosine_embedding", "aten::cosine_embedding_loss",
     lambda: F.cosine_embedding_loss(X2, Y2, torch.ones(32)), 6 * 2048, (2 * 2048 + 32 + 1) * 4),
    ("poisson_nll", "aten::poisson_nll_loss", lambda: F.poisson_nll_loss(X2, P2), 3 * 2048, (2 * 2048 + 1) * 4),
    ("multi_margin", "aten::multi_margin_loss", lambda: F.multi_margin_loss(X2, T), 4 * 2048, 2048 * 4 + 32 * 8 + 4),
    ("count_nonzero", "aten::count_nonzero", lambda: torch.count_nonzero(X2, 1), 2048, 2048 * 4 + 32 * 8),
    ("linalg_norm", "aten::linalg_norm", lambda: torch.linalg.norm(X2), 2 * 2048, 2048 * 4 + 4),
    # 2 x 8 channels x 8 x 8 output points, 4 bilinear taps of 2 flops
    ("grid_sample", "aten::grid_sampler", lambda: F.grid_sample(X4, GRID, align_corners=False), 8 * 1024,
     (4096 + 256 + 1024) * 4),
    ("one_hot", "aten::one_hot", lambda: F.one_hot(T, 64), 0, 32 * 8 + 32 * 64 * 8),
    ("repeat_interleave", "aten::repeat_interleave", lambda: torch.repeat_interleave(X2, 2, 0), 0, (2048 + 4096) * 4),
    # boundaries of 5: ceil(log2(6)) = 3 compares an element
    ("bucketize", "aten::bucketize", lambda: torch.bucketize(X2, torch.linspace(-1, 1, 5)), 3 * 2048,
     2048 * 4 + 5 * 4 + 2048 * 8),
    ("histc", "aten::histc", lambda: torch.histc(X2), 2048, 2048 * 4 + 100 * 4),
    ("max_unpool", "aten::max_unpool2d", lambda: F.max_unpool2d(POOLED, INDICES, 2), 0, 1024 * 4 + 1024 * 8 + 4096 * 4),
    ("diag", "aten::diag", lambda: torch.diag(S), 0, 2 * 32 * 4),
    ("diag_embed", "aten::diag_embed", lambda: torch.diag_embed(X2[0, :8]), 0, (8 + 64) * 4),
    ("trace", "aten::trace", lambda: torch.trace(S), 32, (32 + 1) * 4),
    ("linspace", "aten::linspace", lambda: torch.linspace(-1, 1, 5), 0, 5 * 4),
    # theta [2, 2, 3] onto a [2, 8, 16, 16] grid: 2*16*16 points, 12 flops each, a [2, 16, 16, 2] grid written
    ("affine_grid", "aten::affine_grid_generator",
     lambda: F.affine_grid(torch.randn(2, 2, 3), (2, 8, 16, 16), align_corners=False), 12 * 512, (12 + 1024) * 4),
    # 32 looked-up rows of 8: norm and rescale 3 flops an element, rows read and written, indices read
    ("embedding_renorm", "aten::embedding_renorm_",
     lambda: F.embedding(T, torch.randn(64, 8), max_norm=1.0), 3 * 256, 32 * 8 + 2 * 256 * 4),
    ("randint-low", "aten::randint", lambda: torch.randint(0, 64, (32,)), 0, 32 * 8),
    ("randint-int32", "aten::randint", lambda: torch.randint(64, (32, 4), dtype=torch.int32), 0, 128 * 4),
    # 32 rows of n = 64: complex 5*64*log2(64) = 1920 a row, real half that; complex64 is 8 bytes
    ("rfft", "aten::fft_rfft", lambda: torch.fft.rfft(X2), 32 * 960, 2048 * 4 + 32 * 33 * 8),
    ("fft", "aten::fft_fft", lambda: torch.fft.fft(X2), 32 * 1920, 2048 * 4 + 2048 * 8),
    ("irfft", "aten::fft_irfft", lambda: torch.fft.irfft(torch.fft.rfft(X2)), 32 * 960, 32 * 33 * 8 + 2048 * 4),
]


@pytest.mark.parametrize("name, fn, flops, nbytes", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_recorded_call_hand_worked(name, fn, flops, nbytes):
    cost = recorded(name, fn).cost()
    assert cost is not None, f"{name} is not modelled"
    assert cost.flops == pytest.approx(flops) and cost.bytes == nbytes


@pytest.mark.parametrize("dtype, size", [(torch.bfloat16, 2), (torch.float16, 2), (torch.float64, 8)])
def test_similarity_and_sort_follow_the_dtype(dtype, size):
    x, y = X2.to(dtype), Y2.to(dtype)
    assert recorded("aten::cosine_similarity", lambda: F.cosine_similarity(x, y)).cost().bytes == (2 * 2048 + 32) * size
    assert recorded("aten::sort", lambda: torch.sort(x, 1)).cost().bytes == 2048 * (2 * size + 8)


def test_data_dependent_sizes_stay_unknown():
    # nonzero's and a per-element repeat_interleave's output sizes are the data's: not modelled
    assert recorded("aten::nonzero", lambda: torch.nonzero(X2 > 0)).cost() is None
    reps = torch.tensor([1, 2] * 16)
    assert recorded("aten::repeat_interleave", lambda: torch.repeat_interleave(X2, reps, 0)).cost() is None


def _in_backward(name, fn, *leaves):
    """The first `name` call recorded while fn's output is differentiated."""
    from test_costs_helpers import record
    events = [e for e in record(lambda: fn().float().sum().backward()) if e.name == name]
    assert events, f"{name} was not recorded"
    for leaf in leaves:
        leaf.grad = None
    return events[0].cost()


XG, YG = X2.clone().requires_grad_(True), Y2.clone().requires_grad_(True)
WG = torch.randn(8, 64, 64, requires_grad=True)
X4G = X4.clone().requires_grad_(True)
PRELU = nn.PReLU(8)
LSTM_LAYER = nn.LSTM(32, 16, 1, batch_first=True)
X3L = torch.randn(4, 16, 32, requires_grad=True)

BACKWARD = [  # (id, aten op, forward, flops, bytes)
    # bilinear's forward and each of its three gradients are _trilinear calls of 2*32*8*64*64 flops;
    # the forward reads x1 2048, W 32768, x2 2048 and writes [32, 8]
    ("trilinear", "aten::_trilinear", lambda: F.bilinear(XG, YG, WG), 2 * 32 * 8 * 64 * 64, (2048 + 32768 + 2048 + 256) * 4),
    ("gather_backward", "aten::gather_backward", lambda: torch.gather(XG, 1, T[:, None].repeat(1, 4)),
     128, (128 + 128 * 2 + 2048) * 4),  # grad [32, 4] f32, index int64, the [32, 64] gradient
    ("topk_backward", "aten::value_selecting_reduction_backward", lambda: torch.topk(XG, 5, 1)[0],
     160, 160 * 4 + 160 * 8 + 2048 * 4),
    ("log_sigmoid_backward", "aten::log_sigmoid_backward", lambda: F.logsigmoid(XG), 4 * 2048, 3 * 2048 * 4),
    ("cumprod_backward", "aten::cumprod_backward", lambda: torch.cumprod(XG, 1), 4 * 2048, 4 * 2048 * 4),
    # 2 x 8 x 8 x 8 output points, 4 taps of 2 flops, twice; reads grad 1024, input 4096, grid 256,
    # writes the input's gradient (the grid needs none here)
    ("grid_sampler_backward", "aten::grid_sampler_2d_backward",
     lambda: F.grid_sample(X4G, GRID, align_corners=False), 2 * 8 * 1024, (1024 + 4096 + 256 + 4096) * 4),
    # grad, self and the [8] weight read (broadcast), grad_input written; NB: grad_weight not counted
    ("prelu_backward", "aten::_prelu_kernel_backward", lambda: PRELU(X4G), 3 * 4096, (2 * 4096 + 8 + 4096) * 4),
]


@pytest.mark.parametrize("name, fn, flops, nbytes", [c[1:] for c in BACKWARD], ids=[c[0] for c in BACKWARD])
def test_recorded_backward_hand_worked(name, fn, flops, nbytes):
    cost = _in_backward(name, fn, XG, YG, WG, X4G)
    assert cost is not None, f"{name} is not modelled"
    assert cost.flops == pytest.approx(flops) and cost.bytes == nbytes


def test_onednn_lstm_layer_backward_hand_worked():
    # 64 rows (16 steps x batch 4), w_ih [64, 32], w_hh [64, 16]: the data and weights passes
    # 2 x 2*64*(2048 + 1024), the gate math 2 x (13 + 8)*64*16; reads 7552 floats and oneDNN's
    # workspace (its size is the build's), writes the gradients of input, weights, biases and
    # states (5376 floats)
    from test_costs_helpers import record
    events = [e for e in record(lambda: LSTM_LAYER(X3L)[0].sum().backward())
              if e.name == "aten::mkldnn_rnn_layer_backward"]
    if not events:
        pytest.skip("this build runs the CPU LSTM without oneDNN")
    workspace = events[0].shapes[22][0]
    cost = events[0].cost()
    assert cost.flops == 2 * 393_216 + 2 * 21_504
    assert cost.bytes == 7552 * 4 + workspace + 5376 * 4
