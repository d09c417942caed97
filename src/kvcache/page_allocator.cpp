#include "kvcache/page_allocator.h"

#include "core/check.h"

namespace miniinfer {

PageAllocator::PageAllocator(int32_t num_pages) : is_free_(static_cast<size_t>(num_pages), 1) {
    MI_CHECK(num_pages >= 0, "negative page count {}", num_pages);
    for (int32_t p = num_pages; p-- > 0;) free_list_.push_back(p);  // page 0 comes out first
}

std::optional<std::vector<int32_t>> PageAllocator::allocate(int32_t n) {
    MI_CHECK(n >= 0, "allocate({})", n);
    if (n > num_free()) return std::nullopt;
    std::vector<int32_t> pages(free_list_.end() - n, free_list_.end());
    free_list_.resize(free_list_.size() - size_t(n));
    for (int32_t p : pages) is_free_[size_t(p)] = 0;
    return pages;
}

void PageAllocator::free(std::span<const int32_t> pages) {
    for (int32_t p : pages) {
        MI_CHECK(p >= 0 && p < num_pages() && !is_free_[size_t(p)],
                 "freeing page {} (free or out of range)", p);
        is_free_[size_t(p)] = 1;
        free_list_.push_back(p);
    }
}

}  // namespace miniinfer
