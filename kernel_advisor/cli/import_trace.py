"""`advisor import TRACE.json[.gz]`: a run directory from a trace captured elsewhere."""
from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from kernel_advisor.cli import console
from kernel_advisor.cli.app import app, guarded
from kernel_advisor.cli.options import Mode
from kernel_advisor.errors import UserInputError


@app.command("import")
@guarded
def import_cmd(
    trace: Annotated[Path, typer.Argument(help="Chrome trace written by torch.profiler (record_shapes=True), .json or .json.gz.")],
    out: Annotated[Optional[Path], typer.Option(help="Run directory to write (default .advisor/runs/<trace>-<time>).")] = None,
    mode: Annotated[Mode, typer.Option(help="What the trace captured (recorded for the rules).")] = Mode.train,
    top: Annotated[int, typer.Option(help="Hotspots to show.")] = 15,
    steps: Annotated[Optional[int], typer.Option(
        help="Steps the trace covers. With no ProfilerStep markers the whole trace counts as N steps "
             "(per-step figures = totals / N); with markers, only the last N marked steps are kept.")] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print machine-readable JSON instead of tables.")] = False,
) -> None:
    """Build a run from a trace captured elsewhere, without running any model."""
    from kernel_advisor.collect.rundir import default_run_dir, load_run
    from kernel_advisor.pipeline import import_to_run
    from kernel_advisor.render.profile_render import hotspot_table, profile_json, run_warnings, summary_line

    if not trace.is_file():
        raise UserInputError(f"trace {trace} does not exist", "pass the .json or .json.gz that torch.profiler wrote")
    if steps is not None and steps < 1:
        raise UserInputError(f"--steps must be at least 1 (got {steps})", "pass the steps the trace covers, e.g. --steps 5")
    stem = trace.name.split(".")[0] or "trace"
    run_dir = out if out is not None else default_run_dir(stem)
    run_dir, meta = import_to_run(trace, {"mode": mode.value, "source_trace": str(trace), "steps": steps}, run_dir)
    run = load_run(run_dir)
    if json_out:
        console.out.print_json(profile_json(run.meta, run.ops, run_dir, top))
    else:
        console.out.print(hotspot_table(run.ops, top, title=f"Top hotspots — imported {trace.name}"))
        console.out.print(summary_line(run.meta, run_dir))
    for line in run_warnings(run.meta):  # last, where they are seen
        console.warn(line)
