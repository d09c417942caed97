# Sourced by the scripts/gpu_*.sh that run on the GPU machine: from the repository root, the
# output folder ($OUT, else gpu-results/, created) as $out, the package (DIST_DIR, else
# dist/gpu from scripts/package_gpu.sh) as $dist, and its libraries and CUDA's on the loader path.
cd "$(dirname "${BASH_SOURCE[0]}")/.."
out=${OUT:-gpu-results}
dist=${DIST_DIR:-dist/gpu}
mkdir -p "$out"
# scripts/package_gpu.sh's archives carried beside the package ($dist.tar.xz, or with SPLIT=1
# $dist-lib.tar.xz and $dist-bin.tar.xz): unpacked over it each time, so that a machine kept warm
# from an earlier call runs the binaries carried now.
for archive in "$dist.tar.xz" "$dist-lib.tar.xz" "$dist-bin.tar.xz"; do
  if [ -f "$archive" ]; then tar -C "$(dirname "$dist")" -xJf "$archive"; fi
done
# The demo tokenizer as scripts/carry_slim.sh left it beside the package.
if [ -f dist/demo-tokenizer.json.xz ] && [ ! -f tests/fixtures/qwen3-demo/tokenizer.json ]; then
  xz -dc dist/demo-tokenizer.json.xz > tests/fixtures/qwen3-demo/tokenizer.json
fi
export LD_LIBRARY_PATH="$PWD/$dist/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
# NCCL (tensor parallelism): the CUDA toolkit's, else PyTorch's wheel's (nvidia/nccl/lib).
if ! ls /usr/local/cuda/lib64/libnccl.so.2 >/dev/null 2>&1; then
  nccl=$(python3 -c 'import nvidia.nccl, os; print(os.path.join(list(nvidia.nccl.__path__)[0], "lib"))' 2>/dev/null ||
         find / -name libnccl.so.2 -path '*nccl*' 2>/dev/null | head -1 | xargs -r dirname)
  [ -n "$nccl" ] && export LD_LIBRARY_PATH="$nccl:$LD_LIBRARY_PATH"
fi
# Two GPUs of one host, as the device README asks: no NVLink multicast.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
