#include "bench/multiturn.h"

#include <algorithm>
#include <random>

#include "core/check.h"

namespace miniinfer::bench {
namespace {

// Lengths are scaled down together so that the conversations keep their proportions: the share
// of each prompt that is history, which decides the ideal hit rate, stays what it was.
MultiturnShape fit_to(MultiturnShape s, int64_t max_model_len) {
    const int64_t longest = s.longest_conversation();
    if (longest <= max_model_len) return s;
    const auto scale = [&](int64_t& len) {
        len = std::max<int64_t>(1, len * max_model_len / longest);
    };
    for (int64_t* len :
         {&s.system_len, &s.user_len_min, &s.user_len_max, &s.output_len_min, &s.output_len_max})
        scale(*len);
    if (s.longest_conversation() > max_model_len)
        fail(
            "multiturn: {} turns of at least 2 tokens each and a system prompt do not fit "
            "max_model_len {}",
            s.num_turns, max_model_len);
    return s;
}

}  // namespace

MultiturnWorkload make_multiturn_workload(MultiturnShape shape, int64_t vocab_size,
                                          int64_t max_model_len) {
    const MultiturnShape& s = shape;
    if (s.num_conversations < 1 || s.num_turns < 1 || s.system_len < 1 || s.user_len_min < 1 ||
        s.output_len_min < 1)
        fail("multiturn: conversations, turns and every length must be >= 1 ({})", describe(s));
    if (s.user_len_min > s.user_len_max || s.output_len_min > s.output_len_max)
        fail("multiturn: a length range's min exceeds its max ({})", describe(s));
    if (vocab_size < 1) fail("multiturn: vocab_size must be >= 1, got {}", vocab_size);
    MultiturnWorkload w;
    w.shape = fit_to(shape, max_model_len);
    std::mt19937 rng(5);
    std::uniform_int_distribution<int32_t> id(0, int32_t(std::min<int64_t>(10000, vocab_size) - 1));
    std::uniform_int_distribution<int64_t> user_len(w.shape.user_len_min, w.shape.user_len_max);
    std::uniform_int_distribution<int64_t> output_len(w.shape.output_len_min,
                                                      w.shape.output_len_max);
    const auto draw_ids = [&](int64_t n) {
        std::vector<int32_t> ids(static_cast<size_t>(n));
        for (int32_t& t : ids) t = id(rng);
        return ids;
    };
    w.system_prompt = draw_ids(w.shape.system_len);
    w.user_messages.resize(size_t(s.num_conversations));
    w.max_tokens.resize(size_t(s.num_conversations));
    for (int64_t c = 0; c < s.num_conversations; ++c)
        for (int64_t t = 0; t < s.num_turns; ++t) {
            w.user_messages[size_t(c)].push_back(draw_ids(user_len(rng)));
            w.max_tokens[size_t(c)].push_back(output_len(rng));
        }
    return w;
}

std::string describe(const MultiturnShape& s) {
    return fmt::format(
        "{} conversations x {} turns: system prompt {} tokens, user messages {}-{}, outputs {}-{}",
        s.num_conversations, s.num_turns, s.system_len, s.user_len_min, s.user_len_max,
        s.output_len_min, s.output_len_max);
}

MultiturnRun::MultiturnRun(const MultiturnWorkload& workload)
    : w_(workload), in_flight_(size_t(workload.shape.num_conversations)) {}

MultiturnRun::Turn MultiturnRun::make_turn(int64_t conversation_idx, int64_t turn_idx,
                                           std::vector<int32_t> prompt) const {
    const std::vector<int32_t>& user = w_.user_messages[size_t(conversation_idx)][size_t(turn_idx)];
    prompt.insert(prompt.end(), user.begin(), user.end());
    return {conversation_idx, turn_idx, std::move(prompt),
            w_.max_tokens[size_t(conversation_idx)][size_t(turn_idx)]};
}

std::vector<MultiturnRun::Turn> MultiturnRun::first_turns() {
    std::vector<Turn> turns;
    for (int64_t c = 0; c < w_.shape.num_conversations; ++c) {
        turns.push_back(make_turn(c, 0, w_.system_prompt));
        in_flight_[size_t(c)] = turns.back();
        // The first conversation's request sent the system prompt; every other one resends it.
        ++first_.num_turns;
        first_.prompt_tokens += int64_t(turns.back().prompt.size());
        first_.resent_tokens += c > 0 ? int64_t(w_.system_prompt.size()) : 0;
    }
    return turns;
}

std::optional<MultiturnRun::Turn> MultiturnRun::finish(int64_t conversation_idx,
                                                       std::span<const int32_t> output,
                                                       int64_t cached_tokens) {
    if (conversation_idx < 0 || conversation_idx >= w_.shape.num_conversations ||
        in_flight_[size_t(conversation_idx)].prompt.empty())
        fail("multiturn: conversation {} has no turn in flight", conversation_idx);
    Turn& done = in_flight_[size_t(conversation_idx)];
    (done.turn_idx == 0 ? first_ : later_).cached_tokens += cached_tokens;
    ++num_finished_;
    if (done.turn_idx + 1 == w_.shape.num_turns) {
        done.prompt.clear();
        return std::nullopt;
    }
    // The whole history is resent: the previous prompt and what the model answered to it.
    std::vector<int32_t> history = std::move(done.prompt);
    history.insert(history.end(), output.begin(), output.end());
    later_.resent_tokens += int64_t(history.size());
    done = make_turn(conversation_idx, done.turn_idx + 1, std::move(history));
    ++later_.num_turns;
    later_.prompt_tokens += int64_t(done.prompt.size());
    return done;
}

MultiturnRun::Tally MultiturnRun::tally() const {
    return {first_.num_turns + later_.num_turns, first_.prompt_tokens + later_.prompt_tokens,
            first_.cached_tokens + later_.cached_tokens,
            first_.resent_tokens + later_.resent_tokens};
}

}  // namespace miniinfer::bench
