#include "engine/cuda_model_runner.h"

#include <algorithm>
#include <deque>
#include <utility>

#include "core/cuda/cuda_check.h"
#include "core/cuda/device_buffer.h"
#include "core/cuda/pinned_buffer.h"
#include "core/logging.h"
#include "distributed/control_messages.h"
#include "distributed/step_broadcaster.h"
#include "engine/cuda_graphs.h"
#include "engine/cuda_sampler.h"
#include "kernels/cuda/gdn/gated_delta_net.h"
#include "kernels/cuda/primitives/launch.h"
#include "kernels/cuda/sampling/sampling.h"
#ifdef MINIINFER_HAS_NCCL
#include "distributed/nccl_communicator.h"
#endif
#include "layers/cuda/attention_backend.h"
#include "models/cuda_model.h"

namespace miniinfer {
namespace {

// Set aside beyond the graphs' measured memory: cudaMemGetInfo moves in 2 MiB steps, and the
// second capture's allocations need not land exactly as the first's.
constexpr size_t kGraphMarginBytes = size_t(16) << 20;
constexpr int64_t kTrialPages = 1;  // the KV pool the graphs are first measured against
constexpr double kMiB = 1048576.0;

// cudaMemGetInfo: bytes free on the device now, and the card's total.
std::pair<size_t, size_t> device_memory() {
    size_t free = 0, total = 0;
    MI_CUDA_CHECK(cudaMemGetInfo(&free, &total));
    return {free, total};
}
size_t free_device_memory() {
    return device_memory().first;
}

}  // namespace

struct CudaModelRunner::Impl {
    // The device memory each construction phase took, for the fit check and the log line.
    struct Memory {
        size_t weights = 0, activations = 0, states = 0;
        size_t free_after_weights = 0;
        size_t graphs = 0;         // the graphs' trial (or only) capture
        size_t graphs_kept = 0;    // what the device kept of the trial after destroying it
        size_t graph_reserve = 0;  // set aside for the real capture when sizing the KV cache
        bool graphs_measured = false;
    };

    // What one forward pass reads: how many tokens / sequences / sampled rows, and where the
    // block table is (the eager step packs it with the batch's own stride).
    struct StepShape {
        int64_t num_tokens, num_seqs, num_logits, max_query_len, max_seq_len, table_offset,
            table_stride;
        bool placeholders;  // token ids may name the last step's samples (overlap)
    };

    Impl(const EngineConfig& config, Communicator* comm)
        : opt(config),
          comm(comm),
          max_pages_per_seq((config.max_model_len + config.page_size - 1) / config.page_size),
          in(config.max_num_batched_tokens, config.max_num_seqs, max_pages_per_seq),
          graph_max_seq_len(std::min<int64_t>(config.max_model_len, 4096)) {}

    // The construction phases, in order.
    void upload_model(ModelConfig model_config, ModelWeights weights);
    void allocate_step_buffers();
    void measure_graphs();
    void size_kv_cache();
    void capture_and_log();

    void allocate_kv(int64_t pages);      // pages + 1 (the dummy page); 0 frees the pool
    void allocate_states(int64_t slots);  // a hybrid's state slots + 1 (the dummy slot); 0 frees
    size_t state_slot_bytes() const;      // one slot, every Gated DeltaNet layer
    void restore_states(std::span<const StateRestore> restores);
    size_t page_bytes() const;  // one KV page, K and V of every layer
    size_t capture_graphs(bool warm_up);
    void plan_attention(int64_t num_seqs);  // from the host inputs' first rows
    int32_t* next_staging();                // the host staging the next step writes
    void share_tokens(int64_t rows);        // tensor parallelism: rank 0's tokens everywhere
    void forward(const ForwardBatch& b);
    cuda::StepInputs step_inputs(const StepShape& shape) const;
    void resolve_placeholders(const cuda::StepInputs& inputs);
    void run_model(const StepShape& shape);  // kernels only: no host work, capturable

