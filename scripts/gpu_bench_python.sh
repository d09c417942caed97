#!/usr/bin/env bash
# On the GPU machine: the Python benchmark (bench/bench_miniinfer.py, through the package) against
# `miniinfer bench` of the same build, interleaved (C++, Python, C++, Python, ...) so drift in the
# card's clocks hits both alike. Needs dist/gpu/ from a -DMINIINFER_C_API=ON build
# (scripts/package_gpu.sh puts the package in dist/gpu/python). Writes bench-cli-N.txt,
# bench-python-N.txt and summary.txt (each run's tok/s and Python's share of the C++ median) to
# $OUT. ROUNDS (default 3), BENCH_MODEL (default bench/qwen3-0.6b), PYTHON (default python3),
# DEVICE (default cuda)
# and extra arguments (engine flags for both, e.g. --attention-backend fa2).
set -euo pipefail
source "$(dirname "$0")/gpu_env.sh"
model=${BENCH_MODEL:-bench/qwen3-0.6b}
python=${PYTHON:-python3}
load=()
ls "$model"/*.safetensors >/dev/null 2>&1 || load=(--load-format dummy)
common=(--model "$model" --device "${DEVICE:-cuda}" "${load[@]}" "$@")
export PYTHONPATH="$PWD/$dist/python${PYTHONPATH:+:$PYTHONPATH}"
"$python" -c 'import sys, miniinfer._lib as l; print("python", sys.version.split()[0], "lib", l.lib_path(), "cuda", l.has_cuda())' | tee "$out/summary.txt"
for i in $(seq "${ROUNDS:-3}"); do
  "$dist/python/miniinfer/bin/miniinfer" bench "${common[@]}" > "$out/bench-cli-$i.txt"
  "$python" bench/bench_miniinfer.py "${common[@]}" > "$out/bench-python-$i.txt"
  tail -1 "$out/bench-cli-$i.txt"; tail -1 "$out/bench-python-$i.txt"
done
"$python" - "$out" <<'PY' | tee -a "$out/summary.txt"
import glob, statistics, sys
def toks(kind):
    return [float(open(f).read().strip().splitlines()[-1].split("|")[10]) for f in
            sorted(glob.glob(f"{sys.argv[1]}/bench-{kind}-*.txt"))]
cli, py = toks("cli"), toks("python")
print("miniinfer bench tok/s:", cli)
print("python bench tok/s:   ", py)
print(f"python / cli (medians): {100 * statistics.median(py) / statistics.median(cli):.1f}%")
PY
