"""einsum, priced the way ATen computes it: operands contracted pairwise into bmm calls.

aten::einsum (ATen's Linear.cpp) aligns every operand to one label order, then contracts
them left to right (or along a recorded `path`): each pair becomes one bmm of
[lro, lo, sum] @ [lro, sum, ro] (lro: labels in both operands and kept, lo/ro: kept labels
of one operand only, sum: labels contracted now), or a plain multiply when nothing is
contracted; a label that only one operand still holds is summed out of it first.
FLOPs: 2*lro*lo*sum*ro per bmm (torch.utils.flop_counter's count of the same bmm calls),
plus 1 per element for multiplies and sum-outs (the reductions family's convention).
Bytes: each operand read once, the result written once.
NB: permute/reshape copies between the steps are not counted.
NB: torch.einsum picks the contraction order with opt_einsum when it is installed and there
are more than two operands; without a recorded `path` this formula contracts left to right.

torch.profiler (through torch 2.13) does not record the equation (a string argument), and
operand shapes alone do not determine the contraction. For such calls attribution
(collect.attribute.PRICED_BY_CHILDREN) gives the children - bmm, sum, mul, copies - rows of
their own, which is how FlopCounterMode counts einsum too; what stays on the einsum row is its
own dispatch (label parsing, views: on a CPU its self time, on a GPU no kernel at all), priced
as zero work so the row is modelled and reads as overhead.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from kernel_advisor.analyze.costs import dtypes as dt
from kernel_advisor.analyze.costs.call import OpCall
from kernel_advisor.analyze.costs.registry import ZERO_COST_DTYPE, OpCost, io_cost, register, written
from kernel_advisor.analyze.costs.shapes import Unmodelled

ELLIPSIS = "..."


@dataclass(frozen=True)
class EinsumWork:
    bmm_flops: int  # 2*B*M*K*N summed over the bmm calls: what FlopCounterMode counts
    other_flops: int  # elementwise multiplies and sum-outs, 1 per element
    out_shape: tuple[int, ...]

    @property
    def flops(self) -> int:
        return self.bmm_flops + self.other_flops


def _parse_operand(term: str) -> list[str]:
    labels, i = [], 0
    term = term.replace(" ", "")
    while i < len(term):
        if term.startswith(ELLIPSIS, i):
            if ELLIPSIS in labels:
                raise Unmodelled(f"einsum: two ellipses in one operand {term!r}")
            labels.append(ELLIPSIS)
            i += 3
        elif term[i].isascii() and term[i].isalpha():
            labels.append(term[i])
            i += 1
        else:
            raise Unmodelled(f"einsum: invalid subscript {term[i]!r}")
    return labels


def _label_order(label: str) -> tuple[int, str]:
    # ATen numbers A-Z before a-z: the implicit output lists labels in that order.
    return (0 if label.isupper() else 1, label)


def _aligned(equation: str, shapes: list[tuple[int, ...]]) -> tuple[list[list[int]], int]:
    """Every operand as sizes over one shared axis order (output axes first, then the
    contracted ones; 1 where an operand lacks the label), and the number of output axes."""
    lhs, arrow, rhs = equation.partition("->")
    terms = [_parse_operand(t) for t in lhs.split(",")]
    if len(terms) != len(shapes):
        raise Unmodelled(f"einsum: {len(terms)} operands in {equation!r}, {len(shapes)} given")
    ell_dims = 0
    counts: dict[str, int] = {}
    for labels, shape in zip(terms, shapes):
        named = len(labels) - (ELLIPSIS in labels)
        if (ELLIPSIS in labels and named > len(shape)) or (
                ELLIPSIS not in labels and named != len(shape)):
            raise Unmodelled(f"einsum: {labels} do not match shape {shape}")
        if ELLIPSIS in labels:
            ell_dims = max(ell_dims, len(shape) - named)
        for label in labels:
            if label != ELLIPSIS:
                counts[label] = counts.get(label, 0) + 1
    ell_axes = [f"...{j}" for j in range(ell_dims)]
    if arrow:
        out = _parse_operand(rhs)
        if len(set(out)) != len(out) or any(
                label not in counts for label in out if label != ELLIPSIS):
            raise Unmodelled(f"einsum: bad output subscripts in {equation!r}")
        axes = [a for label in out for a in (ell_axes if label == ELLIPSIS else [label])]
        if ELLIPSIS not in out:
            axes_out = len(axes)
            axes += ell_axes
        else:
            axes_out = len(axes)
    else:
        once = (label for label, count in counts.items() if count == 1)
        axes = ell_axes + sorted(once, key=_label_order)
        axes_out = len(axes)
    axes += sorted((label for label in counts if label not in axes), key=_label_order)
    index = {a: i for i, a in enumerate(axes)}
    sizes: dict[str, int] = {}
    aligned = []
    for labels, shape in zip(terms, shapes):
        row = [1] * len(axes)
        dim = 0
        for label in labels:
            if label == ELLIPSIS:
                covered = len(shape) - (len(labels) - 1)
                names = ell_axes[ell_dims - covered:]
            else:
                names = [label]
            for name in names:
                size = shape[dim]
                dim += 1
                if row[index[name]] != 1 and size != row[index[name]]:
                    raise Unmodelled(f"einsum: repeated {name!r} with sizes differing")
                if size != 1:
                    if sizes.get(name, 1) not in (1, size):
                        raise Unmodelled(f"einsum: {name!r} sizes {sizes[name]} and {size}")
                    sizes[name] = size
                    row[index[name]] = size  # a repeated label takes the diagonal
        aligned.append(row)
    return aligned, axes_out


def einsum_work(equation: str, shapes: list[tuple[int, ...]],
                path: tuple[int, ...] | None = None) -> EinsumWork:
    """The bmm and elementwise work ATen's einsum does for these operand shapes."""
    if not shapes:
        raise Unmodelled("einsum without operands")
    ops, out_axes = _aligned(equation, [tuple(s) for s in shapes])
    n_axes = len(ops[0])
    # Operands holding each contracted axis at a size other than 1.
    counts = [sum(op[d] != 1 for op in ops) for d in range(n_axes)]
    if path is not None and len(path) != (1 if len(ops) == 1 else 2 * (len(ops) - 1)):
        raise Unmodelled(f"einsum: path {path} does not fit {len(ops)} operands")
    steps = iter(path or ())
    bmm_flops = other_flops = 0
    while len(ops) > 1:
        i, j = (0, 1) if path is None else sorted((next(steps), next(steps)))
        if i == j or j >= len(ops):
            raise Unmodelled(f"einsum: invalid contraction ({i}, {j})")
        a, b = list(ops[i]), list(ops[j])
        del ops[j], ops[i]
        # A contracted axis both hold is summed by this product when no other operand still
        # holds it; one only this operand still holds is summed out of it first.
        sum_dims, a_sum, b_sum = [], [], []
        for d in range(out_axes, n_axes):
            if a[d] != 1 and b[d] != 1:
                counts[d] -= 1
                if counts[d] == 1:
                    sum_dims.append(d)
                    counts[d] = 0
            elif counts[d] == 1 and (a[d] != 1 or b[d] != 1):
                (a_sum if a[d] != 1 else b_sum).append(d)
                counts[d] = 0
        if a_sum:
            other_flops += math.prod(a)
            for d in a_sum:
                a[d] = 1
        if b_sum:
            other_flops += math.prod(b)
            for d in b_sum:
                b[d] = 1
        result, bmm, extra = _sumproduct_pair(a, b, sum_dims)
        bmm_flops += bmm
        other_flops += extra
        if path is None:
            ops.insert(0, result)
        else:
            ops.append(result)
    final = ops[0]
    if any(final[d] != 1 for d in range(out_axes, n_axes)):
        other_flops += math.prod(final)  # one operand: the contracted axes are summed out
    return EinsumWork(bmm_flops, other_flops, tuple(final[:out_axes]))


