"""Re-load a run's model as it was profiled: the file, entry, device, dtype, autocast and mode in run.json."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

import torch

from kernel_advisor.collect.loader import LoadedModel, file_sha256, load_model
from kernel_advisor.errors import EnvironmentCapabilityError, UserInputError
from kernel_advisor.records.run import RunMeta


def load_run_model(meta: Mapping[str, Any], run_dir: Path) -> tuple[LoadedModel, str, list[str]]:
    """(loaded model, mode, notes for people) for the run described by `meta` (run.json)."""
    meta = RunMeta.of(meta)
    model, args = meta.model, meta.args
    file = meta.model_file
    if not file:
        raise UserInputError(f"{run_dir}: run.json names no model file (an imported trace?)",
                             "profile the model with `advisor profile MODEL.py` to measure its advice")
    path = Path(file)
    if not path.is_file():
        raise UserInputError(f"--measure needs the model file, and run.json names {file}, which is not here",
                             "run from the machine and directory you profiled on")
    device = args.get("device") or meta.device_type or "auto"
    if device == "cuda" and not torch.cuda.is_available():
        raise EnvironmentCapabilityError("the run was profiled on CUDA, and no CUDA device is visible here",
                                         "measure on the machine you profiled on")
    loaded = load_model(path, entry=model.get("entry"), device=device, dtype=args.get("dtype") or "keep",
                        seed=int(args.get("seed") or 0), autocast=args.get("autocast"))
    notes = []
    if model.get("sha256") and model["sha256"] != file_sha256(path):
        notes.append(f"{path.name} changed since it was profiled: measuring the file as it is now")
    return loaded, args.get("mode") or "inference", notes
