#include "engine/cuda_model_runner.h"

#include <algorithm>
#include <cstring>
#include <map>

#include "core/cuda/cuda_check.h"
#include "core/cuda/device_buffer.h"
#include "core/logging.h"
#include "core/thread_pool.h"
#include "kernels/cuda/attention.h"
#include "kernels/cuda/attention_flashinfer.h"
#include "kernels/cuda/cast.h"
#include "kernels/cuda/embedding.h"
#include "kernels/cuda/gather_rows.h"
#include "kernels/cuda/gemm.h"
#include "kernels/cuda/qk_norm_rope.h"
#include "kernels/cuda/rms_norm.h"
#include "kernels/cuda/sampling.h"
#include "kernels/cuda/silu_mul.h"
#include "layers/layers.h"

namespace miniinfer {
namespace {

constexpr int64_t kMaxLogprobs = 20;
constexpr int64_t kGraphReserveBytes = int64_t(256) << 20;

// f32 host weights -> bf16 device tensor (lossless: checkpoints are bf16).
Tensor upload_bf16(const Tensor& host) {
    if (!host.defined()) return Tensor();
    Tensor staged = Tensor::zeros(host.shape(), DType::kBF16);
    const float* src = host.data<float>();
    auto* dst = staged.data<uint16_t>();
    ThreadPool::global().parallel_for(host.numel(), [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) dst[i] = f32_to_bf16(src[i]);
    }, 1 << 16);
    return cuda::to_device(staged);
}

// Pinned host memory, for the per-step transfers.
struct PinnedBuffer {
    explicit PinnedBuffer(size_t bytes) { MI_CUDA_CHECK(cudaHostAlloc(&data, bytes, cudaHostAllocDefault)); }
    ~PinnedBuffer() { cudaFreeHost(data); }
    PinnedBuffer(const PinnedBuffer&) = delete;
    PinnedBuffer& operator=(const PinnedBuffer&) = delete;
    void* data = nullptr;
};

Tensor rows(const Tensor& t, int64_t n) { return t.slice_rows(0, n); }

}  // namespace

struct CudaModelRunner::Impl {
    struct Layer {
        Tensor input_norm, post_norm, qkv, qkv_bias, q_norm, k_norm, o_proj, o_bias, gate_up, down;
        Tensor k_cache, v_cache;  // [num_pages, page_size, num_kv_heads, head_dim] bf16
    };

    ModelConfig cfg;
    CudaRunnerOptions opt;
    int64_t max_pages_per_seq = 0, num_pages = 0;
    cuda::Stream stream;
    cuda::Gemm gemm;
    Tensor embed, final_norm, lm_head, inv_freq;
    std::vector<Layer> layers;

    // Step inputs: host staging (pinned) and its device copy, i32, at fixed offsets.
    int64_t off_pos = 0, off_slots = 0, off_qstart = 0, off_seqlens = 0, off_logits_idx = 0, off_table = 0;
    std::unique_ptr<PinnedBuffer> host_inputs;
    Tensor dev_inputs;
    // Activations, sized for the worst step.
    Tensor hidden, residual, normed, qkv, q, attn, proj, gate_up, act;
    Tensor last_hidden, last_residual, last_normed, logits_bf16, logits_f32;
    Tensor tokens, logprobs, top_ids, top_logprobs, row_params, mask_ids;
    std::unique_ptr<PinnedBuffer> host_outputs;
    cuda::DeviceBuffer attention_workspace, sampling_workspace;
    std::unique_ptr<cuda::FlashInferAttention> flashinfer;  // the `flashinfer` backend, else fa2

    // Decode CUDA graphs: one per batch size of the ladder, replayed with padding. Padded rows
    // decode one token of a one-token sequence in the reserved last page (dummy_page), so they
    // touch no real request's K/V. Their block table has a fixed stride (max_pages_per_seq).
    struct Graph {
        cudaGraph_t graph = nullptr;
        cudaGraphExec_t exec = nullptr;
    };
    std::map<int64_t, Graph> graphs;  // batch size -> graph
    int64_t dummy_page = 0, graph_max_seq_len = 0;
    int64_t last_num_logits = 0;

    // What one forward pass reads: how many tokens / sequences / sampled rows, and where the
    // block table is (the eager step packs it with the batch's own stride).
    struct StepShape {
        int64_t num_tokens, num_seqs, num_logits, max_query_len, max_seq_len, table_offset, table_stride;
    };

