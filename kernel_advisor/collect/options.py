"""The options a command or an API call takes, checked in one place.

api.py checks every option here before anything heavy is imported or run, and the CLI
relies on it; the lower layers that can be called on their own (collect.profiler.capture,
hardware.calibrate, distributed.launch) check with the same functions. Only
`resolve_device` imports torch, and only once the device has to be looked at.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from kernel_advisor.errors import EnvironmentCapabilityError, UserInputError

if TYPE_CHECKING:
    import torch

DEVICES = ("auto", "cuda", "cpu")
SEED_MIN, SEED_MAX = -(1 << 63), (1 << 64) - 1  # what torch.manual_seed takes


def check_count(option: str, value: int, minimum: int, fix: str, why: str = "") -> None:
    """A count option (--steps, --reps, --top, …) is at least `minimum`; one line naming it otherwise."""
    if value >= minimum:
        return
    if minimum == 0:
        raise UserInputError(f"{option} cannot be negative (got {value})", fix)
    raise UserInputError(f"{option} must be at least {minimum}{why} (got {value})", fix)


def validate_counts(warmup: int, steps: int) -> None:
    """A profile's warm-up and profiled steps."""
    check_count("--steps", steps, 1, "use --steps 5, for example")
    check_count("--warmup", warmup, 0, "use --warmup 3, for example")


def check_try_counts(draws: int, reps: int, warmup: int) -> None:
    """try-kernel's correctness draws, timed rounds and untimed steps."""
    check_count("--draws", draws, 1, "use --draws 3, for example")
    check_count("--reps", reps, 3, "use --reps 30, for example", why=" for a confidence interval")
    check_count("--warmup", warmup, 0, "use --warmup 3, for example")


def check_seed(seed: int) -> None:
    if not SEED_MIN <= seed <= SEED_MAX:
        raise UserInputError(f"--seed must fit in 64 bits (got a {seed.bit_length()}-bit number)",
                             "use a seed between 0 and 2**64 - 1, such as --seed 0")


def check_threads(threads: int | None) -> None:
    """torch's intra-op threads (`--threads N`); None leaves torch's default."""
    if threads is not None and (isinstance(threads, bool) or not isinstance(threads, int) or threads < 1):
        raise UserInputError(f"--threads must be a whole number of at least 1 (got {threads!r})",
                             "use --threads 1, or as many as the machine has idle cores")


def resolve_device(device: str, gpus: int | None = 1) -> torch.device:
    """--device auto|cuda|cpu as a torch.device; auto picks cuda when a GPU is visible.

    cuda needs `gpus` visible GPUs (a distributed run's one per rank); None checks nothing,
    for `advisor kernels`, which says per kernel what cuda lacks here."""
    import torch

    if device not in DEVICES:
        raise UserInputError(f"unknown device '{device}'", "use auto, cuda or cpu")
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device == "cuda" and gpus:
        visible = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if gpus > 1 and visible < gpus:
            raise EnvironmentCapabilityError(
                f"--nproc-per-node {gpus} needs {gpus} GPUs, {visible} visible",
                f"use --nproc-per-node {visible}" if visible > 1 else "run on a multi-GPU machine, or --device cpu")
        if not visible:
            raise EnvironmentCapabilityError("--device cuda was asked for but no CUDA device is visible",
                                             "run on a machine with a GPU, or use --device cpu")
    return torch.device(device)


def check_ranks_options(nproc_per_node: int, fsdp: bool, mode: str, autocast: str | None = None,
                        with_stack: bool = False, threads: int | None = None) -> None:
    """What a distributed profile (--nproc-per-node, --fsdp, --nnodes) cannot do yet, and its rank count."""
    unsupported = ((threads is not None, "--threads", "profile one process with --threads, or set OMP_NUM_THREADS"),
                   (with_stack, "--with-stack", "profile one process with --with-stack"),
                   (autocast is not None, "--autocast", "profile one process with --autocast, or cast with --dtype"))
    for given, option, fix in unsupported:
        if given:
            raise UserInputError(f"{option} is not supported with --nproc-per-node or --fsdp yet", fix)
    check_count("--nproc-per-node", nproc_per_node, 1, "use --nproc-per-node 2 (or more) for a distributed run")
    if fsdp and (nproc_per_node < 2 or mode != "train"):
        raise UserInputError("--fsdp shards training across ranks",
                             "use it with --mode train --nproc-per-node 2 (or more)")


def check_out_dir(out) -> None:
    """A run directory the user named (--out), checked before minutes of work, not after."""
    if out is not None:
        from pathlib import Path

        from kernel_advisor.collect.rundir import check_writable_target  # pandas: only when there is one

        check_writable_target(Path(out))


def check_profile_options(warmup: int, steps: int, seed: int, out, threads: int | None) -> None:
    validate_counts(warmup, steps)
    check_seed(seed)
    check_out_dir(out)  # before the model runs: a bad --out must not cost a profile
    check_threads(threads)
