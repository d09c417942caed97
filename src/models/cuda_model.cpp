#include "models/cuda_model.h"

#include <chrono>
#include <functional>

#include "core/check.h"
#include "core/cuda/cuda_check.h"
#include "core/cuda/device_buffer.h"
#include "core/logging.h"
#include "kernels/cuda/elementwise/fill_random.h"
#include "kernels/cuda/gemm/fp8_gemm.h"
#include "models/qwen_cuda_model.h"

namespace miniinfer {

ModelWeights dummy_cuda_weights(const ModelConfig& config, uint64_t seed,
                                const WeightTarget& target) {
    MI_CHECK(target.dtype == DType::kBF16, "dummy_cuda_weights writes bf16, not {}",
             dtype_name(target.dtype));
    const auto start = std::chrono::steady_clock::now();
    WeightWriter writer;
    writer.allocate = [](const Shape& shape, DType dtype) {
        return cuda::device_tensor(shape, dtype);
    };
    writer.write = [&](const std::string& name, const Shape& shape, const WeightBlock& b,
                       DType dtype, void* dst) {
        MI_CHECK(dtype == DType::kBF16 || dtype == DType::kF8E4M3 || dtype == DType::kF32,
                 "dummy_cuda_weights writes bf16 (and an FP8 checkpoint's e4m3 and f32 scales), "
                 "not {} ({})",
                 dtype_name(dtype), name);
        // An e4m3 weight is unit-scale, as dummy_weights makes it: its scales carry the rest.
        const DummyInit init = dtype == DType::kF8E4M3 ? DummyInit{} : dummy_init(name, shape);
        const int64_t n = (b.row_end - b.row_begin) * (b.col_end - b.col_begin);
        Tensor out(dst, dtype, {n}, Device::kCUDA);
        cuda::fill_normal(out,
                          {.cols = b.cols,
                           .row_begin = b.row_begin,
                           .row_end = b.row_end,
                           .col_begin = b.col_begin,
                           .col_end = b.col_end},
                          seed ^ std::hash<std::string>{}(name), init.scale, init.constant,
                          nullptr);
    };
    writer.parallel = false;  // launches in order on the default stream
    ModelWeights w = assemble_weights(config, target, std::move(writer));
    MI_CUDA_CHECK(cudaDeviceSynchronize());
    w.stats.seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    MI_LOG_INFO("dummy weights on the GPU: {} tensors, {:.2f} GB (rank {} of {}) in {:.2f} s",
                w.stats.num_tensors, double(w.stats.bytes_written) / 1e9, target.rank, target.world,
                w.stats.seconds);
    return w;
}

std::unique_ptr<CudaModel> make_cuda_model(const ModelConfig& config, ModelWeights weights,
                                           Communicator* comm, const Tuning& tuning) {
    check_engine_support(config, "cuda", comm ? comm->world() : 1);
    if (config.quantization.is_fp8() && !cuda::fp8_gemm_supported())
        fail(
            "{}: FP8 block-scaled checkpoints (quantization_config {}) run on sm_90 GPUs (H100, "
            "H200) only on --device cuda; --device cpu runs them anywhere",
            config.model_type, config.quantization.describe());
    switch (config.arch) {
        case Arch::kQwen2:
        case Arch::kQwen3:
        case Arch::kQwen3Moe:
        case Arch::kQwen35:
        case Arch::kQwen35Moe:
        case Arch::kQwen3Next:
            return std::make_unique<QwenCudaModel>(config, std::move(weights), comm, tuning);
    }
    fail("{}: not supported on CUDA", config.model_type);
}

}  // namespace miniinfer
