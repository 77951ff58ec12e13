"""Copies and conversions (copy_, clone, contiguous, to, _to_copy, reshape), concatenation,
tensor creation and fills, padding and repeats. No arithmetic: 0 flops.

NB: a dtype conversion is counted as 0 flops. Host<->device copies (to("cuda")) are bounded
by the PCIe/NVLink link, not HBM; shapes alone cannot tell them from device copies.
"""
from __future__ import annotations

import math

from kernel_advisor.analyze.costs import dtypes as dt
from kernel_advisor.analyze.costs.call import OpCall, Tensor
from kernel_advisor.analyze.costs.registry import ZERO_COST_DTYPE, OpCost, io_cost, register, written
from kernel_advisor.analyze.costs.shapes import Unmodelled, broadcast


def copy_cost(src: Tensor, out_shape: tuple, out_dtype: str) -> OpCost:
    return io_cost(0, [src], [written(out_shape, out_dtype)], src.dtype)


def no_op(dtype: str = ZERO_COST_DTYPE) -> OpCost:
    return io_cost(0, [], [], dtype)


@register("copy_")
def copy_(call: OpCall) -> OpCost:
    # copy_(self, src, non_blocking): src (possibly broadcast) read once, self written.
    dst, src = call.tensor(0), call.tensor(1)
    broadcast(src.shape, dst.shape)
    return copy_cost(src, dst.shape, dst.dtype)


@register("clone", "contiguous", "reshape", "flatten", "_reshape_copy", "reshape_as")
def clone(call: OpCall) -> OpCost:
    # NB: contiguous/reshape/flatten launch nothing when the input is already laid out right
    # (their rows then have no device time); when they launch a kernel it is this copy.
    x = call.tensor(0)
    return copy_cost(x, x.shape, x.dtype)


@register("_to_copy")
def to_copy(call: OpCall) -> OpCost:
    # _to_copy(self, dtype, layout, device, pin_memory, non_blocking, memory_format)
    x = call.tensor(0)
    return copy_cost(x, x.shape, call.dtype_code_at(1) or x.dtype)


@register("to")
def to(call: OpCall) -> OpCost:
    # to.dtype(self, dtype, non_blocking, copy, memory_format)       5 args
    # to.device(self, device, dtype, non_blocking, copy, memory_format) 6 args
    # to.other(self, other, non_blocking, copy, memory_format)       5 args, other a tensor
    # to.dtype_layout(self, dtype, layout, device, pin_memory, non_blocking, copy, fmt) 8 args
    x = call.tensor(0)
    count = call.arg_count()
    if count == 5 and call.has_tensor(1):
        # to.other follows `other`'s dtype and device: with the same dtype it is either a
        # no-op or a transfer to other's (unrecorded) device.
        if call.tensor(1).dtype == x.dtype and not call.bool_at(3, False):
            raise Unmodelled(f"{call.name}: same dtype, unrecorded device")
        return copy_cost(x, x.shape, call.tensor(1).dtype)
    if count == 5:
        target = call.dtype_code_at(1)
        if target in (None, x.dtype) and not call.bool_at(3, False):
            return no_op(x.dtype)  # returns self: no kernel
        return copy_cost(x, x.shape, target or x.dtype)
    dtype_pos, copy_pos = {6: (2, 4), 8: (1, 6)}.get(count, (None, None))
    if dtype_pos is None:
        raise Unmodelled(f"{call.name}: unknown overload with {count} arguments")
    target = call.dtype_code_at(dtype_pos)
    if target in (None, x.dtype) and not call.bool_at(copy_pos, False):
        # The device is not recorded: this is either a no-op or a host<->device transfer.
        raise Unmodelled(f"{call.name}: same dtype, unrecorded device")
    return copy_cost(x, x.shape, target or x.dtype)


def _concat_dtype(parts: list[Tensor]) -> str:
    if not parts:
        raise Unmodelled("concatenation of an empty tensor list")
    return dt.promote([t.dtype for t in parts])


