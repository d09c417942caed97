// The CUDA penalty kernel against the CPU reference (layers/sampler.h, apply_penalties) on
// random rows: repetition, frequency and presence penalties over random prompt / output lists
// (duplicates, empty lists, lists longer than the block), min_tokens masks of EOS and stop
// ids, allowed_token_ids (duplicates, rows with nothing else), bad words (single tokens and
// sequences whose prefix ends the output) and logit_bias (repeated ids, biases on masked ids).
// Tolerance: none. The kernel does the CPU's float operations (the frequency/presence term in
// double, rounded once; one id's biases added in list order), so every logit must be bitwise
// equal; rows not listed must be untouched.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cstdlib>
#include <cstring>
#include <random>
#include <span>
#include <vector>

#include "core/cuda/cuda_check.h"
#include "core/cuda/device_buffer.h"
#include "gpu_testing.h"
#include "kernels/cuda/sampling/penalties.h"
#include "layers/sampler.h"

using namespace miniinfer;

namespace {

struct Row {
    SamplingParams params;
    std::vector<int32_t> prompt, output;
    std::vector<int64_t> eos;
    bool listed = false;  // handed to the kernel
};

Tensor host_tensor(const void* data, Shape shape, DType dtype) {
    Tensor t = Tensor::zeros(std::move(shape), dtype);
    if (t.nbytes() > 0) std::memcpy(t.raw(), data, t.nbytes());
    return t;
}

template <typename T>
T pick(std::mt19937& rng, std::initializer_list<T> options) {
    std::uniform_int_distribution<size_t> d(0, options.size() - 1);
    return *(options.begin() + d(rng));
}

// Random allowed ids, bad words and biases on some rows; ids from a small pool (duplicates,
// and biases on ids the masks also hit) and from the whole vocabulary.
void add_masks_and_bias(Row& r, int64_t vocab, std::mt19937& rng) {
    std::uniform_real_distribution<float> unit(0.f, 1.f);
    std::uniform_int_distribution<int32_t> any_id(0, int32_t(vocab - 1));
    std::uniform_int_distribution<int32_t> pool_id(0, int32_t(std::min<int64_t>(vocab, 24) - 1));
    auto random_id = [&] { return unit(rng) < 0.5f ? pool_id(rng) : any_id(rng); };
    SamplingParams& p = r.params;
    if (unit(rng) < 0.3f) {
        std::vector<int64_t> allowed;
        for (int k = pick(rng, {1, 2, 7, 40}); k > 0; --k) allowed.push_back(random_id());
        if (unit(rng) < 0.3f) allowed.push_back(allowed.front());  // a duplicate
        p.allowed_token_ids = std::move(allowed);
    }
    if (unit(rng) < 0.4f) {
        for (int k = pick(rng, {1, 2, 4}); k > 0; --k) {
            std::vector<int32_t> word;
            // A suffix of the output (so the sequence bans its last token), or random ids.
            const size_t prefix_len =
                std::min<size_t>(pick<size_t>(rng, {0, 1, 2}), r.output.size());
            if (unit(rng) < 0.6f)
                word.assign(r.output.end() - ptrdiff_t(prefix_len), r.output.end());
            else
                for (size_t m = 0; m < prefix_len; ++m) word.push_back(random_id());
            word.push_back(random_id());
            p.bad_words_token_ids.push_back(std::move(word));
        }
    }
    if (unit(rng) < 0.4f) {
        std::uniform_real_distribution<float> any_bias(-100.f, 100.f);
        for (int k = pick(rng, {1, 3, 12}); k > 0; --k) {
            const float bias =
                unit(rng) < 0.5f ? any_bias(rng) : pick(rng, {-100.f, 100.f, 0.1f, -3.5f, 1e-7f});
            const int32_t id = unit(rng) < 0.3f && !p.bad_words_token_ids.empty()
                                   ? p.bad_words_token_ids.front().back()
                                   : random_id();
            p.logit_bias.emplace_back(id, bias);
            if (unit(rng) < 0.2f) p.logit_bias.emplace_back(id, any_bias(rng));  // repeated id
        }
    }
}

// Random rows; ids drawn from a small pool so duplicates are common, and from the whole
// vocabulary. max_list bounds the prompt and output lengths.
std::vector<Row> random_rows(int64_t rows, int64_t vocab, int max_list, std::mt19937& rng) {
    std::uniform_real_distribution<float> unit(0.f, 1.f);
    std::uniform_int_distribution<int32_t> any_id(0, int32_t(vocab - 1));
    std::uniform_int_distribution<int32_t> pool_id(0, int32_t(std::min<int64_t>(vocab, 24) - 1));
    std::uniform_int_distribution<int> length(0, max_list);
    auto random_id = [&] { return unit(rng) < 0.5f ? pool_id(rng) : any_id(rng); };
    std::vector<Row> out(static_cast<size_t>(rows));
    for (Row& r : out) {
        r.listed = unit(rng) < 0.7f;
        for (int k = length(rng); k > 0; --k) r.prompt.push_back(random_id());
        for (int k = length(rng); k > 0; --k) r.output.push_back(random_id());
        SamplingParams& p = r.params;
        p.repetition_penalty = pick(rng, {1.0, 1.0, 1.1, 1.3, 0.7, 2.0});
        p.frequency_penalty = pick(rng, {0.0, 0.0, 0.1, 0.5, -0.3, 1.7});  // 0.1: not a float
        p.presence_penalty = pick(rng, {0.0, 0.0, 0.2, 1.0, -0.5});
        if (unit(rng) < 0.4f) {
            p.min_tokens = int64_t(r.output.size()) + pick(rng, {0, 1, 5});  // 0: not masking
            r.eos.push_back(vocab - 1);
            if (unit(rng) < 0.5f) r.eos.push_back(any_id(rng));
            for (int k = pick(rng, {0, 1, 3}); k > 0; --k) p.stop_token_ids.push_back(random_id());
        }
        add_masks_and_bias(r, vocab, rng);
    }
    return out;
}

// The CSR upload the runner builds (engine/cuda_sampler.cpp): prompt ids only with a
// repetition penalty, output ids with any penalty, masked ids while output < min_tokens, this
// step's bad-word bans, allowed ids, bias pairs sorted stably by id.
void run_gpu(std::vector<float>& logits, int64_t vocab, const std::vector<Row>& rows) {
    std::vector<cuda::RowPenalties> params;
    std::vector<int32_t> starts = {0}, ids;
    for (size_t i = 0; i < rows.size(); ++i) {
        const Row& r = rows[i];
        if (!r.listed) continue;
        const SamplingParams& p = r.params;
        params.push_back(
            {int32_t(i), float(p.repetition_penalty), p.frequency_penalty, p.presence_penalty});
        const bool repetition = p.repetition_penalty != 1.0;
        if (repetition) ids.insert(ids.end(), r.prompt.begin(), r.prompt.end());
        starts.push_back(int32_t(ids.size()));
        if (repetition || p.frequency_penalty != 0.0 || p.presence_penalty != 0.0)
            ids.insert(ids.end(), r.output.begin(), r.output.end());
        starts.push_back(int32_t(ids.size()));
        if (int64_t(r.output.size()) < p.min_tokens) {
            for (int64_t id : r.eos) ids.push_back(int32_t(id));
            for (int64_t id : p.stop_token_ids) ids.push_back(int32_t(id));
        }
        starts.push_back(int32_t(ids.size()));
        for (int32_t id : banned_bad_word_ids(p, r.output)) ids.push_back(id);
        starts.push_back(int32_t(ids.size()));
        if (p.allowed_token_ids)
            for (int64_t id : *p.allowed_token_ids) ids.push_back(int32_t(id));
        starts.push_back(int32_t(ids.size()));
        std::vector<std::pair<int32_t, float>> bias = p.logit_bias;
        std::stable_sort(bias.begin(), bias.end(),
                         [](const auto& a, const auto& b) { return a.first < b.first; });
        for (auto [id, b] : bias) {
            ids.push_back(id);
            ids.push_back(std::bit_cast<int32_t>(b));
        }
        starts.push_back(int32_t(ids.size()));
    }
    const int64_t n = int64_t(params.size()), num_rows = int64_t(rows.size());
    Tensor d_logits = cuda::to_device(host_tensor(logits.data(), {num_rows, vocab}, DType::kF32));
    Tensor d_params = cuda::device_tensor({int64_t(n * sizeof(cuda::RowPenalties))}, DType::kU8);
    if (n > 0)
        MI_CUDA_CHECK(
            cudaMemcpy(d_params.raw(), params.data(), d_params.nbytes(), cudaMemcpyHostToDevice));
    Tensor d_starts =
        cuda::to_device(host_tensor(starts.data(), {int64_t(starts.size())}, DType::kI32));
    Tensor d_ids = cuda::device_tensor({int64_t(ids.size())}, DType::kI32);
    if (!ids.empty())
        MI_CUDA_CHECK(cudaMemcpy(d_ids.raw(), ids.data(), ids.size() * 4, cudaMemcpyHostToDevice));
    const size_t ws_bytes = cuda::penalties_workspace_bytes(vocab);
    cuda::DeviceBuffer workspace(ws_bytes);
    // Garbage in the workspace: the kernel must not rely on it being zero.
    MI_CUDA_CHECK(cudaMemset(workspace.data(), 0x5a, ws_bytes));
    cuda::apply_penalties(d_logits, d_params, d_starts, d_ids, workspace.data(), ws_bytes, nullptr);
    MI_CUDA_CHECK(cudaDeviceSynchronize());
    Tensor out = cuda::to_host(d_logits);
    std::memcpy(logits.data(), out.raw(), out.nbytes());
}

// Returns the number of logits the penalties changed (so a test can check it did something).
int64_t check_rows(const std::vector<Row>& rows, int64_t vocab, std::mt19937& rng) {
    const int64_t num_rows = int64_t(rows.size());
    std::vector<float> raw(static_cast<size_t>(num_rows * vocab));
    std::normal_distribution<float> normal(0.f, 4.f);
    for (float& x : raw) x = normal(rng);
    for (size_t i = 0; i < raw.size(); i += 7) raw[i] = 0.f;  // the repetition penalty's x > 0 edge
    std::vector<float> gpu = raw;
    run_gpu(gpu, vocab, rows);
    int64_t changed = 0;
    for (int64_t r = 0; r < num_rows; ++r) {
        const Row& row = rows[size_t(r)];
        std::vector<float> want(raw.begin() + r * vocab, raw.begin() + (r + 1) * vocab);
        if (row.listed) {
            SamplerInput in;
            in.logits = want;
            in.params = &row.params;
            in.prompt_ids = row.prompt;
            in.output_ids = row.output;
            in.eos_ids = row.eos;
            apply_penalties(want, in);
        }
        const std::span<const float> got(gpu.data() + r * vocab, size_t(vocab));
        for (int64_t i = 0; i < vocab; ++i)
            changed += std::memcmp(&got[size_t(i)], &raw[size_t(r * vocab + i)], 4) != 0;
        // Bitwise: also tells -0.f from 0.f and -inf from a large negative value.
        const ::testing::AssertionResult same =
            gpu_testing::bitwise_equal(got, std::span<const float>(want));
        if (!same) {
            ADD_FAILURE() << "rows " << num_rows << " vocab " << vocab << " row " << r
                          << " (listed " << row.listed << "): " << same.message();
            return changed;  // one report is enough
        }
    }
    return changed;
}

int64_t check_against_cpu(int64_t num_rows, int64_t vocab, int max_list, std::mt19937& rng) {
    return check_rows(random_rows(num_rows, vocab, max_list, rng), vocab, rng);
}

}  // namespace

