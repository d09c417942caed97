// What quantizing a model to Qwen's block-scaled FP8 costs, at a real model's shapes without its
// checkpoint: dummy bf16 weights (`--load-format dummy`'s values rounded to bf16) against the same
// weights quantized as Qwen's FP8 checkpoints are (per 128 x 128 block of each projection, dense
// and expert: s = amax / 448, e4m3 of w / s), on the CPU model in both FP8 modes (W8A8, the GPU's
// arithmetic; weight-only). Prints, for a random prompt and the bf16 model's greedy continuation
// fed back (teacher-forced), the largest |logit| difference against the bf16 model's largest
// |logit| and how many greedy tokens each FP8 model keeps (and of those where bf16's top two
// are 0.5 apart). Built on demand (`ninja fp8_error`), not a test. Usage:
//   fp8_error MODEL_DIR [LAYERS [PROMPT_LEN [NEW_TOKENS]]]
// LAYERS (default: the config's) cuts the model to its first layers, for a 30B-A3B on a small
// host.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "config/model_config.h"
#include "core/dtype.h"
#include "kernels/cpu/fp8_linear.h"
#include "models/qwen_model.h"
#include "models/sequence_runner.h"
#include "models/weights.h"

using namespace miniinfer;

namespace {

// Every f32 value rounded to bf16, in place: the bf16 model.
void round_to_bf16(Tensor& t) {
    if (!t.defined() || t.dtype() != DType::kF32) return;
    for (int64_t i = 0; i < t.numel(); ++i)
        t.data<float>()[i] = bf16_to_f32(f32_to_bf16(t.data<float>()[i]));
}

// w [.., rows, cols] f32 as Qwen's FP8 checkpoints store it: e4m3 [.., rows, cols] and f32
// scales [.., ceil(rows / 128), ceil(cols / 128)], the leading dimension (experts) kept.
void quantize(Tensor& w, Tensor& scale) {
    if (!w.defined()) return;
    const int64_t cols = w.size(-1), rows = w.size(-2), mats = w.numel() / (rows * cols);
    const int64_t b = cpu::kFp8Block, rb = (rows + b - 1) / b, cb = (cols + b - 1) / b;
    Shape s_shape = w.shape();
    s_shape[s_shape.size() - 2] = rb;
    s_shape[s_shape.size() - 1] = cb;
    Tensor q = Tensor::zeros(w.shape(), DType::kF8E4M3), s = Tensor::zeros(s_shape, DType::kF32);
    for (int64_t m = 0; m < mats; ++m)
        cpu::quantize_fp8_blocks(w.data<float>() + m * rows * cols, rows, cols,
                                 static_cast<uint8_t*>(q.raw()) + m * rows * cols,
                                 s.data<float>() + m * rb * cb);
    w = q;
    scale = s;
}

ModelWeights quantized(const ModelWeights& bf16) {
    ModelWeights w = bf16;  // tensors shared: each quantized one is replaced, not changed
    for (LayerWeights& l : w.layers) for_each_fp8_projection(l, quantize);
    return w;
}

}  // namespace

int main(int argc, char** argv) {
    if (argc < 2) {
        std::fprintf(stderr, "usage: fp8_error MODEL_DIR [LAYERS [PROMPT_LEN [NEW_TOKENS]]]\n");
        return 2;
    }
    ModelConfig config = ModelConfig::load(argv[1]);
    if (argc > 2) {
        config.num_layers = std::min<int64_t>(config.num_layers, std::atoll(argv[2]));
        config.layer_types.resize(size_t(config.num_layers));
    }
    const int64_t prompt_len = argc > 3 ? std::atoll(argv[3]) : 32;
    const int64_t new_tokens = argc > 4 ? std::atoll(argv[4]) : 32;
    ModelWeights bf16_w = dummy_weights(config, 0);
    round_to_bf16(bf16_w.embed);
    round_to_bf16(bf16_w.lm_head);
    round_to_bf16(bf16_w.norm);
    for (LayerWeights& l : bf16_w.layers)
        for (Tensor* t :
             {&l.input_norm, &l.post_attention_norm, &l.qkv, &l.qkv_bias, &l.q_norm, &l.k_norm,
              &l.o_proj, &l.gate_up, &l.down, &l.router, &l.experts_gate_up, &l.experts_down})
            round_to_bf16(*t);
    ModelWeights fp8_w = quantized(bf16_w);
    ModelWeights weight_only_w = fp8_w;
    dequantize_fp8_weights(weight_only_w);
    const QwenModel bf16(config, std::move(bf16_w));
    const QwenModel w8a8(config, std::move(fp8_w));
    const QwenModel weight_only(config, std::move(weight_only_w));

    std::mt19937 rng(7);
    std::vector<int32_t> seq(static_cast<size_t>(prompt_len));
    for (int32_t& t : seq)
        t = int32_t(rng() % uint32_t(std::min<int64_t>(config.vocab_size, 10000)));
    const int64_t n = prompt_len + new_tokens;
    {
        SequenceRunner r(bf16, n);
        const std::vector<int32_t> cont = r.greedy(seq, new_tokens);
        seq.insert(seq.end(), cont.begin(), cont.end());
    }
    const std::span<const int32_t> input(seq.data(), size_t(n - 1));
    SequenceRunner rb(bf16, n);
    const Tensor lb = rb.append(input);
    const int64_t vocab = config.vocab_size;
    std::printf("%s: %lld layers, %lld prompt + %lld greedy tokens (bf16's), teacher-forced\n",
                argv[1], (long long)config.num_layers, (long long)prompt_len,
                (long long)new_tokens);
    for (const auto& [name, model] : {std::pair<const char*, const QwenModel*>{"FP8 W8A8", &w8a8},
                                      {"FP8 weight-only", &weight_only}}) {
        SequenceRunner r(*model, n);
        const Tensor l = r.append(input);
        float max_abs = 0, max_delta = 0;
        int64_t keep = 0, clear = 0, clear_keep = 0;
        for (int64_t t = 0; t < n - 1; ++t) {
            const float* x = lb.data<float>() + t * vocab;
            const float* y = l.data<float>() + t * vocab;
            for (int64_t v = 0; v < vocab; ++v) {
                max_abs = std::max(max_abs, std::fabs(x[v]));
                max_delta = std::max(max_delta, std::fabs(x[v] - y[v]));
            }
            if (t < prompt_len - 1) continue;
            std::vector<float> sorted(x, x + vocab);
            std::partial_sort(sorted.begin(), sorted.begin() + 2, sorted.end(),
                              std::greater<float>());
            const bool same = std::max_element(y, y + vocab) - y == seq[size_t(t) + 1];
            keep += same;
            if (sorted[0] - sorted[1] > 0.5f) ++clear, clear_keep += same;
        }
        std::printf(
            "  %-16s max |dlogit| %.3f (%.2f%% of the largest |logit| %.2f); greedy tokens "
            "kept %lld of %lld, %lld of %lld clear ones\n",
            name, max_delta, 100.0 * max_delta / max_abs, max_abs, (long long)keep,
            (long long)new_tokens, (long long)clear_keep, (long long)clear);
    }
    return 0;
}
