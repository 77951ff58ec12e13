#!/usr/bin/env bash
# The GPU pass behind docs/benchmarks.md: GPU tests, calibration, every benchmark.
# Run on the GPU machine from the repo root: benchmarks/gpu_pass.sh OUTDIR STEP...
# Steps: gpu_tests calibrate profile ncu recommend kernels cuda_kernels tune try_kernel
#        engine_tests exhaustive measure_tests advice coverage capture_runs kernels_csv kernels_csv_quick sdpa_backends
#        distributed_runs kernels_fit kernels_heldout train_try_kernel
#        (one-off studies: benchmarks/studies/README.md)
# advice: ADVICE_MODELS=a,b (default all) ADVICE_BUDGET_S=45; ADVISOR_COMMIT names the commit measured.
# exhaustive: EXHAUSTIVE_MODELS=a,b EXHAUSTIVE_MODES=inference,train: the independent hand search
#   (benchmarks/advice/exhaustive.py); fold it in with `exhaustive.py --merge OUTDIR/exhaustive.csv`.
# sdpa_backends: the SDPA backend table (~2 min); here: bench_sdpa_backends.py --merge OUTDIR/sdpa_backends.csv
# kernels_csv: KERNELS_CSV_OPS="norms" (or rowwise, pointwise, op names; default all: > 10 min, so
#   split it over calls), KERNELS_CSV_BUDGET_S=480; rows go to OUTDIR/kernels.csv, then here:
#   python3 benchmarks/bench_kernels_csv.py --merge OUTDIR/kernels.csv && python3 benchmarks/render_kernels.py
#   Liger is installed from .wheels/liger_kernel-*.whl (pip download liger-kernel --no-deps -d .wheels)
#   into a temp dir when it does not import.
# kernels_fit / kernels_heldout: the sweep on shapes drawn from real models (benchmarks/shape_draws.py),
#   rows to OUTDIR/kernels.csv. kernels_fit: KERNELS_FIT_DRAW=fit-1 (16 shapes a family; providers
#   KERNELS_FIT_PROVIDERS="ours_triton ours_cuda eager liger": the routes need the kernels and eager
#   only), KERNELS_FIT_BUDGET_S=240 (~2-3 min). Then here: --merge, render_kernels.py (fits the routes).
#   kernels_heldout (after the refit routes are in the tree it copies): KERNELS_HELDOUT_DRAW=heldout-1
#   (40 shapes a family, every provider), KERNELS_HELDOUT_BUDGET_S=450 (~8-9 min: its own device call);
#   then --merge and render_kernels.py again. Both first build or load the CUDA extension (kernels_build).
# train_try_kernel: benchmarks/bench_train_try_kernel.py on benchmarks/models/llama_train.py (train, bf16);
#   TRAIN_TRY_KERNELS="triton.rms_norm ..." (default the Triton set), TRAIN_TRY_REPS=30; rows to
#   OUTDIR/train_try_kernel/try_kernel_train.csv, then here:
#   python3 benchmarks/bench_train_try_kernel.py --merge OUTDIR/train_try_kernel/try_kernel_train.csv --render
# distributed_runs: DIST_NPROC=N (default: every GPU) ranks; in one call of ~DIST_TOTAL_S=510 s: the NCCL
#   tests of FSDP2 / TP collectives and the bf16 hook's gate (tests/test_data_parallel_gpu.py), then with
#   what is left: calibrate, busbw_check (all-reduce, all-gather, reduce-scatter), DDP / TP / FSDP2 profiles
#   of examples/ddp_mlp.py and tp_mlp.py, `recommend --measure` of the DDP (float32) and FSDP runs with their
#   data-parallel actions; OUTDIR/distributed/ (3 files) beside the two step logs.
#   Here: python3 benchmarks/distributed_record.py OUTDIR/distributed/distributed.json \
#         && python3 benchmarks/render_distributed.py
# multinode: two `advisor profile --nnodes 2` agents on one host, one GPU each, merged (benchmarks/bench_multinode.py,
#   OUTDIR/multinode/), and tests/test_multinode.py's GPU test. import_ranks: a 2-rank DDP profile of
#   examples/ddp_mlp.py replicated to 64 ranks of 50 MB (in $TMPDIR) and imported (bench_import_ranks.py).
#   Rows go to OUTDIR/distributed_scale.json; here: python3 benchmarks/scale_record.py --merge \
#   OUTDIR/distributed_scale.json && python3 benchmarks/render_distributed_scale.py
set -uo pipefail
out=${1:-gpu-pass}
mkdir -p "$out"
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
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
gpu_workers() {  # 4 test workers fit a 141 GB H200; on an 80 GB card four of them ran out of memory
    local mib per gpus
    mib=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits | head -n 1)
    if [ "${mib:-0}" -ge 120000 ]; then per=4; else per=2; fi
    gpus=$(nvidia-smi -L | grep -c '^GPU')
    echo $((per * (gpus > 0 ? gpus : 1)))
}
export ADVISOR_TEST_GPUS=$(nvidia-smi -L | grep -c '^GPU')  # tests/conftest.py: one GPU per worker
with_liger() {  # Liger from .wheels/ when it is there and does not import
    local wheel liger_dir
    wheel=$(ls .wheels/liger_kernel-*.whl 2>/dev/null | tail -n 1)
    if [ -n "$wheel" ] && ! python3 -c "import liger_kernel" 2>/dev/null; then
        liger_dir=${TMPDIR:-/tmp}/liger-wheel
        pip install -q --no-deps --target "$liger_dir" "$wheel" && export PYTHONPATH=$PYTHONPATH:$liger_dir
    fi
}
kernels_draw() {  # name, draw, budget, providers...: the sweep on one draw of real models' shapes
    local name=$1 draw=$2 budget=$3; shift 3
    with_liger
    run kernels_build python3 -c "from reference_kernels.cuda.build import load_extension; load_extension()"
    run "$name" python3 benchmarks/bench_kernels_csv.py --draw "$draw" --csv "$out/kernels.csv" \
        --budget-s "$budget" --providers "$@"
}
kernels_csv() {  # quick-or-not: the side-by-side sweep, Liger from .wheels/ when it is there
    with_liger
    run "bench_kernels_csv$1" python3 benchmarks/bench_kernels_csv.py --csv "$out/kernels.csv" \
        --budget-s "${KERNELS_CSV_BUDGET_S:-480}" ${1:+--quick} ${KERNELS_CSV_OPS:+--ops $KERNELS_CSV_OPS}
}
{ nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv
  python3 -c "import torch, triton; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'triton', triton.__version__)"
  date -u; } > "$out/env.txt" 2>&1
