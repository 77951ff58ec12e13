"""Convolutions 1-3d, transposed and grouped, forward and backward.

FLOPs come from torch.utils.flop_counter.conv_flop_count (2 * output points * filter size *
C_in/groups per output channel), the FlopCounterMode convention.
NB: bias adds (one per output element) are not counted, as in FlopCounterMode.
NB: bytes count input, weight, bias and output once; implicit-GEMM kernels re-read the input
window per filter tap through L1/L2 and may use workspaces (im2col, split-K): ignored.
"""
from __future__ import annotations

from dataclasses import dataclass

from torch.utils import flop_counter

from kernel_advisor.analyze.costs.call import OpCall, Tensor
from kernel_advisor.analyze.costs.registry import OpCost, io_cost, register, written
from kernel_advisor.analyze.costs.shapes import Unmodelled, conv_out_size, conv_transpose_out_size, expand_param


@dataclass(frozen=True)
class ConvArgs:
    x: Tensor  # always batched here: an unbatched input gets a leading 1
    w: Tensor
    bias: Tensor | None
    stride: tuple[int, ...]
    padding: tuple[int, ...]
    dilation: tuple[int, ...]
    transposed: bool
    output_padding: tuple[int, ...]
    groups: int

    def out_shape(self) -> tuple[int, ...]:
        kernel = self.w.shape[2:]
        spatial = []
        for i, size in enumerate(self.x.shape[2:]):
            if self.transposed:
                spatial.append(conv_transpose_out_size(size, kernel[i], self.stride[i],
                                                       self.padding[i], self.dilation[i],
                                                       self.output_padding[i]))
            else:
                spatial.append(conv_out_size(size, kernel[i], self.stride[i], self.padding[i],
                                             self.dilation[i]))
        if min(spatial, default=1) <= 0:
            raise Unmodelled(f"convolution output would be empty: {spatial}")
        channels = self.w.shape[1] * self.groups if self.transposed else self.w.shape[0]
        return (self.x.shape[0], channels, *spatial)

    def flops(self, out_shape: tuple[int, ...]) -> int:
        return flop_counter.conv_flop_count(list(self.x.shape), list(self.w.shape),
                                            list(out_shape), self.transposed)


# Argument positions per op: x, w, bias, stride, padding, dilation, transposed, output_padding,
# groups (None: absent from the schema, default used). Schemas from native_functions.yaml.
_LAYOUTS = {
    "conv1d": (0, 1, 2, 3, 4, 5, False, None, 6),
    "conv2d": (0, 1, 2, 3, 4, 5, False, None, 6),
    "conv3d": (0, 1, 2, 3, 4, 5, False, None, 6),
    "conv_transpose1d": (0, 1, 2, 3, 4, 7, True, 5, 6),
    "conv_transpose2d": (0, 1, 2, 3, 4, 7, True, 5, 6),
    "conv_transpose3d": (0, 1, 2, 3, 4, 7, True, 5, 6),
    "convolution": (0, 1, 2, 3, 4, 5, 6, 7, 8),
    "_convolution": (0, 1, 2, 3, 4, 5, 6, 7, 8),
    "convolution_overrideable": (0, 1, 2, 3, 4, 5, 6, 7, 8),
    "cudnn_convolution": (0, 1, None, 3, 2, 4, False, None, 5),
    "cudnn_convolution_transpose": (0, 1, None, 4, 2, 5, True, 3, 6),
    "miopen_convolution": (0, 1, 2, 4, 3, 5, False, None, 6),
    "mkldnn_convolution": (0, 1, 2, 4, 3, 5, False, None, 6),
    "_slow_conv2d_forward": (0, 1, 3, 4, 5, None, False, None, None),
    "thnn_conv2d": (0, 1, 3, 4, 5, None, False, None, None),
    "slow_conv_transpose2d": (0, 1, 3, 4, 5, 7, True, 6, None),
    "slow_conv_transpose3d": (0, 1, 3, 4, 5, 7, True, 6, None),
    "_nnpack_spatial_convolution": (0, 1, 2, 4, 3, None, False, None, None),
}


def _param(call: OpCall, pos: int | None, spatial: int, default: int, name: str):
    if pos is None:  # not in this op's schema: ATen uses the default
        return (default,) * spatial
    # No default otherwise: the profiler records every argument, so a missing value means
    # the trace lacks concrete inputs and the output shape is unknown.
    return expand_param(call.ints_at(pos), spatial, name)


