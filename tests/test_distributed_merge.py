"""Pure multi-rank arithmetic: bus bandwidth formulas, interval overlap, the rank merge.

Every expected number is worked by hand in the comment next to it.
"""
import math

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings, strategies as st

from kernel_advisor.analyze.ceilings import algbw_bytes_per_s, busbw_bytes_per_s, busbw_factor
from kernel_advisor.distributed.comms import (COMM_COLUMNS, Overlap, comm_overlap, covered_length, intersection_length,
                                              kernel_collective, merge_intervals, message_bytes, normalise_collective)
from kernel_advisor.distributed.merge import STRAGGLER_MIN_RATIO, RankResult, merge_ranks, straggler_ratio


@pytest.mark.parametrize("raw,expected", [
    ("allreduce", "all_reduce"), ("AllReduce", "all_reduce"), ("c10d::allreduce_", "all_reduce"),
    ("gloo:all_reduce", "all_reduce"), ("allreduce_coalesced", "all_reduce"),
    ("_allgather_base", "all_gather"), ("c10d::allgather_into_tensor_coalesced_", "all_gather"),
    ("ReduceScatter", "reduce_scatter"), ("c10d::_reduce_scatter_base_", "reduce_scatter"),
    ("broadcast", "broadcast"), ("Reduce", "reduce"), ("alltoall_base", "all_to_all"),
    ("SendRecv", "send_recv"), ("send", "send_recv"), ("recv", "send_recv"), ("barrier", "barrier"),
    ("gather", "gather"), ("scatter", "scatter"), ("wait", "other"),
])
def test_collective_names_are_normalised(raw, expected):
    assert normalise_collective(raw) == expected


@pytest.mark.parametrize("kernel,expected", [
    ("ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)", "all_reduce"),
    ("ncclDevKernel_ReduceScatter_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)", "reduce_scatter"),
    ("ncclKernel_AllGather_RING_LL_Sum_int8_t(ncclWorkElem)", "all_gather"),
    ("ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)", "send_recv"),
    ("ncclDevKernel_Broadcast_RING_LL(ncclDevKernelArgsStorage<4096ul>)", "broadcast"),
    ("ncclDevKernel", "other"),
])
def test_kernel_names_give_the_collective(kernel, expected):
    assert kernel_collective(kernel) == expected


@pytest.mark.parametrize("collective,n,factor", [
    ("all_reduce", 1, 0.0), ("all_reduce", 2, 1.0), ("all_reduce", 4, 1.5), ("all_reduce", 8, 1.75),  # 2(n-1)/n
    ("all_gather", 2, 0.5), ("all_gather", 8, 0.875), ("reduce_scatter", 7, 6 / 7),  # (n-1)/n
    ("all_to_all", 4, 0.75), ("broadcast", 8, 1.0), ("reduce", 8, 1.0), ("send_recv", 2, 1.0),
])
def test_busbw_factor_follows_nccl_tests(collective, n, factor):
    assert busbw_factor(collective, n) == pytest.approx(factor)


def test_busbw_of_an_eight_rank_all_reduce():
    # 100 MB in 1 ms: algbw 1e11 B/s; x 2*7/8 = 1.75e11 B/s
    assert algbw_bytes_per_s(100e6, 1e-3) == pytest.approx(1e11)
    assert busbw_bytes_per_s("all_reduce", 100e6, 1e-3, 8) == pytest.approx(1.75e11)
    assert math.isnan(algbw_bytes_per_s(100e6, 0.0))
    assert math.isnan(busbw_bytes_per_s("all_reduce", math.nan, 1e-3, 8))


@pytest.mark.parametrize("collective,in_n,out_n,itemsize,group,expected", [
    ("all_reduce", 1000, 1000, 2, 8, 2000),  # 1000 bf16
    ("all_reduce", 1, 1, 4, 2, 4),  # a single fp32
    ("all_gather", 1000, 4000, 4, 4, 16000),  # sized by the gathered output
    ("all_gather", 1000, math.nan, 4, 4, 16000),  # output unknown: 4 x the input
    ("reduce_scatter", 4000, 1000, 2, 4, 8000),  # sized by the input
    ("reduce_scatter", math.nan, 127, 4, 7, 3556),  # 127 * 7 * 4
    ("broadcast", 1823 * 781, 1823 * 781, 4, 2, 1823 * 781 * 4),
])
def test_message_bytes(collective, in_n, out_n, itemsize, group, expected):
    assert message_bytes(collective, in_n, out_n, itemsize, group) == pytest.approx(expected)


