// The CUDA sampler against the CPU reference sampler (layers/sampler.h) on random rows, through
// the runner's CudaSampler (engine/cuda_sampler.h): penalties, min_tokens masks, allowed ids,
// bad words and logit biases applied in place by the penalty kernel, then the sampling kernel with
// the raw logits (f32, or bf16 as the runner passes them) for the logprobs. No row goes to the CPU.
//
// Tolerances: tokens equal for >= 99.5% of rows; a row may differ only where the CPU's and the
// GPU's floating-point sums (different order, relative 1e-16) fall on opposite sides of a top_p
// or draw boundary — each mismatch is printed with both tokens' CPU probabilities. Greedy rows
// must all match (no sums decide them). Logprobs and top logprobs within 1e-4 (the GPU's
// log-sum-exp is f32, the CPU's f64); top ids equal.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>
#include <utility>
#include <vector>

#include "core/cuda/cuda_check.h"
#include "core/cuda/device_buffer.h"
#include "engine/cuda_sampler.h"
#include "gpu_testing.h"
#include "kernels/cuda/sampling/sampling.h"
#include "layers/sampler.h"

using namespace miniinfer;

namespace {

template <typename T>
T pick(std::mt19937& rng, std::initializer_list<T> options) {
    std::uniform_int_distribution<size_t> d(0, options.size() - 1);
    return *(options.begin() + d(rng));
}

// One row: its request and what it has generated; doubles in params are floats, so the GPU's
// float RowSampling carries exactly the CPU's values.
struct Row {
    SamplingParams params;
    std::vector<int32_t> prompt, output;
    uint64_t seed = 0;
};

struct Batch {
    int64_t rows = 0, vocab = 0;
    std::vector<float> logits;  // [rows, vocab]
    std::vector<Row> requests;
    std::vector<int64_t> eos_ids;   // EOS for every row
    std::vector<int64_t> stop_ids;  // every row's stop_token_ids
    bool penalties = false;
    bool bf16_raw = false;  // logits on the bf16 grid (what a bf16 LM head gives: more ties)
};

// What random_batch draws: any parameters; kPlain: temperature alone (no top_k, top_p, min_p or
// top logprobs), the rows the sampling kernel takes in one pass; kSmallTopK: a top_k of 1 to 256
// with any top_p and min_p and no top logprobs, the rows it takes in two passes. Penalties and
// masks as the arguments and the draws decide, for every kind.
enum class Rows { kAny, kPlain, kSmallTopK };

Batch random_batch(int64_t rows, int64_t vocab, bool penalties, bool bf16_raw, std::mt19937& rng,
                   Rows kind = Rows::kAny) {
    const bool plain = kind != Rows::kAny;
    Batch b;
    b.rows = rows, b.vocab = vocab, b.penalties = penalties, b.bf16_raw = bf16_raw;
    b.logits.resize(size_t(rows * vocab));
    b.eos_ids = {vocab - 1};
    if (vocab > 2) b.stop_ids = {vocab / 2};
    std::uniform_real_distribution<float> unit(0.f, 1.f);
    for (int64_t r = 0; r < rows; ++r) {
        float* x = b.logits.data() + r * vocab;
        const float scale = pick(rng, {1.f, 3.f, 8.f, 200.f});
        std::normal_distribution<float> normal(0.f, scale);
        const bool quantised = unit(rng) < 0.1f;  // many exact ties
        for (int64_t i = 0; i < vocab; ++i) {
            x[i] = normal(rng);
            if (quantised) x[i] = std::round(x[i] * 2.f) / 2.f;
        }
        Row row;
        SamplingParams& p = row.params;
        p.temperature = unit(rng) < 0.15f ? 0.0 : double(pick(rng, {0.3f, 0.6f, 1.f, 1.3f}));
        p.top_k = pick<int64_t>(rng, {0, 0, 1, 3, 40, vocab - 1});
        p.top_p = double(pick(rng, {1.f, 1.f, 0.95f, 0.7f, 0.3f}));
        p.min_p = double(pick(rng, {0.f, 0.f, 0.f, 0.05f, 0.3f}));
        if (unit(rng) < 0.6f) p.logprobs = pick<int64_t>(rng, {0, 1, 3, 5});
        if (plain) {
            p.top_k = 0, p.top_p = 1.0, p.min_p = 0.0;
            if (p.logprobs) p.logprobs = 0;
        }
        if (kind == Rows::kSmallTopK) {
            if (p.temperature == 0.0) p.temperature = 0.6;
            p.top_k = pick<int64_t>(rng, {1, 3, 20, 20, 40, 256});
            p.top_p = double(pick(rng, {1.f, 0.95f, 0.95f, 0.7f, 0.3f}));
            p.min_p = double(pick(rng, {0.f, 0.f, 0.05f, 0.3f}));
        }
        row.seed = (uint64_t(rng()) << 32) | rng();
        // Ids drawn half from the row's 64 best tokens, so penalties and masking change the answer.
        std::vector<int32_t> order(static_cast<size_t>(vocab));
        for (int64_t i = 0; i < vocab; ++i) order[size_t(i)] = int32_t(i);
        const size_t num_best = std::min<size_t>(64, order.size());
        std::partial_sort(order.begin(), order.begin() + ptrdiff_t(num_best), order.end(),
                          [x](int32_t a, int32_t c) { return x[a] > x[c]; });
        std::uniform_int_distribution<int32_t> any_id(0, int32_t(vocab - 1));
        std::uniform_int_distribution<size_t> best_idx(0, num_best - 1);
        auto random_id = [&] { return unit(rng) < 0.5f ? order[best_idx(rng)] : any_id(rng); };
        const int num_output = std::uniform_int_distribution<int>(0, 40)(rng);
        for (int k = 0; k < num_output; ++k) row.output.push_back(random_id());
        if (penalties && unit(rng) < 0.7f) {
            for (int k = 0; k < 30; ++k) row.prompt.push_back(random_id());
            p.repetition_penalty = double(pick(rng, {1.f, 1.1f, 1.5f, 0.8f}));
            p.presence_penalty = double(pick(rng, {0.f, 0.5f, -0.5f}));
            p.frequency_penalty = double(pick(rng, {0.f, 0.25f, 1.5f}));
        }
        if (unit(rng) < 0.3f) {
            // Masking matters: the EOS is this row's best token until it is masked.
            p.min_tokens = int64_t(row.output.size()) + 1;
            x[vocab - 1] = x[order[0]] + 1.f;
        }
        p.stop_token_ids = b.stop_ids;
        b.requests.push_back(std::move(row));
        if (bf16_raw)
            for (int64_t i = 0; i < vocab; ++i) x[i] = bf16_to_f32(f32_to_bf16(x[i]));
    }
    return b;
}

Tensor host_tensor(const void* data, Shape shape, DType dtype) {
    Tensor t = Tensor::zeros(std::move(shape), dtype);
    std::memcpy(t.raw(), data, t.nbytes());
    return t;
}

std::vector<SamplerInput> sampler_inputs(const Batch& b) {
    std::vector<SamplerInput> inputs;
    for (int64_t r = 0; r < b.rows; ++r) {
        const Row& row = b.requests[r];
        SamplerInput in;
        in.logits = std::span<const float>(b.logits.data() + r * b.vocab, size_t(b.vocab));
        in.params = &row.params;
        in.prompt_ids = row.prompt;
        in.output_ids = row.output;
        in.eos_ids = b.eos_ids;
        in.seed = row.seed;
        inputs.push_back(in);
    }
    return inputs;
}

std::vector<SampledToken> run_gpu(const Batch& b, std::span<const SamplerInput> inputs) {
    const int64_t rows = b.rows, vocab = b.vocab;
    const Tensor logits = cuda::to_device(host_tensor(b.logits.data(), {rows, vocab}, DType::kF32));
    // max_model_len 1: the token-list upload is sized for almost nothing and must grow.
    CudaSampler sampler(rows, vocab, /*max_model_len=*/1);
    cuda::Stream stream;
    return sampler.sample(logits, inputs, stream.get());
}
struct Tally {
    int64_t rows = 0, mismatches = 0;
};

void compare(const Batch& b, Tally& tally) {
    const std::vector<SamplerInput> inputs = sampler_inputs(b);
    const std::vector<SampledToken> gpu = run_gpu(b, inputs);
    const std::vector<SampledToken> cpu = sample_batch(inputs);
    ASSERT_EQ(gpu.size(), cpu.size());
    for (int64_t r = 0; r < b.rows; ++r) {
        const SamplingParams& p = b.requests[r].params;
        ++tally.rows;
        const int32_t want = cpu[r].token, got = gpu[r].token;
        if (got != want) {
            ++tally.mismatches;
            const std::vector<double> dist = sampling_distribution(inputs[r]);
            EXPECT_FALSE(p.greedy()) << "greedy row " << r << " cpu " << want << " gpu " << got;
            std::printf(
                "mismatch vocab %lld row %lld: cpu %d (p %.3g) gpu %d (p %.3g); T %g "
                "top_k %lld top_p %g min_p %g\n",
                (long long)b.vocab, (long long)r, want, dist[size_t(want)], got,
                got >= 0 && got < b.vocab ? dist[size_t(got)] : -1.0, p.temperature,
                (long long)p.top_k, p.top_p, p.min_p);
            continue;
        }
        // All greedy rows without logprobs: the argmax path, which reports no logprobs.
        const bool argmax_path =
            std::all_of(b.requests.begin(), b.requests.end(),
                        [](const Row& row) { return row.params.greedy() && !row.params.logprobs; });
        // The row's logprob where it asks for logprobs (SampledToken), then its top logprobs:
        // within 1e-4; the top ids equal.
        std::vector<double> got_lp, want_lp;
        std::vector<int32_t> got_ids, want_ids;
        if (!argmax_path && p.logprobs)
            got_lp.push_back(gpu[r].logprob), want_lp.push_back(cpu[r].logprob);
        const int64_t n = std::min<int64_t>(p.logprobs.value_or(0), b.vocab);
        ASSERT_EQ(int64_t(cpu[r].top_logprobs.size()), n);
        ASSERT_EQ(int64_t(gpu[r].top_logprobs.size()), n) << "row " << r;
        for (int64_t j = 0; j < n; ++j) {
            got_ids.push_back(gpu[r].top_logprobs[j].first);
            want_ids.push_back(cpu[r].top_logprobs[j].first);
            got_lp.push_back(gpu[r].top_logprobs[j].second);
            want_lp.push_back(cpu[r].top_logprobs[j].second);
        }
        EXPECT_TRUE(gpu_testing::bitwise_equal<int32_t>(got_ids, want_ids))
            << "top ids, vocab " << b.vocab << " row " << r;
        EXPECT_TRUE(gpu_testing::all_close(got_lp, want_lp, {.atol = 1e-4}))
            << "logprob (element 0 unless argmax) and top logprobs, vocab " << b.vocab << " row "
            << r;
    }
}

}  // namespace

