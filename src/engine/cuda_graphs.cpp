#include "engine/cuda_graphs.h"

#include <algorithm>
#include <utility>

#include "core/check.h"
#include "core/cuda/cuda_check.h"

namespace miniinfer {

int64_t StepInputLayout::write(const ForwardBatch& b, int32_t* host) const {
    std::copy(b.input_ids.begin(), b.input_ids.end(), host);
    std::copy(b.positions.begin(), b.positions.end(), host + positions);
    std::copy(b.slot_mapping.begin(), b.slot_mapping.end(), host + slots);
    std::copy(b.query_start.begin(), b.query_start.end(), host + query_start);
    std::copy(b.seq_lens.begin(), b.seq_lens.end(), host + seq_lens);
    std::copy(b.logits_indices.begin(), b.logits_indices.end(), host + logits_indices);
    std::copy(b.state_slots.begin(), b.state_slots.end(), host + state_slots);
    if (b.snapshot_rows.empty()) {
        std::fill_n(host + snapshot_rows, b.num_seqs(), 0);
    } else {
        std::copy(b.snapshot_rows.begin(), b.snapshot_rows.end(), host + snapshot_rows);
        std::copy(b.snapshot_slots.begin(), b.snapshot_slots.end(), host + snapshot_slots);
    }
    std::copy(b.block_table.begin(), b.block_table.end(), host + table);
    return table + int64_t(b.block_table.size());
}

DecodeGraphs::DecodeGraphs(StepInputLayout layout, int64_t max_num_seqs, int64_t page_size,
                           int32_t* device_inputs, int32_t dummy_state_slot)
    : layout_(layout),
      max_num_seqs_(max_num_seqs),
      page_size_(page_size),
      dummy_state_slot_(dummy_state_slot),
      device_(device_inputs) {
    for (int64_t b : {1, 2, 4}) sizes_.push_back(b);
    for (int64_t b = 8; b <= max_num_seqs; b += b < 64 ? 8 : 16) sizes_.push_back(b);
    if (sizes_.back() != max_num_seqs && max_num_seqs > 4) sizes_.push_back(max_num_seqs);
    std::erase_if(sizes_, [&](int64_t b) { return b > max_num_seqs; });
}

DecodeGraphs::~DecodeGraphs() {
    destroy();
}

void DecodeGraphs::destroy() {
    for (auto& [_, g] : graphs_) {
        if (g.exec) cudaGraphExecDestroy(g.exec);
        if (g.graph) cudaGraphDestroy(g.graph);
    }
    graphs_.clear();
}

namespace {
// cudaMemGetInfo's free memory before and after f(), the device synchronised for each reading.
std::pair<size_t, size_t> free_memory_around(const std::function<void()>& f) {
    size_t free_before = 0, free_after = 0, total = 0;
    MI_CUDA_CHECK(cudaDeviceSynchronize());
    MI_CUDA_CHECK(cudaMemGetInfo(&free_before, &total));
    f();
    MI_CUDA_CHECK(cudaDeviceSynchronize());
    MI_CUDA_CHECK(cudaMemGetInfo(&free_after, &total));
    return {free_before, free_after};
}
}  // namespace

size_t device_memory_freed_by(const std::function<void()>& f) {
    const auto [before, after] = free_memory_around(f);
    return after > before ? after - before : 0;
}

size_t device_memory_taken_by(const std::function<void()>& f) {
    const auto [before, after] = free_memory_around(f);
    return before > after ? before - after : 0;
}

size_t DecodeGraphs::clear() {
    return device_memory_freed_by([this] { destroy(); });
}

size_t DecodeGraphs::capture(int64_t dummy_page, bool warm_up, int32_t* host,
                             const std::function<void(int64_t)>& plan,
                             const std::function<void(int64_t)>& step, cudaStream_t stream) {
    destroy();
    const StepInputLayout& L = layout_;
    const int64_t S = max_num_seqs_, G = L.max_pages_per_seq;
    for (int64_t i = 0; i < S; ++i) {
        host[i] = 0;
        host[L.positions + i] = 0;
        host[L.slots + i] = int32_t(dummy_page * page_size_);
        host[L.query_start + i] = int32_t(i);
        host[L.seq_lens + i] = 1;
        host[L.logits_indices + i] = int32_t(i);
        host[L.state_slots + i] = dummy_state_slot_;
        host[L.snapshot_rows + i] = 0;
        host[L.snapshot_slots + i] = 0;
    }
    host[L.query_start + S] = int32_t(S);
    std::fill(host + L.graph_table, host + L.graph_table + S * G, int32_t(dummy_page));
    MI_CUDA_CHECK(cudaMemcpyAsync(device_, host, size_t(L.graph_table + S * G) * 4,
                                  cudaMemcpyHostToDevice, stream));
    if (warm_up)
        for (int64_t b : sizes_) {
            plan(b);
            step(b);
        }
    return device_memory_taken_by([&] {
        for (auto b = sizes_.rbegin(); b != sizes_.rend(); ++b) {
            plan(*b);
            Graph& g = graphs_[*b];
            MI_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
            step(*b);
            MI_CUDA_CHECK(cudaStreamEndCapture(stream, &g.graph));
            size_t num_nodes = 0;
            MI_CUDA_CHECK(cudaGraphGetNodes(g.graph, nullptr, &num_nodes));
            std::vector<cudaGraphNode_t> nodes(num_nodes);
            MI_CUDA_CHECK(cudaGraphGetNodes(g.graph, nodes.data(), &num_nodes));
            for (cudaGraphNode_t node : nodes) {
                cudaGraphNodeType type;
                MI_CUDA_CHECK(cudaGraphNodeGetType(node, &type));
                g.kernels += type == cudaGraphNodeTypeKernel ? 1 : 0;
            }
            MI_CUDA_CHECK(cudaGraphInstantiate(&g.exec, g.graph, 0));
            // Upload now, so the memory a first replay would take is here and measured.
            MI_CUDA_CHECK(cudaGraphUpload(g.exec, stream));
        }
    });
}

int64_t DecodeGraphs::stage(const ForwardBatch& b, int64_t dummy_page, int32_t* host,
                            cudaStream_t stream) {
    const int64_t s = b.num_seqs(), G = layout_.max_pages_per_seq;
    if (graphs_.empty() || b.num_tokens() != s || int64_t(b.logits_indices.size()) != s) return 0;
    auto it = graphs_.lower_bound(s);
    if (it == graphs_.end()) return 0;
    const int64_t B = it->first;
    const StepInputLayout& L = layout_;
    for (int64_t i = 0; i < B; ++i) {
        const bool real = i < s;
        host[i] = real ? b.input_ids[size_t(i)] : 0;
        host[L.positions + i] = real ? b.positions[size_t(i)] : 0;
        host[L.slots + i] = real ? b.slot_mapping[size_t(i)] : int32_t(dummy_page * page_size_);
        host[L.query_start + i] = int32_t(i);
        host[L.seq_lens + i] = real ? b.seq_lens[size_t(i)] : 1;
        host[L.logits_indices + i] = int32_t(i);
        // Hybrids: padded rows start a state of their own in the dummy slot (position 0).
        host[L.state_slots + i] =
            real && !b.state_slots.empty() ? b.state_slots[size_t(i)] : dummy_state_slot_;
        host[L.snapshot_rows + i] =
            real && !b.snapshot_rows.empty() ? b.snapshot_rows[size_t(i)] : 0;
        host[L.snapshot_slots + i] =
            real && !b.snapshot_slots.empty() ? b.snapshot_slots[size_t(i)] : 0;
    }
    host[L.query_start + B] = int32_t(B);
    // The compact table goes to the eager table's place in the host buffer, the padded rows'
    // single page after it; both land at the graphs' fixed stride on the device.
    std::copy(b.block_table.begin(), b.block_table.end(), host + L.table);
    for (int64_t i = s; i < B; ++i) host[L.table + s * b.max_pages + (i - s)] = int32_t(dummy_page);
    MI_CUDA_CHECK(
        cudaMemcpyAsync(device_, host, size_t(L.table) * 4, cudaMemcpyHostToDevice, stream));
    MI_CUDA_CHECK(cudaMemcpy2DAsync(device_ + L.graph_table, size_t(G) * 4, host + L.table,
                                    size_t(b.max_pages) * 4, size_t(b.max_pages) * 4, size_t(s),
                                    cudaMemcpyHostToDevice, stream));
    if (B > s)
        MI_CUDA_CHECK(cudaMemcpy2DAsync(device_ + L.graph_table + s * G, size_t(G) * 4,
                                        host + L.table + s * b.max_pages, 4, 4, size_t(B - s),
                                        cudaMemcpyHostToDevice, stream));
    return B;
}

int64_t DecodeGraphs::num_kernels(int64_t batch_size) const {
    auto it = graphs_.find(batch_size);
    return it == graphs_.end() ? 0 : it->second.kernels;
}

void DecodeGraphs::launch(int64_t batch_size, cudaStream_t stream) const {
    auto it = graphs_.find(batch_size);
    MI_CHECK(it != graphs_.end(), "no CUDA graph for batch size {}", batch_size);
    MI_CUDA_CHECK(cudaGraphLaunch(it->second.exec, stream));
}

}  // namespace miniinfer
