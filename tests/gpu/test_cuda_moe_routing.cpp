// The MoE routing kernels (kernels/cuda/moe/moe_routing.h) against CPU references on random inputs,
// E = 8 .. 256, k = 1 .. 8, n = 1 .. 4096, with and without renormalisation, plus all tokens on
// one expert and experts with no tokens.
//   route    ids equal cpu::moe_route's (equal logits tie to the lower id on both sides; the
//            inputs have no near-ties); weights within 1e-6 relative of an fp64 softmax, and
//            within 1e-5 of cpu::moe_route's (its fp32 sum over E in sequence is the looser one)
//   permute  bit for bit against permute_reference below (integers)
//   gather   bit for bit (a copy); rows past expert_offsets[E] untouched
//   combine  bit for bit against the same fp32 fused multiply-adds in the same order, and
//            within one bf16 ulp of the plain fp32 sum; the same bits on a second run
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <span>
#include <vector>

#include "core/cuda/cuda_check.h"
#include "core/cuda/device_buffer.h"
#include "gpu_testing.h"
#include "kernels/cpu/ops.h"
#include "kernels/cuda/moe/moe_routing.h"

using namespace miniinfer;
using gpu_testing::all_close;
using gpu_testing::bitwise_equal;
using gpu_testing::random_bf16;

