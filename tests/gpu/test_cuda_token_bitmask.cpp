// The CUDA token-bitmask kernel (structured output) against its definition on random masks:
// a listed row's logit is -inf exactly where its mask bit is clear, everything else untouched
// (bitwise). Vocabularies of Qwen3's size and of sizes that end mid-word.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "core/cuda/cuda_check.h"
#include "core/cuda/device_buffer.h"
#include "gpu_testing.h"
#include "kernels/cuda/sampling/token_bitmask.h"

using namespace miniinfer;

namespace {

Tensor host_tensor(const void* data, Shape shape, DType dtype) {
    Tensor t = Tensor::zeros(std::move(shape), dtype);
    if (t.nbytes() > 0) std::memcpy(t.raw(), data, t.nbytes());
    return t;
}

TEST(CudaTokenBitmask, MatchesDefinition) {
    REQUIRE_GPU();
    std::mt19937 rng(49);
    for (int64_t vocab : {151936, 1001, 33, 32}) {
        const int64_t num_rows = 5, num_words = (vocab + 31) / 32;
        std::vector<float> logits(num_rows * vocab);
        std::normal_distribution<float> normal;
        for (float& x : logits) x = normal(rng);
        const std::vector<int32_t> mask_rows = {3, 0, 4};  // row 1 and 2 unlisted
        std::vector<uint32_t> masks(mask_rows.size() * num_words);
        for (size_t m = 0; m < mask_rows.size(); ++m) {
            for (int64_t w = 0; w < num_words; ++w) {
                const int kind = int(rng() % 3);  // all allowed, none, random bits
                masks[m * num_words + w] = kind == 0 ? ~0u : kind == 1 ? 0u : uint32_t(rng());
            }
        }
        std::vector<float> expected = logits;
        for (size_t m = 0; m < mask_rows.size(); ++m)
            for (int64_t id = 0; id < vocab; ++id)
                if (!((masks[m * num_words + id / 32] >> (id % 32)) & 1u))
                    expected[mask_rows[m] * vocab + id] = -INFINITY;
        Tensor d_logits =
            cuda::to_device(host_tensor(logits.data(), {num_rows, vocab}, DType::kF32));
        Tensor d_masks = cuda::to_device(
            host_tensor(masks.data(), {int64_t(mask_rows.size()), num_words}, DType::kI32));
        Tensor d_rows = cuda::to_device(
            host_tensor(mask_rows.data(), {int64_t(mask_rows.size())}, DType::kI32));
        cuda::apply_token_bitmask(d_logits, d_masks, d_rows, nullptr);
        MI_CUDA_CHECK(cudaDeviceSynchronize());
        Tensor got = cuda::to_host(d_logits);
        EXPECT_EQ(std::memcmp(got.raw(), expected.data(), expected.size() * sizeof(float)), 0)
            << "vocab " << vocab;
    }
}

}  // namespace
