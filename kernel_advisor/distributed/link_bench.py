"""The link a collective crosses, timed as `advisor calibrate` times the intra-node one: a
sum all-reduce of one large buffer, back-to-back calls between synchronisations, the median
of the reps. Here it runs through the job's own process group, over a group whose ranks
span the nodes, so it measures the inter-node path the run's collectives took.
"""
from __future__ import annotations

import statistics
import time

import torch
import torch.distributed as dist

from kernel_advisor.analyze.collectives import algbw_bytes_per_s, busbw_bytes_per_s
from kernel_advisor.hardware.calibrate import ALLREDUCE_BYTES

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
