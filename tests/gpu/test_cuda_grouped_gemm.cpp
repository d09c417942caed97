// The MoE grouped GEMM (kernels/cuda/gemm/grouped_gemm.h) against a per-expert CPU reference on
// random routings: empty segments, one expert with every row, ragged counts padded to the row tile,
// the tiny fixture's shapes, odd multiples of 8 for n and k, and Qwen3-30B-A3B's expert GEMMs at E
// = 128 (rows sampled there); that rows past offsets[E] are left alone; that a captured graph reads
// the offsets it finds at replay; and an informative timing at the 30B shapes. The fused modes
// against the unfused path on the same kernel, bit for bit: the gather (row_token: x read in token
// order) against x_perm gathered on the host, and the SiLU epilogue (kSiluMul) against kStore
// followed by silu_mul; on the same routings, and through a captured graph.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "core/cuda/cuda_check.h"
#include "core/cuda/device_buffer.h"
#include "gpu_testing.h"
#include "kernels/cuda/elementwise/silu_mul.h"
#include "kernels/cuda/gemm/gemm.h"
#include "kernels/cuda/gemm/grouped_gemm.h"

using namespace miniinfer;
using gpu_testing::all_close;
using gpu_testing::bitwise_equal;
using gpu_testing::CapturedGraph;

