"""Render benchmarks/data/kernels.csv into docs/benchmarks.md and compute the target figure.

    python3 benchmarks/render_kernels.py [--csv benchmarks/data/kernels.csv]
        [--docs docs/benchmarks.md] [--routes reference_kernels/data/routes.csv] [--check]

The target: in >= 90 % of the (op, shape, dtype, pass)
groups, the best bundled kernel (ours_triton, ours_cuda) is >= 0.97x as fast as the best of
eager, torch.compile and Liger, i.e. best_other_ms / best_bundled_ms >= 0.97; the groups must
cover wide rows, few rows, mid sizes and fwd+bwd. Only rows with status `ok` and a time
compete: a wrong or refused candidate never wins, and a group whose bundled kernels are all
wrong or refused is a loss. A group with no correct competitor at all is not compared (listed).

The kernels are counted alone and as shipped: the registry routes a call to eager PyTorch
where the nearest measured shape of its kernel, dtype and pass lost to eager
(reference_kernels/routes.py; this script writes those routes from the CSV), and try-kernel
runs eager there. The target figure is the as-shipped one with each cell routed by its
nearest *other* measured shape (benchmarks/kernel_routes.py), so it measures routes that
generalise, not routes fitted to the cell itself.

The markdown goes between `<!-- kernels:begin -->` and `<!-- kernels:end -->`; without those
markers a `## Bundled kernels side by side` section holding them is appended. With no CSV or an
empty one it says so and writes nothing. --check exits 1 when the target (as shipped) is not met.
Everything but main() is a pure function of the DataFrame (tests/test_bench_kernels_csv.py).
"""
from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import pandas as pd

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE))
from bench_kernels_csv import (BUNDLED, CLASS_NAMES, DEFAULT_CSV, OTHERS,  # noqa: E402
                               PROVIDERS, read_csv)
from docdata import commit_source, splice_block  # noqa: E402
from kernel_routes import as_shipped, point_of, routes_table  # noqa: E402
from shape_draws import GRID, draw_of, fit_rows  # noqa: E402

from reference_kernels.routes import ROUTES_CSV  # noqa: E402

BEGIN, END = "<!-- kernels:begin -->", "<!-- kernels:end -->"
TITLE = "Bundled kernels side by side"
WIN_RATIO = 0.97  # best bundled at >= 97 % of the best other's speed counts as not losing
TARGET_SHARE = 0.90
GROUP = ["gpu", "op", "rows", "cols", "dtype", "pass", "draw"]
REQUIRED_CLASSES = ("few-rows", "wide-rows", "mid")  # the target's coverage: + fwd+bwd


def _timed(df: pd.DataFrame) -> pd.DataFrame:
    ms = pd.to_numeric(df["ms"], errors="coerce")
    return df[(df["status"] == "ok") & ms.notna() & (ms > 0)].assign(ms=ms)


def groups(df: pd.DataFrame) -> pd.DataFrame:
    """One row per (gpu, op, rows, cols, dtype, pass): the best correct bundled and other
    candidates, ratio = best_other_ms / best_bundled_ms, and outcome win | loss | uncompared."""
    cols = GROUP + ["shape_class", "bundled", "bundled_ms", "other", "other_ms", "ratio",
                    "outcome", "why"]
    if df.empty:
        return pd.DataFrame(columns=cols)
    df = df.assign(draw=draw_of(df))
    timed = _timed(df)
    out = []
    for key, g in df.groupby(GROUP, sort=True):
        ok = timed.loc[timed.index.intersection(g.index)]
        b = ok[ok["provider"].isin(BUNDLED)].sort_values("ms")
        o = ok[ok["provider"].isin(OTHERS)].sort_values("ms")
        row = dict(zip(GROUP, key), shape_class=g["shape_class"].iloc[0], bundled="",
                   bundled_ms=math.nan, other="", other_ms=math.nan, ratio=math.nan, why="")
        if len(b):
            row.update(bundled=b["provider"].iloc[0], bundled_ms=b["ms"].iloc[0])
        if len(o):
            row.update(other=o["provider"].iloc[0], other_ms=o["ms"].iloc[0])
        failed = g[g["provider"].isin(BUNDLED) & ~g.index.isin(b.index)]
        why = "; ".join(f"{r.provider} {r.status}: {r.reason}".rstrip(": ")
                        for r in failed.itertuples())[:200]
        if not len(o):
            row.update(outcome="uncompared", why="no correct eager/compile/liger time")
        elif not len(b):
            row.update(outcome="loss", why=why or "no bundled kernel measured")
        else:
            ratio = row["other_ms"] / row["bundled_ms"]
            row.update(ratio=ratio, outcome="win" if ratio >= WIN_RATIO else "loss", why=why)
        out.append(row)
    return pd.DataFrame(out, columns=cols)


