#!/usr/bin/env bash
# On a GPU machine with dist/gpu/ present: a drained shutdown with 30 streams in flight, in both
# modes (one process, --use-multiprocess). Starts `serve` on bench/qwen3-0.6b's shapes (dummy
# weights), opens 30 streaming chats without max_tokens, sends SIGTERM and reports how long the
# exit took, the exit status and how many streams ended with the shutdown error and [DONE].
# Writes $OUT/drain.txt (else gpu-results/).
set -uo pipefail
source "$(dirname "$0")/gpu_env.sh"
model=$(mktemp -d)
cp bench/qwen3-0.6b/config.json tests/fixtures/qwen3-demo/tokenizer.json \
   tests/fixtures/qwen3-demo/tokenizer_config.json "$model/"
for mode in "" "--use-multiprocess"; do
  port=8124
  "$dist/bin/miniinfer" serve "$model" --load-format dummy --device cuda $mode --port $port \
      > "$out/drain-serve${mode:+-mp}.log" 2>&1 &
  server=$!
  for _ in $(seq 300); do
    python3 -c "import urllib.request as u; u.urlopen('http://127.0.0.1:$port/health', timeout=2)" 2>/dev/null && break
    sleep 1
  done
  streams=$(mktemp -d)
  for i in $(seq 30); do
    python3 - "$port" > "$streams/$i.txt" 2>&1 <<'PY' &
import json, sys, urllib.request
body = json.dumps({"messages": [{"role": "user", "content": "Hi"}], "stream": True, "ignore_eos": True}).encode()
req = urllib.request.Request(f"http://127.0.0.1:{sys.argv[1]}/v1/chat/completions", data=body,
                             headers={"Content-Type": "application/json"})
for line in urllib.request.urlopen(req, timeout=120):
    print(line.decode().strip())
PY
  done
  sleep 3
  start=$(date +%s.%N)
  kill -TERM $server
  wait $server
  rc=$?
  end=$(date +%s.%N)
  wait
  ended=$(grep -l "shutting down" "$streams"/*.txt | xargs -r grep -l "\[DONE\]" | wc -l)
  echo "mode ${mode:-single}: exit status $rc after $(python3 -c "print(f'{$end - $start:.2f}')") s; $ended of 30 streams ended with the shutdown error and [DONE]" | tee -a "$out/drain.txt"
  rm -rf "$streams"
done
rm -rf "$model"
