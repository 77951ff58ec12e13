"""`advisor profile MODEL.py`: profile a model and save the run."""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Optional

import typer

from kernel_advisor.cli import console
from kernel_advisor.cli.options import AutocastOption, Device, DType, Mode, autocast_name, check_seed, check_top
from kernel_advisor.cli.app import app, guarded
from kernel_advisor.collect.counts import validate_counts
from kernel_advisor.errors import UserInputError
from kernel_advisor.records.run import RunMeta

if TYPE_CHECKING:
    from kernel_advisor.distributed.launch import DistributedRequest


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
    validate_counts(warmup, steps)
    check_top(top)
    check_seed(seed)
    if out is not None:  # before the model runs: a bad --out must not cost a profile
        from kernel_advisor.collect.rundir import check_writable_target

        check_writable_target(out)
    if threads is not None:
        from kernel_advisor.api import use_threads

        use_threads(threads)  # before any distributed launch: a bad N is refused before the model runs
    rendezvous = _rendezvous(nnodes, node_rank, rdzv_endpoint, rdzv_id, rdzv_backend)
    if nproc_per_node != 1 or fsdp or rendezvous.multi_node:
        if threads is not None:
            raise UserInputError("--threads is not supported with --nproc-per-node or --fsdp yet",
                                 "profile one process with --threads, or set OMP_NUM_THREADS")
        _check_distributed_options(nproc_per_node, fsdp, mode, autocast_name(autocast), with_stack)
        from kernel_advisor.distributed.launch import DistributedRequest

        request = DistributedRequest(model=model, entry=entry, device=device.value, mode=mode.value,
                                     dtype=dtype.value, warmup=warmup, steps=steps, seed=seed,
                                     nproc_per_node=nproc_per_node, fsdp=fsdp, rendezvous=rendezvous)
        if rendezvous.multi_node:
            _profile_node(request, out, json_out)
            return
        _profile_distributed(request, out, top, json_out)
        return
    from kernel_advisor import api
    from kernel_advisor.analyze.regions import region_view
    from kernel_advisor.render.profile_render import hotspot_table, profile_json, region_table, run_warnings, summary_line

    progress, report = console.step_progress(enabled=not json_out)
    with progress:
        run = api.profile_file(model, entry=entry, device=device.value, dtype=dtype.value, mode=mode.value,
                               steps=steps, warmup=warmup, out=out, seed=seed, autocast=autocast_name(autocast),
                               progress=report, with_stack=with_stack, threads=threads)
    run_dir, meta = run.path, run.meta
    for where in meta.nonfinite_outputs:
        console.warn(f"the model's output has non-finite values: {where}; profiling went on")
    _warn_mutated_inputs(run)
    shown = region_view(run, region) if region else run
    if json_out:
        console.out.print_json(profile_json(shown.meta, shown.ops, run_dir, top))
    else:
        where = f" in region '{region}'" if region else ""
        console.out.print(hotspot_table(shown.ops, top, title=f"Top hotspots{where} — {Path(model).name} on {RunMeta.of(meta).device_name}"))
        if not region and (run.sequence["region"] != "").any():
            console.out.print(region_table(run.sequence, run.ops))
        console.out.print(summary_line(run.meta, run_dir))
    for line in run_warnings(run.meta):  # last, where they are seen
        console.warn(line)


def _warn_mutated_inputs(run) -> None:
    from kernel_advisor.collect.runner import mutated_inputs_warning

    loaded = getattr(run, "_loaded", None)
    line = mutated_inputs_warning(loaded.mutated_inputs if loaded is not None else [])
    if line:
        console.warn(line)


def _check_distributed_options(nproc_per_node: int, fsdp: bool, mode: Mode, autocast: Optional[str],
                               with_stack: bool = False) -> None:
    if with_stack:
        raise UserInputError("--with-stack is not supported with --nproc-per-node or --fsdp yet",
                             "profile one process with --with-stack")
    if autocast is not None:
        raise UserInputError("--autocast is not supported with --nproc-per-node or --fsdp yet",
                             "profile one process with --autocast, or cast with --dtype")
    if nproc_per_node < 1:
        raise UserInputError(f"--nproc-per-node must be at least 1 (got {nproc_per_node})",
                             "use --nproc-per-node 2 (or more) for a distributed run")
    if fsdp and (nproc_per_node < 2 or mode != Mode.train):
        raise UserInputError("--fsdp shards training across ranks",
                             "use it with --mode train --nproc-per-node 2 (or more)")


def _profile_distributed(request: DistributedRequest, out: Optional[Path], top: int, json_out: bool) -> None:
    """Launch the ranks, then show rank 0's hotspots, the per-rank table and the collectives."""
    from kernel_advisor.collect.rundir import default_run_dir, load_run
    from kernel_advisor.distributed.assemble import load_ranks_document
    from kernel_advisor.distributed.launch import profile_distributed
    from kernel_advisor.render.dist_render import collective_table, distributed_json, distributed_line, rank_table
    from kernel_advisor.render.profile_render import hotspot_table, run_warnings, summary_line

    run_dir = out if out is not None else default_run_dir(request.model.stem)
    progress, report = console.step_progress(enabled=not json_out)
    with progress:
        run_dir, meta = profile_distributed(request, run_dir, report)
    run = load_run(run_dir)
    doc = load_ranks_document(run_dir)
    if json_out:
        console.out.print_json(distributed_json(run.meta, run.ops, run_dir, top, doc))
    else:
        title = f"Top hotspots — rank 0 of {doc['world_size']} — {request.model.name} on {RunMeta.of(meta).device_name}"
        console.out.print(hotspot_table(run.ops, top, title=title))
        console.out.print(rank_table(doc))
        console.out.print(collective_table(doc))
        console.out.print(summary_line(run.meta, run_dir))
        console.out.print(distributed_line(run.meta.distributed))
    for line in run_warnings(run.meta):  # rank 0's
        console.warn(line)


def _rendezvous(nnodes: int, node_rank: Optional[int], endpoint: Optional[str], rdzv_id: Optional[str],
                backend: Optional[str]):
    """torchrun's multi-node options, checked before anything runs (exit 1 on a bad combination)."""
    from kernel_advisor.distributed.rendezvous import Rendezvous, check_rendezvous

    rendezvous = Rendezvous(nnodes, node_rank, endpoint, rdzv_id, backend)
    check_rendezvous(rendezvous)
    return rendezvous


def _profile_node(request: DistributedRequest, out: Optional[Path], json_out: bool) -> None:
    """One node of a multi-node job: its ranks go to a node directory for `advisor merge`."""
    from kernel_advisor.collect.rundir import default_run_dir
    from kernel_advisor.distributed.launch import profile_distributed
    from kernel_advisor.records.base import json_text
    from kernel_advisor.records.node import SCHEMA_VERSION

    name = f"{request.model.stem}-node{request.rendezvous.node_rank if request.rendezvous.node_rank is not None else 'x'}"
    node_dir = out if out is not None else default_run_dir(name)
    progress, report = console.step_progress(enabled=not json_out)
    with progress:
        node_dir, node = profile_distributed(request, node_dir, report)
    if json_out:
        console.out.print_json(json_text({"node_dir": str(node_dir), "node": node}, SCHEMA_VERSION))
        return
    ranks = node["ranks"]
    console.out.print(f"node {node['node_rank']} of {node['nnodes']} ({console.printable(node['hostname'])}): "
                      f"ranks {ranks[0]}–{ranks[-1]} of {node['world_size']} written to {node_dir}")
    console.out.print("merge every node's directory into one run: advisor merge NODE_DIR…")
