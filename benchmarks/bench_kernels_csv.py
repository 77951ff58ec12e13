"""Bundled kernels side by side with eager, torch.compile and Liger, kept as data.

One long table, benchmarks/data/kernels.csv: one row per (op, rows, cols, dtype, pass,
provider, gpu), upserted by that key (a rerun replaces its rows and keeps every other one, as
Liger-Kernel's own benchmark CSV does). docs/benchmarks.md's kernel tables and the
target figure are generated from it by benchmarks/render_kernels.py.

The sweep is declared, not hand-looped: SHAPE_CLASSES (few-rows, wide-rows, mid, large; rows
1..65536 x cols 127..393216, at most 64 MiB per float32 tensor) x DTYPES x PASSES (fwd,
fwd+bwd) x the memory-bound ops of reference_kernels/registry.py (an op is the kernel id after
its backend prefix; OPS below says how to feed and count each). Providers: ours_triton and
ours_cuda (the registry's triton.<op> / cuda.<op>; fwd+bwd only where the spec has a
backward), eager (the spec's PyTorch reference), compile (torch.compile of that reference,
default settings: static for the first shape, then automatic dynamic shapes, as users get it;
one compiled function per (op, pass, dtype), shapes in declared order) and liger (only if
`import liger_kernel` works; the run says once when it does not).

Every candidate is checked against a float64 reference of the same inputs before it is timed
(the pass rule of reference_kernels/verify.py, computed on the device; torch.empty* poisoned
with NaN while the candidate runs). One that is wrong or raises gets a row with status
`wrong` / `refused`, the reason, and no time: it is never reported as fast.
Timing: triton.testing.do_bench, L2 flushed before every rep, median (`ms`); the correct
candidates of a cell take turns over ROUNDS rounds (the order rotated each round) and each
keeps its median round, so a slow stretch of the host is shared rather than charged to one.
frac_of_copy_bw = min_bytes / median time / the device-to-device copy bandwidth measured in
this process (bench_kernels.copy_bandwidth, 16384x8192 float32). min_bytes is the least
traffic any implementation needs (fwd+bwd of cross-entropy: logits read once, gradient
written once, as a fused forward does). host_us_per_call: wall time of 20 back-to-back calls
on the host, no synchronisation inside (the launch cost; a call that synchronises shows its
GPU time there too), median over the rounds.

    python benchmarks/bench_kernels_csv.py [--quick] [--ops norms|rowwise|pointwise|OP ...]
        [--shape-classes few-rows wide-rows mid large] [--dtypes bfloat16 float32]
        [--passes fwd fwd+bwd] [--csv benchmarks/data/kernels.csv] [--budget-s 480]
    python benchmarks/bench_kernels_csv.py --plan [--quick] [--ops ...]   (no GPU: cells, estimate)
    python benchmarks/bench_kernels_csv.py --merge PART.csv ... [--csv benchmarks/data/kernels.csv]

The full sweep is ~3 device calls of < 8 min each (`--plan` prints the estimate):
`--ops norms`, `--ops rowwise`, `--ops pointwise`; each unit (op, pass, dtype) is upserted as
soon as it is measured, and with --budget-s the run starts no unit past the budget and prints
the command that measures what is left. `--quick`: softmax, rms_norm, swiglu, cross_entropy,
bfloat16, one shape per class, both passes (~3 min).

Liger-Kernel (optional; `pip install 'kernel_advisor[bench]'`). The GPU machine has no
internet: download the wheel where there is one and install it there without dependencies
(it needs only torch and triton, which are installed):
    pip download liger-kernel --no-deps -d .wheels            # here (.wheels/ is git-ignored)
    pip install --no-deps --target /tmp/liger .wheels/liger_kernel-*.whl   # on the GPU machine
    PYTHONPATH=/tmp/liger:$PWD python benchmarks/bench_kernels_csv.py ...
(benchmarks/gpu_pass.sh's kernels_csv step does this when .wheels/ holds the wheel.)
A copy of the tree without .git: ADVISOR_COMMIT=<short hash> stamps the commit measured.
`--providers P ...` measures only those. torch.compile always runs in a process of its own,
after the others (a run started with every provider starts it itself): once Dynamo has run in a
process, every Python-level call there costs more host time, which would charge compile's cost
to the Python launchers of the bundled kernels and Liger (main's NB has the figures).
One device call per op group, its CSV under $OUT, merged here afterwards:
    ADVISOR_COMMIT=<hash> PYTHONPATH=/tmp/liger:$PWD python benchmarks/bench_kernels_csv.py \
        --ops norms --csv $OUT/kernels.csv
    python benchmarks/bench_kernels_csv.py --merge FETCHED/kernels.csv   # into the default CSV
    python benchmarks/render_kernels.py                                  # docs + the target figure
"""
from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import math
import os
import shlex
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable

import pandas as pd
import torch

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
DEFAULT_CSV = REPO / "benchmarks" / "data" / "kernels.csv"
sys.path.insert(0, str(HERE))
from docdata import upsert_rows, write_csv_atomic  # noqa: E402
import shape_draws  # noqa: E402

# ---------------------------------------------------------------- the declared sweep

ROWS_RANGE = (1, 65536)
COLS_RANGE = (127, 393216)
MAX_TENSOR_BYTES = 64 * 2**20  # per tensor, counted in float32 (bfloat16 tensors are half)
MAX_ELEMENTS = MAX_TENSOR_BYTES // 4
LARGE_ELEMENTS = MAX_ELEMENTS // 2  # 32 MiB in float32 and up: "large"
FEW_ROWS = 16  # at most this many rows: "few-rows" (launch- and parallelism-bound)
WIDE_COLS = 65536  # this many columns and up: "wide-rows" (a row no longer fits registers)


def shape_class(rows: int, cols: int) -> str:
    """The rule that names a shape's class; the declared classes below must agree with it."""
    if rows <= FEW_ROWS:
        return "few-rows"
    if cols >= WIDE_COLS:
        return "wide-rows"
    return "large" if rows * cols >= LARGE_ELEMENTS else "mid"