namespace {

constexpr int64_t kExpertCounts[] = {8, 16, 64, 128, 256, 512};  // 512: Qwen3-Next, Qwen3.5-397B
constexpr int64_t kTopKs[] = {1, 2, 4, 8, 10};
constexpr int64_t kTokenCounts[] = {1, 7, 64, 1000, 4096};
constexpr int64_t kTileRows[] = {1, 16, 128};

Tensor host_i32(const std::vector<int32_t>& values, Shape shape) {
    Tensor t = Tensor::zeros(std::move(shape), DType::kI32);
    std::memcpy(t.raw(), values.data(), t.nbytes());
    return t;
}

std::vector<int32_t> i32_values(const Tensor& t) {
    const Tensor host = t.device() == Device::kCUDA ? cuda::to_host(t) : t;
    const auto* p = host.data<int32_t>();
    return {p, p + host.numel()};
}

// A device tensor whose every byte is 0xab: a kernel that skips an element it should write shows.
Tensor poisoned(Shape shape, DType dtype) {
    Tensor t = cuda::device_tensor(std::move(shape), dtype);
    MI_CUDA_CHECK(cudaMemset(t.raw(), 0xab, t.nbytes()));
    return t;
}

// Logits of distinct values: each row a shuffle of (i - E/2) / 16, exact in bf16 for E <= 256.
Tensor distinct_logits(int64_t n, int64_t num_experts, std::mt19937& rng) {
    Tensor t = Tensor::zeros({n, num_experts}, DType::kBF16);
    std::vector<int64_t> order(static_cast<size_t>(num_experts));
    for (int64_t r = 0; r < n; ++r) {
        std::iota(order.begin(), order.end(), 0);
        std::shuffle(order.begin(), order.end(), rng);
        for (int64_t e = 0; e < num_experts; ++e)
            t.data<uint16_t>()[r * num_experts + e] =
                f32_to_bf16(float(order[size_t(e)] - num_experts / 2) / 16.f);
    }
    return t;
}

// The chosen experts' softmax probabilities in fp64 (renormalised over the chosen when asked).
std::vector<double> route_weights_fp64(const Tensor& logits_f32, const std::vector<int32_t>& ids,
                                       int64_t top_k, bool renormalize) {
    const int64_t n = logits_f32.size(0), num_experts = logits_f32.size(1);
    std::vector<double> out(ids.size());
    for (int64_t t = 0; t < n; ++t) {
        const float* row = logits_f32.data<float>() + t * num_experts;
        const double row_max = *std::max_element(row, row + num_experts);
        double sum = 0, chosen = 0;
        for (int64_t e = 0; e < num_experts; ++e) sum += std::exp(double(row[e]) - row_max);
        for (int64_t j = 0; j < top_k; ++j)
            chosen += std::exp(double(row[ids[size_t(t * top_k + j)]]) - row_max);
        for (int64_t j = 0; j < top_k; ++j)
            out[size_t(t * top_k + j)] =
                std::exp(double(row[ids[size_t(t * top_k + j)]]) - row_max) /
                (renormalize ? chosen : sum);
    }
    return out;
}

struct PermuteResult {
    std::vector<int32_t> expert_offsets, row_token, slot_row;
};

// The permuted layout by its definition: experts in order, each expert's slots in (token,
// choice) order, segments padded to tile_rows with -1, -1 up to max_rows.
PermuteResult permute_reference(const std::vector<int32_t>& ids, int64_t top_k, int64_t num_experts,
                                int64_t tile_rows, int64_t max_rows) {
    PermuteResult r;
    r.row_token.assign(size_t(max_rows), -1);
    r.slot_row.assign(ids.size(), -1);
    int32_t row = 0;
    for (int32_t e = 0; e < num_experts; ++e) {
        r.expert_offsets.push_back(row);
        const int32_t first = row;
        for (size_t i = 0; i < ids.size(); ++i) {
            if (ids[i] != e) continue;
            r.slot_row[i] = row;
            r.row_token[size_t(row++)] = int32_t(int64_t(i) / top_k);
        }
        row = first + int32_t((row - first + tile_rows - 1) / tile_rows * tile_rows);
    }
    r.expert_offsets.push_back(row);
    return r;
}

// Every token's k choices: k distinct experts at random (as moe_route makes them).
std::vector<int32_t> random_choices(int64_t n, int64_t top_k, int64_t num_experts,
                                    std::mt19937& rng) {
    std::vector<int32_t> ids(size_t(n * top_k)), experts(static_cast<size_t>(num_experts));
    for (int64_t t = 0; t < n; ++t) {
        std::iota(experts.begin(), experts.end(), 0);
        std::shuffle(experts.begin(), experts.end(), rng);
        std::copy_n(experts.begin(), top_k, ids.begin() + t * top_k);
    }
    return ids;
}

// Choices that leave experts empty: every token picks from the same few experts. `kind` 0: all
// k choices of every token are expert E - 1 (repeats: the kernel does not need distinct ids);
// 1: every token picks experts 1, 3, 5, ... (all on k experts, the rest empty); 2: the odd
// experts only, at random.
std::vector<int32_t> skewed_choices(int kind, int64_t n, int64_t top_k, int64_t num_experts,
                                    std::mt19937& rng) {
    std::vector<int32_t> ids(size_t(n * top_k));
    for (int64_t t = 0; t < n; ++t) {
        for (int64_t j = 0; j < top_k; ++j) {
            int32_t e = int32_t(num_experts - 1);
            if (kind == 1) e = int32_t((2 * j + 1) % num_experts);
            if (kind == 2) e = int32_t(2 * (rng() % uint32_t(num_experts / 2)) + 1);
            ids[size_t(t * top_k + j)] = e;
        }
    }
    return ids;
}

struct DevicePermute {
    Tensor expert_offsets, row_token, slot_row;
};

DevicePermute run_permute(const std::vector<int32_t>& ids, int64_t n, int64_t top_k,
                          int64_t num_experts, int64_t tile_rows) {
    const int64_t max_rows = cuda::moe_max_rows(n, top_k, num_experts, tile_rows);
    DevicePermute d{poisoned({num_experts + 1}, DType::kI32), poisoned({max_rows}, DType::kI32),
                    poisoned({n, top_k}, DType::kI32)};
    Tensor dids = cuda::to_device(host_i32(ids, {n, top_k}));
    Tensor workspace =
        poisoned({cuda::moe_permute_workspace_elems(n, top_k, num_experts)}, DType::kI32);
    cuda::moe_permute(dids, num_experts, tile_rows, workspace, d.expert_offsets, d.row_token,
                      d.slot_row, nullptr);
    MI_CUDA_CHECK(cudaDeviceSynchronize());
    return d;
}

::testing::AssertionResult permute_matches(const std::vector<int32_t>& ids, int64_t n,
                                           int64_t top_k, int64_t num_experts, int64_t tile_rows) {
    const int64_t max_rows = cuda::moe_max_rows(n, top_k, num_experts, tile_rows);
    const PermuteResult ref = permute_reference(ids, top_k, num_experts, tile_rows, max_rows);
    if (ref.expert_offsets.back() > max_rows)
        return ::testing::AssertionFailure()
               << "moe_max_rows too small: " << max_rows << " < " << ref.expert_offsets.back();
    const DevicePermute d = run_permute(ids, n, top_k, num_experts, tile_rows);
    const std::vector<int32_t> offsets = i32_values(d.expert_offsets),
                               rows = i32_values(d.row_token), slots = i32_values(d.slot_row);
    if (auto r = bitwise_equal<int32_t>(offsets, ref.expert_offsets); !r) return r << " (offsets)";
    if (auto r = bitwise_equal<int32_t>(rows, ref.row_token); !r) return r << " (row_token)";
    if (auto r = bitwise_equal<int32_t>(slots, ref.slot_row); !r) return r << " (slot_row)";
    return ::testing::AssertionSuccess();
}

// out[t] = bf16(fma-chain over j of w[t, j] · y[slot_row[t, j]]): the kernel's operations.
Tensor combine_reference_fma(const Tensor& y_perm, const std::vector<int32_t>& slot_row,
                             const std::vector<float>& weights, int64_t n, int64_t top_k) {
    const int64_t hidden = y_perm.size(1);
    Tensor out = Tensor::zeros({n, hidden}, DType::kBF16);
    const auto* y = y_perm.data<uint16_t>();
    for (int64_t t = 0; t < n; ++t) {
        for (int64_t i = 0; i < hidden; ++i) {
            float acc = 0.f;
            for (int64_t j = 0; j < top_k; ++j) {
                const size_t s = size_t(t * top_k + j);
                acc = std::fma(weights[s], bf16_to_f32(y[slot_row[s] * hidden + i]), acc);
            }
            out.data<uint16_t>()[t * hidden + i] = f32_to_bf16(acc);
        }
    }
    return out;
}

}  // namespace

