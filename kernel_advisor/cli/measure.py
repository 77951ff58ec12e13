"""`advisor recommend --measure`: the CLI side of measured advice (kernel_advisor/measure)."""
from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from kernel_advisor import actions
from kernel_advisor.api import measure_document
from kernel_advisor.cli import console
from kernel_advisor.errors import UserInputError
from kernel_advisor.experiment.search import SearchOptions
from kernel_advisor.measure.from_run import load_run_model
from kernel_advisor.recommend.report import Report
from kernel_advisor.records.run import RunMeta
from kernel_advisor.render.measured_render import measured_markdown, render_measured
from kernel_advisor.render.recommend_render import render_markdown, render_table


@dataclass(frozen=True)
class MeasureArgs:
    measure: bool
    top: int
    budget_s: float | None
    also: tuple[str, ...]
    region: str | None
    emit_plan: Path | None = None


def check_args(args: MeasureArgs) -> None:
    if not args.measure:
        raise UserInputError("--budget-s, --also and --emit-plan only apply with --measure", "add --measure")
    if args.emit_plan is not None:
        from kernel_advisor.cli.outputs import check_output_file
        from kernel_advisor.experiment.apply import check_plan_path

        check_output_file(args.emit_plan, (".py",), force=True, option="--emit-plan")
        check_plan_path(args.emit_plan)  # and an existing .py only when we wrote it
    if args.region:
        raise UserInputError("--measure applies actions to the whole model, not to a --region",
                             "drop --region to measure, or drop --measure to view the region")
    for name in args.also:
        if not actions.is_known(name) or name in (actions.NONE, "kernel:auto"):
            raise UserInputError(f"--also {name}: not an action",
                                 f"use one of {', '.join(actions.action_names())} or kernel:<id>")


def measure_and_render(report: Report, doc: dict[str, Any], meta: Mapping[str, Any], run_dir: Path,
                       args: MeasureArgs, fmt: str) -> dict[str, Any]:
    """Measure, print in `fmt`, and return the JSON document with the measurements."""
    loaded, mode, notes = load_run_model(meta, run_dir)
    for note in notes:
        console.warn(note)
    options = SearchOptions(budget_s=args.budget_s)
    progress, report_cb = console.step_progress(enabled=True, lines_when_piped=True)
    try:
        with progress:
            doc, m = measure_document(report, doc, loaded, mode, options, args.top, args.also, report_cb, run_dir,
                                      RunMeta.of(meta).device_busy_frac, console.diagnostics_to, meta=meta)
    except KeyboardInterrupt:
        from kernel_advisor.cli.app import exit_with_line
        from kernel_advisor.records.experiments import FILE

        exit_with_line(f"interrupted — what was measured so far is in {run_dir / FILE} (\"complete\": false); "
             "recommendations.json is unchanged", 130)
    if args.emit_plan is not None:
        _emit_plan(args.emit_plan, m, loaded, mode)
    if fmt == "json":
        sys.stdout.write(json.dumps(doc, indent=2, allow_nan=False) + "\n")
    elif fmt == "markdown":
        console.write_out(render_markdown(report) + "\n" + measured_markdown(report, m))
    else:
        render_table(report, console.out)
        render_measured(report, m, console.out)
    return doc


def _emit_plan(path: Path, m, loaded, mode: str) -> None:
    from kernel_advisor.experiment.apply import write_plan_module
    from kernel_advisor.render.measured_render import speedup_text

    plan = m.measured.plan
    if not plan.actions:
        console.warn(f"--emit-plan: nothing written to {path.name}: no configuration measured faster than eager")
        return
    summary = (f"The plan `advisor recommend --measure` measured for {loaded.path.name} ({mode}): "
               f"{' + '.join(plan.actions)}, {speedup_text(plan.outcome)} over eager in {m.measured.timing}.")
    written = write_plan_module(path, plan.actions, mode, summary)
    print(console.printable(f"advisor: wrote the plan as code to {written}"), file=console.err.file, flush=True)