@register("cat", "concat", "concatenate")
def cat(call: OpCall) -> OpCost:
    # cat(tensors, dim): every input read once, the concatenation written once. Legacy
    # empty [0] inputs are skipped by ATen and weigh nothing here. Element dtypes: see
    # dtypes.ASSUMED_LIST_DTYPE.
    parts = call.tensor_list(0, unrecorded_dtype=dt.ASSUMED_LIST_DTYPE)
    out_numel = sum(t.numel for t in parts)
    out_dtype = _concat_dtype(parts)
    return io_cost(0, parts, [written((out_numel,), out_dtype)], out_dtype)


@register("stack")
def stack(call: OpCall) -> OpCost:
    parts = call.tensor_list(0, unrecorded_dtype=dt.ASSUMED_LIST_DTYPE)
    if len({t.shape for t in parts}) > 1:
        raise Unmodelled(f"{call.name}: stacked tensors differ in shape")
    out_dtype = _concat_dtype(parts)
    return io_cost(0, parts, [written((sum(t.numel for t in parts),), out_dtype)], out_dtype)


@register("fill_", "zero_", "normal_", "uniform_", "bernoulli_", "random_", "exponential_")
def fill(call: OpCall) -> OpCost:
    # fill_(self, value) and friends write self once (a 0-dim value tensor is a kernel arg).
    # NB: random fills count no flops for the Philox generator.
    x = call.tensor(0)
    return io_cost(0, [], [x], x.dtype)


def _created(shape: tuple, dtype: str) -> OpCost:
    return io_cost(0, [], [written(shape, dtype)], dtype)


@register("zeros", "ones", "rand", "randn")
def zeros(call: OpCall) -> OpCost:
    # zeros(size, dtype, layout, device, pin_memory), rand and randn alike. NB: dtype None
    # means the default dtype at profile time, assumed float32; random bits are not counted.
    return _created(call.ints_at(0), call.dtype_code_at(1) or "float32")


@register("new_zeros", "new_ones")
def new_zeros(call: OpCall) -> OpCost:
    # new_zeros(self, size, dtype, layout, device, pin_memory): self is not read; without a
    # dtype the new tensor takes self's.
    return _created(call.ints_at(1), call.dtype_code_at(2) or call.tensor(0).dtype)


@register("new_full")
def new_full(call: OpCall) -> OpCost:
    # new_full(self, size, fill_value, dtype, ...)
    return _created(call.ints_at(1), call.dtype_code_at(3) or call.tensor(0).dtype)


def triangle_count(rows: int, cols: int, offset: int, upper: bool) -> int:
    """Entries (i, j) of a rows x cols grid with j - i >= offset (upper) or <= offset (lower).

    Row i holds cols - clamp(i + offset, 0, cols) upper entries and clamp(i + offset + 1, 0, cols)
    lower ones: triu_indices(3, 3, 1) -> 2 + 1 + 0 = 3.
    """
    if upper:
        return sum(cols - min(max(i + offset, 0), cols) for i in range(rows))
    return sum(min(max(i + offset + 1, 0), cols) for i in range(rows))


MAX_TRIANGLE_ROWS = 10**8


@register("triu_indices", "tril_indices")
def triangle_indices(call: OpCall) -> OpCost:
    # triu_indices(row, col, offset, dtype, layout, device, pin_memory): a [2, n] index tensor.
    # NB: the count loops over the rows (a Python loop: fine up to millions of rows; a trace
    # claiming more is not a real call: no device holds its 2 x rows x cols indices).
    rows, cols, offset = (call.int_at(i) for i in range(3))
    if rows > MAX_TRIANGLE_ROWS:
        raise Unmodelled(f"{call.name}: {rows} rows is past any real call")
    count = triangle_count(rows, cols, offset, upper=call.name.endswith("triu_indices"))
    return _created((2, count), call.dtype_code_at(3) or "int64")