TEST(CudaMoeRouting, MaxRowsBoundsEveryLayout) {
    // The bound needs no GPU, but the function lives in the CUDA library.
    EXPECT_EQ(cuda::moe_max_rows(1, 8, 128, 1), 8);
    EXPECT_EQ(cuda::moe_max_rows(1, 8, 128, 128), 8 * 128);   // 8 experts, one tile each
    EXPECT_EQ(cuda::moe_max_rows(4096, 8, 128, 128), 49024);  // 32768 + 128 · 127
    EXPECT_EQ(cuda::moe_max_rows(3, 2, 64, 16), 96);          // 6 + 6 · 15 = 96, a multiple of 16
    EXPECT_EQ(cuda::moe_max_rows(3, 3, 64, 16), 144);         // 9 + 9 · 15 = 144
}

TEST(CudaMoeRouting, RouteMatchesCpu) {
    REQUIRE_GPU();
    std::mt19937 rng(11);
    for (int64_t num_experts : kExpertCounts) {
        for (int64_t top_k : kTopKs) {
            if (top_k > num_experts) continue;
            for (bool renormalize : {false, true}) {
                for (int64_t n : kTokenCounts) {
                    for (bool distinct : {true, false}) {
                        // Normal logits tie exactly now and then (bf16): both sides take the
                        // lower id. Distinct logits leave nothing to tie-breaking.
                        const Tensor logits = distinct ? distinct_logits(n, num_experts, rng)
                                                       : random_bf16({n, num_experts}, rng, 2.f);
                        Tensor ids = poisoned({n, top_k}, DType::kI32);
                        Tensor weights = poisoned({n, top_k}, DType::kF32);
                        cuda::moe_route(cuda::to_device(logits), top_k, renormalize, ids, weights,
                                        nullptr);
                        MI_CUDA_CHECK(cudaDeviceSynchronize());

                        const Tensor logits_f32 = logits.to_f32();
                        std::vector<int32_t> ref_ids(size_t(n * top_k));
                        std::vector<float> ref_weights(size_t(n * top_k));
                        cpu::moe_route(logits_f32.data<float>(), n, num_experts, top_k, renormalize,
                                       ref_ids.data(), ref_weights.data());
                        const std::vector<double> exact =
                            route_weights_fp64(logits_f32, ref_ids, top_k, renormalize);
                        const std::vector<double> got = gpu_testing::to_doubles(weights);
                        const std::vector<double> cpu(ref_weights.begin(), ref_weights.end());

                        SCOPED_TRACE(::testing::Message()
                                     << "E " << num_experts << " k " << top_k << " renormalize "
                                     << renormalize << " n " << n << " distinct " << distinct);
                        ASSERT_TRUE(bitwise_equal<int32_t>(i32_values(ids), ref_ids));
                        ASSERT_TRUE(all_close(got, exact, {.atol = 0, .rtol = 1e-6}));
                        ASSERT_TRUE(all_close(got, cpu, {.atol = 0, .rtol = 1e-5}));
                    }
                }
            }
        }
    }
}