// Both forms: one block a row, and (with a workspace, below kArgmaxSplitRows rows) rows spread
// over blocks, called twice over the same workspace (the counts must be back at zero).
TEST(CudaSampling, ArgmaxMatchesCpu) {
    REQUIRE_GPU();
    std::mt19937 rng(11);
    cuda::DeviceBuffer workspace(cuda::argmax_workspace_bytes(256));
    MI_CUDA_CHECK(cudaMemset(workspace.data(), 0, workspace.bytes()));
    for (int64_t rows : {1, 3, 15, 256}) {
        for (int64_t vocab : {1, 33, 36, 151936}) {  // 36, 151,936: 16-byte loads
            std::vector<float> x(static_cast<size_t>(rows * vocab));
            std::normal_distribution<float> normal(0.f, 4.f);
            for (float& v : x) v = normal(rng);
            std::vector<int32_t> want(static_cast<size_t>(rows));
            for (int64_t r = 0; r < rows; ++r) {
                float* row = x.data() + r * vocab;
                if (vocab > 2 && r % 2 == 0) {  // a tie for the maximum: the first id wins
                    std::uniform_int_distribution<int64_t> d(0, vocab - 1);
                    const int64_t a = d(rng), c = d(rng);
                    row[a] = row[c] = 100.f;
                }
                want[size_t(r)] = int32_t(std::max_element(row, row + vocab) - row);
            }
            Tensor logits = cuda::to_device(host_tensor(x.data(), {rows, vocab}, DType::kF32));
            Tensor tokens = cuda::device_tensor({rows}, DType::kI32);
            for (int call = 0; call < 3; ++call) {  // one block a row, then spread twice
                MI_CUDA_CHECK(cudaMemset(tokens.raw(), 0xff, tokens.nbytes()));
                if (call == 0)
                    cuda::argmax(logits, tokens, nullptr);
                else
                    cuda::argmax(logits, tokens, nullptr, workspace.data(), workspace.bytes());
                Tensor got = cuda::to_host(tokens);
                for (int64_t r = 0; r < rows; ++r)
                    ASSERT_EQ(got.data<int32_t>()[r], want[size_t(r)])
                        << "rows " << rows << " vocab " << vocab << " row " << r << " call "
                        << call;
            }
        }
    }
}

