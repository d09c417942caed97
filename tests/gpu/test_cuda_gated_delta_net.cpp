// The Gated DeltaNet ops on the GPU (kernels/cuda/gdn/gated_delta_net.h) against the CPU
// reference (kernels/cpu/gated_delta_net.h): a batch of sequences of odd lengths, some starting
// at position 0 (zero state) and some continuing their slot's state; the state carried across
// calls; snapshots taken mid-step.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <vector>

#include "core/cuda/device_buffer.h"
#include "gpu_testing.h"
#include "kernels/cpu/gated_delta_net.h"
#include "kernels/cuda/gdn/gated_delta_net.h"

using namespace miniinfer;
using namespace miniinfer::gpu_testing;

namespace {

struct Dims {
    int64_t nk, nv, dk;  // dv = dk
    int64_t conv_dim() const { return 2 * nk * dk + nv * dk; }
    int64_t value_dim() const { return nv * dk; }
    int64_t proj_cols() const { return (conv_dim() + value_dim() + 2 * nv + 7) / 8 * 8; }
    int64_t z_col() const { return conv_dim(); }
    int64_t b_col() const { return conv_dim() + value_dim(); }
    int64_t a_col() const { return b_col() + nv; }
};

constexpr int64_t kConv = 4, kSlots = 8;

// A step's sequences: lengths, first positions (0: a fresh state), slots, snapshot rows.
struct Batch {
    std::vector<int32_t> lens, first_pos, slots, snap_rows, snap_slots;
    std::vector<int32_t> query_start() const {
        std::vector<int32_t> qs{0};
        for (int32_t l : lens) qs.push_back(qs.back() + l);
        return qs;
    }
    std::vector<int32_t> positions() const {
        std::vector<int32_t> p;
        for (size_t s = 0; s < lens.size(); ++s)
            for (int32_t i = 0; i < lens[s]; ++i) p.push_back(first_pos[s] + i);
        return p;
    }
    int64_t tokens() const { return std::accumulate(lens.begin(), lens.end(), int64_t(0)); }
};

Tensor ints(const std::vector<int32_t>& v) {
    Tensor t = Tensor::zeros({int64_t(v.size())}, DType::kI32);
    std::copy(v.begin(), v.end(), t.data<int32_t>());
    return cuda::to_device(t);
}

std::vector<float> floats(const Tensor& t) {
    const std::vector<double> d = to_doubles(t);
    return {d.begin(), d.end()};
}

// The GPU's two ops on one batch, in place on the device state.
struct GpuLayer {
    Dims d;
    Tensor conv_w, A_log, dt_bias, norm_w;  // device
    Tensor conv_state, state;               // device, [kSlots, ...]

