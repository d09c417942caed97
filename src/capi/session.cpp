#include "capi/session.h"

#include <array>
#include <chrono>

#include "engine/llm_engine.h"
#include "server/pipeline_client.h"
#include "server/pipeline_process.h"

namespace miniinfer {

using Clock = std::chrono::steady_clock;

Session::Session(const EngineConfig& config, const std::string& worker_binary) {
    if (config.use_multiprocess) {
        if (worker_binary.empty()) fail("use_multiprocess needs the miniinfer binary's path");
        pipeline::set_worker_binary(worker_binary);
        pipeline_ = std::make_unique<PipelineClient>(config, nullptr, 0);
        channel_ = std::make_shared<OutputChannel>();
        config_ = config;
        config_.resolve(pipeline_->model_config());
        config_.max_model_len = pipeline_->max_model_len();
    } else {
        engine_ = std::make_unique<LLMEngine>(config);
        config_ = engine_->config();
    }
    try {
        chat_template_ = ChatTemplate::load(config.model_dir);
    } catch (const Error&) {
        // No template (or one we cannot parse): chats are refused when asked for, not here.
    }
}

Session::~Session() = default;

NewRequest Session::parse_request(const Json& request, std::span<const int32_t> token_ids) const {
    NewRequest r;
    r.request_id = json_get<std::string>(request, "request_id", "request");
    if (request.contains("prompt_token_range")) {
        const auto range =
            json_get<std::array<int64_t, 2>>(request, "prompt_token_range", "request");
        if (range[0] < 0 || range[1] < 0 || range[0] + range[1] > int64_t(token_ids.size()))
            fail("request: 'prompt_token_range' is outside the token ids given");
        const auto ids = token_ids.subspan(size_t(range[0]), size_t(range[1]));
        r.prompt = Prompt::from_ids({ids.begin(), ids.end()});
    } else if (request.contains("prompt_token_ids"))
        r.prompt = Prompt::from_ids(
            json_get<std::vector<int32_t>>(request, "prompt_token_ids", "request"));
    else
        r.prompt = Prompt::from_text(json_get<std::string>(request, "prompt", "request"));
    const auto params = request.find("params");
    r.params = params == request.end() || params->is_null()
                   ? default_params()
                   : SamplingParams::from_json(*params, default_params());
    return r;
}

void Session::add_requests(std::vector<NewRequest> requests) {
    std::set<std::string> ids;
    for (size_t i = 0; i < requests.size(); ++i)
        if (open_.contains(requests[i].request_id) || !ids.insert(requests[i].request_id).second)
            throw BatchError(int64_t(i), fmt::format("request id '{}' is already in use",
                                                     requests[i].request_id));
    std::vector<std::string> added;
    std::optional<BatchError> failure;
    if (engine_) {
        for (size_t i = 0; i < requests.size() && !failure; ++i) {
            try {
                engine_->precompile(requests[i].params);  // a bad constraint fails the batch
                engine_->add_request(requests[i].prompt, requests[i].params,
                                     requests[i].request_id);
                open_.insert(requests[i].request_id);
                added.push_back(requests[i].request_id);
            } catch (const Error& e) {
                failure.emplace(int64_t(i), e.what());
            }
        }
    } else {
        // Send them all before waiting for any verdict: one round trip for the batch, and the
        // engine receives them in order (as `generate --use-multiprocess` does).
        std::vector<std::future<void>> verdicts;
        for (size_t i = 0; i < requests.size() && !failure; ++i) {
            try {
                verdicts.push_back(pipeline_->submit_async(
                    requests[i].request_id, requests[i].prompt, requests[i].params, channel_));
            } catch (const Error& e) {
                failure.emplace(int64_t(i), e.what());
            }
        }
        for (size_t i = 0; i < verdicts.size(); ++i) {
            try {
                verdicts[i].get();
                open_.insert(requests[i].request_id);
                added.push_back(requests[i].request_id);
            } catch (const Error& e) {  // refused: no output will come for it
                if (!failure || failure->index > int64_t(i)) failure.emplace(int64_t(i), e.what());
            }
        }
    }
    if (failure) {
        abort(added);  // all or none: the accepted ones end, and their outputs are dropped
        throw *failure;
    }
}

bool Session::keep(const RequestOutput& out) {
    if (out.finished) open_.erase(out.request_id);
    if (!discarded_.contains(out.request_id)) return true;
    if (out.finished) discarded_.erase(out.request_id);
    return false;
}

std::vector<RequestOutput> Session::step(double timeout_s) {
    std::vector<RequestOutput> kept;
    if (engine_) {
        for (RequestOutput& out : engine_->step())
            if (keep(out)) kept.push_back(std::move(out));
        return kept;
    }
    auto wait = std::chrono::duration_cast<std::chrono::milliseconds>(
        std::chrono::duration<double>(std::max(timeout_s, 0.0)));
    while (std::optional<RequestOutput> out = channel_->next(wait)) {
        if (keep(*out)) kept.push_back(std::move(*out));
        wait = std::chrono::milliseconds(0);  // then only what is already there
    }
    return kept;
}

std::vector<RequestOutput> Session::run(double max_seconds) {
    const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                             std::chrono::duration<double>(max_seconds));
    std::vector<RequestOutput> finished;
    while (has_unfinished()) {
        if (engine_) {
            for (RequestOutput& out : engine_->step())
                if (keep(out) && out.finished) finished.push_back(std::move(out));
        } else {
            const auto left =
                std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
            std::optional<RequestOutput> out =
                channel_->next(std::max(left, std::chrono::milliseconds(1)));
            if (out && keep(*out) && out->finished) finished.push_back(std::move(*out));
        }
        if (Clock::now() >= deadline) break;
    }
    return finished;
}

void Session::abort(const std::vector<std::string>& ids) {
    for (const std::string& id : ids) {
        if (!open_.contains(id)) continue;
        discarded_.insert(id);
        if (engine_)
            engine_->abort(id);
        else
            pipeline_->abort(id);
    }
}

bool Session::has_unfinished() const {
    return engine_ ? engine_->has_unfinished() : !open_.empty();
}

const ModelConfig& Session::model_config() const {
    return engine_ ? engine_->model_config() : pipeline_->model_config();
}

const SamplingParams& Session::default_params() const {
    return engine_ ? engine_->default_params() : pipeline_->default_params();
}

int64_t Session::max_model_len() const {
    return engine_ ? engine_->config().max_model_len : pipeline_->max_model_len();
}

bool Session::overlapping() const {
    return engine_ && engine_->overlapping();
}

std::vector<int64_t> Session::eos_token_ids() const {
    return engine_ ? engine_->eos_token_ids() : pipeline_->eos_token_ids();
}

const Tokenizer& Session::tokenizer() const {
    const Tokenizer* t = engine_ ? engine_->tokenizer() : pipeline_->tokenizer();
    if (!t) fail("this model has no tokenizer.json");
    return *t;
}

const ChatTemplate& Session::chat_template() const {
    if (!chat_template_) fail("this model has no chat template");
    return *chat_template_;
}

}  // namespace miniinfer
