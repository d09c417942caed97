#include "engine/cuda_model_runner.h"

#include <algorithm>

#include "core/cuda/cuda_check.h"
#include "core/cuda/device_buffer.h"
#include "core/logging.h"
#include "core/thread_pool.h"
#include "engine/cuda_graphs.h"
#include "engine/cuda_sampler.h"
#include "engine/pinned_buffer.h"
#include "kernels/cuda/attention.h"
#include "kernels/cuda/attention_flashinfer.h"
#include "kernels/cuda/cast.h"
#include "kernels/cuda/embedding.h"
#include "kernels/cuda/gather_rows.h"
#include "kernels/cuda/gemm.h"
#include "kernels/cuda/qk_norm_rope.h"
#include "kernels/cuda/rms_norm.h"
#include "kernels/cuda/silu_mul.h"
#include "layers/layers.h"

namespace miniinfer {
namespace {

// Set aside beyond the graphs' measured memory: cudaMemGetInfo moves in 2 MiB steps, and the
// second capture's allocations need not land exactly as the first's.
constexpr size_t kGraphMarginBytes = size_t(16) << 20;
constexpr int64_t kTrialPages = 1;  // the KV pool the graphs are first measured against
constexpr double kMiB = 1048576.0;

// f32 host weights -> bf16 device tensor (lossless: checkpoints are bf16).
Tensor upload_bf16(const Tensor& host) {
    if (!host.defined()) return Tensor();
    Tensor staged = Tensor::zeros(host.shape(), DType::kBF16);
    const float* src = host.data<float>();
    auto* dst = staged.data<uint16_t>();
    ThreadPool::global().parallel_for(
        host.numel(),
        [&](int64_t b, int64_t e) {
            for (int64_t i = b; i < e; ++i) dst[i] = f32_to_bf16(src[i]);
        },
        1 << 16);
    return cuda::to_device(staged);
}

Tensor rows(const Tensor& t, int64_t n) {
    return t.slice_rows(0, n);
}

}  // namespace

struct CudaModelRunner::Impl {
    struct Layer {
        Tensor input_norm, post_norm, qkv, qkv_bias, q_norm, k_norm, o_proj, o_bias, gate_up, down;
        Tensor k_cache, v_cache;  // [num_pages + 1, page_size, num_kv_heads, head_dim] bf16
    };

    ModelConfig cfg;
    CudaRunnerOptions opt;
    int64_t max_pages_per_seq = 0, num_pages = 0;
    cuda::Stream stream;
    cuda::Gemm gemm;
    Tensor embed, final_norm, lm_head, inv_freq;
    std::vector<Layer> layers;

    // Step inputs: host staging (pinned) and its device copy, i32, at the offsets of `in`.
    StepInputLayout in;
    std::unique_ptr<PinnedBuffer> host_inputs;
    Tensor dev_inputs;
    // Activations, sized for the worst step.
    Tensor hidden, residual, normed, qkv, q, attn, proj, gate_up, act;
    Tensor last_hidden, last_residual, last_normed;
    Tensor logits_bf16, logits_f32;  // [max_num_seqs, vocab]: lm_head's output and its f32 copy
    cuda::DeviceBuffer attention_workspace;
    std::unique_ptr<CudaSampler> sampler;
    std::unique_ptr<cuda::FlashInferAttention> flashinfer;  // the `flashinfer` backend, else fa2

    std::unique_ptr<DecodeGraphs> graphs;
    int64_t dummy_page = 0;  // the KV page padded graph rows write to (one past the scheduler's)
    int64_t graph_max_seq_len = 0;
    int64_t last_num_logits = 0;

    // What one forward pass reads: how many tokens / sequences / sampled rows, and where the
    // block table is (the eager step packs it with the batch's own stride).
    struct StepShape {
        int64_t num_tokens, num_seqs, num_logits, max_query_len, max_seq_len, table_offset,
            table_stride;
    };

