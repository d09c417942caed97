#include "engine/piecewise_graphs.h"

#include <algorithm>

#include "core/check.h"
#include "core/cuda/cuda_check.h"

namespace miniinfer {

// The attention backend a captured forward pass sees: each run() is one layer's attention call,
// recorded with its buffers; while capturing, the capture is cut there (the graph so far is a
// piece) and begun again after it.
class PiecewiseGraphs::Recorder final : public cuda::AttentionBackend {
  public:
    Recorder(cudaStream_t stream, Pieces* into) : stream_(stream), into_(into) {}
    const char* name() const override { return "piecewise recorder"; }
    void plan(std::span<const int32_t>, std::span<const int32_t>, cudaStream_t) override {}
    void run(const cuda::AttentionParams& p, cudaStream_t stream) override {
        MI_CHECK(stream == stream_ && p.qkv_step == nullptr,
                 "piecewise graphs: an attention call they cannot replay");
        if (!into_) {  // the warm-up run: no attention (zeros in its place), nothing recorded
            MI_CUDA_CHECK(cudaMemsetAsync(p.out->raw(), 0, p.out->nbytes(), stream));
            return;
        }
        into_->calls.push_back(
            {*p.q, *p.k_cache, *p.v_cache, *p.out, p.scale, p.k_scale, p.v_scale});
        end_piece();
        MI_CUDA_CHECK(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal));
    }
    // Ends the capture under way and keeps its graph, instantiated and uploaded, as a piece.
    void end_piece() {
        cudaGraph_t graph = nullptr;
        MI_CUDA_CHECK(cudaStreamEndCapture(stream_, &graph));
        cudaGraphExec_t exec = nullptr;
        MI_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
        MI_CUDA_CHECK(cudaGraphDestroy(graph));  // the exec keeps what it needs
        into_->execs.push_back(exec);
        MI_CUDA_CHECK(cudaGraphUpload(exec, stream_));
    }

  private:
    cudaStream_t stream_;
    Pieces* into_;
};

PiecewiseGraphs::PiecewiseGraphs(StepInputLayout layout, int64_t max_tokens, int64_t page_size,
                                 int32_t* device_inputs)
    : layout_(layout), page_size_(page_size), device_(device_inputs) {
    // 16, then 32 tokens apart up to 256, then a quarter of the size apart (a multiple of 64):
    // at most a fifth of a large step's rows are padding.
    for (int64_t n = 16; n <= max_tokens; n = n < 32 ? 32 : n < 256 ? n + 32 : n + n / 4 / 64 * 64)
        sizes_.push_back(n);
    if (max_tokens >= 16 && sizes_.back() != max_tokens) sizes_.push_back(max_tokens);
}

PiecewiseGraphs::~PiecewiseGraphs() {
    destroy();
}

void PiecewiseGraphs::destroy() {
    for (auto& [_, p] : pieces_)
        for (cudaGraphExec_t exec : p.execs) cudaGraphExecDestroy(exec);
    pieces_.clear();
}

int64_t PiecewiseGraphs::num_pieces() const {
    return pieces_.empty() ? 0 : int64_t(pieces_.begin()->second.execs.size());
}

size_t PiecewiseGraphs::clear() {
    return device_memory_freed_by([this] { destroy(); });
}

size_t PiecewiseGraphs::capture(int64_t dummy_page, int32_t* host,
                                const std::function<void(int64_t, cuda::AttentionBackend&)>& layers,
                                cudaStream_t stream) {
    destroy();
    const StepInputLayout& L = layout_;
    const int64_t N = sizes_.empty() ? 0 : sizes_.back();
    for (int64_t i = 0; i < N; ++i) {
        host[i] = 0;
        host[L.positions + i] = 0;
        host[L.slots + i] = int32_t(dummy_page * page_size_);
    }
    MI_CUDA_CHECK(
        cudaMemcpyAsync(device_, host, size_t(L.query_start) * 4, cudaMemcpyHostToDevice, stream));
    for (int64_t n : sizes_) {
        Recorder warm_up(stream, nullptr);
        layers(n, warm_up);
    }
    return device_memory_taken_by([&] {
        for (auto n = sizes_.rbegin(); n != sizes_.rend(); ++n) {
            Pieces& p = pieces_[*n];
            Recorder recorder(stream, &p);
            MI_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
            layers(*n, recorder);
            recorder.end_piece();
            // A padded row's attention output is never written: start it at zero, not at
            // whatever the allocation held (later it holds an earlier step's finite values).
            for (const AttentionCall& c : p.calls)
                MI_CUDA_CHECK(cudaMemsetAsync(c.out.raw(), 0, c.out.nbytes(), stream));
        }
    });
}

int64_t PiecewiseGraphs::stage(const ForwardBatch& b, int64_t dummy_page, int32_t* host,
                               cudaStream_t stream) {
    const int64_t n = b.num_tokens();
    auto it = std::lower_bound(sizes_.begin(), sizes_.end(), n);
    if (pieces_.empty() || n == 0 || it == sizes_.end()) return 0;
    const int64_t N = *it;
    const int64_t ints = layout_.write(b, N, int32_t(dummy_page * page_size_), host);
    MI_CUDA_CHECK(cudaMemcpyAsync(device_, host, size_t(ints) * 4, cudaMemcpyHostToDevice, stream));
    return N;
}

void PiecewiseGraphs::launch(const cuda::StepInputs& in, cuda::AttentionBackend& attention,
                             cudaStream_t stream) const {
    auto it = pieces_.find(in.num_tokens);
    MI_CHECK(it != pieces_.end(), "no piecewise CUDA graphs for {} tokens", in.num_tokens);
    const Pieces& p = it->second;
    for (size_t i = 0; i < p.execs.size(); ++i) {
        MI_CUDA_CHECK(cudaGraphLaunch(p.execs[i], stream));
        if (i == p.calls.size()) break;
        const AttentionCall& c = p.calls[i];
        Tensor out = c.out;  // a view: the same rows
        attention.run(cuda::with_step_sequences({.q = &c.q,
                                                 .k_cache = &c.k_cache,
                                                 .v_cache = &c.v_cache,
                                                 .scale = c.scale,
                                                 .out = &out,
                                                 .k_scale = c.k_scale,
                                                 .v_scale = c.v_scale},
                                                in),
                      stream);
    }
}

}  // namespace miniinfer
