"""Find written-out attention in a captured graph and rewrite it into one SDPA call.

The graph is torch-level FX as torch._dynamo.export captures it: `q @ k.transpose(-2, -1)`,
a scale (`/ sqrt(d)`, `* scale`), masks (`masked_fill(cond, -inf)`, `torch.where`, `+ mask`),
casts, `softmax(dim=-1)`, dropout, `@ v`. Every node between the two matmuls must feed only
the next one (scores used elsewhere — returned attention weights — cannot be rewritten).
Each node carries its example value (shape and dtype) in its fx meta, under EXAMPLE_VALUE.
"""
from __future__ import annotations

import math
import operator
from dataclasses import dataclass, field

import torch
import torch.fx as fx
import torch.nn.functional as F

# The key under which dynamo records a node's example tensor in `node.meta`.
EXAMPLE_VALUE = "example_value"

_SOFTMAX = {F.softmax, torch.softmax, torch.Tensor.softmax}
_MATMUL = {operator.matmul, torch.matmul, torch.bmm, torch.Tensor.matmul, torch.Tensor.bmm}
_DIV = {operator.truediv, torch.div, torch.true_divide, torch.Tensor.div}
_MUL = {operator.mul, torch.mul, torch.Tensor.mul}
_ADD = {operator.add, torch.add, torch.Tensor.add}
_CAST_METHODS = {"float", "to", "type_as", "half", "bfloat16", "contiguous"}
# NB: a fill at or below this is "never attend": SDPA's boolean mask gives -inf, which
# differs from a finite fill only in rows where every key is masked.
MASK_FILL_MAX = -1e4


@dataclass
class Site:
    """One attention: the nodes it replaces and the parts SDPA needs."""

    q: fx.Node
    k_t: fx.Node
    v: fx.Node
    out: fx.Node  # the probabilities @ v matmul
    nodes: list[fx.Node] = field(default_factory=list)  # replaced, first to last
    factors: list[tuple[str, object]] = field(default_factory=list)  # ("mul" | "div", number or node)
    masks: list[tuple[str, fx.Node]] = field(default_factory=list)  # ("keep" | "drop" | "add", node)
    dropout_p: float = 0.0


class NoMatch(Exception):
    pass


def _is(node, fns: set, methods: set[str] = frozenset()) -> bool:
    if not isinstance(node, fx.Node):
        return False
    if node.op == "call_function":
        return node.target in fns
    return node.op == "call_method" and node.target in methods


def _value(node):
    return node.meta.get(EXAMPLE_VALUE) if isinstance(node, fx.Node) else None


def _shape(node):
    v = _value(node)
    return tuple(v.shape) if isinstance(v, torch.Tensor) else None


def _only_user(node: fx.Node) -> fx.Node:
    users = list(node.users)
    if len(users) != 1:
        raise NoMatch("the attention scores feed more than one op (returned or reused)")
    return users[0]


def find_sites(graph: fx.Graph) -> tuple[list[Site], list[str]]:
    """Every rewritable attention, and why each other softmax is not one."""
    sites, misses = [], []
    for node in list(graph.nodes):
        if not _is(node, _SOFTMAX, {"softmax"}):
            continue
        try:
            sites.append(_site(node))
        except NoMatch as e:
            misses.append(str(e))
    return sites, misses


def _site(softmax: fx.Node) -> Site:
    _check_last_dim(softmax)
    pre = _walk_back(softmax.args[0])
    out, post, dropout_p = _walk_forward(softmax)
    site = Site(q=pre["q"], k_t=pre["k_t"], v=out.args[1], out=out, factors=pre["factors"], masks=pre["masks"],
                dropout_p=dropout_p)
    site.nodes = pre["nodes"] + [softmax] + post + [out]
    _check_dtypes(site)
    return site


def _check_last_dim(softmax: fx.Node) -> None:
    dim = softmax.kwargs.get("dim", softmax.args[1] if len(softmax.args) > 1 else None)
    shape = _shape(softmax)
    if shape is None or dim not in (-1, len(shape) - 1):
        raise NoMatch("softmax is not over the last dimension")
    dtype = softmax.kwargs.get("dtype")
    if dtype not in (None, torch.float32):
        raise NoMatch(f"softmax computes in {dtype}")


def _walk_forward(softmax: fx.Node) -> tuple[fx.Node, list[fx.Node], float]:
    post, node, dropout_p = [], _only_user(softmax), 0.0
    while not _is(node, _MATMUL, {"matmul", "bmm", "__matmul__"}):
        if node.op == "call_function" and node.target is F.dropout:
            dropout_p = _dropout_p(node)
        elif not _is(node, set(), _CAST_METHODS):
            raise NoMatch(f"softmax output goes to {node.target} before the matmul with v")
        post.append(node)
        node = _only_user(node)
    if node.args[0] is not (post[-1] if post else softmax):
        raise NoMatch("the probabilities are the right operand of the matmul")
    return node, post, dropout_p


def _dropout_p(node: fx.Node) -> float:
    p = node.kwargs.get("p", node.args[1] if len(node.args) > 1 else 0.5)
    training = node.kwargs.get("training", node.args[2] if len(node.args) > 2 else True)
    if not isinstance(p, (int, float)):
        raise NoMatch("the attention dropout probability is not a constant")
    if training and p > 0:
        # SDPA draws its own random numbers: no gate could compare it with eager's dropout.
        raise NoMatch(f"attention dropout p={p} is active (training)")
    return 0.0