def share(gr: pd.DataFrame, by: str | None = None) -> pd.DataFrame:
    """wins, compared (win + loss) and share = wins / compared, overall or per `by`."""
    compared = gr[gr["outcome"].isin(["win", "loss"])]
    if by is None:
        wins, n = int((compared["outcome"] == "win").sum()), len(compared)
        return pd.DataFrame([{"wins": wins, "compared": n, "share": wins / n if n else math.nan}])
    rows = []
    for value, g in compared.groupby(by, sort=False):
        wins = int((g["outcome"] == "win").sum())
        rows.append({by: value, "wins": wins, "compared": len(g), "share": wins / len(g)})
    return pd.DataFrame(rows, columns=[by, "wins", "compared", "share"])


def target_share(gr: pd.DataFrame) -> dict:
    """The target figure for one GPU's groups: share, coverage, met."""
    total = share(gr).iloc[0]
    compared = gr[gr["outcome"].isin(["win", "loss"])]
    classes = set(compared["shape_class"])
    missing = [c for c in REQUIRED_CLASSES if c not in classes]
    if "fwd+bwd" not in set(compared["pass"]):
        missing.append("fwd+bwd")
    met = bool(total["compared"] and total["share"] >= TARGET_SHARE and not missing)
    return {"wins": int(total["wins"]), "compared": int(total["compared"]),
            "share": float(total["share"]), "missing": missing, "met": met,
            "uncompared": int((gr["outcome"] == "uncompared").sum())}


# ---------------------------------------------------------------- markdown

def render(df: pd.DataFrame) -> str:
    blocks = []
    for gpu, g in df.groupby("gpu", sort=True):
        alone, fitted, loo = views(g)
        blocks.append("\n\n".join([
            header_line(g), verdict_lines(alone, fitted, loo, host_bound_view(g)),
            "Kernels alone, per shape class:", class_table(alone),
            "As shipped (routes decided leave-one-out), per shape class:", class_table(loo),
            op_table(alone), "As shipped (leave-one-out), " + losses_table(loo),
            details_table(g, alone)]))
    return "\n\n".join(blocks) + "\n"