    Tensor inputs_view(int64_t offset, Shape shape) const {
        return Tensor(dev_inputs.data<int32_t>() + offset, DType::kI32, std::move(shape), Device::kCUDA);
    }
    void forward(const Batch& b);
    void run_layers(const StepShape& shape);  // kernels only: no host work, capturable
    bool replay_graph(const Batch& b);        // false when the batch does not fit a graph
    void capture_graphs();
    ~Impl();
    std::vector<SampledToken> sample(const Batch& b, std::span<const SamplerInput> sampling);
};

CudaModelRunner::CudaModelRunner(ModelConfig config, const ModelWeights& w, const CudaRunnerOptions& options)
    : impl_(std::make_unique<Impl>()) {
    Impl& m = *impl_;
    m.cfg = std::move(config);
    m.opt = options;
    const ModelConfig& c = m.cfg;
    if (c.num_experts > 0) fail("{}: Qwen3-MoE does not run on CUDA yet; use --device cpu", c.model_type);
    if (cuda::device_count() == 0) fail("--device cuda: no CUDA device is visible");
    size_t free0 = 0, total = 0;
    MI_CUDA_CHECK(cudaMemGetInfo(&free0, &total));

    m.embed = upload_bf16(w.embed);
    m.lm_head = c.tie_word_embeddings ? m.embed : upload_bf16(w.lm_head);
    m.final_norm = upload_bf16(w.norm);
    for (const LayerWeights& lw : w.layers)
        m.layers.push_back({upload_bf16(lw.input_norm), upload_bf16(lw.post_attention_norm), upload_bf16(lw.qkv),
                            upload_bf16(lw.qkv_bias), upload_bf16(lw.q_norm), upload_bf16(lw.k_norm),
                            upload_bf16(lw.o_proj), upload_bf16(lw.o_bias), upload_bf16(lw.gate_up),
                            upload_bf16(lw.down), Tensor(), Tensor()});
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
    m.off_pos = T;
    m.off_slots = 2 * T;
    m.off_qstart = 3 * T;
    m.off_seqlens = m.off_qstart + S + 1;
    m.off_logits_idx = m.off_seqlens + S;
    m.off_table = m.off_logits_idx + S;
    const int64_t input_ints = m.off_table + 2 * S * m.max_pages_per_seq;  // eager table, then the graphs'
    m.graph_max_seq_len = std::min<int64_t>(options.max_model_len, 4096);
    m.host_inputs = std::make_unique<PinnedBuffer>(size_t(input_ints) * 4);
    m.dev_inputs = cuda::device_tensor({input_ints}, DType::kI32);
    for (Tensor* t : {&m.hidden, &m.residual, &m.normed, &m.proj}) *t = cuda::device_tensor({T, H}, DType::kBF16);
    m.qkv = cuda::device_tensor({T, qkv_width}, DType::kBF16);
    m.q = cuda::device_tensor({T, c.num_heads, c.head_dim}, DType::kBF16);
    m.attn = cuda::device_tensor({T, c.q_size()}, DType::kBF16);
    m.gate_up = cuda::device_tensor({T, 2 * I}, DType::kBF16);
    m.act = cuda::device_tensor({T, I}, DType::kBF16);
    for (Tensor* t : {&m.last_hidden, &m.last_residual, &m.last_normed}) *t = cuda::device_tensor({S, H}, DType::kBF16);
    m.logits_bf16 = cuda::device_tensor({S, c.vocab_size}, DType::kBF16);
    m.logits_f32 = cuda::device_tensor({S, c.vocab_size}, DType::kF32);
    m.tokens = cuda::device_tensor({S}, DType::kI32);
    m.logprobs = cuda::device_tensor({S}, DType::kF32);
    m.top_ids = cuda::device_tensor({S, kMaxLogprobs}, DType::kI32);
    m.top_logprobs = cuda::device_tensor({S, kMaxLogprobs}, DType::kF32);
    m.row_params = cuda::device_tensor({S, int64_t(sizeof(cuda::RowSampling))}, DType::kU8);
    m.mask_ids = cuda::device_tensor({64}, DType::kI32);
    m.host_outputs = std::make_unique<PinnedBuffer>(size_t(S) * (8 + 8 * kMaxLogprobs) + size_t(S) * sizeof(cuda::RowSampling) + 256);
    m.attention_workspace = cuda::DeviceBuffer(cuda::attention_workspace_bytes(T, c.num_heads, c.head_dim));
    m.sampling_workspace = cuda::DeviceBuffer(cuda::sampling_workspace_bytes(S, c.vocab_size));
    if (options.attention_backend == "flashinfer")
        m.flashinfer = std::make_unique<cuda::FlashInferAttention>(T, S, c.num_heads, c.num_kv_heads, c.head_dim,
                                                                   options.page_size);
    else if (options.attention_backend != "auto" && options.attention_backend != "fa2")
        fail("attention_backend '{}' is not supported (auto, fa2, flashinfer)", options.attention_backend);
    size_t free2 = 0;
    MI_CUDA_CHECK(cudaMemGetInfo(&free2, &total));
    const size_t activation_bytes = free1 - free2;

    // The KV cache takes what gpu_memory_utilization leaves.
    const size_t page_bytes = size_t(2 * c.num_layers * options.page_size * c.num_kv_heads * c.head_dim * 2);
    // CUDA graphs are captured after the KV cache exists (they bake its addresses in), so their
    // memory is set aside first: 20 MiB measured for 23 sizes of Qwen3-0.6B; 256 MiB is ample.
    const double graph_reserve = options.enforce_eager ? 0.0 : double(kGraphReserveBytes);
    const double budget = double(total) * options.gpu_memory_utilization - double(total - free2) - graph_reserve;
    m.num_pages = options.num_pages > 0 ? options.num_pages : int64_t(std::max(0.0, budget) / double(page_bytes));
    if (m.num_pages < 1)
        fail("the model does not fit: {:.2f} GiB of weights and {:.2f} GiB of activations, {:.2f} GiB usable of {:.2f} "
             "GiB (gpu_memory_utilization {}); nothing is left for the KV cache", weight_bytes / 1073741824.0,
             activation_bytes / 1073741824.0, double(total) * options.gpu_memory_utilization / 1073741824.0,
             total / 1073741824.0, options.gpu_memory_utilization);
    // One page more than the scheduler sees: the padded rows of graph replays write there.
    m.dummy_page = m.num_pages;
    for (auto& layer : m.layers) {
        layer.k_cache = cuda::device_tensor({m.num_pages + 1, options.page_size, c.num_kv_heads, c.head_dim}, DType::kBF16);
        layer.v_cache = cuda::device_tensor({m.num_pages + 1, options.page_size, c.num_kv_heads, c.head_dim}, DType::kBF16);
    }
    MI_LOG_INFO("CUDA: weights {:.2f} GiB, activations {:.2f} GiB, KV cache {} pages of {} tokens ({} tokens, {:.2f} GiB)",
                weight_bytes / 1073741824.0, activation_bytes / 1073741824.0, m.num_pages, options.page_size,
                m.num_pages * options.page_size, double(m.num_pages) * double(page_bytes) / 1073741824.0);
    if (!options.enforce_eager) m.capture_graphs();
}

