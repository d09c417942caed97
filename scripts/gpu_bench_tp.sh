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
