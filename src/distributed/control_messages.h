// What the ranks of a tensor-parallel group say to each other over their TCP links
// (distributed/tcp_communicator.h), besides the collectives: rank 0's welcome once they have
// joined, its answer to their statuses (go on, or the end), then one control message per step (the
// step's batch, which every rank runs too) and the end.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "config/engine_config.h"
#include "config/model_config.h"
#include "core/json.h"
#include "layers/forward_batch.h"

namespace miniinfer {

// A step's batch, to every other rank: 'S' + its arrays.
std::string encode_step(const ForwardBatch& b);
// A decoded step: the arrays a ForwardBatch views.
struct DecodedStep {
    std::vector<int32_t> parts[8];
    int64_t max_pages = 0;
    ForwardBatch batch() const {
        return {parts[0],  parts[1], parts[2], parts[3], parts[4],
                max_pages, parts[5], parts[6], parts[7]};
    }
};
// The other control messages: `step` is set for a step, unset for the end ('Q', or an empty
// message). Throws Error on a message that is neither.
std::optional<DecodedStep> decode_control(const std::string& message);
constexpr char kQuitMessage = 'Q';
// Rank 0's answer once every rank has reported ready (the end answers a refusal).
constexpr char kGoMessage = 'G';

namespace tensor_parallel {
// How long ranks wait for each other to join (other nodes may start later, by hand).
inline constexpr std::chrono::seconds kJoinTimeout{300};
// What rank 0 sends the others once they have joined: its settings (KV pages and page size for
// the CPU, seed, load format, expert parallelism) and enough of the model to catch a node that
// loaded another; a backend may add fields (the NCCL id, as to_hex of its bytes).
Json welcome(const EngineConfig& config, const ModelConfig& model);
// Throws Error if `model` (this rank's) is not the one the welcome names.
void check_same_model(const Json& welcome, const ModelConfig& model, const std::string& model_dir);
// Bytes as lowercase hex digits, and back (the NCCL id inside the JSON welcome); from_hex
// refuses anything but pairs of such digits ("a bad NCCL id").
std::string to_hex(const std::string& bytes);
std::string from_hex(const std::string& hex);
}  // namespace tensor_parallel

}  // namespace miniinfer
