// Philox4x32-10, the counter-based generator of Salmon et al., "Parallel Random Numbers: As
// Easy as 1, 2, 3" (SC'11). A draw is a pure function of (key, counter), so a request's random
// number at step t depends only on its seed and t, never on the batch it shares or the order of
// threads. No dependencies; the same code compiles for the host and, under nvcc, the device.
#pragma once

#include <cstdint>

#ifdef __CUDACC__
#define MI_PHILOX_FN __host__ __device__ inline
#else
#define MI_PHILOX_FN inline
#endif

namespace miniinfer {

struct Philox4x32 {
    uint32_t v[4];
};

// One Philox4x32 block: 10 rounds of two 32x32→64 multiplies over the four counter words, the
// key bumped by the Weyl constants between rounds.
MI_PHILOX_FN Philox4x32 philox4x32_10(Philox4x32 ctr, uint32_t key0, uint32_t key1) {
    constexpr uint32_t kMul0 = 0xD2511F53u, kMul1 = 0xCD9E8D57u;
    constexpr uint32_t kWeyl0 = 0x9E3779B9u, kWeyl1 = 0xBB67AE85u;
    for (int round = 0; round < 10; ++round) {
        if (round > 0) key0 += kWeyl0, key1 += kWeyl1;
        const uint64_t p0 = uint64_t(kMul0) * ctr.v[0];
        const uint64_t p1 = uint64_t(kMul1) * ctr.v[2];
        ctr = {{uint32_t(p1 >> 32) ^ ctr.v[1] ^ key0, uint32_t(p1),
                uint32_t(p0 >> 32) ^ ctr.v[3] ^ key1, uint32_t(p0)}};
    }
    return ctr;
}

// The top 24 bits as a float in [0, 1): every value is exact, and 1.0 is never produced.
MI_PHILOX_FN float uint_to_unit_float(uint32_t x) {
    return float(x >> 8) * (1.0f / 16777216.0f);
}

// The sampler's uniform for (seed, step): key = seed, counter = {step, 0, 0}, first output word.
MI_PHILOX_FN float philox_uniform(uint64_t seed, uint64_t step) {
    const Philox4x32 ctr = {{uint32_t(step), uint32_t(step >> 32), 0u, 0u}};
    return uint_to_unit_float(philox4x32_10(ctr, uint32_t(seed), uint32_t(seed >> 32)).v[0]);
}

}  // namespace miniinfer

#undef MI_PHILOX_FN
