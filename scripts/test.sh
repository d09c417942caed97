#!/usr/bin/env bash
# Everything, from a fresh Debian 12 machine: install, check formatting (clang-format), build,
# run every test; then rebuild the CPU code with AddressSanitizer + UndefinedBehaviorSanitizer and
# run the loader, tokenizer (with the differential fuzz against Hugging Face), CLI and hub tests
# under it. GPU tests skip with a message where there is no GPU. Then the request fuzz target runs for a
# minute under libFuzzer (clang) with the same sanitizers. Exit status: non-zero if anything failed.
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=$(nproc)

scripts/setup.sh
scripts/check_format.sh
scripts/build.sh
(cd build && ctest --output-on-failure -j "$jobs")

cmake -S . -B build-asan -G Ninja -DMINIINFER_CUDA=OFF -DMINIINFER_SANITIZE=ON \
      -DCMAKE_BUILD_TYPE=Debug >/dev/null
ninja -C build-asan miniinfer test_loader test_tokenizer tokenizer_driver fuzz_requests_replay
(cd build-asan && ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
   ctest --output-on-failure -j "$jobs" -L 'loader|cli|hub|tokenizer|fuzz')

# The request fuzz target under libFuzzer (clang) + ASan + UBSan, for a bounded time
# (FUZZ_SECONDS, default 60), starting from the committed corpus. A crash, a sanitizer report
# or an exception other than miniinfer::Error fails the run; the input is left in build-fuzz/.
sanitize="-fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer"
CC=clang CXX=clang++ cmake -S . -B build-fuzz -G Ninja -DMINIINFER_CUDA=OFF -DMINIINFER_TESTS=OFF \
      -DMINIINFER_FUZZ=ON -DCMAKE_CXX_FLAGS="$sanitize" -DCMAKE_C_FLAGS="$sanitize" \
      -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=address,undefined" >/dev/null
ninja -C build-fuzz fuzz_requests
rm -rf build-fuzz/corpus && mkdir -p build-fuzz/corpus && cp tests/fuzz/corpus/* build-fuzz/corpus/
(cd build-fuzz && UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 tests/fuzz/fuzz_requests \
   -max_total_time="${FUZZ_SECONDS:-60}" -max_len=8192 -timeout=10 -rss_limit_mb=4096 \
   -print_final_stats=1 corpus 2>&1 | tail -15)

# The Python package, as a user installs it (pip install . : scikit-build-core runs the same
# CMake), then its tests on the CPU backend. The CUDA kernels are built and tested above; the
# package is built without them here to keep CI's time (CMAKE_ARGS adds to, and may override,
# this; CMAKE_CXX_COMPILER_LAUNCHER=ccache in the environment is honoured).
CMAKE_ARGS="-DMINIINFER_CUDA=OFF ${CMAKE_ARGS:-}" .venv/bin/pip install -q --disable-pip-version-check .
.venv/bin/python -m pytest -q -p no:cacheprovider tests/python
echo "test: all passed"
