#!/usr/bin/env bash
# The main job, from a fresh Debian 12 machine: install, build, and run MiniInfer on the bundled
# demo model (a Qwen3 with the real tokenizer and random weights). MODEL=/path/to/Qwen3-0.6B
# runs it on a real checkpoint instead.
set -euo pipefail
cd "$(dirname "$0")/.."
model=${MODEL:-tests/fixtures/qwen3-demo}

scripts/setup.sh
scripts/build.sh
set -x
build/src/apps/miniinfer inspect --model "$model"
build/src/apps/miniinfer generate --model "$model" --chat --no-thinking --max-tokens 32 \
  --prompt "Give me a short introduction to large language models." \
  --prompt "What is the capital of France?" --prompt "Write a haiku about the sea."
