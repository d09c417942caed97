#!/usr/bin/env bash
# On a GPU machine, from the repository root with dist/gpu/ (scripts/package_gpu.sh) present:
# runs every test binary (GPU tests included) and the CUDA op tests under compute-sanitizer,
# then the CUDA op benchmarks and the standard benchmark with each attention backend, writing
# everything to one folder ($OUT, else gpu-results/): summary.txt, tests.log, memcheck.log (every
# test_cuda_* binary), bench-<model>-<backend>.txt/.json, bench-ops.txt (bench_cuda_ops),
# profile-<model>.txt, load.log, nvidia-smi.txt. Exit status non-zero if anything failed.
#
# What runs (environment variables):
#   DIST_DIR        the package (default dist/gpu)
#   ONLY            test binaries whose names hold one of these words ("attention moe_model");
#                   also skips the loader check, the op benchmarks unless OPS is given and
#                   `miniinfer bench` unless BENCH=1 is (GTEST_FILTER, read by every test binary,
#                   narrows the tests further: GTEST_FILTER='*Decode*:*Moe*')
#   FILTERS         a gtest filter for some binaries alone, ;-separated NAME=FILTER pairs
#                   ("test_cuda_attention=*Decode*;test_cuda_grouped_gemm=-*Bench*"), over
#                   GTEST_FILTER for those
#   TESTS=0         no test binaries (with MEMCHECK=0 LOAD=0: the benchmarks alone)
#   TEST_TIMEOUT    seconds for each test binary (default 300)
#   MEMCHECK=0      no compute-sanitizer
#   LOAD=0          no loader check (a random Qwen3-0.6B-shaped checkpoint from
#                   tools/make_random_checkpoint.py, needs torch and transformers, loaded for
#                   CUDA: its logged peak host memory must stay below 1.5x its size)
#   OPS             bench_cuda_ops runs (then bench_read_bandwidth: the read ceiling against the
#                   copy rate; bench_wgmma: the warpgroup MMA shapes' rates), separated by ";",
#                   each a filter and optionally ",TOKENS" (the MoE ops' step size):
#                   "attention;moe grouped,256"; default one run of every op, none with ONLY;
#                   OPS=0 none
#   NCU             Nsight Compute on bench_cuda_ops kernels, ;-separated "KERNEL@FILTER[,TOKENS]"
#                   (KERNEL: a regex of kernel names; FILTER, TOKENS: as in OPS), e.g.
#                   "decode_mma@attention;grouped_gemm_kernel@moe grouped,256": ncu-<i>.txt with
#                   the speed-of-light, memory, warp-state, occupancy and launch sections of one
#                   launch (the fourth: past the warm-up), clocks left alone
#   BENCH=0         no `miniinfer bench`; BENCH=1 runs it with ONLY too
#   BENCH_MODELS    model folders (default bench/qwen3-0.6b; bench/qwen3-30b-a3b: the MoE shapes)
#   BACKENDS        attention backends benched (default "fa2 flashinfer")
#   WORKLOADS       bench flags naming the workloads (default all six)
#   BENCH_FLAGS     more bench flags (e.g. "--measure-gpu-idle --disable-overlap")
#   BENCH_TUNING    more runs of each benchmark, one per key=value, each passed as
#                   `--tuning key=value` (src/config/tuning.h; e.g. "pdl=0 decode_min_keys=128"):
#                   bench-<model>-<backend>-<key>-<value>
#   BENCH_FLAG_SETS more runs of each benchmark, one per ;-separated set of bench flags (e.g.
#                   "--max-num-batched-tokens 4096;--max-num-batched-tokens 16384")
#   PROFILE=N       one more run per model with --profile-kernels N, of PROFILE_WORKLOADS (default
#                   "--workload balanced --workload bs1"); with programmatic dependent launch a
#                   kernel's duration includes its wait for the one before, its exposed time does
#                   not; PROFILE_FLAGS="--tuning pdl=0" for durations of kernels run apart
#   PACK=1          also pack the folder into gpu-check.tar.gz beside it ($OUT/gpu-check.tar.gz
#                   with $OUT/gpu-check/ as the folder): the device tool brings back 8 files
set -uo pipefail
if [[ "${PACK:-0}" == 1 ]]; then
  pack_to=${OUT:-gpu-results}
  export OUT="$pack_to/gpu-check"
  trap 'tar -C "$pack_to" -czf "$pack_to/gpu-check.tar.gz" gpu-check' EXIT
