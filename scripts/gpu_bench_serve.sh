#!/usr/bin/env bash
# On a GPU machine, from the repository root with dist/gpu/ present (scripts/package_gpu.sh):
# the serving benchmark of issue 6. Runs the offline `miniinfer bench` on a workload, then
# `miniinfer serve` on the same model and `miniinfer bench-serve` against it (all requests at
# once), and writes bench-offline.{txt,json}, bench-serve.{txt,json}, serve.log and
# serve-summary.txt (both throughputs and their ratio) to $OUT (else gpu-results/).
# The model: bench/qwen3-0.6b's shapes with dummy weights and the Qwen3 tokenizer of the demo
# fixture. WORKLOAD (default balanced); SERVE_FLAGS: extra engine flags for both runs;
# SERVE_ONLY_FLAGS: extra flags for serve alone (e.g. --use-multiprocess); PORT (default 8123). The live /metrics
# after the run is saved as metrics.txt (check it with promtool where it is installed).
set -uo pipefail
source "$(dirname "$0")/gpu_env.sh"
workload=${WORKLOAD:-balanced}
bin="$dist/bin/miniinfer"

model=$(mktemp -d)
config=${MODEL_CONFIG:-bench/qwen3-0.6b/config.json}
trap 'rm -rf "$model"; [[ -n "${server:-}" ]] && kill "$server" 2>/dev/null' EXIT
cp "$config" tests/fixtures/qwen3-demo/tokenizer.json \
   tests/fixtures/qwen3-demo/tokenizer_config.json "$model/"
common=(--load-format dummy --device ${DEVICE:-cuda} ${SERVE_FLAGS:-})

"$bin" bench --model "$model" "${common[@]}" --workload "$workload" \
    --json "$out/bench-offline.json" > "$out/bench-offline.txt" 2>&1 || { echo "offline bench failed"; exit 1; }

port=${PORT:-8123}
"$bin" serve "$model" "${common[@]}" ${SERVE_ONLY_FLAGS:-} --port $port --served-model-name bench \
    > "$out/serve.log" 2>&1 &
server=$!
for _ in $(seq 300); do
  python3 -c "import urllib.request as u; u.urlopen('http://127.0.0.1:$port/health', timeout=2)" 2>/dev/null && break
  # The port's sockets from /proc (the GPU machine has no ss): local address, state.
  kill -0 $server 2>/dev/null || { echo "server exited"; tail "$out/serve.log"
                                   grep -i ":$(printf '%04X' $port) " /proc/net/tcp /proc/net/tcp6 | head; exit 1; }
  sleep 1
done
"$bin" bench-serve --port $port --model bench --workload "$workload" \
    --json "$out/bench-serve.json" > "$out/bench-serve.txt" 2>&1 || { echo "bench-serve failed"; exit 1; }
python3 -c "import urllib.request as u; print(u.urlopen('http://127.0.0.1:$port/metrics').read().decode(), end='')" > "$out/metrics.txt"
kill -TERM $server && wait $server
server=

python3 - "$out" <<'EOF' | tee "$out/serve-summary.txt"
import json, sys
out = sys.argv[1]
offline = json.load(open(f"{out}/bench-offline.json"))[0]["output_tok_per_s"]
serve = json.load(open(f"{out}/bench-serve.json"))["output_throughput"]
print(f"offline {offline:,.0f} tok/s, served {serve:,.0f} tok/s: {100 * serve / offline:.1f}% of offline")
EOF
