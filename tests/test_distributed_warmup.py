"""Ranks agree on how many steps they time: extra warm-up rounds and the back-to-back window's
length. Every step runs collectives, so a rank that ran fewer steps than its peers would leave
their collectives unmatched (seen on gloo as "Connection closed by peer" in backward, once the
rank with the shorter window exited; on NCCL it would hang until the timeout)."""
import os
import socket

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from kernel_advisor.collect.loop_timing import MAX_WINDOW_STEPS, MIN_WINDOW_STEPS
from kernel_advisor.collect.profiler import _drifting_on_any_rank, agreed_window
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


def test_one_process_sizes_its_own_window():
    # a 1 ms step: 0.02 s / 0.001 s = 20 steps; a 1 s step: never fewer than the minimum
    assert agreed_window([0.001, 0.001, 0.002], torch.device("cpu")) == 20
    assert agreed_window([1.0], torch.device("cpu")) == MIN_WINDOW_STEPS


def _rank(rank: int, port: int, results) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=2)
    try:
        check = _drifting_on_any_rank(torch.device("cpu"))
        # rank 0 still drifts, rank 1 is steady: both must time again; then neither drifts
        drifts = (check(DRIFTING if rank == 0 else STEADY), check(STEADY))
        # rank 0's steps took 1 s (3-step windows), rank 1's 1 us (200): both take the longer window
        window = agreed_window([1.0] if rank == 0 else [1e-6], torch.device("cpu"))
        results[rank] = (*drifts, window)
    finally:
        dist.destroy_process_group()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_ranks_agree_on_another_round_and_on_the_window():
    with mp.Manager() as manager:
        results = manager.dict()
        mp.start_processes(_rank, args=(_free_port(), results), nprocs=2, join=True, start_method="spawn")
        assert dict(results) == {0: (True, False, MAX_WINDOW_STEPS), 1: (True, False, MAX_WINDOW_STEPS)}
