#!/usr/bin/env bash
# On a machine with two GPUs (the nvidia-h200-x2 device kind): `miniinfer bench` with
# --tensor-parallel-size 1 and 2 on the same workloads, dummy weights, to $OUT (else
# gpu-results/): bench-<model>-tp<N>.txt and summary.txt (each run's table row; compare TP=2
# with TP=1 there). MODELS (default "bench/qwen3-8b bench/qwen3-30b-a3b"), WORKLOADS (default
# "--workload decode256"), extra arguments go to both runs. Needs dist/gpu/ (package_gpu.sh).
set -euo pipefail
source "$(dirname "$0")/gpu_env.sh"
: > "$out/summary.txt"
for model in ${MODELS:-bench/qwen3-8b bench/qwen3-30b-a3b}; do
  name=$(basename "$model")
  for tp in 1 2; do
    "$dist/bin/miniinfer" bench --model "$model" --load-format dummy --device cuda -tp "$tp" \
      ${WORKLOADS:---workload decode256} "$@" > "$out/bench-$name-tp$tp.txt" 2>&1 || {
        echo "FAIL bench $name tp $tp" | tee -a "$out/summary.txt"; continue; }
    echo "$name tp $tp: $(tail -1 "$out/bench-$name-tp$tp.txt")" | tee -a "$out/summary.txt"
  done
done
# Two one-GPU "nodes" on this host over loopback (--nnodes 2; each process sees one GPU): the
# same greedy tokens as one process with -tp 2, on the demo fixture.
model=tests/fixtures/qwen3-demo
common=(generate --model "$model" --device cuda -tp 2 --temperature 0 --max-tokens 32 --ignore-eos
        --prompt "The capital of France is" --prompt "Hello")
"$dist/bin/miniinfer" "${common[@]}" > "$out/tp2-one-process.jsonl" 2> "$out/tp2-one-process.log" || true
port=$((29500 + RANDOM % 1000))
CUDA_VISIBLE_DEVICES=1 "$dist/bin/miniinfer" "${common[@]}" --nnodes 2 --node-rank 1 --master-port "$port" \
  > /dev/null 2> "$out/tp2-node1.log" &
CUDA_VISIBLE_DEVICES=0 "$dist/bin/miniinfer" "${common[@]}" --nnodes 2 --node-rank 0 --master-port "$port" \
  > "$out/tp2-two-nodes.jsonl" 2> "$out/tp2-node0.log" || true
wait
if [ -s "$out/tp2-two-nodes.jsonl" ] && cmp -s <(grep -o '"token_ids":\[[0-9,]*\]' "$out/tp2-one-process.jsonl") \
                                             <(grep -o '"token_ids":\[[0-9,]*\]' "$out/tp2-two-nodes.jsonl"); then
  echo "PASS two nodes over loopback give one process's tokens" | tee -a "$out/summary.txt"
else
  echo "FAIL two nodes over loopback (tp2-*.log)" | tee -a "$out/summary.txt"
fi
