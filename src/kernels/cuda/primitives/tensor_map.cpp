#include "kernels/cuda/primitives/tensor_map.h"

#include <cudaTypedefs.h>  // PFN_cuTensorMapEncodeTiled

#include "core/cuda/cuda_check.h"

namespace miniinfer::cuda {

CUtensorMap tensor_map_2d(const void* data, CUtensorMapDataType type, int64_t element_bytes,
                          int64_t rows, int64_t cols, int box_cols, int box_rows) {
    using Encode = PFN_cuTensorMapEncodeTiled_v12000;
    static const Encode encode = [] {
        void* fn = nullptr;
        cudaDriverEntryPointQueryResult found{};
        MI_CUDA_CHECK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000,
                                                       cudaEnableDefault, &found));
        MI_LAUNCH_CHECK(found == cudaDriverEntryPointSuccess && fn != nullptr,
                        "tensor_map_2d: the driver has no cuTensorMapEncodeTiled");
        return reinterpret_cast<Encode>(fn);
    }();
    const cuuint64_t dims[2] = {cuuint64_t(cols), cuuint64_t(rows)};
    const cuuint64_t strides[1] = {cuuint64_t(cols * element_bytes)};
    const cuuint32_t box[2] = {cuuint32_t(box_cols), cuuint32_t(box_rows)};
    const cuuint32_t element_strides[2] = {1, 1};
    CUtensorMap map;
    const CUresult r =
        encode(&map, type, 2, const_cast<void*>(data), dims, strides, box, element_strides,
               CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
               CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    MI_LAUNCH_CHECK(r == CUDA_SUCCESS, "tensor_map_2d: cuTensorMapEncodeTiled failed");
    return map;
}

}  // namespace miniinfer::cuda
