"""The registry's routes (reference_kernels/data/routes.csv) from benchmarks/data/kernels.csv,
and the sweep as shipped: each bundled kernel's cells where it routes to eager timed as eager.

routes.csv keeps, per bundled kernel and measured cell, both sides' GPU time (`ms`) and host
time per call (`host_us_per_call`); reference_kernels/routes.py decides from them, by the
step's regime: GPU time in a device-bound step, the longer of the two in a host-bound one.
do_bench's L2 flush gives the host tens of microseconds to launch each call, so the sweep's
GPU times alone hide a Python launcher's cost that a host-bound model pays.

`as_shipped(df, regime)` replaces a kernel's row by eager's time where its routes send the cell
to eager (what try-kernel runs in its place); with `leave_one_out=True` each cell is decided by
the nearest *other* measured shape of the same kernel, dtype and pass, as a call at an
unmeasured shape is, so the figure says how well the routes generalise rather than how well
they fit. Pure functions of DataFrames.

The routes are fit on the fit draws only (the grid and `fit-<seed>`; benchmarks/shape_draws.py):
`routes_table` refuses a frame holding any other row. `as_routed` judges a held-out draw with a
frozen routes file, as try-kernel would route its calls (KernelSpec.eager_route: the spec's own
refusals and measured losses, then the routes).
"""
from __future__ import annotations

import math

import pandas as pd

from reference_kernels.routes import FIELDS, Point, RouteTable, nearest
from shape_draws import draw_of, fit_rows

BACKENDS = {"ours_triton": "triton", "ours_cuda": "cuda"}
CELL = ["op", "rows", "cols", "dtype", "pass"]


def _ok_ms(df: pd.DataFrame) -> pd.Series:
    ms = pd.to_numeric(df["ms"], errors="coerce")
    return ms.where((df["status"] == "ok") & (ms > 0))


def _host_ms(df: pd.DataFrame) -> pd.Series:
    return pd.to_numeric(df["host_us_per_call"], errors="coerce").fillna(0.0) / 1e3


def routes_table(df: pd.DataFrame) -> pd.DataFrame:
    """One row per bundled kernel and measured cell of one GPU with a correct eager time; `df`
    must hold fit-draw rows only (shape_draws.fit_rows), else DrawError."""
    df = fit_rows(df, allow="refuse").assign(draw=lambda d: draw_of(d))
    key = CELL + ["draw"]
    eager = df[df["provider"] == "eager"]
    eager_at = dict(zip(eager[key].itertuples(index=False, name=None), zip(_ok_ms(eager), _host_ms(eager))))
    bundled = df[df["provider"].isin(list(BACKENDS))]
    bundled = bundled.assign(gpu_ms=_ok_ms(bundled), host_ms=_host_ms(bundled)).rename(columns={"pass": "pass_"})
    rows = []
    for r in bundled.itertuples(index=False):
        e_ms, e_host = eager_at.get((r.op, r.rows, r.cols, r.dtype, r.pass_, r.draw), (math.nan, 0.0))
        if math.isnan(e_ms):
            continue  # nothing correct to route to
        rows.append({"kernel": f"{BACKENDS[r.provider]}.{r.op}", "dtype": r.dtype, "pass": r.pass_,
                     "rows": int(r.rows), "cols": int(r.cols), "kernel_ms": r.gpu_ms,
                     "kernel_host_ms": r.host_ms, "eager_ms": e_ms, "eager_host_ms": e_host,
                     "gpu": r.gpu, "commit": r.commit, "draw": r.draw})
    out = pd.DataFrame(rows, columns=list(FIELDS))
    return out.sort_values(["kernel", "dtype", "pass", "rows", "cols", "draw"], ignore_index=True)


def as_shipped(df: pd.DataFrame, leave_one_out: bool = False, host_bound_step: bool = False) -> pd.DataFrame:
    """`df` (fit-draw rows) with every bundled row its routes (in that regime) send to eager
    timed as eager."""
    table = routes_table(df)
    draws = draw_of(df)
    eager = df[df["provider"] == "eager"]
    eager_at = dict(zip(eager[CELL].assign(draw=draws).itertuples(index=False, name=None), _ok_ms(eager)))
    out = df.copy()
    for (kernel, dtype, pass_), pts in table.groupby(["kernel", "dtype", "pass"]):
        points = [point_of(p) for p in pts.itertuples(index=False)]
        provider = next(p for p, b in BACKENDS.items() if kernel.startswith(b + "."))
        op = kernel.split(".", 1)[1]
        for i, (p, draw) in enumerate(zip(points, pts["draw"])):
            others = tuple(points[:i] + points[i + 1:]) if leave_one_out else (p,)
            if not others:
                continue
            q = nearest(others, p.rows, p.cols)  # as try-kernel decides a call of p's shape
            if not q.loses(host_bound_step, q.scale_to(p.rows, p.cols)):
                continue
            mask = ((out["provider"] == provider) & (out["op"] == op) & (out["rows"] == p.rows)
                    & (out["cols"] == p.cols) & (out["dtype"] == dtype) & (out["pass"] == pass_)
                    & (draws == draw))
            out.loc[mask, ["ms", "status", "reason"]] = [eager_at[(op, p.rows, p.cols, dtype, pass_, draw)],
                                                         "ok", "routed to eager"]
    return out


def point_of(r) -> Point:
    """The routes.Point of one routes_table row."""
    return Point(int(r.rows), int(r.cols), float(r.kernel_ms), float(r.kernel_host_ms),
                 float(r.eager_ms), float(r.eager_host_ms), str(r.gpu), str(r.commit))


def as_routed(df: pd.DataFrame, tables: dict[str, RouteTable], host_bound_step: bool = False) -> pd.DataFrame:
    """`df` (a held-out draw) with every bundled row that the frozen `tables` (read_routes of
    the routes file) and the kernel's spec send to eager timed as eager, as as_shipped does."""
    from reference_kernels.registry import get_kernel

    eager = df[df["provider"] == "eager"]
    eager_at = dict(zip(eager[CELL].itertuples(index=False, name=None), _ok_ms(eager)))
    out = df.copy()
    for r in df[df["provider"].isin(list(BACKENDS))].rename(columns={"pass": "pass_"}).itertuples():
        i = r.Index
        e_ms = eager_at.get((r.op, r.rows, r.cols, r.dtype, r.pass_), math.nan)
        spec = get_kernel(f"{BACKENDS[r.provider]}.{r.op}")
        if math.isnan(e_ms) or not spec.eager_route(int(r.rows), int(r.cols), r.dtype, r.pass_ == "fwd+bwd",
                                                    "cuda", host_bound_step, route_tables=tables):
            continue
        out.loc[i, ["ms", "status", "reason"]] = [e_ms, "ok", "routed to eager"]
    return out
