"""Where each bundled kernel was measured to lose to eager PyTorch: data/routes.csv.

benchmarks/render_kernels.py writes the file from benchmarks/data/kernels.csv: one row per
kernel, dtype, pass (fwd, fwd+bwd) and measured shape, with the kernel's and eager's GPU time
(do_bench's median, L2 flushed) and host time per call. A call goes where the measured shape
nearest to it went, distance taken in (log2 rows, log2 cols): launch cost and parallelism scale
with sizes, not with their differences. The file's points are the sweep's, so the classes are
the cells around them; calls far larger than any measured shape keep the kernel (BEYOND_SWEEP).

Which time decides depends on the model. In a host-bound step (the device busy less than
HOST_BOUND_BELOW_BUSY_FRAC of it) nothing hides a call's host time, so a call costs the longer
of its GPU and host time: a Python launcher loses mid sizes there (H200: the bundled gelu made
a ViT 0.68x as fast while winning the sweep's GPU time). There a call smaller than its nearest
point has the point's GPU times scaled down to its size (elements of the call / elements of the
point: these ops move bytes in proportion to their elements), since the host time of a call
does not shrink with it: it is more host-bound than the point was. A larger call keeps the
point's GPU times: near a host-bound size a GPU time is mostly launch latency, which does not
grow with the call (scaled up, eager's 20 us at 2048x127 bf16 layer_norm, an odd-width path,
counted 93 us for a ViT's 6304x192 call and kept a kernel that made the ViT 0.56x as fast).
A caller that substitutes the kernel into a model (try-kernel's dispatcher overrides) adds its
own host time per call to the kernel's side there. In a device-bound step the GPU queue hides
the launch and GPU time decides, unscaled (the ratio is what counts). Without a measured step
the host-bound rule holds: it never makes a model slower where the other might.

NB: float16 calls follow the bfloat16 points (same element size; the sweep measures bfloat16
and float32), and a dtype or pass without points keeps the kernel. The points were measured
on one GPU (the file's `gpu` column); other GPUs follow them too, which the reason says.

Importing this module imports neither triton nor pandas: the registry reads it on every
try-kernel call it routes, and caches the answer per (rows, cols, dtype, pass, regime).
"""
from __future__ import annotations

import csv
import math
from dataclasses import dataclass
from pathlib import Path

ROUTES_CSV = Path(__file__).resolve().parent / "data" / "routes.csv"
# draw: the sweep's draw the point was measured in (`grid`, `fit-<seed>`): the routes are fit on
# those only (benchmarks/shape_draws.py), so a held-out draw can judge them.
FIELDS = ("kernel", "dtype", "pass", "rows", "cols", "kernel_ms", "kernel_host_ms", "eager_ms",
          "eager_host_ms", "gpu", "commit", "draw")
PASSES = ("fwd", "fwd+bwd")
# A step whose device is busy less than this fraction of it is host-bound (as docs/benchmarks.md
# splits its profiling-overhead workloads).
HOST_BOUND_BELOW_BUSY_FRAC = 0.8
_DTYPE_POINTS = {"float16": "bfloat16"}  # the dtype whose points a call of this dtype follows
# NB: a call this many times larger than the largest measured shape keeps the kernel: the sweep
# stops at 64 MiB tensors, past which every kernel is bandwidth-bound and launch cost no
# longer decides (benchmarks/studies/row_shapes.py: softmax 16x4194304 bf16 175 us against
# eager's 1078 us), so the nearest point, a host-bound one, would route it wrongly.
BEYOND_SWEEP = 2


def host_bound(device_busy_frac: float | None) -> bool:
    """Whether a step with this device-busy fraction is host-bound (unknown: assume it is)."""
    return device_busy_frac is None or device_busy_frac < HOST_BOUND_BELOW_BUSY_FRAC