// Overlap scheduling's placeholders: negative ids name rows of the previous step's tokens.
TEST(CudaSampling, ResolvePlaceholdersMatchesHost) {
    REQUIRE_GPU();
    std::mt19937 rng(5);
    for (int64_t n : {1, 7, 300, 2048}) {
        const int64_t rows = 256;
        std::vector<int32_t> sampled(static_cast<size_t>(rows)), ids(static_cast<size_t>(n));
        std::uniform_int_distribution<int32_t> token(0, 151935), row(0, int32_t(rows) - 1);
        for (int32_t& t : sampled) t = token(rng);
        for (int32_t& id : ids) id = rng() % 3 ? token(rng) : -row(rng) - 1;
        Tensor ids_d = cuda::to_device(host_tensor(ids.data(), {n}, DType::kI32));
        const Tensor sampled_d = cuda::to_device(host_tensor(sampled.data(), {rows}, DType::kI32));
        cuda::resolve_placeholders(ids_d, sampled_d, nullptr);
        const Tensor got = cuda::to_host(ids_d);
        for (int64_t i = 0; i < n; ++i) {
            const int32_t want =
                ids[size_t(i)] < 0 ? sampled[size_t(-(ids[size_t(i)] + 1))] : ids[size_t(i)];
            ASSERT_EQ(got.data<int32_t>()[i], want) << "n " << n << " id " << i;
        }
    }
}