CudaModelRunner::~CudaModelRunner() = default;
const ModelConfig& CudaModelRunner::config() const { return impl_->cfg; }
int64_t CudaModelRunner::num_pages() const { return impl_->num_pages; }

Tensor CudaModelRunner::last_logits() const {
    impl_->stream.synchronize();
    return cuda::to_host(rows(impl_->logits_f32, impl_->last_num_logits));
}

std::vector<SampledToken> CudaModelRunner::run(const Batch& batch, std::span<const SamplerInput> sampling) {
    impl_->forward(batch);
    return impl_->sample(batch, sampling);
}

void CudaModelRunner::Impl::forward(const Batch& b) {
    const int64_t n = b.num_tokens(), s = int64_t(b.seqs.size()), num_logits = int64_t(b.logits_indices.size());
    MI_CHECK(n <= opt.max_num_batched_tokens && s <= opt.max_num_seqs && b.max_pages <= max_pages_per_seq,
             "batch of {} tokens / {} seqs / {} pages exceeds the runner's buffers", n, s, b.max_pages);
    last_num_logits = num_logits;
    if (replay_graph(b)) return;
    // One host->device copy of everything the step reads.
    auto* host = static_cast<int32_t*>(host_inputs->data);
    std::copy(b.input_ids.begin(), b.input_ids.end(), host);
    std::copy(b.positions.begin(), b.positions.end(), host + off_pos);
    std::copy(b.slot_mapping.begin(), b.slot_mapping.end(), host + off_slots);
    std::copy(b.query_start.begin(), b.query_start.end(), host + off_qstart);
    std::copy(b.seq_lens.begin(), b.seq_lens.end(), host + off_seqlens);
    std::copy(b.logits_indices.begin(), b.logits_indices.end(), host + off_logits_idx);
    std::copy(b.block_table.begin(), b.block_table.end(), host + off_table);
    MI_CUDA_CHECK(cudaMemcpyAsync(dev_inputs.raw(), host, size_t(off_table + int64_t(b.block_table.size())) * 4,
                                  cudaMemcpyHostToDevice, stream.get()));
    StepShape shape{n, s, num_logits, 0, 0, off_table, b.max_pages};
    for (int64_t i = 0; i < s; ++i) {
        shape.max_query_len = std::max<int64_t>(shape.max_query_len, b.query_start[size_t(i) + 1] - b.query_start[size_t(i)]);
        shape.max_seq_len = std::max<int64_t>(shape.max_seq_len, b.seq_lens[size_t(i)]);
    }
    if (flashinfer) flashinfer->plan(b.query_start, b.seq_lens, stream.get());
    run_layers(shape);
}

