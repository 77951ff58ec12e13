"""`advisor recommend [RUN]`: apply the rules to a profiled run; never re-profiles."""
from __future__ import annotations

import json
import sys
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Optional

import typer

from kernel_advisor.cli.app import app, guarded
from kernel_advisor.cli import console
from kernel_advisor.cli.console import out
from kernel_advisor.errors import GateExceeded, UserInputError

if TYPE_CHECKING:
    from kernel_advisor.records.run import RunMeta
    from kernel_advisor.recommend.explain import CompileReport
    from kernel_advisor.recommend.report import Report


class OutputFormat(str, Enum):
    table = "table"
    json = "json"
    markdown = "markdown"


def _compile_check(meta: RunMeta) -> CompileReport:
    import torch

    from kernel_advisor.recommend.explain import check_compile

    file = meta.model_file
    if not file or not Path(file).is_file():
        raise UserInputError(f"--check-compile needs the model file, and run.json names {file!r}, "
                             "which is not here",
                             "run from the directory you profiled in, or drop --check-compile")
    ran_on_cuda = meta.device_type == "cuda"
    device = "cuda" if ran_on_cuda and torch.cuda.is_available() else "cpu"
    return check_compile(file, entry=meta.model_entry, device=device)


def _emit(report: Report, doc: dict, fmt: OutputFormat) -> None:
    from kernel_advisor.render.recommend_render import render_markdown, render_table

    if fmt is OutputFormat.json:
        sys.stdout.write(json.dumps(doc, indent=2, allow_nan=False) + "\n")
    elif fmt is OutputFormat.markdown:
        console.write_out(render_markdown(report))
    else:
        render_table(report, out)


def _gate(report: Report, limit_pct: float | None) -> None:
    pct = report.total_saving_pct or 0.0
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
    from kernel_advisor.analyze.regions import region_view
    from kernel_advisor.api import recommendations_document, save_recommendations
    from kernel_advisor.cli.measure import MeasureArgs, check_args, measure_and_render
    from kernel_advisor.collect.rundir import load_run, resolve_run

    margs = MeasureArgs(measure=measure, top=top, budget_s=budget_s, also=tuple(also or ()), region=region,
                        emit_plan=emit_plan)
    measuring = measure or bool(also) or budget_s is not None or emit_plan is not None
    if measuring:
        check_args(margs)
    run_dir = resolve_run(run)
    loaded = load_run(run_dir)
    if region:
        loaded = region_view(loaded, region)
    compile_report = _compile_check(loaded.meta) if check_compile_flag else None
    report, doc = recommendations_document(loaded, rules, top, compile_report)
    if measuring:
        doc = measure_and_render(report, doc, loaded.meta, Path(run_dir), margs, fmt.value)
    else:
        _emit(report, doc, fmt)
    if not region:  # a region's view must not replace the whole run's saved plan
        save_recommendations(Path(run_dir), doc)
    _gate(report, fail_if_gain_above)
