"""Two nodes simulated on one host: two `advisor profile --nnodes 2` agents, one process each,
a localhost rendezvous, then `advisor merge`; the merged figures become a `multinode` row.

    python3 benchmarks/bench_multinode.py OUT [--model examples/ddp_mlp.py] [--device cuda]
        [--data OUT/distributed_scale.json]

On GPU each agent sees one GPU (CUDA_VISIBLE_DEVICES=0 and 1). Both "nodes" share the host:
their "inter-node" traffic takes NVLink / shared memory, so the row checks the plumbing and
records the path's speed, not a network's. Fold the row in with
`python3 benchmarks/scale_record.py --merge OUT/distributed_scale.json`.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import socket
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE))
from scale_record import upsert_rows  # noqa: E402


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_two_nodes(model: Path, device: str, out: Path, envs: list[dict], steps: int = 3, warmup: int = 1) -> list[Path]:
    """Run both agents to completion; returns their node directories (raises on a failed agent)."""
    port = free_port()
    procs, dirs = [], []
    for node in (0, 1):
        node_dir = out / f"node{node}"
        cmd = [sys.executable, "-m", "kernel_advisor", "profile", str(model), "--device", device, "--mode", "train",
               "--steps", str(steps), "--warmup", str(warmup), "--nproc-per-node", "1", "--nnodes", "2",
               "--node-rank", str(node), "--rdzv-endpoint", f"127.0.0.1:{port}", "--rdzv-id", "sim", "--out", str(node_dir)]
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
               **envs[node]}
        procs.append(subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
        dirs.append(node_dir)
    errors = []
    for node, p in enumerate(procs):
        _, err = p.communicate(timeout=900)
        if p.returncode != 0:
            errors.append(f"node {node} exited {p.returncode}: {err.strip()[-2000:]}")
    if errors:
        raise RuntimeError("; ".join(errors))
    return dirs


def row(merged: Path, model: str, device: str, wall_s: float) -> dict:
    meta = json.loads((merged / "run.json").read_text())
    nodes = json.loads((merged / "nodes.json").read_text())
    links = {link["link"]: link for link in nodes["links"]}
    inter = links["inter-node"]
    import torch
    gpu = torch.cuda.get_device_name(0) if device == "cuda" and torch.cuda.is_available() else ""
    return {"kind": "multinode", "key": f"2 nodes x 1 rank on one host, {device} {meta['distributed']['backend']}, {model}",
            "date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "commit": os.environ.get("ADVISOR_COMMIT") or subprocess.run(
                ["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True).stdout.strip(),
            "versions": {"python": platform.python_version(), "torch": torch.__version__,
                         "cuda": torch.version.cuda, "nccl": ".".join(map(str, torch.cuda.nccl.version()))
                         if device == "cuda" else None},
            "machine": {"gpu": gpu, "cores": os.cpu_count(), "host": "one host, two agents"},
            "simulated": True, "model": model, "device": device, "wall_s": wall_s,
            "step_s": meta["distributed"]["step_s"], "straggler_ratio": meta["distributed"]["straggler_ratio"],
            "nodes": nodes["nodes"], "inter_node": inter, "intra_node": links["intra-node"],
            "internode_roof": inter["roof"],
            "command": f"python3 benchmarks/bench_multinode.py OUT --model {model} --device {device}"}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--model", default="examples/ddp_mlp.py")
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    ap.add_argument("--data", type=Path, default=None)
    ns = ap.parse_args(argv)
    ns.out.mkdir(parents=True, exist_ok=True)
    envs = [{"CUDA_VISIBLE_DEVICES": "0"}, {"CUDA_VISIBLE_DEVICES": "1"}] if ns.device == "cuda" else [{}, {}]
    t0 = time.perf_counter()
    dirs = run_two_nodes(REPO / ns.model, ns.device, ns.out, envs, steps=10, warmup=3)
    merged = ns.out / "merged"
    done = subprocess.run([sys.executable, "-m", "kernel_advisor", "merge", *map(str, dirs), "--out", str(merged)],
                          env={**os.environ, "PYTHONPATH": str(REPO)}, capture_output=True, text=True)
    (ns.out / "merge.txt").write_text(done.stdout + done.stderr)
    if done.returncode != 0:
        raise SystemExit(f"advisor merge failed: {done.stderr}")
    r = row(merged, ns.model, ns.device, time.perf_counter() - t0)
    upsert_rows(ns.data or ns.out / "distributed_scale.json", [r])
    print(done.stdout)
    print(f"inter-node busbw {r['inter_node']['busbw_bytes_per_s']}, roof {r['internode_roof'].get('busbw_bytes_per_s')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