// A decode-only batch replays the graph of the smallest captured size that holds it. The
// inputs go to the same device buffers the graph was captured with; padded rows decode a
// dummy token into the reserved page.
bool CudaModelRunner::Impl::replay_graph(const Batch& b) {
    const int64_t s = int64_t(b.seqs.size()), G = max_pages_per_seq;
    if (graphs.empty() || b.num_tokens() != s || int64_t(b.logits_indices.size()) != s) return false;
    auto it = graphs.lower_bound(s);
    if (it == graphs.end()) return false;
    const int64_t B = it->first;
    auto* host = static_cast<int32_t*>(host_inputs->data);
    for (int64_t i = 0; i < B; ++i) {
        const bool real = i < s;
        host[i] = real ? b.input_ids[size_t(i)] : 0;
        host[off_pos + i] = real ? b.positions[size_t(i)] : 0;
        host[off_slots + i] = real ? b.slot_mapping[size_t(i)] : int32_t(dummy_page * opt.page_size);
        host[off_qstart + i] = int32_t(i);
        host[off_seqlens + i] = real ? b.seq_lens[size_t(i)] : 1;
        host[off_logits_idx + i] = int32_t(i);
    }
    host[off_qstart + B] = int32_t(B);
    std::copy(b.block_table.begin(), b.block_table.end(), host + off_table);
    for (int64_t i = s; i < B; ++i) host[off_table + s * b.max_pages + (i - s)] = int32_t(dummy_page);
    const cudaStream_t st = stream.get();
    MI_CUDA_CHECK(cudaMemcpyAsync(dev_inputs.raw(), host, size_t(off_table) * 4, cudaMemcpyHostToDevice, st));
    // Real rows: the batch's compact rows into the graph's fixed-stride table.
    const int64_t graph_table = off_table + opt.max_num_seqs * G;
    MI_CUDA_CHECK(cudaMemcpy2DAsync(dev_inputs.data<int32_t>() + graph_table, size_t(G) * 4, host + off_table,
                                    size_t(b.max_pages) * 4, size_t(b.max_pages) * 4, size_t(s), cudaMemcpyHostToDevice, st));
    // Padded rows: page 0 of their table is the dummy page.
    if (B > s)
        MI_CUDA_CHECK(cudaMemcpy2DAsync(dev_inputs.data<int32_t>() + graph_table + s * G, size_t(G) * 4,
                                        host + off_table + s * b.max_pages, 4, 4, size_t(B - s), cudaMemcpyHostToDevice, st));
    if (flashinfer)
        flashinfer->plan(std::span<const int32_t>(host + off_qstart, size_t(B + 1)),
                         std::span<const int32_t>(host + off_seqlens, size_t(B)), st);
    MI_CUDA_CHECK(cudaGraphLaunch(it->second.exec, st));
    return true;
}

