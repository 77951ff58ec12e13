"""Multi-node jobs: each node's agent writes a node directory; `advisor merge` makes one run of them.

A node directory holds rank<r>/ for the global ranks that node ran (as a one-node run's
ranks do) and node.json (records/node.py). The merge links every rank directory into one
run directory, assembles it as a one-node run is assembled (assemble.assemble_run: rank 0's
tables, ranks.json, run.json "distributed"), and adds nodes.json: per node, and inter-node
against intra-node communication, each on its own roof (links.py).
"""
from __future__ import annotations

import json
import shutil
import time
from pathlib import Path
from typing import Sequence

import pandas as pd

from kernel_advisor.collect.run_meta import run_json
from kernel_advisor.collect.rundir import RunWriter, write_json_atomic
from kernel_advisor.distributed.assemble import (RANKS_FILE, _link_or_copy, assemble_run, json_clean, load_rank,
                                                 rank_dir_name)
from kernel_advisor.distributed.links import INTER, INTRA, internode_roof, intranode_roof, link_rows, node_rows
from kernel_advisor.distributed.merge import aligned_calls, numbered_calls
from kernel_advisor.distributed.rank_output import RANK_FILES
from kernel_advisor.distributed.rendezvous import Rendezvous
from kernel_advisor.errors import AdvisorError, UserInputError
from kernel_advisor.records.node import NODES_FILE, NODE_FILE, NodeRecord, NodesRecord


def _rank_metas(run_tmp: Path) -> list[dict]:
    paths = sorted(run_tmp.glob(f"rank*/{RANK_FILES['rank']}"), key=lambda p: int(p.parent.name[4:]))
    return [json.loads(p.read_text(encoding="utf-8")) for p in paths]


def write_node_record(run_tmp: Path, nproc: int, rendezvous: Rendezvous, model: str) -> dict:
    """node.json for the ranks this agent ran (called once they all exited 0); returns its document."""
    metas = _rank_metas(run_tmp)
    if len(metas) != nproc:
        raise AdvisorError(f"{nproc - len(metas)} of this node's {nproc} ranks exited without writing their results",
                           "rerun with --debug and report it")
    infos = [m["rank"] for m in metas]
    measured = [i.get("internode_allreduce") for i in infos if i.get("internode_allreduce")]
    record = NodeRecord(
        node_rank=int(infos[0]["node_rank"]), nnodes=rendezvous.nnodes, world_size=int(infos[0]["world_size"]),
        ranks=tuple(int(i["rank"]) for i in infos), hostname=str(infos[0]["hostname"]),
        rendezvous=rendezvous.to_json(), device=metas[0]["device"],
        internode_allreduce=max(measured, key=lambda m: m["median_s"]) if measured else None,
        created=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), model=model)
    doc = record.to_json()
    write_json_atomic(run_tmp / NODE_FILE, doc)
    return doc


def check_nodes(dirs: Sequence[Path], records: list[NodeRecord]) -> None:
    """One job, every node once, every rank once: anything else is one UserInputError."""
    first = records[0]
    for d, r in zip(dirs, records):
        same = (r.nnodes, r.world_size, r.rendezvous.get("endpoint"), r.rendezvous.get("rdzv_id"))
        if same != (first.nnodes, first.world_size, first.rendezvous.get("endpoint"), first.rendezvous.get("rdzv_id")):
            raise UserInputError(f"{dirs[0]} and {d} come from different jobs (nodes, world size or rendezvous differ)",
                                 "merge the node directories of one job")
    seen: dict[int, Path] = {}
    for d, r in zip(dirs, records):
        if r.node_rank in seen:
            raise UserInputError(f"node {r.node_rank} appears twice: {seen[r.node_rank]} and {d}",
                                 "pass each node's directory once")
        seen[r.node_rank] = d
    missing = sorted(set(range(first.nnodes)) - set(seen))
    if missing:
        raise UserInputError(f"{len(missing)} of the job's {first.nnodes} nodes are missing: node "
                             f"{', '.join(map(str, missing))}", "pass every node's directory")
    ranks = sorted(r for rec in records for r in rec.ranks)
    if ranks != list(range(first.world_size)):
        raise UserInputError(f"the nodes' ranks are not 0 … {first.world_size - 1} once each", "merge one job's nodes")
    for d, r in zip(dirs, records):
        for rank in r.ranks:
            if not (d / rank_dir_name(rank) / RANK_FILES["rank"]).is_file():
                raise UserInputError(f"{d} lacks {rank_dir_name(rank)}/{RANK_FILES['rank']}",
                                     "profile that node again; its directory is incomplete")


