"""`advisor try-kernel MODEL.py [KERNEL_ID …]`: substitute, prove correct, measure the gain."""
from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import Annotated, Optional

import typer

from kernel_advisor.cli import console
from kernel_advisor.cli.app import app, guarded
from kernel_advisor.cli.options import AutocastOption, DType, Device, Mode, autocast_name
from kernel_advisor.errors import CorrectnessError


class CompileMode(str, Enum):
    default = "default"
    reduce_overhead = "reduce-overhead"
    max_autotune = "max-autotune"
    max_autotune_no_cudagraphs = "max-autotune-no-cudagraphs"


@app.command("try-kernel")
@guarded
def try_kernel_cmd(
    model: Annotated[Path, typer.Argument(help="Model file: `class Model` + `get_inputs()` (KernelBench), or use --entry.")],
    kernel_ids: Annotated[Optional[list[str]], typer.Argument(help="Reference kernels to try (see `advisor kernels`); none: every one that applies.")] = None,
    all_: Annotated[bool, typer.Option("--all", help="Also try every kernel together in one run.")] = False,
    impl: Annotated[Optional[str], typer.Option(help="Your kernel as FILE.py:FUNCTION, taking the --op's aten arguments.")] = None,
    op: Annotated[Optional[str], typer.Option(help="The aten op --impl replaces, e.g. aten::_softmax.")] = None,
    device: Annotated[Device, typer.Option(help="Where to run; auto picks cuda when a GPU is visible.")] = Device.auto,
    mode: Annotated[Mode, typer.Option(help="inference: no_grad forward; train: forward + backward (gradients are checked too).")] = Mode.inference,
    dtype: Annotated[DType, typer.Option(help="Cast the model and floating inputs; keep leaves them as written.")] = DType.keep,
    autocast: AutocastOption = None,
    entry: Annotated[Optional[str], typer.Option(help="Function in the file returning (model, inputs).")] = None,
    seed: Annotated[int, typer.Option(help="Seed for model init; correctness draws use seed+1, seed+2, …")] = 0,
    draws: Annotated[int, typer.Option(help="Fresh random input draws through the correctness gate.")] = 3,
    reps: Annotated[int, typer.Option(help="Timed rounds; every variant runs once per round.")] = 30,
    warmup: Annotated[int, typer.Option(help="Untimed steps per variant before timing.")] = 3,
    compile_mode: Annotated[CompileMode, typer.Option(help="torch.compile mode of the compiled variant.")] = CompileMode.default,
    no_compile: Annotated[bool, typer.Option("--no-compile", help="Leave out the torch.compile variant.")] = False,
    check_only: Annotated[bool, typer.Option("--check-only", help="Run the correctness gate only; no timing.")] = False,
    run: Annotated[Optional[Path], typer.Option(help="Run directory (default: the latest run, if it is of this model).")] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print machine-readable JSON instead of tables.")] = False,
) -> None:
    """Swap reference kernels (or yours) into the real model, gate them against eager and float64, and time them."""
    from kernel_advisor import api  # checks the counts and --impl/--op before anything heavy runs

    progress, report = console.step_progress(enabled=not json_out)
    with progress:
        result = api.try_kernel_file(model, kernel_ids or (), together=all_, impl=impl, op=op, device=device.value,
                                     mode=mode.value, dtype=dtype.value, autocast=autocast_name(autocast), entry=entry,
                                     seed=seed, draws=draws, reps=reps, warmup=warmup, compile=not no_compile,
                                     compile_mode=compile_mode.value, check_only=check_only, run=run,
                                     progress=report, warn=console.warn)
    _print(result, json_out)
    failed = result.report.failed_candidates
    if failed:
        first = failed[0]
        more = f" (and {len(failed) - 1} more, listed in the table)" if len(failed) > 1 else ""
        raise CorrectnessError(f"{first.name} FAILED the correctness gate: {first.reason}{more}",
                               "a failed kernel is never reported as faster; fix it and try again")


def _print(result, json_out: bool) -> None:
    from kernel_advisor.render.try_render import note_lines, try_table

    if json_out:
        console.out.print_json(data=result.payload)
        return
    console.out.print(try_table(result.report))
    for line in note_lines(result.report):
        console.out.print(f"• {line}", soft_wrap=True, highlight=False, markup=False)
    if result.saved_to is not None:
        console.out.print(f"saved {result.saved_to}", highlight=False, markup=False)