def test_message_bytes_unknown_sizes_are_nan():
    assert math.isnan(message_bytes("all_reduce", math.nan, None, 4, 2))
    assert math.isnan(message_bytes("all_reduce", 1000, 1000, math.nan, 2))


# ---------------------------------------------------------------- intervals


def test_merge_and_cover():
    merged = merge_intervals([[5, 6], [0, 2], [1, 3], [3, 4]])
    assert merged.tolist() == [[0, 4], [5, 6]]  # [0,2]+[1,3]+[3,4] touch: one block
    assert covered_length([[0, 2], [1, 3], [5, 6]]) == 4  # [0,3] + [5,6]
    assert covered_length(np.empty((0, 2))) == 0
    assert merge_intervals([[2, 2], [3, 1]]).shape == (0, 2)  # empty and reversed spans drop


def test_intersection_length():
    # [0,10] with [2,4]∪[3,5]∪[8,12] = [2,5] and [8,10]: 3 + 2
    assert intersection_length([[0, 10]], [[2, 4], [3, 5], [8, 12]]) == 5
    assert intersection_length([[0, 1]], [[1, 2]]) == 0
    assert intersection_length([[0, 1]], np.empty((0, 2))) == 0


def test_comm_overlap_hand_worked():
    # comm [0,4] and [10,14] µs; compute [2,12]: hides [2,4] and [10,12] = 4 of 8 µs
    ov = comm_overlap(np.array([[0, 4], [10, 14]]) + 4.4e12, np.array([[2, 12]]) + 4.4e12)
    assert ov.comm_s == pytest.approx(8e-6)
    assert ov.comm_busy_s == pytest.approx(8e-6)
    assert ov.overlapped_s == pytest.approx(4e-6, rel=1e-6)
    assert ov.exposed_s == pytest.approx(4e-6, rel=1e-6)
    assert ov.overlap_frac == pytest.approx(0.5, rel=1e-6)


def test_comm_on_two_streams_counts_its_busy_time_once():
    # [0,4] and [2,6]: 8 µs of kernels, 6 µs when any collective ran; compute [5,7] hides 1
    ov = comm_overlap([[0, 4], [2, 6]], [[5, 7]])
    assert (ov.comm_s, ov.comm_busy_s) == pytest.approx((8e-6, 6e-6))
    assert (ov.overlapped_s, ov.exposed_s) == pytest.approx((1e-6, 5e-6))


def test_no_communication_has_no_overlap_fraction():
    ov = comm_overlap(np.empty((0, 2)), [[0, 5]])
    assert ov.comm_s == 0 and ov.exposed_s == 0 and math.isnan(ov.overlap_frac)


spans = st.lists(st.tuples(st.integers(0, 60), st.integers(1, 20)).map(lambda t: [t[0], t[0] + t[1]]),
                 max_size=12)


@settings(max_examples=200, deadline=None)
@given(comm=spans, compute=spans)
def test_overlap_matches_a_brute_force_timeline(comm, compute):
    # 1-µs cells: cell i is [i, i+1); a cell is busy when an interval covers it
    def cells(intervals):
        busy = np.zeros(100, dtype=bool)
        for a, b in intervals:
            busy[a:b] = True
        return busy

    c, k = cells(comm), cells(compute)
    ov = comm_overlap(np.array(comm, dtype=float).reshape(-1, 2), np.array(compute, dtype=float).reshape(-1, 2))
    assert ov.comm_busy_s == pytest.approx(c.sum() * 1e-6, abs=1e-12)
    assert ov.overlapped_s == pytest.approx((c & k).sum() * 1e-6, abs=1e-12)
    assert ov.exposed_s == pytest.approx((c & ~k).sum() * 1e-6, abs=1e-12)
    assert ov.comm_s == pytest.approx(sum(b - a for a, b in comm) * 1e-6, abs=1e-12)


# ---------------------------------------------------------------- merge


def calls(rows):
    """rows: (collective, ts_us, dur_us, bytes, group_size)."""
    out = pd.DataFrame([{"collective": c, "name": f"nccl {c}", "source": "nccl_kernel", "ts_us": ts, "dur_us": d,
                         "bytes": b, "group_size": g, "dtype": "Float", "stream": "20"} for c, ts, d, b, g in rows],
                       columns=list(COMM_COLUMNS))
    return out