def _walk_back(node) -> dict:
    """From the softmax input back to q @ k^T, collecting scale factors and masks."""
    nodes, factors, masks, seen_mask = [], [], [], False
    while not _is(node, _MATMUL, {"matmul", "bmm", "__matmul__"}):
        if not isinstance(node, fx.Node):
            raise NoMatch("the softmax input is not computed from q @ k^T")
        nodes.append(node)
        chain, step = _score_step(node)
        kind = step[0]
        if kind in ("mul", "div"):
            if seen_mask and not _scale_commutes(masks, step[1]):
                raise NoMatch("a scale after an additive mask")
            factors.append(step)
        elif kind != "cast":
            seen_mask = True
            masks.append(step)
        if len(chain.users) != 1:
            raise NoMatch("the attention scores feed more than one op (returned or reused)")
        node = chain
    q, k_t = node.args[0], node.args[1]
    if (_shape(q) is None or len(_shape(q)) < 3) or _shape(k_t) is None:
        raise NoMatch("q @ k^T is not a batched matmul")
    nodes.append(node)
    return {"q": q, "k_t": k_t, "factors": factors, "masks": masks, "nodes": nodes[::-1]}


def _score_step(node: fx.Node) -> tuple[fx.Node, tuple]:
    """(the operand carrying the scores, what this op does to them)."""
    if _is(node, set(), _CAST_METHODS):
        return node.args[0], ("cast",)
    if _is(node, _DIV, {"div", "__truediv__"}):
        return node.args[0], ("div", node.args[1])
    if _is(node, _MUL, {"mul", "__mul__"}):
        chain, other = _full_operand(node)
        return chain, ("mul", other)
    if _is(node, _ADD, {"add", "__add__"}):
        chain, other = _full_operand(node)
        return chain, ("add", other)
    if _is(node, {torch.masked_fill, torch.Tensor.masked_fill}, {"masked_fill", "masked_fill_"}):
        _check_fill(node.args[2] if len(node.args) > 2 else node.kwargs.get("value"))
        return node.args[0], ("drop", node.args[1])
    if node.op == "call_function" and node.target is torch.where and len(node.args) == 3:
        cond, a, b = node.args
        if isinstance(a, fx.Node) and not isinstance(b, fx.Node):
            _check_fill(b)
            return a, ("keep", cond)
        if isinstance(b, fx.Node) and not isinstance(a, fx.Node):
            _check_fill(a)
            return b, ("drop", cond)
    raise NoMatch(f"{getattr(node.target, '__name__', node.target)} between q @ k^T and softmax")


def _full_operand(node: fx.Node) -> tuple[fx.Node, object]:
    a, b = node.args[0], node.args[1]
    out = _shape(node)
    if isinstance(a, fx.Node) and _shape(a) == out and not (isinstance(b, fx.Node) and _shape(b) == out):
        return a, b
    if isinstance(b, fx.Node) and _shape(b) == out and not (isinstance(a, fx.Node) and _shape(a) == out):
        return b, a
    if isinstance(a, fx.Node) and _is(a, _MATMUL, {"matmul", "bmm", "__matmul__"}):
        return a, b
    raise NoMatch("cannot tell the scores from the other operand")


def _check_fill(value) -> None:
    if not isinstance(value, (int, float)) or not (math.isinf(value) or value <= MASK_FILL_MAX):
        raise NoMatch(f"masked with {value!r}, not a large negative constant")


def _scale_commutes(masks: list, factor) -> bool:
    """A positive constant scale after -inf fills changes nothing the fills decided."""
    return all(kind in ("keep", "drop") for kind, _ in masks) and isinstance(factor, (int, float)) and factor > 0


def _check_dtypes(site: Site) -> None:
    dtypes = {_value(n).dtype for n in (site.q, site.k_t, site.v) if isinstance(_value(n), torch.Tensor)}
    out = _value(site.out)
    if len(dtypes) != 1 or not isinstance(out, torch.Tensor) or out.dtype not in dtypes:
        raise NoMatch("q, k, v and the output do not share one dtype")


def attention_via_sdpa(q, k_t, v, factors, masks, causal: bool):
    """What the rewritten graph calls instead of the written-out attention."""
    scale, tensor_scale = 1.0, None
    for op, f in factors:
        if isinstance(f, torch.Tensor):
            f = f if op == "mul" else 1.0 / f
            tensor_scale = f if tensor_scale is None else tensor_scale * f
        else:
            scale = scale * f if op == "mul" else scale / f
    if tensor_scale is not None:
        q = q * tensor_scale.to(q.dtype)
    mask = None if causal else combine_masks(masks, q.dtype)
    return F.scaled_dot_product_attention(q, k_t.transpose(-2, -1), v, attn_mask=mask, is_causal=causal,
                                          scale=float(scale))


def combine_masks(masks, dtype: torch.dtype):
    """One SDPA mask: boolean (True attends) when every part is boolean, else additive."""
    keeps = [m if kind == "keep" else ~m.bool() for kind, m in masks if kind in ("keep", "drop")]
    adds = [m for kind, m in masks if kind == "add"]
    keep = None
    for m in keeps:
        keep = m.bool() if keep is None else keep & m.bool()
    if not adds:
        return keep
    total = sum(a.to(dtype) for a in adds)
    if keep is not None:
        total = total.masked_fill(~keep, float("-inf"))
    return total


def rewrite(gm: fx.GraphModule, site: Site, causal: bool) -> None:
    graph = gm.graph
    with graph.inserting_before(site.out):
        fused = graph.call_function(attention_via_sdpa, (site.q, site.k_t, site.v, list(site.factors),
                                                          [[kind, m] for kind, m in site.masks], causal))
    fused.meta = dict(site.out.meta)
    site.out.replace_all_uses_with(fused)
    for node in reversed(site.nodes):
        if not node.users:
            graph.erase_node(node)
