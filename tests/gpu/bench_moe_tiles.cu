// The sweep behind the MoE decode tiles (bench/RESULTS.md#moe-tiles): the 16- and 32-row tile
// shapes of the mma.sync grouped GEMM against the product's (grouped_gemm.cu's Tile16, Tile32),
// at Qwen3-30B-A3B's expert shapes (hidden 2048, moe_intermediate 768, 128 experts, top 8) and
// decode sizes (16 rows: 32 tokens, ~2 rows an expert; 32 rows: 256 tokens, ~16). Each shape's
// output is checked bitwise against the product's (the same chain of mma over k for every
// output, so a faster shape may replace the default without changing a number), then timed.
// Built only with -DMINIINFER_SWEEPS=ON: the product instantiates its own shapes alone.
//
//   build/tests/gpu/bench_moe_tiles     a table; exits 1 if a shape's bits differ
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "gpu_testing.h"
#include "kernels/cuda/elementwise/fill_random.h"
#include "kernels/cuda/gemm/grouped_gemm.cuh"

using namespace miniinfer;
using namespace miniinfer::cuda::grouped_mma;

namespace {

// The first of each list is the product's shape.
using Tile32Shapes =
    std::tuple<Tile<32, 128, 64, 2, 1, 4>, Tile<32, 128, 64, 3, 1, 4>, Tile<32, 128, 64, 2, 1, 8>,
               Tile<32, 64, 64, 2, 1, 4>, Tile<32, 256, 64, 2, 1, 8>, Tile<32, 128, 64, 3, 1, 8>>;
using Tile16Shapes =
    std::tuple<Tile<16, 64, 128, 2, 1, 4>, Tile<16, 64, 64, 4, 1, 4>, Tile<16, 64, 64, 2, 1, 4>>;

constexpr int64_t kHidden = 2048, kInter = 768, kExperts = 128, kTopK = 8;

struct Problem {
    int64_t rows;    // the padded rows of every expert's segment
    Tensor offsets;  // [E + 1] i32, device
    Tensor x, w;     // [rows, k], [E, n, k] bf16, device
    int64_t n, k;
};

// tokens x top-k random choices, each expert's segment padded to the tile.
Problem make_problem(int64_t tile, int64_t tokens, int64_t n, int64_t k, std::mt19937& rng) {
    std::vector<int64_t> counts(kExperts, 0);
    std::uniform_int_distribution<int64_t> pick(0, kExperts - 1);
    for (int64_t i = 0; i < tokens * kTopK; ++i) ++counts[size_t(pick(rng))];
    Tensor offsets = Tensor::zeros({kExperts + 1}, DType::kI32);
    for (int64_t e = 0; e < kExperts; ++e)
        offsets.data<int32_t>()[e + 1] =
            offsets.data<int32_t>()[e] + int32_t((counts[size_t(e)] + tile - 1) / tile * tile);
    const int64_t rows = offsets.data<int32_t>()[kExperts];
    const auto random = [&](Shape shape, float scale) {
        Tensor t = cuda::device_tensor(shape, DType::kBF16);
        const int64_t cols = shape.back(), total_rows = t.numel() / cols;
        cuda::fill_normal(t, {.cols = cols, .row_end = total_rows, .col_end = cols}, rng(), scale,
                          0.f, nullptr);
        return t;
    };
    return {
        rows, cuda::to_device(offsets), random({rows, k}, 1.f), random({kExperts, n, k}, 0.05f), n,
        k};
}

// One shape on the problem, as the product launches it (persistent grid, epilogue as given).
template <class T>
void run_shape(const Problem& p, cuda::GroupedGemmEpilogue epilogue, Tensor& y, cudaStream_t s) {
    const cuda::GroupedGemmDims d =
        cuda::check_grouped_gemm(p.x, nullptr, p.w, p.offsets, epilogue, y, 4);
    launch_tile<T>(p.x, nullptr, p.w, p.offsets, epilogue, d, y, s, /*persistent=*/true);
}

// Every shape of Shapes: bits against the first, then the median time. Returns false on a
// difference.
template <class Shapes>
bool sweep(const char* op, const Problem& p, cuda::GroupedGemmEpilogue epilogue) {
    const bool silu = epilogue == cuda::GroupedGemmEpilogue::kSiluMul;
    const int64_t cols = silu ? p.n / 2 : p.n;
    Tensor y = cuda::device_tensor({p.rows, cols}, DType::kBF16);
    Tensor expected;
    bool same = true;
    const double bytes = double(p.w.nbytes() + p.x.nbytes() + y.nbytes());
    [&]<size_t... I>(std::index_sequence<I...>) {
        const auto one = [&]<class T>(size_t index) {
            MI_CUDA_CHECK(cudaMemset(y.raw(), 0, y.nbytes()));
            run_shape<T>(p, epilogue, y, nullptr);
            MI_CUDA_CHECK(cudaDeviceSynchronize());
            const Tensor got = cuda::to_host(y);
            if (index == 0) expected = got;
            const bool equal = std::memcmp(got.raw(), expected.raw(), got.nbytes()) == 0;
            same = same && equal;
            const auto t =
                gpu_testing::time_launch([&](cudaStream_t s) { run_shape<T>(p, epilogue, y, s); });
            const std::string shape =
                shape_name<T>() + (index == 0 ? " (product)" : "") + (equal ? "" : " BITS DIFFER");
            gpu_testing::print_bench_row(op, shape, t, bytes,
                                         2.0 * double(p.rows) * double(p.n) * double(p.k));
        };
        (one.template operator()<std::tuple_element_t<I, Shapes>>(I), ...);
    }
    (std::make_index_sequence<std::tuple_size_v<Shapes>>{});
    return same;
}

}  // namespace

int main() {
    if (cuda::device_count() == 0) {
        std::printf("bench_moe_tiles: no GPU, nothing to time\n");
        return 0;
    }
    std::mt19937 rng(1);
    bool same = true;
    gpu_testing::print_bench_header();
    {
        const Problem gate_up = make_problem(16, 32, 2 * kInter, kHidden, rng);
        const Problem down = make_problem(16, 32, kHidden, kInter, rng);
        same &= sweep<Tile16Shapes>("tile16 gate_up+silu", gate_up,
                                    cuda::GroupedGemmEpilogue::kSiluMul);
        same &= sweep<Tile16Shapes>("tile16 down", down, cuda::GroupedGemmEpilogue::kStore);
    }
    {
        const Problem gate_up = make_problem(32, 256, 2 * kInter, kHidden, rng);
        const Problem down = make_problem(32, 256, kHidden, kInter, rng);
        same &= sweep<Tile32Shapes>("tile32 gate_up+silu", gate_up,
                                    cuda::GroupedGemmEpilogue::kSiluMul);
        same &= sweep<Tile32Shapes>("tile32 down", down, cuda::GroupedGemmEpilogue::kStore);
    }
    std::printf(same ? "every shape gives the product's bits\n" : "SOME SHAPE'S BITS DIFFER\n");
    return same ? 0 : 1;
}
