"""Bandwidth of a collective from its size and time: nccl-tests' algbw and busbw formulas."""
from __future__ import annotations

import math


def algbw_bytes_per_s(size_bytes: float, time_s: float) -> float:
    """Algorithm bandwidth: message size / time (nccl-tests `algbw`); NaN without a time."""
    if not time_s > 0 or math.isnan(size_bytes):
        return math.nan
    return size_bytes / time_s


def busbw_factor(collective: str, group_size: int) -> float:
    """busbw / algbw for `group_size` ranks, so busbw is comparable with the link speed.

    NB: nccl-tests' factors: all-reduce 2(n−1)/n (a reduce-scatter then an all-gather, each
    sending (n−1)/n of the data per rank); all-gather, reduce-scatter, all-to-all (n−1)/n;
    broadcast, reduce, send/recv 1 (every byte crosses one link once).
    """
    n = max(int(group_size), 1)
    if collective == "all_reduce":
        return 2.0 * (n - 1) / n
    if collective in ("all_gather", "reduce_scatter", "all_to_all"):
        return (n - 1) / n
    return 1.0


def busbw_bytes_per_s(collective: str, size_bytes: float, time_s: float, group_size: int) -> float:
    """Bus bandwidth = algbw × busbw_factor: what each rank's links carried per second."""
    return algbw_bytes_per_s(size_bytes, time_s) * busbw_factor(collective, group_size)
