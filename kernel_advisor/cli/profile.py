"""`advisor profile MODEL.py`: profile a model and save the run."""
from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import Annotated, Optional

import typer

from kernel_advisor.cli import console
from kernel_advisor.cli.app import app, guarded
from kernel_advisor.collect.loader import load_model
from kernel_advisor.collect.nvtx_mirror import mirror_user_nvtx
from kernel_advisor.collect.pipeline import profile_to_run
from kernel_advisor.collect.profiler import validate_counts
from kernel_advisor.collect.rundir import default_run_dir, load_run
from kernel_advisor.render.profile_render import hotspot_table, profile_json, summary_line


class Device(str, Enum):
    auto = "auto"
    cuda = "cuda"
    cpu = "cpu"


class Mode(str, Enum):
    inference = "inference"
    train = "train"


class DType(str, Enum):
    keep = "keep"
    float32 = "float32"
    bfloat16 = "bfloat16"
    float16 = "float16"


@app.command("profile")
@guarded
def profile_cmd(
    model: Annotated[Path, typer.Argument(help="Model file: `class Model` + `get_inputs()` (KernelBench), or use --entry.")],
    device: Annotated[Device, typer.Option(help="Where to run; auto picks cuda when a GPU is visible.")] = Device.auto,
    mode: Annotated[Mode, typer.Option(help="inference: no_grad forward; train: forward + backward of a scalar loss.")] = Mode.inference,
    dtype: Annotated[DType, typer.Option(help="Cast the model and floating inputs; keep leaves them as written.")] = DType.keep,
    warmup: Annotated[int, typer.Option(help="Steps run before profiling (compile, lazy init, autotuning).")] = 3,
    steps: Annotated[int, typer.Option(help="Profiled steps.")] = 5,
    out: Annotated[Optional[Path], typer.Option(help="Run directory to write (default .advisor/runs/<model>-<time>).")] = None,
    top: Annotated[int, typer.Option(help="Hotspots to show.")] = 15,
    entry: Annotated[Optional[str], typer.Option(help="Function in the file returning (model, inputs).")] = None,
    seed: Annotated[int, typer.Option(help="Seed for model init and inputs.")] = 0,
    json_out: Annotated[bool, typer.Option("--json", help="Print machine-readable JSON instead of tables.")] = False,
) -> None:
    """Profile MODEL on the device, attribute device time to ops, classify each hotspot on the roofline."""
    validate_counts(warmup, steps)
    with mirror_user_nvtx():  # @nvtx.annotate decorators are applied when the file is imported
        loaded = load_model(model, entry=entry, device=device.value, dtype=dtype.value, seed=seed)
    run_dir = out if out is not None else default_run_dir(loaded.path.stem)
    args = {"device": loaded.device.type, "mode": mode.value, "dtype": dtype.value, "warmup": warmup,
            "steps": steps, "seed": seed, "entry": entry}
    progress, report = console.step_progress(enabled=not json_out)
    with progress:
        run_dir, meta = profile_to_run(loaded, args, run_dir, report)
    for where in meta.get("nonfinite_outputs", []):
        console.warn(f"the model's output has non-finite values: {where}; profiling went on")
    run = load_run(run_dir)
    if json_out:
        console.out.print_json(profile_json(run.meta, run.ops, run_dir, top))
        return
    console.out.print(hotspot_table(run.ops, top, title=f"Top hotspots — {loaded.path.name} on {meta['device']['name']}"))
    console.out.print(summary_line(run.meta, run_dir))
