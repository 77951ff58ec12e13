"""The options a command or an API call takes, checked in one place.

api.py checks every option here before anything heavy is imported or run, and the CLI
relies on it; the lower layers that can be called on their own (collect.profiler.capture,
analyze.calibrate, distributed.launch) check with the same functions. Only
`resolve_device` imports torch, and only once the device has to be looked at. The files a user
names as outputs are checked here too (`check_output_file`).
"""
from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import TYPE_CHECKING, Iterable

from kernel_advisor.errors import EnvironmentCapabilityError, UserInputError
from kernel_advisor.records.run import RunMeta

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


# ---------------------------------------------------------------- files a user names as outputs
# Where a command may write a file the user named: never over something we did not create.
#
# `report -o`, `roofline -o` and every other user-named output file pass through
# `check_output_file` before any work. It refuses
# - a path that is not a regular file now (a directory, a device such as /dev/full, a FIFO,
#   a symbolic link): the atomic rename would replace the node itself;
# - a run directory's own record files (run.json, ops.csv, ...), and the model file a run
#   names: replacing those loses the run or the user's code;
# - any other existing file that is not of the kind we write (`notes.txt` for an HTML
#   report), unless --force says it may go.
# An existing file of the output's kind (an older report.html) is replaced, as always.

# What a run directory holds besides the reports and charts written into it.
RUN_RECORD_FILES = frozenset({"run.json", "ops.csv", "sequence.csv", "trace.json", "trace.json.gz",
                              "recommendations.json", "try_kernel.json", "ranks.json"})


def check_output_file(path: Path, kinds: Iterable[str], force: bool, option: str = "-o",
                      run_dir: Path | None = None) -> None:
    """Refuse `path` as an output unless writing it replaces only what we wrote (see above).

    `kinds`: the suffixes of what the command writes (".html"); `force`: --force was given;
    `run_dir`: the run the output is made from, whose model file it must not be.
    """
    path, kinds = Path(path), tuple(kinds)
    if not path.parent.is_dir():
        raise UserInputError(f"the directory {path.parent} does not exist", f"create it or choose another {option}")
    if run_dir is not None:
        check_not_model_file(path, model_file_of(Path(run_dir)), option)
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        info = None
    except OSError as e:
        raise UserInputError(f"cannot check the output {path}: {e.strerror}", f"choose another {option}") from None
    if info is not None and not stat.S_ISREG(info.st_mode):
        what = "a directory" if stat.S_ISDIR(info.st_mode) else \
            "a symbolic link" if stat.S_ISLNK(info.st_mode) else "not a regular file (a device, FIFO or socket)"
        raise UserInputError(f"the output {path} is {what}, and writing it would replace it",
                             f"choose a new file name for {option}")
    _refuse_run_records(path, option)
    if info is None:
        return
    if path.suffix.lower() not in kinds and not force:
        raise UserInputError(
            f"the output {path} already exists and is not a {'/'.join(kinds)} file this command wrote",
            f"choose another {option}, or pass --force to replace it")


def _refuse_run_records(path: Path, option: str) -> None:
    target = _resolved(path)
    if path.name in RUN_RECORD_FILES and (path.parent / "run.json").is_file():
        raise UserInputError(f"the output {path} is one of the run directory's own records",
                             f"choose another {option} (a report or chart beside them is fine)")
    model = model_file_of(path.parent)
    if model is not None and _resolved(model) == target:
        raise UserInputError(f"the output {path} is the model file the run was profiled from",
                             f"choose another {option}")


def _resolved(path: Path) -> Path:
    try:
        return Path(os.path.realpath(path))
    except (OSError, ValueError):
        return Path(os.path.abspath(path))


def model_file_of(directory: Path) -> Path | None:
    """The model file named by a run.json in `directory`, if there is one (read leniently:
    this is only a guard, the run itself is checked where it is loaded)."""
    try:
        name = RunMeta.of(json.loads((directory / "run.json").read_text(encoding="utf-8"))).model_file
    except (OSError, ValueError, KeyError, TypeError, RecursionError):
        return None
    return Path(name) if isinstance(name, str) and name else None


def check_not_model_file(path: Path, model_file: Path | None, option: str = "-o") -> None:
    """Refuse `path` when it is the model file (a run's, or the one on the command line)."""
    if model_file is not None and _resolved(path) == _resolved(Path(model_file)):
        raise UserInputError(f"the output {path} is the model file the run was profiled from",
                             f"choose another {option}")