@register("full")
def full(call: OpCall) -> OpCost:
    # full(size, fill_value, dtype, ...): without a dtype, the fill value's kind decides.
    inferred = {0: "bool", 1: "int64", 2: "float32", 3: "complex64"}[call.scalar_category(1)]
    return _created(call.ints_at(0), call.dtype_code_at(2) or inferred)


def arange_length(start: float, end: float, step: float) -> int:
    """torch.arange's element count: ceil((end - start) / step)."""
    if step == 0:
        raise Unmodelled("arange with step 0")
    length = (end - start) / step
    if not math.isfinite(length):
        raise Unmodelled(f"arange({start}, {end}, {step}) has no finite length")
    return max(math.ceil(length), 0)


@register("arange")
def arange(call: OpCall) -> OpCost:
    # arange(end, dtype, layout, device, pin_memory) | arange.start(start, end, dtype, ...)
    # | arange.start_step(start, end, step, dtype, ...) | arange.start_out(start, end, step,
    # out): 5, 6, 7 or 4 arguments. Without a dtype, integer bounds give int64 and any float
    # bound the default float32; out= gives its own.
    bounds = {4: 3, 5: 1, 6: 2, 7: 3}.get(call.arg_count())
    if bounds is None:
        raise Unmodelled(f"{call.name}: unknown overload with {call.arg_count()} arguments")
    values = [call.float_at(i) for i in range(bounds)]
    start, end, step = [0.0, *values, 1.0][:3] if bounds == 1 else [*values, 1.0][:3]
    if call.arg_count() == 4:
        dtype = call.tensor(3).dtype
    else:
        inferred = "int64" if all(call.scalar_category(i) < 2 for i in range(bounds)) \
            else "float32"
        dtype = call.dtype_code_at(bounds) or inferred
    return _created((arange_length(start, end, step),), dtype)


@register("zeros_like", "ones_like", "rand_like", "randn_like")
def zeros_like(call: OpCall) -> OpCost:
    # zeros_like(self, dtype, layout, device, pin_memory, memory_format): self is not read.
    x = call.tensor(0)
    return _created(x.shape, call.dtype_code_at(1) or x.dtype)


@register("full_like")
def full_like(call: OpCall) -> OpCost:
    x = call.tensor(0)
    return _created(x.shape, call.dtype_code_at(2) or x.dtype)