def two_ranks():
    # rank 0: median step 0.100 s; rank 1: median 0.125 s (the straggler, 1.25x)
    r0 = RankResult(rank=0, steps=2, step_wall_s=(0.100, 0.102, 0.098), device_busy_s=0.150,
                    calls=calls([("all_reduce", 0, 2000, 100e6, 2), ("all_reduce", 5000, 1000, 100e6, 2)]),
                    overlap=Overlap(comm_s=3e-3, comm_busy_s=3e-3, overlapped_s=1.5e-3, exposed_s=1.5e-3,
                                    overlap_frac=0.5))
    r1 = RankResult(rank=1, steps=2, step_wall_s=(0.125, 0.120, 0.130), device_busy_s=0.200,
                    calls=calls([("all_reduce", 10, 1500, 100e6, 2), ("all_reduce", 5000, 3000, 100e6, 2)]),
                    overlap=Overlap(comm_s=4.5e-3, comm_busy_s=4.5e-3, overlapped_s=3.0e-3, exposed_s=1.5e-3,
                                    overlap_frac=2 / 3))
    return [r1, r0]  # out of order on purpose: merge sorts by rank


def test_straggler_ratio():
    assert straggler_ratio([0.10, 0.12, 0.11]) == pytest.approx(1.2)  # 0.12 / 0.10
    assert straggler_ratio([0.2, 0.2]) == 1.0


def test_merge_two_ranks_hand_worked():
    m = merge_ranks(two_ranks(), ceiling_bytes_per_s=4.5e11)
    assert m.world_size == 2 and m.calls_aligned
    assert m.straggler_ratio == pytest.approx(1.25)  # 0.125 / 0.100
    assert (m.slowest_rank, m.fastest_rank) == (1, 0)
    assert m.ranks["is_straggler"].tolist() == [False, True]  # 1.25 >= STRAGGLER_MIN_RATIO
    assert m.ranks["device_busy_per_step_s"].tolist() == pytest.approx([0.075, 0.100])  # 0.150/2, 0.200/2
    ar = m.collectives.set_index("collective").loc["all_reduce"]
    assert ar["calls"] == 2 and ar["calls_per_step"] == 1.0  # 2 calls on each rank, 2 steps
    # shortest per call across ranks: min(2000, 1500) + min(1000, 3000) = 2500 µs for 200 MB
    assert ar["transfer_per_step_s"] == pytest.approx(2.5e-3 / 2)
    assert ar["algbw_bytes_per_s"] == pytest.approx(200e6 / 2.5e-3)  # 8e10
    assert ar["busbw_bytes_per_s"] == pytest.approx(8e10)  # n = 2: factor 2*1/2 = 1
    assert ar["busbw_frac_of_ceiling"] == pytest.approx(8e10 / 4.5e11)  # 0.178
    # mean per call: (2000+1500)/2 + (1000+3000)/2 = 3750 µs over 2 steps
    assert ar["time_per_step_s"] == pytest.approx(3.75e-3 / 2)
    ev = m.evidence
    assert ev["comm_time_s"] == pytest.approx((1.5e-3 + 2.25e-3) / 2)  # mean of 3.0/2 and 4.5/2 ms
    assert ev["exposed_comm_s"] == pytest.approx(0.75e-3)  # both ranks 1.5 ms / 2 steps
    assert ev["exposed_comm_pct"] == pytest.approx(0.6)  # 0.75 ms of the 125 ms job step
    assert ev["overlap_frac"] == pytest.approx(0.6)  # (1.5 + 3.0) / (3.0 + 4.5)
    assert ev["allreduce_count"] == 1.0 and ev["mean_allreduce_bytes"] == 100e6
    assert ev["busbw_frac_of_ceiling"] == pytest.approx(8e10 / 4.5e11)
    assert ev["world_size"] == 2 and ev["straggler_ratio"] == pytest.approx(1.25)
    # waits: call 0 min 1500 µs -> rank 0 waited 500; call 1 min 1000 µs -> rank 1 waited 2000; over 2 steps
    assert m.ranks["comm_wait_per_step_s"].tolist() == pytest.approx([0.25e-3, 1.0e-3])
    assert ev["max_comm_wait_s"] == pytest.approx(1.0e-3) and ev["waited_for_rank"] == 0
    assert ev["max_comm_wait_pct"] == pytest.approx(0.8)  # 1 ms of the 125 ms step: under WAIT_MIN_PCT
    assert ev["straggler_ranks"] == [1]  # by step time alone