    // Returns {conv output, layer output}.
    std::pair<Tensor, Tensor> run(const Batch& b, const Tensor& proj) {
        const int64_t n = b.tokens();
        Tensor qs = ints(b.query_start()), pos = ints(b.positions()), slots = ints(b.slots);
        std::vector<int32_t> rows = b.snap_rows, snap_slots = b.snap_slots;
        rows.resize(b.lens.size(), 0);
        snap_slots.resize(b.lens.size(), 0);
        Tensor snap_rows_d = ints(rows), snap_slots_d = ints(snap_slots);
        const cuda::GdnSequences seqs{&qs, &pos, &slots, &snap_rows_d, &snap_slots_d};
        Tensor qkv = cuda::device_tensor({n, d.conv_dim()}, DType::kBF16);
        Tensor out = cuda::device_tensor({n, d.value_dim()}, DType::kBF16);
        cuda::causal_conv1d_silu(proj, conv_w, seqs, conv_state, qkv, nullptr);
        cuda::gated_delta_rule({.qkv = &qkv,
                                .zba = &proj,
                                .z_col = d.z_col(),
                                .b_col = d.b_col(),
                                .a_col = d.a_col(),
                                .A_log = &A_log,
                                .dt_bias = &dt_bias,
                                .norm_weight = &norm_w,
                                .norm_eps = 1e-6f,
                                .num_k_heads = d.nk,
                                .num_v_heads = d.nv,
                                .head_k_dim = d.dk,
                                .head_v_dim = d.dk,
                                .state = &state,
                                .out = &out},
                               seqs, nullptr);
        MI_CUDA_CHECK(cudaDeviceSynchronize());
        return {qkv, out};
    }
};

class GdnOps : public ::testing::TestWithParam<Dims> {
  protected:
    void SetUp() override {
        REQUIRE_GPU();
        d = GetParam();
        std::mt19937 rng(7);
        host_conv_w = random_bf16({d.conv_dim(), kConv}, rng, 0.5f);
        host_A_log = random_bf16({d.nv}, rng, 0.5f);
        host_dt_bias = random_bf16({d.nv}, rng, 0.5f);
        host_norm_w = random_bf16({d.dk}, rng, 0.3f);
        gpu = {d,
               cuda::to_device(host_conv_w),
               cuda::to_device(host_A_log),
               cuda::to_device(host_dt_bias),
               cuda::to_device(host_norm_w),
               cuda::device_tensor({kSlots, kConv - 1, d.conv_dim()}, DType::kF32),
               cuda::device_tensor({kSlots, d.nv, d.dk, d.dk}, DType::kF32)};
        // Every slot starts from random state (a fresh sequence must not read it).
        Tensor conv0 = Tensor::zeros(gpu.conv_state.shape(), DType::kF32);
        Tensor state0 = Tensor::zeros(gpu.state.shape(), DType::kF32);
        std::normal_distribution<float> nd(0.f, 0.3f);
        for (int64_t i = 0; i < conv0.numel(); ++i) conv0.data<float>()[i] = nd(rng);
        for (int64_t i = 0; i < state0.numel(); ++i) state0.data<float>()[i] = nd(rng);
        cpu_conv_state = conv0;
        cpu_state = state0;
        MI_CUDA_CHECK(
            cudaMemcpy(gpu.conv_state.raw(), conv0.raw(), conv0.nbytes(), cudaMemcpyHostToDevice));
        MI_CUDA_CHECK(
            cudaMemcpy(gpu.state.raw(), state0.raw(), state0.nbytes(), cudaMemcpyHostToDevice));
        rng_ = rng;
    }

    Tensor random_proj(int64_t n) { return random_bf16({n, d.proj_cols()}, rng_, 1.f); }

    // The CPU reference of one step on its own copy of the states: the conv from proj, then
    // the delta rule from the GPU's conv output (so that the two ops are checked apart).
    std::pair<std::vector<float>, std::vector<float>> cpu_step(const Batch& b, const Tensor& proj,
                                                               const Tensor& gpu_qkv) {
        const int64_t n = b.tokens(), C = d.conv_dim();
        const std::vector<float> p = floats(proj);
        const std::vector<int32_t> qs = b.query_start(), pos = b.positions();
        // Fresh sequences start from zeros, as the model's prepare_states does.
        for (size_t s = 0; s < b.lens.size(); ++s)
            if (b.first_pos[s] == 0) {
                std::fill_n(cpu_conv_state.data<float>() + b.slots[s] * (kConv - 1) * C,
                            (kConv - 1) * C, 0.f);
                std::fill_n(cpu_state.data<float>() + b.slots[s] * d.nv * d.dk * d.dk,
                            d.nv * d.dk * d.dk, 0.f);
            }
        std::vector<float> x(size_t(n * C)), conv_out(size_t(n * C));
        for (int64_t t = 0; t < n; ++t)
            std::copy_n(&p[size_t(t * d.proj_cols())], C, &x[size_t(t * C)]);
        const std::vector<float> w = floats(host_conv_w);
        std::vector<int32_t> rows = b.snap_rows, snap_slots = b.snap_slots;
        rows.resize(b.lens.size(), 0);
        snap_slots.resize(b.lens.size(), 0);
        cpu::causal_conv1d_silu({.x = x.data(),
                                 .weight = w.data(),
                                 .query_start = qs.data(),
                                 .state_slots = b.slots.data(),
                                 .num_seqs = int64_t(b.lens.size()),
                                 .channels = C,
                                 .kernel_len = kConv,
                                 .conv_state = cpu_conv_state.data<float>(),
                                 .out = conv_out.data(),
                                 .snapshot_rows = rows.data(),
                                 .snapshot_slots = snap_slots.data()});
        std::vector<float> a(size_t(n * d.nv)), bb(size_t(n * d.nv)), z(size_t(n * d.value_dim()));
        for (int64_t t = 0; t < n; ++t) {
            const float* row = &p[size_t(t * d.proj_cols())];
            std::copy_n(row + d.a_col(), d.nv, &a[size_t(t * d.nv)]);
            std::copy_n(row + d.b_col(), d.nv, &bb[size_t(t * d.nv)]);
            std::copy_n(row + d.z_col(), d.value_dim(), &z[size_t(t * d.value_dim())]);
        }
        std::vector<float> g(a.size()), beta(a.size());
        const std::vector<float> A_log = floats(host_A_log), dt_bias = floats(host_dt_bias);
        cpu::gdn_gates(a.data(), bb.data(), A_log.data(), dt_bias.data(), n, d.nv, g.data(),
                       beta.data());
        const std::vector<float> qkv = floats(gpu_qkv);
        std::vector<float> o(size_t(n * d.value_dim()));
        cpu::gated_delta_rule_recurrent({.qkv = qkv.data(),
                                         .g = g.data(),
                                         .beta = beta.data(),
                                         .query_start = qs.data(),
                                         .state_slots = b.slots.data(),
                                         .num_seqs = int64_t(b.lens.size()),
                                         .num_k_heads = d.nk,
                                         .num_v_heads = d.nv,
                                         .head_k_dim = d.dk,
                                         .head_v_dim = d.dk,
                                         .state = cpu_state.data<float>(),
                                         .out = o.data(),
                                         .snapshot_rows = rows.data(),
                                         .snapshot_slots = snap_slots.data()});
        const std::vector<float> norm_w = floats(host_norm_w);
        cpu::rms_norm_gated(o.data(), z.data(), norm_w.data(), n * d.nv, d.dk, 1e-6f, o.data());
        return {conv_out, o};
    }

