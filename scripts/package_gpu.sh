#!/usr/bin/env bash
# Packages build/ for a bare CUDA machine (e.g. the H200 lent through the device tool) into
# dist/gpu/: bin/ (miniinfer, every test binary and bench_cuda_ops) and lib/ (the shared
# libraries from Debian packages that such a machine lacks; glibc, libstdc++ and CUDA's own
# libraries stay out).
# Run scripts/build.sh first. Also writes dist/gpu.tar.xz (about 7 MB; the device tool carries
# at most 64 MiB with the repository): carry that, `tar -C dist -xJf dist/gpu.tar.xz` there,
# then run scripts/gpu_check.sh.
# BUILD_DIR (default build) and DIST_DIR (default dist/gpu) pick other folders.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${BUILD_DIR:-build}
out=${DIST_DIR:-dist/gpu}
rm -rf "$out"
mkdir -p "$out/bin" "$out/lib"
[ -f "$build/src/apps/miniinfer" ] && cp "$build/src/apps/miniinfer" "$out/bin/"
[ -d "$build/tests" ] && find "$build/tests" -type f \( -name 'test_*' -o -name 'bench_*' \) -perm -u+x -exec cp {} "$out/bin/" \;
for b in "$out"/bin/*; do ldd "$b"; done | awk '/=> \// {print $3}' | sort -u |
  grep -vE '/(libc|libm|libstdc\+\+|libgcc_s|ld-linux[^/]*|libpthread|libdl|librt|libresolv|libanl|libutil|libcuda|libcudart|libcublas[^/]*)\.so' |
  xargs -r cp -L -t "$out/lib"
strip --strip-debug "$out"/bin/* "$out"/lib/*
tar -C "$(dirname "$out")" -cJf "$out.tar.xz" "$(basename "$out")"
du -sh "$out" "$out.tar.xz"
