"""`advisor compare RUN_A RUN_B`: step time, per-op deltas, hotspots that came or went."""
from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from kernel_advisor.cli import console
from kernel_advisor.cli.app import app, guarded
from kernel_advisor.cli.options import check_top
from kernel_advisor.errors import UserInputError


@app.command("compare")
@guarded
def compare_cmd(
    run_a: Annotated[Path, typer.Argument(help="The \"before\" run directory.")],
    run_b: Annotated[Path, typer.Argument(help="The \"after\" run directory.")],
    top: Annotated[int, typer.Option(help="Op rows to show, largest change first.")] = 15,
    json_out: Annotated[bool, typer.Option("--json", help="Print machine-readable JSON instead of tables.")] = False,
) -> None:
    """Compare two runs of the same model: B against A, per step.

    Ops are matched by name + input shapes + dtypes. When A has recommendations.json, each
    recommendation's estimated gain is set against what changed in B.
    """
    check_top(top)
    from kernel_advisor.analyze.compare import compare_runs
    from kernel_advisor.analyze.run_extras import load_recommendations
    from kernel_advisor.collect.rundir import load_run, resolve_run
    from kernel_advisor.render.compare_render import compare_json, compare_renderables, compare_warnings

    if top < 1:
        raise UserInputError(f"--top must be at least 1, got {top}", "pass --top 1 or more")
    dir_a, dir_b = resolve_run(run_a), resolve_run(run_b)
    a, b = load_run(dir_a), load_run(dir_b)
    comparison = compare_runs(a, b, load_recommendations(dir_a))
    if json_out:
        print(compare_json(comparison, top), flush=True)
    else:
        for renderable in compare_renderables(comparison, top):
            console.out.print(renderable)
    for line in compare_warnings(comparison):  # last, where it is seen
        console.warn(line)
