"""`advisor profile MODEL.py`: profile a model and save the run."""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Optional

import typer

from kernel_advisor.cli import console
from kernel_advisor.cli.app import app, guarded
from kernel_advisor.cli.options import AutocastOption, Device, DType, Mode, autocast_name, check_top

if TYPE_CHECKING:
    from kernel_advisor.api import Run


@app.command("profile")
@guarded
def profile_cmd(
    model: Annotated[Path, typer.Argument(help="Model file: `class Model` + `get_inputs()` (KernelBench), or use --entry.")],
    device: Annotated[Device, typer.Option(help="Where to run; auto picks cuda when a GPU is visible.")] = Device.auto,
    mode: Annotated[Mode, typer.Option(help="inference: no_grad forward; train: forward + backward of a scalar loss.")] = Mode.inference,
    dtype: Annotated[DType, typer.Option(help="Cast the model and floating inputs; keep leaves them as written.")] = DType.keep,
    autocast: AutocastOption = None,
    warmup: Annotated[int, typer.Option(help="Steps run before profiling (compile, lazy init, autotuning).")] = 3,
    steps: Annotated[int, typer.Option(help="Profiled steps.")] = 5,
    out: Annotated[Optional[Path], typer.Option(help="Run directory to write (default .advisor/runs/MODEL-TIME: the model file's name and the time).")] = None,
    top: Annotated[int, typer.Option(help="Hotspots to show.")] = 15,
    entry: Annotated[Optional[str], typer.Option(help="Function in the file returning (model, inputs).")] = None,
    seed: Annotated[int, typer.Option(help="Seed for model init and inputs.")] = 0,
    json_out: Annotated[bool, typer.Option("--json", help="Print machine-readable JSON instead of tables.")] = False,
    nproc_per_node: Annotated[int, typer.Option("--nproc-per-node", help="Ranks to launch through torch.distributed.run (one GPU each, NCCL; gloo on CPU). Train mode wraps the model in DDP unless the file defines wrap_distributed(model).")] = 1,
    fsdp: Annotated[bool, typer.Option("--fsdp", help="With --nproc-per-node > 1 in train mode: shard with FSDP2 instead of DDP.")] = False,
    nnodes: Annotated[int, typer.Option("--nnodes", help="Nodes in the job: run this command on each node (torchrun's rendezvous options below); each writes a node directory, `advisor merge` joins them.")] = 1,
    node_rank: Annotated[Optional[int], typer.Option("--node-rank", help="This node's rank, 0 … nnodes-1 (static rendezvous, torchrun's default).")] = None,
    rdzv_endpoint: Annotated[Optional[str], typer.Option("--rdzv-endpoint", help="HOST:PORT every node's agent meets at (with --nnodes > 1).")] = None,
    rdzv_id: Annotated[Optional[str], typer.Option("--rdzv-id", help="The job's id, the same on every node (e.g. $SLURM_JOB_ID).")] = None,
    rdzv_backend: Annotated[Optional[str], typer.Option("--rdzv-backend", help="static (the default: nodes numbered by --node-rank) or c10d (numbered as they join).")] = None,
    region: Annotated[Optional[str], typer.Option(help="Show only ops inside this NVTX / record_function region (name or glob); the run keeps everything.")] = None,
    threads: Annotated[Optional[int], typer.Option(metavar="N", help="torch's intra-op threads (torch.set_num_threads); on a busy machine, fewer than the idle cores keeps the timings steady.")] = None,
    with_stack: Annotated[bool, typer.Option("--with-stack", help="Record Python call stacks in the trace (Perfetto, HTA); slows the steps that record shapes (on a GPU the kernels are timed in a pass without it).")] = False,
) -> None:
    """Profile MODEL on the device, attribute device time to ops, classify each hotspot on the roofline."""
    check_top(top)
    from kernel_advisor import api  # checks every other option before anything heavy runs

    rendezvous = {"nnodes": nnodes, "node_rank": node_rank, "endpoint": rdzv_endpoint, "rdzv_id": rdzv_id,
                  "backend": rdzv_backend}
    progress, report = console.step_progress(enabled=not json_out)
    with progress:
        run = api.profile_file(model, entry=entry, device=device.value, dtype=dtype.value, mode=mode.value,
                               steps=steps, warmup=warmup, out=out, seed=seed, autocast=autocast_name(autocast),
                               progress=report, with_stack=with_stack, threads=threads,
                               nproc_per_node=nproc_per_node, fsdp=fsdp, rendezvous=rendezvous)
    if not isinstance(run, api.Run):  # one node of a multi-node job
        _print_node(run, json_out)
        return
    if run.meta.distributed:
        _print_ranks(run, model, top, json_out)
    else:
        _print_run(run, model, top, region, json_out)
    from kernel_advisor.render.profile_render import run_warnings

    for line in run_warnings(run.meta):  # last, where they are seen (rank 0's for ranks)
        console.warn(line)


def _print_run(run: Run, model: Path, top: int, region: Optional[str], json_out: bool) -> None:
    from kernel_advisor.render.profile_render import hotspot_table, profile_json, region_table, summary_line

    for where in run.meta.nonfinite_outputs:
        console.warn(f"the model's output has non-finite values: {where}; profiling went on")
    if run.input_warning:
        console.warn(run.input_warning)
    shown = run.in_region(region) if region else run
    if json_out:
        console.out.print_json(profile_json(shown.meta, shown.ops, run.path, top))
        return
    where = f" in region '{region}'" if region else ""
    title = f"Top hotspots{where} — {Path(model).name} on {run.meta.device_name}"
    console.out.print(hotspot_table(shown.ops, top, title=title))
    if not region and (run.sequence["region"] != "").any():
        console.out.print(region_table(run.sequence, run.ops))
    console.out.print(summary_line(run.meta, run.path))


def _print_ranks(run: Run, model: Path, top: int, json_out: bool) -> None:
    """Rank 0's hotspots, the per-rank table and the collectives."""
    from kernel_advisor.render.dist_render import collective_table, distributed_json, distributed_line, rank_table
    from kernel_advisor.render.profile_render import hotspot_table, summary_line

    doc = run.ranks
    if json_out:
        console.out.print_json(distributed_json(run.meta, run.ops, run.path, top, doc))
        return
    title = f"Top hotspots — rank 0 of {doc['world_size']} — {Path(model).name} on {run.meta.device_name}"
    console.out.print(hotspot_table(run.ops, top, title=title))
    console.out.print(rank_table(doc))
    console.out.print(collective_table(doc))
    console.out.print(summary_line(run.meta, run.path))
    console.out.print(distributed_line(run.meta.distributed))


def _print_node(node, json_out: bool) -> None:
    """One node of a multi-node job: its ranks went to a node directory for `advisor merge`."""
    if json_out:
        console.out.print_json(node.to_json())
        return
    info, ranks = node.node, node.node["ranks"]
    console.out.print(f"node {info['node_rank']} of {info['nnodes']} ({console.printable(info['hostname'])}): "
                      f"ranks {ranks[0]}–{ranks[-1]} of {info['world_size']} written to {node.path}")
    console.out.print("merge every node's directory into one run: advisor merge NODE_DIR…")
