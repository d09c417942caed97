#!/usr/bin/env bash
# Packages build/ for a bare CUDA machine (e.g. the H200 lent through the device tool) into
# dist/gpu/: bin/ (miniinfer, every test binary and bench_cuda_ops) and lib/ (the shared
# libraries from Debian packages that such a machine lacks; glibc, libstdc++ and CUDA's own
# libraries stay out; so does NCCL, ~300 MB: gpu_env.sh finds the GPU machine's own; CUPTI goes
# in, 4 MB, for bench --profile-kernels).
# Run scripts/build.sh first. Also writes dist/gpu.tar.xz (xz -9: the binaries share most of
# their code, so its bin/ packs small — 5 MB for miniinfer and four test_cuda_* binaries; the
# device tool carries at most 64 MiB with the repository, scripts/carry_slim.sh makes room):
# carry that and run scripts/gpu_check.sh there (gpu_env.sh unpacks the archives it finds beside dist/gpu).
# BUILD_DIR (default build) and DIST_DIR (default dist/gpu) pick other folders. TESTS=cuda packs
# only the test_cuda_* binaries (with the benchmarks): half the size, for when the device tool's
# 64 MiB (package plus repository) is tight and only the GPU tests are to run; with ONLY="words"
# as well, only the test_cuda_* binaries whose names hold one of them (about 21 MB for the MoE
# ones, against 26 MB for all).
# BENCH_OPS=0 leaves bench_cuda_ops out (12 MB) when no op benchmark is to run. SPLIT=1 writes
# two archives instead of dist/gpu.tar.xz: dist/gpu-lib.tar.xz (lib/, the same from build to
# build, about 8 MB) and dist/gpu-bin.tar.xz (bin/ and python/), so that a session carries the
# libraries once and one small bin archive per build it compares (DIST_DIR=dist/gpu-b with
# BUILD_DIR=build-b gives dist/gpu-b-bin.tar.xz, unpacked by hand: tar -C dist -xJf).
# A build with -DMINIINFER_C_API=ON also gets python/: the package `miniinfer` with its
# libminiinfer_c.so and bin/miniinfer inside, for PYTHONPATH=dist/gpu/python on a machine
# without a compiler (scripts/gpu_bench_python.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
build=${BUILD_DIR:-build}
out=${DIST_DIR:-dist/gpu}
rm -rf "$out"
mkdir -p "$out/bin" "$out/lib"
[ -f "$build/src/apps/miniinfer" ] && cp "$build/src/apps/miniinfer" "$out/bin/"
tests='test_*'
[ "${TESTS:-all}" = cuda ] && tests='test_cuda_*'
[ -d "$build/tests" ] && find "$build/tests" -type f \( -name "$tests" -o -name 'bench_*' \) -perm -u+x -exec cp {} "$out/bin/" \;
# TESTS=cuda ONLY="word ...": only the test_cuda_* binaries whose names hold one of the words
# (as gpu_check.sh's ONLY), and no bench_tokenizer: for a carry that must stay small.
if [ "${TESTS:-all}" = cuda ] && [ -n "${ONLY:-}" ]; then
  rm -f "$out/bin/bench_tokenizer"
  for t in "$out"/bin/test_cuda_*; do
    keep=0
    for word in $ONLY; do [[ "$(basename "$t")" == *"$word"* ]] && keep=1; done
    [ "$keep" = 1 ] || rm -f "$t"
  done
fi
[ "${BENCH_OPS:-1}" = 0 ] && rm -f "$out/bin/bench_cuda_ops"
if [ -f "$build/src/capi/libminiinfer_c.so" ]; then
  mkdir -p "$out/python"
  cp -r python/miniinfer "$out/python/"
  find "$out/python" -name __pycache__ -prune -exec rm -rf {} +
  cp "$build/src/capi/libminiinfer_c.so" "$out/python/miniinfer/"
  mkdir -p "$out/python/miniinfer/bin"
  cp "$build/src/apps/miniinfer" "$out/python/miniinfer/bin/"
fi
for b in "$out"/bin/* $(find "$out/python" -name '*.so' 2>/dev/null); do ldd "$b"; done | awk '/=> \// {print $3}' | sort -u |
  grep -vE '/(libc|libm|libstdc\+\+|libgcc_s|ld-linux[^/]*|libpthread|libdl|librt|libresolv|libanl|libutil|libcuda|libcudart|libcublas[^/]*|libnccl)\.so' |
  xargs -r cp -L -t "$out/lib"
# CUPTI, which `bench --profile-kernels` loads at run time (the GPU machine's toolkit may lack it).
cupti=$(ls /usr/local/cuda/lib64/libcupti.so.1[0-9] /usr/local/cuda/extras/CUPTI/lib64/libcupti.so.1[0-9] 2>/dev/null | head -1 || true)
[ -n "$cupti" ] && cp -L "$cupti" "$out/lib/"
strip --strip-debug "$out"/bin/* "$out"/lib/* $(find "$out/python" -name '*.so' -o -path '*/bin/miniinfer' 2>/dev/null)
name=$(basename "$out")
pack() {  # pack ARCHIVE TAR_ARGS...: a tar of dist's folder, xz -9
  local archive=$1; shift
  tar -C "$(dirname "$out")" -cf - "$@" | xz -9 > "$archive"
}
if [ "${SPLIT:-0}" = 1 ]; then
  pack "$out-lib.tar.xz" "$name/lib"
  pack "$out-bin.tar.xz" --exclude="$name/lib" "$name"
  du -sh "$out" "$out-lib.tar.xz" "$out-bin.tar.xz"
else
  pack "$out.tar.xz" "$name"
  du -sh "$out" "$out.tar.xz"
fi
