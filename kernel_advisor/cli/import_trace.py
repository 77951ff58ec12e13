"""`advisor import TRACE.json[.gz]`: a run directory from a trace captured elsewhere."""
from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from kernel_advisor.cli import console
from kernel_advisor.cli.app import app, guarded
from kernel_advisor.cli.options import Mode, check_top


@app.command("import")
@guarded
def import_cmd(
    trace: Annotated[Path, typer.Argument(help="Chrome trace written by torch.profiler (record_shapes=True), .json or .json.gz.")],
    out: Annotated[Optional[Path], typer.Option(help="Run directory to write (default .advisor/runs/TRACE-TIME: the trace file's name and the time).")] = None,
    mode: Annotated[Mode, typer.Option(help="What the trace captured (recorded for the rules).")] = Mode.train,
    top: Annotated[int, typer.Option(help="Hotspots to show.")] = 15,
    steps: Annotated[Optional[int], typer.Option(
        help="Steps the trace covers. With no ProfilerStep markers the whole trace counts as N steps "
             "(per-step figures = totals / N); with markers, only the last N marked steps are kept.")] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print machine-readable JSON instead of tables.")] = False,
) -> None:
    """Build a run from a trace captured elsewhere, without running any model."""
    check_top(top)
    if out is not None:
        from kernel_advisor.collect.rundir import check_writable_target

        check_writable_target(out)
    from kernel_advisor import api
    from kernel_advisor.render.profile_render import hotspot_table, profile_json, run_warnings, summary_line

    run = api.import_trace(trace, mode=mode.value, out=out, steps=steps)
    run_dir = run.path
    if json_out:
        console.out.print_json(profile_json(run.meta, run.ops, run_dir, top))
    else:
        console.out.print(hotspot_table(run.ops, top, title=f"Top hotspots — imported {trace.name}"))
        console.out.print(summary_line(run.meta, run_dir))
    for line in run_warnings(run.meta):  # last, where they are seen
        console.warn(line)