namespace {

constexpr double kBf16HalfUlp = 1.0 / 256;  // 2^-8: round-to-nearest error of bf16, relative
constexpr uint16_t kSentinel = 0x7f7f;      // y's bytes before the call (cudaMemset 0x7f)

// Uniform bf16 values in [-scale, scale): splitmix64, four values per draw. The 30B shapes need
// 400M weights; std::normal_distribution would take most of a minute to make them.
Tensor uniform_bf16(Shape shape, uint64_t seed, float scale) {
    Tensor t = Tensor::zeros(std::move(shape), DType::kBF16);
    uint16_t* out = t.data<uint16_t>();
    uint64_t state = seed;
    for (int64_t i = 0; i < t.numel(); i += 4) {
        uint64_t z = (state += 0x9e3779b97f4a7c15ull);
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
        z ^= z >> 31;
        for (int64_t j = 0; j < 4 && i + j < t.numel(); ++j) {
            const float u = float((z >> (16 * j)) & 0xffff) / 65536.f;  // [0, 1)
            out[i + j] = f32_to_bf16((2.f * u - 1.f) * scale);
        }
    }
    return t;
}

// Every kernel under test: grouped_gemm_mma_sync with each row tile (the 16- and 32-row ones
// both persistent, their default, and one CTA a tile), and grouped_gemm_sm90 (wgmma, tiles 64 and
// 128) where the device is an sm_90. (grouped_gemm, which picks between them, runs in
// Qwen3MoE30BShapes.)
struct Variant {
    int64_t tile;
    bool wgmma;
    bool dispatch = false;  // through grouped_gemm, which picks the kernel
    cuda::GroupedGemmGrid grid = cuda::GroupedGemmGrid::kDefault;
    std::string name() const {
        return (dispatch ? "grouped_gemm tile "
                : wgmma  ? "wgmma "
                         : "tile ") +
               std::to_string(tile) +
               (grid == cuda::GroupedGemmGrid::kPerTile      ? " per tile"
                : grid == cuda::GroupedGemmGrid::kPersistent ? " persistent"
                                                             : "");
    }
};
constexpr Variant kVariants[] = {{16, false, false, cuda::GroupedGemmGrid::kPersistent},
                                 {16, false, false, cuda::GroupedGemmGrid::kPerTile},
                                 {32, false, false, cuda::GroupedGemmGrid::kPersistent},
                                 {32, false, false, cuda::GroupedGemmGrid::kPerTile},
                                 {64, false},
                                 {128, false},
                                 {64, true},
                                 {128, true}};

void run_variant(const Variant& v, const Tensor& x, const Tensor* row_token, const Tensor& w,
                 const Tensor& offsets, cuda::GroupedGemmEpilogue epilogue, Tensor& y,
                 cudaStream_t stream) {
    if (v.dispatch)
        cuda::grouped_gemm(x, row_token, w, offsets, v.tile, epilogue, y, stream);
    else if (v.wgmma)
        cuda::grouped_gemm_sm90(x, row_token, w, offsets, epilogue, y, stream,
                                cuda::GroupedGemmRows::kGather, v.tile);
    else
        cuda::grouped_gemm_mma_sync(x, row_token, w, offsets, v.tile, epilogue, y, stream,
                                    cuda::GroupedGemmRows::kGather, v.grid);
}

// The unfused call: x already permuted, y = x · wᵀ.
void run_variant(const Variant& v, const Tensor& x, const Tensor& w, const Tensor& offsets,
                 Tensor& y, cudaStream_t stream) {
    run_variant(v, x, nullptr, w, offsets, cuda::GroupedGemmEpilogue::kStore, y, stream);
}

// The variants this device runs (wgmma needs an sm_90); says so once when one is left out.
std::vector<Variant> variants() {
    std::vector<Variant> out;
    for (const Variant& v : kVariants)
        if (!v.wgmma || cuda::grouped_gemm_sm90_supported()) out.push_back(v);
    static const bool said = [] {
        if (!cuda::grouped_gemm_sm90_supported())
            std::printf("[ not an sm_90 device: grouped_gemm_sm90 (wgmma) not tested ]\n");
        return true;
    }();
    (void)said;
    return out;
}

// Expert segments of the permuted rows: counts[e] real rows, each segment padded to the tile.
struct Routing {
    std::vector<int64_t> counts;   // [E] real rows per expert
    std::vector<int32_t> offsets;  // [E + 1] padded segment starts
    int64_t tile = 64;             // the row tile the segments are padded to
    Variant variant{64, false};    // the kernel that runs it
    int64_t real_rows() const { return std::accumulate(counts.begin(), counts.end(), int64_t(0)); }
    int64_t padded_rows() const { return offsets.back(); }
};

Routing pad_to_tiles(std::vector<int64_t> counts, const Variant& v) {
    const int64_t tile = v.tile;
    Routing r{std::move(counts), {0}, tile, v};
    for (int64_t c : r.counts) {
        const int64_t padded = (c + tile - 1) / tile;
        r.offsets.push_back(int32_t(r.offsets.back() + padded * tile));
    }
    return r;
}

// num_tokens tokens, each to top_k distinct experts chosen uniformly (as a router would spread
// them): the per-expert counts.
Routing route_tokens(int64_t num_tokens, int top_k, int num_experts, const Variant& v,
                     std::mt19937& rng) {
    std::vector<int64_t> counts(static_cast<size_t>(num_experts), 0);
    std::vector<int> perm(static_cast<size_t>(num_experts));
    std::iota(perm.begin(), perm.end(), 0);
    for (int64_t t = 0; t < num_tokens; ++t) {
        for (int i = 0; i < top_k; ++i) {  // partial Fisher-Yates: top_k distinct experts
            const int j = i + int(rng() % uint32_t(num_experts - i));
            std::swap(perm[size_t(i)], perm[size_t(j)]);
            ++counts[size_t(perm[size_t(i)])];
        }
    }
    return pad_to_tiles(std::move(counts), v);
}

// x [max_rows, k] with random real rows and zero padding rows (as the permute step leaves them).
Tensor make_x(const Routing& routing, int64_t max_rows, int64_t k, uint64_t seed) {
    Tensor x = uniform_bf16({max_rows, k}, seed, 1.f);
    uint16_t* p = x.data<uint16_t>();
    std::vector<bool> real(size_t(max_rows), false);
    for (size_t e = 0; e < routing.counts.size(); ++e)
        for (int64_t r = routing.offsets[e]; r < routing.offsets[e] + routing.counts[e]; ++r)
            real[size_t(r)] = true;
    for (int64_t r = 0; r < max_rows; ++r)
        if (!real[size_t(r)]) std::fill(p + r * k, p + (r + 1) * k, uint16_t(0));
    return x;
}

Tensor offsets_tensor(const Routing& routing) {
    Tensor t = Tensor::zeros({int64_t(routing.offsets.size())}, DType::kI32);
    std::copy(routing.offsets.begin(), routing.offsets.end(), t.data<int32_t>());
    return t;
}

// The rows to check: all of them when that costs at most max_macs multiply-adds, else the first
// and last real row and the last padding row of every segment plus one random row of every row
// tile (every CTA's rows are looked at).
std::vector<int64_t> rows_to_check(const Routing& routing, int64_t n, int64_t k, int64_t max_macs,
                                   std::mt19937& rng) {
    std::vector<int64_t> rows;
    if (routing.padded_rows() * n * k <= max_macs) {
        rows.resize(size_t(routing.padded_rows()));
        std::iota(rows.begin(), rows.end(), 0);
        return rows;
    }
    for (size_t e = 0; e < routing.counts.size(); ++e) {
        const int64_t begin = routing.offsets[e], end = routing.offsets[e + 1];
        if (begin == end) continue;
        const int64_t count = routing.counts[e];
        rows.push_back(begin);
        if (count > 1) rows.push_back(begin + count - 1);
        if (begin + count < end) rows.push_back(end - 1);
        for (int64_t tile = begin; tile < end; tile += routing.tile)
            rows.push_back(tile + int64_t(rng() % uint64_t(routing.tile)));
    }
    std::sort(rows.begin(), rows.end());
    rows.erase(std::unique(rows.begin(), rows.end()), rows.end());
    return rows;
}

// Runs grouped_gemm on the device operands and checks y on the host: the sampled rows against a
// double reference of the same bf16 values with expert e's weights, every row from offsets[E] on
// still holding the sentinel. Tolerance: one bf16 rounding of the result (2^-8 relative) plus
// the fp32 summation error of k exact products, at most about k · 2^-24 · Σ|x·w|, doubled for
// the order in which mma and the k steps add.
void check_result(const Tensor& x, const Tensor& w, const Routing& routing, const Tensor& dy,
                  int64_t max_macs, std::mt19937& rng, const std::string& what) {
    const int64_t n = w.size(1), k = w.size(2), max_rows = x.size(0);
    const Tensor y = cuda::to_host(dy);
    const uint16_t* yp = y.data<uint16_t>();
    const uint16_t* xp = x.data<uint16_t>();
    const uint16_t* wp = w.data<uint16_t>();

    int64_t touched = 0;
    for (int64_t i = routing.padded_rows() * n; i < max_rows * n; ++i)
        touched += yp[i] != kSentinel;
    EXPECT_EQ(touched, 0) << what << ": elements written at or past offsets[E]";

    const std::vector<int64_t> rows = rows_to_check(routing, n, k, max_macs, rng);
    std::vector<double> got, ref, bound;
    std::vector<float> x_row(static_cast<size_t>(k));
    const double accumulation = 2.0 * double(k + 1) * std::ldexp(1.0, -24);
    for (int64_t r : rows) {
        const int64_t e =
            std::upper_bound(routing.offsets.begin(), routing.offsets.end(), int32_t(r)) -
            routing.offsets.begin() - 1;
        for (int64_t p = 0; p < k; ++p) x_row[size_t(p)] = bf16_to_f32(xp[r * k + p]);
        for (int64_t j = 0; j < n; ++j) {
            const uint16_t* w_row = wp + (e * n + j) * k;
            double s = 0, a = 0;
            for (int64_t p = 0; p < k; ++p) {
                const double prod = double(x_row[size_t(p)]) * double(bf16_to_f32(w_row[p]));
                s += prod;
                a += std::fabs(prod);
            }
            got.push_back(bf16_to_f32(yp[r * n + j]));
            ref.push_back(s);
            bound.push_back(accumulation * a);
        }
    }
    EXPECT_TRUE(all_close(got, ref, {.atol = 1e-30, .rtol = kBf16HalfUlp}, bound))
        << what << " (" << rows.size() << " rows checked)";
}

// One call on fresh random operands: x [padded rows + extra_rows, k], w [E, n, k].
void run_case(const Routing& routing, int64_t n, int64_t k, int64_t extra_rows, uint64_t seed,
              const std::string& what, int64_t max_macs = int64_t(1) << 28) {
    const int64_t num_experts = int64_t(routing.counts.size());
    const int64_t max_rows = routing.padded_rows() + extra_rows;
    const Tensor x = make_x(routing, max_rows, k, seed);
    const Tensor w = uniform_bf16({num_experts, n, k}, seed + 1, 0.05f);
    const Tensor dx = cuda::to_device(x), dw = cuda::to_device(w);
    const Tensor doffsets = cuda::to_device(offsets_tensor(routing));
    Tensor dy = cuda::device_tensor({max_rows, n}, DType::kBF16);
    MI_CUDA_CHECK(cudaMemset(dy.raw(), 0x7f, dy.nbytes()));
    run_variant(routing.variant, dx, dw, doffsets, dy, nullptr);
    MI_CUDA_CHECK(cudaDeviceSynchronize());
    std::mt19937 rng(static_cast<uint32_t>(seed));
    check_result(x, w, routing, dy, max_macs, rng, what);
}

std::string describe(int64_t num_experts, int64_t n, int64_t k, const Routing& routing) {
    return routing.variant.name() + " E " + std::to_string(num_experts) + " n " +
           std::to_string(n) + " k " + std::to_string(k) + " rows " +
           std::to_string(routing.real_rows()) + " (padded " +
           std::to_string(routing.padded_rows()) + ")";
}

// ---------------------------------------------------------------------------------------------
// Fused gather and SiLU

// The token behind every real row of the routing: row_token [max_rows], random tokens in
// [0, num_tokens) on real rows, -1 on padding rows and from offsets[E] on (as moe_permute).
Tensor make_row_token(const Routing& routing, int64_t max_rows, int64_t num_tokens,
                      std::mt19937& rng) {
    Tensor t = Tensor::zeros({max_rows}, DType::kI32);
    int32_t* p = t.data<int32_t>();
    std::fill(p, p + max_rows, -1);
    for (size_t e = 0; e < routing.counts.size(); ++e)
        for (int64_t r = routing.offsets[e]; r < routing.offsets[e] + routing.counts[e]; ++r)
            p[r] = int32_t(rng() % uint32_t(num_tokens));
    return t;
}

// moe_gather on the host: x_perm [max_rows, k], row r = x[row_token[r]], zeros for -1.
Tensor gather_host(const Tensor& x, const Tensor& row_token) {
    const int64_t max_rows = row_token.size(0), k = x.size(1);
    Tensor x_perm = Tensor::zeros({max_rows, k}, DType::kBF16);
    const uint16_t* src = x.data<uint16_t>();
    uint16_t* dst = x_perm.data<uint16_t>();
    for (int64_t r = 0; r < max_rows; ++r) {
        const int32_t token = row_token.data<int32_t>()[r];
        if (token >= 0) std::copy(src + token * k, src + (token + 1) * k, dst + r * k);
    }
    return x_perm;
}

Tensor sentinel_tensor(Shape shape) {
    Tensor t = cuda::device_tensor(std::move(shape), DType::kBF16);
    MI_CUDA_CHECK(cudaMemset(t.raw(), 0x7f, t.nbytes()));
    return t;
}

// got's first used_rows rows bit for bit want's; every element from there on the sentinel.
void expect_fused_equal(const Tensor& got, const Tensor& want, int64_t used_rows,
                        const std::string& what) {
    EXPECT_TRUE(bitwise_equal(got.slice_rows(0, used_rows), want.slice_rows(0, used_rows))) << what;
    const Tensor rest = gpu_testing::download(got.slice_rows(used_rows, got.size(0)));
    const uint16_t* p = rest.data<uint16_t>();
    EXPECT_EQ(std::count_if(p, p + rest.numel(), [](uint16_t v) { return v != kSentinel; }), 0)
        << what << ": elements written at or past offsets[E]";
}

// The operands of a fused check, on the device: x in token order, x_perm its rows gathered on the
// host, w [E, 2 · inter, k].
struct FusedOperands {
    Tensor x, row_token, x_perm, w, offsets;
    int64_t max_rows() const { return row_token.size(0); }
};

FusedOperands make_fused_operands(const Routing& routing, int64_t n, int64_t k, int64_t extra_rows,
                                  int64_t num_tokens, uint64_t seed) {
    std::mt19937 rng(static_cast<uint32_t>(seed));
    const int64_t max_rows = routing.padded_rows() + extra_rows;
    const Tensor x = uniform_bf16({num_tokens, k}, seed, 1.f);
    const Tensor row_token = make_row_token(routing, max_rows, num_tokens, rng);
    const int64_t num_experts = int64_t(routing.counts.size());
    return {cuda::to_device(x), cuda::to_device(row_token),
            cuda::to_device(gather_host(x, row_token)),
            cuda::to_device(uniform_bf16({num_experts, n, k}, seed + 1, 0.05f)),
            cuda::to_device(offsets_tensor(routing))};
}

// Every fused mode of routing.variant against its unfused path, bit for bit:
//   gather       (x, row_token, kStore)    == (x_perm, kStore)
//   silu         (x_perm, kSiluMul)        == silu_mul((x_perm, kStore))
//   gather+silu  (x, row_token, kSiluMul)  == the same
// and no output written from offsets[E] on.
void check_fused(const Routing& routing, const FusedOperands& d, const std::string& what) {
    using cuda::GroupedGemmEpilogue;
    const Variant& v = routing.variant;
    const int64_t n = d.w.size(1), max_rows = d.max_rows(), used = routing.padded_rows();
    Tensor gate_up = sentinel_tensor({max_rows, n}), act = sentinel_tensor({max_rows, n / 2});
    run_variant(v, d.x_perm, nullptr, d.w, d.offsets, GroupedGemmEpilogue::kStore, gate_up,
                nullptr);
    Tensor used_act = act.slice_rows(0, used);
    cuda::silu_mul(gate_up.slice_rows(0, used), used_act, nullptr);

    Tensor gathered = sentinel_tensor({max_rows, n});
    run_variant(v, d.x, &d.row_token, d.w, d.offsets, GroupedGemmEpilogue::kStore, gathered,
                nullptr);
    Tensor fused_act = sentinel_tensor({max_rows, n / 2});
    run_variant(v, d.x_perm, nullptr, d.w, d.offsets, GroupedGemmEpilogue::kSiluMul, fused_act,
                nullptr);
    Tensor both = sentinel_tensor({max_rows, n / 2});
    run_variant(v, d.x, &d.row_token, d.w, d.offsets, GroupedGemmEpilogue::kSiluMul, both, nullptr);
    MI_CUDA_CHECK(cudaDeviceSynchronize());
    expect_fused_equal(gathered, gate_up, used, "gather: " + what);
    expect_fused_equal(fused_act, act, used, "silu: " + what);
    expect_fused_equal(both, act, used, "gather+silu: " + what);
}

void run_fused_case(const Routing& routing, int64_t n, int64_t k, int64_t extra_rows, uint64_t seed,
                    const std::string& what) {
    const int64_t num_tokens = std::max<int64_t>(1, routing.real_rows() / 2);
    check_fused(routing, make_fused_operands(routing, n, k, extra_rows, num_tokens, seed), what);
}

}  // namespace