    // Both sides run the batch; the outputs and every slot's state must agree.
    void expect_step_matches(const Batch& b) {
        const Tensor proj_host = random_proj(b.tokens());
        const Tensor proj = cuda::to_device(proj_host);
        const auto [gpu_qkv, gpu_out] = gpu.run(b, proj);
        const auto [cpu_qkv, cpu_out] = cpu_step(b, proj_host, gpu_qkv);
        const std::vector<double> gq = to_doubles(gpu_qkv), go = to_doubles(gpu_out);
        // The conv's output: bf16 roundings of the sum and of SiLU.
        EXPECT_TRUE(all_close(gq, std::vector<double>(cpu_qkv.begin(), cpu_qkv.end()),
                              {.atol = 1e-2, .rtol = 1.6e-2}))
            << "conv";
        // The layer's output: the delta rule in fp32, then bf16 roundings in the gated norm
        // (and beta's, which the CPU reference does not round).
        EXPECT_TRUE(all_close(go, std::vector<double>(cpu_out.begin(), cpu_out.end()),
                              {.atol = 2e-2, .rtol = 3e-2}))
            << "output";
        EXPECT_TRUE(all_close(gpu.conv_state, cpu_conv_state, {.atol = 0, .rtol = 0}))
            << "conv state";
        EXPECT_TRUE(all_close(gpu.state, cpu_state, {.atol = 2e-3, .rtol = 2e-2}))
            << "recurrent state";
    }

