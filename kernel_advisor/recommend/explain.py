"""--check-compile: does torch.compile see the model as one graph? (torch._dynamo.explain)

Graph breaks split the model into several compiled graphs with eager Python between them:
fusion stops at every break and CUDA graphs cannot span them. The report names each
break's reason and the user's own frames, so "fix graph breaks first" points at lines.
"""
from __future__ import annotations

import contextlib
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence


from kernel_advisor.errors import UserInputError


@dataclass(frozen=True)
class GraphBreak:
    reason: str
    frames: tuple[str, ...]  # "file.py:LINE in function", innermost last

    def where(self) -> str:
        return self.frames[-1] if self.frames else "unknown location"


@dataclass(frozen=True)
class CompileReport:
    graph_count: int
    graph_break_count: int
    op_count: int
    breaks: tuple[GraphBreak, ...]  # one per distinct (reason, location)

    def summary(self, limit: int = 3) -> str:
        if not self.breaks:
            return "none"
        shown = [f"{b.reason.splitlines()[0][:160]} at {b.where()}" for b in self.breaks[:limit]]
        more = len(self.breaks) - limit
        return "; ".join(shown) + (f"; and {more} more" if more > 0 else "")


def _frames(stack: Sequence[Any], model_file: Path | None) -> tuple[str, ...]:
    picked = [f for f in stack if model_file is None or Path(f.filename).resolve() == model_file]
    picked = picked or list(stack)[-2:]
    return tuple(f"{Path(f.filename).name}:{f.lineno} in {f.name}" for f in picked)


def report_from_explain(output: Any, model_file: Path | None = None) -> CompileReport:
    """Map an ExplainOutput (graphs, graph_break_count, break_reasons, op_count) to our record."""
    seen: dict[tuple[str, tuple[str, ...]], GraphBreak] = {}
    for reason in output.break_reasons:
        brk = GraphBreak(str(reason.reason), _frames(reason.user_stack, model_file))
        seen.setdefault((brk.reason, brk.frames), brk)
    return CompileReport(graph_count=int(output.graph_count), graph_break_count=int(output.graph_break_count),
                         op_count=int(output.op_count), breaks=tuple(seen.values()))


def explain_callable(model: Callable, inputs: Sequence[Any], model_file: Path | None = None) -> CompileReport:
    import torch._dynamo

    torch._dynamo.reset()
    try:
        with torch.no_grad():
            output = torch._dynamo.explain(model)(*inputs)
    except Exception as e:  # noqa: BLE001 - Dynamo raises many types; all mean "could not trace"
        raise UserInputError(f"torch._dynamo.explain could not trace the model: {type(e).__name__}: {e}",
                             "run the model eagerly first (`advisor profile`), or drop --check-compile") from None
    finally:
        torch._dynamo.reset()
    return report_from_explain(output, model_file)


def check_compile(model_file: str | Path, entry: str | None = None, device: str = "cpu") -> CompileReport:
    from kernel_advisor.collect.loader import load_model

    # The model's own prints must not land in stdout, where --format json goes.
    with contextlib.redirect_stdout(sys.stderr):
        loaded = load_model(model_file, entry=entry, device=device, dtype="keep", seed=0)
        return explain_callable(loaded.model, loaded.inputs, Path(loaded.path).resolve())
