"""The fit and held-out draws of benchmarks/data/kernels.csv side by side, for docs/benchmarks.md.

Per op family (benchmarks/shape_draws.py) and draw: the share of (op, shape, dtype, pass) groups
where the best bundled kernel, as routed by the frozen routes file, is >= 0.97x the best of the
draw's peers (eager, torch.compile, Liger: those it measured), and the worst groups of each
held-out draw. The grid and the fit draws are in-sample (the routes were fit on them); a
held-out draw is judged by routes that never saw it. A group missing a peer its draw measured
elsewhere (a unit the budget cut) is left out and counted. Called by render_kernels.main after
it has fit the routes; pure functions of the DataFrame and the routes file otherwise.
"""
from __future__ import annotations

import hashlib
from pathlib import Path

import pandas as pd

from bench_kernels_csv import OTHERS
from docdata import commit_source, splice_block
from kernel_routes import as_routed
from render_kernels import WIN_RATIO, _cell, _ms, _num, _rows, groups
from shape_draws import FAMILIES, FAMILY_OF, GRID, draw_of, is_fit_draw

from reference_kernels.routes import read_routes

BEGIN, END = "<!-- kernel-draws:begin -->", "<!-- kernel-draws:end -->"
TITLE = "Bundled kernels on shapes drawn from real models"
WORST = 12  # worst groups listed per held-out draw


def draw_order(draws) -> list[str]:
    """grid, then the fit draws, then the held-out ones (by seed within each)."""
    def key(d: str):
        kind, _, seed = d.partition("-")
        return (0 if d == GRID else 1 if is_fit_draw(d) else 2, kind, int(seed) if seed.isdigit() else 0)
    return sorted(set(draws), key=key)


