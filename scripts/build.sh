#!/usr/bin/env bash
# Configures and builds into build/ (Release with debug info). Extra arguments go to CMake,
# e.g. scripts/build.sh -DMINIINFER_CUDA=OFF.
set -euo pipefail
cd "$(dirname "$0")/.."
cmake -S . -B build -G Ninja "$@" >/dev/null
ninja -C build
