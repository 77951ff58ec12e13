"""The independent hand search `recommend --measure` is judged against: every configuration of
the cross product, each timed in a plain `for` loop. It imports nothing of kernel_advisor; the
bundled kernels come in through their public functions (reference_kernels.registry).

    python3 benchmarks/advice/exhaustive.py --models rmsnorm_dim1_4d,kl_div_loss --out OUT/exh.csv

The cross product: compile mode (none, default, max-autotune-no-cudagraphs, reduce-overhead)
× layout (as is; channels_last where the model holds 4-D weights) × bundled kernel, and
cudnn.benchmark on eager (conv models) with either layout; each bundled kernel (none, or each kernel whose function family the model
calls, substituted at torch.nn.functional level). A configuration must match eager's output
(bfloat16 tolerance) to count; one that fails or raises is kept with its reason.
Rows go to the advice CSV's columns with kind `exhaustive`; `--merge` folds them into
benchmarks/data/advice.csv (keyed, so the sweep's own rows stay).
"""
from __future__ import annotations

import argparse
import copy
import itertools
import statistics
import sys
import time
from pathlib import Path

import pandas as pd
import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(HERE.parent))
from docdata import upsert_rows, write_csv_atomic  # noqa: E402
from run_advice import load_module  # noqa: E402
from reference_kernels.registry import all_kernels  # noqa: E402

COMPILE_MODES = ("", "default", "max-autotune-no-cudagraphs", "reduce-overhead")
# The torch functions each kernel family replaces, called with the same arguments.
FAMILIES = {"softmax": (F.softmax, torch.softmax, torch.Tensor.softmax),
            "log_softmax": (F.log_softmax, torch.log_softmax, torch.Tensor.log_softmax),
            "layer_norm": (F.layer_norm,), "rms_norm": (F.rms_norm,), "gelu": (F.gelu,), "silu": (F.silu,),
            "cross_entropy": (F.cross_entropy,)}
COLUMNS = ["model", "kind", "rule_id", "subject", "action", "device_name", "dtype", "mode", "predicted_gain_frac",
           "measured_gain_frac", "speedup", "speedup_low", "speedup_high", "verdict", "status", "reason", "rank",
           "gpu", "torch", "triton", "commit", "date", "step_s", "eager_step_s"]
KEY = ["model", "kind", "rule_id", "subject", "action", "device_name", "dtype", "mode"]
TOLERANCE = {torch.bfloat16: 0.05, torch.float16: 0.02, torch.float32: 1e-3}  # relative L2 error
ROUNDS, TARGET_ROUND_S = 7, 0.1


def load(path: Path, device: torch.device, dtype: torch.dtype, small: bool = False):
    module = load_module(path, small)
    torch.manual_seed(0)
    init = module.get_init_inputs() if hasattr(module, "get_init_inputs") else []
    model = module.Model(*init).to(device, dtype)
    inputs = [t.to(device, dtype) if t.is_floating_point() else t.to(device) for t in module.get_inputs()]
    return model, inputs


class Substitute(TorchFunctionMode):
    """Calls of the family's functions go to the kernel; a call it refuses (raises) stays eager."""

    def __init__(self, family: str, kernel) -> None:
        super().__init__()
        self.targets, self.kernel, self.calls = set(FAMILIES[family]), kernel, 0

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in self.targets:
            try:
                out = self.kernel(*args, **kwargs)
                self.calls += 1
                return out
            except Exception:  # noqa: BLE001 - a shape or dtype the kernel does not take: eager
                pass
        return func(*args, **kwargs)


class Census(TorchFunctionMode):
    """Which kernel families a step calls."""

    def __init__(self) -> None:
        super().__init__()
        self.families: set[str] = set()

    def __torch_function__(self, func, types, args=(), kwargs=None):
        for family, funcs in FAMILIES.items():
            if func in funcs:
                self.families.add(family)
        return func(*args, **(kwargs or {}))


def step_fn(model, inputs, mode: str):
    if mode == "inference":
        def step():
            with torch.no_grad():
                return model(*inputs)
        return step

    def train_step():
        model.zero_grad(set_to_none=True)
        out = model(*inputs)
        (out if out.numel() == 1 else out.float().sum()).backward()
        return out
    return train_step