TEST(CudaSampling, SampleMatchesCpu) {
    REQUIRE_GPU();
    std::mt19937 rng(12);
    Tally tally;
    struct Shape2 {
        int64_t rows, vocab;
    };
    for (Shape2 shape :
         {Shape2{64, 7}, Shape2{256, 1000}, Shape2{1, 151936}, Shape2{256, 151936}}) {
        for (bool penalties : {false, true}) {
            for (bool bf16_raw : {false, true}) {
                const Batch b = random_batch(shape.rows, shape.vocab, penalties, bf16_raw, rng);
                const int64_t before = tally.mismatches;
                compare(b, tally);
                std::printf("rows %lld vocab %lld penalties %d bf16 raw %d: %lld mismatches\n",
                            (long long)shape.rows, (long long)shape.vocab, int(penalties),
                            int(bf16_raw), (long long)(tally.mismatches - before));
            }
        }
    }
    std::printf("tokens equal on %lld of %lld rows\n", (long long)(tally.rows - tally.mismatches),
                (long long)tally.rows);
    EXPECT_GE(double(tally.rows - tally.mismatches), 0.995 * double(tally.rows));
}

// Adds allowed_token_ids, bad words and logit_bias to most rows of a batch, aimed at the row's
// best tokens so that they change the answer. Every row keeps a token no mask hits (the CPU
// sampler stops on a row with every token masked).
void add_masks_and_bias(Batch& b, std::mt19937& rng) {
    std::uniform_real_distribution<float> unit(0.f, 1.f);
    std::uniform_int_distribution<int32_t> any_id(0, int32_t(b.vocab - 1));
    for (int64_t r = 0; r < b.rows; ++r) {
        Row& row = b.requests[size_t(r)];
        SamplingParams& p = row.params;
        float* x = b.logits.data() + r * b.vocab;
        // Logits within ±64: a forced token far below the best one has a logprob of up to
        // -128 or so, which the GPU's f32 subtraction still gives within the 1e-4 tolerance.
        float max_abs = 0.f;
        for (int64_t i = 0; i < b.vocab; ++i) max_abs = std::max(max_abs, std::fabs(x[i]));
        if (max_abs > 64.f)
            for (int64_t i = 0; i < b.vocab; ++i) x[i] *= 64.f / max_abs;
        std::vector<int32_t> best(static_cast<size_t>(b.vocab));
        for (int64_t i = 0; i < b.vocab; ++i) best[size_t(i)] = int32_t(i);
        const size_t num_best = std::min<size_t>(8, best.size());
        std::partial_sort(best.begin(), best.begin() + ptrdiff_t(num_best), best.end(),
                          [x](int32_t a, int32_t c) { return x[a] > x[c]; });
        std::uniform_int_distribution<size_t> best_idx(0, num_best - 1);
        auto random_id = [&] { return unit(rng) < 0.6f ? best[best_idx(rng)] : any_id(rng); };
        if (unit(rng) < 0.5f) {
            p.bad_words_token_ids.push_back({best[0]});
            if (!row.output.empty()) p.bad_words_token_ids.push_back({row.output.back(), best[1]});
            p.bad_words_token_ids.push_back({random_id(), random_id()});
        }
        if (unit(rng) < 0.5f)
            for (int k = pick(rng, {1, 2, 5}); k > 0; --k)
                p.logit_bias.emplace_back(random_id(), pick(rng, {100.f, -100.f, 2.5f, -0.7f}));
        if (unit(rng) < 0.4f) {
            std::vector<int64_t> allowed;
            for (int k = pick(rng, {1, 3, 20}); k > 0; --k) allowed.push_back(random_id());
            allowed.push_back(allowed.front());  // a duplicate
            // One token no mask hits: not banned, not EOS or a stop id.
            const std::vector<int32_t> banned = banned_bad_word_ids(p, row.output);
            auto masked = [&](int64_t id) {
                return id == b.vocab - 1 ||
                       std::find(b.stop_ids.begin(), b.stop_ids.end(), id) != b.stop_ids.end() ||
                       std::find(banned.begin(), banned.end(), int32_t(id)) != banned.end();
            };
            int64_t free_id = random_id();
            while (masked(free_id)) free_id = (free_id + 1) % b.vocab;
            allowed.push_back(free_id);
            p.allowed_token_ids = std::move(allowed);
        }
    }
}