def _sumproduct_pair(a: list[int], b: list[int], sum_dims: list[int]
                     ) -> tuple[list[int], int, int]:
    """(result sizes, bmm flops, other flops) of ATen's sumproduct_pair."""
    if not sum_dims:
        out = [max(x, y) for x, y in zip(a, b)]
        return out, 0, math.prod(out)  # at::mul
    lro = lo = ro = contracted = 1
    extra = 0
    a, b = list(a), list(b)
    out = [1] * len(a)
    for d, (x, y) in enumerate(zip(a, b)):
        if d in sum_dims:
            if x != 1 and y != 1:
                contracted *= x
            elif x != 1:
                extra += math.prod(a)
                a[d] = 1
            elif y != 1:
                extra += math.prod(b)
                b[d] = 1
        elif x != 1 and y != 1:
            lro *= x
            out[d] = x
        elif x != 1:
            lo *= x
            out[d] = x
        elif y != 1:
            ro *= y
            out[d] = y
    return out, 2 * lro * lo * contracted * ro, extra


@register("einsum")
def einsum(call: OpCall) -> OpCost:
    # einsum(equation, tensors, path=None)
    equation = call.text_at(0, None)
    if equation is None:  # the children's rows carry the work (module docstring)
        return io_cost(0, [], [], ZERO_COST_DTYPE)
    operands = call.tensor_list(1, unrecorded_dtype=dt.ASSUMED_LIST_DTYPE)
    path = call.ints_at(2, None)
    work = einsum_work(equation, [t.shape for t in operands], path)
    dtype = operands[0].dtype
    out = written(work.out_shape, dtype)
    return io_cost(work.flops, operands, [out], dtype, tensor_cores=work.bmm_flops > 0)