def grid(rows: Iterable[int], cols: Iterable[int]) -> tuple[tuple[int, int], ...]:
    """rows x cols, without the shapes over MAX_TENSOR_BYTES (the sweep's stated bound)."""
    return tuple((r, c) for r in rows for c in cols if r * c <= MAX_ELEMENTS)


@dataclass(frozen=True)
class ShapeClass:
    name: str
    shapes: tuple[tuple[int, int], ...]
    quick: tuple[tuple[int, int], ...]  # the --quick subset


SHAPE_CLASSES: tuple[ShapeClass, ...] = (
    # Decode-like batches and single rows, from tiny to a 256K vocabulary.
    ShapeClass("few-rows", grid((1, 16), (127, 4096, 32768, 262144)), ((16, 32768),)),
    # Rows too wide for one block of registers: vocabularies, long softmax rows.
    ShapeClass("wide-rows", grid((32, 128), (65536, 131072, 393216)), ((128, 131072),)),
    # Mid sizes, odd widths included.
    ShapeClass("mid", grid((256, 2048), (127, 1024, 4095)), ((2048, 1024),)),
    # 64 MiB float32 tensors: the bandwidth-bound regime, from narrow to wide rows.
    ShapeClass("large", ((65536, 256), (16384, 1024), (4096, 4096), (2048, 8192)),
               ((16384, 1024),)),
)
CLASS_NAMES = tuple(c.name for c in SHAPE_CLASSES)
DTYPES = ("bfloat16", "float32")
PASSES = ("fwd", "fwd+bwd")
PROVIDERS = ("ours_triton", "ours_cuda", "eager", "compile", "liger")
BUNDLED = ("ours_triton", "ours_cuda")
OTHERS = ("eager", "compile", "liger")
QUICK_OPS = ("softmax", "rms_norm", "swiglu", "cross_entropy")
QUICK_DTYPES = ("bfloat16",)
# Named op groups: the full sweep in three device calls of < 8 min each.
OP_GROUPS = {
    "norms": ("layer_norm", "rms_norm", "add_layer_norm", "add_rms_norm"),
    "rowwise": ("softmax", "log_softmax", "cross_entropy"),
    "pointwise": ("gelu", "silu", "swiglu", "bias_gelu", "bias_silu"),
}
# do_bench per timed candidate (ms). Sized so each op group fits a device call: see --plan.
WARMUP_MS, REP_MS = 3, 15
QUICK_WARMUP_MS, QUICK_REP_MS = 2, 10
HOST_CALLS = 20
# Each provider is timed in this many rounds, the providers taking turns (rotated each round),
# and keeps its median round: the host's speed drifts by tens of percent over seconds, which
# back-to-back timing charged to whichever provider ran in a slow stretch.
ROUNDS = 5
DEFAULT_BUDGET_S = 480.0  # no new unit after 8 min; one unit takes well under 2 min


# ---------------------------------------------------------------- ops: inputs and traffic

def _n(r: int, c: int) -> int:
    return r * c


def _norm_bytes(streams_fwd: int, streams_bwd: int, n_params: int, n_stats: int):
    """(fwd, fwd+bwd) minimum bytes of a norm: row streams, per-column params, fp32 stats."""
    def fwd(r, c, e):
        return streams_fwd * r * c * e + n_params * c * e + n_stats * r * 4

    def both(r, c, e):
        return fwd(r, c, e) + streams_bwd * r * c * e + 2 * n_params * c * e + n_stats * r * 4
    return fwd, both


@dataclass(frozen=True)
class OpBench:
    """How to feed one op (the launchers' PyTorch-mirroring signature) and count its traffic."""

    make: Callable  # (rows, cols, dtype, device, generator) -> positional args
    grad_positions: tuple[int, ...]
    fwd_bytes: Callable[[int, int, int], float]  # (rows, cols, element bytes)
    fwdbwd_bytes: Callable[[int, int, int], float]
    liger: str = ""  # name of the adapter in _liger_adapters(); "" when Liger has no such op


def _randn(shape, dtype, device, gen, scale=1.0, shift=0.0):
    return (torch.randn(shape, generator=gen, device=device, dtype=torch.float32) * scale
            + shift).to(dtype)


def _softmax_args(r, c, dtype, dev, gen):
    return (_randn((r, c), dtype, dev, gen, 2.0), -1)


def _ln_args(r, c, dtype, dev, gen):
    return (_randn((r, c), dtype, dev, gen, 2.0, 0.5), (c,),
            _randn((c,), dtype, dev, gen, 0.5, 1.0), _randn((c,), dtype, dev, gen, 0.1), 1e-5)


def _rms_args(r, c, dtype, dev, gen):
    return (_randn((r, c), dtype, dev, gen, 2.0, 0.5), (c,),
            _randn((c,), dtype, dev, gen, 0.5, 1.0), 1e-6)


def _with_residual(make):
    def args(r, c, dtype, dev, gen):
        x, *rest = make(r, c, dtype, dev, gen)
        return (x, _randn((r, c), dtype, dev, gen), *rest)
    return args


def _gelu_args(r, c, dtype, dev, gen):
    return (_randn((r, c), dtype, dev, gen, 3.0), "none")


def _silu_args(r, c, dtype, dev, gen):
    return (_randn((r, c), dtype, dev, gen, 3.0),)


def _swiglu_args(r, c, dtype, dev, gen):
    return (_randn((r, c), dtype, dev, gen, 3.0), _randn((r, c), dtype, dev, gen, 2.0))


def _ce_args(r, c, dtype, dev, gen):
    target = torch.randint(0, c, (r,), generator=gen, device=dev)
    return (_randn((r, c), dtype, dev, gen, 3.0), target, -100, "mean")


def _bias_gelu_args(r, c, dtype, dev, gen):
    return (_randn((r, c), dtype, dev, gen, 3.0), _randn((c,), dtype, dev, gen, 0.1), "none")


def _bias_silu_args(r, c, dtype, dev, gen):
    return (_randn((r, c), dtype, dev, gen, 3.0), _randn((c,), dtype, dev, gen, 0.1))