TEST(CudaMoeRouting, PermuteMatchesCpu) {
    REQUIRE_GPU();
    std::mt19937 rng(12);
    for (int64_t num_experts : kExpertCounts) {
        for (int64_t top_k : kTopKs) {
            if (top_k > num_experts) continue;
            for (int64_t n : kTokenCounts) {
                for (int64_t tile_rows : kTileRows) {
                    const auto ids = random_choices(n, top_k, num_experts, rng);
                    ASSERT_TRUE(permute_matches(ids, n, top_k, num_experts, tile_rows))
                        << "E " << num_experts << " k " << top_k << " n " << n << " tile "
                        << tile_rows;
                }
            }
        }
    }
}

TEST(CudaMoeRouting, PermuteAllOnOneExpertAndEmptyExperts) {
    REQUIRE_GPU();
    std::mt19937 rng(13);
    for (int kind : {0, 1, 2}) {
        for (int64_t num_experts : {8, 128, 256, 512}) {
            for (int64_t top_k : kTopKs) {
                if (top_k > num_experts) continue;
                for (int64_t n : kTokenCounts) {
                    for (int64_t tile_rows : kTileRows) {
                        const auto ids = skewed_choices(kind, n, top_k, num_experts, rng);
                        ASSERT_TRUE(permute_matches(ids, n, top_k, num_experts, tile_rows))
                            << "kind " << kind << " E " << num_experts << " k " << top_k << " n "
                            << n << " tile " << tile_rows;
                    }
                }
            }
        }
    }
}

