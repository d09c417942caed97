#include "models/cuda_model.h"

#include "core/check.h"
#include "models/qwen_cuda_model.h"

namespace miniinfer {

std::unique_ptr<CudaModel> make_cuda_model(const ModelConfig& config, ModelWeights weights,
                                           cuda::Communicator* comm) {
    switch (config.arch) {
        case Arch::kQwen2:
        case Arch::kQwen3:
            return std::make_unique<QwenCudaModel>(config, std::move(weights), comm);
        case Arch::kQwen3Moe:
            break;
    }
    fail("{}: Qwen3-MoE does not run on CUDA yet; use --device cpu", config.model_type);
}

}  // namespace miniinfer