# fwd reads x, writes y: 2Ne; bwd reads y, dy, writes dx: 3Ne.
_SOFTMAX_BYTES = (lambda r, c, e: 2 * _n(r, c) * e, lambda r, c, e: 5 * _n(r, c) * e)
_POINTWISE_BYTES = _SOFTMAX_BYTES  # x -> y; x, dy -> dx
OPS: dict[str, OpBench] = {
    "softmax": OpBench(_softmax_args, (0,), *_SOFTMAX_BYTES, liger="softmax"),
    "log_softmax": OpBench(_softmax_args, (0,), *_SOFTMAX_BYTES),
    # norms: x -> y (+ stats); x, dy -> dx, dw(, db). Fused: x, r -> y, h; h, dy, dh -> dx.
    "layer_norm": OpBench(_ln_args, (0, 2, 3), *_norm_bytes(2, 3, 2, 2), liger="layer_norm"),
    "rms_norm": OpBench(_rms_args, (0, 2), *_norm_bytes(2, 3, 1, 1), liger="rms_norm"),
    "add_layer_norm": OpBench(_with_residual(_ln_args), (0, 1, 3, 4), *_norm_bytes(4, 4, 2, 2)),
    "add_rms_norm": OpBench(_with_residual(_rms_args), (0, 1, 3), *_norm_bytes(4, 4, 1, 1),
                            liger="add_rms_norm"),
    "gelu": OpBench(_gelu_args, (0,), *_POINTWISE_BYTES),
    "silu": OpBench(_silu_args, (0,), *_POINTWISE_BYTES),
    # a, b -> y: 3Ne; a, b, dy -> da, db: 5Ne.
    "swiglu": OpBench(_swiglu_args, (0, 1), lambda r, c, e: 3 * _n(r, c) * e,
                      lambda r, c, e: 8 * _n(r, c) * e, liger="swiglu"),
    # fwd reads the logits once (+ 8 B target, 8 B loss/lse per row); fwd+bwd at least reads
    # them once and writes their gradient once (a forward that also writes the gradient).
    "cross_entropy": OpBench(_ce_args, (0,), lambda r, c, e: _n(r, c) * e + 16 * r,
                             lambda r, c, e: 2 * _n(r, c) * e + 16 * r, liger="cross_entropy"),
    "bias_gelu": OpBench(_bias_gelu_args, (0, 1), lambda r, c, e: 2 * _n(r, c) * e + c * e,
                         lambda r, c, e: 5 * _n(r, c) * e + 2 * c * e),
    "bias_silu": OpBench(_bias_silu_args, (0, 1), lambda r, c, e: 2 * _n(r, c) * e + c * e,
                         lambda r, c, e: 5 * _n(r, c) * e + 2 * c * e),
}


def _liger_adapters() -> dict[str, Callable]:
    """Liger's functional API behind the launchers' signatures (same positional args)."""
    from liger_kernel.transformers import functional as lf

    return {
        "softmax": lambda x, dim: lf.liger_softmax(x),
        "layer_norm": lambda x, shape, w, b, eps: lf.liger_layer_norm(x, w, b, eps),
        # in_place=False: the default writes dx into dy, which the timing loop reuses.
        "rms_norm": lambda x, shape, w, eps: lf.liger_rms_norm(x, w, eps, in_place=False),
        "add_rms_norm": lambda x, r, shape, w, eps: lf.liger_fused_add_rms_norm(
            x, r, w, eps, in_place=False),
        "swiglu": lambda a, b: lf.liger_swiglu(a, b),
        "cross_entropy": lambda logits, target, ignore_index, reduction: lf.liger_cross_entropy(
            logits, target, ignore_index=ignore_index, reduction=reduction),
    }


def liger_status() -> tuple[str, str]:
    """(version, "") when liger_kernel imports, else ("", why not)."""
    try:
        import liger_kernel  # noqa: F401
        from importlib.metadata import version
        try:
            return version("liger-kernel"), ""
        except Exception:  # noqa: BLE001 - installed with --target: no dist-info lookup needed
            return getattr(liger_kernel, "__version__", "unknown"), ""
    except Exception as exc:  # noqa: BLE001 - any import failure: the provider is skipped
        return "", f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"


# ---------------------------------------------------------------- the registry's ops

def registry_ops() -> dict[str, dict[str, object]]:
    """{op: {"triton": spec, "cuda": spec}} for every memory-bound registry kernel."""
    from reference_kernels.registry import all_kernels
    from reference_kernels.triton.cases import family_name

    ops: dict[str, dict[str, object]] = {}
    for spec in all_kernels():
        if spec.memory_bound:
            ops.setdefault(family_name(spec.id), {})[spec.capability.backend] = spec
    return ops


def bench_ops() -> tuple[str, ...]:
    """The registry's memory-bound ops, in OPS order; an op with no OpBench is said once."""
    reg = registry_ops()
    missing = sorted(set(reg) - set(OPS))
    if missing:
        print(f"bench_kernels_csv: no benchmark case for registry op(s) {', '.join(missing)} "
              "(add them to OPS)", file=sys.stderr)
    return tuple(op for op in OPS if op in reg)


def passes_of(op: str, reg=None) -> tuple[str, ...]:
    reg = registry_ops() if reg is None else reg
    return PASSES if any(s.has_backward for s in reg[op].values()) else ("fwd",)


def providers_of(op: str, pass_: str, reg=None, liger: bool = True) -> tuple[str, ...]:
    reg = registry_ops() if reg is None else reg
    specs = reg[op]
    out = [f"ours_{b}" for b in ("triton", "cuda")
           if b in specs and (pass_ == "fwd" or specs[b].has_backward)]
    out += ["eager", "compile"]
    if liger and OPS[op].liger:
        out.append("liger")
    return tuple(out)


@dataclass(frozen=True)
class Cell:
    op: str
    rows: int
    cols: int
    dtype: str
    pass_: str
    shape_class: str
    draw: str = shape_draws.GRID  # the declared grid, or a draw of real models' shapes (--draw)


def expand_ops(names: Iterable[str] | None) -> tuple[str, ...]:
    if not names:
        return bench_ops()
    out: list[str] = []
    for name in names:
        for op in OP_GROUPS.get(name, (name,)):
            if op not in out:
                out.append(op)
    return tuple(out)