cat "$out/env.txt"
for step in "${@:2}"; do
    case $step in
        gpu_tests) run gpu_tests python3 -m pytest -q -m gpu -p no:cacheprovider -n "$(gpu_workers)" tests/ --timeout 300
                   # with one GPU per worker the multi-GPU tests skipped: they run here on all of them
                   [ "$ADVISOR_TEST_GPUS" -gt 1 ] && run gpu_multi_tests env ADVISOR_TEST_GPUS=0 \
                       python3 -m pytest -q -m gpu -p no:cacheprovider tests/test_distributed_gpu.py \
                       tests/test_data_parallel_gpu.py
                   # its timings need the GPU to themselves (they skip under -n)
                   run gpu_timing_tests python3 -m pytest -q -m gpu -p no:cacheprovider tests/test_triton_row_shapes.py ;;
        calibrate) run calibrate python3 -m kernel_advisor calibrate --device cuda --json ;;
        profile) run bench_profile python3 benchmarks/bench_profile.py --csv "$out/profile_overhead.csv" ;;
        ncu) run ncu_accuracy python3 benchmarks/ncu_accuracy.py --out "$out/ncu" ;;
        recommend) run bench_recommend python3 benchmarks/bench_recommend_gpt.py --out "$out/recommend" ;;
        kernels) run bench_kernels python3 benchmarks/bench_kernels.py --out "$out/kernels" ;;
        cuda_kernels) run bench_cuda_kernels python3 benchmarks/bench_cuda_kernels.py --out "$out/cuda_kernels" ;;
        tune) run tune_rowwise python3 benchmarks/tune_rowwise.py --out "$out/tune" ;;
        try_kernel) run bench_try_kernel python3 benchmarks/bench_try_kernel.py --out "$out/try_kernel" ;;
        engine_tests) run engine_tests python3 -m pytest -q -m gpu -p no:cacheprovider tests/test_experiment_gpu.py \
                          tests/test_measure_gpu.py tests/test_float8_gpu.py tests/test_rnn_coverage.py --timeout 400 ;;
        exhaustive) run exhaustive python3 benchmarks/advice/exhaustive.py --models "$EXHAUSTIVE_MODELS" \
                        --modes "${EXHAUSTIVE_MODES:-inference}" --out "$out/exhaustive.csv" ;;
        measure_tests) run measure_tests python3 -m pytest -q -m gpu -p no:cacheprovider tests/test_measure_gpu.py \
                           tests/test_try_kernel_gpu.py tests/test_gpu_profile.py ;;
        advice) run advice python3 benchmarks/advice/run_advice.py --budget-s "${ADVICE_BUDGET_S:-45}" \
                    --out "$out/advice.csv" ${ADVICE_MODELS:+--models "$ADVICE_MODELS"} ;;
        sdpa_backends) run sdpa_backends python3 benchmarks/bench_sdpa_backends.py --table "$out/sdpa_backends.csv" --no-docs ;;
        coverage) run coverage python3 benchmarks/advice/coverage.py --out "$out/coverage.csv" ;;
        capture_runs) run capture_runs python3 benchmarks/capture_runs.py "$out/gpu_runs.tar.gz" ;;
        kernels_csv) kernels_csv "" ;;
        distributed_runs) run distributed_tests env ADVISOR_TEST_GPUS=0 timeout -k 10 -s INT 170 \
                              python3 -m pytest -q -m gpu -p no:cacheprovider tests/test_data_parallel_gpu.py
                          run distributed_runs python3 benchmarks/bench_distributed.py "$out/distributed" \
                              --nproc "${DIST_NPROC:-$ADVISOR_TEST_GPUS}" --budget-s $((${DIST_TOTAL_S:-510} - SECONDS)) ;;
        kernels_csv_quick) kernels_csv _quick ;;
        kernels_fit) kernels_draw kernels_fit "${KERNELS_FIT_DRAW:-fit-1}" "${KERNELS_FIT_BUDGET_S:-240}" \
                         ${KERNELS_FIT_PROVIDERS:-ours_triton ours_cuda eager liger} ;;
        kernels_heldout) kernels_draw kernels_heldout "${KERNELS_HELDOUT_DRAW:-heldout-1}" \
                             "${KERNELS_HELDOUT_BUDGET_S:-450}" ours_triton ours_cuda eager compile liger ;;
        train_try_kernel) run train_try_kernel python3 benchmarks/bench_train_try_kernel.py \
                              --out "$out/train_try_kernel" --reps "${TRAIN_TRY_REPS:-30}" \
                              ${TRAIN_TRY_KERNELS:+--kernels $TRAIN_TRY_KERNELS} ;;
        multinode) run multinode python3 benchmarks/bench_multinode.py "$out/multinode" --device cuda \
                       --data "$out/distributed_scale.json"
                   run multinode_tests python3 -m pytest -q -m gpu -p no:cacheprovider tests/test_multinode.py ;;
        import_ranks) run import_ranks_profile python3 -m kernel_advisor profile examples/ddp_mlp.py --mode train \
                          --nproc-per-node 2 --out "$out/import_ranks_src"
                      run import_ranks python3 benchmarks/bench_import_ranks.py "$out/import_ranks_src" \
                          --work "${TMPDIR:-/tmp}/rank-traces" --data "$out/distributed_scale.json" ;;
        *) echo "unknown step $step" ;;
    esac
done
cat "$out/summary.txt"