// tests/fixtures/qwen3-moe-tiny: hidden 128, moe_intermediate 64, 8 experts, top 2; gate_up is
// n = 128, k = 128 and down n = 128, k = 64. From one token (decode) to a 300-token prefill, with
// every row tile.
TEST(CudaGroupedGemm, TinyFixtureShapes) {
    REQUIRE_GPU();
    std::mt19937 rng(1);
    for (const Variant& v : variants()) {
        const int64_t tile = v.tile;
        for (int64_t tokens : {1, 3, 17, 300}) {
            const Routing routing = route_tokens(tokens, 2, 8, v, rng);
            for (auto [n, k] : {std::pair<int64_t, int64_t>{128, 128}, {128, 64}})
                run_case(routing, n, k, tile, uint64_t(tokens * 1000 + k),
                         describe(8, n, k, routing));
        }
    }
}

// Ragged and empty segments with n and k odd multiples of 8 (tails of the column and k tiles),
// one expert holding every row (first, middle, last), no rows at all, and a max_rows that is not
// a multiple of the tile; every row tile.
TEST(CudaGroupedGemm, RaggedEmptyAndTails) {
    REQUIRE_GPU();
    std::mt19937 rng(2);
    const std::pair<int64_t, int64_t> shapes[] = {{8, 8}, {200, 72}, {136, 520}, {384, 256}};
    for (const Variant& v : variants()) {
        const int64_t tile = v.tile;
        for (int64_t num_experts : {8, 16, 64, 128}) {
            for (auto [n, k] : shapes) {
                std::vector<int64_t> counts(static_cast<size_t>(num_experts));
                for (auto& c : counts) c = rng() % 3 == 0 ? 0 : int64_t(rng() % 150);
                const Routing ragged = pad_to_tiles(counts, v);
                run_case(ragged, n, k, 37, rng(), "ragged " + describe(num_experts, n, k, ragged));
            }
        }
        for (int64_t num_experts : {16, 64}) {
            for (int64_t owner : {int64_t(0), num_experts / 2, num_experts - 1}) {
                std::vector<int64_t> counts(static_cast<size_t>(num_experts), 0);
                counts[size_t(owner)] = 333;
                const Routing one = pad_to_tiles(counts, v);
                run_case(one, 200, 72, 0, rng(),
                         "expert " + std::to_string(owner) +
                             " owns all: " + describe(num_experts, 200, 72, one));
            }
            const Routing none = pad_to_tiles(std::vector<int64_t>(size_t(num_experts), 0), v);
            run_case(none, 136, 520, 2 * tile, rng(),
                     "no rows: " + describe(num_experts, 136, 520, none));
        }
    }
}

