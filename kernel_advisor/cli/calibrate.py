"""`advisor calibrate`: measure this machine's achievable ceilings and cache them."""
from __future__ import annotations

from typing import Annotated

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from kernel_advisor.cli import console
from kernel_advisor.cli.app import app, guarded
from kernel_advisor.cli.options import Device
from kernel_advisor.render.units import fmt_frac_pct, fmt_si, fmt_time_s

CALIBRATE_JSON_VERSION = 1


def _calibrated(device: str, force: bool, show_progress: bool):
    """The cached calibration, measured first (a progress bar on stderr) when there is none or --force."""
    from kernel_advisor import api

    columns = (TextColumn("{task.description:<24}"), BarColumn(), MofNCompleteColumn(),
               TimeElapsedColumn())
    with Progress(*columns, console=console.err, transient=True,
                  disable=not show_progress) as progress:
        tasks: list = []

        def on_step(done: int, total: int, description: str) -> None:
            if not tasks:  # only once measuring starts: a cached calibration shows no bar
                tasks.append(progress.add_task("calibrating", total=None))
            progress.update(tasks[0], completed=done, total=total, description=description)

        return api.device_calibration(device, force, on_step)


def _datasheet_rate(sheet, path: str | None) -> float | None:
    if sheet is None:
        return None
    if path is None:
        return sheet.bandwidth_bytes_per_s
    return sheet.peak_flops_per_s[path] if path in sheet.native_paths else None


def _table(cal, sheet) -> Table:
    from kernel_advisor.render.profile_render import spread_text

    m = cal.measured
    table = Table(title=f"Achievable ceilings — {m.device_name} ({m.device_type}"
                        f"{', driver ' + m.driver if m.driver else ''})")
    for header in ("benchmark", "size", "median", "spread", "achieved", "datasheet", "% of sheet"):
        table.add_column(header, no_wrap=True,
                         justify="left" if header in ("benchmark", "size") else "right")
    for step in cal.measurements:
        unit = "B/s" if step.path is None else "FLOP/s"
        sheet_rate = _datasheet_rate(sheet, step.path)
        spread = "–" if step.spread_frac is None else spread_text(step.spread_frac)
        table.add_row(step.step, step.size, fmt_time_s(step.median_s), spread,
                      fmt_si(step.rate_per_s, unit), fmt_si(sheet_rate, unit),
                      fmt_frac_pct(step.rate_per_s / sheet_rate if sheet_rate else None))
    return table


def _entry_text(device_type: str, name: str, driver: str) -> str:
    if device_type == "cuda":
        return f"the entry for {name}, driver {driver or 'unknown'}"
    return f"the entry for the CPU model {name}"


@app.command("calibrate")
@guarded
def calibrate_cmd(
    device: Annotated[Device, typer.Option(help="What to measure; auto picks cuda when a GPU is visible.")] = Device.auto,
    json_out: Annotated[bool, typer.Option("--json", help="Print machine-readable JSON instead of a table.")] = False,
    force: Annotated[bool, typer.Option("--force", help="Measure again even when a cached calibration exists.")] = False,
) -> None:
    """Measure copy bandwidth and matmul FLOP/s per dtype; cache them for the roofline."""
    from kernel_advisor import api

    result = _calibrated(device.value, force, show_progress=not json_out)
    cal, sheet, identity, path = result.calibration, result.datasheet, result.identity, result.path
    if json_out:
        spec = result.spec
        typer.echo(api.json_text({
            "device": {"type": result.device_type, "name": identity.name, "driver": identity.driver},
            "cache_file": str(path), "from_cache": result.from_cache, "calibration": cal.to_json(),
            "ceilings": result.ceilings.to_dict(),
            "datasheet": None if sheet is None else {"id": spec.id, "citation": spec.source,
                                                     "ceilings": sheet.to_dict()},
        }, CALIBRATE_JSON_VERSION))
        return
    from kernel_advisor.render.profile_render import calibration_text, calibration_warning

    measured = calibration_text(cal.measured.provenance())
    entry = _entry_text(result.device_type, identity.name, identity.driver)
    if result.from_cache:
        console.err.print(f"cached calibration ({measured}); --force measures again")
    console.out.print(_table(cal, sheet))
    console.out.print(f"ceilings: {result.ceilings.source} — {measured}")
    console.out.print(f"{'read' if result.from_cache else 'wrote'} {path}: {entry}", soft_wrap=True)
    console.out.print(f"every later profile on this device uses it; a different device or driver gets its own "
                      f"entry in {path.parent}", soft_wrap=True)
    noisy = calibration_warning({"ceilings": {"calibration": cal.measured.provenance()}})
    if noisy:
        console.warn(noisy)
