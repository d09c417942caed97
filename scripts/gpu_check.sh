#!/usr/bin/env bash
# On a GPU machine, from the repository root with dist/gpu/ (scripts/package_gpu.sh) present:
# runs every test binary (GPU tests included) and the CUDA op tests under compute-sanitizer,
# then the standard benchmark with each attention backend, writing everything to one folder
# ($OUT, else gpu-results/): summary.txt, tests.log, memcheck.log (every test_cuda_* binary),
# bench-<backend>.txt/.json, bench-ops.txt (bench_cuda_ops), load.log, nvidia-smi.txt. Exit
# status non-zero if anything failed.
# DIST_DIR (default dist/gpu) picks another package; ONLY=pattern runs only matching binaries,
# TESTS=0 none (with MEMCHECK=0 LOAD=0: the benchmarks alone);
# BENCH=0 skips the benchmark, BACKENDS="fa2 flashinfer" picks the backends benched and
# WORKLOADS="--workload bs1" the workloads (default: all six), BENCH_MODEL the model folder
# (default bench/qwen3-0.6b; bench/qwen3-30b-a3b for the MoE shapes), BENCH_FLAGS more bench
# flags (e.g. "--measure-gpu-idle --disable-overlap"), BENCH_ENVS more runs of each backend's
# benchmark, one per VAR=VALUE setting given (e.g. "MINIINFER_PDL=0 MINIINFER_PREFILL_WGMMA=0":
# bench-<backend>-<VAR>-<VALUE>.txt beside the default run). MEMCHECK=0 skips compute-sanitizer;
# TEST_TIMEOUT (seconds, default 300) bounds each test binary. LOAD=0 skips the loader check:
# a random Qwen3-0.6B-shaped checkpoint (tools/make_random_checkpoint.py, needs torch and
# transformers) loaded for CUDA, whose logged peak host memory must stay below 1.5x its size.
set -uo pipefail
source "$(dirname "$0")/gpu_env.sh"
nvidia-smi > "$out/nvidia-smi.txt" 2>&1
status=0
: > "$out/tests.log"
: > "$out/summary.txt"
for t in "$dist"/bin/test_*; do
  name=$(basename "$t")
  [[ "${TESTS:-1}" == 0 ]] && break
  [[ -n "${ONLY:-}" && "$name" != *${ONLY}* ]] && continue
  if timeout "${TEST_TIMEOUT:-300}" "$t" >> "$out/tests.log" 2>&1; then result=PASS; else result=FAIL; status=1; fi
  echo "$result $name" | tee -a "$out/summary.txt"
done
echo "skipped lines in log: $(grep -c '^\[  SKIPPED \]' "$out/tests.log")" | tee -a "$out/summary.txt"
if [[ "${MEMCHECK:-1}" == 0 ]]; then
  echo "memcheck skipped (MEMCHECK=0)" | tee -a "$out/summary.txt"
elif command -v compute-sanitizer >/dev/null; then
  : > "$out/memcheck.log"
  for t in "$dist"/bin/test_cuda_*; do
    name=$(basename "$t")
    [[ -n "${ONLY:-}" && "$name" != *${ONLY}* ]] && continue
    if compute-sanitizer --tool memcheck --error-exitcode 1 "$t" >> "$out/memcheck.log" 2>&1; then
      echo "PASS memcheck $name" | tee -a "$out/summary.txt"
    else
      echo "FAIL memcheck $name" | tee -a "$out/summary.txt"; status=1
    fi
  done
else
  echo "compute-sanitizer not found: memcheck not run" | tee -a "$out/summary.txt"
fi
if [[ -x "$dist/bin/bench_cuda_ops" && -z "${ONLY:-}" ]]; then
  if "$dist/bin/bench_cuda_ops" > "$out/bench-ops.txt" 2>&1; then
    echo "PASS bench_cuda_ops (every CUDA op against the measured peaks: bench-ops.txt)" | tee -a "$out/summary.txt"
  else
    echo "FAIL bench_cuda_ops" | tee -a "$out/summary.txt"; status=1
  fi
fi
if [[ "${LOAD:-1}" != 0 && -z "${ONLY:-}" ]]; then
  ckpt=${TMPDIR:-/tmp}/miniinfer-qwen3-0.6b-random
  if python3 tools/make_random_checkpoint.py bench/qwen3-0.6b "$ckpt" > "$out/load.log" 2>&1 &&
     "$dist/bin/miniinfer" bench --model "$ckpt" --device cuda --workload bs1 >> "$out/load.log" 2>&1; then
    size=$(du -cb "$ckpt"/*.safetensors | tail -1 | cut -f1)
    peak=$(grep -o 'peak host memory [0-9.]* GB' "$out/load.log" | head -1 | awk '{print $4}')
    verdict=$(awk -v p="$peak" -v s="$size" 'BEGIN { print (p != "" && p * 1e9 < 1.5 * s) ? "PASS" : "FAIL" }')
    echo "$verdict load: peak host memory ${peak:-?} GB for a $(awk -v s="$size" 'BEGIN{printf "%.2f", s/1e9}') GB checkpoint (limit 1.5x)" | tee -a "$out/summary.txt"
    grep -o 'loaded [0-9]* tensors.*' "$out/load.log" | head -1 | tee -a "$out/summary.txt"
    [ "$verdict" = PASS ] || status=1
  else
    echo "FAIL load (see load.log)" | tee -a "$out/summary.txt"; status=1
  fi
  rm -rf "$ckpt"
fi
# One benchmark run: bench_run BACKEND NAME [VAR=VALUE] writes bench-NAME.txt/.json.
bench_run() {
  local backend=$1 name=$2 setting=${3:-}
  if env $setting "$dist/bin/miniinfer" bench --model "${BENCH_MODEL:-bench/qwen3-0.6b}" --load-format dummy --device cuda \
      --attention-backend "$backend" ${WORKLOADS:---workload balanced --workload decode128 --workload decode256 --workload short256 --workload prefill256 --workload bs1} ${BENCH_FLAGS:-} --json "$out/bench-$name.json" > "$out/bench-$name.txt" 2>&1; then
    echo "PASS bench $backend${setting:+ with $setting}" | tee -a "$out/summary.txt"
  else
    echo "FAIL bench $backend${setting:+ with $setting}" | tee -a "$out/summary.txt"; status=1
  fi
}
if [[ "${BENCH:-1}" != 0 && -z "${ONLY:-}" ]]; then
  for backend in ${BACKENDS:-fa2 flashinfer}; do
    bench_run "$backend" "$backend"
    # Named VAR-VALUE: the device tool brings back no file with "=" in its name.
    for setting in ${BENCH_ENVS:-}; do bench_run "$backend" "$backend-${setting/=/-}" "$setting"; done
  done
fi
exit $status
