"""`advisor roofline [RUN] -o roofline.png|svg`: the run's roofline chart as an image."""
from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from kernel_advisor.cli import console
from kernel_advisor.cli.app import app, guarded


@app.command("roofline")
@guarded
def roofline_cmd(
    run: Annotated[Optional[Path], typer.Argument(help="Run directory (default: the latest run).")] = None,
    output: Annotated[Optional[Path], typer.Option("--output", "-o", help="Image to write, .png or .svg (default RUN/roofline.png).")] = None,
    force: Annotated[bool, typer.Option("--force", help="Replace an existing -o file that is not a .png or .svg image.")] = False,
) -> None:
    """Draw the device's roofs and every modelled hotspot, log-log (needs matplotlib)."""
    from kernel_advisor import api
    from kernel_advisor.render.roofline_chart import caption, chart_format, draw_roofline, roofline_data, write_chart

    run_dir = api.run_path(run)
    out = output if output is not None else run_dir / "roofline.png"
    fmt = chart_format(out.suffix)  # before any work: a wrong name fails fast
    api.check_output_file(out, (".png", ".svg"), force, run_dir=run_dir)
    loaded = api.load(run_dir)
    data = roofline_data(loaded.ops, loaded.meta)
    write_chart(draw_roofline(data, fmt), out)
    console.write_out(f"wrote {out}: {caption(data)}\n")
