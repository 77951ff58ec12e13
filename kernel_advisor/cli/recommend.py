"""`advisor recommend [RUN]`: apply the rules to a profiled run; never re-profiles. With
`--measure`, each action is measured in the model (api.advise) and printed beside its prediction."""
from __future__ import annotations

import json
import sys
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Optional

import typer

from kernel_advisor.cli import console
from kernel_advisor.cli.app import app, exit_with_line, guarded
from kernel_advisor.errors import GateExceeded

if TYPE_CHECKING:
    from kernel_advisor.api import Advice


class OutputFormat(str, Enum):
    table = "table"
    json = "json"
    markdown = "markdown"


def _print(advice: Advice, fmt: OutputFormat) -> None:
    """The ranked table (or markdown, or the document), the measured outcomes after it when measured."""
    from kernel_advisor.render.recommend_render import measured_markdown, render_measured
    from kernel_advisor.render.recommend_render import render_markdown, render_table

    report, m = advice.report, advice.measured
    if fmt is OutputFormat.json:
        sys.stdout.write(json.dumps(advice.doc, indent=2, allow_nan=False) + "\n")
    elif fmt is OutputFormat.markdown:
        console.write_out(render_markdown(report) + ("\n" + measured_markdown(report, m) if m is not None else ""))
    else:
        render_table(report, console.out)
        if m is not None:
            render_measured(report, m, console.out)


def _emit_plan(path: Path, advice: Advice) -> None:
    from kernel_advisor import api
    from kernel_advisor.render.recommend_render import speedup_text

    m = advice.measured
    plan = m.measured.plan
    if not plan.actions:
        console.warn(f"--emit-plan: nothing written to {path.name}: no configuration measured faster than eager")
        return
    summary = (f"The plan `advisor recommend --measure` measured for {advice.model_name} ({advice.mode}): "
               f"{' + '.join(plan.actions)}, {speedup_text(plan.outcome)} over eager in {m.measured.timing}.")
    written = api.write_plan_module(path, plan.actions, advice.mode, summary)
    print(console.printable(f"advisor: wrote the plan as code to {written}"), file=console.err.file, flush=True)


def _gate(advice: Advice, limit_pct: float | None) -> None:
    pct = advice.report.total_saving_pct or 0.0
    if limit_pct is not None and pct > limit_pct:
        raise GateExceeded(f"the estimated gain is {pct:.1f} % of the step, above --fail-if-gain-above {limit_pct:g}",
                           "apply the top recommendations, or raise the limit")


@app.command("recommend")
@guarded
def recommend_command(
    run: Annotated[Optional[str], typer.Argument(help="Run directory (default: the latest run).")] = None,
    rules: Annotated[Optional[list[Path]], typer.Option(
        "--rules", help="Extra rule file or directory of .yaml files (repeatable).")] = None,
    fmt: Annotated[OutputFormat, typer.Option("--format", help="Output format.")] = OutputFormat.table,
    fail_if_gain_above: Annotated[Optional[float], typer.Option(
        "--fail-if-gain-above", min=0.0, metavar="PCT",
        help="Exit with code 5 when the estimated total gain is above PCT % of the step (CI gate).")] = None,
    check_compile_flag: Annotated[bool, typer.Option(
        "--check-compile", help="Run torch._dynamo.explain on the model and rank graph-break fixes first.")] = False,
    top: Annotated[int, typer.Option("--top", min=1, help="Hotspots to explain; with --measure, also the "
                                     "number of recommendations (best predicted first) whose actions are measured.")] = 10,
    measure: Annotated[bool, typer.Option(
        "--measure", help="Search the model's configurations (each recommended action, every compile mode, "
                          "channels_last, bundled kernels, their combinations): gate each against eager, time it "
                          "in the user's loop, plan the fastest (docs/measure.md).")] = False,
    budget_s: Annotated[Optional[float], typer.Option(
        "--budget-s", min=1.0, metavar="S", help="With --measure: the search's wall time, compiles included; what "
                                                 "cannot fit is skipped and says so.")] = None,
    also: Annotated[Optional[list[str]], typer.Option(
        "--also", metavar="ACTION", help="With --measure: also search this action (e.g. "
                                         "kernel:cuda.cross_entropy, float8), recommended or not (repeatable).")] = None,
    emit_plan: Annotated[Optional[Path], typer.Option(
        "--emit-plan", metavar="FILE.py", help="With --measure: write the measured plan as a module with "
                                               "apply_plan(model, example_inputs) -> model.")] = None,
    region: Annotated[Optional[str], typer.Option(
        "--region", help="Only ops inside this NVTX / record_function region (name or glob); gains stay % of the whole step; not saved to recommendations.json.")] = None,
) -> None:
    """Rank what to do about the hotspots of a profiled run: library, torch.compile, Triton, CUDA, or leave it."""
    from kernel_advisor import api

    progress, report = console.step_progress(enabled=measure, lines_when_piped=True)
    try:
        with progress:
            advice = api.advise(run, rules, top=top, region=region, check_compile=check_compile_flag, measure=measure,
                                budget_s=budget_s, also=tuple(also or ()), emit_plan=emit_plan, progress=report,
                                terminal=console.diagnostics_to, warn=console.warn)
    except api.MeasureInterrupted as e:
        exit_with_line(f"interrupted — what was measured so far is in {e.experiments} (\"complete\": false); "
                       "recommendations.json is unchanged", 130)
    if emit_plan is not None:
        _emit_plan(emit_plan, advice)
    _print(advice, fmt)
    advice.save()  # not a --region's view: it must not replace the whole run's saved plan
    _gate(advice, fail_if_gain_above)