@dataclass(frozen=True)
class Point:
    """One measured shape of one kernel, dtype and pass."""

    rows: int
    cols: int
    kernel_ms: float  # GPU time; NaN: the kernel was wrong or refused there
    kernel_host_ms: float  # host time of one call
    eager_ms: float
    eager_host_ms: float
    gpu: str
    commit: str

    def times_ms(self, host_bound_step: bool, scale: float = 1.0,
                 extra_host_ms: float = 0.0) -> tuple[float, float]:
        """(kernel, eager) time per call in this regime (module docstring); `scale`: the
        call's elements over the point's, applied to the GPU times of a host-bound step;
        `extra_host_ms`: host time the kernel's call pays on top of the point's there (the
        dispatch that substitutes it into a model).

        NB: a GPU time scaled far down ignores the launch's floor of a few us; host time, the
        larger there, decides such calls anyway."""
        if not host_bound_step:
            return self.kernel_ms, self.eager_ms
        kernel_gpu, eager_gpu = self.kernel_ms * scale, self.eager_ms * scale
        kernel_host = self.kernel_host_ms + extra_host_ms
        kernel = kernel_gpu if math.isnan(kernel_gpu) else max(kernel_gpu, kernel_host)
        return kernel, max(eager_gpu, self.eager_host_ms)

    def loses(self, host_bound_step: bool, scale: float = 1.0, extra_host_ms: float = 0.0) -> bool:
        """Eager is as fast or faster (a tie goes to eager: nothing to gain, a launch to pay)."""
        kernel, eager = self.times_ms(host_bound_step, scale, extra_host_ms)
        return math.isnan(kernel) or kernel >= eager

    def scale_to(self, rows: int, cols: int) -> float:
        """A (rows, cols) call's elements over this point's, at most 1 (module docstring)."""
        return min(1.0, rows * cols / (self.rows * self.cols))

    def reason(self, kernel_id: str, dtype: str, pass_: str, host_bound_step: bool,
               scale: float = 1.0, extra_host_ms: float = 0.0) -> str:
        kernel_ms, eager_ms = self.times_ms(host_bound_step, scale, extra_host_ms)
        what = "a call (GPU or host time, the longer)" if host_bound_step else "of GPU time"
        if host_bound_step and scale != 1.0:
            what = f"a call (host time, or GPU time scaled {scale:.3g}x to this call's size: the longer)"
        if host_bound_step and extra_host_ms > 0:
            what += f", the kernel's host time with {extra_host_ms * 1e3:.1f} us of dispatch added"
        eager = f"{eager_ms * 1e3:.1f} us"
        times = (f"the kernel was wrong or refused there, eager {eager} {what}"
                 if math.isnan(kernel_ms) else f"{kernel_ms * 1e3:.1f} us against eager's {eager} {what}")
        return (f"{kernel_id} loses at {self.rows}x{self.cols} {dtype} {pass_}, the nearest "
                f"measured shape ({times}; benchmarks/data/kernels.csv, {self.gpu}, commit "
                f"{self.commit})")


def nearest(points: tuple[Point, ...], rows: int, cols: int) -> Point:
    """The point closest to (rows, cols) in (log2 rows, log2 cols); ties go to the first."""
    lr, lc = math.log2(max(rows, 1)), math.log2(max(cols, 1))
    return min(points, key=lambda p: (math.log2(p.rows) - lr) ** 2 + (math.log2(p.cols) - lc) ** 2)


