"""`advisor report [RUN] -o report.html`: one self-contained HTML report of a run."""
from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from kernel_advisor.cli import console
from kernel_advisor.cli.app import app, guarded
from kernel_advisor.cli.options import check_top

# render.html_report's DEFAULT_TOP, which imports pandas: --help must not (tests/test_cli_startup.py checks they agree).
DEFAULT_TOP = 50


@app.command("report")
@guarded
def report_cmd(
    run: Annotated[Optional[Path], typer.Argument(help="Run directory (default: the latest run).")] = None,
    output: Annotated[Optional[Path], typer.Option("--output", "-o", help="HTML file to write (default RUN/report.html).")] = None,
    top: Annotated[int, typer.Option(help="Hotspot rows in the table.")] = DEFAULT_TOP,
    force: Annotated[bool, typer.Option("--force", help="Replace an existing -o file that is not an HTML report.")] = False,
) -> None:
    """Write one self-contained HTML report of a run (no network needed).

    Summary, ceilings, roofline, hotspots, regions, recommendations and try-kernel results.
    """
    from kernel_advisor import api
    from kernel_advisor.render.html_report import write_report

    check_top(top, least=1)
    run_dir = api.run_path(run)
    out = output if output is not None else run_dir / "report.html"
    api.check_output_file(out, (".html", ".htm"), force, run_dir=run_dir)
    result = write_report(api.load(run_dir), out, top)
    if result.chart_problem:
        console.warn(f"the report has no roofline chart: {result.chart_problem}")
    console.write_out(f"wrote {result.path}\n")
