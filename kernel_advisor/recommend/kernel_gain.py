"""The kernel rung's gain from the kernel's own measurements, not a target efficiency.

The side-by-side sweep (benchmarks/data/kernels.csv, shipped as reference_kernels/data/routes.csv)
timed every bundled kernel and eager PyTorch at the same shapes. An op row of the run is placed
at the nearest measured shape of its kernel, dtype and pass (reference_kernels/routes.py) and
its saving is its own device time scaled by what the kernel saved against eager there:
time × (1 − kernel_ms / eager_ms). Where the kernel lost, or the registry routes the shape to
eager anyway, the saving is zero and the basis says why. A kernel or op shape the sweep never
measured keeps the roofline model.
"""
from __future__ import annotations

import math
from typing import Any, Callable, Mapping

import pandas as pd

from kernel_advisor.recommend.evidence import decoded
from kernel_advisor.recommend.kernels import op_family
from reference_kernels.routes import routes

NORMS = {"layer_norm", "rms_norm"}


def row_shape(name: str, shapes: Any) -> tuple[int, int] | None:
    """(rows, cols) of an op call as the kernels see it: cols is the reduced length (a norm's
    normalized size, softmax's and cross-entropy's last dim), the row length of an elementwise op."""
    tensors = [s for s in decoded(shapes) if isinstance(s, list)]
    x = tensors[0] if tensors else []
    if not x or not all(isinstance(d, int) and d > 0 for d in x):
        return None
    numel = math.prod(x)
    family = op_family(name)
    cols = x[-1]
    if family in NORMS and len(tensors) > 2 and tensors[2]:
        # NB: the normalized shape is recorded as an empty list; the weight has its shape.
        # Without a weight a multi-dim normalized shape reads as its last dim.
        cols = math.prod(tensors[2])
    # NB: softmax over another dim reads as last-dim rows; try-kernel keeps such calls on eager.
    return (numel // cols, cols) if cols and numel % cols == 0 else None


def measured_saving(name: str, shapes: Any, dtype: str, train: bool, time_s: float,
                    point_of: Callable[[int, int, str, bool], Any],
                    host_bound_step: bool = True) -> tuple[float, str] | None:
    """(saving per step, why) of one op row, or None when the sweep has nothing to say.
    `host_bound_step`: a call costs the longer of its GPU and host time (routes.py)."""
    shape = row_shape(name, shapes)
    point = point_of(*shape, dtype, train) if shape else None
    if point is None:
        return None
    kernel_ms, eager_ms = point.times_ms(host_bound_step)
    what = "a call, host time counted" if host_bound_step else "of GPU time"
    where = (f"{point.rows}x{point.cols} {'fwd+bwd' if train else 'fwd'}, nearest to "
             f"{shape[0]}x{shape[1]} ({point.commit})")
    if point.loses(host_bound_step):
        kernel = "wrong or refused" if math.isnan(kernel_ms) else f"{kernel_ms * 1e3:.1f} us"
        return 0.0, f"lost to eager at {where}: {kernel} against {eager_ms * 1e3:.1f} us {what}"
    frac = 1.0 - kernel_ms / eager_ms
    return time_s * frac, (f"{frac:.0%} less than eager at {where}: {kernel_ms * 1e3:.1f} "
                           f"against {eager_ms * 1e3:.1f} us {what}")


def kernel_point_lookup(kernel_id: str) -> Callable[[int, int, str, bool], Any] | None:
    """(rows, cols, dtype, train) -> the nearest measured Point of the kernel, or None."""
    table = routes().get(kernel_id)
    return table.point if table is not None else None


def row_record(ops: pd.DataFrame, row_id: int) -> Mapping[str, Any] | None:
    """One op row as a dict (a vectorised match: no per-subject copy of the whole table)."""
    if "row_id" not in ops:
        return None
    match = ops[ops["row_id"] == row_id]
    return match.iloc[0].to_dict() if len(match) else None