class RouteTable:
    """The points of one kernel, by (dtype, pass); `eager_reason` answers one call."""

    def __init__(self, kernel_id: str, points: dict[tuple[str, str], tuple[Point, ...]]):
        self.kernel_id, self.points = kernel_id, points
        self._answers: dict[tuple[int, int, str, bool, bool, float], str] = {}

    def eager_reason(self, rows: int, cols: int, dtype: str, grad: bool,
                     host_bound_step: bool = True, extra_host_ms: float = 0.0) -> str:
        """Why a call goes to eager ("" when the kernel keeps it); `extra_host_ms`: host time a
        call of the kernel pays beyond the measured point's in a host-bound step."""
        key = (rows, cols, dtype, grad, host_bound_step, extra_host_ms)
        answer = self._answers.get(key)
        if answer is None:
            answer = self._answers[key] = self._decide(*key)
        return answer

    def point(self, rows: int, cols: int, dtype: str, grad: bool) -> Point | None:
        """The measured point a call follows, or None: no points for its dtype and pass, or a
        call far past the sweep (BEYOND_SWEEP), where the kernel keeps it."""
        points = self.points.get((_DTYPE_POINTS.get(dtype, dtype), "fwd+bwd" if grad else "fwd"))
        if not points or rows < 1 or cols < 1:
            return None
        if rows * cols > BEYOND_SWEEP * max(p.rows * p.cols for p in points):
            return None
        return nearest(points, rows, cols)

    def eager_counts(self, host_bound_step: bool) -> dict[str, tuple[int, int]]:
        """{pass: (measured shapes routed to eager, measured shapes)} over every dtype."""
        out: dict[str, tuple[int, int]] = {}
        for (_, pass_), points in sorted(self.points.items()):
            eager, n = out.get(pass_, (0, 0))
            out[pass_] = (eager + sum(p.loses(host_bound_step) for p in points), n + len(points))
        return out

    def _decide(self, rows: int, cols: int, dtype: str, grad: bool, host_bound_step: bool,
                extra_host_ms: float) -> str:
        point = self.point(rows, cols, dtype, grad)
        if point is None:
            return ""
        scale = point.scale_to(rows, cols)
        if not point.loses(host_bound_step, scale, extra_host_ms):
            return ""
        return point.reason(self.kernel_id, _DTYPE_POINTS.get(dtype, dtype),
                            "fwd+bwd" if grad else "fwd", host_bound_step, scale, extra_host_ms)


class RoutesFileError(ValueError):
    """routes.csv is not what this version writes: regenerate it (benchmarks/render_kernels.py)."""


def read_routes(path: Path = ROUTES_CSV) -> dict[str, RouteTable]:
    """{kernel id: RouteTable}; {} when the file is absent. A malformed file raises."""
    if not path.is_file():
        return {}
    with path.open(newline="") as f:
        reader = csv.DictReader(f)
        if tuple(reader.fieldnames or ()) != FIELDS:
            raise RoutesFileError(f"{path}: columns {reader.fieldnames}, expected {list(FIELDS)}")
        rows = [_point(path, n, r) for n, r in enumerate(reader, start=2)]
    grouped: dict[str, dict[tuple[str, str], list[Point]]] = {}
    for kernel, dtype, pass_, point in rows:
        grouped.setdefault(kernel, {}).setdefault((dtype, pass_), []).append(point)
    return {k: RouteTable(k, {key: tuple(ps) for key, ps in by.items()}) for k, by in grouped.items()}


def _point(path: Path, line: int, r: dict) -> tuple[str, str, str, Point]:
    try:
        point = Point(int(r["rows"]), int(r["cols"]), float(r["kernel_ms"] or "nan"),
                      float(r["kernel_host_ms"] or "0"), float(r["eager_ms"]),
                      float(r["eager_host_ms"] or "0"), r["gpu"], r["commit"])
    except ValueError as e:
        raise RoutesFileError(f"{path}:{line}: {e}") from None
    if r["pass"] not in PASSES or point.rows < 1 or point.cols < 1 or not point.eager_ms > 0:
        raise RoutesFileError(f"{path}:{line}: pass {r['pass']!r}, shape {point.rows}x{point.cols}, "
                              f"eager_ms {point.eager_ms}")
    return r["kernel"], r["dtype"], r["pass"], point


_SHIPPED: dict[str, RouteTable] | None = None


def routes() -> dict[str, RouteTable]:
    """The shipped routes, read once.

    NB: a module global, not functools.lru_cache: try-kernel's compile + kernel variant routes
    calls inside code Dynamo traces, and Dynamo traces through an lru_cache wrapper (reading the
    file there is a graph break); a global it only reads. try-kernel loads the routes before it
    compiles anything."""
    global _SHIPPED
    if _SHIPPED is None:
        _SHIPPED = read_routes(ROUTES_CSV)
    return _SHIPPED
