// How our kernels are launched: programmatic dependent launch (PDL, sm_90). A kernel launched
// with launch_kernel may be started by the GPU while the kernel before it in the stream is still
// running, once every block of that one has called pdl_trigger() (or exited): its blocks are
// placed and wait in pdl_wait(), which returns when the previous kernel has finished and its
// writes are visible. This hides the launch gap between dependent kernels (a few µs each, the
// bulk of a batch-1 decode step's ~290 kernels), and lets a kernel start loading what no earlier
// kernel writes (gemv: the weights) before it waits.
// The rule every kernel here follows: nothing that an earlier kernel may write (or still read) is
// touched before pdl_wait(); pdl_trigger() right after it. The step's inputs that only
// host-to-device copies write (query_start, seq_lens, block tables, an attention plan's tables)
// count as never written: a copy finishes before the step's first kernel starts, so the decode
// kernels read them, and find their keys, before waiting. Nor is the output of the kernel two
// launches back still being written: the kernel in between waited for it before triggering this
// one (moe_gemv's down reads moe_route's choices before waiting for gate_up). A kernel launched
// without the attribute (a cuBLASLt GEMM, an NCCL collective, a copy) simply runs after its
// predecessor, and pdl_wait() in a kernel launched after one returns at once. Captured into CUDA
// graphs as programmatic edges. Tuning::pdl off (`bench --tuning pdl=0`) launches every kernel
// plainly (launch.h: pdl_enabled).
#pragma once

#include <cuda_runtime.h>

#include <utility>

#include "core/cuda/cuda_check.h"
#include "kernels/cuda/primitives/launch.h"

namespace miniinfer::cuda {

// Waits until the previous kernel in the stream has finished and its writes are visible.
__device__ __forceinline__ void pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}

// Lets the next kernel in the stream be launched once every block of this one has called it.
__device__ __forceinline__ void pdl_trigger() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}

// The launch attribute that cuts a grid into thread-block clusters of cluster.x * .y * .z blocks
// (launch_kernel_in_clusters; an occupancy query for clusters takes the same).
inline cudaLaunchAttribute cluster_dimension(dim3 cluster) {
    cudaLaunchAttribute attribute{};
    attribute.id = cudaLaunchAttributeClusterDimension;
    attribute.val.clusterDim.x = cluster.x;
    attribute.val.clusterDim.y = cluster.y;
    attribute.val.clusterDim.z = cluster.z;
    return attribute;
}

// launch_kernel (below) with the grid cut into thread-block clusters of cluster.x * .y * .z blocks
// (sm_90: a cluster's blocks run at the same time, on one GPC, and may read each other's shared
// memory; grid a multiple of cluster). Above 8 blocks a cluster the kernel must be allowed
// non-portable sizes first (allow_large_clusters). dim3(1, 1, 1): no clusters.
template <typename... Params, typename... Args>
void launch_kernel_in_clusters(void (*kernel)(Params...), dim3 grid, dim3 cluster, dim3 block,
                               size_t shared_bytes, cudaStream_t stream, Args&&... args) {
    cudaLaunchAttribute attributes[2]{};
    unsigned count = 0;
    if (pdl_enabled()) {
        attributes[count].id = cudaLaunchAttributeProgrammaticStreamSerialization;
        attributes[count++].val.programmaticStreamSerializationAllowed = 1;
    }
    if (cluster.x * cluster.y * cluster.z > 1) attributes[count++] = cluster_dimension(cluster);
    cudaLaunchConfig_t config{};
    config.gridDim = grid;
    config.blockDim = block;
    config.dynamicSmemBytes = shared_bytes;
    config.stream = stream;
    config.attrs = attributes;
    config.numAttrs = count;
    MI_CUDA_CHECK(cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...));
}

// kernel<<<grid, block, shared_bytes, stream>>>(args...), with programmatic stream
// serialisation allowed (see above). The arguments are converted to the kernel's parameter
// types as a <<<>>> launch converts them.
template <typename... Params, typename... Args>
void launch_kernel(void (*kernel)(Params...), dim3 grid, dim3 block, size_t shared_bytes,
                   cudaStream_t stream, Args&&... args) {
    launch_kernel_in_clusters(kernel, grid, dim3(1, 1, 1), block, shared_bytes, stream,
                              std::forward<Args>(args)...);
}

// Lets Kernel launch in clusters of more than 8 blocks (up to 16 on the H100/H200), once per
// kernel and process.
template <auto Kernel>
void allow_large_clusters() {
    static const bool done = [] {
        MI_CUDA_CHECK(
            cudaFuncSetAttribute(Kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
        return true;
    }();
    (void)done;
}

// Lets Kernel launch with `bytes` of dynamic shared memory (above 48 KiB a kernel must opt in),
// once per kernel and process. Not a stream operation, so graph capture does not mind.
template <auto Kernel>
void allow_shared_memory(size_t bytes) {
    static const bool done = [bytes] {
        MI_CUDA_CHECK(
            cudaFuncSetAttribute(Kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes)));
        return true;
    }();
    (void)done;
}

}  // namespace miniinfer::cuda