TEST(CudaPenalties, MatchCpuBitwise) {
    REQUIRE_GPU();
    std::mt19937 rng(21);
    struct Case {
        int64_t rows, vocab;
        int max_list;
    };
    // 1-token and odd vocabularies, a bitmap word boundary (33), more rows than the kernel's
    // grid (100 > 32 blocks), lists longer than a block (3000 > 256 threads), Qwen's vocabulary.
    for (Case c : {Case{1, 1, 4}, Case{5, 33, 40}, Case{64, 1000, 60}, Case{100, 517, 20},
                   Case{8, 4096, 3000}, Case{32, 151936, 600}}) {
        const int64_t changed = check_against_cpu(c.rows, c.vocab, c.max_list, rng);
        std::printf(
            "rows %lld vocab %lld lists <= %d: %lld logits changed, all equal to the CPU's\n",
            (long long)c.rows, (long long)c.vocab, c.max_list, (long long)changed);
        if (c.vocab > 1) {
            EXPECT_GT(changed, 0) << "the random rows penalised nothing";
        }
    }
}

// Hand-made rows of the new fields: only allowed ids (with duplicates), biases on ids the
// allowed mask and a bad word mask, a bad word whose prefix ends the output next to one whose
// prefix does not, everything at once, and an unlisted row between them.
TEST(CudaPenalties, MasksAndBiasMatchCpuBitwise) {
    REQUIRE_GPU();
    const int64_t vocab = 300;
    std::vector<Row> rows(6);
    for (Row& r : rows) r.listed = true;
    rows[0].params.allowed_token_ids = std::vector<int64_t>{5, 17, 5, 299, 0, 17};
    rows[1].params.allowed_token_ids = std::vector<int64_t>{3, 4};
    rows[1].params.logit_bias = {{3, 2.5f}, {100, 100.f}, {4, -1.f}};  // 100: masked
    rows[2].output = {7, 8, 9};
    rows[2].params.bad_words_token_ids = {{8, 9, 10}, {7, 9, 11}, {12}, {9, 13}};  // bans 10 12 13
    rows[2].params.logit_bias = {{10, 100.f}, {11, 50.f}, {12, -3.f}, {11, 0.25f}};
    rows[3].listed = false;
    rows[3].params.logit_bias = {{1, 100.f}};  // not listed: stays raw
    Row& all = rows[4];
    all.prompt = {1, 2, 2, 3};
    all.output = {2, 3, 40, 41};
    all.eos = {299};
    SamplingParams& p = all.params;
    p.allowed_token_ids = std::vector<int64_t>{1, 2, 3, 40, 41, 42, 43, 299, 2};
    p.bad_words_token_ids = {{40, 41, 42}, {41, 1}, {2}};  // bans 42, 1, 2
    p.logit_bias = {{43, 7.5f}, {3, -0.75f}, {41, 0.1f}, {3, 0.3f}, {250, 100.f}};
    p.repetition_penalty = 1.3;
    p.frequency_penalty = 0.4;
    p.presence_penalty = -0.2;
    p.min_tokens = 10;
    p.stop_token_ids = {43};
    rows[5].params.logit_bias = {{0, -100.f}, {299, 1e-7f}};  // biases alone
    std::mt19937 rng(23);
    const int64_t changed = check_rows(rows, vocab, rng);
    EXPECT_GT(changed, 0);
}

