// Tuning: the kernel thresholds that remain once each comparison was settled (the decisions and
// their measurements: bench/RESULTS.md#decisions). One value travels with EngineConfig to the
// runner, which passes each field to the layer or kernel that reads it; tests set fields
// in-process. Only bench code overrides them from outside (`miniinfer bench --tuning key=value`).
#pragma once

#include <string>
#include <string_view>

namespace miniinfer {

struct Tuning {
    // CUDA: programmatic dependent launch, each kernel's prologue overlapping the previous
    // kernel's tail (bench/RESULTS.md#pdl).
    bool pdl = true;
    // A decode split takes at least this many keys: below it a split's fixed cost (its Q, the
    // first loads' latency, the merge) outweighs its parallelism (#decode-min-keys).
    int decode_min_keys = 64;
    // fa2: decode steps of up to this many sequences fold the q/k norm, RoPE and K/V store into
    // the decode kernel (GQA groups of 1 to 3); 0 never (#decode-qkv-step).
    int decode_qkv_max_seqs = 32;
    // fa2: the most splits of a sequence's keys merged as one thread-block cluster at small
    // batches; -1: 16 for the tensor-core decode, none for the CUDA-core one; 0 or 1: never
    // (#decode-clusters).
    int decode_cluster_splits = -1;
    // fa2: from 16 sequences on the decode takes them longest first (#decode-order).
    bool decode_longest_first = true;
    // MoE: SiLU·mul runs inside the gate_up grouped GEMM up to this row tile, as its own kernel
    // above (#moe-silu-tile).
    int moe_silu_tile = 32;
};

// Sets one field from "key=value" (bench's --tuning); throws Error naming the key or value.
void set_tuning(Tuning& tuning, std::string_view key_value);
// "pdl=1 decode_min_keys=64 ..." : every field, for bench output.
std::string to_string(const Tuning& tuning);

}  // namespace miniinfer
