"""`advisor try-kernel MODEL.py [KERNEL_ID …]`: substitute, prove correct, measure the gain."""
from __future__ import annotations

import dataclasses
import os
import sys
from enum import Enum
from pathlib import Path
from typing import Annotated, Optional

import typer

from kernel_advisor.cli import console
from kernel_advisor.cli.app import app, guarded
from kernel_advisor.cli.options import AutocastOption, DType, Device, Mode, autocast_name
from kernel_advisor.errors import CorrectnessError, UserInputError


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
    _check_counts(draws, reps, warmup)
    if (impl is None) != (op is None):
        raise UserInputError("--impl and --op go together", "e.g. --impl my.py:softmax --op aten::_softmax")
    from kernel_advisor.collect.loader import load_model, resolve_device

    dev = resolve_device(device.value)
    if dev.type == "cpu":
        _use_triton_interpreter()
    # After TRITON_INTERPRET is set: Triton reads it when a kernel is decorated.
    from kernel_advisor.trykernel.driver import run_try_kernel
    from kernel_advisor.trykernel.candidates import TryOptions

    loaded = load_model(model, entry=entry, device=dev.type, dtype=dtype.value, seed=seed,
                        autocast=autocast_name(autocast))
    options = TryOptions(mode=mode.value, draws=draws, reps=reps, warmup=warmup, compile=not no_compile,
                         compile_mode=compile_mode.value, check_only=check_only, seed=seed)
    args = {"kernel_ids": list(kernel_ids or []), "all": all_, "impl": impl, "op": op, "device": dev.type,
            "dtype": dtype.value, "autocast": autocast_name(autocast), "entry": entry, **dataclasses.asdict(options)}
    progress, report_cb = console.step_progress(enabled=not json_out)
    with progress:
        result = run_try_kernel(loaded, list(kernel_ids or []), all_, impl, op, run, options, args, report_cb)
    _print(result, json_out)
    failed = result.report.failed_candidates
    if failed:
        first = failed[0]
        more = f" (and {len(failed) - 1} more, listed in the table)" if len(failed) > 1 else ""
        raise CorrectnessError(f"{first.name} FAILED the correctness gate: {first.reason}{more}",
                               "a failed kernel is never reported as faster; fix it and try again")


def _use_triton_interpreter() -> None:
    # Triton decides interpreter-or-GPU when a kernel is decorated: before any kernel is loaded.
    os.environ["TRITON_INTERPRET"] = "1"
    common = sys.modules.get("reference_kernels.triton._common")
    if common is not None and not common.INTERPRETED:
        console.warn("Triton kernels were imported before TRITON_INTERPRET=1 was set; on CPU they will "
                     "fail — export TRITON_INTERPRET=1 before running advisor")


def _check_counts(draws: int, reps: int, warmup: int) -> None:
    if draws < 1:
        raise UserInputError(f"--draws must be at least 1 (got {draws})", "use --draws 3, for example")
    if reps < 3:
        raise UserInputError(f"--reps must be at least 3 for a confidence interval (got {reps})",
                             "use --reps 30, for example")
    if warmup < 0:
        raise UserInputError(f"--warmup cannot be negative (got {warmup})", "use --warmup 3, for example")


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

