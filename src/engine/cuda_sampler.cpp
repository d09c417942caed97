#include "engine/cuda_sampler.h"

#include <algorithm>
#include <bit>
#include <deque>

#include "core/check.h"
#include "core/cuda/cuda_check.h"
#include "core/cuda/pinned_buffer.h"
#include "core/thread_pool.h"
#include "kernels/cuda/sampling/penalties.h"
#include "kernels/cuda/sampling/sampling.h"
#include "kernels/cuda/sampling/token_bitmask.h"

namespace miniinfer {
namespace {

constexpr int64_t kMaxLogprobs = 20;
constexpr int64_t kMaskIdsPerRow = 64;  // EOS + stop ids the upload has room for before growing

// Penalties, masks or biases change this row's logits before sampling (a row with bad words
// even at a step that bans none of them: finding out takes the same host work as staging it).
bool needs_penalties(const SamplerInput& r) {
    const SamplingParams& p = *r.params;
    const bool masking = int64_t(r.output_ids.size()) < p.min_tokens &&
                         (!r.eos_ids.empty() || !p.stop_token_ids.empty());
    return masking || !r.token_bitmask.empty() || p.repetition_penalty != 1.0 ||
           p.presence_penalty != 0.0 || p.frequency_penalty != 0.0 ||
           p.allowed_token_ids.has_value() || !p.bad_words_token_ids.empty() ||
           !p.logit_bias.empty();
}

Tensor rows(const Tensor& t, int64_t n) {
    return t.slice_rows(0, n);
}

constexpr int64_t kSegments = cuda::kNumPenaltySegments;

// Bytes of the penalty upload: [n RowPenalties][kSegments n + 1 segment starts][num_ids ids].
size_t starts_offset(int64_t n) {
    return size_t(n) * sizeof(cuda::RowPenalties);
}
size_t ids_offset(int64_t n) {
    return starts_offset(n) + size_t(kSegments * n + 1) * 4;
}

// logit_bias as the kernel reads it: equal ids adjacent, each id's entries in list order.
std::vector<std::pair<int32_t, float>> bias_by_id(const SamplingParams& p) {
    std::vector<std::pair<int32_t, float>> bias = p.logit_bias;
    std::stable_sort(bias.begin(), bias.end(),
                     [](const auto& a, const auto& b) { return a.first < b.first; });
    return bias;
}

}  // namespace

// A launched step's host side: where its results land and what reading them needs.
struct CudaSampler::Launched {
    int slot = 0;
    int64_t rows = 0, max_logprobs = 0;
    bool all_greedy = true;
    std::vector<int32_t> num_logprobs;  // per row (its params may be gone by collect())
};

// Host buffers come in two slots, one per step the overlap loop may have launched.
struct CudaSampler::Buffers {
    static constexpr int kSlots = 2;
    Tensor tokens, logprobs, top_ids, top_logprobs,
        row_params;           // [rows], [rows], [rows, 20] x2, [rows] RowSampling
    Tensor penalised_logits;  // [rows, vocab] f32: a step's logits with penalties and masks
    std::unique_ptr<cuda::PinnedBuffer> host_outputs[kSlots];
    cuda::Event done[kSlots];  // the slot's results are on the host
    cuda::DeviceBuffer sampling_workspace, penalties_workspace;
    std::unique_ptr<cuda::PinnedBuffer>
        host_penalties;  // the penalty upload's staging and device copy
    cuda::DeviceBuffer dev_penalties;
    cuda::Event penalties_copied;  // the staging may be written again
    // Structured output's masks: [rows, words] u32 then [rows] i32 logits rows, staged and
    // copied once a step; allocated on the first masked step (5 MB at 256 rows of Qwen's vocab).
    // The upload runs on a stream of its own: the masks are ready while the step's forward still
    // runs, and their copy then overlaps it instead of following it on the step's stream.
    std::unique_ptr<cuda::PinnedBuffer> host_masks;
    cuda::DeviceBuffer dev_masks;
    std::unique_ptr<cuda::Stream> mask_stream;
    cuda::Event masks_copied, masks_read;
    std::deque<Launched> launched;
    int next_slot = 0;
};

CudaSampler::CudaSampler(int64_t max_rows, int64_t vocab, int64_t max_model_len)
    : max_rows_(max_rows), vocab_(vocab) {
    const int64_t S = max_rows;
    const size_t penalty_bytes =
        ids_offset(S) + size_t(S) * size_t(max_model_len + kMaskIdsPerRow) * 4;
    buf_ = std::make_unique<Buffers>();
    Buffers& B = *buf_;
    B.tokens = cuda::device_tensor({S}, DType::kI32);
    B.logprobs = cuda::device_tensor({S}, DType::kF32);
    B.top_ids = cuda::device_tensor({S, kMaxLogprobs}, DType::kI32);
    B.top_logprobs = cuda::device_tensor({S, kMaxLogprobs}, DType::kF32);
    B.row_params = cuda::device_tensor({S, int64_t(sizeof(cuda::RowSampling))}, DType::kU8);
    B.penalised_logits = cuda::device_tensor({S, vocab}, DType::kF32);
    for (auto& h : B.host_outputs)
        h = std::make_unique<cuda::PinnedBuffer>(
            size_t(S) * (8 + 8 * kMaxLogprobs + sizeof(cuda::RowSampling)));
    B.sampling_workspace = cuda::DeviceBuffer(
        std::max(cuda::sampling_workspace_bytes(S, vocab), cuda::argmax_workspace_bytes(S)));
    // argmax's few-row path counts finished blocks there: zeros before its first call.
    MI_CUDA_CHECK(cudaMemset(B.sampling_workspace.data(), 0, B.sampling_workspace.bytes()));
    B.penalties_workspace = cuda::DeviceBuffer(cuda::penalties_workspace_bytes(vocab));
    B.host_penalties = std::make_unique<cuda::PinnedBuffer>(penalty_bytes);
    B.dev_penalties = cuda::DeviceBuffer(penalty_bytes);
}

CudaSampler::~CudaSampler() = default;

const Tensor& CudaSampler::device_tokens() const {
    return buf_->tokens;
}

namespace {
// A slot's pinned buffer: [tokens i32 | logprobs f32 | top ids i32 x max | top logprobs f32 x
// max | RowSampling], each region sized for `rows`.
struct HostOutputs {
    HostOutputs(void* data, int64_t rows) {
        auto* host = static_cast<char*>(data);
        tokens = reinterpret_cast<int32_t*>(host);
        logprobs = reinterpret_cast<float*>(host + 4 * rows);
        top_ids = reinterpret_cast<int32_t*>(host + 8 * rows);
        top_logprobs = reinterpret_cast<float*>(host + 8 * rows + 4 * rows * kMaxLogprobs);
        params = reinterpret_cast<cuda::RowSampling*>(host + 8 * rows * (1 + kMaxLogprobs));
    }
    int32_t* tokens;
    float* logprobs;
    int32_t* top_ids;
    float* top_logprobs;
    cuda::RowSampling* params;
};
}  // namespace

void CudaSampler::launch(const Tensor& raw_logits, std::span<const SamplerInput> rows_in,
                         cudaStream_t st) {
    const int64_t rows_n = int64_t(rows_in.size());
    MI_CHECK(rows_n <= max_rows_ && raw_logits.size(0) == rows_n &&
                 raw_logits.dtype() == DType::kF32 && raw_logits.size(1) == vocab_,
             "{} sampling inputs for {} (at most {} rows of {} f32 logits)", rows_n,
             raw_logits.describe(), max_rows_, vocab_);
    Buffers& B = *buf_;
    MI_CHECK(int(B.launched.size()) < Buffers::kSlots,
             "{} sampling steps launched and not collected", B.launched.size());
    Launched step;
    step.slot = B.next_slot;
    B.next_slot = (B.next_slot + 1) % Buffers::kSlots;
    step.rows = rows_n;
    std::vector<int32_t> penalised;  // rows whose logits penalties or masks change
    step.num_logprobs.resize(size_t(rows_n));
    for (int64_t i = 0; i < rows_n; ++i) {
        const SamplerInput& r = rows_in[size_t(i)];
        step.all_greedy &= r.params->greedy() && !r.params->logprobs;
        step.num_logprobs[size_t(i)] = int32_t(r.params->logprobs.value_or(0));
        step.max_logprobs = std::max<int64_t>(step.max_logprobs, step.num_logprobs[size_t(i)]);
        if (needs_penalties(r)) penalised.push_back(int32_t(i));
    }
    // The raw logits of penalised rows are read again only for the logprobs they ask for.
    bool keep_raw = false;
    for (int32_t i : penalised) keep_raw |= rows_in[size_t(i)].params->logprobs.has_value();
    if (rows_n > 0) {
        // Sampled from the raw logits as they are, unless penalties or masks change some row:
        // then from the logits with those changes, made in place (the model's logits buffer is
        // read by nothing after the sampler) unless a penalised row's logprobs need the raw
        // values: then in a copy, which costs a pass over every row's logits (156 MB at 256
        // rows of Qwen's vocabulary).
        Tensor logits = raw_logits;
        if (!penalised.empty()) {
            if (keep_raw) {
                logits = rows(B.penalised_logits, rows_n);
                MI_CUDA_CHECK(cudaMemcpyAsync(logits.raw(), raw_logits.raw(), raw_logits.nbytes(),
                                              cudaMemcpyDeviceToDevice, st));
            }
            apply_penalties(logits, rows_in, penalised, st);
        }
        const HostOutputs h(B.host_outputs[step.slot]->data, rows_n);
        Tensor tok = rows(B.tokens, rows_n);
        if (step.all_greedy) {
            // Of the penalised logits, where penalties apply.
            cuda::argmax(logits, tok, st, B.sampling_workspace.data(),
                         B.sampling_workspace.bytes());
        } else {
            for (int64_t i = 0; i < rows_n; ++i) {
                const SamplerInput& r = rows_in[size_t(i)];
                const SamplingParams& p = *r.params;
                h.params[i] = {.temperature = float(p.temperature),
                               .top_k = int32_t(p.top_k),
                               .top_p = float(p.top_p),
                               .min_p = float(p.min_p),
                               .seed = r.seed,
                               .step = int32_t(r.output_ids.size()),
                               .num_logprobs = step.num_logprobs[size_t(i)],
                               .penalised = 0};
            }
            if (keep_raw)
                for (int32_t i : penalised) h.params[i].penalised = 1;
            Tensor params = rows(B.row_params, rows_n);
            MI_CUDA_CHECK(cudaMemcpyAsync(params.raw(), h.params,
                                          size_t(rows_n) * sizeof(cuda::RowSampling),
                                          cudaMemcpyHostToDevice, st));
            const int64_t m = step.max_logprobs;
            Tensor lp = rows(B.logprobs, rows_n), ti, tl;
            if (m > 0) {
                ti = Tensor(B.top_ids.raw(), DType::kI32, {rows_n, m}, Device::kCUDA);
                tl = Tensor(B.top_logprobs.raw(), DType::kF32, {rows_n, m}, Device::kCUDA);
            }
            cuda::sample(logits, params, keep_raw ? &raw_logits : nullptr, m, tok, lp,
                         m > 0 ? &ti : nullptr, m > 0 ? &tl : nullptr, B.sampling_workspace.data(),
                         B.sampling_workspace.bytes(), st);
            MI_CUDA_CHECK(cudaMemcpyAsync(h.logprobs, lp.raw(), size_t(rows_n) * 4,
                                          cudaMemcpyDeviceToHost, st));
            if (m > 0) {
                MI_CUDA_CHECK(cudaMemcpyAsync(h.top_ids, ti.raw(), size_t(rows_n * m) * 4,
                                              cudaMemcpyDeviceToHost, st));
                MI_CUDA_CHECK(cudaMemcpyAsync(h.top_logprobs, tl.raw(), size_t(rows_n * m) * 4,
                                              cudaMemcpyDeviceToHost, st));
            }
        }
        MI_CUDA_CHECK(
            cudaMemcpyAsync(h.tokens, tok.raw(), size_t(rows_n) * 4, cudaMemcpyDeviceToHost, st));
    }
    B.done[step.slot].record(st);  // also for no rows: collect() then waits for the step
    B.launched.push_back(std::move(step));
}

std::vector<SampledToken> CudaSampler::collect() {
    Buffers& B = *buf_;
    MI_CHECK(!B.launched.empty(), "collect() without a launched sampling step");
    const Launched step = std::move(B.launched.front());
    B.launched.pop_front();
    B.done[step.slot].synchronize();
    const HostOutputs h(B.host_outputs[step.slot]->data, step.rows);
    std::vector<SampledToken> out(static_cast<size_t>(step.rows));
    for (int64_t i = 0; i < step.rows; ++i) {
        SampledToken& t = out[size_t(i)];
        t.token = h.tokens[i];
        if (step.all_greedy) continue;
        t.logprob = h.logprobs[i];
        for (int64_t k = 0; k < step.num_logprobs[size_t(i)]; ++k)
            t.top_logprobs.emplace_back(h.top_ids[i * step.max_logprobs + k],
                                        h.top_logprobs[i * step.max_logprobs + k]);
    }
    return out;
}

// The grammar's mask comes first, as in the CPU sampler: the rows with one get -inf wherever it
// clears a bit.
void CudaSampler::apply_token_bitmasks(Tensor& logits, std::span<const SamplerInput> rows_in,
                                       const std::vector<int32_t>& penalised, cudaStream_t st) {
    Buffers& B = *buf_;
    const int64_t words = (vocab_ + 31) / 32;
    std::vector<int32_t> masked;
    for (int32_t i : penalised)
        if (!rows_in[size_t(i)].token_bitmask.empty()) masked.push_back(i);
    if (masked.empty()) return;
    const int64_t n = int64_t(masked.size());
    if (!B.host_masks) {
        const size_t bytes = size_t(max_rows_) * size_t(words + 1) * 4;
        B.host_masks = std::make_unique<cuda::PinnedBuffer>(bytes);
        B.dev_masks = cuda::DeviceBuffer(bytes);
        B.mask_stream = std::make_unique<cuda::Stream>();
    }
    B.masks_copied.synchronize();  // the last upload may still read the staging
    auto* host = static_cast<uint32_t*>(B.host_masks->data);
    auto* mask_rows = reinterpret_cast<int32_t*>(host + n * words);
    for (int64_t j = 0; j < n; ++j) {
        const std::span<const uint32_t> mask = rows_in[size_t(masked[size_t(j)])].token_bitmask;
        MI_CHECK(int64_t(mask.size()) == words, "token bitmask of {} words for {} tokens",
                 mask.size(), vocab_);
        mask_rows[j] = masked[size_t(j)];
    }
    // 19 KB a row of Qwen's vocabulary: a batch's few MB copied by the pool's threads, as the
    // engine filled them.
    ThreadPool::current().parallel_for(n, [&](int64_t b, int64_t e) {
        for (int64_t j = b; j < e; ++j) {
            const std::span<const uint32_t> mask = rows_in[size_t(masked[size_t(j)])].token_bitmask;
            std::copy(mask.begin(), mask.end(), host + j * words);
        }
    });
    auto* dev = static_cast<uint32_t*>(B.dev_masks.data());
    const cudaStream_t copy = B.mask_stream->get();
    MI_CUDA_CHECK(cudaStreamWaitEvent(copy, B.masks_read.get(), 0));  // the last step's kernel
    MI_CUDA_CHECK(
        cudaMemcpyAsync(dev, host, size_t(n * (words + 1)) * 4, cudaMemcpyHostToDevice, copy));
    B.masks_copied.record(copy);
    MI_CUDA_CHECK(cudaStreamWaitEvent(st, B.masks_copied.get(), 0));
    const Tensor masks_d(dev, DType::kI32, {n, words}, Device::kCUDA);
    const Tensor rows_d(dev + n * words, DType::kI32, {n}, Device::kCUDA);
    cuda::apply_token_bitmask(logits, masks_d, rows_d, st);
    B.masks_read.record(st);
}

// The CPU reference checks that ids lie in the vocabulary; the kernel trusts them, so the
// staging checks them.
void CudaSampler::apply_penalties(Tensor& logits, std::span<const SamplerInput> rows_in,
                                  const std::vector<int32_t>& penalised, cudaStream_t st) {
    Buffers& B = *buf_;
    apply_token_bitmasks(logits, rows_in, penalised, st);
    const int64_t n = int64_t(penalised.size());
    // [n][bans]: this step's bad-word bans, found before the upload is sized
    std::vector<std::vector<int32_t>> banned(static_cast<size_t>(n));
    size_t num_ids = 0;
    for (int64_t j = 0; j < n; ++j) {
        const SamplerInput& r = rows_in[size_t(penalised[size_t(j)])];
        const SamplingParams& p = *r.params;
        banned[size_t(j)] = banned_bad_word_ids(p, r.output_ids);
        num_ids += r.prompt_ids.size() + r.output_ids.size() + r.eos_ids.size() +
                   p.stop_token_ids.size() + banned[size_t(j)].size() +
                   (p.allowed_token_ids ? p.allowed_token_ids->size() : 0) +
                   2 * p.logit_bias.size();
    }
    const size_t bytes = ids_offset(n) + num_ids * 4;
    B.penalties_copied.synchronize();              // the last upload may still read the staging
    if (bytes > B.host_penalties->bytes) {         // rare: many stop, allowed or bias ids
        MI_CUDA_CHECK(cudaStreamSynchronize(st));  // the old device copy may still be read
        B.host_penalties = std::make_unique<cuda::PinnedBuffer>(bytes);
        B.dev_penalties = cuda::DeviceBuffer(bytes);
    }
    auto* host = static_cast<char*>(B.host_penalties->data);
    auto* params = reinterpret_cast<cuda::RowPenalties*>(host);
    auto* starts = reinterpret_cast<int32_t*>(host + starts_offset(n));  // [kSegments n + 1]
    auto* ids = reinterpret_cast<int32_t*>(host + ids_offset(n));        // [num_ids]
    int32_t at = 0;
    auto put = [&](int64_t id) {
        MI_CHECK(id >= 0 && id < vocab_, "token id {} outside the vocabulary of {}", id, vocab_);
        ids[at++] = int32_t(id);
    };
    starts[0] = 0;
    for (int64_t j = 0; j < n; ++j) {
        const SamplerInput& r = rows_in[size_t(penalised[size_t(j)])];
        const SamplingParams& p = *r.params;
        params[j] = {.row = penalised[size_t(j)],
                     .repetition_penalty = float(p.repetition_penalty),
                     .frequency_penalty = p.frequency_penalty,
                     .presence_penalty = p.presence_penalty};
        const bool repetition = p.repetition_penalty != 1.0;
        const bool additive = p.frequency_penalty != 0.0 || p.presence_penalty != 0.0;
        int32_t* row_starts = starts + kSegments * j;
        if (repetition) std::for_each(r.prompt_ids.begin(), r.prompt_ids.end(), put);
        row_starts[cuda::kOutputIds] = at;
        if (repetition || additive) std::for_each(r.output_ids.begin(), r.output_ids.end(), put);
        row_starts[cuda::kMaskedIds] = at;
        if (int64_t(r.output_ids.size()) < p.min_tokens) {
            std::for_each(r.eos_ids.begin(), r.eos_ids.end(), put);
            std::for_each(p.stop_token_ids.begin(), p.stop_token_ids.end(), put);
        }
        row_starts[cuda::kBannedIds] = at;
        std::for_each(banned[size_t(j)].begin(), banned[size_t(j)].end(), put);
        row_starts[cuda::kAllowedIds] = at;
        if (p.allowed_token_ids)
            std::for_each(p.allowed_token_ids->begin(), p.allowed_token_ids->end(), put);
        row_starts[cuda::kBiasPairs] = at;
        for (auto [id, bias] : bias_by_id(p)) {
            put(id);
            ids[at++] = std::bit_cast<int32_t>(bias);
        }
        row_starts[kSegments] = at;
    }
    auto* dev = static_cast<char*>(B.dev_penalties.data());
    MI_CUDA_CHECK(
        cudaMemcpyAsync(dev, host, ids_offset(n) + size_t(at) * 4, cudaMemcpyHostToDevice, st));
    B.penalties_copied.record(st);
    const Tensor params_d(dev, DType::kU8, {int64_t(starts_offset(n))}, Device::kCUDA);
    const Tensor starts_d(dev + starts_offset(n), DType::kI32, {kSegments * n + 1}, Device::kCUDA);
    const Tensor ids_d(dev + ids_offset(n), DType::kI32, {int64_t(at)}, Device::kCUDA);
    cuda::apply_penalties(logits, params_d, starts_d, ids_d, B.penalties_workspace.data(),
                          B.penalties_workspace.bytes(), st);
}

}  // namespace miniinfer