// x_perm rows: x[row_token[r]] or zeros below expert_offsets[E]; the 0xab poison above it. Row
// lengths that allow 16-byte vectors and one (1000 + 4) that does not.
TEST(CudaMoeRouting, GatherMatchesCpu) {
    REQUIRE_GPU();
    std::mt19937 rng(14);
    for (int64_t hidden : {64, 1004, 2048}) {
        for (int64_t n : kTokenCounts) {
            for (int kind : {-1, 2}) {  // random choices; odd experts only
                const int64_t num_experts = 64, top_k = 4, tile_rows = 16;
                const auto ids = kind < 0 ? random_choices(n, top_k, num_experts, rng)
                                          : skewed_choices(kind, n, top_k, num_experts, rng);
                const DevicePermute d = run_permute(ids, n, top_k, num_experts, tile_rows);
                const int64_t max_rows = d.row_token.size(0);
                const Tensor x = random_bf16({n, hidden}, rng, 1.f);
                Tensor x_perm = poisoned({max_rows, hidden}, DType::kBF16);
                cuda::moe_gather(cuda::to_device(x), d.row_token, d.expert_offsets, x_perm,
                                 nullptr);
                MI_CUDA_CHECK(cudaDeviceSynchronize());

                const std::vector<int32_t> rows = i32_values(d.row_token);
                const int64_t used = i32_values(d.expert_offsets).back();
                Tensor ref = Tensor::zeros({max_rows, hidden}, DType::kBF16);
                std::memset(ref.raw(), 0xab, ref.nbytes());
                for (int64_t r = 0; r < used; ++r) {
                    uint16_t* dst = ref.data<uint16_t>() + r * hidden;
                    if (rows[size_t(r)] < 0)
                        std::fill(dst, dst + hidden, uint16_t(0));
                    else
                        std::memcpy(dst, x.data<uint16_t>() + rows[size_t(r)] * hidden,
                                    size_t(hidden) * 2);
                }
                ASSERT_TRUE(bitwise_equal(x_perm, ref))
                    << "hidden " << hidden << " n " << n << " kind " << kind;
            }
        }
    }
}

TEST(CudaMoeRouting, CombineMatchesCpu) {
    REQUIRE_GPU();
    std::mt19937 rng(15);
    std::uniform_real_distribution<float> weight(0.f, 1.f);
    for (int64_t hidden : {64, 1004, 512}) {
        for (int64_t top_k : kTopKs) {
            for (int64_t n : kTokenCounts) {
                for (int kind : {-1, 0, 1}) {  // random; all on one expert; k experts only
                    const int64_t num_experts = 128, tile_rows = 16;
                    const auto ids = kind < 0 ? random_choices(n, top_k, num_experts, rng)
                                              : skewed_choices(kind, n, top_k, num_experts, rng);
                    const DevicePermute d = run_permute(ids, n, top_k, num_experts, tile_rows);
                    const int64_t max_rows = d.row_token.size(0);
                    std::vector<float> weights(size_t(n * top_k));
                    for (float& w : weights) w = weight(rng);
                    Tensor dweights = cuda::device_tensor({n, top_k}, DType::kF32);
                    MI_CUDA_CHECK(cudaMemcpy(dweights.raw(), weights.data(), dweights.nbytes(),
                                             cudaMemcpyHostToDevice));
                    const Tensor y = random_bf16({max_rows, hidden}, rng, 1.f);
                    const Tensor dy = cuda::to_device(y);
                    Tensor out = poisoned({n, hidden}, DType::kBF16);
                    Tensor again = poisoned({n, hidden}, DType::kBF16);
                    cuda::moe_combine(dy, d.slot_row, dweights, out, nullptr);
                    cuda::moe_combine(dy, d.slot_row, dweights, again, nullptr);
                    MI_CUDA_CHECK(cudaDeviceSynchronize());

                    // Plain fp32 reference and its per-element bound: half a bf16 ulp for the
                    // rounding (2^-8 relative, under the 1-ulp rtol) plus the fp32 sums' own
                    // difference, k · 2^-24 · Σ|w · y|.
                    const std::vector<int32_t> slots = i32_values(d.slot_row);
                    std::vector<double> ref(size_t(n * hidden)), extra(ref.size());
                    for (int64_t t = 0; t < n; ++t) {
                        for (int64_t i = 0; i < hidden; ++i) {
                            float acc = 0.f;
                            double magnitude = 0;
                            for (int64_t j = 0; j < top_k; ++j) {
                                const size_t s = size_t(t * top_k + j);
                                const float v =
                                    weights[s] *
                                    bf16_to_f32(y.data<uint16_t>()[slots[s] * hidden + i]);
                                acc += v;
                                magnitude += std::fabs(v);
                            }
                            ref[size_t(t * hidden + i)] = acc;
                            extra[size_t(t * hidden + i)] =
                                double(top_k) * std::ldexp(magnitude, -24);
                        }
                    }
                    SCOPED_TRACE(::testing::Message() << "hidden " << hidden << " k " << top_k
                                                      << " n " << n << " kind " << kind);
                    const std::vector<double> got = gpu_testing::to_doubles(out);
                    ASSERT_TRUE(all_close(got, ref, {.atol = 0, .rtol = 1.0 / 128}, extra));
                    ASSERT_TRUE(
                        bitwise_equal(out, combine_reference_fma(y, slots, weights, n, top_k)));
                    ASSERT_TRUE(bitwise_equal(again, out)) << "a second run differs";
                }
            }
        }
    }
}

