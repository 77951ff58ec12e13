"""Scaled dot-product attention: the public op, its fused backends and their backward ops.

FLOPs come from torch.utils.flop_counter.sdpa_flop_count / sdpa_backward_flop_count (the
QK^T and PV products, 2 and 5 bmm-equivalents), with two deliberate departures:
- grouped-query attention is counted per query head (the work the kernel does), and
- a causal mask scales the count by the unmasked fraction of the score matrix, since the
  fused kernels skip masked tiles. FlopCounterMode ignores causality and would report twice
  the real work. NB: diagonal tiles are computed whole, so real work is slightly higher.
NB: softmax exp/max/sum (~5 flops per score) and dropout are not counted, as in FlopCounterMode.
NB: bytes assume K and V are read once per head (on-chip reuse across query tiles, what
flash-style kernels approach for head_dim <= 128); the math backend also writes the scores.
The gradient of an attention bias (efficient backward, grad_input_mask[3]) is not counted.
"""
from __future__ import annotations

from dataclasses import dataclass

from torch.utils import flop_counter

from kernel_advisor.analyze.costs.call import OpCall, Tensor
from kernel_advisor.analyze.costs.norms import STATS_FLOPS
from kernel_advisor.analyze.costs.registry import OpCost, io_cost, register, written
from kernel_advisor.analyze.costs.shapes import Unmodelled

TOP_LEFT, BOTTOM_RIGHT = "top_left", "bottom_right"


def causal_kept_frac(s_q: int, s_k: int, alignment: str = TOP_LEFT) -> float:
    """Fraction of the s_q x s_k score matrix a causal mask keeps.

    torch's is_causal is top-left aligned (query i sees keys 0..i); the efficient kernel's
    custom_mask_type 2 is bottom-right aligned (query i sees keys 0..i + s_k - s_q).
    """
    if s_q * s_k == 0:
        return 1.0  # an empty score matrix: nothing to mask
    shift = 0 if alignment == TOP_LEFT else s_k - s_q
    kept = sum(min(max(i + 1 + shift, 0), s_k) for i in range(s_q))
    return kept / (s_q * s_k)


@dataclass(frozen=True)
class Attention:
    q: Tensor  # [B, H_q, S_q, D] (BHSD, after any layout change)
    k: Tensor  # [B, H_kv, S_k, D]
    v: Tensor  # [B, H_kv, S_k, D_v]
    causal: str | None  # None, TOP_LEFT or BOTTOM_RIGHT

    def _per_query_head(self, t: Tensor) -> tuple[int, ...]:
        b, h_kv, s, d = t.shape
        return (b, self.q.shape[1], s, d)

    def _kept_frac(self) -> float:
        if self.causal is None:
            return 1.0
        return causal_kept_frac(self.q.shape[2], self.k.shape[2], self.causal)

    def forward_flops(self) -> float:
        full = flop_counter.sdpa_flop_count(self.q.shape, self._per_query_head(self.k),
                                            self._per_query_head(self.v))
        return full * self._kept_frac()

    def backward_flops(self, grad_out: Tensor) -> float:
        full = flop_counter.sdpa_backward_flop_count(
            grad_out.shape, self.q.shape, self._per_query_head(self.k),
            self._per_query_head(self.v))
        return full * self._kept_frac()

    def out_shape(self) -> tuple[int, ...]:
        return (*self.q.shape[:3], self.v.shape[3])

    def lse(self) -> Tensor:
        # logsumexp per query row, fp32: [B, H_q, S_q]
        return written(self.q.shape[:3], "float32")


def _bhsd(t: Tensor) -> Tensor:
    """[B, S, H, D] (the _flash/_efficient_attention layout) to [B, H, S, D]."""
    b, s, h, d = t.shape
    return Tensor((b, h, s, d), t.dtype)


def attention(call: OpCall, qkv: tuple[int, int, int], causal: str | None,
              bshd: bool = False) -> Attention:
    q, k, v = (call.tensor(i) for i in qkv)
    if not (len(q.shape) == len(k.shape) == len(v.shape) == 4):
        raise Unmodelled(f"{call.name}: only 4-D (batched, multi-head) inputs are modelled")
    if bshd:
        q, k, v = _bhsd(q), _bhsd(k), _bhsd(v)
    (b, h_q, _, d), (b_k, h_kv, s_k, d_k), (b_v, h_v, s_v, _) = q.shape, k.shape, v.shape
    if not (b == b_k == b_v and h_kv == h_v and s_k == s_v and d == d_k):
        raise Unmodelled(f"{call.name}: q/k/v shapes are incompatible")
    if h_kv == 0 or h_q < h_kv or h_q % h_kv:
        raise Unmodelled(f"{call.name}: {h_q} query heads over {h_kv} key/value heads")
    return Attention(q, k, v, causal)