def conv_args(call: OpCall, layout: tuple) -> ConvArgs:
    x_pos, w_pos, b_pos, s_pos, p_pos, d_pos, t_pos, op_pos, g_pos = layout
    x, w = call.tensor(x_pos), call.tensor(w_pos)
    spatial = len(w.shape) - 2
    if spatial < 1 or len(x.shape) not in (spatial + 1, spatial + 2):
        raise Unmodelled(f"{call.name}: input {x.shape} does not fit weight {w.shape}")
    if len(x.shape) == spatial + 1:
        x = Tensor((1, *x.shape), x.dtype)
    # conv*d with padding="same"/"valid" records the string as "" - the padding is unknown.
    if p_pos is not None and p_pos < call.arg_count() and call.dtypes[p_pos] == "":
        raise Unmodelled(f"{call.name}: string padding is not recorded by the profiler")
    transposed = t_pos if isinstance(t_pos, bool) else call.bool_at(t_pos)
    args = ConvArgs(
        x=x, w=w, bias=call.optional_tensor(b_pos) if b_pos is not None else None,
        stride=_param(call, s_pos, spatial, 1, "stride"),
        padding=_param(call, p_pos, spatial, 0, "padding"),
        dilation=_param(call, d_pos, spatial, 1, "dilation"),
        transposed=transposed,
        output_padding=_param(call, op_pos, spatial, 0, "output_padding"),
        groups=call.int_at(g_pos, 1) if g_pos is not None else 1,
    )
    _check(call, args)
    return args


def _check(call: OpCall, a: ConvArgs) -> None:
    if min(a.stride) <= 0 or min(a.dilation) <= 0 or a.groups <= 0:
        raise Unmodelled(f"{call.name}: non-positive stride, dilation or groups")
    in_channels = a.w.shape[0] if a.transposed else a.w.shape[1] * a.groups
    if a.x.shape[1] != in_channels:
        raise Unmodelled(f"{call.name}: {a.x.shape[1]} input channels, weight wants "
                         f"{in_channels}")


def _forward(call: OpCall) -> OpCost:
    args = conv_args(call, _LAYOUTS[call.name.removeprefix("aten::")])
    out = args.out_shape()
    return io_cost(args.flops(out), [args.x, args.w, args.bias], [written(out, args.x.dtype)],
                   args.x.dtype, tensor_cores=True)


register(*_LAYOUTS)(_forward)


def _transpose01(shape: tuple[int, ...]) -> list[int]:
    return [shape[1], shape[0], *shape[2:]]


@register("convolution_backward")
def convolution_backward(call: OpCall) -> OpCost:
    # convolution_backward(grad_output, input, weight, bias_sizes, stride, padding, dilation,
    #                      transposed, output_padding, groups, output_mask)
    # FLOPs as torch.utils.flop_counter.conv_backward_flop: grad_input is a transposed conv of
    # grad_output with the weight, grad_weight a conv of input with grad_output.
    go = call.tensor(0)
    args = conv_args(call, (1, 2, None, 4, 5, 6, 7, 8, 9))
    mask = call.bools_at(10, (True, True, True))
    x, w = args.x, args.w
    if go.shape != args.out_shape():
        raise Unmodelled(f"{call.name}: grad_output {go.shape} != output {args.out_shape()}")
    flops = 0
    if mask[0]:
        flops += flop_counter.conv_flop_count(list(go.shape), list(w.shape), list(x.shape),
                                              not args.transposed)
    if mask[1]:
        pair = (go.shape, x.shape) if args.transposed else (x.shape, go.shape)
        flops += flop_counter.conv_flop_count(_transpose01(pair[0]), _transpose01(pair[1]),
                                              _transpose01(w.shape), False)
    bias_sizes = call.ints_at(3, None)
    grad_bias = written(bias_sizes, go.dtype) if mask[2] and bias_sizes else None
    reads = [go, w if mask[0] else None, x if mask[1] else None]
    writes = [x if mask[0] else None, w if mask[1] else None, grad_bias]
    return io_cost(flops, reads, writes, go.dtype, tensor_cores=True)
