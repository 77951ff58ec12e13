"""`advisor kernels`: list the reference kernels and check them for correctness."""
from __future__ import annotations

import math
from typing import Annotated, Optional

import typer
from rich.table import Table
from rich.text import Text

from kernel_advisor.cli import console
from kernel_advisor.cli.app import app, guarded, new_typer
from kernel_advisor.cli.options import Device
from kernel_advisor.errors import CorrectnessError

KERNELS_JSON_VERSION = 2  # 2: an object with "kernels" (was a bare list), schema_version first


kernels_app = new_typer(
    help="List the reference kernels (Triton, CUDA) with what they replace and whether they "
    "run here; `advisor kernels verify` checks them against float64 PyTorch.",
    invoke_without_command=True,
)
app.add_typer(kernels_app, name="kernels")

MAX_FAILURES_SHOWN = 8


DeviceOption = Annotated[Device, typer.Option(
    "--device", help="Where to run or check: auto picks cuda when a GPU is visible; Triton "
    "kernels run on cpu through TRITON_INTERPRET=1.")]
JsonOption = Annotated[bool, typer.Option("--json", help="Print machine-readable JSON.")]


def _device(choice: Device) -> str:
    """auto: cuda when a GPU is visible; cuda is taken as asked, each kernel's status says what it lacks."""
    from kernel_advisor import api

    return api.resolve_device(choice.value, gpus=None).type


@kernels_app.callback(invoke_without_command=True)
@guarded
def kernels_root(ctx: typer.Context, device: DeviceOption = Device.auto,
                 as_json: JsonOption = False) -> None:
    """List the reference kernels (the default); see `advisor kernels verify --help`."""
    if ctx.invoked_subcommand is None:
        _print_list(_device(device), as_json)


@kernels_app.command("list")
@guarded
def list_cmd(device: DeviceOption = Device.auto, as_json: JsonOption = False) -> None:
    """List the reference kernels: what they replace, dtypes, backward, status here."""
    _print_list(_device(device), as_json)


def _print_list(device: str, as_json: bool) -> None:
    from kernel_advisor import api

    specs, tables = api.kernel_specs(), api.kernel_routes()
    if as_json:
        typer.echo(api.json_text({"device": device, "kernels": [_spec_dict(s, device, tables) for s in specs]},
                                 KERNELS_JSON_VERSION))
        return
    table = Table(title=f"Reference kernels (status on {device})")
    table.add_column("id", no_wrap=True)
    table.add_column("replaces", overflow="fold")
    table.add_column("dtypes", no_wrap=True)
    table.add_column("bwd", no_wrap=True)
    table.add_column("to eager at (host-bound | device-bound step)", no_wrap=True)
    table.add_column("status", overflow="fold", ratio=1)
    for spec in specs:
        reason = spec.reason_if_unsatisfied(device)
        dtypes = ",".join(_SHORT_DTYPES.get(d, d) for d in spec.dtypes)
        table.add_row(spec.id, _replaces(spec), dtypes,
                      "yes" if spec.has_backward else "no", _eager_text(tables.get(spec.id)),
                      "ok" if reason is None else Text(reason, style="yellow"))
    console.out.print(table)
    console.out.print("to eager at: measured shapes where the kernel lost to eager, counting host "
                      "time (host-bound step) or GPU time alone (device-bound); try-kernel runs "
                      "eager for calls nearest to them (benchmarks/data/kernels.csv; `-` not "
                      "measured).")


def _eager_text(table) -> str:
    counts = _route_counts(table)
    return ", ".join(f"{p} {c['eager_host_bound']}|{c['eager_device_bound']}/{c['measured']}"
                     for p, c in counts.items()) or "-"


_SHORT_DTYPES = {"float32": "fp32", "float16": "fp16", "bfloat16": "bf16", "float64": "fp64"}


def _replaces(spec) -> str:
    return ", ".join(spec.replaces_aten + tuple(f"<{p}>" for p in spec.replaces_patterns))