// Allowed ids, bad words and biases with and without penalties, through CudaSampler's staging
// and the penalty kernel, against the CPU sampler with SampleMatchesCpu's tolerance; and no
// token outside a row's allowed ids or among its bans.
TEST(CudaSampling, MasksAndBiasMatchCpu) {
    REQUIRE_GPU();
    std::mt19937 rng(31);
    Tally tally;
    for (auto [rows, vocab] : {std::pair<int64_t, int64_t>{64, 7}, {128, 1000}, {64, 151936}}) {
        for (bool penalties : {false, true}) {
            Batch b = random_batch(rows, vocab, penalties, /*bf16_raw=*/false, rng);
            add_masks_and_bias(b, rng);
            const int64_t before = tally.mismatches;
            compare(b, tally);
            const std::vector<SamplerInput> inputs = sampler_inputs(b);
            const std::vector<SampledToken> gpu = run_gpu(b, inputs);
            for (int64_t r = 0; r < rows; ++r) {
                const SamplingParams& p = b.requests[size_t(r)].params;
                const int32_t t = gpu[size_t(r)].token;
                if (p.allowed_token_ids) {
                    const auto& allowed = *p.allowed_token_ids;
                    EXPECT_NE(std::find(allowed.begin(), allowed.end(), t), allowed.end())
                        << "row " << r << " token " << t << " not allowed";
                }
                const std::vector<int32_t> banned =
                    banned_bad_word_ids(p, b.requests[size_t(r)].output);
                EXPECT_EQ(std::find(banned.begin(), banned.end(), t), banned.end())
                    << "row " << r << " token " << t << " banned";
            }
            std::printf("rows %lld vocab %lld penalties %d, masks and biases: %lld mismatches\n",
                        (long long)rows, (long long)vocab, int(penalties),
                        (long long)(tally.mismatches - before));
        }
    }
    std::printf("tokens equal on %lld of %lld rows\n", (long long)(tally.rows - tally.mismatches),
                (long long)tally.rows);
    EXPECT_GE(double(tally.rows - tally.mismatches), 0.995 * double(tally.rows));
}

// Random batches of one kind of row, with and without penalties and masks (a penalised row's
// logprob takes one more pass, over its raw logits) and with bf16 values (many exact ties),
// against the CPU sampler, with SampleMatchesCpu's tolerance.
void expect_rows_match_cpu(Rows kind, uint32_t seed,
                           std::initializer_list<std::pair<int64_t, int64_t>> shapes) {
    std::mt19937 rng(seed);
    Tally tally;
    for (auto [rows, vocab] : shapes) {
        for (bool penalties : {false, true}) {
            for (bool bf16_raw : {false, true}) {
                const Batch b = random_batch(rows, vocab, penalties, bf16_raw, rng, kind);
                const int64_t before = tally.mismatches;
                compare(b, tally);
                std::printf("rows %lld vocab %lld penalties %d bf16 %d: %lld mismatches\n",
                            (long long)rows, (long long)vocab, int(penalties), int(bf16_raw),
                            (long long)(tally.mismatches - before));
            }
        }
    }
    std::printf("tokens equal on %lld of %lld rows\n", (long long)(tally.rows - tally.mismatches),
                (long long)tally.rows);
    EXPECT_GE(double(tally.rows - tally.mismatches), 0.995 * double(tally.rows));
}

