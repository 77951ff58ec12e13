"""node.json: what one node of a multi-node `advisor profile --nnodes N` wrote, and nodes.json:
the per-node and per-link figures `advisor merge` made of all of them.

A node directory holds rank<r>/ for the global ranks its agent ran, and node.json: the node
rank, its ranks, the job (world size, rendezvous) and the link measurements its ranks made.
A reader refuses another schema_version or a missing key with one line naming the file.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from kernel_advisor.records.base import RecordError, check_record, read_json, strict

NODE_FILE = "node.json"
NODES_FILE = "nodes.json"
SCHEMA_VERSION = 1
NODE_RERUN = "`advisor profile --nnodes N` on that node"
NODES_RERUN = "`advisor merge`"


@dataclass(frozen=True)
class NodeRecord:
    node_rank: int
    nnodes: int
    world_size: int
    ranks: tuple[int, ...]  # global ranks this node ran, ascending
    hostname: str
    rendezvous: dict  # backend, endpoint, rdzv_id, nnodes, node_rank (as given)
    device: dict  # type, name, driver (rank 0 of the node's run.json)
    # The all-reduce over a group spanning the nodes, timed by every rank of this node
    # (slowest rank's median): world_size, size_bytes, median_s, algbw/busbw_bytes_per_s, ...
    internode_allreduce: dict | None
    created: str
    model: str = ""

    def to_json(self) -> dict[str, Any]:
        return strict({"schema_version": SCHEMA_VERSION, **asdict(self)})

    @staticmethod
    def from_json(data: Any, path: Path | str = NODE_FILE) -> "NodeRecord":
        required = [k for k in NodeRecord.__dataclass_fields__ if k != "model"]
        doc = check_record(data, path, SCHEMA_VERSION, required, NODE_RERUN)
        return NodeRecord(**{**{k: doc[k] for k in required}, "ranks": tuple(int(r) for r in doc["ranks"]),
                             "model": str(doc.get("model", ""))})

    @staticmethod
    def read(node_dir: Path) -> "NodeRecord":
        path = Path(node_dir) / NODE_FILE
        if not path.is_file():
            raise RecordError(f"{node_dir} holds no {NODE_FILE}: it is not a node directory",
                              "pass the directories `advisor profile --nnodes N` wrote, one per node")
        return NodeRecord.from_json(read_json(path, NODE_RERUN), path)


@dataclass(frozen=True)
class NodesRecord:
    nnodes: int
    world_size: int
    ranks_per_node: int
    nodes: tuple[dict, ...]  # per node: node_rank, hostname, ranks, step_median_s, straggler_ratio, comm, waiting
    links: tuple[dict, ...]  # per link ("intra-node", "inter-node"): calls, time, busbw, roof, fraction of it
    sources: tuple[str, ...] = field(default_factory=tuple)  # the node directories merged

    def to_json(self) -> dict[str, Any]:
        return strict({"schema_version": SCHEMA_VERSION, **asdict(self)})

    @staticmethod
    def from_json(data: Any, path: Path | str = NODES_FILE) -> "NodesRecord":
        required = ("nnodes", "world_size", "ranks_per_node", "nodes", "links")
        doc = check_record(data, path, SCHEMA_VERSION, required, NODES_RERUN)
        return NodesRecord(int(doc["nnodes"]), int(doc["world_size"]), int(doc["ranks_per_node"]),
                           tuple(doc["nodes"]), tuple(doc["links"]), tuple(doc.get("sources", ())))

    @staticmethod
    def read(run_dir: Path) -> "NodesRecord":
        path = Path(run_dir) / NODES_FILE
        return NodesRecord.from_json(read_json(path, NODES_RERUN), path)
