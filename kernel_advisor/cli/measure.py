"""`advisor recommend --measure`: the CLI side of measured advice (kernel_advisor/measure)."""
from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from kernel_advisor import actions
from kernel_advisor.cli import console
from kernel_advisor.errors import UserInputError
from kernel_advisor.api import measure_document
from kernel_advisor.measure.from_run import load_run_model
from kernel_advisor.measure.session import MeasureOptions
from kernel_advisor.recommend.report import Report
from kernel_advisor.render.measured_render import measured_markdown, render_measured
from kernel_advisor.render.recommend_render import render_markdown, render_table


@dataclass(frozen=True)
class MeasureArgs:
    measure: bool
    top: int
    budget_s: float | None
    also: tuple[str, ...]
    region: str | None


def check_args(args: MeasureArgs) -> None:
    if not args.measure:
        raise UserInputError("--budget-s and --also only apply with --measure", "add --measure")
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
    options = MeasureOptions(budget_s=args.budget_s)
    progress, report_cb = console.step_progress(enabled=True, lines_when_piped=True)
    with progress:
        doc, m = measure_document(report, doc, loaded, mode, options, args.top, args.also, report_cb)
    if fmt == "json":
        sys.stdout.write(json.dumps(doc, indent=2, allow_nan=False) + "\n")
    elif fmt == "markdown":
        console.write_out(render_markdown(report) + "\n" + measured_markdown(report, m))
    else:
        render_table(report, console.out)
        render_measured(report, m, console.out)
    return doc