// The chain a MoE block runs, with every expert the identity (y_perm = x_perm): out[t] =
// bf16(Σ_j w[t, j] · x[t]), which is x[t] up to rounding when the weights are renormalised.
TEST(CudaMoeRouting, RoutePermuteGatherCombineChain) {
    REQUIRE_GPU();
    std::mt19937 rng(16);
    const int64_t hidden = 256, tile_rows = 64;
    for (int64_t num_experts : {16, 128}) {
        for (int64_t top_k : {1, 8}) {
            for (int64_t n : {1, 1000}) {
                const Tensor logits = random_bf16({n, num_experts}, rng, 2.f);
                const Tensor x = random_bf16({n, hidden}, rng, 1.f);
                const int64_t max_rows = cuda::moe_max_rows(n, top_k, num_experts, tile_rows);
                Tensor ids = cuda::device_tensor({n, top_k}, DType::kI32);
                Tensor weights = cuda::device_tensor({n, top_k}, DType::kF32);
                Tensor offsets = cuda::device_tensor({num_experts + 1}, DType::kI32);
                Tensor row_token = cuda::device_tensor({max_rows}, DType::kI32);
                Tensor slot_row = cuda::device_tensor({n, top_k}, DType::kI32);
                Tensor x_perm = cuda::device_tensor({max_rows, hidden}, DType::kBF16);
                Tensor out = poisoned({n, hidden}, DType::kBF16);
                cuda::moe_route(cuda::to_device(logits), top_k, true, ids, weights, nullptr);
                Tensor workspace = cuda::device_tensor(
                    {cuda::moe_permute_workspace_elems(n, top_k, num_experts)}, DType::kI32);
                cuda::moe_permute(ids, num_experts, tile_rows, workspace, offsets, row_token,
                                  slot_row, nullptr);
                cuda::moe_gather(cuda::to_device(x), row_token, offsets, x_perm, nullptr);
                cuda::moe_combine(x_perm, slot_row, weights, out, nullptr);
                MI_CUDA_CHECK(cudaDeviceSynchronize());

                const Tensor w = cuda::to_host(weights);
                Tensor ref = Tensor::zeros({n, hidden}, DType::kBF16);
                for (int64_t t = 0; t < n; ++t) {
                    for (int64_t i = 0; i < hidden; ++i) {
                        const float xv = bf16_to_f32(x.data<uint16_t>()[t * hidden + i]);
                        float acc = 0.f;
                        for (int64_t j = 0; j < top_k; ++j)
                            acc = std::fma(w.data<float>()[t * top_k + j], xv, acc);
                        ref.data<uint16_t>()[t * hidden + i] = f32_to_bf16(acc);
                    }
                }
                ASSERT_TRUE(bitwise_equal(out, ref))
                    << "E " << num_experts << " k " << top_k << " n " << n;
                ASSERT_TRUE(all_close(out, x, {.atol = 1e-6, .rtol = 1.0 / 128}))
                    << "renormalised weights sum to 1";
            }
        }
    }
}
