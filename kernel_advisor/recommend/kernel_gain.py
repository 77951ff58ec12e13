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

import functools
import math
from dataclasses import dataclass
from pathlib import Path
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


# ------------------------------------------------------------
# A library-backend switch's saving, read off a measured backend table.
#
# Which fused attention kernel is faster (cuDNN's or FlashAttention-2) depends on the GPU, the head
# size, the sequence length and the mask; the op's headroom under its roof says nothing about it.
# So `sdpa_cudnn` / `sdpa_flash` predict from kernel_advisor/data/sdpa_backends.csv
# (benchmarks/bench_sdpa_backends.py measures it): the target backend's time over the backend the
# op ran, at the nearest measured cell of the same GPU, dtype and pass.

TABLE = Path(__file__).resolve().parents[1] / "data" / "sdpa_backends.csv"
BACKENDS = ("cudnn", "flash", "efficient")


@dataclass(frozen=True)
class AttentionShape:
    seq: int
    head_dim: int


@dataclass(frozen=True)
class BackendRatio:
    ratio: float  # target backend's time / current backend's time (below 1: the switch saves)
    seq: int  # the measured cell it was read at
    head_dim: int
    masks: int  # cells averaged over (causal and not: the profile does not say which ran)


def attention_shape(input_shapes: Any) -> AttentionShape | None:
    """(sequence, head size) of an attention row: its first 4-D operand is the query, or in a
    backward op the output gradient, both (batch, heads, seq, head_dim)."""
    # NB: the key's length is taken as the query's (self-attention): the table is measured so.
    for shape in decoded(input_shapes):
        if isinstance(shape, list) and len(shape) == 4 and all(isinstance(n, int) and n > 0 for n in shape):
            return AttentionShape(seq=shape[2], head_dim=shape[3])
    return None


@functools.lru_cache(maxsize=4)
def read_backend_table(path: Path = TABLE) -> pd.DataFrame:
    if not path.is_file():
        return pd.DataFrame(columns=["gpu", "dtype", "pass", "seq", "head_dim", "causal", "backend", "ms", "status"])
    table = pd.read_csv(path)
    return table[(table["status"] == "ok") & table["ms"].notna()]


def backend_ratio(table: pd.DataFrame, gpu: str, dtype: str, pass_: str, shape: AttentionShape,
                  current: str, target: str) -> BackendRatio | None:
    """The target's time over the current backend's at the nearest cell both measured: the same
    head size where measured, else the nearest; the sequence nearest in log2; the geometric mean
    over the masks. None where this GPU, dtype and pass have no such cell."""
    g = table[(table["gpu"] == gpu) & (table["dtype"] == dtype) & (table["pass"] == pass_)]
    wide = g.pivot_table(index=["seq", "head_dim", "causal"], columns="backend", values="ms")
    if current not in wide or target not in wide:
        return None
    both = wide[[current, target]].dropna()
    if both.empty:
        return None
    cells = both.reset_index()
    d = min(set(cells["head_dim"]), key=lambda h: (abs(h - shape.head_dim), h))
    at_d = cells[cells["head_dim"] == d]
    s = min(set(at_d["seq"]), key=lambda n: (abs(math.log2(n) - math.log2(shape.seq)), n))
    at = at_d[at_d["seq"] == s]
    ratios = (at[target] / at[current]).tolist()
    return BackendRatio(float(math.prod(ratios) ** (1 / len(ratios))), int(s), int(d), len(ratios))


def describe(r: BackendRatio, current: str, target: str, gpu: str, dtype: str, pass_: str) -> str:
    return (f"{target} measured at {r.ratio:.2f}× {current}'s time on {gpu} ({dtype} {pass_}, seq {r.seq}, "
            f"head size {r.head_dim}{', mean of both masks' if r.masks > 1 else ''}; kernel_advisor/data/"
            "sdpa_backends.csv)")