def _causal(call: OpCall, pos: int) -> str | None:
    return TOP_LEFT if call.bool_at(pos, False) else None


def _forward_cost(att: Attention, extra_reads: list, extra_writes: list) -> OpCost:
    out = written(att.out_shape(), att.q.dtype)
    return io_cost(att.forward_flops(), [att.q, att.k, att.v, *extra_reads],
                   [out, *extra_writes], att.q.dtype, tensor_cores=True)


@register("scaled_dot_product_attention")
def sdpa(call: OpCall) -> OpCost:
    # (query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa)
    att = attention(call, (0, 1, 2), _causal(call, 5))
    return _forward_cost(att, [call.optional_tensor(3)], [])


@register("_scaled_dot_product_flash_attention")
def sdpa_flash(call: OpCall) -> OpCost:
    # (query, key, value, dropout_p, is_causal, return_debug_mask, scale) -> out, logsumexp, ...
    att = attention(call, (0, 1, 2), _causal(call, 4))
    return _forward_cost(att, [], [att.lse()])


@register("_scaled_dot_product_flash_attention_for_cpu")
def sdpa_flash_cpu(call: OpCall) -> OpCost:
    # (query, key, value, dropout_p, is_causal, attn_mask, scale) -> out, logsumexp
    att = attention(call, (0, 1, 2), _causal(call, 4))
    return _forward_cost(att, [call.optional_tensor(5)], [att.lse()])


@register("_scaled_dot_product_efficient_attention", "_scaled_dot_product_cudnn_attention")
def sdpa_efficient(call: OpCall) -> OpCost:
    # (query, key, value, attn_bias, compute_log_sumexp, dropout_p, is_causal, ...)
    att = attention(call, (0, 1, 2), _causal(call, 6))
    lse = [att.lse()] if call.bool_at(4, False) else []
    return _forward_cost(att, [call.optional_tensor(3)], lse)


@register("_scaled_dot_product_attention_math")
def sdpa_math(call: OpCall) -> OpCost:
    # (query, key, value, attn_mask, dropout_p, is_causal, dropout_mask, scale, enable_gqa)
    # -> (out, attn): the math path returns (so writes) the [B, H, S_q, S_k] probabilities.
    att = attention(call, (0, 1, 2), _causal(call, 5))
    probs = written((*att.q.shape[:3], att.k.shape[2]), att.q.dtype)
    return _forward_cost(att, [call.optional_tensor(3), call.optional_tensor(6)], [probs])


def _no_varlen(call: OpCall, *positions: int) -> None:
    if any(call.has_tensor(i) for i in positions):
        raise Unmodelled(f"{call.name}: variable-length (cu_seqlens) batches are not modelled")


@register("_flash_attention_forward")
def flash_forward(call: OpCall) -> OpCost:
    # (query, key, value, cum_seq_q, cum_seq_k, max_q, max_k, dropout_p, is_causal, ...), BSHD
    _no_varlen(call, 3, 4)
    att = attention(call, (0, 1, 2), _causal(call, 8), bshd=True)
    return _forward_cost(att, [], [att.lse()])


_EFFICIENT_MASK = {0: None, 1: TOP_LEFT, 2: BOTTOM_RIGHT}


def _efficient_mask(call: OpCall, pos: int) -> str | None:
    code = call.int_at(pos, 0)
    if code not in _EFFICIENT_MASK:
        raise Unmodelled(f"{call.name}: unknown custom_mask_type {code}")
    return _EFFICIENT_MASK[code]


@register("_efficient_attention_forward")
def efficient_forward(call: OpCall) -> OpCost:
    # (query, key, value, bias, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
    #  dropout_p, custom_mask_type, compute_log_sumexp, ...), BSHD
    _no_varlen(call, 4, 5)
    att = attention(call, (0, 1, 2), _efficient_mask(call, 9), bshd=True)
    lse = [att.lse()] if call.bool_at(10, False) else []
    return _forward_cost(att, [call.optional_tensor(3)], lse)


