"""Op-sequence patterns: naive attention, hand-written RMSNorm, fusible chains, SwiGLU,
unfused optimizers, and elementwise work next to opaque custom ops.

Detectors read sequence.csv (execution order) one step at a time, after dropping views
(no data moved), the autograd engine's node markers and, on GPU, occurrences that launched
nothing. Each match is an Instance with the bytes its fusion would stop moving;
pattern_groups.py groups them.

Autograd (collect/attribute.py tags each occurrence): the engine's own work - gradients
summed into a node's input buffer, reduced to an input's shape, accumulated into .grad - is
never part of a match and cuts the op stream where it runs: it is not code the user wrote.
A match never mixes forward and backward ops (AOTAutograd compiles them as two graphs);
a match on backward ops is one on the backward of the forward ops it names (`backward_of`).
"""
from __future__ import annotations

import functools
import json
from collections import defaultdict
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Sequence

import pandas as pd

from kernel_advisor.analyze import op_kinds
from kernel_advisor.collect.nesting import NODE_SCOPE
from kernel_advisor.recommend.conditions import PATTERNS
from kernel_advisor.recommend.evidence import RunContext
from kernel_advisor.recommend.shapes import TensorArg, base_name, is_aten, is_fusible, link_bytes, tensor_args
from kernel_advisor.records.columns import flag_value, text_value

# Dropped from the op stream besides torch's views (analyze/op_kinds.py is_view): allocations
# and metadata queries, which move no data, and reshape and flatten, views unless the layout
# forbids one (a copy they make then is not taken for a link).
NO_DATA_MOVED = frozenset({"empty", "empty_like", "empty_strided", "result_type", "size", "stride",
                           "reshape", "flatten"})
CASTS = frozenset({"to", "_to_copy", "type_as", "float", "half", "bfloat16", "contiguous", "clone"})
# Ops that build a mask or scale between QK^T and softmax.
SCORE_OPS = frozenset({"mul", "div", "add", "sub", "masked_fill", "where", "ones", "zeros", "full", "fill",
                       "triu", "tril", "arange", "ne", "eq", "lt", "le", "gt", "ge", "logical_not",
                       "bitwise_not", "copy", "ones_like", "zeros_like", "full_like"}) | CASTS
POST_SOFTMAX = frozenset({"dropout", "native_dropout", "feature_dropout", "mul", "bernoulli"}) | CASTS
ATTN_MM = frozenset({"matmul", "bmm"})
SOFTMAX = frozenset({"softmax", "_softmax", "_safe_softmax"})
OPTIMIZER_PER_PARAM = frozenset({"addcdiv", "addcmul", "lerp"})
NOT_CUSTOM_NAMESPACES = ("aten::", "prim::", "profiler::", "cuda::", "c10d::", "autograd::", "torch::")
MAX_SCORE_GAP, MAX_POST_GAP = 8, 3
LINK_WINDOW = 8


@dataclass(frozen=True)
class Occ:
    """One op occurrence from sequence.csv; shapes and dtypes as JSON text (hashable, cacheable)."""

    seq: int
    step: int
    name: str
    row_id: int
    shapes: str
    dtypes: str
    time_s: float
    backward_of: str = ""  # the forward op a backward occurrence serves ("" forward, or unknown)
    autograd_node: str = ""  # the backward node it ran under ("" forward)
    autograd_internal: bool = False  # the engine's own work, not the node's formula

    @property
    def backward(self) -> bool:
        return bool(self.autograd_node or self.backward_of)

    @property
    def op(self) -> str:
        return base_name(self.name)

    @property
    def record(self) -> tuple[str, str, str]:
        return self.name, self.shapes, self.dtypes


# Rows repeat (every layer, every step): shape arithmetic is done once per pair of records.
@functools.lru_cache(maxsize=1 << 16)
def _link(producer: tuple[str, str, str], consumer: tuple[str, str, str]) -> int:
    return link_bytes(producer, consumer)


@functools.lru_cache(maxsize=1 << 14)
def _tensors(shapes: str, dtypes: str) -> tuple[TensorArg, ...]:
    return tuple(tensor_args(shapes, dtypes))


def _as_json(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value)