def cells(ops: Iterable[str] | None = None, classes: Iterable[str] | None = None,
          dtypes: Iterable[str] | None = None, passes: Iterable[str] | None = None,
          quick: bool = False, draw: str | None = None, per_family: int | None = None) -> list[Cell]:
    """The declared sweep (optionally filtered), in unit order: op, pass, dtype, then shapes;
    with `draw`, that draw of benchmarks/shape_draws.py instead of the grid."""
    if draw:
        return draw_cells(draw, per_family, ops, dtypes, passes)
    reg = registry_ops()
    ops = expand_ops(ops) if ops else (QUICK_OPS if quick else bench_ops())
    unknown = [op for op in ops if op not in OPS or op not in reg]
    if unknown:
        raise SystemExit(f"bench_kernels_csv: unknown op(s) {unknown}; choose from "
                         f"{', '.join(bench_ops())} or a group {', '.join(OP_GROUPS)}")
    classes = tuple(classes or CLASS_NAMES)
    dtypes = tuple(dtypes or (QUICK_DTYPES if quick else DTYPES))
    out = []
    for op in ops:
        for pass_ in passes_of(op, reg):
            if passes and pass_ not in passes:
                continue
            for dtype in dtypes:
                for sc in SHAPE_CLASSES:
                    if sc.name in classes:
                        out += [Cell(op, r, c, dtype, pass_, sc.name)
                                for r, c in (sc.quick if quick else sc.shapes)]
    return out


def draw_cells(draw: str, per_family: int | None, ops: Iterable[str] | None,
               dtypes: Iterable[str] | None, passes: Iterable[str] | None) -> list[Cell]:
    """One draw's shapes, each in every pass of its op and every dtype, in unit order."""
    reg = registry_ops()
    wanted = set(expand_ops(ops)) if ops else None
    shapes = shape_draws.draw_shapes(draw, MAX_ELEMENTS, per_family)
    out = []
    for op in (op for op in OPS if op in reg and (wanted is None or op in wanted)):
        mine = [s for s in shapes if s.op == op]
        for pass_ in passes_of(op, reg):
            for dtype in dtypes or DTYPES:
                if not passes or pass_ in passes:
                    out += [Cell(op, s.rows, s.cols, dtype, pass_, shape_class(s.rows, s.cols), draw)
                            for s in mine]
    return out


# Guesses for --plan (the run prints its real wall time per unit): per timed candidate, do_bench
# runs ~warmup + rep of GPU time plus its estimate, the check and host timing add ~60 ms; each
# (op, pass, dtype) compiles ~3 times (static, dynamic, rows = 1), fwd+bwd graphs cost more.
CHECK_S = 0.06
COMPILES_PER_UNIT = 3
COMPILE_S = {"fwd": 2.5, "fwd+bwd": 6.0}
STARTUP_S = 30.0  # imports, copy bandwidth, CUDA extension load (built once per machine)


def estimate(cell_list: list[Cell], quick: bool = False, liger: bool = True,
             timing_ms: tuple[float, float] | None = None) -> dict:
    reg = registry_ops()
    warmup, rep = timing_ms or ((QUICK_WARMUP_MS, QUICK_REP_MS) if quick else (WARMUP_MS, REP_MS))
    timings = sum(len(providers_of(c.op, c.pass_, reg, liger)) for c in cell_list)
    units = {(c.op, c.pass_, c.dtype) for c in cell_list}
    timing_s = timings * (1.3 * (warmup + rep) / 1e3 + CHECK_S)
    compile_s = sum(COMPILES_PER_UNIT * COMPILE_S[p] for _, p, _ in units)
    return {"cells": len(cell_list), "units": len(units), "timings": timings,
            "timing_s": timing_s, "compile_s": compile_s,
            "total_s": STARTUP_S + timing_s + compile_s}


# ---------------------------------------------------------------- correctness

def tolerance(op: str, provider: str, dtype: str, reg=None) -> tuple[float, float]:
    """The bundled spec's tolerance: ours_cuda its own, everyone else the Triton spec's
    (the CUDA one where the op has no Triton kernel)."""
    specs = (registry_ops() if reg is None else reg)[op]
    spec = specs["cuda"] if provider == "ours_cuda" or "triton" not in specs else specs["triton"]
    return spec.tolerance(dtype)


def compare(out: torch.Tensor, ref: torch.Tensor, tol: tuple[float, float]) -> str:
    """"" when out passes against the float64 ref, else why not: reference_kernels/verify.py's
    pass rule (_compare_one), computed on out's device so a 64 MiB tensor costs ~1 ms."""
    from reference_kernels.verify import STORAGE_ROUNDING_MULTIPLIER

    rtol, atol = tol
    if tuple(out.shape) != tuple(ref.shape):
        return f"shape {list(out.shape)}, expected {list(ref.shape)}"
    o, r = out.detach().to(torch.float64), ref.detach().to(device=out.device, dtype=torch.float64)
    if bool(torch.isnan(r).any()):
        return "the float64 reference produced NaN for this input"
    nan_count = int(torch.isnan(o).sum())
    if nan_count:
        return f"{nan_count} NaN element(s) (unwritten or invalid)"
    diff = torch.where(o == r, torch.zeros_like(o), o - r)
    if not bool(torch.isfinite(diff).all()):
        return "infinite where the reference is finite (or the reverse)"
    ref_norm, diff_norm = float(r[torch.isfinite(r)].norm()), float(diff.norm())
    abs_err = float(diff.abs().max()) if diff.numel() else 0.0
    if ref_norm == 0.0:
        return "" if abs_err <= atol else f"max abs error {abs_err:.2e} > {atol:.0e} " \
                                          "against an all-zero reference"
    storage = float((r.to(out.dtype).to(torch.float64) - r).nan_to_num(0.0, 0.0, 0.0).norm())
    if diff_norm > max(rtol * ref_norm, STORAGE_ROUNDING_MULTIPLIER * storage):
        return f"relative error norm {diff_norm / ref_norm:.2e} > {rtol:.0e}"
    magnitude = r.abs().nan_to_num(posinf=0.0, neginf=0.0)
    scale = float(magnitude.max()) if magnitude.numel() else 0.0
    excess = diff.abs() - (atol + rtol * (magnitude + scale))
    if bool((excess > 0).any()):
        i = int(excess.flatten().argmax())
        return f"element {i}: {float(o.flatten()[i]):.6g}, expected {float(r.flatten()[i]):.6g}"
    return ""


