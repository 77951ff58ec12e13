"""Losses: cross entropy, NLL, MSE, L1, smooth L1 / Huber, binary cross entropy, KL div.

Minimum bytes are those of a fused kernel: cross_entropy_loss reads the logits once and
writes the loss; eager PyTorch also writes and re-reads the log-probabilities (one extra
logits-sized round trip) - exactly the gap fused kernels (Liger, Apex xentropy) close.
FLOPs per element: cross entropy = log_softmax's 5 (+1 with label smoothing); mse 3
(subtract, square, accumulate), l1 3, smooth_l1/huber 5, bce 7, bce_with_logits 8, kl_div 4;
backward ops about one less; triplet_margin_loss 4 per element per distance (subtract, add
eps, |x|^p, accumulate), two distances or three with swap; hinge_embedding 3, margin_ranking 4,
poisson_nll 3 per element; cosine_embedding 6 per element pair (a cosine similarity per row);
multi_margin 4 per logit (subtract, add margin, clamp, accumulate). NB: per-row work (pick the
target, divide by n) is not counted.
"""
from __future__ import annotations

from kernel_advisor.analyze.costs import dtypes as dt
from kernel_advisor.analyze.costs.call import OpCall, Tensor
from kernel_advisor.analyze.costs.norms import FORWARD_FLOPS_PER_ELEMENT
from kernel_advisor.analyze.costs.registry import OpCost, io_cost, register, written
from kernel_advisor.analyze.costs.shapes import Unmodelled, broadcast, numel

REDUCTION_NONE = 0  # at::Reduction::None; 1 is Mean, 2 is Sum


def _class_rows(call: OpCall, logits: Tensor) -> tuple[int, int]:
    """(rows, classes): classes are dim 1, or dim 0 for a single unbatched sample."""
    if not logits.shape:
        raise Unmodelled(f"{call.name}: 0-dim input")
    classes = logits.shape[1] if len(logits.shape) > 1 else logits.shape[0]
    return logits.numel // max(classes, 1), classes


def _loss_out(rows_shape: tuple, reduction: int, dtype: str) -> Tensor:
    return written(rows_shape if reduction == REDUCTION_NONE else (), dtype)


def _target_rows_shape(logits: Tensor) -> tuple:
    return logits.shape[:1] + logits.shape[2:] if len(logits.shape) > 1 else ()


@register("cross_entropy_loss")
def cross_entropy(call: OpCall) -> OpCost:
    # (self, target, weight, reduction, ignore_index, label_smoothing): target holds class
    # indices (integer, one per row) or class probabilities (floating, logits-shaped).
    logits, target, weight = call.tensor(0), call.tensor(1), call.optional_tensor(2)
    _class_rows(call, logits)
    smoothing = call.float_at(5, 0.0) > 0 or dt.is_floating(target.dtype)
    flops = (FORWARD_FLOPS_PER_ELEMENT + smoothing) * logits.numel
    out = _loss_out(_target_rows_shape(logits), call.int_at(3, 1), logits.dtype)
    return io_cost(flops, [logits, target, weight], [out], logits.dtype)


@register("nll_loss", "nll_loss_nd", "nll_loss2d", "nll_loss_forward", "nll_loss2d_forward")
def nll_loss(call: OpCall) -> OpCost:
    # (self, target, weight, reduction, ignore_index): one log-probability gathered per row.
    # The *_forward ops also return total_weight (one element).
    logp, target, weight = call.tensor(0), call.tensor(1), call.optional_tensor(2)
    rows, _ = _class_rows(call, logp)
    picked = written((rows,), logp.dtype)
    outs = [_loss_out(_target_rows_shape(logp), call.int_at(3, 1), logp.dtype)]
    if call.name.endswith("_forward"):
        outs.append(written((), logp.dtype))
    return io_cost(rows, [picked, target, weight], outs, logp.dtype)


@register("nll_loss_backward", "nll_loss2d_backward")
def nll_loss_backward(call: OpCall) -> OpCost:
    # (grad_output, self, target, weight, reduction, ignore_index, total_weight): the full
    # self-shaped gradient is written (zeros plus one value per row); self is not read.
    grad, logp, target = call.tensor(0), call.tensor(1), call.tensor(2)
    weight, total = call.optional_tensor(3), call.optional_tensor(6)
    rows, _ = _class_rows(call, logp)
    return io_cost(rows, [grad, target, weight, total], [written(logp.shape, logp.dtype)],
                   logp.dtype)


_POINTWISE_LOSSES = {"mse_loss": 3, "l1_loss": 3, "smooth_l1_loss": 5, "huber_loss": 5,
                     "soft_margin_loss": 4, "kl_div": 4}


