"""Tables and lines for a distributed run: per rank, per collective, one summary line."""
from __future__ import annotations

from typing import Sequence

import pandas as pd
from rich.table import Table
from rich.text import Text

from kernel_advisor.collect.rundir import SCHEMA_VERSION
from kernel_advisor.records.base import json_text
from kernel_advisor.render.profile_render import hotspot_table, summary_line
from kernel_advisor.render.units import fmt_frac_pct, fmt_pct, fmt_si, fmt_time_s

COLLECTIVE_LABEL = {"all_reduce": "all-reduce", "all_gather": "all-gather", "reduce_scatter": "reduce-scatter",
                    "all_to_all": "all-to-all", "send_recv": "send/recv"}


def _table(title: str, columns: tuple[tuple[str, str], ...]) -> Table:
    table = Table(title=title, title_justify="left", header_style="bold")
    for name, justify in columns:
        table.add_column(name, justify=justify)
    return table


def _straggler_cell(rank: dict, straggler: dict) -> Text:
    if not rank.get("is_straggler"):
        return Text("")
    ratio = straggler.get("ratio")
    if rank["rank"] == straggler.get("slowest_rank") and ratio and ratio >= straggler.get("min_ratio", 1.0):
        return Text(f"◀ straggler: step +{(ratio - 1) * 100:.0f}%", style="bold red")
    return Text(f"◀ straggler: peers wait {fmt_time_s(straggler.get('max_comm_wait_s'))}", style="bold red")


def rank_table(doc: dict) -> Table:
    """Step time, device busy, communication, waiting and exposed communication per rank."""
    straggler = doc.get("straggler") or {}
    table = _table(f"Ranks — {doc['world_size']} × {doc['backend']}, {doc['wrapper']}",
                   (("rank", "right"), ("device", "left"), ("step (median)", "right"), ("device busy", "right"),
                    ("comm", "right"), ("waiting", "right"), ("exposed comm", "right"), ("overlap", "right"),
                    ("", "left")))
    for rank in doc["ranks"]:
        table.add_row(str(rank["rank"]), rank["device"], fmt_time_s(rank["step_median_s"]),
                      fmt_time_s(rank["device_busy_per_step_s"]), fmt_time_s(rank["comm_per_step_s"]),
                      fmt_time_s(rank["comm_wait_per_step_s"]), fmt_time_s(rank["exposed_comm_per_step_s"]),
                      fmt_frac_pct(rank["overlap_frac"]), _straggler_cell(rank, straggler))
    table.caption = ("per step; comm = time in collectives, waiting = the part spent waiting for a later "
                     "peer; exposed = comm that no compute overlapped")
    return table


def _ceiling_text(interconnect: dict) -> str:
    if not interconnect.get("bytes_per_s"):
        return "no bus ceiling for this device"
    return f"bus ceiling {fmt_si(interconnect['bytes_per_s'], 'B/s')} ({interconnect['link']}, {interconnect['source']})"


def collective_table(doc: dict) -> Table:
    """Calls, bytes, time and bus bandwidth per collective, against the interconnect ceiling."""
    table = _table(f"Communication — {_ceiling_text(doc.get('interconnect') or {})}",
                   (("collective", "left"), ("calls/step", "right"), ("bytes/call", "right"),
                    ("time/step", "right"), ("busbw", "right"), ("% of ceiling", "right")))
    for row in doc["collectives"]:
        table.add_row(COLLECTIVE_LABEL.get(row["collective"], row["collective"]), f"{row['calls_per_step']:.3g}",
                      fmt_si(row["bytes_per_call"], "B"), fmt_time_s(row["time_per_step_s"]),
                      fmt_si(row["busbw_bytes_per_s"], "B/s"), fmt_frac_pct(row["busbw_frac_of_ceiling"]))
    if not doc["collectives"]:
        table.caption = "no collectives in the profiled steps"
    else:
        table.caption = "busbw from the shortest duration of each call across ranks (nccl-tests convention)"
    return table


def distributed_line(evidence: dict) -> str:
    """One line: ranks, straggler, communication exposed, overlap."""
    parts = [f"{evidence['world_size']} ranks ({evidence.get('backend')}, {evidence.get('wrapper')})"]
    ratio = evidence.get("straggler_ratio")
    if ratio:
        parts.append(f"slowest/fastest step {ratio:.3f} (rank {evidence['slowest_rank']} slowest)")
    if evidence.get("waited_for_rank") is not None and evidence.get("max_comm_wait_s"):
        parts.append(f"peers wait up to {fmt_time_s(evidence['max_comm_wait_s'])}/step "
                     f"for rank {evidence['waited_for_rank']}")
    parts.append(f"comm {fmt_time_s(evidence.get('comm_time_s'))}/step, "
                 f"{fmt_time_s(evidence.get('exposed_comm_s'))} exposed ({fmt_pct(evidence.get('exposed_comm_pct'))} of the step)")
    parts.append(f"overlap {fmt_frac_pct(evidence.get('overlap_frac'))}")
    return " · ".join(parts) + " · per rank: ranks.json, rank<r>/"


def distributed_json(meta: dict, ops: pd.DataFrame, run_dir, top: int, doc: dict) -> str:
    """`advisor profile --json` for a distributed run: rank 0's hotspots plus ranks.json."""
    hot = ops.head(top).to_dict(orient="records")
    return json_text({"run_dir": str(run_dir), "run": meta, "hotspots": hot, "ranks": doc}, SCHEMA_VERSION)


# ------------------------------------------------------------
# Tables for jobs past one process group's view: the collective skew of imported ranks,
# and the nodes and links of a merged multi-node run.

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
