"""Rows split over several programs: rows too long for one program's registers, or too few to
fill the GPU.

Each row is cut into `segments` stretches of `seg_cols` columns. A stats kernel, one program
per (row, segment), reduces its stretch in BLOCK-wide chunks and writes one or two partial
values; an apply kernel, one program per (row, BLOCK-wide column block), merges the row's
partials (at most MAX_SEGMENTS, one vector load from L2) and writes its block. Every element is
read twice and written once, as in the one-program-per-row loops, but the grid grows with the
row length instead of the row count: 16 rows of 4M columns get 16 x 33 stats programs and
16 x 1024 apply programs instead of 16 programs.

Grids are 1-D (the y and z grid dims stop at 65535): the program id is split into (row,
segment) or (row, column block) on the device.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from reference_kernels.triton._common import cdiv, INTERPRETED, next_power_of_2, num_warps_for, sm_count


@dataclass(frozen=True)
class SplitConfig:
    """block: columns per chunk and per apply program (a power of two); segments: stats
    programs per row; seg_cols: columns per stats program (a multiple of block)."""

    block: int
    segments: int
    seg_cols: int

    @property
    def num_warps(self) -> int:
        return num_warps_for(self.block)

    @property
    def segs_block(self) -> int:
        """The merge's vector width: every partial of a row in one load."""
        return next_power_of_2(self.segments)


# NB: 4096 columns per chunk is the softmax loop's chunk (LOOP_BLOCK_COLS), tuned on an H200
# for rows past 32K; the interpreter pays per op, not per element: bigger chunks there.
SPLIT_BLOCK = 16384 if INTERPRETED else 4096
# Each row's partials are merged by one vector load: 1024 segments = 8 KiB of fp32 pairs.
MAX_SEGMENTS = 1024
# NB: 4 programs per SM, as partial_sum_programs, so each SM has several streams of loads in
# flight; not tuned (no GPU measurement of this path yet).
PROGRAMS_PER_SM = 4

# Tests set this to (block, target programs) to force the split path on small inputs.
FORCE: tuple[int, int] | None = None


def target_programs(device: torch.device) -> int:
    """Programs that keep the device busy: 4 per SM on a GPU; the interpreter runs programs
    one after the other, so 4 there too (a few segments per row keep the merge exercised)."""
    if device.type != "cuda":
        return PROGRAMS_PER_SM
    return sm_count(device) * PROGRAMS_PER_SM


@functools.lru_cache(maxsize=1024)
def split_config(n_rows: int, n_cols: int, target: int, block: int = SPLIT_BLOCK) -> SplitConfig:
    """Segments per row so that rows x segments reaches `target` programs (1 when the rows
    alone do), each a whole number of chunks."""
    chunks = cdiv(n_cols, block)
    segments = max(1, min(cdiv(target, max(n_rows, 1)), chunks, MAX_SEGMENTS))
    seg_cols = cdiv(chunks, segments) * block
    return SplitConfig(block, cdiv(n_cols, seg_cols), seg_cols)


def split_for(n_rows: int, n_cols: int, device: torch.device) -> SplitConfig:
    """The split of a (rows, cols) input on `device`; FORCE's block and target when set."""
    if FORCE is not None:
        return split_config(n_rows, n_cols, FORCE[1], FORCE[0])
    return split_config(n_rows, n_cols, target_programs(device))


def few_rows(n_rows: int, device: torch.device) -> bool:
    """Fewer long rows than the target programs (4 per SM): one program per row would leave
    the device short of loads in flight (16 x 4M softmax ran at 0.046 of copy bandwidth on an
    H200 with one program a row). Never on the interpreter, unless forced."""
    if FORCE is not None:
        return True
    return device.type == "cuda" and splits_rows(n_rows, sm_count(device))


def splits_rows(n_rows: int, sms: int) -> bool:
    """Whether n_rows long rows are split on a device of `sms` SMs: fewer rows than
    PROGRAMS_PER_SM programs per SM (528 on an H200, so vocabulary-sized 512 x 50257 and
    256 x 151936 split, 2 segments a row and 3). NB: one program a row measured 0.31 of copy
    bandwidth at 512 x 50257 bf16 forward against eager's 0.42 (bench_kernels_csv.py, H200);
    the split at these row counts is measured by benchmarks/bench_row_roofs.py, not yet run."""
    return n_rows < PROGRAMS_PER_SM * sms


def stats_grid(n_rows: int, config: SplitConfig) -> tuple[int]:
    return (n_rows * config.segments,)


def apply_grid(n_rows: int, n_cols: int, config: SplitConfig) -> tuple[int]:
    return (n_rows * cdiv(n_cols, config.block),)


@triton.jit
def row_and_segment(n_segs):
    """(row as int64, segment) of a 1-D stats grid."""
    pid = tl.program_id(0)
    return (pid // n_segs).to(tl.int64), pid % n_segs


@triton.jit
def row_and_cols(n_cols, BLOCK: tl.constexpr):
    """(row as int64, this program's column offsets) of a 1-D apply grid."""
    pid = tl.program_id(0)
    n_blocks = tl.cdiv(n_cols, BLOCK)
    return (pid // n_blocks).to(tl.int64), (pid % n_blocks) * BLOCK + tl.arange(0, BLOCK)


@triton.jit
def load_partials(ptr, row, n_segs, SEGS: tl.constexpr, other):
    """One row's partials, (SEGS,) with `other` past n_segs: n_segs*4 bytes, from L2."""
    j = tl.arange(0, SEGS)
    return tl.load(ptr + row * n_segs + j, mask=j < n_segs, other=other)
