// What the engine tests share.
#pragma once

#include <cstdint>

#include "config/sampling_params.h"

namespace miniinfer::testing {

// Greedy decoding of exactly max_tokens tokens (EOS not special).
inline SamplingParams greedy(int64_t max_tokens) {
    SamplingParams p;
    p.temperature = 0;
    p.max_tokens = max_tokens;
    p.ignore_eos = true;
    return p;
}

}  // namespace miniinfer::testing