def _flatten(out) -> list[torch.Tensor]:
    return list(out) if isinstance(out, (tuple, list)) else [out]


def _leaves(args: tuple, grad_positions: tuple[int, ...], grad: bool, dtype=None) -> list:
    """Fresh copies of the tensor args (a candidate may write its inputs: Liger's
    cross-entropy stores the gradient in the logits); float ones cast to dtype if given."""
    out = []
    for i, a in enumerate(args):
        if isinstance(a, torch.Tensor):
            a = a.detach().to(dtype if dtype is not None and a.is_floating_point() else a.dtype)
            a = a.clone().requires_grad_(grad and i in grad_positions)
        out.append(a)
    return out


def _poisoned():
    from reference_kernels import verify

    return getattr(verify, "_poisoned_allocations", contextlib.nullcontext)()


@dataclass
class Reference:
    outs: list[torch.Tensor]
    grads: list[torch.Tensor] = field(default_factory=list)
    upstream: list[torch.Tensor] = field(default_factory=list)


def reference(op: str, args: tuple, pass_: str, gen: torch.Generator, reg=None) -> Reference:
    """The float64 reference of the inputs (and, for fwd+bwd, of a random upstream gradient
    shared by every candidate)."""
    specs = (registry_ops() if reg is None else reg)[op]
    ref_fn = (specs.get("triton") or specs["cuda"]).load_reference()
    bench = OPS[op]
    backward = pass_ == "fwd+bwd"
    leaves = _leaves(args, bench.grad_positions, backward, torch.float64)
    outs = _flatten(ref_fn(*leaves))
    if not backward:
        return Reference([o.detach() for o in outs])
    dtype = next(a.dtype for a in args if isinstance(a, torch.Tensor) and a.is_floating_point())
    upstream = [torch.randn(o.shape, generator=gen, device=o.device, dtype=torch.float32)
                .to(dtype) for o in outs]
    grads = torch.autograd.grad(outs, [leaves[i] for i in bench.grad_positions],
                                [u.to(torch.float64) for u in upstream])
    return Reference([o.detach() for o in outs], list(grads), upstream)


def run_candidate(fn: Callable, op: str, args: tuple, pass_: str, upstream) -> list:
    """Outputs (fwd) or outputs + input gradients (fwd+bwd) of one call on fresh copies."""
    bench = OPS[op]
    backward = pass_ == "fwd+bwd"
    leaves = _leaves(args, bench.grad_positions, backward)
    outs = _flatten(fn(*leaves))
    if not backward:
        return [o.detach() for o in outs]
    grads = _grad(outs, [leaves[i] for i in bench.grad_positions], upstream)
    return [o.detach() for o in outs] + list(grads)


def _grad(outs: list, wrt: list, upstream: list):
    """autograd.grad with the shared upstream gradients in each output's own dtype (Liger's
    cross-entropy returns a float32 loss for bfloat16 logits)."""
    ups = [u if u.dtype == o.dtype else u.to(o.dtype) for o, u in zip(outs, upstream)]
    return torch.autograd.grad(outs, wrt, ups)


def check(fn: Callable, op: str, args: tuple, pass_: str, ref: Reference,
          tol: tuple[float, float]) -> tuple[str, str]:
    """("ok", "") | ("wrong", why) | ("refused", the exception) for one candidate."""
    try:
        with _poisoned():
            got = run_candidate(fn, op, args, pass_, ref.upstream)
    except Exception as exc:  # noqa: BLE001 - a candidate that raises is refused, not fatal
        return "refused", describe(exc)
    want = ref.outs + ref.grads
    if len(got) != len(want):
        return "wrong", f"{len(got)} outputs/gradients, the reference has {len(want)}"
    names = [f"output {k}" for k in range(len(ref.outs))] + [
        f"grad of arg {p}" for p in OPS[op].grad_positions]
    reasons = [f"{name}: {why}" for name, g, w in zip(names, got, want)
               if (why := compare(g, w, tol))]
    return ("wrong", "; ".join(reasons)[:300]) if reasons else ("ok", "")


def describe(exc: BaseException) -> str:
    first = (str(exc).strip().splitlines() or [""])[0]
    return f"{type(exc).__name__}: {first[:240]}"


def timed_call(fn: Callable, op: str, args: tuple, pass_: str, upstream) -> Callable:
    """What is timed: one forward (inputs need no grad), or forward + autograd.grad."""
    bench = OPS[op]
    leaves = _leaves(args, bench.grad_positions, pass_ == "fwd+bwd")
    if pass_ == "fwd":
        return lambda: fn(*leaves)
    wrt = [leaves[i] for i in bench.grad_positions]

    def fwd_bwd():
        return _grad(_flatten(fn(*leaves)), wrt, upstream)
    return fwd_bwd


# ---------------------------------------------------------------- providers

def provider_fns(op: str, dtype: str, pass_: str, device: str, reg, liger_ok: bool,
                 compiled: dict, only: Iterable[str] = PROVIDERS) -> dict[str, Callable | str]:
    """{provider: callable, or the reason it cannot run here (a refused row)}, of `only`."""
    specs = reg[op]
    out: dict[str, Callable | str] = {}
    for provider in (p for p in providers_of(op, pass_, reg, liger_ok) if p in only):
        if provider.startswith("ours_"):
            spec = specs[provider[5:]]
            reason = spec.reason_if_unsatisfied(device)
            out[provider] = reason if reason else spec.load()
        elif provider == "eager":
            out[provider] = (specs.get("triton") or specs["cuda"]).load_reference()
        elif provider == "compile":
            key = (op, pass_, dtype)
            if key not in compiled:
                eager = (specs.get("triton") or specs["cuda"]).load_reference()
                compiled[key] = torch.compile(eager)
            out[provider] = compiled[key]
        elif provider == "liger":
            out[provider] = _liger_adapters()[OPS[op].liger]
    return out


