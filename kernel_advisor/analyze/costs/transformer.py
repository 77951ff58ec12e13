"""The fused inference fast paths of nn.TransformerEncoderLayer and nn.MultiheadAttention:
aten::_transformer_encoder_layer_fwd and aten::_native_multi_head_attention.

FLOPs, for N = B*T rows of width E, h heads, FFN width F:
- projections: 2*N*numel(w) per weight matrix (QKV [3E, E], out [E, E], FFN [F, E] and
  [E, F]), the mm/addmm convention (bias adds left out);
- attention: torch.utils.flop_counter.sdpa_flop_count, 4*B*h*T_q*T_k*(E/h), as for
  scaled_dot_product_attention (NB: softmax is not counted there either);
- two layer norms at norms.STATS_FLOPS + 2 (affine) per element, the FFN activation
  (gelu 5, relu 1 per element of [N, F]) and the two residual adds (1 per element of [N, E]).
Bytes: the input, every weight, bias and mask read once, the output written once.
NB: a fused pass moves only those; the CPU and CUDA fast paths write Q, K, V, the scores
(for long sequences) and the FFN hidden activations too. Nested (padded) inputs are not
modelled.
"""
from __future__ import annotations

from torch.utils import flop_counter

from kernel_advisor.analyze.costs.call import OpCall, Tensor
from kernel_advisor.analyze.costs.common import io_cost, written
from kernel_advisor.analyze.costs.norms import STATS_FLOPS
from kernel_advisor.analyze.costs.registry import OpCost, register
from kernel_advisor.analyze.costs.shapes import Unmodelled

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