    Tensor inputs_view(int64_t offset, Shape shape) const {
        return Tensor(dev_inputs.data<int32_t>() + offset, DType::kI32, std::move(shape),
                      Device::kCUDA);
    }
    int32_t* host_ints() const { return static_cast<int32_t*>(host_inputs[staging]->data); }

    const EngineConfig opt;
    Communicator* const comm;  // tensor parallelism, else null
    const int64_t max_pages_per_seq;
    Memory memory;
    int64_t num_pages = 0;
    cuda::Stream stream;
    std::unique_ptr<CudaModel> model;
    std::unique_ptr<cuda::AttentionBackend> attention;
    std::vector<cuda::KvLayer> kv;  // per layer: [num_pages + 1, page_size, kv_heads, head_dim]
    // A hybrid's Gated DeltaNet layers: num_state_slots + 1 slots each (the last: padded graph
    // rows').
    std::vector<cuda::StateLayer> states;
    int64_t num_state_slots = 0;

    // Step inputs: host staging (pinned) and its device copy, i32, at the offsets of `in`. Two
    // stagings, used in turn: with overlap the next step is written while the last one's copy
    // may not have run yet (staged[i]: staging i's copy has).
    const StepInputLayout in;
    std::unique_ptr<cuda::PinnedBuffer> host_inputs[2];
    cuda::Event staged[2];
    int staging = 0;
    Tensor dev_inputs;
    std::unique_ptr<CudaSampler> sampler;

    // measure_gpu_idle: each launched step's first and last events, in launch order, and the
    // last collected step's (whose end the next step's start is measured from).
    struct StepEvents {
        cuda::Event start{true}, end{true};
    };
    std::deque<std::unique_ptr<StepEvents>> timed;
    std::unique_ptr<StepEvents> last_timed;
    StepTiming timing;

    std::unique_ptr<DecodeGraphs> graphs;
    int64_t dummy_page = 0;  // the KV page padded graph rows write to (one past the scheduler's)
    const int64_t graph_max_seq_len;
    int64_t last_num_logits = 0;
};

// Tensor parallelism: what rank 0's runner holds besides its own rank.
struct CudaModelRunner::Parallel {
    std::unique_ptr<StepBroadcaster> steps;  // to every other rank; this node's rank threads
    std::unique_ptr<Communicator> nccl;      // this rank's