// Qwen3-30B-A3B's expert GEMMs at E = 128, top 8: gate_up (n 1536, k 2048) and down (n 2048,
// k 768), through grouped_gemm with the tile grouped_gemm_tile_rows picks (wgmma on an sm_90
// from 5 rows per expert: 64-row tiles, 128 from 21): 4096 tokens (32768 rows), 64, 256 and
// 1; rows sampled for the reference (about 1000 of them: some seconds of CPU).
TEST(CudaGroupedGemm, Qwen3MoE30BShapes) {
    REQUIRE_GPU();
    std::mt19937 rng(3);
    for (int64_t tokens : {1, 64, 256, 4096}) {
        const int64_t tile = cuda::grouped_gemm_tile_rows(tokens * 8, 128);
        const Routing routing = route_tokens(tokens, 8, 128, {tile, false, true}, rng);
        for (auto [n, k] : {std::pair<int64_t, int64_t>{1536, 2048}, {2048, 768}})
            run_case(routing, n, k, tile, uint64_t(tokens + n), describe(128, n, k, routing),
                     int64_t(1) << 28);
    }
}

// Captured once, replayed with other offsets and x on the device: the graph holds no counts.
TEST(CudaGroupedGemm, GraphReplayReadsDeviceOffsets) {
    REQUIRE_GPU();
    std::mt19937 rng(4);
    for (const Variant& v : variants()) {
        const int64_t num_experts = 16, n = 256, k = 128, max_rows = 20 * 128;
        const Tensor w = uniform_bf16({num_experts, n, k}, 41, 0.05f);
        const Tensor dw = cuda::to_device(w);
        Tensor dx = cuda::device_tensor({max_rows, k}, DType::kBF16);
        Tensor doffsets = cuda::device_tensor({num_experts + 1}, DType::kI32);
        Tensor dy = cuda::device_tensor({max_rows, n}, DType::kBF16);

        cuda::Stream stream;
        const CapturedGraph graph(stream.get(),
                                  [&] { run_variant(v, dx, dw, doffsets, dy, stream.get()); });

        for (int64_t tokens : {5, 200, 40}) {
            const Routing routing = route_tokens(tokens, 4, int(num_experts), v, rng);
            ASSERT_LE(routing.padded_rows(), max_rows);
            const Tensor x = make_x(routing, max_rows, k, uint64_t(tokens));
            MI_CUDA_CHECK(cudaMemcpy(dx.raw(), x.raw(), x.nbytes(), cudaMemcpyHostToDevice));
            const Tensor offsets = offsets_tensor(routing);
            MI_CUDA_CHECK(cudaMemcpy(doffsets.raw(), offsets.raw(), offsets.nbytes(),
                                     cudaMemcpyHostToDevice));
            MI_CUDA_CHECK(cudaMemset(dy.raw(), 0x7f, dy.nbytes()));
            graph.replay(stream.get());
            stream.synchronize();
            check_result(x, w, routing, dy, int64_t(1) << 28, rng,
                         "graph replay: " + describe(num_experts, n, k, routing));
        }
    }
}

