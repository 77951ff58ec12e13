"""Per node and per link: the figures a multi-node merge adds. Pure: tables in, records out.

A collective's group either stays inside one node (its traffic crosses NVLink / shared
memory) or spans nodes (it crosses the network between them). Each kind is set against its
own roof: intra-node, the interconnect ceiling one node has (`advisor calibrate`'s all-reduce,
else the datasheet); inter-node, the all-reduce the ranks timed over a group spanning the nodes.
"""
from __future__ import annotations

import math
import statistics
import time
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import torch
import torch.distributed as dist

from kernel_advisor.analyze.ceilings import match_device
from kernel_advisor.analyze.ceilings import algbw_bytes_per_s, busbw_bytes_per_s
from kernel_advisor.distributed.merge import bandwidths, straggler_ratio
from kernel_advisor.analyze.calibrate import ALLREDUCE_BYTES, read_calibration

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
    """The intra-node roof: the interconnect ceiling of one node (interconnect_ceiling, above)."""
    return {"busbw_bytes_per_s": ceiling.get("bytes_per_s"), "source": ceiling.get("source", "none"),
            "link": ceiling.get("link", "none")}


# ------------------------------------------------------------
# The bus-bandwidth ceiling collectives are judged against: measured, else the datasheet.

@dataclass(frozen=True)
class BusCeiling:
    bytes_per_s: float | None  # per direction, comparable with nccl-tests busbw; None = unknown
    link: str  # "nvlink", "pcie", "all-reduce (calibrated)" or "none"
    source: str  # "measured", "datasheet" or "none"

    def to_json(self) -> dict:
        return {"bytes_per_s": self.bytes_per_s, "link": self.link, "source": self.source}


NO_CEILING = BusCeiling(None, "none", "none")


def per_direction_bytes_per_s(bidirectional_bytes_per_s: float) -> float:
    """Datasheets add both directions (H200: 18 NVLinks x 25 GB/s x 2 = 900 GB/s).

    NB: busbw counts the bytes each rank sends, one direction, so its ceiling is half the
    datasheet figure (450 GB/s on an H200).
    """
    return bidirectional_bytes_per_s / 2


def bus_ceiling(device_type: str, device_name: str, driver: str,
                cache_dir: Path | str | None = None) -> BusCeiling:
    """`advisor calibrate`'s all-reduce busbw when cached, else NVLink, else PCIe (datasheet).

    CPU runs (gloo over sockets) have no ceiling in the table.
    """
    if device_type != "cuda":
        return NO_CEILING
    cal = read_calibration(device_name, driver, cache_dir)
    if cal is not None and cal.allreduce is not None:
        # NB: busbw is close to independent of the rank count on a switched fabric
        # (that is what it is for), so a calibration on n GPUs serves runs on m.
        return BusCeiling(cal.allreduce.busbw_bytes_per_s, "all-reduce (calibrated)", "measured")
    spec = match_device(device_name)
    if spec is not None and spec.nvlink_bytes_per_s:
        return BusCeiling(per_direction_bytes_per_s(spec.nvlink_bytes_per_s), "nvlink", "datasheet")
    if spec is not None and spec.pcie_bytes_per_s:
        return BusCeiling(per_direction_bytes_per_s(spec.pcie_bytes_per_s), "pcie", "datasheet")
    return NO_CEILING


# ------------------------------------------------------------
# The link a collective crosses, timed as `advisor calibrate` times the intra-node one: a
# sum all-reduce of one large buffer, back-to-back calls between synchronisations, the median
# of the reps. Here it runs through the job's own process group, over a group whose ranks
# span the nodes, so it measures the inter-node path the run's collectives took.

# NB: gloo on CPU reduces on the host's cores: a smaller buffer and fewer calls keep the
# measurement to about a second; the figure is for checking a setup, as the run's own.
CPU_ALLREDUCE_BYTES = 16 << 20
SETTINGS = {"cuda": {"size_bytes": ALLREDUCE_BYTES, "warmup": 3, "reps": 5, "batch": 10},
            "cpu": {"size_bytes": CPU_ALLREDUCE_BYTES, "warmup": 1, "reps": 3, "batch": 2}}


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def measure_group_allreduce(device: torch.device, nnodes: int, group=None) -> dict:
    """Every rank of `group` (default: the world) takes part; returns the slowest rank's median."""
    s = SETTINGS["cuda" if device.type == "cuda" else "cpu"]
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32  # gloo sums float32
    itemsize = torch.empty((), dtype=dtype).element_size()
    buf = torch.zeros(max(s["size_bytes"] // itemsize, 1), dtype=dtype, device=device)
    for _ in range(s["warmup"]):
        dist.all_reduce(buf, group=group)
    _sync(device)
    times_s = []
    for _ in range(s["reps"]):
        dist.barrier(group=group)
        t0 = time.perf_counter()
        for _ in range(s["batch"]):
            dist.all_reduce(buf, group=group)
        _sync(device)
        times_s.append((time.perf_counter() - t0) / s["batch"])
    slowest = torch.tensor([statistics.median(times_s)], dtype=torch.float64, device=device)
    dist.all_reduce(slowest, op=dist.ReduceOp.MAX, group=group)
    median_s = float(slowest.item())
    size = buf.numel() * itemsize
    n = dist.get_world_size(group)
    return {"collective": "all_reduce", "world_size": n, "nnodes": nnodes, "size_bytes": size,
            "dtype": str(dtype).removeprefix("torch."), "median_s": median_s, "reps": s["reps"], "batch": s["batch"],
            "algbw_bytes_per_s": algbw_bytes_per_s(size, median_s),
            "busbw_bytes_per_s": busbw_bytes_per_s("all_reduce", size, median_s, n),
            "backend": dist.get_backend(group), "method": "process group, ranks spanning the nodes"}
