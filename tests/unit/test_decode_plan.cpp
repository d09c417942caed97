// The fa2 decode's split choice (kernels/cuda/attention/decode_plan.h), a pure function the decode
// kernels run on the device: checked here on the host, for the shapes the benchmarks meet.
#include "kernels/cuda/attention/decode_plan.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <random>
#include <vector>

namespace miniinfer::cuda {
namespace {

struct Case {
    std::vector<int64_t> lens;
    int64_t blocks_per_key, slots, max_splits, min_keys;
};

int64_t chunk_of(const Case& c) {
    const int64_t total = std::accumulate(c.lens.begin(), c.lens.end(), int64_t(0));
    const int64_t longest = *std::max_element(c.lens.begin(), c.lens.end());
    return decode_chunk_keys(total, longest, c.blocks_per_key, c.slots, c.max_splits, c.min_keys);
}

// Blocks with keys: Σ ceil(len / chunk) per KV-head block.
int64_t busy_blocks(const Case& c, int64_t chunk) {
    int64_t n = 0;
    for (int64_t len : c.lens) n += (len + chunk - 1) / chunk;
    return n * c.blocks_per_key;
}

TEST(DecodePlan, BatchThatFillsTheGpuIsNotSplit) {
    // 30B-A3B decode256: 256 sequences of 128 .. 1148 keys, 4 KV heads, 3 blocks an SM on 132
    // SMs, a grid of 3 splits (planned from a 4,096-key bound).
    Case c{{}, 4, 396, 3, 128};
    for (int i = 0; i < 256; ++i) c.lens.push_back(128 + 4 * i);
    const int64_t chunk = chunk_of(c);
    EXPECT_GE(chunk, 1148);
    EXPECT_EQ(busy_blocks(c, chunk), 256 * 4);
}

TEST(DecodePlan, BatchOneSplitsByMinKeys) {
    // bs1 on the 0.6B: one sequence of 384 keys, 8 KV heads, 2,112 slots, 32 splits allowed.
    const Case c{{384}, 8, 2112, 32, 128};
    EXPECT_EQ(chunk_of(c), 128);  // 3 splits of 128 keys, not 24 of 16
    EXPECT_EQ(busy_blocks(c, chunk_of(c)), 3 * 8);
}

TEST(DecodePlan, MidBatchAboutOneWave) {
    // 100 sequences of about 800 keys on 2,112 slots, 5 splits allowed.
    Case c{{}, 8, 2112, 5, 128};
    for (int i = 0; i < 100; ++i) c.lens.push_back(700 + 2 * i);
    const int64_t chunk = chunk_of(c);
    EXPECT_GT(busy_blocks(c, chunk), 100 * 8);                           // split, to fill the GPU
    EXPECT_LE(busy_blocks(c, chunk), c.slots + 100 * c.blocks_per_key);  // about one wave
}

TEST(DecodePlan, RandomBatchesFitTheGridInGranules) {
    std::mt19937 rng(7);
    for (int trial = 0; trial < 2000; ++trial) {
        Case c{{},
               std::uniform_int_distribution<int64_t>(1, 16)(rng),
               std::uniform_int_distribution<int64_t>(1, 4096)(rng),
               std::uniform_int_distribution<int64_t>(1, 64)(rng),
               std::uniform_int_distribution<int64_t>(1, 256)(rng)};
        const int n = std::uniform_int_distribution<int>(1, 300)(rng);
        for (int i = 0; i < n; ++i)
            c.lens.push_back(std::uniform_int_distribution<int64_t>(1, 40960)(rng));
        const int64_t chunk = chunk_of(c);
        EXPECT_EQ(chunk % kDecodeChunkGranule, 0);
        EXPECT_GE(chunk, c.min_keys);
        // Every key of every sequence lies in one of the grid's splits.
        for (int64_t len : c.lens) EXPECT_LE((len + chunk - 1) / chunk, c.max_splits);
    }
}

// The host side of the plan: the grid's splits per sequence.
TEST(DecodePlan, KeysAllowWholeSplitsOfMinKeys) {
    EXPECT_EQ(decode_splits_the_keys_allow(1, 64), 1);
    EXPECT_EQ(decode_splits_the_keys_allow(64, 64), 1);
    EXPECT_EQ(decode_splits_the_keys_allow(65, 64), 2);
    EXPECT_EQ(decode_splits_the_keys_allow(1024, 64), 16);
}

TEST(DecodePlan, PlainSplitsFillWholeWaves) {
    // bs1 on the 30B-A3B's heads: 4 blocks a split, 396 slots: below a wave at every count, so
    // the most allowed (fill grows with the splits).
    EXPECT_EQ(decode_plain_splits(16, 4, 396), 16);
    // A wave exactly: 132 blocks a split on 396 slots fill 3 splits to 100%, 1 split to 33%.
    EXPECT_EQ(decode_plain_splits(8, 132, 396), 3);
    // Already a whole wave unsplit (396 blocks): one split.
    EXPECT_EQ(decode_plain_splits(8, 396, 396), 1);
    // 1.5 waves unsplit (fill 0.75); two splits make 3 whole waves.
    EXPECT_EQ(decode_plain_splits(8, 594, 396), 2);
    // Nothing fills to 90% within the bound: the best-filled count (250 a split on 396 slots:
    // 1 -> 0.63, 2 -> 0.63, 3 -> 0.95 would, but only 2 are allowed).
    EXPECT_EQ(decode_plain_splits(2, 250, 396), 1);
    // One split allowed: one. An occupancy that reads 0 counts as one slot (no division by
    // zero), where every count fills whole waves: the fewest, one.
    EXPECT_EQ(decode_plain_splits(1, 1000, 396), 1);
    EXPECT_EQ(decode_plain_splits(4, 3, 0), 1);
}

TEST(DecodePlan, ClusterSplitsOnlyWhenEveryClusterFitsAtOnce) {
    // bs1, 4 KV heads, a bound of 16 and 1,024 keys (16 splits of 64 allowed): 16.
    EXPECT_EQ(decode_cluster_splits(16, 1, 4, 33, 16), 16);
    // Fewer keys: as many as they allow, and none below two.
    EXPECT_EQ(decode_cluster_splits(16, 1, 4, 33, 5), 5);
    EXPECT_EQ(decode_cluster_splits(16, 1, 4, 33, 1), 0);
    // More clusters than the GPU holds at once (9 sequences x 4 > 33): the plain form.
    EXPECT_EQ(decode_cluster_splits(16, 9, 4, 33, 16), 0);
    EXPECT_EQ(decode_cluster_splits(16, 8, 4, 33, 16), 16);
    // Clusters off (bound 0 or 1).
    EXPECT_EQ(decode_cluster_splits(0, 1, 4, 33, 16), 0);
    EXPECT_EQ(decode_cluster_splits(1, 1, 4, 33, 16), 0);
}

TEST(DecodePlan, ClusterFormAtSmallBatchesElsePlainSplits) {
    // The 30B-A3B's tensor-core decode on an H100: 4 KV heads, 132 SMs x 3 blocks, 33 clusters
    // of 16 at once, a bound of 16, min 64 keys a split, the grid's 64 splits.
    const DecodeOccupancy gpu{132, 3, 33};
    DecodeBounds b{1, 4096, 4, 64, 16, 64};
    DecodePlan p = plan_decode(b, gpu);
    EXPECT_TRUE(p.cluster);
    EXPECT_EQ(p.num_splits, 16);
    // 8 sequences x 4 KV heads = 32 clusters still fit at once; each is one cluster, not
    // counted once per sequence again.
    b.num_seqs = 8;
    p = plan_decode(b, gpu);
    EXPECT_TRUE(p.cluster);
    EXPECT_EQ(p.num_splits, 16);
    // 9 x 4 = 36 do not: the plain form, splits filling whole waves of 396 blocks.
    b.num_seqs = 9;
    p = plan_decode(b, gpu);
    EXPECT_FALSE(p.cluster);
    EXPECT_EQ(p.num_splits, decode_plain_splits(64, 36, 396));
    // Clusters off: the plain form at bs1 too, bounded by the keys (4,096 / 64 = 64 splits).
    b = {1, 4096, 4, 64, 0, 64};
    p = plan_decode(b, gpu);
    EXPECT_FALSE(p.cluster);
    EXPECT_EQ(p.num_splits, decode_plain_splits(64, 4, 396));
}

TEST(DecodePlan, WorkspaceAndShortSequencesBoundThePlainSplits) {
    const DecodeOccupancy gpu{132, 4, 0};
    // 100 keys allow 2 splits of 64 at most, whatever the waves would like.
    EXPECT_LE(plan_decode({1, 100, 8, 64, 0, 64}, gpu).num_splits, 2);
    // A workspace that holds one split: never split.
    EXPECT_EQ(plan_decode({1, 8192, 8, 64, 0, 1}, gpu).num_splits, 1);
    // A workspace bound of 0 (no workspace) reads as one split too.
    EXPECT_EQ(plan_decode({1, 8192, 8, 64, 0, 0}, gpu).num_splits, 1);
    // A batch that fills the GPU: one split.
    EXPECT_EQ(plan_decode({512, 1024, 8, 64, 0, 64}, gpu).num_splits, 1);
}

}  // namespace
}  // namespace miniinfer::cuda