// The fused gather and SiLU epilogue on every kernel: the tiny fixture's gate_up (n 128, k 128)
// from 1 to 300 tokens; ragged and empty segments with column and k tails (inter 8, 104, 264;
// k odd multiples of 8); one expert owning every row (first, middle, last); no rows at all.
TEST(CudaGroupedGemm, FusedGatherAndSiluMatchUnfused) {
    REQUIRE_GPU();
    std::mt19937 rng(6);
    const std::pair<int64_t, int64_t> shapes[] = {{16, 8}, {208, 72}, {528, 520}, {256, 256}};
    for (const Variant& v : variants()) {
        const int64_t tile = v.tile;
        for (int64_t tokens : {1, 3, 17, 300}) {
            const Routing routing = route_tokens(tokens, 2, 8, v, rng);
            run_fused_case(routing, 128, 128, tile, uint64_t(tokens),
                           "tiny " + describe(8, 128, 128, routing));
        }
        for (int64_t num_experts : {8, 64, 128}) {
            for (auto [n, k] : shapes) {
                std::vector<int64_t> counts(static_cast<size_t>(num_experts));
                for (auto& c : counts) c = rng() % 3 == 0 ? 0 : int64_t(rng() % 150);
                const Routing ragged = pad_to_tiles(counts, v);
                run_fused_case(ragged, n, k, 37, rng(),
                               "ragged " + describe(num_experts, n, k, ragged));
            }
        }
        for (int64_t num_experts : {16, 64}) {
            for (int64_t owner : {int64_t(0), num_experts / 2, num_experts - 1}) {
                std::vector<int64_t> counts(static_cast<size_t>(num_experts), 0);
                counts[size_t(owner)] = 333;
                const Routing one = pad_to_tiles(counts, v);
                run_fused_case(one, 208, 72, 0, rng(),
                               "expert " + std::to_string(owner) +
                                   " owns all: " + describe(num_experts, 208, 72, one));
            }
            const Routing none = pad_to_tiles(std::vector<int64_t>(size_t(num_experts), 0), v);
            run_fused_case(none, 528, 520, 2 * tile, rng(),
                           "no rows: " + describe(num_experts, 528, 520, none));
        }
    }
}

