"""Shapes for the kernel sweep drawn from real models, seeded and named: the fit and held-out draws.

benchmarks/bench_kernels_csv.py measures a declared grid (draw `grid`) and, with `--draw ID`,
a sample of benchmarks/data/model_shapes.yaml: per op family, shapes as real models call the
op. A draw id is `fit-<seed>` or `heldout-<seed>`; the same id gives the same shapes on any
machine (random.Random seeded with the id and the family: Python's documented reproducible
generator), and a fit and a held-out draw of the same seed differ.

The routes (reference_kernels/data/routes.csv, benchmarks/kernel_routes.py) are fitted on the
grid and the fit draws only; `fit_rows` is the one gate every fit reads through, and refuses
anything else. A held-out draw is measured after the routes are frozen and only judged.

Families and the shapes each op sees (rows x cols, cols the reduced or last dim):
- norm: (batch x seq tokens, hidden); layer_norm / add_layer_norm for LayerNorm models,
  rms_norm / add_rms_norm for RMSNorm ones.
- activation: (tokens, intermediate); gelu for gelu/geglu MLPs, silu for swiglu ones (unfused).
- swiglu: (tokens, intermediate) of the swiglu models.
- softmax: attention scores (batch x heads x seq, seq): softmax; or one vocabulary-wide row per
  sequence at generation (decode batch, vocab): softmax or log_softmax.
- cross_entropy: (tokens, vocab) of the models with an LM head.
`odd_width_frac` of a family's widths are an odd number drawn log-uniformly between the
family's smallest and largest width (the odd sizes no table lists). A draw whose tensor would
pass the sweep's cap (bench_kernels_csv.MAX_ELEMENTS) is measured on the largest equal split of
its rows that fits: the micro-batch, or the chunk a chunked loss computes at once.
bias_gelu / bias_silu are grid-only: try-kernel has no detector for their pattern.
"""
from __future__ import annotations

import math
import random
import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import yaml

MODEL_SHAPES = Path(__file__).resolve().parent / "data" / "model_shapes.yaml"
GRID = "grid"
FIT, HELDOUT = "fit", "heldout"
_DRAW_ID = re.compile(r"^(fit|heldout)-(\d+)$")
FAMILIES: dict[str, tuple[str, ...]] = {
    "norm": ("layer_norm", "rms_norm", "add_layer_norm", "add_rms_norm"),
    "activation": ("gelu", "silu"),
    "swiglu": ("swiglu",),
    "softmax": ("softmax", "log_softmax"),
    "cross_entropy": ("cross_entropy",),
    "bias_activation": ("bias_gelu", "bias_silu"),  # grid only
}
DRAWN_FAMILIES = ("norm", "activation", "swiglu", "softmax", "cross_entropy")
FAMILY_OF = {op: fam for fam, ops in FAMILIES.items() for op in ops}
# Shapes per family: the held-out draw's at least 40 (each in fwd and fwd+bwd, bf16 and fp32).
SHAPES_PER_FAMILY = {FIT: 16, HELDOUT: 40}
# do_bench per timed candidate in a draw (ms) and timing rounds: 800 cells of a held-out draw
# with every provider fit one device call (--plan); the grid's 3/15 ms x 5 rounds would not.
DRAW_WARMUP_MS, DRAW_REP_MS, DRAW_ROUNDS = 1, 6, 3
MAX_TRIES = 200  # draws per shape before a family is declared unable to give enough shapes


class DrawError(ValueError):
    """A draw id that is not one, or a fit asked to read rows it must not."""


@dataclass(frozen=True)
class Drawn:
    op: str
    rows: int
    cols: int
    family: str
    model: str  # where the shape came from: a model of model_shapes.yaml, or "odd width"


def parse_draw(draw: str) -> tuple[str, int]:
    """("fit" | "heldout", seed) of a draw id; DrawError for anything else (the grid included)."""
    m = _DRAW_ID.match(draw or "")
    if not m:
        raise DrawError(f"draw id {draw!r}: expected fit-<seed> or heldout-<seed>, e.g. heldout-1")
    return m.group(1), int(m.group(2))


def is_fit_draw(draw: str) -> bool:
    """The grid and every fit-<seed> draw; nothing else may shape the routes."""
    return draw == GRID or (bool(_DRAW_ID.match(draw or "")) and draw.startswith(FIT + "-"))


def draw_of(df) -> "object":
    """The rows' draw ids (a frame without a draw column is the grid, as kernels.csv was)."""
    import pandas as pd

    if "draw" not in df.columns:
        return pd.Series(GRID, index=df.index)
    return df["draw"].fillna("").replace("", GRID).astype(str)


def fit_rows(df, allow: str = "drop"):
    """The rows a fit may read. allow="drop": the fit draws' rows of `df`; allow="refuse": `df`
    itself, or DrawError naming the held-out (or unknown) draws it holds."""
    draws = draw_of(df)
    fit = draws.map(is_fit_draw)
    if allow == "refuse" and not bool(fit.all()):
        other = sorted(set(draws[~fit]))
        raise DrawError(f"the routes are fit on the grid and fit-<seed> draws only; these rows are "
                        f"of {', '.join(other)} (select them with shape_draws.fit_rows(df))")
    return df[fit]


@lru_cache(maxsize=4)
def model_table(path: Path = MODEL_SHAPES) -> dict:
    return yaml.safe_load(Path(path).read_text())