fi
source "$(dirname "$0")/gpu_env.sh"
nvidia-smi > "$out/nvidia-smi.txt" 2>&1
status=0
: > "$out/tests.log"
: > "$out/summary.txt"
note() { echo "$*" | tee -a "$out/summary.txt"; }
wanted() {  # wanted NAME: whether ONLY is unset or one of its words is in NAME
  [[ -z "${ONLY:-}" ]] && return 0
  local word
  for word in $ONLY; do [[ "$1" == *"$word"* ]] && return 0; done
  return 1
}
test_filter() {  # test_filter NAME: NAME's filter in FILTERS ("name=filter;..."), if any
  local pair
  IFS=';' read -ra pairs <<< "${FILTERS:-}"
  for pair in "${pairs[@]}"; do [[ "${pair%%=*}" == "$1" ]] && { echo "${pair#*=}"; return; }; done
}
if [[ "${TESTS:-1}" != 0 ]]; then
  for t in "$dist"/bin/test_*; do
    name=$(basename "$t")
    wanted "$name" || continue
    start=$SECONDS
    filter=$(test_filter "$name")
    if env ${filter:+GTEST_FILTER="$filter"} timeout "${TEST_TIMEOUT:-300}" "$t" >> "$out/tests.log" 2>&1; then
      result=PASS; else result=FAIL; status=1; fi
    note "$result $name${filter:+ ($filter)} ($((SECONDS - start)) s)"
  done
  note "skipped lines in log: $(grep -c '^\[  SKIPPED \]' "$out/tests.log")"
fi
if [[ "${MEMCHECK:-1}" == 0 ]]; then
  note "memcheck skipped (MEMCHECK=0)"
elif command -v compute-sanitizer >/dev/null; then
  : > "$out/memcheck.log"
  for t in "$dist"/bin/test_cuda_*; do
    name=$(basename "$t")
    wanted "$name" || continue
    if compute-sanitizer --tool memcheck --error-exitcode 1 "$t" >> "$out/memcheck.log" 2>&1; then
      note "PASS memcheck $name"
    else
      note "FAIL memcheck $name"; status=1
    fi
  done
else
  note "compute-sanitizer not found: memcheck not run"
fi
# bench_cuda_ops: each ;-separated "filter[,tokens]" of OPS (default: one run of every op).
ops_run() {  # ops_run FILE
  local file=$1 run
  local -a runs argv
  IFS=';' read -r -a runs <<< "${OPS:-}"
  : > "$out/$file"
  for run in "${runs[@]}"; do
    argv=("${run%%,*}")
    [[ "$run" == *,* ]] && argv+=("${run#*,}")
    if ! "$dist/bin/bench_cuda_ops" "${argv[@]}" >> "$out/$file" 2>&1; then
      note "FAIL bench_cuda_ops $run"; status=1
    fi
  done
  [[ -z "${OPS:-}" ]] && ! "$dist/bin/bench_cuda_ops" > "$out/$file" 2>&1 &&
    { note "FAIL bench_cuda_ops"; status=1; }
  note "bench_cuda_ops${OPS:+ $OPS}: $file"
}
if [[ -x "$dist/bin/bench_cuda_ops" && "${OPS:-}" != 0 && ( -z "${ONLY:-}" || -n "${OPS:-}" ) ]]; then
  ops_run bench-ops.txt
  # The ceilings beside the op rows: what reads alone reach against the copy rate they are
  # measured against, and what the warpgroup MMA shapes of the sm_90a kernels reach.
  ceiling() {  # ceiling BINARY FILE
    [[ -x "$dist/bin/$1" ]] || return 0
    if "$dist/bin/$1" > "$out/$2" 2>&1; then
      note "$1: $2"; tee -a "$out/summary.txt" < "$out/$2"
    else
      note "FAIL $1 ($2)"; status=1
    fi
  }
  ceiling bench_read_bandwidth bench-read.txt
  ceiling bench_wgmma bench-wgmma.txt