// GroupedGemmRows::kPermuted (the down projection): x already permuted, row_token marking the
// padding rows with -1. Those rows of x are never read: with garbage in them (random values
// instead of zeros) every kernel writes the bits the plain call writes for zero padding rows.
// Ragged segments, one expert owning every row, decode-like routings, every row tile.
TEST(CudaGroupedGemm, PermutedRowsSkipPadding) {
    REQUIRE_GPU();
    std::mt19937 rng(9);
    for (const Variant& v : variants()) {
        std::vector<Routing> routings;
        for (int64_t tokens : {1, 3, 17, 300})
            routings.push_back(route_tokens(tokens, 8, 64, v, rng));
        std::vector<int64_t> counts(16);
        for (auto& c : counts) c = rng() % 3 == 0 ? 0 : int64_t(rng() % 150);
        routings.push_back(pad_to_tiles(counts, v));
        std::vector<int64_t> one(16, 0);
        one[7] = 333;
        routings.push_back(pad_to_tiles(one, v));
        for (const Routing& routing : routings) {
            const int64_t n = 200, k = 136, max_rows = routing.padded_rows() + v.tile;
            const uint64_t seed = rng();
            const Tensor x = make_x(routing, max_rows, k, seed);
            Tensor garbage = uniform_bf16({max_rows, k}, seed + 7, 4.f);
            Tensor marks = Tensor::zeros({max_rows}, DType::kI32);
            std::fill(marks.data<int32_t>(), marks.data<int32_t>() + max_rows, -1);
            for (size_t e = 0; e < routing.counts.size(); ++e) {
                for (int64_t r = routing.offsets[e]; r < routing.offsets[e] + routing.counts[e];
                     ++r) {
                    marks.data<int32_t>()[r] = int32_t(rng() % 1000);  // any token: not used
                    std::copy(x.data<uint16_t>() + r * k, x.data<uint16_t>() + (r + 1) * k,
                              garbage.data<uint16_t>() + r * k);
                }
            }
            const Tensor w = uniform_bf16({int64_t(routing.counts.size()), n, k}, seed + 1, 0.05f);
            const Tensor dw = cuda::to_device(w),
                         doffsets = cuda::to_device(offsets_tensor(routing));
            const Tensor dx = cuda::to_device(x), dgarbage = cuda::to_device(garbage);
            const Tensor dmarks = cuda::to_device(marks);
            Tensor want = sentinel_tensor({max_rows, n}), got = sentinel_tensor({max_rows, n});
            run_variant(v, dx, nullptr, dw, doffsets, cuda::GroupedGemmEpilogue::kStore, want,
                        nullptr);
            if (v.wgmma)
                cuda::grouped_gemm_sm90(dgarbage, &dmarks, dw, doffsets,
                                        cuda::GroupedGemmEpilogue::kStore, got, nullptr,
                                        cuda::GroupedGemmRows::kPermuted, v.tile);
            else
                cuda::grouped_gemm_mma_sync(dgarbage, &dmarks, dw, doffsets, v.tile,
                                            cuda::GroupedGemmEpilogue::kStore, got, nullptr,
                                            cuda::GroupedGemmRows::kPermuted, v.grid);
            MI_CUDA_CHECK(cudaDeviceSynchronize());
            expect_fused_equal(
                got, want, routing.padded_rows(),
                "kPermuted " + describe(int64_t(routing.counts.size()), n, k, routing));
        }
    }
}