    // Tells every rank the end and waits for this node's (a rank still starting sees the closed
    // link).
    void end() {
        if (steps) steps->end();
    }
    ~Parallel() { end(); }  // before nccl goes: no rank is left in a collective
};

CudaModelRunner::CudaModelRunner(const EngineConfig& config, ModelConfig model_config,
                                 ModelWeights weights, Communicator* comm)
    : impl_(std::make_unique<Impl>(config, comm)) {
    if (cuda::device_count() == 0) fail("--device cuda: no CUDA device is visible");
    // Process-wide, as launch_kernel reads it. The hybrids launch without PDL for now: with it,
    // the Qwen3.5-MoE fixture decoded differently from run to run, eager or graphed (a missing
    // launch dependency not yet found; bench/history/session-33.md), and correctly without.
    cuda::set_pdl_enabled(config.tuning.pdl && !model_config.is_hybrid());
    impl_->upload_model(std::move(model_config), std::move(weights));
    impl_->allocate_step_buffers();
    impl_->measure_graphs();
    impl_->size_kv_cache();
    impl_->capture_and_log();
}

// The weights may be on the device already (dummy_cuda_weights): their size is the model's
// count, not a difference of free memory.
void CudaModelRunner::Impl::upload_model(ModelConfig model_config, ModelWeights weights) {
    model = make_cuda_model(model_config, std::move(weights), comm, opt.tuning);
    memory.free_after_weights = free_device_memory();
    memory.weights = model->weight_bytes();
}

// Every buffer a step uses, for the worst step: max_num_batched_tokens tokens, max_num_seqs
// sequences and sampled rows.
void CudaModelRunner::Impl::allocate_step_buffers() {
    const int64_t T = opt.max_num_batched_tokens, S = opt.max_num_seqs;
    for (auto& h : host_inputs) h = std::make_unique<cuda::PinnedBuffer>(size_t(in.total) * 4);
    dev_inputs = cuda::device_tensor({in.total}, DType::kI32);
    // The graphs are first measured against one slot when size_kv_cache sizes the pool.
    if (model->state_dims().num_layers > 0)
        allocate_states(opt.num_state_slots > 0 ? opt.num_state_slots : 1);
    model->allocate_activations(T, S);
    const CudaModel::AttentionDims dims = model->attention_dims();
    attention = cuda::make_attention_backend(opt.attention_backend,
                                             {.max_tokens = T,
                                              .max_seqs = S,
                                              .num_heads = dims.num_heads,
                                              .num_kv_heads = dims.num_kv_heads,
                                              .head_dim = dims.head_dim,
                                              .page_size = opt.page_size},
                                             opt.tuning);
    sampler = std::make_unique<CudaSampler>(S, model->config().vocab_size, opt.max_model_len);
    if (!opt.enforce_eager)
        graphs = std::make_unique<DecodeGraphs>(in, S, opt.page_size, dev_inputs.data<int32_t>(),
                                                int32_t(num_state_slots));
}

size_t CudaModelRunner::Impl::state_slot_bytes() const {
    const CudaModel::StateDims d = model->state_dims();
    return size_t(d.num_layers) * sizeof(float) *
           size_t(d.conv_window * d.conv_dim + d.num_v_heads * d.head_k_dim * d.head_v_dim);
}

// `slots` for the scheduler and the dummy slot that padded graph rows use (the last).
void CudaModelRunner::Impl::allocate_states(int64_t slots) {
    states.clear();  // free the old pool first
    num_state_slots = slots;
    memory.states = 0;
    if (slots == 0) return;
    const CudaModel::StateDims d = model->state_dims();
    for (int64_t l = 0; l < d.num_layers; ++l) {
        cuda::StateLayer layer{
            cuda::device_tensor({slots + 1, d.conv_window, d.conv_dim}, DType::kF32),
            cuda::device_tensor({slots + 1, d.num_v_heads, d.head_k_dim, d.head_v_dim},
                                DType::kF32)};
        memory.states += layer.conv.nbytes() + layer.recurrent.nbytes();
        states.push_back(std::move(layer));
    }
    if (graphs) graphs->set_dummy_state_slot(int32_t(slots));
}

void CudaModelRunner::Impl::restore_states(std::span<const StateRestore> restores) {
    for (const StateRestore& r : restores)
        for (cuda::StateLayer& layer : states) {
            cuda::copy_state_slot(layer.conv, r.from, r.to, stream.get());
            cuda::copy_state_slot(layer.recurrent, r.from, r.to, stream.get());
        }
}

// The graphs' memory, measured against a minimal KV pool before the real one is sized. What
// the device keeps of it after the trial graphs are destroyed is already outside free memory
// (and the real graphs reuse it); only the rest must be set aside again. The warm-up steps
// also leave what they keep (GEMM and attention set-up, lazily loaded kernels) in the
// activations' share.
void CudaModelRunner::Impl::measure_graphs() {
    memory.graphs_measured = graphs && opt.num_pages <= 0;
    if (memory.graphs_measured) {
        allocate_kv(kTrialPages);
        memory.graphs = capture_graphs(/*warm_up=*/true);
        const size_t back = graphs->clear();
        memory.graphs_kept = memory.graphs - std::min(memory.graphs, back);
        allocate_kv(0);
        memory.graph_reserve = memory.graphs - memory.graphs_kept + kGraphMarginBytes;
    }
    memory.activations =
        memory.free_after_weights - free_device_memory() - memory.graphs_kept - memory.states;
}

// The KV cache takes what gpu_memory_utilization leaves after the graphs (and a hybrid's state
// slots: a slot for every sequence max_num_seqs allows and, with prefix caching, as many for
// snapshots, within half of that, unless num_state_slots sets them).
void CudaModelRunner::Impl::size_kv_cache() {
    const size_t page = page_bytes(), total = device_memory().second;
    const double usable = double(total) * opt.gpu_memory_utilization;
    if (!states.empty() && opt.num_state_slots <= 0) {
        const double left = usable - double(total - free_device_memory()) + double(memory.states) -
                            double(memory.graph_reserve);
        const int64_t wanted = opt.max_num_seqs * (opt.enable_prefix_caching ? 2 : 1);
        const int64_t fit = int64_t(std::max(0.0, left / 2) / double(state_slot_bytes())) - 1;
        if (fit < 1)
            fail(
                "the model does not fit: {:.0f} MiB of weights and {:.0f} MiB of activations "
                "leave no room for a Gated DeltaNet state slot ({:.0f} MiB) in {:.0f} MiB usable "
                "(gpu_memory_utilization {})",
                memory.weights / kMiB, memory.activations / kMiB, state_slot_bytes() / kMiB,
                usable / kMiB, opt.gpu_memory_utilization);
        allocate_states(std::min(wanted, fit));
    }
    const double budget = usable - double(total - free_device_memory()) -
                          double(memory.graph_reserve) - double(page);  // the dummy page
    num_pages = opt.num_pages > 0 ? opt.num_pages : int64_t(std::max(0.0, budget) / double(page));
    // Every rank holds the same pages (the scheduler's), so the smallest rank's budget rules.
    if (comm && opt.num_pages <= 0) num_pages = comm->min_over_ranks(num_pages, stream.get());
    if (num_pages < 1)
        fail(
            "the model does not fit: {:.0f} MiB of weights, {:.0f} MiB of activations, {:.0f} MiB "
            "of state slots and {:.0f} MiB for CUDA graphs, {:.0f} MiB usable of {:.0f} MiB "
            "(gpu_memory_utilization {}); nothing is left for the KV cache ({:.2f} MiB a page)",
            memory.weights / kMiB, memory.activations / kMiB, memory.states / kMiB,
            (memory.graphs + kGraphMarginBytes) / kMiB, usable / kMiB, total / kMiB,
            opt.gpu_memory_utilization, page / kMiB);
    allocate_kv(num_pages);
}

void CudaModelRunner::Impl::capture_and_log() {
    const size_t captured = graphs ? capture_graphs(/*warm_up=*/!memory.graphs_measured) : 0;
    if (!memory.graphs_measured) memory.graphs = captured;
    const double kv_bytes = double(num_pages + 1) * double(page_bytes());
    MI_LOG_INFO(
        "CUDA memory: weights {:.0f} MiB, activations {:.0f} MiB, state slots {:.0f} MiB ({} "
        "slots), graphs {:.0f} MiB ({} decode "
        "sizes, measured before the KV cache was sized, + {:.0f} MiB margin), KV cache {:.0f} MiB "
        "= {} pages of {} tokens ({} tokens); {:.0f} MiB on the card; attention backend {}",
        memory.weights / kMiB, memory.activations / kMiB, memory.states / kMiB, num_state_slots,
        memory.graphs / kMiB, graphs ? graphs->batch_sizes().size() : 0,
        memory.graphs_measured ? kGraphMarginBytes / kMiB : 0.0, kv_bytes / kMiB, num_pages,
        opt.page_size, num_pages * opt.page_size, device_memory().second / kMiB, attention->name());
    if (graphs && !graphs->batch_sizes().empty())
        MI_LOG_INFO("decode step: {} kernels at batch size 1, {} at {}",
                    graphs->num_kernels(graphs->batch_sizes().front()),
                    graphs->num_kernels(graphs->batch_sizes().back()),
                    graphs->batch_sizes().back());
    if (memory.graphs_measured && captured > memory.graph_reserve)
        MI_LOG_WARN(
            "CUDA graphs took {:.0f} MiB more on the second capture, beyond the {:.0f} MiB set "
            "aside",
            captured / kMiB, memory.graph_reserve / kMiB);
}

size_t CudaModelRunner::Impl::page_bytes() const {
    const CudaModel::AttentionDims d = model->attention_dims();
    const size_t element = opt.fp8_kv_cache() ? 1 : 2;  // e4m3 or bf16
    return size_t(2 * d.num_layers * opt.page_size * d.num_kv_heads * d.head_dim) * element;
}

void CudaModelRunner::Impl::allocate_kv(int64_t pages) {
    dummy_page = pages;
    kv.clear();  // free the old pool first
    if (pages == 0) return;
    const CudaModel::AttentionDims d = model->attention_dims();
    // --kv-cache-dtype fp8: e4m3 bytes at the checkpoint's scales, else 1.0 (as vLLM).
    const DType dtype = opt.fp8_kv_cache() ? DType::kU8 : DType::kBF16;
    const std::vector<std::pair<float, float>> scales = model->checkpoint_kv_scales();
    for (int64_t l = 0; l < d.num_layers; ++l) {
        const auto [k_scale, v_scale] = scales.at(size_t(l));
        kv.push_back(
            {cuda::device_tensor({pages + 1, opt.page_size, d.num_kv_heads, d.head_dim}, dtype),
             cuda::device_tensor({pages + 1, opt.page_size, d.num_kv_heads, d.head_dim}, dtype),
             k_scale > 0.f ? k_scale : 1.f, v_scale > 0.f ? v_scale : 1.f});
    }
}

size_t CudaModelRunner::Impl::capture_graphs(bool warm_up) {
    const int64_t G = max_pages_per_seq;
    stream.synchronize();  // capture writes the staging without waiting for its last copy
    return graphs->capture(
        dummy_page, warm_up, host_ints(), [&](int64_t b) { plan_attention(b); },
        [&](int64_t b) {
            run_model({b, b, b, 1, graph_max_seq_len, in.graph_table, G, /*placeholders=*/true});
        },
        stream.get());
}

void CudaModelRunner::Impl::plan_attention(int64_t s) {
    attention->plan(std::span<const int32_t>(host_ints() + in.query_start, size_t(s + 1)),
                    std::span<const int32_t>(host_ints() + in.seq_lens, size_t(s)), stream.get());
}

CudaModelRunner::~CudaModelRunner() {
    if (parallel_) parallel_->end();  // the other ranks leave their step loops first
    impl_.reset();                    // then this rank's model, which uses the communicator
}
const ModelConfig& CudaModelRunner::config() const {
    return impl_->model->config();
}
int64_t CudaModelRunner::num_pages() const {
    return impl_->num_pages;
}
int64_t CudaModelRunner::num_state_slots() const {
    return impl_->num_state_slots;
}

void CudaModelRunner::trace_routing(Tensor* trace) {
    impl_->model->trace_routing(trace);
}

Tensor CudaModelRunner::last_logits() const {
    impl_->stream.synchronize();
    return cuda::to_host(impl_->model->logits(impl_->last_num_logits));
}

std::vector<SampledToken> CudaModelRunner::run(const Batch& batch,
                                               std::span<const SamplerInput> sampling) {
    launch(batch, sampling);
    return collect();
}

// Everything goes on the runner's one stream, so a step's kernels run after the previous
// step's: the K/V pages and slots a finished request frees are rewritten only after the step
// that still wrote them, with no event. Only host memory needs care: the input staging and the
// sampler's output buffers come in pairs, each guarded by an event.
void CudaModelRunner::launch(const Batch& batch, std::span<const SamplerInput> sampling,
                             const std::function<void()>& before_sampling) {
    Impl& m = *impl_;
    MI_CHECK(sampling.size() == batch.logits_indices.size(), "{} sampling inputs for {} rows",
             sampling.size(), batch.logits_indices.size());
    const ForwardBatch fb = forward_batch_of(batch);
    if (parallel_) parallel_->steps->broadcast(fb);  // every rank runs it too
    std::unique_ptr<Impl::StepEvents> events;
    if (m.opt.measure_gpu_idle) {
        events = std::make_unique<Impl::StepEvents>();
        events->start.record(m.stream.get());
    }
    m.forward(fb);
    if (before_sampling) before_sampling();
    const int64_t n = int64_t(sampling.size());
    m.sampler->launch(m.model->logits(n), sampling, m.stream.get());
    m.share_tokens(n);
    if (events) {
        events->end.record(m.stream.get());
        m.timed.push_back(std::move(events));
    }
}

std::vector<SampledToken> CudaModelRunner::collect() {
    Impl& m = *impl_;
    std::vector<SampledToken> tokens = m.sampler->collect();
    if (!m.timed.empty()) {  // the step is done: its events and the one before it have run
        std::unique_ptr<Impl::StepEvents> step = std::move(m.timed.front());
        m.timed.pop_front();
        step->end.synchronize();
        m.timing.busy_ms += cuda::Event::elapsed_ms(step->start, step->end);
        if (m.last_timed)
            m.timing.idle_ms +=
                std::max(0.f, cuda::Event::elapsed_ms(m.last_timed->end, step->start));
        ++m.timing.steps;
        m.last_timed = std::move(step);
    }
    return tokens;
}

std::optional<ModelRunner::StepTiming> CudaModelRunner::step_timing() const {
    if (!impl_->opt.measure_gpu_idle) return std::nullopt;
    return impl_->timing;
}

void CudaModelRunner::reset_step_timing() {
    impl_->timing = {};
    impl_->last_timed.reset();
}

// Under tensor parallelism too: rank 0 broadcasts each step's tokens, so every rank resolves
// the next step's placeholders from the same values (share_tokens).
bool CudaModelRunner::overlaps() const {
    return true;
}

// Tensor parallelism: the step's sampled tokens (rank 0's) into every rank's token buffer, on
// the stream, where the next step's placeholders are read from. Every rank calls it after each
// step with the step's sampled rows.
void CudaModelRunner::Impl::share_tokens(int64_t rows) {
    if (!comm || rows == 0) return;
    Tensor tokens = sampler->device_tokens().slice_rows(0, rows);
    comm->broadcast_from_rank0(tokens, stream.get());
}

int32_t* CudaModelRunner::Impl::next_staging() {
    staging ^= 1;
    staged[staging].synchronize();  // its last copy has run (long ago: two steps back)
    return host_ints();
}

void CudaModelRunner::forward_only(const ForwardBatch& batch) {
    impl_->forward(batch);
    impl_->share_tokens(int64_t(batch.logits_indices.size()));
    impl_->stream.synchronize();  // keeps this rank within a step of rank 0
}

void CudaModelRunner::Impl::forward(const ForwardBatch& b) {
    const int64_t n = b.num_tokens(), s = b.num_seqs(),
                  num_logits = int64_t(b.logits_indices.size());
    MI_CHECK(n <= opt.max_num_batched_tokens && s <= opt.max_num_seqs &&
                 b.max_pages <= max_pages_per_seq,
             "batch of {} tokens / {} seqs / {} pages exceeds the runner's buffers", n, s,
             b.max_pages);
    last_num_logits = num_logits;
    restore_states(b.state_restores);
    int32_t* host = next_staging();
    if (const int64_t graph_size = graphs ? graphs->stage(b, dummy_page, host, stream.get()) : 0) {
        staged[staging].record(stream.get());
        plan_attention(graph_size);
        graphs->launch(graph_size, stream.get());  // resolves placeholders itself
        return;
    }
    StepShape shape{
        n,           s,
        num_logits,  0,
        0,           in.table,
        b.max_pages, std::any_of(b.input_ids.begin(), b.input_ids.end(), is_placeholder)};
    for (int64_t i = 0; i < s; ++i) {
        shape.max_query_len = std::max<int64_t>(
            shape.max_query_len, b.query_start[size_t(i) + 1] - b.query_start[size_t(i)]);
        shape.max_seq_len = std::max<int64_t>(shape.max_seq_len, b.seq_lens[size_t(i)]);
    }
    // One host->device copy of everything the step reads.
    const int64_t ints = in.write(b, host);
    MI_CUDA_CHECK(cudaMemcpyAsync(dev_inputs.raw(), host, size_t(ints) * 4, cudaMemcpyHostToDevice,
                                  stream.get()));
    staged[staging].record(stream.get());
    plan_attention(s);
    run_model(shape);
}

cuda::StepInputs CudaModelRunner::Impl::step_inputs(const StepShape& sh) const {
    const int64_t n = sh.num_tokens, s = sh.num_seqs;
    return {.num_tokens = n,
            .num_seqs = s,
            .num_logits = sh.num_logits,
            .max_query_len = sh.max_query_len,
            .max_seq_len = sh.max_seq_len,
            .token_ids = inputs_view(0, {n}),
            .positions = inputs_view(in.positions, {n}),
            .slots = inputs_view(in.slots, {n}),
            .query_start = inputs_view(in.query_start, {s + 1}),
            .seq_lens = inputs_view(in.seq_lens, {s}),
            .block_table = inputs_view(sh.table_offset, {s, sh.table_stride}),
            .logits_indices = inputs_view(in.logits_indices, {sh.num_logits}),
            .state_slots = inputs_view(in.state_slots, {s}),
            .snapshot_rows = inputs_view(in.snapshot_rows, {s}),
            .snapshot_slots = inputs_view(in.snapshot_slots, {s})};
}

// Overlap: the token ids that name the last step's samples, replaced by them on the device.
void CudaModelRunner::Impl::resolve_placeholders(const cuda::StepInputs& inputs) {
    Tensor ids = inputs.token_ids;
    cuda::resolve_placeholders(ids, sampler->device_tokens(), stream.get());
}

void CudaModelRunner::Impl::run_model(const StepShape& sh) {
    const cuda::StepInputs inputs = step_inputs(sh);
    if (sh.placeholders) resolve_placeholders(inputs);
    model->forward(inputs, kv, states, *attention, stream.get());
}

namespace {

// Rank `rank`'s shard, bf16, on the current device (dummy weights are made there).
ModelWeights rank_weights(const ModelConfig& model, const EngineConfig& config,
                          const std::string& load_format, uint64_t seed, int64_t rank) {
    const WeightTarget target{
        .dtype = DType::kBF16, .rank = rank, .world = config.tensor_parallel_size};
    return parse_load_format(load_format) == LoadFormat::kDummy
               ? dummy_cuda_weights(model, seed, target)
               : load_weights(model, config.model_dir, target);
}

// Past NCCL's start a failing rank leaves the others waiting in a collective, which has no
// timeout: say why and end the process instead of hanging.
[[noreturn]] void abort_group(int64_t rank, const std::exception& e) {
    MI_LOG_ERROR(
        "tensor-parallel rank {}: {} (ending the process: the other ranks would wait in "
        "NCCL forever)",
        rank, e.what());
    std::_Exit(1);
}

}  // namespace

std::unique_ptr<CudaModelRunner> CudaModelRunner::load_parallel(const EngineConfig& config) {
#ifndef MINIINFER_HAS_NCCL
    fail("--tensor-parallel-size {} on CUDA needs NCCL, which this build of MiniInfer lacks",
         config.tensor_parallel_size);
#else
    const int64_t world = config.tensor_parallel_size, here = world / config.nnodes;
    MI_CHECK(world > 1 && config.node_rank == 0, "load_parallel: node 0 of a group only");
    if (config.enable_expert_parallel)
        fail(
            "--enable-expert-parallel runs on the CPU backend only so far (on CUDA, -tp splits "
            "every expert along its intermediate size)");
    if (cuda::device_count() < here)
        fail("--tensor-parallel-size {} over {} node(s) needs {} GPUs here, {} visible", world,
             config.nnodes, here, cuda::device_count());
    const ModelConfig model = ModelConfig::load(config.model_dir);
    const std::string id = cuda::NcclCommunicator::unique_id();
    Json welcome = tensor_parallel::welcome(config, model);
    welcome["nccl_id"] = tensor_parallel::to_hex(id);
    auto parallel = std::make_unique<Parallel>();
    parallel->steps = std::make_unique<StepBroadcaster>(config, welcome, run_cuda_rank);
    // NCCL's start waits for every rank: first make sure every rank can come (its GPU, its
    // model), then let them all in at once.
    parallel->steps->wait_for_ranks();
    MI_CUDA_CHECK(cudaSetDevice(0));
    parallel->nccl = std::make_unique<cuda::NcclCommunicator>(id, 0, world);
    std::unique_ptr<CudaModelRunner> runner;
    try {
        runner = std::make_unique<CudaModelRunner>(
            config, model, rank_weights(model, config, config.load_format, config.seed, 0),
            parallel->nccl.get());
    } catch (const std::exception& e) {
        abort_group(0, e);
    }
    parallel->steps->wait_for_ranks();
    MI_LOG_INFO("tensor-parallel: all {} ranks joined NCCL and built their runners", world);
    runner->parallel_ = std::move(parallel);
    return runner;
#endif
}

void run_cuda_rank(const EngineConfig& config, int64_t rank, int64_t local_device,
                   StepReceiver& steps, const Json& welcome) {
#ifndef MINIINFER_HAS_NCCL
    (void)config, (void)local_device, (void)steps, (void)welcome;
    fail("tensor-parallel rank {} on CUDA needs NCCL, which this build of MiniInfer lacks", rank);
#else
    // Whether this rank can come (rank 0 lets every rank into NCCL only if all can).
    std::string refusal;
    std::optional<ModelConfig> model;
    try {
        if (local_device >= cuda::device_count())
            fail("needs GPU {} of this node, {} visible", local_device, cuda::device_count());
        MI_CUDA_CHECK(cudaSetDevice(int(local_device)));
        model.emplace(ModelConfig::load(config.model_dir));
        tensor_parallel::check_same_model(welcome, *model, config.model_dir);
    } catch (const Error& e) {
        refusal = e.what();
    }
    if (!steps.report(refusal)) {
        if (!refusal.empty()) fail("tensor-parallel rank {}: {}", rank, refusal);
        return;  // another rank cannot come
    }
    cuda::NcclCommunicator nccl(tensor_parallel::from_hex(welcome.at("nccl_id").get<std::string>()),
                                rank, config.tensor_parallel_size);
    EngineConfig rank_config = config;  // rank 0's KV cache dtype, whatever this node was given
    rank_config.kv_cache_dtype = welcome.at("kv_cache_dtype").get<std::string>();
    try {
        CudaModelRunner runner(
            rank_config, *model,
            rank_weights(*model, config, welcome.at("load_format").get<std::string>(),
                         welcome.at("seed").get<uint64_t>(), rank),
            &nccl);
        if (!steps.report("")) return;
        while (const std::optional<DecodedStep> step = steps.next_step())
            runner.forward_only(step->batch());
    } catch (const std::exception& e) {
        abort_group(rank, e);
    }
#endif
}

}  // namespace miniinfer