void CudaModelRunner::Impl::capture_graphs() {
    std::vector<int64_t> sizes;
    for (int64_t b : {1, 2, 4}) sizes.push_back(b);
    for (int64_t b = 8; b <= opt.max_num_seqs; b += b < 64 ? 8 : 16) sizes.push_back(b);
    if (sizes.back() != opt.max_num_seqs && opt.max_num_seqs > 4) sizes.push_back(opt.max_num_seqs);
    sizes.erase(std::remove_if(sizes.begin(), sizes.end(), [&](int64_t b) { return b > opt.max_num_seqs; }), sizes.end());
    const int64_t G = max_pages_per_seq, graph_table = off_table + opt.max_num_seqs * G;
    // Inputs for capture: every row a one-token sequence in the dummy page.
    auto* host = static_cast<int32_t*>(host_inputs->data);
    const int64_t S = opt.max_num_seqs;
    for (int64_t i = 0; i < S; ++i) {
        host[i] = 0;
        host[off_pos + i] = 0;
        host[off_slots + i] = int32_t(dummy_page * opt.page_size);
        host[off_qstart + i] = int32_t(i);
        host[off_seqlens + i] = 1;
        host[off_logits_idx + i] = int32_t(i);
    }
    host[off_qstart + S] = int32_t(S);
    std::fill(host + graph_table, host + graph_table + S * G, int32_t(dummy_page));
    const cudaStream_t st = stream.get();
    MI_CUDA_CHECK(cudaMemcpyAsync(dev_inputs.raw(), host, size_t(graph_table + S * G) * 4, cudaMemcpyHostToDevice, st));
    size_t free_before = 0, free_after = 0, total = 0;
    MI_CUDA_CHECK(cudaMemGetInfo(&free_before, &total));
    for (auto b = sizes.rbegin(); b != sizes.rend(); ++b) {
        const StepShape shape{*b, *b, *b, 1, graph_max_seq_len, graph_table, G};
        if (flashinfer)
            flashinfer->plan(std::span<const int32_t>(host + off_qstart, size_t(*b + 1)),
                             std::span<const int32_t>(host + off_seqlens, size_t(*b)), st);
        run_layers(shape);  // eager first: GEMM algorithms and kernel attributes get cached
        stream.synchronize();
        Graph g;
        MI_CUDA_CHECK(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
        run_layers(shape);
        MI_CUDA_CHECK(cudaStreamEndCapture(st, &g.graph));
        MI_CUDA_CHECK(cudaGraphInstantiate(&g.exec, g.graph, 0));
        graphs[*b] = g;
    }
    stream.synchronize();
    MI_CUDA_CHECK(cudaMemGetInfo(&free_after, &total));
    const double graph_bytes = double(free_before - free_after);
    MI_LOG_INFO("CUDA graphs: {} decode batch sizes (1 .. {}), {:.1f} MiB", graphs.size(), sizes.back(),
                graph_bytes / 1048576.0);
    if (graph_bytes > double(kGraphReserveBytes))
        MI_LOG_WARN("CUDA graphs took {:.0f} MiB, more than the {} MiB set aside for them", graph_bytes / 1048576.0,
                    kGraphReserveBytes >> 20);
}

CudaModelRunner::Impl::~Impl() {
    for (auto& [_, g] : graphs) {
        if (g.exec) cudaGraphExecDestroy(g.exec);
        if (g.graph) cudaGraphDestroy(g.graph);
    }
}

void CudaModelRunner::Impl::run_layers(const StepShape& sh) {
    const int64_t n = sh.num_tokens, s = sh.num_seqs, num_logits = sh.num_logits;
    const Tensor ids = inputs_view(0, {n}), pos = inputs_view(off_pos, {n}), slots = inputs_view(off_slots, {n});
    const Tensor qstart = inputs_view(off_qstart, {s + 1}), seqlens = inputs_view(off_seqlens, {s});
    const Tensor logits_idx = inputs_view(off_logits_idx, {num_logits});
    const Tensor table = inputs_view(sh.table_offset, {s, sh.table_stride});
    const int64_t max_query_len = sh.max_query_len, max_seq_len = sh.max_seq_len;
    const cudaStream_t st = stream.get();
    const float eps = float(cfg.rms_norm_eps);
    Tensor x = rows(hidden, n), res = rows(residual, n), h = rows(normed, n), pr = rows(proj, n);
    Tensor qkv_n = rows(qkv, n), q_n = rows(q, n), attn_n = rows(attn, n), gu = rows(gate_up, n), a = rows(act, n);
    cuda::embedding(ids, embed, res, st);
    for (size_t l = 0; l < layers.size(); ++l) {
        Layer& L = layers[l];
        // The residual stream: layer 0 normalises the embedding; later layers add the MLP output first.
        if (l == 0) cuda::add_rms_norm(res, nullptr, L.input_norm, eps, h, st);
        else cuda::add_rms_norm(x, &res, L.input_norm, eps, h, st);
        gemm.run(h, L.qkv, L.qkv_bias.defined() ? &L.qkv_bias : nullptr, qkv_n, st);
        cuda::qk_norm_rope_store(qkv_n, L.q_norm.defined() ? &L.q_norm : nullptr, L.k_norm.defined() ? &L.k_norm : nullptr,
                                 eps, pos, inv_freq, slots, cfg.num_heads, cfg.num_kv_heads, cfg.head_dim, q_n,
                                 L.k_cache, L.v_cache, st);
        const cuda::AttentionParams ap{.q = &q_n, .k_cache = &L.k_cache, .v_cache = &L.v_cache,
                                       .query_start = &qstart, .seq_lens = &seqlens, .block_table = &table,
                                       .num_seqs = s, .max_query_len = max_query_len, .max_seq_len = max_seq_len,
                                       .scale = float(1.0 / std::sqrt(double(cfg.head_dim))), .out = &attn_n};
        if (flashinfer) flashinfer->run(ap, st);
        else cuda::paged_attention(ap, attention_workspace.data(), attention_workspace.bytes(), st);
        gemm.run(attn_n, L.o_proj, L.o_bias.defined() ? &L.o_bias : nullptr, pr, st);
        cuda::add_rms_norm(pr, &res, L.post_norm, eps, h, st);
        gemm.run(h, L.gate_up, nullptr, gu, st);
        cuda::silu_mul(gu, a, st);
        gemm.run(a, L.down, nullptr, x, st);
    }
    if (num_logits == 0) return;
    // Only the sampled rows: gather, add & norm, lm_head.
    Tensor lh = rows(last_hidden, num_logits), lr = rows(last_residual, num_logits), ln = rows(last_normed, num_logits);
    cuda::gather_rows(x, logits_idx, lh, st);
    cuda::gather_rows(res, logits_idx, lr, st);
    cuda::add_rms_norm(lh, &lr, final_norm, eps, ln, st);
    Tensor lb = rows(logits_bf16, num_logits), lf = rows(logits_f32, num_logits);
    gemm.run(ln, lm_head, nullptr, lb, st);
    cuda::bf16_to_f32(lb, lf, st);
}

std::vector<SampledToken> CudaModelRunner::Impl::sample(const Batch& b, std::span<const SamplerInput> in) {
    const int64_t rows_n = int64_t(in.size()), vocab = cfg.vocab_size;
    MI_CHECK(rows_n == int64_t(b.logits_indices.size()), "{} sampling inputs for {} rows", rows_n, b.logits_indices.size());
    std::vector<SampledToken> out(static_cast<size_t>(rows_n));
    if (rows_n == 0) {
        stream.synchronize();
        return out;
    }
    const cudaStream_t st = stream.get();
    bool all_greedy = true, penalties = false, per_row_masks = false;
    int64_t max_logprobs = 0;
    for (const SamplerInput& r : in) {
        const SamplingParams& p = *r.params;
        all_greedy &= p.greedy();
        penalties |= p.repetition_penalty != 1.0 || p.presence_penalty != 0.0 || p.frequency_penalty != 0.0;
        const bool masking = int64_t(r.output_ids.size()) < p.min_tokens;
        per_row_masks |= masking && (!p.stop_token_ids.empty() || r.eos_ids.size() > 64);
        max_logprobs = std::max<int64_t>(max_logprobs, p.logprobs.value_or(0));
        all_greedy &= !masking && !p.logprobs;
    }
    Tensor logits = rows(logits_f32, rows_n);
    if (penalties || per_row_masks) {
        // Rare settings: the CPU reference sampler on a host copy of the logits.
        Tensor host = cuda::to_host(logits);  // synchronous
        std::vector<SamplerInput> cpu(in.begin(), in.end());
        for (int64_t i = 0; i < rows_n; ++i)
            cpu[size_t(i)].logits = std::span<const float>(host.data<float>() + i * vocab, size_t(vocab));
        return sample_batch(cpu);
    }
    auto* host = static_cast<char*>(host_outputs->data);
    auto* tokens_h = reinterpret_cast<int32_t*>(host);
    auto* logprobs_h = reinterpret_cast<float*>(host + 4 * rows_n);
    auto* top_ids_h = reinterpret_cast<int32_t*>(host + 8 * rows_n);
    auto* top_lp_h = reinterpret_cast<float*>(host + 8 * rows_n + 4 * rows_n * kMaxLogprobs);
    Tensor tok = rows(tokens, rows_n);
    if (all_greedy) {
        cuda::argmax(logits, tok, st);
    } else {
        auto* params_h = reinterpret_cast<cuda::RowSampling*>(host + 8 * rows_n * (1 + kMaxLogprobs));
        std::vector<int32_t> masks;
        for (int64_t i = 0; i < rows_n; ++i) {
            const SamplerInput& r = in[size_t(i)];
            const SamplingParams& p = *r.params;
            const bool masking = int64_t(r.output_ids.size()) < p.min_tokens;
            params_h[i] = {.temperature = float(p.temperature), .top_k = int32_t(p.top_k), .top_p = float(p.top_p),
                           .min_p = float(p.min_p), .repetition_penalty = 1.f, .presence_penalty = 0.f,
                           .frequency_penalty = 0.f, .seed = r.seed, .step = int32_t(r.output_ids.size()),
                           .num_logprobs = int32_t(p.logprobs.value_or(0)), .mask_eos = masking ? 1 : 0};
            if (masking && masks.empty())
                for (int64_t id : r.eos_ids) masks.push_back(int32_t(id));
        }
        Tensor params = rows(row_params, rows_n);
        MI_CUDA_CHECK(cudaMemcpyAsync(params.raw(), params_h, size_t(rows_n) * sizeof(cuda::RowSampling),
                                      cudaMemcpyHostToDevice, st));
        Tensor mask = Tensor(mask_ids.raw(), DType::kI32, {int64_t(masks.size())}, Device::kCUDA);
        if (!masks.empty())
            MI_CUDA_CHECK(cudaMemcpyAsync(mask.raw(), masks.data(), masks.size() * 4, cudaMemcpyHostToDevice, st));
        Tensor lp = rows(logprobs, rows_n), ti = rows(top_ids, rows_n), tl = rows(top_logprobs, rows_n);
        if (max_logprobs > 0) {
            ti = Tensor(top_ids.raw(), DType::kI32, {rows_n, max_logprobs}, Device::kCUDA);
            tl = Tensor(top_logprobs.raw(), DType::kF32, {rows_n, max_logprobs}, Device::kCUDA);
        }
        cuda::sample(logits, params, nullptr, nullptr, mask, max_logprobs, tok, lp, max_logprobs > 0 ? &ti : nullptr,
                     max_logprobs > 0 ? &tl : nullptr, sampling_workspace.data(), sampling_workspace.bytes(), st);
        MI_CUDA_CHECK(cudaMemcpyAsync(logprobs_h, lp.raw(), size_t(rows_n) * 4, cudaMemcpyDeviceToHost, st));
        if (max_logprobs > 0) {
            MI_CUDA_CHECK(cudaMemcpyAsync(top_ids_h, ti.raw(), size_t(rows_n * max_logprobs) * 4, cudaMemcpyDeviceToHost, st));
            MI_CUDA_CHECK(cudaMemcpyAsync(top_lp_h, tl.raw(), size_t(rows_n * max_logprobs) * 4, cudaMemcpyDeviceToHost, st));
        }
    }
    MI_CUDA_CHECK(cudaMemcpyAsync(tokens_h, tok.raw(), size_t(rows_n) * 4, cudaMemcpyDeviceToHost, st));
    stream.synchronize();
    for (int64_t i = 0; i < rows_n; ++i) {
        SampledToken& t = out[size_t(i)];
        t.token = tokens_h[i];
        if (all_greedy) continue;
        t.logprob = logprobs_h[i];
        for (int64_t k = 0; k < in[size_t(i)].params->logprobs.value_or(0); ++k)
            t.top_logprobs.emplace_back(top_ids_h[i * max_logprobs + k], top_lp_h[i * max_logprobs + k]);
    }
    return out;
}

}  // namespace miniinfer