    Tensor inputs_view(int64_t offset, Shape shape) const {
        return Tensor(dev_inputs.data<int32_t>() + offset, DType::kI32, std::move(shape),
                      Device::kCUDA);
    }
    int32_t* host_ints() const { return static_cast<int32_t*>(host_inputs->data); }
    void allocate_kv(int64_t pages);  // pages + 1 (the dummy page)
    size_t capture_graphs(bool warm_up);
    void forward(const Batch& b);
    void run_layers(const StepShape& shape);  // kernels only: no host work, capturable
    void plan_attention(int64_t num_seqs);    // flashinfer: plan from the host inputs' first rows
};

CudaModelRunner::CudaModelRunner(ModelConfig config, const ModelWeights& w,
                                 const CudaRunnerOptions& options)
    : impl_(std::make_unique<Impl>()) {
    Impl& m = *impl_;
    m.cfg = std::move(config);
    m.opt = options;
    const ModelConfig& c = m.cfg;
    if (c.num_experts > 0)
        fail("{}: Qwen3-MoE does not run on CUDA yet; use --device cpu", c.model_type);
    if (cuda::device_count() == 0) fail("--device cuda: no CUDA device is visible");
    size_t free0 = 0, total = 0;
    MI_CUDA_CHECK(cudaMemGetInfo(&free0, &total));

    m.embed = upload_bf16(w.embed);
    m.lm_head = c.tie_word_embeddings ? m.embed : upload_bf16(w.lm_head);
    m.final_norm = upload_bf16(w.norm);
    for (const LayerWeights& lw : w.layers)
        m.layers.push_back({upload_bf16(lw.input_norm), upload_bf16(lw.post_attention_norm),
                            upload_bf16(lw.qkv), upload_bf16(lw.qkv_bias), upload_bf16(lw.q_norm),
                            upload_bf16(lw.k_norm), upload_bf16(lw.o_proj), upload_bf16(lw.o_bias),
                            upload_bf16(lw.gate_up), upload_bf16(lw.down), Tensor(), Tensor()});
    Rotary rotary(c.head_dim, c.rope_theta,
                  c.rope_scaling.kind == RopeScaling::Kind::kLinear ? c.rope_scaling.factor : 1.0);
    Tensor freq = Tensor::zeros({c.head_dim / 2}, DType::kF32);
    std::copy(rotary.inv_freq().begin(), rotary.inv_freq().end(), freq.data<float>());
    m.inv_freq = cuda::to_device(freq);
    size_t free1 = 0;
    MI_CUDA_CHECK(cudaMemGetInfo(&free1, &total));
    const size_t weight_bytes = free0 - free1;

    // Worst-case activations: every buffer for max_num_batched_tokens rows.
    const int64_t T = options.max_num_batched_tokens, S = options.max_num_seqs, H = c.hidden_size;
    const int64_t qkv_width = c.q_size() + 2 * c.kv_size(), I = c.intermediate_size;
    m.max_pages_per_seq = (options.max_model_len + options.page_size - 1) / options.page_size;
    StepInputLayout& L = m.in;
    L.positions = T;
    L.slots = 2 * T;
    L.query_start = 3 * T;
    L.seq_lens = L.query_start + S + 1;
    L.logits_indices = L.seq_lens + S;
    L.table = L.logits_indices + S;
    L.graph_table = L.table + S * m.max_pages_per_seq;
    L.max_pages_per_seq = m.max_pages_per_seq;
    const int64_t input_ints = L.graph_table + S * m.max_pages_per_seq;
    m.graph_max_seq_len = std::min<int64_t>(options.max_model_len, 4096);
    m.host_inputs = std::make_unique<PinnedBuffer>(size_t(input_ints) * 4);
    m.dev_inputs = cuda::device_tensor({input_ints}, DType::kI32);
    for (Tensor* t : {&m.hidden, &m.residual, &m.normed, &m.proj})
        *t = cuda::device_tensor({T, H}, DType::kBF16);
    m.qkv = cuda::device_tensor({T, qkv_width}, DType::kBF16);
    m.q = cuda::device_tensor({T, c.num_heads, c.head_dim}, DType::kBF16);
    m.attn = cuda::device_tensor({T, c.q_size()}, DType::kBF16);
    m.gate_up = cuda::device_tensor({T, 2 * I}, DType::kBF16);
    m.act = cuda::device_tensor({T, I}, DType::kBF16);
    for (Tensor* t : {&m.last_hidden, &m.last_residual, &m.last_normed})
        *t = cuda::device_tensor({S, H}, DType::kBF16);
    m.logits_bf16 = cuda::device_tensor({S, c.vocab_size}, DType::kBF16);
    m.logits_f32 = cuda::device_tensor({S, c.vocab_size}, DType::kF32);
    m.attention_workspace =
        cuda::DeviceBuffer(cuda::attention_workspace_bytes(T, c.num_heads, c.head_dim));
    m.sampler = std::make_unique<CudaSampler>(S, c.vocab_size, options.max_model_len);
    if (options.attention_backend == "flashinfer")
        m.flashinfer = std::make_unique<cuda::FlashInferAttention>(
            T, S, c.num_heads, c.num_kv_heads, c.head_dim, options.page_size);
    else if (options.attention_backend != "auto" && options.attention_backend != "fa2")
        fail("attention_backend '{}' is not supported (auto, fa2, flashinfer)",
             options.attention_backend);
    if (!options.enforce_eager)
        m.graphs = std::make_unique<DecodeGraphs>(L, S, options.page_size, m.host_ints(),
                                                  m.dev_inputs.data<int32_t>());

    // The graphs' memory, measured against a minimal KV pool before the real one is sized. What
    // the device keeps of it after the trial graphs are destroyed is already outside free
    // memory (and the real graphs reuse it); only the rest must be set aside again.
    size_t graph_bytes = 0, graph_reserve = 0, graph_kept = 0;
    const bool measure_graphs = m.graphs && options.num_pages <= 0;
    if (measure_graphs) {
        m.allocate_kv(kTrialPages);
        graph_bytes = m.capture_graphs(/*warm_up=*/true);
        graph_kept = graph_bytes - std::min(graph_bytes, m.graphs->clear());
        m.allocate_kv(0);  // frees the trial pool
        graph_reserve = graph_bytes - graph_kept + kGraphMarginBytes;
    }
    size_t free2 = 0;
    MI_CUDA_CHECK(cudaMemGetInfo(&free2, &total));
    // With what the warm-up steps keep (GEMM and attention set-up, lazily loaded kernels).
    const size_t activation_bytes = free1 - free2 - graph_kept;

    // The KV cache takes what gpu_memory_utilization leaves after the graphs.
    const size_t page_bytes =
        size_t(2 * c.num_layers * options.page_size * c.num_kv_heads * c.head_dim * 2);
    const double usable = double(total) * options.gpu_memory_utilization;
    const double budget =
        usable - double(total - free2) - double(graph_reserve) - double(page_bytes);  // dummy page
    m.num_pages = options.num_pages > 0 ? options.num_pages
                                        : int64_t(std::max(0.0, budget) / double(page_bytes));
    if (m.num_pages < 1)
        fail(
            "the model does not fit: {:.0f} MiB of weights, {:.0f} MiB of activations and {:.0f} "
            "MiB for CUDA "
            "graphs, {:.0f} MiB usable of {:.0f} MiB (gpu_memory_utilization {}); nothing is left "
            "for the KV "
            "cache ({:.2f} MiB a page)",
            weight_bytes / kMiB, activation_bytes / kMiB, (graph_bytes + kGraphMarginBytes) / kMiB,
            usable / kMiB, total / kMiB, options.gpu_memory_utilization, page_bytes / kMiB);
    m.allocate_kv(m.num_pages);
    const size_t graph_new_bytes = m.graphs ? m.capture_graphs(/*warm_up=*/!measure_graphs) : 0;
    if (!measure_graphs) graph_bytes = graph_new_bytes;
    MI_LOG_INFO(
        "CUDA memory: weights {:.0f} MiB, activations {:.0f} MiB, graphs {:.0f} MiB ({} decode "
        "sizes, "
        "measured before the KV cache was sized, + {:.0f} MiB margin), KV cache {:.0f} MiB = {} "
        "pages of {} "
        "tokens ({} tokens); {:.0f} MiB on the card",
        weight_bytes / kMiB, activation_bytes / kMiB, graph_bytes / kMiB,
        m.graphs ? m.graphs->batch_sizes().size() : 0,
        measure_graphs ? kGraphMarginBytes / kMiB : 0.0,
        double(m.num_pages + 1) * double(page_bytes) / kMiB, m.num_pages, options.page_size,
        m.num_pages * options.page_size, total / kMiB);
    if (measure_graphs && graph_new_bytes > graph_reserve)
        MI_LOG_WARN(
            "CUDA graphs took {:.0f} MiB more on the second capture, beyond the {:.0f} MiB set "
            "aside",
            graph_new_bytes / kMiB, graph_reserve / kMiB);
}

void CudaModelRunner::Impl::allocate_kv(int64_t pages) {
    dummy_page = pages;
    for (auto& layer : layers) {
        layer.k_cache = layer.v_cache = Tensor();  // free the old pool first
        if (pages == 0) continue;
        layer.k_cache = cuda::device_tensor(
            {pages + 1, opt.page_size, cfg.num_kv_heads, cfg.head_dim}, DType::kBF16);
        layer.v_cache = cuda::device_tensor(
            {pages + 1, opt.page_size, cfg.num_kv_heads, cfg.head_dim}, DType::kBF16);
    }
}

size_t CudaModelRunner::Impl::capture_graphs(bool warm_up) {
    const int64_t G = max_pages_per_seq;
    return graphs->capture(
        dummy_page, warm_up, [&](int64_t b) { plan_attention(b); },
        [&](int64_t b) {
            run_layers({b, b, b, 1, graph_max_seq_len, in.graph_table, G});
        },
        stream.get());
}

void CudaModelRunner::Impl::plan_attention(int64_t s) {
    if (flashinfer)
        flashinfer->plan(std::span<const int32_t>(host_ints() + in.query_start, size_t(s + 1)),
                         std::span<const int32_t>(host_ints() + in.seq_lens, size_t(s)),
                         stream.get());
}

CudaModelRunner::~CudaModelRunner() = default;
const ModelConfig& CudaModelRunner::config() const {
    return impl_->cfg;
}
int64_t CudaModelRunner::num_pages() const {
    return impl_->num_pages;
}

Tensor CudaModelRunner::last_logits() const {
    impl_->stream.synchronize();
    return cuda::to_host(rows(impl_->logits_f32, impl_->last_num_logits));
}

std::vector<SampledToken> CudaModelRunner::run(const Batch& batch,
                                               std::span<const SamplerInput> sampling) {
    Impl& m = *impl_;
    MI_CHECK(sampling.size() == batch.logits_indices.size(), "{} sampling inputs for {} rows",
             sampling.size(), batch.logits_indices.size());
    m.forward(batch);
    const int64_t n = int64_t(sampling.size());
    Tensor logits = rows(m.logits_f32, n);
    return m.sampler->sample(logits, rows(m.logits_bf16, n), sampling, m.stream.get());
}

void CudaModelRunner::Impl::forward(const Batch& b) {
    const int64_t n = b.num_tokens(), s = int64_t(b.seqs.size()),
                  num_logits = int64_t(b.logits_indices.size());
    MI_CHECK(n <= opt.max_num_batched_tokens && s <= opt.max_num_seqs &&
                 b.max_pages <= max_pages_per_seq,
             "batch of {} tokens / {} seqs / {} pages exceeds the runner's buffers", n, s,
             b.max_pages);
    last_num_logits = num_logits;
    if (const int64_t graph_size = graphs ? graphs->stage(b, dummy_page, stream.get()) : 0) {
        plan_attention(graph_size);
        graphs->launch(graph_size, stream.get());
        return;
    }
    // One host->device copy of everything the step reads.
    int32_t* host = host_ints();
    std::copy(b.input_ids.begin(), b.input_ids.end(), host);
    std::copy(b.positions.begin(), b.positions.end(), host + in.positions);
    std::copy(b.slot_mapping.begin(), b.slot_mapping.end(), host + in.slots);
    std::copy(b.query_start.begin(), b.query_start.end(), host + in.query_start);
    std::copy(b.seq_lens.begin(), b.seq_lens.end(), host + in.seq_lens);
    std::copy(b.logits_indices.begin(), b.logits_indices.end(), host + in.logits_indices);
    std::copy(b.block_table.begin(), b.block_table.end(), host + in.table);
    MI_CUDA_CHECK(cudaMemcpyAsync(dev_inputs.raw(), host,
                                  size_t(in.table + int64_t(b.block_table.size())) * 4,
                                  cudaMemcpyHostToDevice, stream.get()));
    StepShape shape{n, s, num_logits, 0, 0, in.table, b.max_pages};
    for (int64_t i = 0; i < s; ++i) {
        shape.max_query_len = std::max<int64_t>(
            shape.max_query_len, b.query_start[size_t(i) + 1] - b.query_start[size_t(i)]);
        shape.max_seq_len = std::max<int64_t>(shape.max_seq_len, b.seq_lens[size_t(i)]);
    }
    plan_attention(s);
    run_layers(shape);
}

void CudaModelRunner::Impl::run_layers(const StepShape& sh) {
    const int64_t n = sh.num_tokens, s = sh.num_seqs, num_logits = sh.num_logits;
    const Tensor ids = inputs_view(0, {n}), pos = inputs_view(in.positions, {n}),
                 slots = inputs_view(in.slots, {n});
    const Tensor qstart = inputs_view(in.query_start, {s + 1}),
                 seqlens = inputs_view(in.seq_lens, {s});
    const Tensor logits_idx = inputs_view(in.logits_indices, {num_logits});
    const Tensor table = inputs_view(sh.table_offset, {s, sh.table_stride});
    const int64_t max_query_len = sh.max_query_len, max_seq_len = sh.max_seq_len;
    const cudaStream_t st = stream.get();
    const float eps = float(cfg.rms_norm_eps);
    Tensor x = rows(hidden, n), res = rows(residual, n), h = rows(normed, n), pr = rows(proj, n);
    Tensor qkv_n = rows(qkv, n), q_n = rows(q, n), attn_n = rows(attn, n), gu = rows(gate_up, n),
           a = rows(act, n);
    cuda::embedding(ids, embed, res, st);
    for (size_t l = 0; l < layers.size(); ++l) {
        Layer& L = layers[l];
        // The residual stream: layer 0 normalises the embedding; later layers add the MLP output
        // first.
        if (l == 0)
            cuda::add_rms_norm(res, nullptr, L.input_norm, eps, h, st);
        else
            cuda::add_rms_norm(x, &res, L.input_norm, eps, h, st);
        gemm.run(h, L.qkv, L.qkv_bias.defined() ? &L.qkv_bias : nullptr, qkv_n, st);
        cuda::qk_norm_rope_store(qkv_n, L.q_norm.defined() ? &L.q_norm : nullptr,
                                 L.k_norm.defined() ? &L.k_norm : nullptr, eps, pos, inv_freq,
                                 slots, cfg.num_heads, cfg.num_kv_heads, cfg.head_dim, q_n,
                                 L.k_cache, L.v_cache, st);
        const cuda::AttentionParams ap{.q = &q_n,
                                       .k_cache = &L.k_cache,
                                       .v_cache = &L.v_cache,
                                       .query_start = &qstart,
                                       .seq_lens = &seqlens,
                                       .block_table = &table,
                                       .num_seqs = s,
                                       .max_query_len = max_query_len,
                                       .max_seq_len = max_seq_len,
                                       .scale = float(1.0 / std::sqrt(double(cfg.head_dim))),
                                       .out = &attn_n};
        if (flashinfer)
            flashinfer->run(ap, st);
        else
            cuda::paged_attention(ap, attention_workspace.data(), attention_workspace.bytes(), st);
        gemm.run(attn_n, L.o_proj, L.o_bias.defined() ? &L.o_bias : nullptr, pr, st);
        cuda::add_rms_norm(pr, &res, L.post_norm, eps, h, st);
        gemm.run(h, L.gate_up, nullptr, gu, st);
        cuda::silu_mul(gu, a, st);
        gemm.run(a, L.down, nullptr, x, st);
    }
    if (num_logits == 0) return;
    // Only the sampled rows: gather, add & norm, lm_head.
    Tensor lh = rows(last_hidden, num_logits), lr = rows(last_residual, num_logits),
           ln = rows(last_normed, num_logits);
    cuda::gather_rows(x, logits_idx, lh, st);
    cuda::gather_rows(res, logits_idx, lr, st);
    cuda::add_rms_norm(lh, &lr, final_norm, eps, ln, st);
    Tensor lb = rows(logits_bf16, num_logits), lf = rows(logits_f32, num_logits);
    gemm.run(ln, lm_head, nullptr, lb, st);
    cuda::bf16_to_f32(lb, lf, st);
}

}  // namespace miniinfer