def routes_sha(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()[:12] if Path(path).is_file() else ""


def judged(df: pd.DataFrame, tables: dict) -> tuple[pd.DataFrame, pd.DataFrame, int]:
    """One draw's groups as routed and alone, each with its family, the complete ones only
    (every peer the draw measured for the op has a row in the group), and how many were left out."""
    others = df[df["provider"].isin(list(OTHERS))]
    peers = others.groupby("op")["provider"].agg(set).to_dict()
    have = others.groupby(["op", "rows", "cols", "dtype", "pass"])["provider"].agg(set)
    complete = {k for k, v in have.items() if v == peers[k[0]]}

    def keep(gr: pd.DataFrame) -> pd.DataFrame:
        mask = [k in complete for k in gr[["op", "rows", "cols", "dtype", "pass"]].itertuples(index=False, name=None)]
        return gr[mask].assign(family=lambda g: g["op"].map(FAMILY_OF).fillna("other"))

    routed, alone = keep(groups(as_routed(df, tables))), keep(groups(df))
    return routed, alone, len(groups(df)) - len(alone)


def _share(gr: pd.DataFrame) -> str:
    compared = gr[gr["outcome"].isin(["win", "loss"])]
    if not len(compared):
        return "—"
    wins = int((compared["outcome"] == "win").sum())
    return f"{wins}/{len(compared)} = {wins / len(compared):.0%}"


def family_table(views: dict[str, tuple[pd.DataFrame, pd.DataFrame, int]]) -> str:
    """family x pass rows; a column per draw (as routed), and the held-out draws alone too."""
    names = list(views)
    held = [d for d in names if not is_fit_draw(d)]
    head = [f"{d} ({'held out' if d in held else 'fit'})" for d in names] + [f"{d} kernels alone" for d in held]
    lines = ["| family | pass | " + " | ".join(head) + " |", "|---|---|" + "---:|" * len(head)]
    families = [f for f in FAMILIES if any(f in set(v[0]["family"]) for v in views.values())]
    for fam in families + ["all"]:
        for p in ("fwd", "fwd+bwd", "all"):
            def pick(gr):
                g = gr if fam == "all" else gr[gr["family"] == fam]
                return g if p == "all" else g[g["pass"] == p]
            cells = [_share(pick(views[d][0])) for d in names] + [_share(pick(views[d][1])) for d in held]
            if any(c != "—" for c in cells):
                label = f"**{fam}**" if fam == "all" else fam
                lines.append(f"| {label} | {p} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def worst_table(routed: pd.DataFrame, routed_rows: pd.DataFrame) -> str:
    """The held-out draw's worst groups as routed: what ran, against the best peer."""
    via_route = {(r.op, r.rows, r.cols, r.dtype, r.pass_, r.provider)
                 for r in _rows(routed_rows[routed_rows["reason"] == "routed to eager"])}
    compared = routed[routed["outcome"].isin(["win", "loss"])]
    worst = compared.assign(_r=compared["ratio"].fillna(0.0)).sort_values(["_r", "op"]).head(WORST)
    lines = ["| family | op | rows×cols | dtype | pass | ran | ms | best peer | ms | ratio | |",
             "|---|---|---|---|---|---|---:|---|---:|---:|---|"]
    for r in _rows(worst):
        routed_to_eager = (r.op, r.rows, r.cols, r.dtype, r.pass_, r.bundled) in via_route
        ran = f"eager (route of {r.bundled})" if routed_to_eager else (r.bundled or "—")
        lines.append(f"| {r.family} | {r.op} | {r.rows}×{r.cols} | {r.dtype} | {r.pass_} | {ran} | "
                     f"{_ms(r.bundled_ms)} | {r.other or '—'} | {_ms(r.other_ms)} | {_num(r.ratio, 3)} | "
                     f"{r.outcome} {_cell(r.why)[:80]} |")
    return "\n".join(lines)


def header(df: pd.DataFrame, names: list[str], routes_path: Path, left_out: dict[str, int]) -> str:
    sha = routes_sha(routes_path)
    lines = [f"Routes: `reference_kernels/data/routes.csv` (sha256 {sha or 'absent'}), fit on "
             f"{', '.join(d for d in names if is_fit_draw(d)) or 'nothing'}; ours counts as ≥ "
             f"{WIN_RATIO:g}× the best peer where best peer ms / ours ms ≥ {WIN_RATIO:g}, ours being the "
             "best bundled kernel or, where the routes send the call to eager, eager (GPU time, as in a "
             f"device-bound step). Per draw, its shapes, dates and peers; "
             f"{commit_source('benchmarks/data/kernels.csv')}."]
    for d in names:
        rows = df[draw_of(df) == d]
        dates = sorted(x[:10] for x in rows["date"] if isinstance(x, str) and x)
        peers = ", ".join(p for p in OTHERS if p in set(rows["provider"]))
        shapes = len(rows[["op", "rows", "cols"]].drop_duplicates())
        note = ""
        if not is_fit_draw(d):
            measured = sorted({x for x in rows["routes"] if isinstance(x, str) and x})
            note = ("; measured against these routes" if measured == [sha] else
                    f"; measured against routes of sha256 {', '.join(measured) or '?'}, refit since: judged by the "
                    "current ones, which never saw it either")
        cut = f"; {left_out[d]} group(s) missing a peer left out" if left_out.get(d) else ""
        lines.append(f"- `{d}`: {shapes} shapes, {dates[0] if dates else '?'}"
                     f"{' to ' + dates[-1] if dates and dates[-1] != dates[0] else ''}, "
                     f"peers {peers or 'none'}{note}{cut}")
    return "\n".join(lines)


def render(df: pd.DataFrame, routes_path: Path) -> str:
    tables = read_routes(routes_path)
    blocks = []
    for gpu, g in df.groupby("gpu", sort=True):
        names = draw_order(draw_of(g))
        if names == [GRID]:
            continue  # the grid alone: the side-by-side section above says it all
        per = {d: g[draw_of(g) == d] for d in names}
        views = {d: judged(per[d], tables) for d in names}
        parts = [f"**{gpu}**", header(g, names, routes_path, {d: v[2] for d, v in views.items()}),
                 "Share of groups where ours is ≥ 0.97× the best peer, per op family:", family_table(views)]
        for d in (d for d in names if not is_fit_draw(d)):
            parts += [f"Worst groups of `{d}` (as routed):", worst_table(views[d][0], as_routed(per[d], tables))]
        blocks.append("\n\n".join(parts))
    return "\n\n".join(blocks) + "\n" if blocks else NO_DRAWS


def summary(df: pd.DataFrame, routes_path: Path) -> str:
    tables = read_routes(routes_path)
    lines = []
    for gpu, g in df.groupby("gpu", sort=True):
        for d in draw_order(draw_of(g)):
            routed, alone, cut = judged(g[draw_of(g) == d], tables)
            lines.append(f"{gpu} {d} ({'fit' if is_fit_draw(d) else 'held out'}): as routed "
                         f"{_share(routed)}, kernels alone {_share(alone)}"
                         + (f", {cut} group(s) missing a peer left out" if cut else ""))
    return "\n".join(lines)


NO_DRAWS = "No draw measured yet: only the grid (above).\n"


def splice(text: str, block: str) -> str:
    """The block between its markers; a page without them gets them after the grid's tables
    (render_kernels.END) once a draw is measured, and nothing before."""
    if BEGIN in text:
        return splice_block(text, block, BEGIN, END, TITLE)
    if block == NO_DRAWS:
        return text
    from render_kernels import END as GRID_END

    section = f"\n\n### {TITLE}\n\n{BEGIN}\n{block.rstrip()}\n{END}"
    at = text.find(GRID_END)
    return text[:at + len(GRID_END)] + section + text[at + len(GRID_END):] if at >= 0 else \
        splice_block(text, block, BEGIN, END, TITLE)

