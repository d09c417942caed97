#include "kernels/cpu/fp8_linear.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <vector>

#include "core/dtype.h"
#include "core/thread_pool.h"

namespace miniinfer::cpu {
namespace {

int64_t num_blocks(int64_t n) {
    return (n + kFp8Block - 1) / kFp8Block;
}

// Every e4m3 byte widened once: a table look-up per element instead of bit arithmetic.
const std::array<float, 256>& e4m3_table() {
    static const std::array<float, 256> table = [] {
        std::array<float, 256> t{};
        for (int v = 0; v < 256; ++v) t[size_t(v)] = e4m3_to_f32(uint8_t(v));
        return t;
    }();
    return table;
}

}  // namespace

void quantize_fp8_groups(const float* x, int64_t n, int64_t in, uint8_t* q, float* scales) {
    const int64_t groups = num_blocks(in);
    for (int64_t t = 0; t < n; ++t)
        for (int64_t g = 0; g < groups; ++g) {
            const int64_t begin = g * kFp8Block, end = std::min(in, begin + kFp8Block);
            float amax = 0.f;
            for (int64_t i = begin; i < end; ++i) amax = std::max(amax, std::fabs(x[t * in + i]));
            const float s = amax / 448.f;
            const float divisor = std::max(s, kFp8MinScale);
            for (int64_t i = begin; i < end; ++i)
                q[t * in + i] = f32_to_e4m3(x[t * in + i] / divisor);
            scales[t * groups + g] = s;
        }
}

// Each task takes a range of output rows, widens them once and runs them against every token.
void fp8_block_linear(const float* x, int64_t n, int64_t in, const uint8_t* w, const float* w_scale,
                      const float* bias, int64_t out, float* y) {
    const int64_t groups = num_blocks(in);
    std::vector<uint8_t> q(size_t(n * in));
    std::vector<float> x_scales(size_t(n * groups));
    quantize_fp8_groups(x, n, in, q.data(), x_scales.data());
    const std::array<float, 256>& widen = e4m3_table();
    std::vector<float> xq(size_t(n * in));  // the quantized activations' e4m3 values, exact
    for (size_t i = 0; i < q.size(); ++i) xq[i] = widen[q[i]];
    ThreadPool::current().parallel_for(out, [&](int64_t begin, int64_t end) {
        std::vector<float> row(static_cast<size_t>(in));
        for (int64_t o = begin; o < end; ++o) {
            for (int64_t i = 0; i < in; ++i) row[size_t(i)] = widen[w[o * in + i]];
            const float* row_scales = w_scale + (o / kFp8Block) * groups;
            for (int64_t t = 0; t < n; ++t) {
                const float* a = xq.data() + t * in;
                float acc = 0.f;
                for (int64_t g = 0; g < groups; ++g) {
                    const int64_t lo = g * kFp8Block, hi = std::min(in, lo + kFp8Block);
                    float partial = 0.f;
                    for (int64_t i = lo; i < hi; ++i) partial += a[i] * row[size_t(i)];
                    acc += partial * x_scales[size_t(t * groups + g)] * row_scales[g];
                }
                y[t * out + o] = acc + (bias ? bias[o] : 0.f);
            }
        }
    });
}

void quantize_fp8_blocks(const float* w, int64_t out, int64_t in, uint8_t* q, float* scales) {
    const int64_t row_blocks = num_blocks(out), col_blocks = num_blocks(in);
    for (int64_t i = 0; i < row_blocks; ++i)
        for (int64_t j = 0; j < col_blocks; ++j) {
            const int64_t r0 = i * kFp8Block, r1 = std::min(out, r0 + kFp8Block);
            const int64_t c0 = j * kFp8Block, c1 = std::min(in, c0 + kFp8Block);
            float amax = 0.f;
            for (int64_t r = r0; r < r1; ++r)
                for (int64_t c = c0; c < c1; ++c) amax = std::max(amax, std::fabs(w[r * in + c]));
            const float scale = std::max(amax / 448.f, kFp8MinScale);
            scales[i * col_blocks + j] = scale;
            for (int64_t r = r0; r < r1; ++r)
                for (int64_t c = c0; c < c1; ++c)
                    q[r * in + c] = f32_to_e4m3(w[r * in + c] / scale);
        }
}

void dequantize_fp8_blocks(const uint8_t* w, const float* w_scale, int64_t out, int64_t in,
                           float* y) {
    const int64_t groups = num_blocks(in);
    const std::array<float, 256>& widen = e4m3_table();
    for (int64_t o = 0; o < out; ++o)
        for (int64_t i = 0; i < in; ++i)
            y[o * in + i] =
                widen[w[o * in + i]] * w_scale[(o / kFp8Block) * groups + i / kFp8Block];
}

}  // namespace miniinfer::cpu