TEST(CudaPenalties, NoRowsIsANoOp) {
    REQUIRE_GPU();
    std::vector<float> x = {1.f, -2.f, 3.f};
    std::vector<float> before = x;
    run_gpu(x, 3, {Row{}});  // one unlisted row: n = 0
    EXPECT_EQ(x, before);
}

// Informative: 256 rows of Qwen's vocabulary, each with 1024 prompt and 512 output ids and all
// three penalties (the worst case of the balanced workload's lengths).
TEST(CudaPenalties, StepTime) {
    REQUIRE_GPU();
    const int64_t rows = 256, vocab = 151936, prompt_len = 1024, output_len = 512;
    std::mt19937 rng(22);
    std::uniform_int_distribution<int32_t> any_id(0, int32_t(vocab - 1));
    std::vector<cuda::RowPenalties> params;
    std::vector<int32_t> starts = {0}, ids;
    for (int64_t r = 0; r < rows; ++r) {
        params.push_back({int32_t(r), 1.1f, 0.5, 0.25});
        for (int64_t k = 0; k < prompt_len; ++k) ids.push_back(any_id(rng));
        starts.push_back(int32_t(ids.size()));
        for (int64_t k = 0; k < output_len; ++k) ids.push_back(any_id(rng) % 5000);
        for (int s = cuda::kOutputIds; s < cuda::kNumPenaltySegments; ++s)
            starts.push_back(int32_t(ids.size()));  // no masks, bans, allowed ids or biases
    }
    Tensor logits = cuda::device_tensor({rows, vocab}, DType::kF32);
    Tensor d_params =
        cuda::device_tensor({int64_t(params.size() * sizeof(cuda::RowPenalties))}, DType::kU8);
    MI_CUDA_CHECK(
        cudaMemcpy(d_params.raw(), params.data(), d_params.nbytes(), cudaMemcpyHostToDevice));
    Tensor d_starts =
        cuda::to_device(host_tensor(starts.data(), {int64_t(starts.size())}, DType::kI32));
    Tensor d_ids = cuda::to_device(host_tensor(ids.data(), {int64_t(ids.size())}, DType::kI32));
    cuda::DeviceBuffer workspace(cuda::penalties_workspace_bytes(vocab));
    const gpu_testing::LaunchTiming t = gpu_testing::time_launch([&](cudaStream_t s) {
        cuda::apply_penalties(logits, d_params, d_starts, d_ids, workspace.data(),
                              workspace.bytes(), s);
    });
    // Bytes: the ids read, and for each id a logit read and written (a lower bound: the
    // kernel's bitmap and counts come on top).
    const double bytes = double(ids.size()) * (4 + 8);
    gpu_testing::print_bench_header();
    gpu_testing::print_bench_row("apply_penalties", "256 x (1024 + 512 ids), vocab 151936", t,
                                 bytes);
    MI_CUDA_CHECK(cudaDeviceSynchronize());
}