@dataclass(frozen=True)
class Instance:
    """One match: its occurrences and the bytes fusing them would stop moving."""

    pattern: str
    occs: tuple[Occ, ...]
    intermediate_bytes: int
    variant: str = ""


def _stream(sequence: pd.DataFrame, device_type: str, no_data_rows: frozenset[int] = frozenset()) -> dict[int, list[Occ]]:
    """Per step, the occurrences that moved data, in execution order (`no_data_rows`: ops.csv
    rows modelled at 0 bytes, such as a cast to the dtype a tensor already has)."""
    steps: dict[int, list[Occ]] = defaultdict(list)
    if not len(sequence):
        return steps
    ordered = sequence.sort_values("seq", kind="stable")
    records: dict[int, tuple[str, str]] = {}  # row id -> (shapes, dtypes): a row has one of each
    for r in ordered.itertuples(index=False):
        name, time_s, row_id = str(r.name), float(r.device_time_per_call_s or 0.0), int(r.row_id)
        if (is_aten(name) and _moves_no_data(base_name(name))) or row_id in no_data_rows:
            continue
        if device_type != "cpu" and time_s <= 0.0:
            continue  # launched nothing on the device: a view, a no-op cast, CPU-side work
        node = text_value(getattr(r, "autograd_node", ""))
        if name.startswith(NODE_SCOPE) or (node and name == node):
            continue  # the engine's markers around a node: bookkeeping, not an op on the data
        if row_id not in records:
            records[row_id] = (_as_json(r.input_shapes), _as_json(r.input_dtypes))
        shapes, dtypes = records[row_id]
        steps[int(r.step)].append(Occ(int(r.seq), int(r.step), name, row_id, shapes, dtypes, time_s,
                                      text_value(getattr(r, "backward_of", "")), node,
                                      flag_value(getattr(r, "autograd_internal", False))))
    return steps


def _rows_moving_no_data(ops: pd.DataFrame) -> frozenset[int]:
    """aten rows the cost model prices at 0 bytes and 0 FLOPs: an alias handed on (a no-op
    `to`, `contiguous` of a contiguous tensor). On a GPU they launch nothing and have no device
    time; on CPU they take a little, and as links they would count their tensor twice."""
    if not len(ops) or "bytes_per_call" not in ops:
        return frozenset()
    free = ops["name"].astype(str).str.startswith("aten::") & ops["modelled"].astype(bool) \
        & (ops["bytes_per_call"] == 0) & (ops["flops_per_call"] == 0)
    return frozenset(ops.loc[free, "row_id"].astype(int))


def _moves_no_data(op: str) -> bool:
    return op in NO_DATA_MOVED or op_kinds.is_view(op)


def user_segments(ops: Sequence[Occ]) -> Iterable[list[Occ]]:
    """Runs of consecutive ops one fusion may span: cut at every op of the autograd engine's
    own work (dropped: never the user's code to fuse) and where forward turns to backward."""
    run: list[Occ] = []
    for o in ops:
        if o.autograd_internal or (run and run[-1].backward != o.backward):
            if run:
                yield run
            run = [] if o.autograd_internal else [o]
            continue
        run.append(o)
    if run:
        yield run


def intermediate_bytes(occs: Sequence[Occ]) -> int:
    """Write + read of every tensor one op in `occs` hands to a later one in `occs`.

    NB: assumes each intermediate has no consumer outside the pattern; one that does must
    still be written, so this is an upper bound on what fusion removes. The consumer is
    looked for among the next LINK_WINDOW ops only: producers and consumers sit close
    together in eager execution order, and long optimizer steps stay linear in time.
    """
    total = 0
    for i, producer in enumerate(occs[:-1]):
        for consumer in occs[i + 1:i + 1 + LINK_WINDOW]:
            n = _link(producer.record, consumer.record)
            if n:
                total += 2 * n
                break
    return total


def _instance(pattern: str, occs: Sequence[Occ], variant: str = "") -> Instance:
    if pattern not in PATTERNS:  # rules test the name (`pattern:` conditions): one vocabulary
        raise ValueError(f"pattern {pattern!r} is not in recommend/conditions.py's PATTERNS")
    return Instance(pattern, tuple(occs), intermediate_bytes(occs), variant)