// The persistent grid (the decode tiles' default) gives the per-tile grid's bits: each output is
// the same chain of mma over k. Every operand mode (x permuted, gathered through row_token,
// kPermuted: x permuted, row_token marking its padding rows), both epilogues, decode-like routings,
// a ragged one with empty experts, all rows to one expert, and n, k with tails; nothing written
// from offsets[E] on.
TEST(CudaGroupedGemm, PersistentMatchesPerTile) {
    REQUIRE_GPU();
    using cuda::GroupedGemmEpilogue;
    using cuda::GroupedGemmGrid;
    using cuda::GroupedGemmRows;
    std::mt19937 rng(11);
    cuda::Stream stream;
    for (int64_t tile : {16, 32}) {
        const Variant v{tile, false};
        std::vector<int64_t> one(16, 0);
        one[5] = 300;
        const Routing routings[] = {
            route_tokens(1, 8, 128, v, rng), route_tokens(tile == 16 ? 32 : 256, 8, 128, v, rng),
            pad_to_tiles({0, 5, 40, 0, 33, 1, 0, 64, 0}, v), pad_to_tiles(one, v)};
        for (const Routing& routing : routings) {
            for (auto [n, k] : {std::pair<int64_t, int64_t>{1536, 2048}, {2048, 768}, {208, 136}}) {
                const uint64_t seed = rng();
                const FusedOperands d = make_fused_operands(
                    routing, n, k, tile, std::max<int64_t>(1, routing.real_rows() / 2), seed);
                const int64_t max_rows = d.max_rows(), used = routing.padded_rows();
                for (const GroupedGemmEpilogue epilogue :
                     {GroupedGemmEpilogue::kStore, GroupedGemmEpilogue::kSiluMul}) {
                    const int64_t cols = epilogue == GroupedGemmEpilogue::kSiluMul ? n / 2 : n;
                    const struct {
                        const Tensor* x;
                        const Tensor* row_token;
                        GroupedGemmRows rows;
                        const char* name;
                    } modes[] = {
                        {&d.x_perm, nullptr, GroupedGemmRows::kGather, "permuted x"},
                        {&d.x, &d.row_token, GroupedGemmRows::kGather, "gather"},
                        {&d.x_perm, &d.row_token, GroupedGemmRows::kPermuted, "kPermuted"}};
                    for (const auto& mode : modes) {
                        Tensor want = sentinel_tensor({max_rows, cols});
                        Tensor got = sentinel_tensor({max_rows, cols});
                        cuda::grouped_gemm_mma_sync(*mode.x, mode.row_token, d.w, d.offsets, tile,
                                                    epilogue, want, stream.get(), mode.rows,
                                                    GroupedGemmGrid::kPerTile);
                        cuda::grouped_gemm_mma_sync(*mode.x, mode.row_token, d.w, d.offsets, tile,
                                                    epilogue, got, stream.get(), mode.rows,
                                                    GroupedGemmGrid::kPersistent);
                        stream.synchronize();
                        expect_fused_equal(
                            got, want, used,
                            std::string(mode.name) +
                                (epilogue == GroupedGemmEpilogue::kSiluMul ? ", SiLU·mul, "
                                                                           : ", store, ") +
                                describe(int64_t(routing.counts.size()), n, k, routing));
                    }
                }
            }
        }
    }
}

// Qwen3-30B-A3B's gate_up (n 1536, k 2048, E 128, top 8) fused, through grouped_gemm with the
// tile it picks, as cuda::Moe runs it: 1, 64, 256 and 2048 tokens.
TEST(CudaGroupedGemm, FusedQwen3MoE30BGateUp) {
    REQUIRE_GPU();
    std::mt19937 rng(7);
    for (int64_t tokens : {1, 64, 256, 2048}) {
        const int64_t tile = cuda::grouped_gemm_tile_rows(tokens * 8, 128);
        const Routing routing = route_tokens(tokens, 8, 128, {tile, false, true}, rng);
        check_fused(routing, make_fused_operands(routing, 1536, 2048, tile, tokens, 71),
                    describe(128, 1536, 2048, routing));
    }
}