# ---------------------------------------------------------------- measuring

@dataclass
class Timing:
    warmup_ms: float
    rep_ms: float
    copy_bytes_per_s: float
    bench: Callable[[Callable], float] | None = None  # callable -> median ms (tests: a fake)
    rounds: int = ROUNDS

    def median_ms(self, call: Callable, first: bool = True) -> float:
        """One round: do_bench's median over rep_ms / rounds (warm-up on the first round)."""
        if self.bench is not None:
            return self.bench(call)
        from triton.testing import do_bench

        return float(do_bench(call, warmup=self.warmup_ms if first else 1,
                              rep=self.rep_ms / self.rounds, return_mode="median"))


def host_us(call: Callable, device: str, calls: int = HOST_CALLS) -> float:
    _sync(device)
    t0 = time.perf_counter()
    for _ in range(calls):
        call()
    t1 = time.perf_counter()
    _sync(device)
    return (t1 - t0) / calls * 1e6


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def measure_cell(cell: Cell, fns: dict[str, Callable | str], timing: Timing, device: str,
                 reg, seed: int = 0) -> list[dict]:
    """One row per provider: checked first, timed only when correct."""
    dtype = getattr(torch, cell.dtype)
    gen = torch.Generator(device=device).manual_seed(seed)
    bench = OPS[cell.op]
    args = bench.make(cell.rows, cell.cols, dtype, device, gen)
    ref = reference(cell.op, args, cell.pass_, gen, reg)
    nbytes = (bench.fwd_bytes if cell.pass_ == "fwd" else bench.fwdbwd_bytes)(
        cell.rows, cell.cols, dtype.itemsize)
    rows, calls = {}, {}
    for provider, fn in fns.items():
        row = {"op": cell.op, "rows": cell.rows, "cols": cell.cols, "dtype": cell.dtype,
               "pass": cell.pass_, "provider": provider, "draw": cell.draw,
               "shape_class": cell.shape_class,
               "min_bytes": nbytes, "ms": math.nan, "frac_of_copy_bw": math.nan,
               "host_us_per_call": math.nan}
        if isinstance(fn, str):
            rows[provider] = {**row, "status": "refused", "reason": fn}
            continue
        status, reason = check(fn, cell.op, args, cell.pass_, ref,
                               tolerance(cell.op, provider, cell.dtype, reg))
        rows[provider] = {**row, "status": status, "reason": reason}
        if status == "ok":
            calls[provider] = timed_call(fn, cell.op, args, cell.pass_, ref.upstream)
    for provider, (ms, host) in timed_rounds(calls, timing, device).items():
        row = rows[provider]
        if isinstance(ms, str):  # a timing failure is a refusal too
            row.update(status="refused", reason=ms)
        else:
            row.update(ms=ms, frac_of_copy_bw=nbytes / (ms * 1e-3) / timing.copy_bytes_per_s,
                       host_us_per_call=host)
    return list(rows.values())


def timed_rounds(calls: dict[str, Callable], timing: Timing, device: str
                 ) -> dict[str, tuple[float | str, float]]:
    """{provider: (median ms of its rounds, median host us)}, or (why, nan) if a call raised;
    the providers take turns round by round, the order rotated each round."""
    ms: dict[str, list[float]] = {p: [] for p in calls}
    host: dict[str, list[float]] = {p: [] for p in calls}
    failed: dict[str, str] = {}
    order = list(calls)
    for r in range(max(1, timing.rounds)):
        k = r % len(order) if order else 0
        for provider in order[k:] + order[:k]:
            if provider in failed:
                continue
            try:
                ms[provider].append(timing.median_ms(calls[provider], first=r == 0))
                host[provider].append(host_us(calls[provider], device))
            except Exception as exc:  # noqa: BLE001
                failed[provider] = describe(exc)
    return {p: (failed[p], math.nan) if p in failed else
            (statistics.median(ms[p]), statistics.median(host[p])) for p in calls}


# ---------------------------------------------------------------- the CSV

# draw: `grid` (the declared sweep) or a draw id of benchmarks/shape_draws.py; routes: for a
# held-out draw, the sha256 (12 hex) of the routes.csv frozen when it was measured.
KEY = ["op", "rows", "cols", "dtype", "pass", "provider", "gpu", "draw"]
VALUES = ["shape_class", "status", "reason", "ms", "frac_of_copy_bw", "host_us_per_call",
          "min_bytes", "copy_gbps", "warmup_ms", "rep_ms", "commit", "date", "torch", "triton",
          "liger", "routes"]
COLUMNS = KEY + VALUES
NUMERIC = ["rows", "cols", "ms", "frac_of_copy_bw", "host_us_per_call", "min_bytes",
           "copy_gbps", "warmup_ms", "rep_ms"]
TEXT = [c for c in COLUMNS if c not in NUMERIC]


def read_csv(path: Path) -> pd.DataFrame:
    if not Path(path).is_file() or Path(path).stat().st_size == 0:
        return pd.DataFrame(columns=COLUMNS)
    df = pd.read_csv(path, dtype={c: str for c in TEXT}, keep_default_na=False,
                     na_values={c: [""] for c in NUMERIC})
    df = df.reindex(columns=COLUMNS)
    df[TEXT] = df[TEXT].fillna("")
    return df.assign(draw=df["draw"].replace("", shape_draws.GRID))  # written before draws: grid


def _typed(df: pd.DataFrame) -> pd.DataFrame:
    df = df.reindex(columns=COLUMNS)
    df = df.assign(**{c: pd.to_numeric(df[c], errors="coerce") for c in NUMERIC})
    df[["rows", "cols"]] = df[["rows", "cols"]].astype("int64")
    df = df.assign(**{c: df[c].astype(object).fillna("").astype(str) for c in TEXT})
    return df.assign(draw=df["draw"].replace("", shape_draws.GRID))


def upsert(old: pd.DataFrame, new: pd.DataFrame) -> pd.DataFrame:
    """`new` replaces the rows of `old` with the same KEY; every other row of `old` stays."""
    new = _typed(new).drop_duplicates(KEY, keep="last")
    return sort_rows(upsert_rows(old if old.empty else _typed(old), new, KEY))


