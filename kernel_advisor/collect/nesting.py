"""What encloses each CPU op: its parents and owner on its thread, the step window, the NVTX
region and the autograd node it ran in.

Ops on one thread nest by time: an op starting before the enclosing op ends is its child.
One pass per thread with a stack, O(n log n) for the sort; a million ops take seconds.
Steps nest the same way, as [ts, end) windows of the step markers; backward work nests in
the autograd engine's scope per node (NODE_SCOPE).
"""
from __future__ import annotations

import re
from typing import Callable

import numpy as np
import pandas as pd

from kernel_advisor.collect.options import check_count
from kernel_advisor.collect.trace import TraceData
from kernel_advisor.errors import UserInputError
from kernel_advisor.records.columns import flag_value, text_value


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


_STEP_RES = (re.compile(r"^advisor::step#(\d+)$"), re.compile(r"^ProfilerStep#(\d+)$"))


STEP_MARKERS = ("advisor::step#N", "ProfilerStep#N")  # what each of _STEP_RES is called in messages


# The autograd engine runs each backward node inside a scope named NODE_SCOPE + node; the
# node's own formula runs inside a child event named after the node. What runs in the scope
# but outside that child is the engine's (InputBuffer accumulation, validate_outputs' sum_to),
# and so is everything an ENGINE_NODES node does (AccumulateGrad adds into .grad).
NODE_SCOPE = "autograd::engine::evaluate_function: "


ENGINE_NODES = frozenset({"torch::autograd::AccumulateGrad"})


AUTOGRAD_COLUMNS = ("backward_of", "autograd_node", "autograd_internal")


def step_windows(trace: TraceData) -> pd.DataFrame:
    """Profiled steps as [ts, end) windows: our own step ranges, else ProfilerStep#N, else all."""
    return marked_windows(trace)[0]


def marked_windows(trace: TraceData) -> tuple[pd.DataFrame, str]:
    """(step windows, the marker they come from; "" for the one whole-trace window)."""
    ann = trace.annotations
    for pattern, marker in zip(_STEP_RES, STEP_MARKERS):
        hits = ann[ann["name"].str.match(pattern)] if len(ann) else ann
        if len(hits):
            out = pd.DataFrame({"ts_us": hits["ts_us"].to_numpy(float),
                                "end_us": (hits["ts_us"] + hits["dur_us"]).to_numpy(float)})
            return out.sort_values("ts_us").reset_index(drop=True), marker
    return _whole_trace_window(trace), ""


def _whole_trace_window(trace: TraceData) -> pd.DataFrame:
    events = [df for df in (trace.cpu_ops, trace.gpu) if len(df)]
    if not events:
        return pd.DataFrame({"ts_us": [], "end_us": []})
    lo = min(float(df["ts_us"].min()) for df in events)
    hi = max(float((df["ts_us"] + df["dur_us"]).max()) for df in events)
    return pd.DataFrame({"ts_us": [lo], "end_us": [hi]})


def assign_steps(ts_us: np.ndarray, steps: pd.DataFrame) -> np.ndarray:
    """Index of the step window containing each timestamp, -1 outside every step."""
    starts, ends = steps["ts_us"].to_numpy(float), steps["end_us"].to_numpy(float)
    idx = np.searchsorted(starts, ts_us, side="right") - 1
    ok = (idx >= 0) & (ts_us < ends[np.clip(idx, 0, None)] if len(ends) else False)
    return np.where(ok, idx, -1)