def draw_shapes(draw: str, max_elements: int, per_family: int | None = None,
                families: tuple[str, ...] = DRAWN_FAMILIES, table: dict | None = None) -> list[Drawn]:
    """The draw's shapes, family by family, each (op, rows, cols) once; `max_elements`: the
    sweep's cap on a tensor's elements."""
    kind, seed = parse_draw(draw)
    n = SHAPES_PER_FAMILY[kind] if per_family is None else per_family
    table = model_table() if table is None else table
    out: list[Drawn] = []
    for family in families:
        rng = random.Random(f"{kind}:{seed}:{family}")
        seen: set[tuple[str, int, int]] = set()
        for _ in range(n):
            for _ in range(MAX_TRIES):
                shape = _fit_cap(SAMPLERS[family](rng, table), max_elements)
                if (shape.op, shape.rows, shape.cols) not in seen:
                    break
            else:
                raise DrawError(f"{draw}: {family} gives fewer than {n} distinct shapes under the cap")
            seen.add((shape.op, shape.rows, shape.cols))
            out.append(shape)
    return out


def _fit_cap(s: Drawn, cap: int) -> Drawn:
    """The largest equal split of the rows that fits the cap (module docstring)."""
    if s.rows * s.cols <= cap:
        return s
    split = math.ceil(s.rows * s.cols / cap)
    while math.ceil(s.rows / split) * s.cols > cap:
        split += 1
    return Drawn(s.op, max(1, math.ceil(s.rows / split)), s.cols, s.family, s.model)


# ---------------------------------------------------------------- per family

def _log_uniform_int(rng: random.Random, lo: int, hi: int) -> int:
    return int(round(math.exp(rng.uniform(math.log(lo), math.log(hi)))))


def _tokens(rng: random.Random, table: dict, model: dict) -> int:
    return _log_uniform_int(rng, *table["batches"]) * rng.choice(model["seqs"])


def _width(rng: random.Random, table: dict, models: list[dict], key: str, value: int) -> tuple[int, str]:
    """`value`, or with odd_width_frac an odd width between the family's extremes."""
    if rng.random() >= table["odd_width_frac"]:
        return value, ""
    widths = [m[key] for m in models]
    return _log_uniform_int(rng, min(widths), max(widths)) | 1, "odd width"


def _pick(rng: random.Random, table: dict, keep) -> dict:
    return rng.choice([m for m in table["models"] if keep(m)])


def _norm(rng, table) -> Drawn:
    models = table["models"]
    m = rng.choice(models)
    cols, odd = _width(rng, table, models, "hidden", m["hidden"])
    op = rng.choice(("rms_norm", "add_rms_norm") if m["norm"] == "rms" else ("layer_norm", "add_layer_norm"))
    return Drawn(op, _tokens(rng, table, m), cols, "norm", odd or m["name"])


def _activation(rng, table) -> Drawn:
    models = [m for m in table["models"] if m["mlp"] in ("gelu", "geglu", "swiglu")]
    m = rng.choice(models)
    cols, odd = _width(rng, table, models, "intermediate", m["intermediate"])
    op = "silu" if m["mlp"] == "swiglu" else "gelu"
    return Drawn(op, _tokens(rng, table, m), cols, "activation", odd or m["name"])


def _swiglu(rng, table) -> Drawn:
    models = [m for m in table["models"] if m["mlp"] == "swiglu"]
    m = rng.choice(models)
    cols, odd = _width(rng, table, models, "intermediate", m["intermediate"])
    return Drawn("swiglu", _tokens(rng, table, m), cols, "swiglu", odd or m["name"])


def _softmax(rng, table) -> Drawn:
    if rng.random() < 0.5:  # attention scores: every head of the batch's sequences
        m = _pick(rng, table, lambda m: m["heads"] > 0)
        seq = rng.choice(m["seqs"])
        rows = _log_uniform_int(rng, *table["batches"]) * m["heads"] * seq
        return Drawn("softmax", rows, seq, "softmax", m["name"])
    models = [m for m in table["models"] if m.get("vocab")]
    m = rng.choice(models)
    cols, odd = _width(rng, table, models, "vocab", m["vocab"])
    return Drawn(rng.choice(("softmax", "log_softmax")), _log_uniform_int(rng, *table["decode_batches"]),
                 cols, "softmax", odd or m["name"])


def _cross_entropy(rng, table) -> Drawn:
    models = [m for m in table["models"] if m.get("vocab")]
    m = rng.choice(models)
    cols, odd = _width(rng, table, models, "vocab", m["vocab"])
    return Drawn("cross_entropy", _tokens(rng, table, m), cols, "cross_entropy", odd or m["name"])


SAMPLERS = {"norm": _norm, "activation": _activation, "swiglu": _swiglu, "softmax": _softmax,
            "cross_entropy": _cross_entropy}


# ---------------------------------------------------------------- frozen routes

def routes_stamp(draw: str, path: Path | None = None) -> str:
    """"" for the grid and fit draws. For a held-out draw: the sha256 (12 hex digits) of the
    routes file it is judged with, which must exist and hold fit-draw points only (the routes
    are frozen before a held-out draw is measured); DrawError otherwise."""
    if is_fit_draw(draw):
        return ""
    parse_draw(draw)
    import csv
    import hashlib

    from reference_kernels.routes import ROUTES_CSV

    path = ROUTES_CSV if path is None else Path(path)
    if not path.is_file():
        raise DrawError(f"{draw} is judged with frozen routes, and {path} does not exist: fit them "
                        "first (benchmarks/render_kernels.py)")
    with path.open(newline="") as f:
        draws = {r.get("draw") or "" for r in csv.DictReader(f)}
    other = sorted(d for d in draws if not is_fit_draw(d))
    if other:
        raise DrawError(f"{path} holds points of {', '.join(other)}: routes must be fit on fit draws "
                        "only; refit them (benchmarks/render_kernels.py)")
    return hashlib.sha256(path.read_bytes()).hexdigest()[:12]