fi
if [[ -n "${NCU:-}" ]]; then
  if command -v ncu >/dev/null; then
    IFS=';' read -r -a ncu_runs <<< "$NCU"
    i=0
    for run in "${ncu_runs[@]}"; do
      i=$((i + 1))
      kernel=${run%%@*} ops=${run#*@}
      argv=("${ops%%,*}")
      [[ "$ops" == *,* ]] && argv+=("${ops#*,}")
      if ncu --clock-control none --kernel-name "regex:$kernel" --launch-skip 3 --launch-count 1 \
          --section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats \
          --section Occupancy --section LaunchStats \
          "$dist/bin/bench_cuda_ops" "${argv[@]}" > "$out/ncu-$i.txt" 2>&1; then
        note "PASS ncu $run: ncu-$i.txt"
      else
        note "FAIL ncu $run (ncu-$i.txt)"; status=1
      fi
    done
  else
    note "ncu not found: NCU not run"
  fi
fi
if [[ "${LOAD:-1}" != 0 && -z "${ONLY:-}" ]]; then
  ckpt=${TMPDIR:-/tmp}/miniinfer-qwen3-0.6b-random
  if python3 tools/make_random_checkpoint.py bench/qwen3-0.6b "$ckpt" > "$out/load.log" 2>&1 &&
     "$dist/bin/miniinfer" bench --model "$ckpt" --device cuda --workload bs1 >> "$out/load.log" 2>&1; then
    size=$(du -cb "$ckpt"/*.safetensors | tail -1 | cut -f1)
    peak=$(grep -o 'peak host memory [0-9.]* GB' "$out/load.log" | head -1 | awk '{print $4}')
    verdict=$(awk -v p="$peak" -v s="$size" 'BEGIN { print (p != "" && p * 1e9 < 1.5 * s) ? "PASS" : "FAIL" }')
    note "$verdict load: peak host memory ${peak:-?} GB for a $(awk -v s="$size" 'BEGIN{printf "%.2f", s/1e9}') GB checkpoint (limit 1.5x)"
    grep -o 'loaded [0-9]* tensors.*' "$out/load.log" | head -1 | tee -a "$out/summary.txt"
    [ "$verdict" = PASS ] || status=1
  else
    note "FAIL load (see load.log)"; status=1
  fi
  rm -rf "$ckpt"
fi
# One benchmark run: bench_run MODEL BACKEND NAME [FLAGS] writes bench-NAME.txt/.json; the
# summary gets its table rows.
bench_run() {
  local model=$1 backend=$2 name=$3 flags=${4:-}
  if "$dist/bin/miniinfer" bench --model "$model" --load-format dummy --device cuda \
      --attention-backend "$backend" ${WORKLOADS:---workload balanced --workload decode128 --workload decode256 --workload short256 --workload prefill256 --workload bs1} ${BENCH_FLAGS:-} $flags --json "$out/bench-$name.json" > "$out/bench-$name.txt" 2>&1; then
    note "PASS bench $(basename "$model") $backend${flags:+ with $flags}"
    grep -E '^\| [a-z]' "$out/bench-$name.txt" | grep -v '^| workload' | tee -a "$out/summary.txt"
  else
    note "FAIL bench $(basename "$model") $backend${flags:+ with $flags}"; status=1
  fi
}
if [[ "${BENCH:-}" == 1 || ( "${BENCH:-1}" != 0 && -z "${ONLY:-}" ) ]]; then
  for model in ${BENCH_MODELS:-${BENCH_MODEL:-bench/qwen3-0.6b}}; do
    m=$(basename "$model")
    for backend in ${BACKENDS:-fa2 flashinfer}; do
      bench_run "$model" "$backend" "$m-$backend"
      for setting in ${BENCH_TUNING:-}; do
        bench_run "$model" "$backend" "$m-$backend-${setting/=/-}" "--tuning $setting"
      done
      IFS=';' read -r -a flag_sets <<< "${BENCH_FLAG_SETS:-}"
      for flags in "${flag_sets[@]}"; do
        tag=$(echo "$flags" | tr -s ' ' '-' | tr -cd 'A-Za-z0-9._-' | sed 's/^-*//')
        bench_run "$model" "$backend" "$m-$backend-$tag" "$flags"
      done
    done
    if [[ -n "${PROFILE:-}" ]]; then
      if "$dist/bin/miniinfer" bench --model "$model" --load-format dummy --device cuda \
          ${PROFILE_WORKLOADS:---workload balanced --workload bs1} ${BENCH_FLAGS:-} ${PROFILE_FLAGS:-} \
          --profile-kernels "$PROFILE" > "$out/profile-$m.txt" 2>&1; then
        note "PASS profile $m${PROFILE_FLAGS:+ with $PROFILE_FLAGS}: profile-$m.txt"
      else
        note "FAIL profile $m"; status=1
      fi
    fi
  done
fi
exit $status
