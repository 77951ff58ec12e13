"""Ranks agree on extra warm-up: every timed round runs collectives, so a rank that timed one
more round than its peers would leave their collectives unmatched (seen on gloo as
"Connection closed by peer" in backward; on NCCL it would hang until the timeout)."""
import os
import socket

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from kernel_advisor.collect.profiler import _drifting_on_any_rank
from kernel_advisor.collect.step_time import is_drifting, time_until_steady

DRIFTING = [3.0, 2.0, 1.0]  # first third 3x the last: still warming up
STEADY = [1.0, 1.0, 1.0]


def test_time_until_steady_asks_the_given_check():
    rounds = iter([DRIFTING, STEADY, STEADY])
    # the rank's own times are steady, but a peer still drifts: time once more, as the peer does
    calls = []

    def peers_drift_once(times):
        calls.append(times)
        return len(calls) == 1

    times, state = time_until_steady(lambda: next(rounds), drifting=peers_drift_once)
    assert times == STEADY and state.extra_warmup_steps == 3 and len(calls) == 2


def test_one_process_keeps_its_own_check():
    assert _drifting_on_any_rank(torch.device("cpu")) is is_drifting


def _rank(rank: int, port: int, results) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=2)
    try:
        check = _drifting_on_any_rank(torch.device("cpu"))
        # rank 0 still drifts, rank 1 is steady: both must time again; then neither drifts
        results[rank] = (check(DRIFTING if rank == 0 else STEADY), check(STEADY))
    finally:
        dist.destroy_process_group()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_ranks_agree_on_another_round():
    with mp.Manager() as manager:
        results = manager.dict()
        mp.start_processes(_rank, args=(_free_port(), results), nprocs=2, join=True, start_method="spawn")
        assert dict(results) == {0: (True, False), 1: (True, False)}
