"""Tables for jobs past one process group's view: the collective skew of imported ranks,
and the nodes and links of a merged multi-node run."""
from __future__ import annotations

from typing import Sequence

from rich.table import Table

from kernel_advisor.render.dist_render import COLLECTIVE_LABEL, collective_table, distributed_line, rank_table
from kernel_advisor.render.profile_render import hotspot_table, summary_line
from kernel_advisor.render.units import fmt_frac_pct, fmt_si, fmt_time_s


def _table(title: str, columns: tuple[tuple[str, str], ...]) -> Table:
    table = Table(title=title, title_justify="left", header_style="bold")
    for name, justify in columns:
        table.add_column(name, justify=justify)
    return table


def _us(value) -> str:
    return fmt_time_s(None if value is None else value * 1e-6)


def skew_table(doc: dict) -> Table:
    """Per collective: the spread of the same call's start and end times across ranks."""
    skew = doc.get("skew") or {}
    table = _table("Collective skew — the same call on every rank",
                   (("collective", "left"), ("calls", "right"), ("start spread (median)", "right"),
                    ("start spread (max)", "right"), ("end spread (median)", "right"), ("end spread (max)", "right")))
    for row in skew.get("collectives", []):
        table.add_row(COLLECTIVE_LABEL.get(row["collective"], row["collective"]), str(row["calls"]),
                      _us(row["start_spread_median_us"]), _us(row["start_spread_max_us"]),
                      _us(row["end_spread_median_us"]), _us(row["end_spread_max_us"]))
    late = sorted(skew.get("ranks", []), key=lambda r: -r["last_to_arrive_calls"])
    if not skew.get("calls_aligned"):
        table.caption = "the ranks' calls do not line up (a window cut a call): no skew"
    elif late and late[0]["last_to_arrive_calls"]:
        top = late[0]
        table.caption = (f"start spread = last rank in − first rank in; rank {top['rank']} arrived last in "
                         f"{fmt_frac_pct(top['last_to_arrive_frac'])} of the calls, "
                         f"{_us(top['mean_lateness_us'])} after the first on average")
    return table


def node_table(doc: dict) -> Table:
    """Per node: its ranks, the slowest step, communication and waiting."""
    table = _table(f"Nodes — {len(doc['nodes'])} × {doc['ranks_per_node']} ranks",
                   (("node", "right"), ("host", "left"), ("ranks", "left"), ("step (slowest)", "right"),
                    ("straggler ratio", "right"), ("comm", "right"), ("waiting", "right")))
    for node in doc["nodes"]:
        ratio = node.get("straggler_ratio")
        table.add_row(str(node["node_rank"]), node["hostname"], _ranks_text(node["ranks"]),
                      fmt_time_s(node["step_median_s"]), "–" if ratio is None else f"{ratio:.3f}",
                      fmt_time_s(node["comm_per_step_s"]), fmt_time_s(node["comm_wait_per_step_s"]))
    table.caption = "per step, mean over the node's ranks; straggler ratio within the node"
    return table


def link_table(doc: dict) -> Table:
    """Inter- against intra-node communication, each on its own measured roof."""
    table = _table("Links — communication by where its group reaches",
                   (("link", "left"), ("calls/step", "right"), ("time/step", "right"), ("busbw", "right"),
                    ("roof", "right"), ("% of roof", "right"), ("roof source", "left")))
    for link in doc["links"]:
        roof = link.get("roof") or {}
        table.add_row(link["link"], f"{link['calls_per_step']:.3g}", fmt_time_s(link["time_per_step_s"]),
                      fmt_si(link["busbw_bytes_per_s"], "B/s"), fmt_si(roof.get("busbw_bytes_per_s"), "B/s"),
                      fmt_frac_pct(link.get("busbw_frac_of_roof")), roof.get("source", "none"))
    table.caption = "inter-node: a group whose ranks span nodes; busbw from the shortest duration of each call"
    return table


def _ranks_text(ranks: list[int]) -> str:
    if ranks and ranks == list(range(ranks[0], ranks[-1] + 1)) and len(ranks) > 2:
        return f"{ranks[0]}–{ranks[-1]}"
    return ", ".join(map(str, ranks))


def multirank_output(run, doc: dict, top: int, title: str, before: Sequence[Table] = (),
                     after: Sequence[Table] = ()) -> list:
    """What `import DIR/` and `merge` print: rank 0's hotspots, the per-rank table, the command's
    own tables before and after the collectives, then the run's summary lines."""
    return [hotspot_table(run.ops, top, title=title), rank_table(doc), *before, collective_table(doc), *after,
            summary_line(run.meta, run.path), distributed_line(run.meta.distributed)]
