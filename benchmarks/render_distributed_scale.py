"""Render benchmarks/data/distributed_scale.json into docs/distributed.md's "Measured at scale" section.

    python3 benchmarks/render_distributed_scale.py [--data benchmarks/data/distributed_scale.json] [--docs docs/distributed.md]

The section goes between `<!-- scale:begin -->` and `<!-- scale:end -->` (a new section before
`## Limits` when they are missing). Every number comes from a row that bench_import_ranks.py or
bench_multinode.py measured; with no rows it writes nothing (exit 1).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from docdata import commit_source, splice_block  # noqa: E402
from scale_record import DEFAULT_PATH, read_rows  # noqa: E402

BEGIN, END = "<!-- scale:begin -->", "<!-- scale:end -->"
TITLE = "Measured at scale"
DATA_NAME = "benchmarks/data/distributed_scale.json"  # the blocks name it as the holder of their commits
DASH = "–"


def gib(n) -> str:
    return DASH if n is None else f"{n / 2**30:.2f} GiB"


def mib(n) -> str:
    return DASH if n is None else f"{n / 2**20:.0f} MiB"


def gbps(n) -> str:
    return DASH if n is None else f"{n / 1e9:.2f} GB/s"


def spread_ms(us) -> str:
    return DASH if us is None else f"{us / 1e3:.2f} ms"


def pct(frac) -> str:
    return DASH if frac is None else f"{frac * 100:.0f} %"


def import_lines(r: dict) -> list[str]:
    m = r["machine"]
    found = "found" if r["deliberate_straggler"] in (r.get("straggler_ranks") or []) else "**not found**"
    return [
        f"**`advisor import DIR/`, {r['key']}** — measured {r['date_utc'][:10]} · {commit_source(DATA_NAME)} · "
        f"torch {r['versions']['torch']} · {m['cpu']}, {m['cores']} cores (shared) · `{r['command']}`",
        "",
        "| figure | value |", "|---|---|",
        f"| traces | {r['ranks']} × {r['target_bytes_per_trace'] / 1e6:.0f} MB ({r['total_trace_bytes'] / 1e9:.2f} GB) |",
        f"| wall time (import, merge, rank 0's tables) | {r['wall_s']:.1f} s |",
        f"| peak RSS: main · worker (largest) × workers | {mib(r['peak_rss_bytes'])} · "
        f"{mib(r['worker_peak_rss_bytes'])} × {r['workers']} |",
        f"| peak bound (main + workers × worker peak) | **{gib(r['peak_bound_bytes'])}** (budget {gib(r['budget_bytes'])}) |",
        f"| deliberate straggler (rank {r['deliberate_straggler']}) | {found}; waited for: rank {r.get('waited_for_rank')}, "
        f"last to arrive most often: rank {r.get('last_to_arrive')} |",
        f"| median start spread of a collective call | {spread_ms(r.get('start_spread_median_us'))} |",
        "",
    ]


def multinode_lines(r: dict) -> list[str]:
    inter, roof = r["inter_node"], r["internode_roof"]
    frac = inter.get("busbw_frac_of_roof")
    return [
        f"**Two nodes simulated on one host, {r['key']}** — measured {r['date_utc'][:10]} · {commit_source(DATA_NAME)} · "
        f"torch {r['versions']['torch']}{' · ' + r['machine']['gpu'] if r['machine'].get('gpu') else ''} · `{r['command']}`",
        "",
        "| figure | value |", "|---|---|",
        f"| step (slowest rank) · straggler ratio | {r['step_s'] * 1e3:.2f} ms · {r['straggler_ratio']:.3f} |",
        f"| inter-node roof (all-reduce of {mib(roof.get('size_bytes'))} over {roof.get('world_size')} ranks "
        f"on {roof.get('nnodes')} nodes) | {gbps(roof.get('busbw_bytes_per_s'))} |",
        f"| inter-node communication: calls/step · busbw · of the roof | {inter['calls_per_step']:.3g} · "
        f"{gbps(inter.get('busbw_bytes_per_s'))} · {pct(frac)} |",
        "",
    ]


def render(rows: list[dict]) -> str:
    parts = []
    for r in rows:
        parts += import_lines(r) if r["kind"] == "import_ranks" else multinode_lines(r)
    return "\n".join(parts)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=DEFAULT_PATH)
    ap.add_argument("--docs", type=Path, default=HERE.parent / "docs" / "distributed.md")
    ns = ap.parse_args(argv)
    rows = read_rows(ns.data)
    if not rows:
        print(f"render_distributed_scale: no rows in {ns.data}; nothing written")
        return 1
    block = render(rows)
    ns.docs.write_text(splice_block(ns.docs.read_text(), block, BEGIN, END, TITLE, before="## Limits"))
    print(block)
    return 0


if __name__ == "__main__":
    sys.exit(main())
