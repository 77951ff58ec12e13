"""Tables and lines for a distributed run: per rank, per collective, one summary line."""
from __future__ import annotations


import pandas as pd
from rich.table import Table
from rich.text import Text

from kernel_advisor.collect.rundir import SCHEMA_VERSION
from kernel_advisor.records.base import json_text
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
