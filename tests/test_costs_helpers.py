"""Shared helpers for the cost-model tests: record real calls with torch.profiler exactly as
the advisor does (chrome trace, record_shapes=True) and price them with op_cost."""
from __future__ import annotations

import json
import os
import tempfile
from dataclasses import dataclass
from typing import Callable

import torch
from torch.profiler import ProfilerActivity, profile

from kernel_advisor.analyze.costs import op_cost
from kernel_advisor.analyze.costs.registry import OpCost


@dataclass(frozen=True)
class Event:
    name: str
    shapes: list
    dtypes: list
    concrete: list

    def cost(self) -> OpCost | None:
        return op_cost(self.name, self.shapes, self.dtypes, self.concrete)


def record(fn: Callable[[], object]) -> list[Event]:
    """Every cpu_op event of one run of fn, in trace order, as ops.csv would hold them."""
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        fn()
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "trace.json")
        prof.export_chrome_trace(path)
        with open(path) as fh:
            trace = json.load(fh)
    events = [e for e in trace["traceEvents"] if e.get("cat") == "cpu_op"]
    events.sort(key=lambda e: (e["ts"], -e.get("dur", 0)))
    return [Event(e["name"], e["args"].get("Input Dims", []), e["args"].get("Input type", []),
                  e["args"].get("Concrete Inputs", [])) for e in events]


def first(events: list[Event], name: str) -> Event:
    return next(e for e in events if e.name == name)


def recorded(name: str, fn: Callable[[], object]) -> Event:
    """The first event named `name` recorded while running fn."""
    return first(record(fn), name)


def tensor_bytes(*tensors: object) -> int:
    """Bytes of every tensor among the arguments (nested tuples/lists flattened)."""
    total = 0
    for t in tensors:
        if isinstance(t, torch.Tensor):
            total += t.numel() * t.element_size()
        elif isinstance(t, (list, tuple)):
            total += tensor_bytes(*t)
    return total


DTYPES = [torch.float32, torch.float16, torch.bfloat16]
DTYPE_NAMES = {torch.float32: "float32", torch.float16: "float16", torch.bfloat16: "bfloat16",
               torch.float64: "float64"}
