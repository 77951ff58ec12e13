"""`advisor compare RUN_A RUN_B`: step time, per-op deltas, hotspots that came or went."""
from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from kernel_advisor.cli import console
from kernel_advisor.cli.app import app, guarded
from kernel_advisor.cli.options import check_top


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
    check_top(top, least=1)
    from kernel_advisor import api
    from kernel_advisor.render.compare_render import compare_json, compare_renderables, compare_warnings

    comparison = api.compare_dirs(run_a, run_b)
    if json_out:
        print(compare_json(comparison, top), flush=True)
    else:
        for renderable in compare_renderables(comparison, top):
            console.out.print(renderable)
    for line in compare_warnings(comparison):  # last, where it is seen
        console.warn(line)
