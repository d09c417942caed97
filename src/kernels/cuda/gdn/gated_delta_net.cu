// Gated DeltaNet on the GPU (see gated_delta_net.h).
//
// causal_conv1d_silu: a thread per (sequence, channel), walking the sequence's rows with the
// window in registers; coalesced across channels.
//
// gated_delta_rule: a block per (value head, sequence), a thread per column j of the head's
// state S [dk, dv], holding S[:, j] in registers: kᵀS and qᵀS of column j are then the thread's
// own sums, and a token costs two block barriers (after q and k are normalised into shared
// memory, and for the gated norm's sum of squares). The state is read once and written once per
// step, which is what decode's speed rests on.
#include "kernels/cuda/gdn/gated_delta_net.h"

#include <cuda_bf16.h>

#include <cstdint>

#include "core/cuda/cuda_check.h"
#include "kernels/cuda/primitives/check_tensor.h"
#include "kernels/cuda/primitives/launch.cuh"
#include "kernels/cuda/primitives/reduce.cuh"

namespace miniinfer::cuda {
namespace {

constexpr int kConvThreads = 128;
constexpr int kConvKernel = 4;  // every Qwen hybrid's linear_conv_kernel_dim

__device__ __forceinline__ float bf16_round(float v) {
    return __bfloat162float(__float2bfloat16(v));
}

__device__ __forceinline__ float silu(float x) {
    return x / (1.f + __expf(-x));
}

// torch.nn.functional.softplus with its defaults (threshold 20).
__device__ __forceinline__ float softplus(float x) {
    return x > 20.f ? x : log1pf(__expf(x));
}

struct SeqArrays {
    const int32_t* query_start;
    const int32_t* positions;
    const int32_t* state_slots;
    const int32_t* snapshot_rows;
    const int32_t* snapshot_slots;
};

SeqArrays arrays_of(const GdnSequences& s) {
    return {s.query_start->data<int32_t>(), s.positions->data<int32_t>(),
            s.state_slots->data<int32_t>(), s.snapshot_rows->data<int32_t>(),
            s.snapshot_slots->data<int32_t>()};
}

// The row after which sequence s's state is snapshot, or -1.
__device__ __forceinline__ int64_t snapshot_end(const SeqArrays& a, int s, int64_t begin) {
    const int32_t rows = a.snapshot_rows[s];
    return rows > 0 ? begin + rows : -1;
}

// Grid: (ceil(channels / kConvThreads), num_seqs).
template <int kK>
__global__ void __launch_bounds__(kConvThreads)
    conv1d_kernel(const __nv_bfloat16* __restrict__ x, int64_t x_cols,
                  const __nv_bfloat16* __restrict__ weight, SeqArrays seqs, int64_t channels,
                  float* __restrict__ conv_state, __nv_bfloat16* __restrict__ out) {
    pdl_wait();
    pdl_trigger();
    const int64_t c = int64_t(blockIdx.x) * kConvThreads + threadIdx.x;
    const int s = int(blockIdx.y);
    const int64_t begin = seqs.query_start[s], end = seqs.query_start[s + 1];
    if (c >= channels || begin == end) return;
    constexpr int kHistory = kK - 1;
    const auto state_of = [&](int32_t slot) {
        return conv_state + int64_t(slot) * kHistory * channels + c;
    };
    float w[kK], window[kK];  // window: oldest first; the last entry is this row's input
#pragma unroll
    for (int i = 0; i < kK; ++i) w[i] = __bfloat162float(weight[c * kK + i]);
    float* state = state_of(seqs.state_slots[s]);
    const bool fresh = seqs.positions[begin] == 0;
#pragma unroll
    for (int i = 0; i < kHistory; ++i) window[i] = fresh ? 0.f : state[i * channels];
    const int64_t snap = snapshot_end(seqs, s, begin);
    for (int64_t t = begin; t < end; ++t) {
        window[kHistory] = __bfloat162float(x[t * x_cols + c]);
        float sum = 0.f;
#pragma unroll
        for (int i = 0; i < kK; ++i) sum = fmaf(w[i], window[i], sum);
        // Hugging Face's bf16 model rounds the conv's output, then SiLU's.
        out[t * channels + c] = __float2bfloat16(silu(bf16_round(sum)));
#pragma unroll
        for (int i = 0; i < kHistory; ++i) window[i] = window[i + 1];
        if (t + 1 == snap) {
            float* snapshot = state_of(seqs.snapshot_slots[s]);
#pragma unroll
            for (int i = 0; i < kHistory; ++i) snapshot[i * channels] = window[i];
        }
    }
#pragma unroll
    for (int i = 0; i < kHistory; ++i) state[i * channels] = window[i];
}

struct RuleParams {
    const __nv_bfloat16* qkv;
    int64_t qkv_cols;
    const __nv_bfloat16* zba;
    int64_t zba_cols, z_col, b_col, a_col;
    const __nv_bfloat16 *A_log, *dt_bias, *norm_weight;
    float norm_eps;
    int num_k_heads, num_v_heads;
    float* state;
    __nv_bfloat16* out;
};

// Grid: (num_v_heads, num_seqs); block: kDv threads, thread j owning column j of S.
template <int kDk, int kDv>
__global__ void __launch_bounds__(kDv) gated_delta_rule_kernel(RuleParams p, SeqArrays seqs) {
    constexpr int kWarps = kDv / 32;
    __shared__ float q_s[kDk], k_s[kDk], partial[kWarps];
    pdl_wait();
    pdl_trigger();
    const int h = int(blockIdx.x), s = int(blockIdx.y), j = int(threadIdx.x);
    const int warp = j / 32, lane = j % 32;
    const int64_t begin = seqs.query_start[s], end = seqs.query_start[s + 1];
    if (begin == end) return;
    const int nv = p.num_v_heads, kh = h / (nv / p.num_k_heads);
    const auto column_of = [&](int32_t slot) {
        return p.state + (int64_t(slot) * nv + h) * kDk * kDv + j;
    };
    float S[kDk];
    float* state = column_of(seqs.state_slots[s]);
    const bool fresh = seqs.positions[begin] == 0;
#pragma unroll
    for (int i = 0; i < kDk; ++i) S[i] = fresh ? 0.f : state[i * kDv];
    const float A = -__expf(__bfloat162float(p.A_log[h]));
    const float dt_bias = __bfloat162float(p.dt_bias[h]);
    const float w = __bfloat162float(p.norm_weight[j]);
    const float q_scale = rsqrtf(float(kDk));
    const int64_t snap = snapshot_end(seqs, s, begin);
    for (int64_t t = begin; t < end; ++t) {
        const __nv_bfloat16* row = p.qkv + t * p.qkv_cols;
        // l2norm(q) · 1/sqrt(dk) and l2norm(k) into shared memory: warp 0 takes q, warp 1 k
        // (one warp: both).
        for (int which = warp; which < 2; which += kWarps) {
            const __nv_bfloat16* src = row + (which * p.num_k_heads + kh) * kDk;
            float v[kDk / 32], sum_sq = 0.f;
#pragma unroll
            for (int i = 0; i < kDk / 32; ++i) {
                v[i] = __bfloat162float(src[lane + 32 * i]);
                sum_sq = fmaf(v[i], v[i], sum_sq);
            }
            const float inv = rsqrtf(warp_sum(sum_sq) + 1e-6f) * (which == 0 ? q_scale : 1.f);
            float* dst = which == 0 ? q_s : k_s;
#pragma unroll
            for (int i = 0; i < kDk / 32; ++i) dst[lane + 32 * i] = v[i] * inv;
        }
        const __nv_bfloat16* zba = p.zba + t * p.zba_cols;
        const float g = A * softplus(__bfloat162float(zba[p.a_col + h]) + dt_bias);
        const float decay = __expf(g);
        // sigmoid(b) in bf16, as Hugging Face's model computes it.
        const float beta = bf16_round(1.f / (1.f + __expf(-__bfloat162float(zba[p.b_col + h]))));
        const float v = __bfloat162float(row[2 * p.num_k_heads * kDk + h * kDv + j]);
        __syncthreads();
        // delta = beta (v - kᵀ(decay S)): what the decayed state does not predict of v.
        float k_s_dot = 0.f;
#pragma unroll
        for (int i = 0; i < kDk; ++i) k_s_dot = fmaf(S[i], k_s[i], k_s_dot);
        const float delta = (v - decay * k_s_dot) * beta;
        float o = 0.f;
#pragma unroll
        for (int i = 0; i < kDk; ++i) {
            S[i] = fmaf(S[i], decay, k_s[i] * delta);
            o = fmaf(S[i], q_s[i], o);
        }
        // The gated RMSNorm, rounded as Hugging Face's bf16 model: o to bf16, the normalised
        // value to bf16, times the weight to bf16, times silu(z) in fp32, one last rounding.
        o = bf16_round(o);
        const float sum_sq = warp_sum(o * o);
        if (lane == 0) partial[warp] = sum_sq;
        __syncthreads();
        float total = 0.f;
#pragma unroll
        for (int i = 0; i < kWarps; ++i) total += partial[i];
        const float normed = bf16_round(o * rsqrtf(total / float(kDv) + p.norm_eps));
        const float z = __bfloat162float(zba[p.z_col + h * kDv + j]);
        p.out[(t * nv + h) * kDv + j] = __float2bfloat16(bf16_round(w * normed) * silu(z));
        if (t + 1 == snap) {
            float* snapshot = column_of(seqs.snapshot_slots[s]);
#pragma unroll
            for (int i = 0; i < kDk; ++i) snapshot[i * kDv] = S[i];
        }
    }
#pragma unroll
    for (int i = 0; i < kDk; ++i) state[i * kDv] = S[i];
}

void check_sequences(const GdnSequences& s, int64_t num_tokens) {
    check_cuda_tensor(s.query_start, DType::kI32, "gdn: query_start", {kAnySize});
    const int64_t seqs = s.query_start->size(0) - 1;
    check_cuda_tensor(s.positions, DType::kI32, "gdn: positions", {num_tokens});
    check_cuda_tensor(s.state_slots, DType::kI32, "gdn: state_slots", {seqs});
    check_cuda_tensor(s.snapshot_rows, DType::kI32, "gdn: snapshot_rows", {seqs});
    check_cuda_tensor(s.snapshot_slots, DType::kI32, "gdn: snapshot_slots", {seqs});
}

}  // namespace

void causal_conv1d_silu(const Tensor& x, const Tensor& weight, const GdnSequences& seqs,
                        Tensor& conv_state, Tensor& out, cudaStream_t stream) {
    check_cuda_tensor(weight, DType::kBF16, "causal_conv1d_silu: weight", {kAnySize, kConvKernel});
    const int64_t channels = weight.size(0), n = x.size(0);
    check_cuda_tensor(x, DType::kBF16, "causal_conv1d_silu: x", {n, kAnySize});
    MI_LAUNCH_CHECK(x.size(1) >= channels, "causal_conv1d_silu: x has fewer columns than channels");
    check_cuda_tensor(conv_state, DType::kF32, "causal_conv1d_silu: conv_state",
                      {kAnySize, kConvKernel - 1, channels});
    check_cuda_tensor(out, DType::kBF16, "causal_conv1d_silu: out", {n, channels});
    check_sequences(seqs, n);
    const int64_t num_seqs = seqs.query_start->size(0) - 1;
    if (n == 0 || num_seqs == 0) return;
    const dim3 grid(unsigned((channels + kConvThreads - 1) / kConvThreads), unsigned(num_seqs));
    launch_kernel(conv1d_kernel<kConvKernel>, grid, kConvThreads, 0, stream,
                  x.data<__nv_bfloat16>(), x.size(1), weight.data<__nv_bfloat16>(), arrays_of(seqs),
                  channels, conv_state.data<float>(), out.data<__nv_bfloat16>());
    MI_CUDA_CHECK(cudaGetLastError());
}

void gated_delta_rule(const GatedDeltaRuleArgs& a, const GdnSequences& seqs, cudaStream_t stream) {
    const int64_t nk = a.num_k_heads, nv = a.num_v_heads, dk = a.head_k_dim, dv = a.head_v_dim;
    const int64_t n = a.qkv->size(0);
    MI_LAUNCH_CHECK(nk > 0 && nv % nk == 0,
                    "gated_delta_rule: value heads must be a multiple of "
                    "key heads");
    check_cuda_tensor(a.qkv, DType::kBF16, "gated_delta_rule: qkv", {n, 2 * nk * dk + nv * dv});
    check_cuda_tensor(a.zba, DType::kBF16, "gated_delta_rule: zba", {n, kAnySize});
    MI_LAUNCH_CHECK(a.z_col + nv * dv <= a.zba->size(1) && a.a_col + nv <= a.zba->size(1) &&
                        a.b_col + nv <= a.zba->size(1),
                    "gated_delta_rule: z, b or a lies past zba's columns");
    check_cuda_tensor(a.A_log, DType::kBF16, "gated_delta_rule: A_log", {nv});
    check_cuda_tensor(a.dt_bias, DType::kBF16, "gated_delta_rule: dt_bias", {nv});
    check_cuda_tensor(a.norm_weight, DType::kBF16, "gated_delta_rule: norm_weight", {dv});
    check_cuda_tensor(a.state, DType::kF32, "gated_delta_rule: state", {kAnySize, nv, dk, dv});
    check_cuda_tensor(a.out, DType::kBF16, "gated_delta_rule: out", {n, nv * dv});
    check_sequences(seqs, n);
    const int64_t num_seqs = seqs.query_start->size(0) - 1;
    if (n == 0 || num_seqs == 0) return;
    const RuleParams p{.qkv = a.qkv->data<__nv_bfloat16>(),
                       .qkv_cols = a.qkv->size(1),
                       .zba = a.zba->data<__nv_bfloat16>(),
                       .zba_cols = a.zba->size(1),
                       .z_col = a.z_col,
                       .b_col = a.b_col,
                       .a_col = a.a_col,
                       .A_log = a.A_log->data<__nv_bfloat16>(),
                       .dt_bias = a.dt_bias->data<__nv_bfloat16>(),
                       .norm_weight = a.norm_weight->data<__nv_bfloat16>(),
                       .norm_eps = a.norm_eps,
                       .num_k_heads = int(nk),
                       .num_v_heads = int(nv),
                       .state = a.state->data<float>(),
                       .out = a.out->data<__nv_bfloat16>()};
    const dim3 grid{unsigned(nv), unsigned(num_seqs)};
    if (dk == 64 && dv == 64)
        launch_kernel(gated_delta_rule_kernel<64, 64>, grid, 64, 0, stream, p, arrays_of(seqs));
    else if (dk == 128 && dv == 128)
        launch_kernel(gated_delta_rule_kernel<128, 128>, grid, 128, 0, stream, p, arrays_of(seqs));
    else
        MI_LAUNCH_CHECK(false,
                        "gated_delta_rule: head_k_dim and head_v_dim must be both 64 or "
                        "both 128");
    MI_CUDA_CHECK(cudaGetLastError());
}

void copy_state_slot(Tensor& t, int32_t from, int32_t to, cudaStream_t stream) {
    MI_LAUNCH_CHECK(
        t.device() == Device::kCUDA && from >= 0 && to >= 0 && from < t.size(0) && to < t.size(0),
        "copy_state_slot: slots out of range");
    const size_t bytes = t.nbytes() / size_t(t.size(0));
    auto* base = static_cast<char*>(t.raw());
    MI_CUDA_CHECK(cudaMemcpyAsync(base + size_t(to) * bytes, base + size_t(from) * bytes, bytes,
                                  cudaMemcpyDeviceToDevice, stream));
}

}  // namespace miniinfer::cuda