@register(*_POINTWISE_LOSSES)
def pointwise_loss(call: OpCall) -> OpCost:
    # (self, target, reduction, ...)
    x, target = call.tensor(0), call.tensor(1)
    if x.shape != target.shape:
        raise Unmodelled(f"{call.name}: broadcasting input and target is not modelled")
    flops = _POINTWISE_LOSSES[call.name.removeprefix("aten::")] * x.numel
    out = _loss_out(x.shape, call.int_at(2, 1), x.dtype)
    return io_cost(flops, [x, target], [out], x.dtype)


@register("binary_cross_entropy", "binary_cross_entropy_with_logits")
def bce(call: OpCall) -> OpCost:
    # (self, target, weight[, pos_weight], reduction)
    x, target = call.tensor(0), call.tensor(1)
    with_logits = call.name.endswith("with_logits")
    extras = [call.optional_tensor(2), call.optional_tensor(3) if with_logits else None]
    reduction = call.int_at(4 if with_logits else 3, 1)
    flops = (8 if with_logits else 7) * x.numel
    return io_cost(flops, [x, target, *extras], [_loss_out(x.shape, reduction, x.dtype)],
                   x.dtype)


_LOSS_BACKWARD = {"mse_loss_backward": 3, "smooth_l1_loss_backward": 4, "huber_loss_backward": 4,
                  "soft_margin_loss_backward": 4, "binary_cross_entropy_backward": 6}


@register(*_LOSS_BACKWARD)
def loss_backward(call: OpCall) -> OpCost:
    # (grad_output, self, target, [weight,] reduction, ...): grad_output is a scalar for
    # mean/sum reductions and self-shaped otherwise.
    grad, x, target = call.tensor(0), call.tensor(1), call.tensor(2)
    weight = call.optional_tensor(3)
    flops = _LOSS_BACKWARD[call.name.removeprefix("aten::")] * x.numel
    return io_cost(flops, [grad, x, target, weight], [written(x.shape, x.dtype)], x.dtype)



DISTANCE_FLOPS_PER_ELEMENT = 4  # (x - y + eps) ** p, accumulated: subtract, add, pow, add


def triplet_margin_flops(elements: int, swap: bool) -> int:
    """d(a, p) and d(a, n) (and d(p, n) with swap) over the broadcast elements."""
    return DISTANCE_FLOPS_PER_ELEMENT * elements * (3 if swap else 2)


@register("triplet_margin_loss")
def triplet_margin_loss(call: OpCall) -> OpCost:
    # (anchor, positive, negative, margin, p, eps, swap, reduction): the distances reduce
    # the last dim; loss = clamp_min(margin + d(a, p) - d(a, n), 0) per row.
    # NB: eager PyTorch materialises each difference and distance (pairwise_distance, norm):
    # the bytes here are those of one fused pass.
    a, pos, neg = call.tensor(0), call.tensor(1), call.tensor(2)
    shape = broadcast(a.shape, pos.shape, neg.shape)
    if not shape:
        raise Unmodelled(f"{call.name}: 0-dim inputs")
    out = _loss_out(shape[:-1], call.int_at(7, 1), a.dtype)
    flops = triplet_margin_flops(numel(shape), call.bool_at(6, False))
    return io_cost(flops, [a, pos, neg], [out], a.dtype)


_PAIRED_LOSSES = {  # name: (flops per element, tensor arguments, position of reduction)
    "hinge_embedding_loss": (3, (0, 1), 3),  # (self, target, margin, reduction)
    "margin_ranking_loss": (4, (0, 1, 2), 4),  # (input1, input2, target, margin, reduction)
    "poisson_nll_loss": (3, (0, 1), 5),  # (input, target, log_input, full, eps, reduction)
}


@register(*_PAIRED_LOSSES)
def paired_loss(call: OpCall) -> OpCost:
    flops, positions, reduction = _PAIRED_LOSSES[call.name.removeprefix("aten::")]
    inputs = [call.tensor(i) for i in positions]
    shape = broadcast(*(t.shape for t in inputs))
    out = _loss_out(shape, call.int_at(reduction, 1), inputs[0].dtype)
    return io_cost(flops * numel(shape), inputs, [out], inputs[0].dtype)


@register("cosine_embedding_loss")
def cosine_embedding_loss(call: OpCall) -> OpCost:
    # (input1 [N, D], input2, target [N], margin, reduction): a cosine similarity per row
    x1, x2, target = call.tensor(0), call.tensor(1), call.tensor(2)
    shape = broadcast(x1.shape, x2.shape)
    out = _loss_out(shape[:-1], call.int_at(4, 1), x1.dtype)
    return io_cost(6 * numel(shape), [x1, x2, target], [out], x1.dtype)


@register("multi_margin_loss")
def multi_margin_loss(call: OpCall) -> OpCost:
    # (self [N, C], target [N], p, margin, weight, reduction)
    x, target, weight = call.tensor(0), call.tensor(1), call.optional_tensor(4)
    rows, _ = _class_rows(call, x)
    out = _loss_out((rows,) if len(x.shape) > 1 else (), call.int_at(5, 1), x.dtype)
    return io_cost(4 * x.numel, [x, target, weight], [out], x.dtype)