def _spec_dict(spec, device: str, tables: dict) -> dict:
    return {"id": spec.id, "title": spec.title, "backend": spec.capability.backend,
            "replaces_aten": list(spec.replaces_aten),
            "replaces_patterns": list(spec.replaces_patterns), "dtypes": list(spec.dtypes),
            "has_backward": spec.has_backward, "memory_bound": spec.memory_bound,
            "device": device, "status": spec.reason_if_unsatisfied(device) or "ok",
            # shape classes try-kernel leaves to eager: measured losses (with their source), limits
            "loses": [{"shape_class": loss.shape_class.name, "figure": loss.figure, "source": loss.source,
                       "path": loss.path} for loss in spec.loses],
            "refuses": [c.name for c in spec.refuses],
            # measured routes: {pass: {"eager_host_bound": shapes routed to eager in a host-bound
            # step, "eager_device_bound": in a device-bound one, "measured": shapes}}
            "measured_routes": _route_counts(tables.get(spec.id))}


def _route_counts(table) -> dict:
    if table is None:
        return {}
    host, device = table.eager_counts(True), table.eager_counts(False)
    return {p: {"eager_host_bound": e, "eager_device_bound": device[p][0], "measured": n}
            for p, (e, n) in host.items()}


@kernels_app.command("verify")
@guarded
def verify_cmd(
    ids: Annotated[Optional[list[str]], typer.Argument(
        help="Kernel ids (see `advisor kernels`); all that can run here when omitted.")] = None,
    device: DeviceOption = Device.auto,
    as_json: JsonOption = False,
) -> None:
    """Check kernels against float64 PyTorch: outputs, gradients, gradcheck, determinism.

    Exit code 3 when any kernel fails, 2 when a named kernel cannot run on this device.
    """
    from kernel_advisor import api

    where = _device(device)
    progress, report = console.step_progress(enabled=not as_json)
    with progress:
        results = api.verified_kernels(ids or (), where, report, console.warn)
    if as_json:
        # Plain echo: rich would wrap long failure reasons inside JSON strings.
        typer.echo(api.json_text({"device": where, "results": [r.to_dict() for r in results]}, KERNELS_JSON_VERSION))
    else:
        _print_results(results, where)
    failed = [r.kernel_id for r in results if not r.passed]
    if failed:
        raise CorrectnessError(f"{len(failed)} of {len(results)} kernels failed verification on "
                               f"{where}: {', '.join(failed)}",
                               "see the failing cases; do not A/B-test a kernel that fails")


def _print_results(results, device: str) -> None:
    table = Table(title=f"Kernel verification on {device} (float64 reference)")
    for header in ("id", "result", "passed", "worst fwd rel err", "worst bwd rel err"):
        table.add_column(header, no_wrap=True)
    for r in results:
        passed = sum(c.passed for c in r.cases)
        table.add_row(r.kernel_id, Text("PASS", style="green") if r.passed else Text("FAIL", style="red"),
                      f"{passed}/{len(r.cases)}", _worst(r.cases, "forward"),
                      _worst(r.cases, "backward"))
    console.out.print(table)
    for r in results:
        for note in r.notes:
            console.out.print(f"note: {note}")
        failures = [c for c in r.cases if not c.passed]
        for c in failures[:MAX_FAILURES_SHOWN]:
            variant = f" [{c.variant}]" if c.variant else ""
            console.out.print(f"FAIL {r.kernel_id} {c.check} {c.dtype} {list(c.shape)}{variant}: "
                              f"{c.reason}", markup=False, highlight=False)
        if len(failures) > MAX_FAILURES_SHOWN:
            console.out.print(f"... and {len(failures) - MAX_FAILURES_SHOWN} more failing cases "
                              f"of {r.kernel_id} (--json lists all)")


def _worst(cases, check: str) -> str:
    # NaN marks a reference below the atol floor or a run that raised: nothing to rank.
    finite = [c.rel_err_norm for c in cases if c.check == check and math.isfinite(c.rel_err_norm)]
    return f"{max(finite):.1e}" if finite else "-"