def sort_rows(df: pd.DataFrame) -> pd.DataFrame:
    order = {p: i for i, p in enumerate(PROVIDERS)}
    df = df.assign(_p=df["provider"].map(order).fillna(len(order)),
                   _c=df["shape_class"].map({c: i for i, c in enumerate(CLASS_NAMES)}).fillna(9))
    df = df.sort_values(["gpu", "draw", "op", "pass", "dtype", "_c", "rows", "cols", "_p"])
    return df.drop(columns=["_p", "_c"]).reset_index(drop=True)


def write_atomic(df: pd.DataFrame, path: Path) -> None:
    write_csv_atomic(df, path, float_format="%.6g")


def upsert_file(path: Path, new: pd.DataFrame) -> pd.DataFrame:
    merged = upsert(read_csv(path), new)
    write_atomic(merged, path)
    return merged


# ---------------------------------------------------------------- stamps

def commit() -> str:
    """ADVISOR_COMMIT (the GPU machine's copy may have no .git), else git's short HEAD with
    -dirty when tracked files differ, else "unknown"."""
    if os.environ.get("ADVISOR_COMMIT"):
        return os.environ["ADVISOR_COMMIT"]
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, text=True,
                              capture_output=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"],
                               cwd=REPO, text=True, capture_output=True, check=True).stdout
        return head + ("-dirty" if dirty.strip() else "")
    except Exception:  # noqa: BLE001 - no git, no repository: say so
        return "unknown"


def gpu_name(device: str) -> str:
    if not device.startswith("cuda"):
        return "cpu"
    props = torch.cuda.get_device_properties(0)
    return f"{props.name} ({props.multi_processor_count} SMs)"


