#!/usr/bin/env bash
# On a GPU machine, from the repository root: the offline benchmark for two packages
# (scripts/package_gpu.sh; A = DIST_A, default dist/gpu; B = DIST_B, default dist/base),
# interleaved A, B, A, B in one session so both see the same card. Each run is one process:
# the cold first run of each workload, then ROUNDS - 1 steady-state repeats in the same
# process. Writes bench-<model>-<A|B>-<n>.{txt,json} and ab-summary.txt (tok/s per workload and
# run) to $OUT (else gpu-results/). MODELS (default bench/qwen3-0.6b; several: each in turn),
# WORKLOADS (default: balanced decode256 prefill256 bs1), ROUNDS (default 3), PAIRS (default 2),
# FLAGS (extra engine flags for both, e.g. "--kv-cache-dtype fp8"). A package B without lib/
# (bin/miniinfer alone, another build's) takes A's libraries.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-gpu-results}
mkdir -p "$out"
dists=("${DIST_A:-dist/gpu}" "${DIST_B:-dist/base}")
args=()
for w in ${WORKLOADS:-balanced decode256 prefill256 bs1}; do
  for ((r = 0; r < ${ROUNDS:-3}; ++r)); do args+=(--workload "$w"); done
done
status=0
: > "$out/ab-summary.txt"
for model in ${MODELS:-bench/qwen3-0.6b}; do
  m=$(basename "$model")
  for ((p = 1; p <= ${PAIRS:-2}; ++p)); do
    for i in 0 1; do
      name=$([ $i = 0 ] && echo A || echo B)
      dist=${dists[$i]}
      lib=$dist/lib
      [ -d "$lib" ] || lib=${dists[0]}/lib
      [[ "$lib" == /* ]] || lib=$PWD/$lib
      if LD_LIBRARY_PATH="$lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}" \
          "$dist/bin/miniinfer" bench --model "$model" --load-format dummy --device cuda \
          ${FLAGS:-} "${args[@]}" --json "$out/bench-$m-$name-$p.json" > "$out/bench-$m-$name-$p.txt" 2>&1; then
        echo "== $m $name ($dist) run $p" >> "$out/ab-summary.txt"
        grep -E '^\| *(balanced|decode|short|prefill|bs1)' "$out/bench-$m-$name-$p.txt" >> "$out/ab-summary.txt"
      else
        echo "FAIL bench $m $name ($dist) run $p" | tee -a "$out/ab-summary.txt"; status=1
      fi
    done
  done
done
cat "$out/ab-summary.txt"
exit $status