def _backward_cost(att: Attention, grad_out: Tensor, reads: list) -> OpCost:
    # Reads grad_out, q, k, v, out, logsumexp (+ mask); writes grad_q, grad_k, grad_v.
    # NB: flash backward's fp32 dq accumulator and the per-row delta = rowsum(dO * O) are
    # scratch traffic, not counted.
    return io_cost(att.backward_flops(grad_out), [grad_out, att.q, att.k, att.v, *reads],
                   [att.q, att.k, att.v], att.q.dtype, tensor_cores=True)


def _register_backward(name: str, out_lse: tuple[int, int], causal_pos: int,
                       mask_pos: int | None = None, bshd: bool = False,
                       varlen: tuple[int, ...] = ()) -> None:
    def formula(call: OpCall) -> OpCost:
        _no_varlen(call, *varlen)
        causal = _efficient_mask(call, causal_pos) if name == "_efficient_attention_backward" \
            else _causal(call, causal_pos)
        att = attention(call, (1, 2, 3), causal, bshd=bshd)
        grad_out = _bhsd(call.tensor(0)) if bshd else call.tensor(0)
        if grad_out.shape != att.out_shape():
            raise Unmodelled(f"{call.name}: grad_out {grad_out.shape} != out {att.out_shape()}")
        reads = [call.tensor(out_lse[0]), call.optional_tensor(out_lse[1])]
        mask = call.optional_tensor(mask_pos) if mask_pos is not None else None
        return _backward_cost(att, grad_out, [*reads, mask])

    register(name)(formula)


# (grad_out, query, key, value, out, logsumexp, cum_seq_q, cum_seq_k, max_q, max_k,
#  dropout_p, is_causal, philox_seed, philox_offset, scale)
_register_backward("_scaled_dot_product_flash_attention_backward", (4, 5), 11)
# (grad_out, query, key, value, out, logsumexp, dropout_p, is_causal, attn_mask, scale)
_register_backward("_scaled_dot_product_flash_attention_for_cpu_backward", (4, 5), 7, 8)
# (grad_out, query, key, value, attn_bias, out, logsumexp, philox_seed, philox_offset,
#  dropout_p, grad_input_mask, is_causal, scale)
_register_backward("_scaled_dot_product_efficient_attention_backward", (5, 6), 11, 4)
# (grad_out, query, key, value, out, logsumexp, philox_seed, philox_offset, attn_bias,
#  cum_seq_q, cum_seq_k, max_q, max_k, dropout_p, is_causal, scale)
_register_backward("_scaled_dot_product_cudnn_attention_backward", (4, 5), 14, 8)
# (grad_out, query, key, value, out, logsumexp, cum_seq_q, cum_seq_k, max_q, max_k,
#  dropout_p, is_causal, rng_state, unused, ...), BSHD
_register_backward("_flash_attention_backward", (4, 5), 11, bshd=True, varlen=(6, 7))
# (grad_out, query, key, value, bias, out, cu_seqlens_q, cu_seqlens_k, max_seqlen_q,
#  max_seqlen_k, logsumexp, dropout_p, philox_seed, philox_offset, custom_mask_type, ...), BSHD
_register_backward("_efficient_attention_backward", (5, 10), 14, 4, bshd=True, varlen=(6, 7))


# ------------------------------------------------------------
# The fused inference fast paths of nn.TransformerEncoderLayer and nn.MultiheadAttention:
# aten::_transformer_encoder_layer_fwd and aten::_native_multi_head_attention.
#
# FLOPs, for N = B*T rows of width E, h heads, FFN width F:
# - projections: 2*N*numel(w) per weight matrix (QKV [3E, E], out [E, E], FFN [F, E] and
#   [E, F]), the mm/addmm convention (bias adds left out);
# - attention: torch.utils.flop_counter.sdpa_flop_count, 4*B*h*T_q*T_k*(E/h), as for
#   scaled_dot_product_attention (NB: softmax is not counted there either);
# - two layer norms at norms.STATS_FLOPS + 2 (affine) per element, the FFN activation
#   (gelu 5, relu 1 per element of [N, F]) and the two residual adds (1 per element of [N, E]).
# Bytes: the input, every weight, bias and mask read once, the output written once.
# NB: a fused pass moves only those; the CPU and CUDA fast paths write Q, K, V, the scores
# (for long sequences) and the FFN hidden activations too. Nested (padded) inputs are not
# modelled.

GELU_FLOPS, RELU_FLOPS = 5, 1
LAYER_NORM_FLOPS = STATS_FLOPS + 2  # with weight and bias


