#!/usr/bin/env bash
# The GPU figures of benchmarks/RESULTS.md, on a CUDA machine whose python3 has CuPy and Triton.
#   bash benchmarks/gpu_session.sh STEP...
#   (steps: info tests torch kernels fingerprints optimize long scale replay workers)
# Writes logs and JSON under $OUT (default /tmp/mugraph-gpu). On a machine without network, the other
# dependencies come as wheels in .whl/ (see benchmarks/RESULTS.md, "On a GPU").
set -uo pipefail
OUT=${OUT:-/tmp/mugraph-gpu}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
if [ -d .whl ] && [ ! -d /tmp/site ]; then
  # compiled at install, so the first run's imports are not charged with compiling them
  python3 -m pip install -q --no-index --no-deps --no-cache-dir --target /tmp/site .whl/*.whl || exit 1
fi
[ -d /tmp/site ] && export PYTHONPATH=/tmp/site:$PWD
# every module a run imports, before any device time goes to a step (the local cluster's TLS needs
# cryptography)
python3 -c "import cryptography, distributed, redis, z3, zarr" || { echo "missing a dependency: see .whl/"; exit 1; }
for step in "$@"; do
  echo "== $step $(date +%T)"
  case $step in
    info) nvidia-smi -L; python3 -c "import cupy, triton, numpy; print(cupy.__version__, triton.__version__, numpy.__version__)";;
    tests) python3 -m pytest -m gpu -q -p no:cacheprovider ${TESTS:-tests/codegen/test_gpu.py tests/stages/verify/test_cupy.py \
             tests/stages/layout/test_measure.py tests/pipeline/test_measure.py} 2>&1 | tee "$OUT/gpu_tests.log" | tail -25;;
    torch)  # PyTorch models on the GPU: the module's compiled kernels tested, then each model optimized
      # (searched on WORKERS workers, or a store left in TORCH_SCRATCH reused) and timed against the module
      [ "${TORCH_TESTS:-1}" = 1 ] && timeout ${TORCH_TESTS_T:-240} python3 -m pytest -m gpu -q -p no:cacheprovider tests/torch/test_cuda.py 2>&1 \
        | tee "$OUT/torch_tests.log" | tail -15
      timeout ${TORCH_BENCH_T:-300} python3 benchmarks/bench_torch_models.py --device cuda --workers ${WORKERS:-8} \
        --scratch ${TORCH_SCRATCH:-/tmp/bench_torch_models} --table ${TORCH_PROFILE:+--profile} ${TORCH_CASES:+--cases $TORCH_CASES} 2>"$OUT/torch_bench.err" | tee "$OUT/torch_bench.md"
      tail -5 "$OUT/torch_bench.err";;
    kernels) STORES=""; [ -d /tmp/rms-cupy.zarr/final ] && STORES="--store rms_norm=/tmp/rms-cupy.zarr"
             for p in rms_norm gated_mlp gqa lora; do [ -d /tmp/$p.zarr/final ] && STORES="$STORES --store $p=/tmp/$p.zarr"; done
             python3 benchmarks/bench_gpu_kernels.py --json "$OUT/kernels.json" $STORES 2>"$OUT/kernels.err" \
               | tee "$OUT/kernels.md"; tail -5 "$OUT/kernels.err";;
    fingerprints) python3 benchmarks/bench_fingerprints.py --side-by-side --repeat 5 | tee "$OUT/fingerprints.md";;
    optimize)  # the whole rms_norm space on 15 workers (private redis memo), NumPy then CuPy fingerprints
      for b in numpy cupy; do
        python3 -m mugraph.cli optimize rms_norm --workers 15 --backend $b --store /tmp/rms-$b.zarr --fresh --json \
          --dashboard-address :0 ${MEASURE:-} > /tmp/optimize-$b.ndjson 2> "$OUT/optimize-$b.err"
        tail -1 /tmp/optimize-$b.ndjson > "$OUT/optimize-$b.json"; tail -2 "$OUT/optimize-$b.err"
      done;;
    long)  # each of PROGRAMS (default gated_mlp) on 15 workers for at most LONG (default 4m) each
      for p in ${PROGRAMS:-gated_mlp}; do
        python3 -m mugraph.cli optimize $p --workers 15 --store /tmp/$p.zarr --fresh --json --dashboard-address :0 \
          --time-limit ${LONG:-4m} > /tmp/long-$p.ndjson 2> /tmp/long-$p.err
        tail -1 /tmp/long-$p.ndjson > "$OUT/long-$p.json"; tail -1 /tmp/long-$p.err
      done;;
    replay)  # bench_scale replays on this machine's cores: each trace of TRACES at each N of REPLAY_N, by
      # each driver of DRIVERS (default: Dask alone, then this tree's driver)
      for tr in ${TRACES:-scale_lora_t2 scale_gqa_t2}; do for n in ${REPLAY_N:-256 128}; do
        timeout ${REPLAY_T:-240} python3 benchmarks/bench_scale.py replay benchmarks/data/$tr.jsonl.gz --workers $n \
          --processes ${PROCS:-12} ${DRIVERS:---driver floor --driver this=.} --json "$OUT/replay.jsonl" \
          2>>"$OUT/replay.err" | tail -2
      done; done;;
    workers)  # 1, 2 and 8 real worker processes: rms_norm's whole space (default budget), the narrowed searches
      python3 benchmarks/bench_pipeline.py --programs rms_norm --full --budget 10000 --workers ${WORKER_N:-1,2,8} \
        --no-resume 2>"$OUT/workers-full.err" | tee "$OUT/workers-full.md" | tail -8
      [ "${NARROW:-1}" = 1 ] && python3 benchmarks/bench_pipeline.py --programs lora,rms_norm --workers ${WORKER_N:-1,2,8} \
        --no-resume 2>"$OUT/workers-narrow.err" | tee "$OUT/workers-narrow.md" | tail -10;;
    scale)  # real workers for the "Scale" section: lora's whole space on WORKERS (default 15), lora on 2
      # workers for SHORT (default 50 s), gqa on WORKERS for GQA (default 120 s). One JSON line per run in
      # scale.jsonl (wall, the driver process's own CPU, task seconds); each store comes back as a tarball.
      # RUNS: "PROGRAM WORKERS SECONDS" runs, separated by ';'
      IFS=';' read -ra runs <<< "${RUNS:-lora ${WORKERS:-15} ${LORA:-270};lora 2 ${SHORT:-50};gqa ${WORKERS:-15} ${GQA:-120}}"
      for run in "${runs[@]}"; do
        set -- $run; st=/tmp/$1-w$2.zarr
        timeout $(( $3 + 90 )) python3 benchmarks/driver_cpu.py $st -- python3 -m mugraph optimize $1 --workers $2 \
          --store $st --fresh --json --dashboard-address :0 --time-limit $3 2> /tmp/$1-w$2.err | tee -a "$OUT/scale.jsonl"
        tail -2 /tmp/$1-w$2.err; tar czf "$OUT/$1-w$2.tgz" -C /tmp $1-w$2.zarr $1-w$2.zarr.ndjson
      done;;
  esac
done
echo "== end $(date +%T)"
