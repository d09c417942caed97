# Sourced by the scripts/gpu_*.sh that run on the GPU machine: from the repository root, the
# output folder ($OUT, else gpu-results/, created) as $out, the package (DIST_DIR, else
# dist/gpu from scripts/package_gpu.sh) as $dist, and its libraries and CUDA's on the loader path.
cd "$(dirname "${BASH_SOURCE[0]}")/.."
out=${OUT:-gpu-results}
dist=${DIST_DIR:-dist/gpu}
mkdir -p "$out"
export LD_LIBRARY_PATH="$PWD/$dist/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