def projection_flops(rows: int, weight: Tensor) -> int:
    return 2 * rows * weight.numel


def attention_flops(batch: int, heads: int, s_q: int, s_k: int, embed: int) -> int:
    if heads <= 0 or embed % heads:
        raise Unmodelled(f"embed dim {embed} does not split into {heads} heads")
    d = embed // heads
    return flop_counter.sdpa_flop_count((batch, heads, s_q, d), (batch, heads, s_k, d),
                                        (batch, heads, s_k, d))


def _require_3d(call: OpCall, t: Tensor, embed: int) -> tuple[int, int]:
    if len(t.shape) != 3 or t.shape[2] != embed:
        raise Unmodelled(f"{call.name}: expected [B, T, {embed}], got {t.shape}")
    return t.shape[0], t.shape[1]


@register("_transformer_encoder_layer_fwd")
def transformer_encoder_layer(call: OpCall) -> OpCost:
    # (src, embed_dim, num_heads, qkv_weight, qkv_bias, proj_weight, proj_bias, use_gelu,
    #  norm_first, eps, norm_weight_1, norm_bias_1, norm_weight_2, norm_bias_2,
    #  ffn_weight_1, ffn_bias_1, ffn_weight_2, ffn_bias_2, mask, mask_type)
    src = call.tensor(0)
    embed, heads = call.int_at(1), call.int_at(2)
    batch, seq = _require_3d(call, src, embed)
    qkv_w, proj_w, ffn_w1, ffn_w2 = (call.tensor(i) for i in (3, 5, 14, 16))
    if qkv_w.shape != (3 * embed, embed) or proj_w.shape != (embed, embed) or \
            len(ffn_w1.shape) != 2 or ffn_w2.shape != (embed, ffn_w1.shape[0]):
        raise Unmodelled(f"{call.name}: weight shapes do not fit embed dim {embed}")
    rows, hidden = batch * seq, ffn_w1.shape[0]
    flops = (sum(projection_flops(rows, w) for w in (qkv_w, proj_w, ffn_w1, ffn_w2))
             + attention_flops(batch, heads, seq, seq, embed)
             + 2 * LAYER_NORM_FLOPS * rows * embed
             + (GELU_FLOPS if call.bool_at(7) else RELU_FLOPS) * rows * hidden
             + 2 * rows * embed)
    params = [call.optional_tensor(i) for i in (4, 6, 10, 11, 12, 13, 15, 17, 18)]
    return io_cost(flops, [src, qkv_w, proj_w, ffn_w1, ffn_w2, *params],
                   [written(src.shape, src.dtype)], src.dtype, tensor_cores=True)


@register("_native_multi_head_attention")
def native_multi_head_attention(call: OpCall) -> OpCost:
    # (query, key, value, embed_dim, num_head, qkv_weight, qkv_bias, proj_weight, proj_bias,
    #  mask, need_weights, average_attn_weights, mask_type) -> (out, attn weights)
    q, k, v = call.tensor(0), call.tensor(1), call.tensor(2)
    embed, heads = call.int_at(3), call.int_at(4)
    batch, s_q = _require_3d(call, q, embed)
    _, s_k = _require_3d(call, k, embed)
    if v.shape != k.shape:
        raise Unmodelled(f"{call.name}: key {k.shape} and value {v.shape} differ")
    qkv_w, proj_w = call.tensor(5), call.tensor(7)
    if qkv_w.shape != (3 * embed, embed) or proj_w.shape != (embed, embed):
        raise Unmodelled(f"{call.name}: weight shapes do not fit embed dim {embed}")
    # Q from the query rows, K and V from the key rows: E*E weights each.
    flops = (2 * embed * embed * batch * (s_q + 2 * s_k)
             + attention_flops(batch, heads, s_q, s_k, embed)
             + projection_flops(batch * s_q, proj_w))
    outs = [written(q.shape, q.dtype)]
    if call.bool_at(10, True):
        weights = (batch, s_q, s_k) if call.bool_at(11, True) else (batch, heads, s_q, s_k)
        outs.append(written(weights, q.dtype))
    # NB: self-attention passes one tensor as query, key and value; the trace cannot tell,
    # so it is counted as three reads.
    extras = [call.optional_tensor(i) for i in (6, 8, 9)]
    return io_cost(flops, [q, k, v, qkv_w, proj_w, *extras], outs, q.dtype, tensor_cores=True)