def sync(device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def plain_loop_s(step, device) -> float:
    """Median over ROUNDS of a plain loop's mean step: n steps between two synchronizes."""
    n = 1
    while True:
        sync(device)
        t0 = time.perf_counter()
        for _ in range(n):
            step()
        sync(device)
        if time.perf_counter() - t0 >= TARGET_ROUND_S or n >= 4096:
            break
        n *= 2
    rounds = []
    for _ in range(ROUNDS):
        sync(device)
        t0 = time.perf_counter()
        for _ in range(n):
            step()
        sync(device)
        rounds.append((time.perf_counter() - t0) / n)
    return statistics.median(rounds)


def configurations(model, step_families: set[str], device):
    four_d = any(p.dim() == 4 for p in model.parameters())
    kernels = [None] + [k for k in all_kernels() if k.id.split(".", 1)[1] in step_families
                        and k.reason_if_unsatisfied(device.type) is None]
    modes = COMPILE_MODES if device.type == "cuda" else COMPILE_MODES[:3]
    layouts = (False, True) if four_d else (False,)
    bench = (False, True) if four_d else (False,)
    # cudnn.benchmark is tried as the hand search tries it: on eager, with and without channels_last
    return [c for c in itertools.product(modes, layouts, bench, kernels) if not (c[2] and c[0])]


def name_of(compile_mode: str, channels_last: bool, cudnn_bench: bool, kernel) -> str:
    parts = (["channels_last"] if channels_last else []) + (["cudnn_benchmark"] if cudnn_bench else []) \
        + ([f"kernel:{kernel.id}"] if kernel else []) + ([f"compile:{compile_mode}"] if compile_mode else [])
    return " + ".join(parts) or "eager"


def run_config(model, inputs, mode: str, config, reference, device) -> tuple[float | None, str]:
    compile_mode, channels_last, cudnn_bench, kernel = config
    torch.backends.cudnn.benchmark = cudnn_bench
    m = copy.deepcopy(model)
    xs = list(inputs)
    if channels_last:
        m = m.to(memory_format=torch.channels_last)
        xs = [x.contiguous(memory_format=torch.channels_last) if x.dim() == 4 else x for x in xs]
    if compile_mode:
        torch._dynamo.reset()
        m = torch.compile(m, mode=compile_mode)
    sub = Substitute(kernel.id.split(".", 1)[1], kernel.load()) if kernel else None
    base = step_fn(m, xs, mode)

    def step():
        if sub is None:
            return base()
        with sub:
            return base()
    try:
        out = step()
        sync(device)
        if kernel is not None and sub.calls == 0:
            return None, "the kernel took no call"
        err = (out.float() - reference.float()).norm() / reference.float().norm().clamp_min(1e-12)
        if not torch.isfinite(err) or err > TOLERANCE.get(reference.dtype, 1e-3):
            return None, f"output differs from eager (relative error {float(err):.3g})"
        for _ in range(3):
            step()
        return plain_loop_s(step, device), ""
    except Exception as e:  # noqa: BLE001 - a configuration that fails is a result
        return None, f"{type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}"
    finally:
        torch.backends.cudnn.benchmark = False


def search_model(path: Path, mode: str, dtype: torch.dtype, device, small: bool = False) -> list[dict]:
    model, inputs = load(path, device, dtype, small)
    model.train(mode == "train")
    census = Census()
    with census:
        reference = step_fn(model, inputs, mode)().detach().clone()
    eager_s = plain_loop_s(step_fn(model, inputs, mode), device)
    rows = []
    for config in configurations(model, census.families, device):
        step_s, reason = run_config(model, inputs, mode, config, reference, device)
        rows.append({"action": name_of(*config), "speedup": eager_s / step_s if step_s else None,
                     "measured_gain_frac": 1 - step_s / eager_s if step_s else None,
                     "status": "passed" if step_s else "error", "reason": reason,
                     "verdict": "", "rank": None, "subject": "", "step_s": step_s, "eager_step_s": eager_s})
        print(f"{path.stem} {mode}: {rows[-1]['action']}: {rows[-1]['speedup'] or reason}", flush=True)
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", required=False, default="")
    ap.add_argument("--modes", default="inference")
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--out", type=Path)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--small", action="store_true", help="the models' SMALL sizes (a CPU check of the script)")
    ap.add_argument("--merge", type=Path, nargs="+", metavar="CSV", help="fold outputs into --out")
    args = ap.parse_args(argv)
    if args.merge:
        return merge(args.merge, args.out or REPO / "benchmarks" / "data" / "advice.csv")
    device = torch.device(args.device)
    dtype = getattr(torch, args.dtype)
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    meta = {"device_name": name, "dtype": args.dtype, "kind": "exhaustive",
            "rule_id": "", "predicted_gain_frac": None, "speedup_low": None, "speedup_high": None,
            "gpu": name, "torch": torch.__version__,
            "triton": _triton_version(), "commit": _commit(), "date": time.strftime("%Y-%m-%d %H:%M", time.gmtime())}
    rows = []
    for stem in [s for s in args.models.split(",") if s]:
        for mode in args.modes.split(","):
            for r in search_model(HERE / "models" / f"{stem}.py", mode, dtype, device, args.small):
                rows.append({**meta, "model": stem, "mode": mode, **r})
            _write(rows, args.out)
    return 0


def _write(rows: list[dict], out: Path) -> None:
    write_csv_atomic(pd.DataFrame(rows, columns=COLUMNS), out)


def merge(parts: list[Path], out: Path) -> int:
    table = pd.read_csv(out, dtype=str, keep_default_na=False) if out.is_file() else pd.DataFrame(columns=COLUMNS)
    for part in parts:
        table = upsert_rows(table, pd.read_csv(part, dtype=str, keep_default_na=False), KEY)
    # the sweep's own columns (explored, pruned, wall_s) stay; ours are a subset of them
    write_csv_atomic(table[[*COLUMNS, *(c for c in table.columns if c not in COLUMNS)]].fillna(""), out)
    return 0


def _triton_version() -> str:
    try:
        import triton
        return triton.__version__
    except ImportError:
        return ""


def _commit() -> str:
    """ADVISOR_COMMIT when set (a copy of the tree whose .git is not the measured commit), else git's."""
    import os
    import subprocess
    if os.environ.get("ADVISOR_COMMIT"):
        return os.environ["ADVISOR_COMMIT"]
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                              cwd=REPO).stdout.strip()
    except OSError:
        return ""


if __name__ == "__main__":
    raise SystemExit(main())
