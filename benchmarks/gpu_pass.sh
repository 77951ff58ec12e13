#!/usr/bin/env bash
# The GPU pass behind docs/benchmarks.md: GPU tests, calibration, every benchmark.
# Run on the GPU machine from the repo root: benchmarks/gpu_pass.sh tests|bench|all OUTDIR
set -uo pipefail
part=${1:-all}
out=${2:-gpu-pass}
mkdir -p "$out"
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export ADVISOR_HOME=$out/advisor-home ADVISOR_CACHE_DIR=$out/cache
run() {  # name, command...: log each step, keep going, record its exit code
    local name=$1; shift
    echo "=== $name: $*"
    local t0=$SECONDS
    "$@" > "$out/$name.log" 2>&1
    local rc=$?
    echo "$name rc=$rc $((SECONDS - t0))s" | tee -a "$out/summary.txt"
    tail -n 25 "$out/$name.log"
}
{ nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv
  python3 -c "import torch, triton; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'triton', triton.__version__)"
  date -u; } > "$out/env.txt" 2>&1
cat "$out/env.txt"
if [ "$part" = tests ] || [ "$part" = all ]; then
    run gpu_tests python3 -m pytest -q -m gpu -p no:cacheprovider tests/ --timeout 300
    run calibrate python3 -m kernel_advisor calibrate --device cuda --json
    run bench_profile python3 benchmarks/bench_profile.py --out "$out/profile"
    run ncu_accuracy python3 benchmarks/ncu_accuracy.py --out "$out/ncu"
fi
if [ "$part" = bench ] || [ "$part" = all ]; then
    run bench_kernels python3 benchmarks/bench_kernels.py --out "$out/kernels"
    run bench_cuda_kernels python3 benchmarks/bench_cuda_kernels.py --out "$out/cuda_kernels"
    run bench_recommend python3 benchmarks/bench_recommend_gpt.py --out "$out/recommend"
    run bench_try_kernel python3 benchmarks/bench_try_kernel.py --out "$out/try_kernel"
fi
cat "$out/summary.txt"