def nodes_record(run_tmp: Path, records: list[NodeRecord], dirs: Sequence[Path]) -> NodesRecord:
    doc = json.loads((run_tmp / RANKS_FILE).read_text(encoding="utf-8"))
    world = records[0].world_size
    results = [load_rank(run_tmp / rank_dir_name(r))[1] for r in range(world)]
    numbered, aligned = numbered_calls(results)
    calls = aligned_calls(numbered, aligned)
    per_node = max(len(r.ranks) for r in records)
    roofs = {INTRA: intranode_roof(doc["interconnect"]), INTER: internode_roof([r.internode_allreduce for r in records])}
    links = link_rows(calls, results[0].steps, 1 if aligned else world, per_node, world, records[0].nnodes, roofs)
    node_of = {rank: rec.node_rank for rec in records for rank in rec.ranks}
    hosts = {rec.node_rank: rec.hostname for rec in records}
    nodes = node_rows(pd.DataFrame(doc["ranks"]), node_of, hosts)
    return NodesRecord(records[0].nnodes, world, per_node, tuple(json_clean(nodes)), tuple(json_clean(links)),
                       tuple(str(d) for d in dirs))


def link_evidence(links: Sequence[dict]) -> dict:
    """run.json "distributed" keys for the links: communication per step and busbw against the roof."""
    out = {}
    for link in links:
        key = "internode" if link["link"] == INTER else "intranode"
        out[f"{key}_comm_s"] = link["time_per_step_s"]
        out[f"{key}_busbw_bytes_per_s"] = link["busbw_bytes_per_s"]
        out[f"{key}_roof_bytes_per_s"] = (link.get("roof") or {}).get("busbw_bytes_per_s")
        out[f"{key}_busbw_frac_of_roof"] = link["busbw_frac_of_roof"]
    return out


def merge_node_dirs(dirs: Sequence[Path], out_dir: Path) -> tuple[Path, dict]:
    """One run at `out_dir` from the node directories of one job; returns (run dir, run.json)."""
    dirs = [Path(d) for d in dirs]
    if not dirs:
        raise UserInputError("no node directories given", "pass the directory each node's `advisor profile --nnodes` wrote")
    records = [NodeRecord.read(d) for d in dirs]
    check_nodes(dirs, records)
    writer = RunWriter(out_dir)
    with writer as tmp:
        for d, rec in zip(dirs, records):
            for rank in rec.ranks:
                shutil.copytree(d / rank_dir_name(rank), tmp / rank_dir_name(rank), copy_function=_link_or_copy)
            (tmp / "nodes").mkdir(exist_ok=True)
            _link_or_copy(d / NODE_FILE, tmp / "nodes" / f"node{rec.node_rank}.json")
        meta = assemble_run(tmp, records[0].world_size)
        nodes = nodes_record(tmp, records, dirs)
        write_json_atomic(tmp / NODES_FILE, nodes.to_json())
        meta = meta.with_keys(
            distributed={**meta.distributed, **json_clean({"nnodes": nodes.nnodes, "ranks_per_node": nodes.ranks_per_node,
                                                           **link_evidence(nodes.links)})},
            files={**meta.files, "nodes": NODES_FILE})
        write_json_atomic(tmp / "run.json", run_json(meta))
    return writer.final, meta
