"""Nesting of CPU ops on each thread: parents, owners, self time, enclosing regions.

Ops on one thread nest by time: an op starting before the enclosing op ends is its child.
One pass per thread with a stack, O(n log n) for the sort; a million ops take seconds.
"""
from __future__ import annotations

from typing import Callable

import numpy as np
import pandas as pd


def thread_codes(df: pd.DataFrame) -> np.ndarray:
    """One integer per (pid, tid): comparing ints, not "pid/tid" strings, over millions of ops."""
    pid, _ = pd.factorize(df["pid"])
    tid, tids = pd.factorize(df["tid"])
    return pid.astype(np.int64) * (len(tids) + 1) + tid


def _thread_order(df: pd.DataFrame, thread: np.ndarray) -> np.ndarray:
    """Indices sorted by thread, then start, then longest first (a parent before its child)."""
    return np.lexsort((-df["dur_us"].to_numpy(float), df["ts_us"].to_numpy(float), thread))


def nest_ops(cpu: pd.DataFrame, recognised: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(parent, owner) per op; owner is the outermost recognised op at or above it, or -1."""
    n = len(cpu)
    parent = np.full(n, -1, dtype=np.int64)
    owner = np.full(n, -1, dtype=np.int64)
    if not n:
        return parent, owner
    thread = thread_codes(cpu)
    order = _thread_order(cpu, thread)
    ts = cpu["ts_us"].to_numpy(float)
    end = ts + cpu["dur_us"].to_numpy(float)
    stack: list[int] = []
    current = None
    for i in order.tolist():
        if thread[i] != current:
            stack, current = [], thread[i]
        while stack and end[stack[-1]] <= ts[i]:
            stack.pop()
        if stack:
            p = stack[-1]
            parent[i] = p
            owner[i] = owner[p] if owner[p] >= 0 else (i if recognised[i] else -1)
        else:
            owner[i] = i if recognised[i] else -1
        stack.append(i)
    return parent, owner


def innermost_marked(parent: np.ndarray, marked: np.ndarray) -> np.ndarray:
    """Index of the innermost op at or above each op with marked[op] set, -1 when none.

    Walks every unresolved op one level up per pass (vectorised): as many passes as the
    deepest nesting, not one Python step per op.
    """
    out = np.where(marked, np.arange(len(parent)), -1)
    todo = np.flatnonzero(~marked & (parent >= 0))
    up = parent[todo]
    while len(todo):
        hit = marked[up]
        out[todo[hit]] = up[hit]
        nxt = parent[up]
        keep = ~hit & (nxt >= 0)
        todo, up = todo[keep], nxt[keep]
    return out


def self_time_us(cpu: pd.DataFrame, parent: np.ndarray) -> np.ndarray:
    dur = cpu["dur_us"].to_numpy(float)
    child_sum = np.zeros(len(cpu))
    has_parent = parent >= 0
    np.add.at(child_sum, parent[has_parent], dur[has_parent])
    # NB: clipped at 0: children that overrun their parent by clock rounding give no negative time.
    return np.clip(dur - child_sum, 0.0, None)


def innermost_region(cpu: pd.DataFrame, annotations: pd.DataFrame,
                     skip: Callable[[str], bool]) -> np.ndarray:
    """Name of the innermost user range (record_function / NVTX) enclosing each op, or ""."""
    regions = np.full(len(cpu), "", dtype=object)
    if not len(cpu) or not len(annotations):
        return regions
    ann = annotations[[not skip(n) for n in annotations["name"]]]
    if not len(ann):
        return regions
    both = pd.concat([
        pd.DataFrame({"pid": ann["pid"], "tid": ann["tid"], "ts_us": ann["ts_us"],
                      "dur_us": ann["dur_us"], "name": ann["name"], "op": -1}),
        pd.DataFrame({"pid": cpu["pid"], "tid": cpu["tid"], "ts_us": cpu["ts_us"],
                      "dur_us": cpu["dur_us"], "name": "", "op": np.arange(len(cpu))}),
    ], ignore_index=True)
    thread = thread_codes(both)
    order = _thread_order(both, thread)
    ts = both["ts_us"].to_numpy(float)
    end = ts + both["dur_us"].to_numpy(float)
    op = both["op"].to_numpy()
    names = both["name"].to_numpy(dtype=object)
    stack: list[int] = []
    current = None
    for i in order.tolist():
        if thread[i] != current:
            stack, current = [], thread[i]
        while stack and end[stack[-1]] <= ts[i]:
            stack.pop()
        if op[i] < 0:
            stack.append(i)
        elif stack:
            regions[op[i]] = names[stack[-1]]
    return regions
