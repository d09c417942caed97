#!/usr/bin/env bash
# Everything, from a fresh Debian 12 machine: install, build, run every test; then rebuild the
# CPU code with AddressSanitizer + UndefinedBehaviorSanitizer and run the loader, tokenizer
# (with the differential fuzz against Hugging Face) and CLI tests under it. GPU tests skip with a message where there is no
# GPU. Exit status: non-zero if anything failed.
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=$(nproc)

scripts/setup.sh
scripts/build.sh
(cd build && ctest --output-on-failure -j "$jobs")

cmake -S . -B build-asan -G Ninja -DMINIINFER_CUDA=OFF -DMINIINFER_SANITIZE=ON \
      -DCMAKE_BUILD_TYPE=Debug >/dev/null
ninja -C build-asan miniinfer test_loader test_tokenizer tokenizer_driver
(cd build-asan && ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
   ctest --output-on-failure -j "$jobs" -L 'loader|cli|tokenizer')
echo "test: all passed"
