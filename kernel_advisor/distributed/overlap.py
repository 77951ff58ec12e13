"""Compute/communication overlap by interval arithmetic on one device's timeline.

Communication is hidden when a compute kernel runs on the same device at the same time
(DDP all-reduces gradient buckets while backward continues). What is not hidden is
exposed: the step waits for it. Intervals are [start, end) in µs; every function is pure.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Overlap:
    comm_s: float  # sum of communication durations (calls on several streams may overlap)
    comm_busy_s: float  # union of communication intervals: time when any collective ran
    overlapped_s: float  # part of comm_busy_s during which compute also ran
    exposed_s: float  # comm_busy_s - overlapped_s: communication nothing hid
    overlap_frac: float  # overlapped_s / comm_busy_s; NaN without communication


def merge_intervals(spans: np.ndarray) -> np.ndarray:
    """Union of [start, end) intervals as sorted, disjoint intervals ([[0,2],[1,3]] → [[0,3]])."""
    spans = np.asarray(spans, dtype=float).reshape(-1, 2)
    spans = spans[spans[:, 1] > spans[:, 0]]
    if not len(spans):
        return spans
    spans = spans[np.argsort(spans[:, 0], kind="stable")]
    run_end = np.maximum.accumulate(spans[:, 1])
    new_block = np.concatenate([[True], spans[1:, 0] > run_end[:-1]])
    block = np.cumsum(new_block) - 1
    ends = np.zeros(block[-1] + 1)
    np.maximum.at(ends, block, run_end)
    return np.column_stack([spans[new_block, 0], ends])


def covered_length(spans: np.ndarray) -> float:
    """Length of the union of the intervals (each instant counted once)."""
    merged = merge_intervals(spans)
    return float((merged[:, 1] - merged[:, 0]).sum()) if len(merged) else 0.0


def intersection_length(a: np.ndarray, b: np.ndarray) -> float:
    """Length of (∪a) ∩ (∪b), by inclusion–exclusion: |A| + |B| − |A ∪ B|."""
    a = np.asarray(a, dtype=float).reshape(-1, 2)
    b = np.asarray(b, dtype=float).reshape(-1, 2)
    both = covered_length(a) + covered_length(b) - covered_length(np.concatenate([a, b]))
    return max(both, 0.0)  # NB: float rounding can leave a tiny negative


def comm_overlap(comm_us: np.ndarray, compute_us: np.ndarray) -> Overlap:
    """How much of the communication time the compute intervals hide (inputs in µs)."""
    comm_us = np.asarray(comm_us, dtype=float).reshape(-1, 2)
    compute_us = np.asarray(compute_us, dtype=float).reshape(-1, 2)
    # Trace timestamps are ~1e12 µs; measuring from the first event keeps sub-ns precision.
    origin = min([x[:, 0].min() for x in (comm_us, compute_us) if len(x)], default=0.0)
    comm_us, compute_us = comm_us - origin, compute_us - origin
    comm_s = float((comm_us[:, 1] - comm_us[:, 0]).sum()) * 1e-6
    busy_s = covered_length(comm_us) * 1e-6
    overlapped_s = min(intersection_length(comm_us, compute_us) * 1e-6, busy_s)
    frac = overlapped_s / busy_s if busy_s > 0 else float("nan")
    return Overlap(comm_s=comm_s, comm_busy_s=busy_s, overlapped_s=overlapped_s,
                   exposed_s=busy_s - overlapped_s, overlap_frac=frac)
