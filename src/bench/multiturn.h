// The multi-turn chat workload (`miniinfer bench --workload multiturn`): conversations that
// resend their history, so that every turn after the first finds most of its prompt in the
// prefix cache. Conversation c, turn t (from 0):
//   turn 0's prompt:   the system prompt (the same in every conversation) + user message (c, 0)
//   turn t's prompt:   turn t-1's prompt + the tokens turn t-1 generated + user message (c, t)
// Each turn generates max_tokens (c, t) tokens with ignore_eos. A turn's prompt exists only once
// the turn before it has finished, so unlike BenchWorkload's requests these cannot be listed up
// front: a MultiturnRun hands out each conversation's next prompt as its turns finish, and counts
// how much of the prompts the prefix cache held against how much was resent (the ideal).
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace miniinfer::bench {

// Lengths in tokens; each range's ends included.
struct MultiturnShape {
    int64_t num_conversations = 32, num_turns = 4;
    int64_t system_len = 256;
    int64_t user_len_min = 32, user_len_max = 128;
    int64_t output_len_min = 64, output_len_max = 128;

    // The most tokens a conversation can hold: system prompt, every user message and output.
    int64_t longest_conversation() const {
        return system_len + num_turns * (user_len_max + output_len_max);
    }
};

struct MultiturnWorkload {
    std::string name = "multiturn";
    MultiturnShape shape;  // as drawn: scaled to the model (make_multiturn_workload)
    std::vector<int32_t> system_prompt;
    std::vector<std::vector<std::vector<int32_t>>> user_messages;  // [conversation][turn] ids
    std::vector<std::vector<int64_t>> max_tokens;                  // [conversation][turn]
    double temperature = 0.0;
};

// Uniform random ids in [0, min(10000, vocab_size)) and lengths uniform in the shape's ranges,
// from mt19937(5) (the fixed workloads hold seeds 0-4). A shape whose longest conversation
// exceeds max_model_len has every length scaled by max_model_len / longest (at least 1 token
// each), so that the same command runs on a 128-position fixture and a 40,960-position model.
// Throws Error for a count or length < 1, a range whose min exceeds its max, or a
// max_model_len too small for even the scaled shape.
MultiturnWorkload make_multiturn_workload(MultiturnShape shape, int64_t vocab_size,
                                          int64_t max_model_len);
// "32 conversations x 4 turns: system prompt 256 tokens, user messages 32-128, outputs 64-128"
std::string describe(const MultiturnShape& shape);

// One run of the workload: the turns to submit, and the prefix cache's tally.
class MultiturnRun {
  public:
    struct Turn {
        int64_t conversation_idx = 0, turn_idx = 0;
        std::vector<int32_t> prompt;
        int64_t max_tokens = 0;
    };
    // Prompt tokens of a set of turns: all, those the prefix cache held, those resent (a
    // prefix earlier requests had already sent: the most a prefix cache could hold).
    struct Tally {
        int64_t num_turns = 0, prompt_tokens = 0, cached_tokens = 0, resent_tokens = 0;
        double hit_rate() const { return ratio(cached_tokens); }
        double ideal_hit_rate() const { return ratio(resent_tokens); }
        // How far a turn's cache hit falls short of its resent prefix, on average: a page-
        // granular cache loses 1 to page_size tokens (whole pages only; the last output token
        // has no K/V).
        double tokens_short_per_turn() const {
            return num_turns > 0 ? double(resent_tokens - cached_tokens) / double(num_turns) : 0;
        }

      private:
        double ratio(int64_t n) const {
            return prompt_tokens > 0 ? double(n) / double(prompt_tokens) : 0.0;
        }
    };

    // Keeps a reference to `workload`, which must outlive the run.
    explicit MultiturnRun(const MultiturnWorkload& workload);

    // Every conversation's first turn, in conversation order (call once, before any finish).
    std::vector<Turn> first_turns();
    // A submitted turn finished: `output` is what it generated, `cached_tokens` how many of its
    // prompt tokens came from the prefix cache. Returns the conversation's next turn, or nullopt
    // after its last. Throws Error for a conversation with no turn in flight.
    std::optional<Turn> finish(int64_t conversation_idx, std::span<const int32_t> output,
                               int64_t cached_tokens);

    bool done() const { return num_finished_ == w_.shape.num_conversations * w_.shape.num_turns; }
    const Tally& first_turn_tally() const { return first_; }
    const Tally& later_turn_tally() const { return later_; }  // turns >= 2 (turn_idx >= 1)
    Tally tally() const;                                      // all turns

  private:
    Turn make_turn(int64_t conversation_idx, int64_t turn_idx, std::vector<int32_t> prompt) const;

    const MultiturnWorkload& w_;
    std::vector<Turn> in_flight_;  // [conversation]: its submitted turn (prompt empty: none)
    Tally first_, later_;
    int64_t num_finished_ = 0;
};

}  // namespace miniinfer::bench
