// CUDA ops against the CPU reference ops on random inputs.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "core/cuda/cuda_check.h"
#include "core/cuda/device_buffer.h"
#include "gpu_testing.h"
#include "kernels/cpu/ops.h"
#include "kernels/cuda/norm/rms_norm.h"

using namespace miniinfer;
using gpu_testing::all_close;
using gpu_testing::bitwise_equal;
using gpu_testing::random_bf16;

TEST(CudaCore, DeviceRoundTrip) {
    REQUIRE_GPU();
    std::mt19937 rng(1);
    Tensor host = random_bf16({3, 5}, rng, 1.f);
    Tensor back = cuda::to_host(cuda::to_device(host));
    EXPECT_EQ(std::memcmp(host.raw(), back.raw(), host.nbytes()), 0);
}

// bf16 tolerance: the GPU rounds the normalised value and the product to bf16 (as Hugging Face
// does in bf16); the CPU reference stays in f32. Relative error ≤ 2 bf16 ulps (2^-7).
TEST(CudaOps, AddRmsNormMatchesCpu) {
    REQUIRE_GPU();
    std::mt19937 rng(2);
    for (int64_t rows : {1, 7, 64}) {
        // 1004 (not a multiple of 8) and 9000 (over 8,192) take the scalar kernel, the others
        // the vector one at each of its block shapes.
        for (int64_t dim : {32, 128, 1000, 1004, 2048, 4096, 8192, 9000}) {
            Tensor x = random_bf16({rows, dim}, rng, 2.f), res = random_bf16({rows, dim}, rng, 2.f);
            Tensor w = random_bf16({dim}, rng, 1.f);
            Tensor dx = cuda::to_device(x), dres = cuda::to_device(res), dw = cuda::to_device(w);
            Tensor dout = cuda::device_tensor({rows, dim}, DType::kBF16);
            cuda::add_rms_norm(dx, &dres, dw, 1e-6f, dout, nullptr);
            MI_CUDA_CHECK(cudaDeviceSynchronize());

            // Reference: residual sum rounded to bf16 (the stored stream), then the f32 norm.
            Tensor sum = Tensor::zeros({rows, dim}, DType::kBF16),
                   ref = Tensor::zeros({rows, dim}, DType::kF32);
            Tensor xf = x.to_f32(), rf = res.to_f32(), wf = w.to_f32();
            for (int64_t i = 0; i < rows * dim; ++i)
                sum.data<uint16_t>()[i] = f32_to_bf16(xf.data<float>()[i] + rf.data<float>()[i]);
            Tensor sum_f32 = sum.to_f32();
            cpu::rms_norm(sum_f32.data<float>(), wf.data<float>(), rows, dim, 1e-6f,
                          ref.data<float>());
            ASSERT_TRUE(bitwise_equal(dres, sum)) << "residual, rows " << rows << " dim " << dim;
            ASSERT_TRUE(all_close(dout, ref, {.atol = 1e-6, .rtol = 0.016}))
                << "rows " << rows << " dim " << dim;
        }
    }
}

// Without a residual the kernel normalises x itself (the first layer's input norm).
TEST(CudaOps, RmsNormWithoutResidualMatchesCpu) {
    REQUIRE_GPU();
    std::mt19937 rng(3);
    for (int64_t rows : {1, 5, 256}) {
        for (int64_t dim : {64, 1024, 1000}) {
            Tensor x = random_bf16({rows, dim}, rng, 2.f), w = random_bf16({dim}, rng, 1.f);
            Tensor dx = cuda::to_device(x);
            Tensor dout = cuda::device_tensor({rows, dim}, DType::kBF16);
            cuda::add_rms_norm(dx, nullptr, cuda::to_device(w), 1e-6f, dout, nullptr);
            MI_CUDA_CHECK(cudaDeviceSynchronize());
            Tensor xf = x.to_f32(), wf = w.to_f32(), ref = Tensor::zeros({rows, dim}, DType::kF32);
            cpu::rms_norm(xf.data<float>(), wf.data<float>(), rows, dim, 1e-6f, ref.data<float>());
            ASSERT_TRUE(bitwise_equal(dx, x)) << "x must not be written";
            ASSERT_TRUE(all_close(dout, ref, {.atol = 1e-6, .rtol = 0.016}))
                << "rows " << rows << " dim " << dim;
        }
    }
}
