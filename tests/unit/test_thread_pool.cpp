#include <gtest/gtest.h>

#include <atomic>
#include <stdexcept>
#include <vector>

#include "core/thread_pool.h"

using namespace miniinfer;

TEST(ThreadPool, CoversEveryIndexOnce) {
    ThreadPool pool(4);
    for (int64_t n : {0, 1, 3, 17, 1000, 100003}) {
        std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
        pool.parallel_for(n, [&](int64_t b, int64_t e) {
            for (int64_t i = b; i < e; ++i) hits[size_t(i)]++;
        });
        for (int64_t i = 0; i < n; ++i)
            ASSERT_EQ(hits[size_t(i)].load(), 1) << "n=" << n << " i=" << i;
    }
}

TEST(ThreadPool, ManyRoundsAndMinChunk) {
    ThreadPool pool(3);
    std::atomic<int64_t> sum = 0;
    for (int round = 0; round < 200; ++round)
        pool.parallel_for(
            100, [&](int64_t b, int64_t e) { sum += e - b; }, 7);
    EXPECT_EQ(sum.load(), 200 * 100);
}

TEST(ThreadPool, RethrowsInCaller) {
    ThreadPool pool(2);
    EXPECT_THROW(pool.parallel_for(64,
                                   [](int64_t b, int64_t) {
                                       if (b == 0) throw std::runtime_error("boom");
                                   }),
                 std::runtime_error);
    // Still usable afterwards.
    std::atomic<int> n = 0;
    pool.parallel_for(10, [&](int64_t b, int64_t e) { n += int(e - b); });
    EXPECT_EQ(n.load(), 10);
}