// The fused gate_up (gather + SiLU) captured once and replayed with other offsets, row_token and
// x on the device: equal to the eager unfused path each time.
TEST(CudaGroupedGemm, FusedGraphReplayReadsDeviceRouting) {
    REQUIRE_GPU();
    std::mt19937 rng(8);
    for (const Variant& v : variants()) {
        const int64_t num_experts = 16, n = 256, k = 128, max_rows = 20 * 128, max_tokens = 200;
        Tensor dx = cuda::device_tensor({max_tokens, k}, DType::kBF16);
        Tensor drow_token = cuda::device_tensor({max_rows}, DType::kI32);
        Tensor doffsets = cuda::device_tensor({num_experts + 1}, DType::kI32);
        Tensor dw = cuda::to_device(uniform_bf16({num_experts, n, k}, 81, 0.05f));
        Tensor act = cuda::device_tensor({max_rows, n / 2}, DType::kBF16);

        cuda::Stream stream;
        const CapturedGraph graph(stream.get(), [&] {
            run_variant(v, dx, &drow_token, dw, doffsets, cuda::GroupedGemmEpilogue::kSiluMul, act,
                        stream.get());
        });

        for (int64_t tokens : {5, 200, 40}) {
            const Routing routing = route_tokens(tokens, 4, int(num_experts), v, rng);
            ASSERT_LE(routing.padded_rows(), max_rows);
            FusedOperands d = make_fused_operands(routing, n, k, max_rows - routing.padded_rows(),
                                                  tokens, uint64_t(tokens));
            d.w = dw;
            MI_CUDA_CHECK(cudaMemcpy(dx.raw(), d.x.raw(), d.x.nbytes(), cudaMemcpyDeviceToDevice));
            MI_CUDA_CHECK(cudaMemcpy(drow_token.raw(), d.row_token.raw(), d.row_token.nbytes(),
                                     cudaMemcpyDeviceToDevice));
            MI_CUDA_CHECK(cudaMemcpy(doffsets.raw(), d.offsets.raw(), d.offsets.nbytes(),
                                     cudaMemcpyDeviceToDevice));
            MI_CUDA_CHECK(cudaMemset(act.raw(), 0x7f, act.nbytes()));
            graph.replay(stream.get());
            stream.synchronize();

            const int64_t used = routing.padded_rows();
            Tensor gate_up = sentinel_tensor({max_rows, n});
            run_variant(v, d.x_perm, d.w, d.offsets, gate_up, nullptr);
            Tensor want = sentinel_tensor({max_rows, n / 2});
            Tensor used_want = want.slice_rows(0, used);
            cuda::silu_mul(gate_up.slice_rows(0, used), used_want, nullptr);
            MI_CUDA_CHECK(cudaDeviceSynchronize());
            expect_fused_equal(act, want, used,
                               "graph replay: " + describe(num_experts, n, k, routing));
        }
    }
}

// Informative only, never asserted: µs, GB/s (weights of the experts with rows, x's padded rows
// and y's) and TFLOP/s of useful rows (2 · real rows · n · k) at the 30B shapes, top 8 of 128
// experts, for steps of 1, 256 (decode), 2048 and 8192 tokens (prefill), with every row tile
// (the one grouped_gemm_tile_rows picks marked *); beside it cuBLASLt on one dense
// [real rows, k] · [n, k]ᵀ of the same FLOPs, the rate a perfect grouping would approach.
TEST(CudaGroupedGemm, BenchQwen3MoE30B) {
    REQUIRE_GPU();
    if (gpu_testing::instrumented()) GTEST_SKIP() << "timing means nothing when instrumented";
    std::mt19937 rng(5);
    gpu_testing::print_bench_header();
    cuda::Gemm dense;
    for (auto [n, k, name] :
         {std::tuple<int64_t, int64_t, const char*>{1536, 2048, "gate_up"}, {2048, 768, "down"}}) {
        const int64_t num_experts = 128;
        const Tensor dw = cuda::to_device(uniform_bf16({num_experts, n, k}, 51, 0.05f));
        for (int64_t tokens : {1, 256, 2048, 8192}) {
            const int64_t picked = cuda::grouped_gemm_tile_rows(tokens * 8, num_experts);
            Routing routing;
            for (const Variant& v : variants()) {
                const int64_t tile = v.tile;
                if (tokens >= 2048 && tile < 64) continue;  // prefill: small tiles only waste
                if (tokens <= 256 && tile > 64) continue;
                routing = route_tokens(tokens, 8, int(num_experts), v, rng);
                const int64_t max_rows = tokens * 8 + num_experts * (tile - 1) + tile;
                const Tensor dx = cuda::to_device(make_x(routing, max_rows, k, 52));
                const Tensor doffsets = cuda::to_device(offsets_tensor(routing));
                Tensor dy = cuda::device_tensor({max_rows, n}, DType::kBF16);
                const int64_t active = std::count_if(routing.counts.begin(), routing.counts.end(),
                                                     [](int64_t c) { return c > 0; });
                const double bytes = 2.0 * double(active * n * k + routing.padded_rows() * (n + k));
                const double flops = 2.0 * double(routing.real_rows() * n * k);
                const std::string shape = std::string(name) + " " + std::to_string(tokens) + "x8 " +
                                          v.name() + (tile == picked && !v.wgmma ? "*" : "");
                const gpu_testing::LaunchTiming t = gpu_testing::time_launch(
                    [&](cudaStream_t s) { run_variant(v, dx, dw, doffsets, dy, s); });
                gpu_testing::print_bench_row("grouped_gemm", shape, t, bytes, flops);
            }
            if (tokens < 256) continue;
            const int64_t rows = routing.real_rows();
            const Tensor dense_x = cuda::to_device(uniform_bf16({rows, k}, 53, 1.f));
            const Tensor dense_w = dw.slice_rows(0, 1).view({n, k});
            Tensor dense_y = cuda::device_tensor({rows, n}, DType::kBF16);
            const gpu_testing::LaunchTiming td = gpu_testing::time_launch(
                [&](cudaStream_t s) { dense.run(dense_x, dense_w, nullptr, dense_y, s); });
            gpu_testing::print_bench_row(
                "cublaslt dense 1 expert", std::string(name) + " " + std::to_string(tokens) + "x8",
                td, 2.0 * double(n * k + rows * (n + k)), 2.0 * double(rows * n * k));
        }
    }
}