def views(g: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """One GPU's groups three ways: the kernels alone; as shipped, each cell routed as its
    own measurement says; as shipped, each cell routed as its nearest other shape says. The
    routes are those of a device-bound step (GPU time decides), the regime do_bench measures."""
    return groups(g), groups(as_shipped(g)), groups(as_shipped(g, leave_one_out=True))


def host_bound_view(g: pd.DataFrame) -> pd.DataFrame:
    """As shipped to a host-bound step (leave-one-out): more cells go to eager."""
    return groups(as_shipped(g, leave_one_out=True, host_bound_step=True))


def header_line(df: pd.DataFrame) -> str:
    def values(col):
        return ", ".join(sorted({str(v) for v in df[col] if isinstance(v, str) and v})) or "?"
    dates = sorted(d[:10] for d in df["date"] if isinstance(d, str) and d)
    when = "?" if not dates else dates[0] if dates[0] == dates[-1] else \
        f"{dates[0]} to {dates[-1]}"
    copy = pd.to_numeric(df["copy_gbps"], errors="coerce").dropna()
    copy_text = f"D2D copy {copy.median():.0f} GB/s" if len(copy) else "D2D copy ?"
    liger = values("liger")
    return (f"**Measured {when}** on {values('gpu')} · torch {values('torch')} · triton "
            f"{values('triton')} · liger {liger if liger != '?' else 'not installed'}"
            f" · {commit_source('benchmarks/data/kernels.csv')} · {copy_text} · {len(df)} rows of "
            "`benchmarks/data/kernels.csv` (`benchmarks/bench_kernels_csv.py`; do_bench, L2 "
            "flushed, medians)")


def verdict_line(d: dict, what: str = "the best bundled kernel") -> str:
    met = "**met**" if d["met"] else "**not met**"
    cover = "" if not d["missing"] else f"; not covered: {', '.join(d['missing'])}"
    un = f"; {d['uncompared']} group(s) with no correct competitor, not counted" \
        if d["uncompared"] else ""
    share_text = "—" if math.isnan(d["share"]) else f"{d['share']:.1%}"
    return (f"{what} is ≥ {WIN_RATIO:g}× the best of eager, torch.compile and Liger in "
            f"**{d['wins']} of {d['compared']}** (op, shape, dtype, pass) groups = "
            f"**{share_text}** (target ≥ {TARGET_SHARE:.0%}): {met}{cover}{un}.")


def verdict_lines(alone: pd.DataFrame, fitted: pd.DataFrame, loo: pd.DataFrame,
                  host: pd.DataFrame) -> str:
    fit, hb = target_share(fitted), target_share(host)
    return "\n".join([
        "- Kernels alone: " + verdict_line(target_share(alone)),
        "- **Target, as shipped** (try-kernel sends a call to eager where the nearest measured "
        "shape lost; `reference_kernels/data/routes.csv`, each cell decided by its nearest "
        "*other* shape, on GPU time as in a device-bound step): "
        + verdict_line(target_share(loo), "the best bundled kernel or its route"),
        f"- As shipped, each cell decided by its own measurement: {fit['wins']} of "
        f"{fit['compared']} = {fit['share']:.1%} (a routed cell counts at eager's time, which "
        "is what runs there).",
        f"- As shipped to a host-bound step (a call costs the longer of its GPU and host time, so "
        f"more cells go to eager), leave-one-out: {hb['wins']} of {hb['compared']} = "
        f"{hb['share']:.1%}."])


def class_table(gr: pd.DataFrame) -> str:
    lines = ["| shape class | pass | groups | bundled ≥ 0.97× best other | share |",
             "|---|---|---:|---:|---:|"]
    compared = gr[gr["outcome"].isin(["win", "loss"])]
    for sc in CLASS_NAMES:
        for p in ("fwd", "fwd+bwd", "all"):
            g = compared[compared["shape_class"] == sc]
            g = g if p == "all" else g[g["pass"] == p]
            if len(g):
                wins = int((g["outcome"] == "win").sum())
                lines.append(f"| {sc} | {p} | {len(g)} | {wins} | {wins / len(g):.0%} |")
    t = share(gr).iloc[0]
    if t["compared"]:
        lines.append(f"| **all** | all | {int(t['compared'])} | {int(t['wins'])} | "
                     f"{t['share']:.0%} |")
    return "\n".join(lines)


def op_table(gr: pd.DataFrame) -> str:
    lines = ["Per op: groups won, and the worst group (best other ms / best bundled ms).",
             "",
             "| op | pass | dtype | won | worst ratio | at |", "|---|---|---|---:|---:|---|"]
    compared = gr[gr["outcome"].isin(["win", "loss"])]
    for (op, p, dtype), g in compared.groupby(["op", "pass", "dtype"], sort=True):
        wins = int((g["outcome"] == "win").sum())
        ratios = g["ratio"].fillna(0.0)  # no correct bundled kernel: worst of all
        worst = g.loc[ratios.idxmin()]
        ratio = "none ok" if math.isnan(worst["ratio"]) else f"{worst['ratio']:.3f}"
        lines.append(f"| {op} | {p} | {dtype} | {wins}/{len(g)} | {ratio} | "
                     f"{worst['rows']}×{worst['cols']} ({worst['shape_class']}) |")
    return "\n".join(lines)


def losses_table(gr: pd.DataFrame) -> str:
    lost = gr[gr["outcome"] == "loss"].sort_values(["ratio", "op"], na_position="first")
    un = gr[gr["outcome"] == "uncompared"]
    if not len(lost) and not len(un):
        return "Losing groups: none."
    lines = [f"Losing groups ({len(lost)})" + (f", and {len(un)} not compared" if len(un) else "")
             + ":", "",
             "| op | rows×cols | class | dtype | pass | best bundled | ms | best other | ms | "
             "ratio | why |", "|---|---|---|---|---|---|---:|---|---:|---:|---|"]
    for r in _rows(lost):
        lines.append(f"| {r.op} | {r.rows}×{r.cols} | {r.shape_class} | {r.dtype} | {r.pass_} | "
                     f"{r.bundled or '—'} | {_ms(r.bundled_ms)} | {r.other or '—'} | "
                     f"{_ms(r.other_ms)} | {_num(r.ratio, 3)} | {_cell(r.why)} |")
    for r in _rows(un):
        lines.append(f"| {r.op} | {r.rows}×{r.cols} | {r.shape_class} | {r.dtype} | {r.pass_} | "
                     f"{r.bundled or '—'} | {_ms(r.bundled_ms)} | — | — | not compared | "
                     f"{_cell(r.why)} |")
    return "\n".join(lines)


def details_table(df: pd.DataFrame, gr: pd.DataFrame) -> str:
    """Every group: each provider's fraction of copy bandwidth (or its status)."""
    present = [p for p in PROVIDERS if p in set(df["provider"])]
    head = ("| op | pass | dtype | rows×cols | class | " + " | ".join(present) + " | ratio |")
    lines = ["<details><summary>Every group: fraction of the D2D copy bandwidth per provider "
             "(min bytes / median time / copy bandwidth; `wrong`/`refused`: failed its check, "
             "not timed)</summary>", "", head, "|" + "---|" * (6 + len(present))]
    cells = {(r.gpu, r.op, r.rows, r.cols, r.dtype, r.pass_, r.provider): r
             for r in _rows(df)}
    for r in _rows(gr):
        values = []
        for p in present:
            c = cells.get((r.gpu, r.op, r.rows, r.cols, r.dtype, r.pass_, p))
            if c is None:
                values.append("")
            elif c.status != "ok":
                values.append(c.status)
            else:
                values.append(_num(pd.to_numeric(c.frac_of_copy_bw, errors="coerce")))
        lines.append(f"| {r.op} | {r.pass_} | {r.dtype} | {r.rows}×{r.cols} | {r.shape_class} | "
                     + " | ".join(values) + f" | {_num(r.ratio, 3)} |")
    return "\n".join(lines + ["", "</details>"])


def _rows(df: pd.DataFrame):
    return df.rename(columns={"pass": "pass_"}).itertuples()  # `pass` is a keyword


def _num(x, digits: int = 2) -> str:
    return "—" if x is None or pd.isna(x) else f"{x:.{digits}f}"


def _ms(x) -> str:
    return "—" if x is None or pd.isna(x) else f"{x:.4f}"


def _cell(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def splice(text: str, block: str) -> str:
    return splice_block(text, block, BEGIN, END, TITLE)


def summary(df: pd.DataFrame) -> str:
    """The target figures per GPU, for the terminal."""
    lines = []
    for gpu, g in df.groupby("gpu", sort=True):
        alone, fitted, loo = views(g)
        lines.append(f"{gpu}:\n{verdict_lines(alone, fitted, loo, host_bound_view(g)).replace('**', '')}")
        for sc in CLASS_NAMES:
            a, s = share(alone[alone["shape_class"] == sc]).iloc[0], \
                share(loo[loo["shape_class"] == sc]).iloc[0]
            if s["compared"]:
                lines.append(f"  {sc}: alone {int(a['wins'])}/{int(a['compared'])} = "
                             f"{a['share']:.0%}, as shipped {int(s['wins'])}/"
                             f"{int(s['compared'])} = {s['share']:.0%}")
        lost = loo[loo["outcome"] == "loss"]
        lines += [f"  loses as shipped: {r.op} {r.rows}x{r.cols} {r.dtype} {r.pass_}: "
                  f"{_num(r.ratio, 3)} ({r.bundled or 'no bundled ok'} vs {r.other})"
                  for r in _rows(lost)]
    return "\n".join(lines)


def write_routes(df: pd.DataFrame, path: Path) -> str:
    """reference_kernels/data/routes.csv from the fit draws' rows of the GPU with the most of
    them (the fit never reads a held-out draw); what was written."""
    df = fit_rows(df)
    if df.empty:
        return f"{path} not written: no rows of the grid or a fit draw"
    gpu = df["gpu"].value_counts().idxmax()
    table = routes_table(df[df["gpu"] == gpu])
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    table.to_csv(tmp, index=False, float_format="%.6g")
    tmp.replace(path)
    counts = {hb: sum(p.loses(hb) for p in map(point_of, table.itertuples(index=False))) for hb in (False, True)}
    return (f"wrote {path}: {len(table)} measured shapes on {gpu}; the kernel loses {counts[False]} on GPU "
            f"time, {counts[True]} counting host time")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--csv", type=Path, default=DEFAULT_CSV)
    ap.add_argument("--docs", type=Path, default=REPO / "docs" / "benchmarks.md")
    ap.add_argument("--routes", type=Path, default=ROUTES_CSV,
                    help="where the registry's routes are written (reference_kernels/data/routes.csv)")
    ap.add_argument("--check", action="store_true", help="exit 1 when the target is not met")
    args = ap.parse_args(argv)
    df = read_csv(args.csv)
    if df.empty:
        print(f"render_kernels: no measurements in {args.csv} (absent or empty); nothing "
              "written. Run benchmarks/bench_kernels_csv.py on the GPU machine first.")
        return 1
    import render_draws  # its tables use this module's groups

    print(write_routes(df, args.routes))  # the fit: the routes the draws' tables judge with
    grid = df[draw_of(df) == GRID]
    text = args.docs.read_text() if args.docs.is_file() else ""
    if not grid.empty:
        text = splice(text, render(grid))
        print(summary(grid))
    text = render_draws.splice(text, render_draws.render(df, args.routes))
    args.docs.write_text(text)
    print(render_draws.summary(df, args.routes))
    print(f"wrote the kernel tables of {args.docs}")
    met = all(target_share(views(g)[2])["met"] for _, g in grid.groupby("gpu"))
    return 1 if args.check and not met else 0


if __name__ == "__main__":
    sys.exit(main())
