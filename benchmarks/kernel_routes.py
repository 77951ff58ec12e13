"""The registry's routes (reference_kernels/data/routes.csv) from benchmarks/data/kernels.csv,
and the sweep as shipped: each bundled kernel's cells where it routes to eager timed as eager.

A bundled kernel routes a (op, rows, cols, dtype, pass) cell to eager when it lost to eager
there, was wrong or was refused. Both sides are compared by their time per call: the longer of
the GPU time (do_bench's median, L2 flushed) and the host time of a call (host_us_per_call).
do_bench's flush gives the host tens of microseconds to launch each call, so on its own it
hides a Python launcher's cost; inside a host-bound model nothing hides it (H200: the bundled
gelu won the sweep's mid sizes on GPU time, and made a ViT 0.68x as fast). `as_shipped(df)` replaces such a kernel's row by eager's time
(what try-kernel runs in its place); `as_shipped(df, leave_one_out=True)` decides each cell
by the nearest *other* measured shape of the same kernel, dtype and pass, as a call at an
unmeasured shape is decided (reference_kernels/routes.py), so the figure says how well the
routes generalise rather than how well they fit. Pure functions of DataFrames.
"""
from __future__ import annotations

import math

import pandas as pd

from reference_kernels.routes import FIELDS, Point, nearest

BACKENDS = {"ours_triton": "triton", "ours_cuda": "cuda"}
CELL = ["op", "rows", "cols", "dtype", "pass"]


def _ok_ms(df: pd.DataFrame) -> pd.Series:
    ms = pd.to_numeric(df["ms"], errors="coerce")
    return ms.where((df["status"] == "ok") & (ms > 0))


def _call_ms(df: pd.DataFrame) -> pd.Series:
    """Time per call: the longer of the GPU time and the host time (NaN when not ok)."""
    host_ms = pd.to_numeric(df["host_us_per_call"], errors="coerce").fillna(0.0) / 1e3
    return _ok_ms(df).combine(host_ms, lambda ms, host: ms if math.isnan(ms) else max(ms, host))


def routes_table(df: pd.DataFrame) -> pd.DataFrame:
    """One row per bundled kernel and measured cell of one GPU: route kernel | eager."""
    eager = _by_cell(df[df["provider"] == "eager"], _call_ms)
    bundled = df[df["provider"].isin(list(BACKENDS))]
    bundled = bundled.assign(ok_ms=_call_ms(bundled)).rename(columns={"pass": "pass_"})
    rows = []
    for r in bundled.itertuples(index=False):
        e = eager.get((r.op, r.rows, r.cols, r.dtype, r.pass_), math.nan)
        if math.isnan(e):
            continue  # nothing correct to route to
        k = r.ok_ms
        route = "kernel" if not math.isnan(k) and k <= e else "eager"
        rows.append({"kernel": f"{BACKENDS[r.provider]}.{r.op}", "dtype": r.dtype,
                     "pass": r.pass_, "rows": int(r.rows), "cols": int(r.cols),
                     "route": route, "kernel_ms": k, "eager_ms": e, "gpu": r.gpu,
                     "commit": r.commit})
    out = pd.DataFrame(rows, columns=list(FIELDS))
    return out.sort_values(["kernel", "dtype", "pass", "rows", "cols"], ignore_index=True)


def as_shipped(df: pd.DataFrame, leave_one_out: bool = False) -> pd.DataFrame:
    """`df` with every bundled row its routes send to eager replaced by eager's time."""
    table = routes_table(df)
    eager_at = _by_cell(df[df["provider"] == "eager"])
    out = df.copy()
    for (kernel, dtype, pass_), pts in table.groupby(["kernel", "dtype", "pass"]):
        points = [_point(p) for p in pts.itertuples(index=False)]
        provider = next(p for p, b in BACKENDS.items() if kernel.startswith(b + "."))
        op = kernel.split(".", 1)[1]
        for i, p in enumerate(points):
            others = tuple(points[:i] + points[i + 1:]) if leave_one_out else (p,)
            if not others or nearest(others, p.rows, p.cols).route != "eager":
                continue
            mask = ((out["provider"] == provider) & (out["op"] == op) & (out["rows"] == p.rows)
                    & (out["cols"] == p.cols) & (out["dtype"] == dtype) & (out["pass"] == pass_))
            eager = eager_at[(op, p.rows, p.cols, dtype, pass_)]
            out.loc[mask, ["ms", "status", "reason"]] = [eager, "ok", "routed to eager"]
    return out


def _by_cell(df: pd.DataFrame, time_of=_ok_ms) -> dict:
    ms = time_of(df)
    return {tuple(k): v for k, v in zip(df[CELL].itertuples(index=False, name=None), ms)}


def _point(r) -> Point:
    return Point(int(r.rows), int(r.cols), r.route, float(r.kernel_ms), float(r.eager_ms),
                 str(r.gpu), str(r.commit))
