# Sourced by the scripts/gpu_*.sh that run on the GPU machine: from the repository root, the
# output folder ($OUT, else gpu-results/, created) as $out, the package (DIST_DIR, else
# dist/gpu from scripts/package_gpu.sh) as $dist, and its libraries and CUDA's on the loader path.
cd "$(dirname "${BASH_SOURCE[0]}")/.."
out=${OUT:-gpu-results}
dist=${DIST_DIR:-dist/gpu}
mkdir -p "$out"
export LD_LIBRARY_PATH="$PWD/$dist/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
# NCCL (tensor parallelism): the CUDA toolkit's, else PyTorch's wheel's (nvidia/nccl/lib).
if ! ls /usr/local/cuda/lib64/libnccl.so.2 >/dev/null 2>&1; then
  nccl=$(python3 -c 'import nvidia.nccl, os; print(os.path.join(list(nvidia.nccl.__path__)[0], "lib"))' 2>/dev/null ||
         find / -name libnccl.so.2 -path '*nccl*' 2>/dev/null | head -1 | xargs -r dirname)
  [ -n "$nccl" ] && export LD_LIBRARY_PATH="$nccl:$LD_LIBRARY_PATH"
fi
# Two GPUs of one host, as the device README asks: no NVLink multicast.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
