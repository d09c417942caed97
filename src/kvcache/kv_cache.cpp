#include "kvcache/kv_cache.h"

#include "core/check.h"

namespace miniinfer {

KvCache::KvCache(int64_t num_layers, int64_t num_pages, int64_t page_size, int64_t num_kv_heads,
                 int64_t head_dim)
    : num_pages_(num_pages), page_size_(page_size) {
    MI_CHECK(num_layers > 0 && num_pages > 0 && page_size > 0, "bad KV cache geometry");
    for (int64_t l = 0; l < num_layers; ++l) {
        k_.push_back(Tensor::zeros({num_pages, page_size, num_kv_heads, head_dim}, DType::kF32));
        v_.push_back(Tensor::zeros({num_pages, page_size, num_kv_heads, head_dim}, DType::kF32));
    }
}

}  // namespace miniinfer