def _skip(ops: Sequence[Occ], i: int, allowed: frozenset, limit: int) -> int:
    j = i
    while j < len(ops) and j - i < limit and ops[j].op in allowed:
        j += 1
    return j


def _first_tensor_shape(o: Occ) -> tuple[int, ...] | None:
    args = _tensors(o.shapes, o.dtypes)
    return args[0].shape if args else None


def naive_attention(ops: Sequence[Occ]) -> Iterable[Instance]:
    """matmul/bmm → [scale/mask] → softmax → [dropout/cast] → matmul/bmm over the same scores."""
    i = 0
    while i < len(ops):
        if ops[i].op not in ATTN_MM:
            i += 1
            continue
        s = _skip(ops, i + 1, SCORE_OPS, MAX_SCORE_GAP)
        if s >= len(ops) or ops[s].op not in SOFTMAX:
            i += 1
            continue
        m = _skip(ops, s + 1, POST_SOFTMAX, MAX_POST_GAP)
        scores = _first_tensor_shape(ops[s])
        if m < len(ops) and ops[m].op in ATTN_MM and scores and _first_tensor_shape(ops[m]) == scores:
            yield _instance("naive-attention", ops[i:m + 1])
            i = m + 1
        else:
            i += 1


# RMSNorm as written by hand: x² → mean → + eps → rsqrt → x·r [→ ·weight] (or sqrt → x / r);
# each step is (op families, required). Casts (x.float(), .to(dtype)) may sit between steps.
RMS_STEPS = ((("pow", "square", "mul"), True), (("mean",), True), (("add",), True),
             (("rsqrt", "sqrt"), True), (("mul", "div"), True), (("mul",), False))
MAX_CASTS = 2


def match_steps(ops: Sequence[Occ], i: int, steps) -> list[int] | None:
    """Indices of the ops matching `steps` from i (casts skipped between steps), else None."""
    found: list[int] = []
    j = i
    for k, (families, required) in enumerate(steps):
        at = j if k == 0 else _skip(ops, j, CASTS, MAX_CASTS)
        if at < len(ops) and ops[at].op in families:
            found.append(at)
            j = at + 1
        elif required:
            return None
    return found


def _is_rmsnorm(ops: Sequence[Occ], idx: list[int]) -> bool:
    square, mean, _, root, scale = (ops[k] for k in idx[:5])
    width = _first_tensor_shape(square)
    if square.op == "mul" and [a.shape for a in _tensors(square.shapes, square.dtypes)] != [width, width]:
        return False  # x * x, not any product
    if (root.op, scale.op) not in (("rsqrt", "mul"), ("sqrt", "div")) or _first_tensor_shape(mean) != width:
        return False
    return any(a.shape == width for a in _tensors(scale.shapes, scale.dtypes))


def _residual_add(ops: Sequence[Occ], i: int) -> int | None:
    """Index of the `x + y` right before the RMSNorm starting at i (casts between), else None."""
    k = i - 1
    while k >= 0 and i - k <= MAX_CASTS and ops[k].op in CASTS:
        k -= 1
    if k >= 0 and ops[k].op == "add" and _link(ops[k].record, ops[k + 1].record):
        return k
    return None


def rmsnorm_chain(ops: Sequence[Occ]) -> Iterable[Instance]:
    """pow/square → mean → add(eps) → rsqrt → mul [→ mul weight], casts allowed in between;
    with the residual add in front of it, also a residual-rmsnorm."""
    i = 0
    while i < len(ops):
        idx = match_steps(ops, i, RMS_STEPS) if ops[i].op in RMS_STEPS[0][0] else None
        if idx is None or not _is_rmsnorm(ops, idx):
            i += 1
            continue
        yield _instance("rmsnorm-chain", ops[i:idx[-1] + 1])
        start = _residual_add(ops, i)
        if start is not None:
            yield _instance("residual-rmsnorm", ops[start:idx[-1] + 1])
        i = idx[-1] + 1


CHAIN_LOOKBACK = 4  # NB: a chain is a small DAG (x.float() * rsqrt(...)): an op may consume any recent op


