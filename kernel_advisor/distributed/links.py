"""Per node and per link: the figures a multi-node merge adds. Pure: tables in, records out.

A collective's group either stays inside one node (its traffic crosses NVLink / shared
memory) or spans nodes (it crosses the network between them). Each kind is set against its
own roof: intra-node, the interconnect ceiling one node has (`advisor calibrate`'s all-reduce,
else the datasheet); inter-node, the all-reduce the ranks timed over a group spanning the nodes.
"""
from __future__ import annotations

import math
import statistics

import pandas as pd

from kernel_advisor.distributed.merge import bandwidths, straggler_ratio

INTRA, INTER = "intra-node", "inter-node"


def spans_nodes(group_size: float, ranks_per_node: int, world_size: int, nnodes: int) -> bool:
    """Whether a call's group reaches past one node.

    NB: the trace records a call's group size, not always its members (gloo records neither,
    and a group's size is then the world's); a group larger than a node must span nodes, and
    one no larger is taken to sit inside a node, as launchers place consecutive ranks together.
    """
    if nnodes < 2:
        return False
    size = world_size if group_size is None or (isinstance(group_size, float) and math.isnan(group_size)) \
        else int(group_size)
    return size > ranks_per_node


def node_rows(ranks: pd.DataFrame, node_of_rank: dict[int, int], hostnames: dict[int, str]) -> list[dict]:
    """Per node: its ranks, its slowest median step, the straggler ratio inside it, communication and waiting."""
    rows = []
    table = ranks.assign(node=ranks["rank"].map(node_of_rank))
    for node, group in table.groupby("node", sort=True):
        medians = group["step_median_s"].tolist()
        wait = group["comm_wait_per_step_s"]
        rows.append({"node_rank": int(node), "hostname": hostnames.get(int(node), ""),
                     "ranks": sorted(int(r) for r in group["rank"]),
                     "step_median_s": max(medians), "straggler_ratio": straggler_ratio(medians),
                     "comm_per_step_s": float(group["comm_per_step_s"].mean()),
                     "comm_wait_per_step_s": float(wait.mean()) if wait.notna().any() else None,
                     "stragglers": [int(r) for r in group.loc[group["is_straggler"].astype(bool), "rank"]]})
    return rows


def link_rows(calls: pd.DataFrame, steps: int, copies: int, ranks_per_node: int, world_size: int, nnodes: int,
              roofs: dict[str, dict]) -> list[dict]:
    """Per link: calls and time per step, busbw (shortest duration per call), its roof and the fraction of it.

    `calls` is merge.aligned_calls' table (one row per call of the job, or per rank's call
    when the ranks' calls do not line up: `copies` ranks then each hold a copy).
    """
    where = [INTER if spans_nodes(g, ranks_per_node, world_size, nnodes) else INTRA for g in calls["group_size"]]
    rows = []
    for link in (INTRA, INTER):
        part = calls[[w == link for w in where]]
        roof = roofs.get(link) or {}
        _, busbw = bandwidths(part) if len(part) else (math.nan, math.nan)
        roof_bw = roof.get("busbw_bytes_per_s")
        rows.append({"link": link, "calls": len(part) // copies, "calls_per_step": len(part) / copies / max(steps, 1),
                     "time_per_step_s": float(part["mean_s"].sum()) / copies / max(steps, 1),
                     "bytes_per_step": float(part["bytes"].sum()) / copies / max(steps, 1) if len(part) else 0.0,
                     "busbw_bytes_per_s": busbw, "roof": roof,
                     "busbw_frac_of_roof": busbw / roof_bw if roof_bw and not math.isnan(busbw) else None})
    return rows


def internode_roof(measurements: list[dict]) -> dict:
    """The inter-node roof from the ranks' measurements: the same all-reduce seen by every rank,
    the slowest rank's median (the lowest busbw), recorded with how it was measured."""
    known = [m for m in measurements if m and m.get("busbw_bytes_per_s")]
    if not known:
        return {"busbw_bytes_per_s": None, "source": "none"}
    worst = min(known, key=lambda m: m["busbw_bytes_per_s"])
    return {**worst, "source": "measured in the run", "ranks_reporting": len(known),
            "busbw_median_over_ranks": statistics.median(m["busbw_bytes_per_s"] for m in known)}


def intranode_roof(ceiling: dict) -> dict:
    """The intra-node roof: the interconnect ceiling of one node (distributed.interconnect)."""
    return {"busbw_bytes_per_s": ceiling.get("bytes_per_s"), "source": ceiling.get("source", "none"),
            "link": ceiling.get("link", "none")}
