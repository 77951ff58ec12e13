"""Capture GPU run directories of benchmarks/advice models as a CPU test fixture.

    python3 benchmarks/capture_runs.py OUT/gpu_runs.tar.gz      # on the GPU machine
    cp .../gpu_runs.tar.gz tests/data/gpu_runs.tar.gz            # then commit it

Each model is profiled as the advice sweep profiles it (bf16 or the file's `# advisor:` line,
5 steps after 3 of warm-up); the archive keeps each run's run.json, ops.csv and sequence.csv
(no trace), under `<model>-<mode>/`. tests/test_recommend_gpu_runs.py runs the recommender on
them on CPU: the classes of silent or wrong advice found on held-out models, on real traces.
"""
from __future__ import annotations

import argparse
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE / "advice"))
from run_advice import MODELS_DIR, profile_options  # noqa: E402

KEPT = ("run.json", "ops.csv", "sequence.csv")
# (model, mode): one model per class of miss, plus the train-mode RNN whose
# gradient accumulation must not be offered as user code to fuse.
RUNS = (("layernorm_3d", "inference"), ("bottleneck_1x1", "inference"), ("unet_groupnorm", "inference"),
        ("style_instance_norm", "inference"), ("ce_large_vocab", "inference"), ("log_softmax_nll", "inference"),
        ("dropout_residual_ln", "inference"), ("einsum_moe", "inference"), ("sdpa_block", "inference"),
        ("llama_naive_attention", "inference"), ("relu_attention", "inference"), ("cumsum_scatter", "inference"),
        ("wide_softmax", "inference"), ("gru_seq", "train"))


def profile_args(model: str, mode: str, out: Path) -> list[str]:
    path = MODELS_DIR / f"{model}.py"
    return [sys.executable, "-m", "kernel_advisor", "profile", str(path),
            *profile_options(path, "cuda", "bfloat16", mode), "--out", str(out)]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("archive", type=Path)
    args = ap.parse_args(argv)
    failed = 0
    with tempfile.TemporaryDirectory() as tmp, tarfile.open(args.archive, "w:gz") as tar:
        for model, mode in RUNS:
            name = f"{model}-{mode}"
            run = Path(tmp) / name
            done = subprocess.run(profile_args(model, mode, run), capture_output=True, text=True)
            print(f"{name}: rc {done.returncode}", flush=True)
            if done.returncode != 0:
                failed += 1
                print(done.stderr[-2000:], file=sys.stderr)
                continue
            for file in KEPT:
                tar.add(run / file, arcname=f"{name}/{file}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