def autograd_columns(cpu: pd.DataFrame, parent: np.ndarray, owner: np.ndarray) -> dict[str, np.ndarray]:
    """Per CPU op: the backward node it ran under, the forward op that node serves, and
    whether it is the engine's own work (see NODE_SCOPE). Forward ops get "", "", False."""
    n = len(cpu)
    node = np.full(n, "", dtype=object)
    backward_of = np.full(n, "", dtype=object)
    internal = np.zeros(n, dtype=bool)
    names = cpu["name"].to_numpy(dtype=object)
    is_scope = cpu["name"].astype(str).str.startswith(NODE_SCOPE).to_numpy(bool) if n else internal.copy()
    if not is_scope.any():
        return {"backward_of": backward_of, "autograd_node": node, "autograd_internal": internal}
    scope_node = np.full(n, "", dtype=object)
    scope_node[is_scope] = [str(x)[len(NODE_SCOPE):] for x in names[is_scope]]
    # The node's own event: a direct child of its scope, named after the node.
    is_apply = np.zeros(n, dtype=bool)
    child = np.flatnonzero(parent >= 0)
    is_apply[child] = is_scope[parent[child]] & (names[child] == scope_node[parent[child]])
    scope = innermost_marked(parent, is_scope)
    apply = innermost_marked(parent, is_apply)
    inside = scope >= 0
    node[inside] = scope_node[scope[inside]]
    in_apply = inside & (apply >= 0) & (parent[np.clip(apply, 0, None)] == scope)
    internal = inside & (~in_apply | np.isin(node, list(ENGINE_NODES)))
    served = _forward_served(cpu, is_scope, is_apply, owner)
    backward_of[inside] = served[scope[inside]]
    return {"backward_of": backward_of, "autograd_node": node, "autograd_internal": internal}


def _forward_served(cpu: pd.DataFrame, is_scope: np.ndarray, is_apply: np.ndarray,
                    owner: np.ndarray) -> np.ndarray:
    """Per node scope, the name of the forward occurrence (owner of the op) that created it.

    A forward op dispatched with grad enabled records the sequence number the next autograd
    node will take, and the node keeps it: the creator is the last op to start with that
    number (an op starting after the node exists records the next number). Sequence numbers
    count per forward thread; the trace does not say which, so the match is per process,
    latest before the backward node.
    """
    n = len(cpu)
    served = np.full(n, "", dtype=object)
    seq = cpu["seq_nr"].to_numpy(np.int64) if "seq_nr" in cpu else np.full(n, -1, dtype=np.int64)
    nodes = np.flatnonzero(is_scope & (seq >= 0))
    cand = np.flatnonzero((seq >= 0) & ~is_scope & ~is_apply)
    if not len(nodes) or not len(cand):
        return served
    ts, pid = cpu["ts_us"].to_numpy(float), cpu["pid"].to_numpy()
    left = pd.DataFrame({"ts": ts[nodes], "pid": pid[nodes], "seq": seq[nodes], "node": nodes}).sort_values("ts")
    right = pd.DataFrame({"ts": ts[cand], "pid": pid[cand], "seq": seq[cand], "fwd": cand}).sort_values("ts")
    found = pd.merge_asof(left, right, on="ts", by=["pid", "seq"], direction="backward")
    found = found[found["fwd"].notna()]
    fwd = found["fwd"].to_numpy(np.int64)
    occ = np.where(owner[fwd] >= 0, owner[fwd], fwd)
    served[found["node"].to_numpy(np.int64)] = cpu["name"].to_numpy(dtype=object)[occ]
    return served


def is_step_name(name: str) -> bool:
    return any(p.match(name) for p in _STEP_RES) or name.startswith("## Call CompiledFxGraph")


def op_label(name: str, backward_of: object = "", autograd_node: object = "",
             autograd_internal: object = False) -> str:
    """An op's name for people: "aten::sum (backward of aten::gru)" for backward work,
    "aten::add_ (autograd engine in AddmmBackward0, backward of aten::gru)" for the engine's
    own, the plain name for forward ops. Takes the columns as read back from CSV (NaN = "")."""
    fwd, node = text_value(backward_of), text_value(autograd_node)
    if not node and not fwd:
        return name
    if flag_value(autograd_internal):
        if node in ENGINE_NODES:
            return f"{name} (gradient accumulation: {node.rsplit('::', 1)[-1]})"
        where = "" if name == node or name.startswith(NODE_SCOPE) else f" in {node}"  # the scope itself
        return f"{name} (autograd engine{where}" + (f", backward of {fwd})" if fwd else ")")
    return f"{name} (backward of {fwd})" if fwd else f"{name} (backward: {node})"


def last_steps(windows: pd.DataFrame, marker: str, wanted: int) -> pd.DataFrame:
    check_count("--steps", wanted, 1, "pass the steps the trace holds")
    if marker and wanted > len(windows):
        raise UserInputError(f"--steps {wanted}, but the trace marks only {len(windows)} step(s) ({marker})",
                             f"pass --steps {len(windows)} or fewer, or leave --steps out")
    return windows.tail(wanted).reset_index(drop=True) if marker else windows
