"""`advisor merge NODE_DIR…`: one run from the node directories of a multi-node job."""
from __future__ import annotations

from pathlib import Path
from typing import Annotated, List, Optional

import typer

from kernel_advisor.cli import console
from kernel_advisor.cli.app import app, guarded
from kernel_advisor.cli.options import check_top


@app.command("merge")
@guarded
def merge_cmd(
    node_dirs: Annotated[List[Path], typer.Argument(help="The directories `advisor profile --nnodes N` wrote, one per node.")],
    out: Annotated[Optional[Path], typer.Option(help="Run directory to write (default .advisor/runs/NAME-merged-TIME).")] = None,
    top: Annotated[int, typer.Option(help="Hotspots to show.")] = 15,
    json_out: Annotated[bool, typer.Option("--json", help="Print machine-readable JSON instead of tables.")] = False,
) -> None:
    """Merge a multi-node job's node directories: ranks, nodes, inter- against intra-node communication."""
    check_top(top)
    from kernel_advisor import api
    from kernel_advisor.render.dist_render import distributed_json
    from kernel_advisor.render.dist_render import link_table, multirank_output, node_table
    from kernel_advisor.render.profile_render import run_warnings

    run = api.merge_nodes(node_dirs, out=out)
    doc, nodes = run.ranks, run.nodes
    if json_out:
        console.out.print_json(distributed_json(run.meta, run.ops, run.path, top, {**doc, "nodes": nodes}))
    else:
        title = f"Top hotspots — rank 0 of {doc['world_size']} on {nodes['nnodes']} nodes"
        for part in multirank_output(run, doc, top, title, before=[node_table(nodes), link_table(nodes)]):
            console.out.print(part)
    for line in run_warnings(run.meta):
        console.warn(line)