def stamps(device: str, liger_version: str) -> dict:
    try:
        import triton
        triton_version = triton.__version__
    except Exception:  # noqa: BLE001
        triton_version = ""
    return {"gpu": gpu_name(device), "commit": commit(), "torch": torch.__version__,
            "triton": triton_version, "liger": liger_version,
            "date": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")}


# ---------------------------------------------------------------- the run

def units(cell_list: list[Cell]) -> list[tuple[tuple[str, str, str], list[Cell]]]:
    out: dict[tuple[str, str, str], list[Cell]] = {}
    for c in cell_list:
        out.setdefault((c.op, c.pass_, c.dtype), []).append(c)
    return list(out.items())


def run(cell_list: list[Cell], csv: Path, device: str, timing: Timing, liger_version: str,
        budget_s: float | None = None, started: float | None = None,
        providers: tuple[str, ...] = PROVIDERS) -> list[tuple]:
    """Measure unit by unit, upserting each into csv; returns the units left out by the budget."""
    reg = registry_ops()
    started = time.perf_counter() if started is None else started
    compiling = "compile" in providers
    if compiling:
        for name in ("recompile_limit", "cache_size_limit"):  # a unit's shapes must not exhaust
            if hasattr(torch._dynamo.config, name):  # it: past it dynamo silently runs eager
                setattr(torch._dynamo.config, name, max(64, getattr(torch._dynamo.config, name)))
    left: list[tuple] = []
    for (op, pass_, dtype), unit_cells in units(cell_list):
        if budget_s is not None and time.perf_counter() - started > budget_s:
            left.append((op, pass_, dtype))
            continue
        t0 = time.perf_counter()
        if compiling:
            torch._dynamo.reset()  # each unit compiles afresh (one code object per reference fn)
        compiled: dict = {}
        fns = provider_fns(op, dtype, pass_, device, reg, bool(liger_version), compiled, providers)
        rows = []
        for cell in unit_cells:
            rows += measure_cell(cell, fns, timing, device, reg)
            if device.startswith("cuda"):
                torch.cuda.empty_cache()
        stamp = stamps(device, liger_version)
        new = pd.DataFrame(rows).assign(
            **stamp, copy_gbps=timing.copy_bytes_per_s / 1e9, warmup_ms=timing.warmup_ms,
            rep_ms=timing.rep_ms, routes=shape_draws.routes_stamp(unit_cells[0].draw))
        upsert_file(csv, new)
        bad = [f"{r['provider']}@{r['rows']}x{r['cols']}: {r['status']}" for r in rows
               if r["status"] != "ok"]
        print(f"bench_kernels_csv: {op} {pass_} {dtype}: {len(unit_cells)} shapes, "
              f"{len(rows)} rows in {time.perf_counter() - t0:.0f} s"
              + (f"; not ok: {', '.join(bad)}"[:400] if bad else ""), flush=True)
    return left


def compile_process(argv: list[str] | None, started: float, budget_s: float | None) -> int:
    """The same sweep for the compile provider alone, in a fresh process (see main's NB), with
    the budget left over; its exit code (3: it left units out, and printed how to rerun them)."""
    left_s = max(1.0, budget_s - (time.perf_counter() - started)) if budget_s else 0.0
    cmd = compile_command(list(sys.argv[1:] if argv is None else argv), left_s)
    return subprocess.run(cmd, check=False).returncode


def compile_command(args: list[str], budget_s: float) -> list[str]:
    """This script's command line with `--providers compile` and `--budget-s budget_s` in place
    of its own (0: no budget)."""
    rest: list[str] = []
    skip = False
    for a in args:
        if a in ("--providers", "--budget-s"):
            skip = True
            continue
        if skip and not a.startswith("--"):
            continue
        skip = False
        rest.append(a)
    return [sys.executable, str(Path(__file__).resolve()), *rest, "--providers", "compile",
            "--budget-s", f"{budget_s:.0f}"]


def rerun_command(left: list[tuple], args) -> str:
    ops = sorted({op for op, _, _ in left})
    parts = ["python", "benchmarks/bench_kernels_csv.py", "--ops", *ops]
    if args.draw:
        parts += ["--draw", args.draw] + (["--per-family", str(args.per_family)] if args.per_family else [])
    if args.quick:
        parts.append("--quick")
    if args.shape_classes:
        parts += ["--shape-classes", *args.shape_classes]
    if args.dtypes:
        parts += ["--dtypes", *args.dtypes]
    if args.passes:
        parts += ["--passes", *args.passes]
    return shlex.join(parts)


def plan_text(cell_list: list[Cell], quick: bool, timing_ms: tuple[float, float] | None = None) -> str:
    est = estimate(cell_list, quick, liger=True, timing_ms=timing_ms)  # with Liger: the upper bound
    lines = [f"{est['cells']} cells (op x shape x dtype x pass), {est['units']} units "
             f"(op, pass, dtype), {est['timings']} timed candidates (with Liger)",
             f"estimate: ~{est['total_s']:.0f} s = {STARTUP_S:.0f} s start + "
             f"{est['timing_s']:.0f} s timing + {est['compile_s']:.0f} s torch.compile "
             "(guesses; the run prints real times per unit)"]
    by_class: dict[str, int] = {}
    for c in cell_list:
        by_class[c.shape_class] = by_class.get(c.shape_class, 0) + 1
    lines.append("cells per class: " + ", ".join(f"{k} {v}" for k, v in by_class.items()))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--csv", type=Path, default=DEFAULT_CSV, help="the long CSV to upsert into")
    ap.add_argument("--quick", action="store_true",
                    help=f"{', '.join(QUICK_OPS)}; bfloat16; one shape per class")
    ap.add_argument("--ops", nargs="+", metavar="OP",
                    help=f"ops or groups ({', '.join(OP_GROUPS)}); default: every registry op")
    ap.add_argument("--shape-classes", nargs="+", choices=CLASS_NAMES)
    ap.add_argument("--dtypes", nargs="+", choices=DTYPES)
    ap.add_argument("--passes", nargs="+", choices=PASSES)
    ap.add_argument("--budget-s", type=float, default=DEFAULT_BUDGET_S,
                    help="start no (op, pass, dtype) unit after this many seconds (0: no limit; "
                         f"default {DEFAULT_BUDGET_S:.0f}, inside the device's 10 min a call)")
    ap.add_argument("--providers", nargs="+", choices=PROVIDERS, default=list(PROVIDERS),
                    help="measure only these (default all; compile then runs in a process of its own)")
    ap.add_argument("--draw", metavar="ID",
                    help="measure a draw of real models' shapes (fit-<seed> or heldout-<seed>; "
                         "benchmarks/shape_draws.py) instead of the grid; a held-out draw needs the "
                         "routes fitted first")
    ap.add_argument("--per-family", type=int, metavar="N",
                    help="shapes per op family in the draw (default: fit 16, held-out 40)")
    ap.add_argument("--plan", action="store_true", help="print the cells and an estimate; no GPU")
    ap.add_argument("--merge", nargs="+", type=Path, metavar="PART_CSV",
                    help="upsert these CSVs (from GPU runs) into --csv; no GPU")
    args = ap.parse_args(argv)
    if args.merge:
        for part in args.merge:
            new = read_csv(part)
            if new.empty:
                print(f"bench_kernels_csv: {part} has no rows", file=sys.stderr)
                continue
            merged = upsert_file(args.csv, new)
            print(f"merged {len(new)} rows of {part} into {args.csv} ({len(merged)} rows)")
        return 0
    try:
        cell_list = cells(args.ops, args.shape_classes, args.dtypes, args.passes, args.quick,
                          args.draw, args.per_family)
        if args.draw and not args.plan:
            shape_draws.routes_stamp(args.draw)  # a held-out draw refuses unfrozen routes
    except shape_draws.DrawError as exc:
        print(f"bench_kernels_csv: {exc}", file=sys.stderr)
        return 1
    draw_timing = (shape_draws.DRAW_WARMUP_MS, shape_draws.DRAW_REP_MS) if args.draw else None
    if args.plan:
        print(plan_text(cell_list, args.quick, draw_timing))
        return 0
    if not torch.cuda.is_available():
        print("bench_kernels_csv: needs a CUDA GPU (torch.cuda.is_available() is False); "
              "--plan and --merge work without one", file=sys.stderr)
        return 2
    started = time.perf_counter()
    print(plan_text(cell_list, args.quick, draw_timing), flush=True)
    liger_version, why = liger_status()
    if not liger_version:
        print(f"bench_kernels_csv: liger skipped: import liger_kernel failed ({why}); see this "
              "script's docstring to install it", flush=True)
    sys.path.insert(0, str(HERE))
    from bench_kernels import BIG_SHAPE, copy_bandwidth  # noqa: E402 - a sibling script

    warmup, rep = draw_timing or ((QUICK_WARMUP_MS, QUICK_REP_MS) if args.quick else (WARMUP_MS, REP_MS))
    copy_bps = copy_bandwidth(BIG_SHAPE, torch.float32, quick=args.quick)
    print(f"bench_kernels_csv: {gpu_name('cuda')}; D2D copy {copy_bps / 1e9:.0f} GB/s; "
          f"do_bench warmup {warmup} ms, rep {rep} ms", flush=True)
    timing = Timing(warmup, rep, copy_bps, rounds=shape_draws.DRAW_ROUNDS if args.draw else ROUNDS)
    providers = tuple(args.providers)
    # NB: once torch.compile has run in a process, every later Python-level call there costs more
    # host time (H200, torch 2.11: the bundled rms_norm 52 -> 89 us a call after one compiled
    # cell, eager's C++ path unchanged), which would charge compile's cost to the Triton and
    # Liger launchers. So compile is measured by a process of its own, after the others.
    in_process = tuple(p for p in providers if p != "compile") or providers
    left = run(cell_list, args.csv, "cuda", timing, liger_version, args.budget_s or None, started,
               in_process)
    compile_rc = 0
    if "compile" in providers and in_process != providers:
        compile_rc = compile_process(argv, started, args.budget_s)
    print(f"bench_kernels_csv: {time.perf_counter() - started:.0f} s; rows in {args.csv}")
    if left:
        print(f"bench_kernels_csv: budget spent; {len(left)} unit(s) not measured: "
              f"{', '.join('/'.join(u) for u in left)}\n  rerun: {rerun_command(left, args)}")
        return 3
    return 3 if compile_rc == 3 else 0


if __name__ == "__main__":
    sys.path.insert(0, str(REPO))  # run from anywhere
    sys.exit(main())
