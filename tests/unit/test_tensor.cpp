#include <gtest/gtest.h>

#include "core/tensor.h"

using namespace miniinfer;

TEST(Tensor, ZerosShapeStridesAndSlices) {
    Tensor t = Tensor::zeros({4, 3, 2}, DType::kF32);
    EXPECT_EQ(t.numel(), 24);
    EXPECT_EQ(t.strides(), (Shape{6, 2, 1}));
    EXPECT_TRUE(t.is_contiguous());
    for (int i = 0; i < 24; ++i) t.data<float>()[i] = float(i);
    Tensor s = t.slice_rows(1, 3);
    EXPECT_EQ(s.shape(), (Shape{2, 3, 2}));
    EXPECT_EQ(s.data<float>()[0], 6.f);
    Tensor v = t.view({8, 3});
    EXPECT_EQ(v.data<float>()[23], 23.f);
    EXPECT_EQ(t.describe(), "f32[4, 3, 2]");
}

TEST(Tensor, ToF32ConvertsBf16AndF16) {
    Tensor b = Tensor::zeros({3}, DType::kBF16);
    b.data<uint16_t>()[0] = f32_to_bf16(1.5f);
    b.data<uint16_t>()[1] = f32_to_bf16(-2.f);
    Tensor f = b.to_f32();
    EXPECT_EQ(f.data<float>()[0], 1.5f);
    EXPECT_EQ(f.data<float>()[1], -2.f);
    Tensor h = Tensor::zeros({1}, DType::kF16);
    h.data<uint16_t>()[0] = 0x3c00;
    EXPECT_EQ(h.to_f32().data<float>()[0], 1.f);
}