    Dims d;
    GpuLayer gpu;
    Tensor host_conv_w, host_A_log, host_dt_bias, host_norm_w;
    Tensor cpu_conv_state, cpu_state;
    std::mt19937 rng_;
};

// Fresh and continuing sequences of odd lengths in one step, then a second step continuing
// them (decode rows beside prefill chunks), then snapshots mid-step.
TEST_P(GdnOps, StepsMatchTheCpuReference) {
    expect_step_matches({.lens = {1, 7, 70, 3, 130},
                         .first_pos = {0, 5, 0, 9, 0},
                         .slots = {2, 0, 5, 7, 1},
                         .snap_rows = {},
                         .snap_slots = {}});
    expect_step_matches({.lens = {1, 1, 33, 1, 2},
                         .first_pos = {1, 12, 70, 12, 130},
                         .slots = {2, 0, 5, 7, 1},
                         .snap_rows = {},
                         .snap_slots = {}});
    expect_step_matches({.lens = {9, 64, 1},
                         .first_pos = {2, 103, 13},
                         .slots = {2, 5, 7},
                         .snap_rows = {4, 64, 0},
                         .snap_slots = {3, 4, 0}});
}

// A prompt in one step, or in chunks over three steps: the same outputs and state, bit for bit
// (the recurrent form's arithmetic does not depend on where a step ends), and a snapshot equals
// the state of a run that stopped there.
TEST_P(GdnOps, ChunksAndSnapshotsAreExact) {
    const int64_t len = 150;
    const Tensor proj = cuda::to_device(random_proj(len));
    auto outputs_of = [&](const std::vector<int32_t>& cuts, int32_t snap_row) {
        std::vector<double> out;
        for (size_t c = 0; c + 1 < cuts.size(); ++c) {
            const int32_t begin = cuts[c], end = cuts[c + 1];
            const Batch b{.lens = {end - begin},
                          .first_pos = {begin},
                          .slots = {1},
                          .snap_rows = {snap_row > begin && snap_row <= end ? snap_row - begin : 0},
                          .snap_slots = {6}};
            const auto [qkv, o] = gpu.run(b, proj.slice_rows(begin, end));
            const std::vector<double> od = to_doubles(o);
            out.insert(out.end(), od.begin(), od.end());
        }
        return out;
    };
    const std::vector<double> whole = outputs_of({0, int32_t(len)}, 77);
    const Tensor state_whole = download(gpu.state), conv_whole = download(gpu.conv_state);
    const std::vector<double> chunked = outputs_of({0, 1, 77, int32_t(len)}, 0);
    EXPECT_TRUE(all_close(chunked, whole, {.atol = 0, .rtol = 0}));
    Tensor state_now = download(gpu.state);
    const int64_t slot_floats = d.nv * d.dk * d.dk, conv_floats = (kConv - 1) * d.conv_dim();
    EXPECT_TRUE(bitwise_equal(
        std::span<const float>(state_now.data<float>() + slot_floats, size_t(slot_floats)),
        std::span<const float>(state_whole.data<float>() + slot_floats, size_t(slot_floats))));
    // The snapshot after 77 rows: a run of the first 77 rows alone.
    outputs_of({0, 77}, 0);
    state_now = download(gpu.state);
    const Tensor conv_now = download(gpu.conv_state);
    EXPECT_TRUE(bitwise_equal(
        std::span<const float>(state_whole.data<float>() + 6 * slot_floats, size_t(slot_floats)),
        std::span<const float>(state_now.data<float>() + slot_floats, size_t(slot_floats))));
    EXPECT_TRUE(bitwise_equal(
        std::span<const float>(conv_whole.data<float>() + 6 * conv_floats, size_t(conv_floats)),
        std::span<const float>(conv_now.data<float>() + conv_floats, size_t(conv_floats))));
}

TEST_P(GdnOps, CopyStateSlotCopiesOneSlot) {
    Tensor before = download(gpu.state);
    cuda::copy_state_slot(gpu.state, 3, 5, nullptr);
    MI_CUDA_CHECK(cudaDeviceSynchronize());
    Tensor after = download(gpu.state);
    const int64_t slot = d.nv * d.dk * d.dk;
    for (int64_t s = 0; s < kSlots; ++s) {
        const int64_t from = s == 5 ? 3 : s;
        EXPECT_TRUE(
            bitwise_equal(std::span<const float>(after.data<float>() + s * slot, size_t(slot)),
                          std::span<const float>(before.data<float>() + from * slot, size_t(slot))))
            << "slot " << s;
    }
}

// The fixtures' head sizes (64) and the real models' (128), with value heads grouped over key
// heads as Qwen3.5 does (3 and 2 value heads a key head).
INSTANTIATE_TEST_SUITE_P(Dims, GdnOps,
                         ::testing::Values(Dims{.nk = 2, .nv = 6, .dk = 64},
                                           Dims{.nk = 2, .nv = 4, .dk = 128}),
                         [](const auto& info) { return "dk" + std::to_string(info.param.dk); });

}  // namespace
