"""`advisor import TRACE.json[.gz]` or `advisor import DIR/`: a run directory from a trace (or one
job's per-rank traces) captured elsewhere."""
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
    trace: Annotated[Path, typer.Argument(help="Chrome trace written by torch.profiler (record_shapes=True), .json or .json.gz; or a directory of one job's per-rank traces.")],
    out: Annotated[Optional[Path], typer.Option(help="Run directory to write (default .advisor/runs/TRACE-TIME: the trace file's name and the time).")] = None,
    mode: Annotated[Mode, typer.Option(help="What the trace captured (recorded for the rules).")] = Mode.train,
    top: Annotated[int, typer.Option(help="Hotspots to show.")] = 15,
    steps: Annotated[Optional[int], typer.Option(
        help="Steps the trace covers. With no ProfilerStep markers the whole trace counts as N steps "
             "(per-step figures = totals / N); with markers, only the last N marked steps are kept.")] = None,
    workers: Annotated[Optional[int], typer.Option(metavar="N", help="With a directory: processes reading rank traces at once (default one per CPU, at most 8); each holds one trace.")] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print machine-readable JSON instead of tables.")] = False,
) -> None:
    """Build a run from a trace captured elsewhere, without running any model."""
    check_top(top)
    from kernel_advisor import api
    from kernel_advisor.render.profile_render import hotspot_table, profile_json, run_warnings, summary_line

    progress, report = console.step_progress(enabled=not json_out and trace.is_dir())
    with progress:
        run = api.import_trace(trace, mode=mode.value, out=out, steps=steps, workers=workers, progress=report)
    if trace.is_dir():
        _print_ranks(run, trace, top, json_out)
    elif json_out:
        console.out.print_json(profile_json(run.meta, run.ops, run.path, top))
    else:
        console.out.print(hotspot_table(run.ops, top, title=f"Top hotspots — imported {trace.name}"))
        console.out.print(summary_line(run.meta, run.path))
    for line in run_warnings(run.meta):  # last, where they are seen
        console.warn(line)


def _print_ranks(run, directory: Path, top: int, json_out: bool) -> None:
    """Rank 0's hotspots, the per-rank table, the collectives and their skew across ranks."""
    from kernel_advisor.render.dist_render import distributed_json
    from kernel_advisor.render.dist_render import multirank_output, skew_table

    doc = run.ranks
    if json_out:
        console.out.print_json(distributed_json(run.meta, run.ops, run.path, top, doc))
        return
    title = f"Top hotspots — rank 0 of {doc['world_size']} — imported {directory.name}"
    for part in multirank_output(run, doc, top, title, after=[skew_table(doc)]):
        console.out.print(part)
