#include <gtest/gtest.h>

#include <map>
#include <random>

#include "kvcache/page_allocator.h"
#include "kvcache/radix_cache.h"

using namespace miniinfer;

TEST(PageAllocator, AllOrNothingAndReuse) {
    PageAllocator a(4);
    auto p = a.allocate(3);
    ASSERT_TRUE(p.has_value());
    EXPECT_EQ(*p, (std::vector<int32_t>{2, 1, 0}));
    EXPECT_FALSE(a.allocate(2).has_value());
    EXPECT_EQ(a.num_free(), 1);
    a.free(std::span(*p).first(1));
    EXPECT_EQ(a.num_free(), 2);
    EXPECT_TRUE(a.is_free((*p)[0]));
    EXPECT_DEATH(a.free(std::span(*p).first(1)), "freeing page");
}

namespace {
std::vector<int32_t> seq(std::initializer_list<int32_t> v) {
    return v;
}
}  // namespace

TEST(RadixCache, MatchSplitLockEvict) {
    PageAllocator alloc(16);
    RadixCache cache(2, alloc);
    // Request A: 7 tokens -> 3 full pages + 1 partial.
    auto a_tokens = seq({1, 2, 3, 4, 5, 6, 7});
    auto a_pages = *alloc.allocate(4);
    EXPECT_EQ(cache.match_prefix(a_tokens).num_tokens, 0);
    EXPECT_EQ(cache.insert(a_tokens, std::span(a_pages).first(3)), 0);  // full pages only
    alloc.free(std::span(a_pages).subspan(3));                          // the partial page
    cache.check_invariants({});
    EXPECT_EQ(cache.num_cached_pages(), 3);

    // B shares 2 pages (4 tokens) then differs: the edge splits.
    auto b_tokens = seq({1, 2, 3, 4, 9, 9, 9});
    RadixCache::Match m = cache.match_prefix(b_tokens);
    EXPECT_EQ(m.num_tokens, 4);
    EXPECT_EQ(m.pages, (std::vector<int32_t>{a_pages[0], a_pages[1]}));
    cache.lock(m.node);
    auto b_own = *alloc.allocate(2);  // tokens 4..7
    std::vector<int32_t> b_pages = {m.pages[0], m.pages[1], b_own[0], b_own[1]};
    cache.check_invariants(b_own);
    // max_tokens stops the match early (the last prompt token must be computed).
    EXPECT_EQ(cache.match_prefix(seq({1, 2, 3, 4}), 3).num_tokens, 2);

    // Everything unlocked can go except B's locked path: 1 page (A's third) is evictable.
    EXPECT_EQ(cache.num_evictable_pages(), 1);
    EXPECT_EQ(cache.evict(100), 1);
    cache.check_invariants(b_own);

    // B finishes: its 3 full pages go in; the first 2 were the tree's already.
    EXPECT_EQ(cache.insert(b_tokens, std::span(b_pages).first(3)), 4);
    alloc.free(std::span(b_own).subspan(1));  // the partial page
    cache.unlock(m.node);
    cache.check_invariants({});
    EXPECT_EQ(cache.num_cached_pages(), 3);
    EXPECT_EQ(cache.evict(100), 3);
    EXPECT_EQ(alloc.num_free(), 16);
    cache.check_invariants({});
}

TEST(RadixCache, DuplicateInsertReturnsCachedLength) {
    PageAllocator alloc(8);
    RadixCache cache(4, alloc);
    auto t = seq({5, 5, 5, 5, 6, 6, 6, 6});
    auto first = *alloc.allocate(2), second = *alloc.allocate(2);
    EXPECT_EQ(cache.insert(t, first), 0);
    // The same tokens computed again by another request: all 8 already cached.
    EXPECT_EQ(cache.insert(t, second), 8);
    alloc.free(second);
    cache.check_invariants({});
}

// Random requests over a small alphabet (so prefixes are shared), a small pool, locks, inserts
// and evictions. After every step: invariants hold, and every matched page holds exactly the
// tokens the match claims.
TEST(RadixCache, FuzzAgainstPageContents) {
    std::mt19937 rng(42);
    const int page_size = 3, num_pages = 64;
    PageAllocator alloc(num_pages);
    RadixCache cache(page_size, alloc);
    std::map<int32_t, std::vector<int32_t>> content;  // page -> the tokens written into it
    struct Live {
        std::vector<int32_t> tokens, pages;
        RadixCache::Match match;
    };
    std::vector<Live> live;
    int64_t matched_pages = 0, evicted_pages = 0;
    auto request_pages = [&] {
        std::vector<int32_t> out;
        for (const auto& r : live)
            for (size_t i = size_t(r.match.pages.size()); i < r.pages.size(); ++i)
                out.push_back(r.pages[i]);
        return out;
    };
    for (int step = 0; step < 3000; ++step) {
        if (live.size() < 6 && rng() % 2 == 0) {
            Live r;
            const int len = 1 + int(rng() % 20);
            for (int i = 0; i < len; ++i) r.tokens.push_back(int32_t(rng() % 3));
            r.match = cache.match_prefix(r.tokens, len - 1);
            matched_pages += int64_t(r.match.pages.size());
            for (size_t i = 0; i < r.match.pages.size(); ++i)
                ASSERT_EQ(content.at(r.match.pages[i]),
                          std::vector<int32_t>(r.tokens.begin() + long(i) * page_size,
                                               r.tokens.begin() + long(i + 1) * page_size));
            cache.lock(r.match.node);
            const int32_t need = int32_t((len + page_size - 1) / page_size - r.match.pages.size());
            if (alloc.num_free() < need) evicted_pages += cache.evict(need - alloc.num_free());
            auto own = alloc.allocate(need);
            if (!own) {  // pool full of locked pages: give up on this request
                cache.unlock(r.match.node);
                continue;
            }
            r.pages = r.match.pages;
            for (int32_t p : *own) {
                const size_t i = r.pages.size();
                content[p].assign(r.tokens.begin() + long(i) * page_size,
                                  r.tokens.begin() + std::min<long>(long(i + 1) * page_size, len));
                r.pages.push_back(p);
            }
            live.push_back(std::move(r));
        } else if (!live.empty()) {
            const size_t idx = rng() % live.size();
            Live r = std::move(live[idx]);
            live.erase(live.begin() + long(idx));
            const size_t full = r.tokens.size() / page_size;
            const int64_t cached = cache.insert(r.tokens, std::span(r.pages).first(full));
            const size_t cached_pages = size_t(cached / page_size);
            for (size_t i = r.match.pages.size(); i < r.pages.size(); ++i)
                if (i < cached_pages || i >= full) alloc.free(std::span(&r.pages[i], 1));
            cache.unlock(r.match.node);
        }
        cache.check_invariants(request_pages());
    }
    for (auto& r : live) {
        for (size_t i = r.match.pages.size(); i < r.pages.size(); ++i)
            alloc.free(std::span(&r.pages[i], 1));
        cache.unlock(r.match.node);
    }
    live.clear();
    cache.evict(num_pages);
    EXPECT_EQ(alloc.num_free(), num_pages);  // no page leaked
    EXPECT_GT(matched_pages, 500);           // the fuzz really shared prefixes...
    EXPECT_GT(evicted_pages, 100);           // ...and ran out of pages
    cache.check_invariants({});
}
