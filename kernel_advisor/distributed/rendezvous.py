"""torchrun's multi-node options, checked once: how the local agent meets the other nodes.

One node runs `torch.distributed.run --standalone`. A job over N nodes runs one agent per
node with `--nnodes N --rdzv-backend B --rdzv-endpoint HOST:PORT --rdzv-id ID`, plus
`--node-rank R` for the static rendezvous (torchrun's default), where the user numbers the
nodes; the c10d rendezvous numbers them itself, in the order the agents join.
"""
from __future__ import annotations

import re
from dataclasses import asdict, dataclass

from kernel_advisor.collect.options import check_count
from kernel_advisor.errors import UserInputError

BACKENDS = ("static", "c10d")
_ID = re.compile(r"^[A-Za-z0-9_.\-]{1,128}$")
_ENDPOINT = re.compile(r"^(\[[0-9A-Fa-f:]+\]|[A-Za-z0-9_.\-]+):(\d{1,5})$")


@dataclass(frozen=True)
class Rendezvous:
    nnodes: int = 1
    node_rank: int | None = None  # static rendezvous only
    endpoint: str | None = None  # HOST:PORT every agent meets at
    rdzv_id: str | None = None
    backend: str | None = None  # None: torchrun's default, static

    @property
    def multi_node(self) -> bool:
        return self.nnodes > 1

    @property
    def backend_name(self) -> str:
        return self.backend or "static"

    def torchrun_args(self) -> list[str]:
        if not self.multi_node:
            return ["--standalone"]
        args = ["--nnodes", str(self.nnodes), "--rdzv-backend", self.backend_name, "--rdzv-endpoint",
                str(self.endpoint), "--rdzv-id", self.rdzv_id or "none"]
        return args + (["--node-rank", str(self.node_rank)] if self.backend_name == "static" else [])

    def to_json(self) -> dict:
        return {**asdict(self), "backend": self.backend_name}


def check_rendezvous(r: Rendezvous) -> None:
    """One UserInputError (exit 1) for the first option that does not fit the others."""
    given = [name for name, value in (("--node-rank", r.node_rank), ("--rdzv-endpoint", r.endpoint),
                                      ("--rdzv-id", r.rdzv_id), ("--rdzv-backend", r.backend)) if value is not None]
    check_count("--nnodes", r.nnodes, 1, "use --nnodes 2 or more for a multi-node job")
    if not r.multi_node:
        if given:
            raise UserInputError(f"{given[0]} needs --nnodes 2 or more",
                                 "pass --nnodes N for a multi-node job, or drop the rendezvous options")
        return
    if r.backend_name not in BACKENDS:
        raise UserInputError(f"--rdzv-backend {r.backend!r} is not supported", f"use one of {', '.join(BACKENDS)}")
    if r.endpoint is None:
        raise UserInputError(f"--nnodes {r.nnodes} needs --rdzv-endpoint HOST:PORT",
                             "pass the address every node's agent meets at (e.g. the first node's host and a free port)")
    match = _ENDPOINT.match(r.endpoint)
    if match is None or not 0 < int(match.group(2)) < 65536:
        raise UserInputError(f"--rdzv-endpoint {r.endpoint!r} is not HOST:PORT", "e.g. --rdzv-endpoint node0:29500")
    if r.rdzv_id is not None and not _ID.match(r.rdzv_id):
        raise UserInputError(f"--rdzv-id {r.rdzv_id!r} is not a plain job id",
                             "use letters, digits, '.', '_' and '-' (e.g. $SLURM_JOB_ID)")
    if r.backend_name == "c10d":
        if r.node_rank is not None:
            raise UserInputError("--node-rank is not used by the c10d rendezvous (it numbers the nodes as they join)",
                                 "leave --node-rank out, or use --rdzv-backend static")
        return
    if r.node_rank is None:
        raise UserInputError(f"--nnodes {r.nnodes} with the static rendezvous needs --node-rank",
                             f"pass --node-rank 0 … {r.nnodes - 1}, a different one on each node (or --rdzv-backend c10d)")
    if not 0 <= r.node_rank < r.nnodes:
        raise UserInputError(f"--node-rank {r.node_rank} is not below --nnodes {r.nnodes}",
                             f"number the nodes 0 … {r.nnodes - 1}")
