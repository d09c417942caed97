// StateCache: the recurrent state of the hybrid models' Gated DeltaNet layers, one slot per
// running request (EngineConfig::num_state_slots; the scheduler hands the slots out, as the page
// allocator does pages for the KvCache).
//
// Per Gated DeltaNet layer a conv window [num_slots, kernel - 1, conv_dim] (the last inputs of
// every channel, oldest first) and a recurrent state S [num_slots, value heads, key_head_dim,
// value_head_dim], both f32: the layout kernels/cpu/gated_delta_net.h's ops read and update in
// place. A request starting at its first token starts from zeros (reset); copy() moves a whole
// state between slots (prefix-cache snapshots).
#pragma once

#include <cstdint>
#include <vector>

#include "config/model_config.h"
#include "core/tensor.h"

namespace miniinfer {

class StateCache {
  public:
    // Slots for every Gated DeltaNet layer of `model` (none if it has none).
    StateCache(const ModelConfig& model, int64_t num_slots);

    int64_t num_slots() const { return num_slots_; }
    int64_t num_layers() const { return int64_t(conv_.size()); }
    // The Gated DeltaNet layer's tensors; `layer` counts those layers only (0 .. num_layers).
    Tensor& conv(int64_t layer) { return conv_.at(size_t(layer)); }
    Tensor& recurrent(int64_t layer) { return recurrent_.at(size_t(layer)); }
    // One slot's bytes over all layers (ModelConfig::gdn_state_bytes with an f32 window).
    int64_t slot_bytes() const;

    void reset(int32_t slot);             // zeros in every layer
    void copy(int32_t from, int32_t to);  // every layer's window and S

  private:
    void check_slot(int32_t slot) const;

    int64_t num_slots_;
    std::vector<Tensor> conv_, recurrent_;
};

}  // namespace miniinfer
