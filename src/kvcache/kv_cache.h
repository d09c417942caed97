// KvCache: the paged K/V storage of every layer.
//
// Per layer one K and one V tensor of [num_pages, page_size, num_kv_heads, head_dim]. A token's
// slot is page * page_size + offset, so within a layer its K row starts at slot * num_kv_heads
// * head_dim: one index, whatever the page size. Pages are handed out by the page allocator
// (scheduler side); this class only owns the memory. The CPU backend stores f32.
#pragma once

#include <vector>

#include "core/tensor.h"

namespace miniinfer {

class KvCache {
  public:
    KvCache(int64_t num_layers, int64_t num_pages, int64_t page_size, int64_t num_kv_heads,
            int64_t head_dim);

    int64_t num_pages() const { return num_pages_; }
    int64_t page_size() const { return page_size_; }
    const Tensor& k(int64_t layer) const { return k_.at(size_t(layer)); }
    const Tensor& v(int64_t layer) const { return v_.at(size_t(layer)); }

  private:
    int64_t num_pages_, page_size_;
    std::vector<Tensor> k_, v_;  // [num_pages, page_size, num_kv_heads, head_dim] f32
};

}  // namespace miniinfer
