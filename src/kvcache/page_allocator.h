// PageAllocator: hands out KV-cache pages (indices into the KvCache's page dimension).
// All-or-nothing allocation; freeing a page twice or a page out of range is a bug (MI_CHECK).
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

namespace miniinfer {

class PageAllocator {
  public:
    explicit PageAllocator(int32_t num_pages);

    int32_t num_pages() const { return int32_t(is_free_.size()); }
    int32_t num_free() const { return int32_t(free_list_.size()); }
    bool is_free(int32_t page) const { return is_free_.at(size_t(page)) != 0; }

    // n pages, or nullopt (and nothing taken) if fewer than n are free.
    std::optional<std::vector<int32_t>> allocate(int32_t n);
    void free(std::span<const int32_t> pages);

  private:
    std::vector<int32_t> free_list_;  // a stack: recently freed pages are reused first
    std::vector<uint8_t> is_free_;
};

}  // namespace miniinfer