// Rows of temperature alone take the kernel's one-pass path (tiles scaled by their own maximum).
// 262,144 ids is the largest vocabulary that path takes, one more goes the general way.
TEST(CudaSampling, PlainRowsMatchCpu) {
    REQUIRE_GPU();
    expect_rows_match_cpu(Rows::kPlain, 21,
                          {{256, 151936}, {64, 1000}, {5, 33}, {3, 262144}, {2, 262145}});
}

// Rows with a top_k of at most 256 (Qwen3's generation_config.json asks for 20 with top_p 0.95,
// Qwen2.5's also for a repetition penalty) take the kernel's two-pass path: candidates at or above
// a threshold, sorted and cut on the GPU, the CPU's sums in its own order. A vocabulary of 33 has
// too few tiles for most of them (the general path).
TEST(CudaSampling, SmallTopKRowsMatchCpu) {
    REQUIRE_GPU();
    expect_rows_match_cpu(Rows::kSmallTopK, 22, {{256, 151936}, {64, 1000}, {5, 33}, {3, 262144}});
}

// Informative: one step for 256 rows of Qwen's vocabulary, each kernel's f32 logits read once
// against the device's copy bandwidth (argmax reads them once; sample more than once).
TEST(CudaSampling, StepTime) {
    REQUIRE_GPU();
    const int64_t rows = 256, vocab = 151936;
    std::mt19937 rng(13);
    std::vector<float> x(static_cast<size_t>(rows * vocab));
    std::normal_distribution<float> normal(0.f, 3.f);
    for (float& v : x) v = normal(rng);
    Tensor logits = cuda::to_device(host_tensor(x.data(), {rows, vocab}, DType::kF32));
    Tensor tokens = cuda::device_tensor({rows}, DType::kI32);
    Tensor logprobs = cuda::device_tensor({rows}, DType::kF32);
    std::vector<cuda::RowSampling> params(static_cast<size_t>(rows));
    const double bytes = double(rows * vocab * 4);
    const std::string shape = "256 x 151936 f32";
    gpu_testing::print_bench_header();
    auto run = [&](const char* name, float temperature, float top_p, int32_t top_k = 0) {
        for (size_t r = 0; r < params.size(); ++r)
            params[r] = {temperature, top_k, top_p, 0.f, r, 3, 0, 0};
        Tensor d_params = cuda::to_device(
            host_tensor(params.data(), {rows, int64_t(sizeof(cuda::RowSampling))}, DType::kU8));
        const gpu_testing::LaunchTiming t = gpu_testing::time_launch([&](cudaStream_t s) {
            cuda::sample(logits, d_params, nullptr, 0, tokens, logprobs, nullptr, nullptr, nullptr,
                         0, s);
        });
        gpu_testing::print_bench_row(name, shape, t, bytes);
    };
    gpu_testing::print_bench_row(
        "argmax", shape,
        gpu_testing::time_launch([&](cudaStream_t s) { cuda::argmax(logits, tokens, s); }), bytes);
    {  // one row (batch 1): one block, and spread over blocks
        cuda::DeviceBuffer ws(cuda::argmax_workspace_bytes(1));
        MI_CUDA_CHECK(cudaMemset(ws.data(), 0, ws.bytes()));
        Tensor one(logits.raw(), DType::kF32, {1, vocab}, Device::kCUDA);
        Tensor one_token(tokens.raw(), DType::kI32, {1}, Device::kCUDA);
        const double one_bytes = double(vocab * 4);
        gpu_testing::print_bench_row(
            "argmax, one block", "1 x 151936 f32",
            gpu_testing::time_launch([&](cudaStream_t s) { cuda::argmax(one, one_token, s); }),
            one_bytes);
        gpu_testing::print_bench_row("argmax, spread", "1 x 151936 f32",
                                     gpu_testing::time_launch([&](cudaStream_t s) {
                                         cuda::argmax(one, one_token, s, ws.data(), ws.bytes());
                                     }),
                                     one_bytes);
    }
    run("sample greedy", 0.f, 1.f);
    run("sample T=0.6 top_p=0.95", 0.6f, 0.95f);
    run("sample T=0.6", 0.6f, 1.f);
    run("sample T=0.6 top_k=50", 0.6f, 1.f, 50);
    run("sample T=0.6 top_k=20 top_p=0.95", 0.6f, 0.95f, 20);  // Qwen3's generation_config.json
    MI_CUDA_CHECK(cudaDeviceSynchronize());
}