def padded_shape(shape: tuple, pad: tuple[int, ...]) -> tuple[int, ...]:
    """F.pad's output: pad pairs (before, after) apply from the last dim backwards;
    negative pads crop."""
    if len(pad) % 2 or len(pad) // 2 > len(shape):
        raise Unmodelled(f"pad {pad} does not fit {shape}")
    out = list(shape)
    for i in range(len(pad) // 2):
        out[-1 - i] += pad[2 * i] + pad[2 * i + 1]
    return tuple(out)


@register("constant_pad_nd", "pad", "_pad_enum", "_pad_circular", "reflection_pad1d",
          "reflection_pad2d", "reflection_pad3d", "replication_pad1d", "replication_pad2d",
          "replication_pad3d")
def pad(call: OpCall) -> OpCost:
    # constant_pad_nd(self, pad, value) | pad(self, pad, mode, value) | reflection_pad2d(self,
    # padding) | ...: every mode reads the input once and writes the padded output once
    # (reflect/replicate/circular read border elements again, from cache), so the mode -
    # a string the profiler does not record - does not change the cost.
    x = call.tensor(0)
    return copy_cost(x, padded_shape(x.shape, call.ints_at(1)), x.dtype)


def repeated_cost(x: Tensor, reps: tuple[int, ...]) -> OpCost:
    """x copied `reps` times along each dim; leading dims are added when reps is longer."""
    padded = (1,) * (len(reps) - len(x.shape)) + x.shape
    return copy_cost(x, tuple(s * r for s, r in zip(padded, reps)), x.dtype)


@register("repeat")
def repeat(call: OpCall) -> OpCost:
    # repeat(self, repeats)
    x = call.tensor(0)
    reps = call.ints_at(1)
    if len(reps) < len(x.shape):
        raise Unmodelled(f"{call.name}: fewer repeats than dims")
    return repeated_cost(x, reps)


@register("flip", "roll", "tril", "triu")
def same_shape_copy(call: OpCall) -> OpCost:
    x = call.tensor(0)
    return copy_cost(x, x.shape, x.dtype)


@register("one_hot")
def one_hot(call: OpCall) -> OpCost:
    # one_hot(self, num_classes): an int64 [..., num_classes] output written once.
    x, classes = call.tensor(0), call.int_at(1, -1)
    if classes < 0:
        raise Unmodelled(f"{call.name}: num_classes inferred from the data")
    return io_cost(0, [x], [written(x.shape + (classes,), "int64")], x.dtype)


@register("linspace", "logspace")
def linspace(call: OpCall) -> OpCost:
    # linspace(start, end, steps, dtype, ...): steps elements written (logspace: one pow each).
    steps = call.int_at(2)
    flops = steps if call.name == "aten::logspace" else 0
    dtype = call.dtype_code_at(4 if call.name == "aten::logspace" else 3) or "float32"
    return io_cost(flops, [], [written((steps,), dtype)], dtype)


@register("randint")
def randint(call: OpCall) -> OpCost:
    # randint(high, size, ...) | randint.low(low, high, size, ...): int64 unless a dtype is given.
    # NB: the size is the first list-valued argument; random bits are not counted.
    for i in (1, 2):
        if i < len(call.dtypes) and call.dtypes[i] == "ScalarList":
            dtype = call.dtype_code_at(i + 1) or "int64"
            return io_cost(0, [], [written(call.ints_at(i), dtype)], dtype)
    raise Unmodelled(f"{call.name}: no size recorded")


@register("is_nonzero", "item", "_local_scalar_dense")
def read_one(call: OpCall) -> OpCost:
    # One element read back to the host (a device sync on CUDA).
    x = call.tensor(0)
    return io_cost(0, [Tensor((), x.dtype)], [], x.dtype)


@register("scalar_tensor")
def scalar_tensor(call: OpCall) -> OpCost:
    # scalar_tensor(s, dtype, ...): one element written.
    dtype = call.dtype_code_at(1) or "float32"
    return io_cost(0, [], [written((), dtype)], dtype)


# ------------------------------------------------------------
# DistributedDataParallel's reducer: the gradient copies around each bucket's all-reduce.
#
# The reducer records them as record_functions with the parameter's gradient as the only input
# (torch/csrc/distributed/c10d/reducer.cpp); their device time is the user's DDP overhead,
# separate from the collective itself (which is costed on the interconnect roof, comms.csv).

# NB: these are the reducer's names in torch 2.x; a renamed record_function is unmodelled.
COPY_BUCKET_TO_GRAD = "torch.distributed.ddp.reducer::copy_bucket_to_grad"
MUL_OUT = "torch::distributed::reducer::mul_out"
DDP_RECORD_FUNCTIONS = (COPY_BUCKET_TO_GRAD, MUL_OUT)  # trace names, not operators in torch.ops


@register(COPY_BUCKET_TO_GRAD)
def copy_bucket_to_grad(call: OpCall) -> OpCost:
    # grad.copy_(bucket_view) after the all-reduce: the bucket slice read, the gradient written.
    grad = call.tensor(0)
    return io_cost(0, [grad], [written(grad.shape, grad.dtype)], grad.dtype)


@register(MUL_OUT)
def mul_out(call: OpCall) -> OpCost:
    # at::mul_out(bucket_view, grad, 1/world_size) before the all-reduce: one multiply per
    # element, the gradient read, its bucket slice written.
    grad = call.tensor(0)
    return io_cost(grad.numel, [grad], [written(grad.shape, grad.dtype)], grad.dtype)