def elementwise_chains(ops: Sequence[Occ]) -> Iterable[Instance]:
    """Maximal runs of >= 2 consecutive fusible ops, each consuming a recent op's output."""
    run: list[Occ] = []
    for o in list(ops) + [None]:
        fusible = o is not None and is_fusible(o.name)
        if fusible and (not run or any(_link(p.record, o.record) for p in run[-CHAIN_LOOKBACK:])):
            run.append(o)
            continue
        if len(run) >= 2:
            yield _instance("elementwise-chain", run)
        run = [o] if fusible else []


def swiglu(ops: Sequence[Occ]) -> Iterable[Instance]:
    """silu/gelu(x W1) [→ x W3] → mul: the gated activation a fused kernel computes in one pass.
    The GEMM in between is not part of it: only the activation's round trip goes away."""
    for i, o in enumerate(ops):
        if o.op not in ("silu", "gelu"):
            continue
        act = _first_tensor_shape(o)
        for k in range(i + 1, min(i + 3, len(ops))):
            if ops[k].op == "mul" and all(a.shape == act for a in _tensors(ops[k].shapes, ops[k].dtypes)):
                yield _instance("swiglu", (o, ops[k]), variant=o.op)
                break
            if base_name(ops[k].name) not in ("linear", "matmul", "mm", "addmm"):
                break


def unfused_optimizer(ops: Sequence[Occ], regions: dict[int, str]) -> Iterable[Instance]:
    """Per-parameter or foreach optimizer ops in one step, when no fused optimizer ran."""
    if any(o.op.startswith("_fused_") for o in ops):
        return
    picked = [o for o in ops if regions.get(o.seq, "").startswith("Optimizer.step")
              or o.op.startswith("_foreach_") or o.op in OPTIMIZER_PER_PARAM]
    if len(picked) >= 2:
        variant = "foreach" if any(o.op.startswith("_foreach_") for o in picked) else "per-parameter"
        yield _instance("unfused-optimizer", picked, variant=variant)


def is_custom(o: Occ, kinds: dict[int, str]) -> bool:
    if kinds.get(o.row_id, "op") == "kernel":
        return not o.name.startswith(("triton_", "nccl", "ncclDevKernel", "Memcpy", "Memset"))
    return "::" in o.name and not o.name.startswith(NOT_CUSTOM_NAMESPACES)


def custom_op_boundary(ops: Sequence[Occ], kinds: dict[int, str]) -> Iterable[Instance]:
    """An opaque custom op with fusible work linked to it: torch.compile cannot fuse across it."""
    for i, o in enumerate(ops):
        if not is_custom(o, kinds):
            continue
        lo = i
        while lo > 0 and is_fusible(ops[lo - 1].name) and _link(ops[lo - 1].record, ops[lo].record):
            lo -= 1
        hi = i
        while hi + 1 < len(ops) and is_fusible(ops[hi + 1].name) and _link(ops[hi].record, ops[hi + 1].record):
            hi += 1
        if hi > lo:
            yield _instance("custom-op-boundary", ops[lo:hi + 1])


def _detectors(kinds: dict[int, str]) -> list[Callable]:
    """Detectors over runs of consecutive ops (each sees one user_segments run at a time)."""
    return [naive_attention, rmsnorm_chain, elementwise_chains, swiglu, lambda ops: custom_op_boundary(ops, kinds)]


def detect_instances(sequence: pd.DataFrame, ops: pd.DataFrame, ctx: RunContext) -> list[Instance]:
    regions = dict(zip(sequence["seq"].astype(int), sequence["region"].astype(str))) \
        if "region" in sequence else {}
    kinds = dict(zip(ops["row_id"].astype(int), ops["kind"].astype(str))) if len(ops) else {}
    out: list[Instance] = []
    detectors = _detectors(kinds)
    for step_ops in _stream(sequence, ctx.device_type, _rows_moving_no_data(ops)).values():
        for run in user_segments(step_ops):
            for detect in detectors:
                out.extend(detect(run))
        if ctx.mode == "train":  # the whole step: optimizer ops need not be adjacent
            out.extend(unfused_optimizer([o for o in step_ops if not o.autograd_internal], regions))
    return out