def test_balanced_ranks_have_no_straggler_mark():
    ranks = two_ranks()
    even = [RankResult(r.rank, r.steps, (0.100, 0.101, 0.1), r.device_busy_s, r.calls, r.overlap) for r in ranks]
    m = merge_ranks(even)
    assert m.straggler_ratio < STRAGGLER_MIN_RATIO and not m.ranks["is_straggler"].any()
    assert m.evidence["busbw_frac_of_ceiling"] is None  # no ceiling given
    assert m.evidence["bus_ceiling_bytes_per_s"] is None


def test_peers_waiting_in_collectives_name_the_straggler():
    # Synchronised ranks: equal 10 ms steps. Rank 1 arrives late at both all-reduces:
    # rank 0's kernels last 2000 and 1500 µs, rank 1's 500 and 500 µs (the transfer alone).
    ranks = [RankResult(0, 2, (0.010, 0.010), 0.008, calls([("all_reduce", 0, 2000, 1e6, 2),
                                                            ("all_reduce", 5000, 1500, 1e6, 2)])),
             RankResult(1, 2, (0.010, 0.010), 0.009, calls([("all_reduce", 3, 500, 1e6, 2),
                                                            ("all_reduce", 5003, 500, 1e6, 2)]))]
    m = merge_ranks(ranks)
    assert m.straggler_ratio == 1.0
    # rank 0 waits (2000 - 500) + (1500 - 500) = 2500 µs over 2 steps = 1.25 ms per step = 12.5 % of 10 ms
    assert m.ranks["comm_wait_per_step_s"].tolist() == pytest.approx([1.25e-3, 0.0])
    assert m.evidence["max_comm_wait_pct"] == pytest.approx(12.5)
    assert m.evidence["waited_for_rank"] == 1 and m.evidence["straggler_ranks"] == [1]
    assert m.ranks["is_straggler"].tolist() == [False, True]


def test_ranks_with_different_calls_are_not_aligned():
    r0, r1 = sorted(two_ranks(), key=lambda r: r.rank)
    r1 = RankResult(1, 2, r1.step_wall_s, r1.device_busy_s, r1.calls.iloc[:1], r1.overlap)
    m = merge_ranks([r0, r1])
    assert not m.calls_aligned and m.ranks["comm_wait_per_step_s"].isna().all()
    assert m.evidence["waited_for_rank"] is None and m.evidence["max_comm_wait_s"] is None
    ar = m.collectives.set_index("collective").loc["all_reduce"]
    # every call stands alone: 300 MB in 2000 + 1000 + 1500 µs
    assert ar["algbw_bytes_per_s"] == pytest.approx(300e6 / 4.5e-3)


def test_ranks_without_communication():
    r0, r1 = sorted(two_ranks(), key=lambda r: r.rank)
    empty = calls([])
    none = Overlap(0.0, 0.0, 0.0, 0.0, math.nan)
    m = merge_ranks([RankResult(0, 2, r0.step_wall_s, 0.1, empty, none),
                     RankResult(1, 2, r1.step_wall_s, 0.1, empty, none)], ceiling_bytes_per_s=4.5e11)
    assert m.collectives.empty
    assert m.evidence["allreduce_count"] == 0.0 and m.evidence["comm_time_s"] == 0.0
    assert m.evidence["overlap_frac"] is None and m.evidence["busbw_bytes_per_s"] is None


def test_unknown_bytes_stay_out_of_the_bandwidth():
    r0, r1 = sorted(two_ranks(), key=lambda r: r.rank)
    c0 = r0.calls.assign(bytes=[100e6, math.nan])
    c1 = r1.calls.assign(bytes=[100e6, math.nan])
    m = merge_ranks([RankResult(0, 2, r0.step_wall_s, 0.1, c0, r0.overlap),
                     RankResult(1, 2, r1.step_wall_s, 0.1, c1, r1.overlap)])
    ar = m.collectives.set_index("collective").loc["all_reduce"]
    assert ar["algbw_bytes_per_s"] == pytest.approx(100e6 / 1.5e-3)  # only call 0: min(2000, 1500) µs
