"""Which aten ops are pointwise, reductions or views: torch's own op metadata, not hand-kept lists.

torch tags every operator overload (native_functions.yaml `tags:`): `torch.Tag.pointwise`
(elementwise: the output has the broadcast shape of the tensor inputs), `torch.Tag.reduction`,
and `torch.Tag.inplace_view` for an in-place view (`transpose_`). An overload whose schema
returns an alias of an input it does not write (`Tensor(a) self -> Tensor(a)`) is a view:
`OpOverload.is_view`. An op, named as a trace names it after `aten::` without the overload
(`add`, `add_`, `transpose_`), has a kind when any of its overloads that return tensors has
it (aten::equal, tagged pointwise, returns a bool; copy.t, a view, copies a list).

Exceptions, each a short list with its reason:
- MAY_COPY: the schema says "may alias", but the op returns a new tensor when it must (a
  layout, dtype or device change): not a view, it can launch a kernel.
- UNSAFE_VIEWS: views whose schema does not say so (they skip autograd's view tracking).
- max and min are tagged both (max.dim reduces, max.other is binary): a reduction, not pointwise.
Consumers keep their own documented exceptions where their question is not the tag's
(recommend/shapes.py: shape-keeping ops that are not pointwise).
"""
from __future__ import annotations

import functools

import torch
from torch._ops import OpOverload

# Alias when nothing needs doing, a fresh tensor otherwise.
MAY_COPY = frozenset({
    "reshape", "reshape_as", "flatten", "ravel", "contiguous",  # a copy when the strides do not allow a view
    "to", "cpu", "cuda", "pin_memory", "as_tensor", "coalesce",  # a copy to another dtype, device or memory
    "_autocast_to_full_precision", "_autocast_to_reduced_precision",
    "_grad_sum_to_size",  # a sum when the sizes differ
})
# Views by contract, though their schemas return fresh tensors.
UNSAFE_VIEWS = frozenset({"_unsafe_view", "unsafe_split", "unsafe_chunk", "unsafe_split_with_sizes"})


@functools.lru_cache(maxsize=None)
def _overloads(name: str) -> tuple[OpOverload, ...]:
    """Every overload of aten::<name> that returns tensors (not TorchScript's list and dict ops)."""
    try:
        packet = getattr(torch.ops.aten, name)
        found = [getattr(packet, o) for o in packet.overloads()]
    except (AttributeError, RuntimeError):  # not an aten op
        return ()
    return tuple(op for op in found if _returns_tensors(op))


def _returns_tensors(op: OpOverload) -> bool:
    returns = op._schema.returns
    return bool(returns) and all(str(r.type) in ("Tensor", "List[Tensor]") for r in returns)


def _tagged(name: str, tag: torch.Tag) -> bool:
    return any(tag in op.tags for op in _overloads(name))


@functools.lru_cache(maxsize=None)
def is_reduction(name: str) -> bool:
    """torch.Tag.reduction on an overload: sum, mean, amax, var, argmax, logsumexp, ..."""
    return _tagged(name, torch.Tag.reduction)


@functools.lru_cache(maxsize=None)
def is_pointwise(name: str) -> bool:
    """torch.Tag.pointwise on an overload, and not a reduction (max, min)."""
    return _tagged(name, torch.Tag.pointwise) and not is_reduction(name)


@functools.lru_cache(maxsize=None)
def is_view(name: str) -> bool:
    """Always an alias of its input, never a kernel: OpOverload.is_view or torch.Tag.inplace_view
    (resize_, set_ included), less MAY_COPY, plus UNSAFE_VIEWS."""
    if name in UNSAFE_VIEWS:
        return True
    if name in MAY_COPY:
        return False
    return any(op.is_view or torch.Tag.inplace_view in op.tags for op in _overloads(name))


@functools.lru_cache(maxsize=1)
def view_op_names() -> frozenset[str]:
    """Every aten op is_view holds for (what the cost model prices at 0 bytes).

    Only an op whose schema aliases an argument it does not write, or an in-place op (the
    ones Tag.inplace_view can mark), can be one: the schemas are scanned for those first, as
    reading the tags of all ~2,000 ops takes half a second.
    """
    candidates = set(UNSAFE_VIEWS)
    for schema in torch._C._jit_get_all_schemas():
        namespace, _, name = schema.name.partition("::")
        if namespace == "aten" and (name.endswith("_") or any(
                a.alias_info is not None and not a.alias_info.is_write for a in schema.arguments)):
            candidates.add(name)
    return frozenset(n for n in candidates if is_view(n))
