"""A library-backend switch's saving, read off a measured backend table.

Which fused attention kernel is faster (cuDNN's or FlashAttention-2) depends on the GPU, the head
size, the sequence length and the mask; the op's headroom under its roof says nothing about it.
So `sdpa_cudnn` / `sdpa_flash` predict from kernel_advisor/data/sdpa_backends.csv
(benchmarks/bench_sdpa_backends.py measures it): the target backend's time over the backend the
op ran, at the nearest measured cell of the same GPU, dtype and pass.
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from kernel_advisor.recommend.evidence import decoded

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
