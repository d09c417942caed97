// The C API (miniinfer_c.h): JSON in, JSON out, every exception caught and turned into an
// error string the Python side raises. Each function is a few lines around a Session.
#include "capi/miniinfer_c.h"
#include "server/pipeline_messages.h"

#include <cstdlib>
#include <cstring>
#include <limits>

#include "bench/workloads.h"
#include "capi/session.h"
#include "core/logging.h"
#include "loader/hub.h"
#include "server/request_fields.h"

struct mi_engine {
    miniinfer::Session session;
};

namespace miniinfer {
namespace {

char* copy_string(const std::string& s) {
    char* out = static_cast<char*>(std::malloc(s.size() + 1));
    if (!out) return nullptr;
    std::memcpy(out, s.data(), s.size() + 1);
    return out;
}

// Invalid UTF-8 (a prompt's raw bytes, say) becomes U+FFFD instead of an exception.
char* copy_json(const Json& j) {
    return copy_string(j.dump(-1, ' ', false, Json::error_handler_t::replace));
}

void set_error(char** error, const char* kind, const char* message) {
    if (error) *error = copy_string(fmt::format("{}: {}", kind, message));
}

// Runs `body`, turning exceptions into *error: Error (bad input) -> ValueError, the rest ->
// RuntimeError. Returns body's value, or `failed`.
template <typename T, typename Body>
T guarded(char** error, T failed, Body&& body) {
    try {
        return body();
    } catch (const Error& e) {
        set_error(error, "ValueError", e.what());
    } catch (const std::exception& e) {
        set_error(error, "RuntimeError", e.what());
    } catch (...) {
        set_error(error, "RuntimeError", "unknown C++ exception");
    }
    return failed;
}

Json logprobs_json(const std::vector<TokenLogprob>& logprobs) {
    Json out = Json::array();
    for (const TokenLogprob& t : logprobs) {
        Json top = Json::array();
        for (auto [id, v] : t.top) top.push_back({{"id", id}, {"logprob", v}});
        out.push_back({{"id", t.token}, {"logprob", t.logprob}, {"top", std::move(top)}});
    }
    return out;
}

// The ids' [offset, length] in `tokens`, after appending them there.
Json append_range(std::vector<int32_t>& tokens, const std::vector<int32_t>& ids) {
    Json range = {tokens.size(), ids.size()};
    tokens.insert(tokens.end(), ids.begin(), ids.end());
    return range;
}

// tokens == nullptr: ids as JSON lists; else as ranges into *tokens (mi_engine_run).
Json output_json(const RequestOutput& o, std::vector<int32_t>* tokens = nullptr) {
    Json j = {{"request_id", o.request_id},
              {"finished", o.finished},
              {"finish_reason", o.finish_reason.empty() ? Json() : Json(o.finish_reason)},
              {"stop_reason", o.stop_reason.empty() ? Json() : Json(o.stop_reason)},
              {"error", o.error.empty() ? Json() : Json(o.error)},
              {"new_token_ids", o.new_token_ids},
              {"delta_text", o.delta_text},
              {"num_output_tokens", o.num_output_tokens},
              {"num_prompt_tokens", o.num_prompt_tokens},
              {"num_cached_tokens", o.num_cached_tokens}};
    if (!o.new_logprobs.empty()) j["new_logprobs"] = logprobs_json(o.new_logprobs);
    if (o.finished && tokens) {
        j["prompt_token_range"] = append_range(*tokens, o.prompt_token_ids);
        j["token_range"] = append_range(*tokens, o.token_ids);
    } else if (o.finished) {
        j["prompt_token_ids"] = o.prompt_token_ids;
        j["token_ids"] = o.token_ids;
    }
    if (o.finished) {
        j["text"] = o.text;
        if (!o.logprobs.empty()) j["logprobs"] = logprobs_json(o.logprobs);
    }
    return j;
}

char* outputs_json(const std::vector<RequestOutput>& outputs) {
    Json array = Json::array();
    for (const RequestOutput& o : outputs) array.push_back(output_json(o));
    return copy_json(array);
}

// The final outputs with their ids in one malloc'ed int32 array (*tokens, *num_tokens).
char* final_outputs_json(const std::vector<RequestOutput>& outputs, int32_t** tokens,
                         int64_t* num_tokens) {
    std::vector<int32_t> ids;
    Json array = Json::array();
    for (const RequestOutput& o : outputs) array.push_back(output_json(o, &ids));
    *tokens = nullptr;
    *num_tokens = int64_t(ids.size());
    if (!ids.empty()) {
        *tokens = static_cast<int32_t*>(std::malloc(ids.size() * sizeof(int32_t)));
        if (!*tokens) throw std::bad_alloc();
        std::memcpy(*tokens, ids.data(), ids.size() * sizeof(int32_t));
    }
    return copy_json(array);
}

bench::BenchWorkload workload_from_json(const Json& j) {
    bench::BenchWorkload w;
    w.name = json_get<std::string>(j, "name", "workload");
    w.prompts = json_get<std::vector<std::vector<int32_t>>>(j, "prompts", "workload");
    w.max_tokens = json_get<std::vector<int64_t>>(j, "max_tokens", "workload");
    w.temperature = json_get<double>(j, "temperature", "workload");
    if (w.prompts.size() != w.max_tokens.size())
        fail("workload: 'prompts' and 'max_tokens' differ in length");
    return w;
}

Session& session_of(mi_engine* engine) {
    if (!engine) throw std::runtime_error("the engine is closed");
    return engine->session;
}

}  // namespace
}  // namespace miniinfer

using namespace miniinfer;

extern "C" {

const char* mi_version(void) {
    return "0.1.0";
}

int mi_has_cuda(void) {
#ifdef MINIINFER_HAS_CUDA
    return 1;
#else
    return 0;
#endif
}

void mi_free_string(char* s) {
    std::free(s);
}

char* mi_engine_config_defaults(void) {
    return guarded<char*>(nullptr, nullptr, [] { return copy_json(EngineConfig().to_json()); });
}

mi_engine* mi_engine_create(const char* config_json, const char* worker_binary, char** error) {
    return guarded<mi_engine*>(error, nullptr, [&] {
        init_logging();
        const Json json = parse_untrusted_json(config_json, "engine config");
        EngineConfig config = EngineConfig::from_json(json);
        // A Hugging Face name (org/name) becomes its snapshot in the cache, as on the CLI.
        config.model_dir =
            hub::resolve_model(config.model_dir,
                               json.contains("revision")
                                   ? json_get<std::string>(json, "revision", "engine config")
                                   : "main")
                .string();
        return new mi_engine{Session(config, worker_binary ? worker_binary : "")};
    });
}

void mi_engine_destroy(mi_engine* engine) {
    guarded<int>(nullptr, 0, [&] {
        delete engine;
        return 0;
    });
}

char* mi_engine_info(mi_engine* engine, char** error) {
    return guarded<char*>(error, nullptr, [&] {
        Session& s = session_of(engine);
        Json info = {{"config", s.config().to_json()},
                     {"max_model_len", s.max_model_len()},
                     {"vocab_size", s.model_config().vocab_size},
                     {"eos_token_ids", s.eos_token_ids()},
                     {"default_sampling_params", pipeline::to_json(s.default_params())},
                     {"overlap", s.overlapping()},
                     {"has_tokenizer", true},
                     {"has_chat_template", true}};
        try {
            s.tokenizer();
        } catch (const Error&) {
            info["has_tokenizer"] = false;
        }
        try {
            s.chat_template();
        } catch (const Error&) {
            info["has_chat_template"] = false;
        }
        return copy_json(info);
    });
}

int mi_engine_add_requests(mi_engine* engine, const char* requests_json, const int32_t* token_ids,
                           int64_t num_token_ids, int64_t* failed_index, char** error) {
    if (failed_index) *failed_index = -1;
    return guarded<int>(error, -1, [&] {
        Session& s = session_of(engine);
        const Json requests = parse_untrusted_json(requests_json, "requests");
        if (!requests.is_array()) fail("requests: expected a JSON array");
        std::vector<NewRequest> batch;
        for (size_t i = 0; i < requests.size(); ++i) {
            try {
                batch.push_back(s.parse_request(requests[i], {token_ids, size_t(num_token_ids)}));
            } catch (const Error&) {
                if (failed_index) *failed_index = int64_t(i);
                throw;
            }
        }
        try {
            s.add_requests(std::move(batch));
        } catch (const BatchError& e) {
            if (failed_index) *failed_index = e.index;
            throw;
        }
        return 0;
    });
}

char* mi_engine_step(mi_engine* engine, double timeout_s, char** error) {
    return guarded<char*>(error, nullptr,
                          [&] { return outputs_json(session_of(engine).step(timeout_s)); });
}

char* mi_engine_run(mi_engine* engine, double max_seconds, int32_t** tokens, int64_t* num_tokens,
                    char** error) {
    return guarded<char*>(error, nullptr, [&] {
        return final_outputs_json(session_of(engine).run(max_seconds), tokens, num_tokens);
    });
}

int mi_engine_abort(mi_engine* engine, const char* ids_json, char** error) {
    return guarded<int>(error, -1, [&] {
        const Json ids = parse_untrusted_json(ids_json, "request ids");
        session_of(engine).abort(ids.get<std::vector<std::string>>());
        return 0;
    });
}

int mi_engine_has_unfinished(mi_engine* engine) {
    return guarded<int>(nullptr, 0, [&] { return int(session_of(engine).has_unfinished()); });
}

char* mi_tokenize(mi_engine* engine, const char* text, int add_special_tokens, char** error) {
    return guarded<char*>(error, nullptr, [&] {
        EncodeOptions options;
        options.add_special_tokens = add_special_tokens != 0;
        return copy_json(Json(session_of(engine).tokenizer().encode(text, options)));
    });
}

char* mi_detokenize(mi_engine* engine, const char* ids_json, int skip_special_tokens,
                    char** error) {
    return guarded<char*>(error, nullptr, [&] {
        const Json ids = parse_untrusted_json(ids_json, "token ids");
        if (!ids.is_array()) fail("token ids: expected a list of integers");
        const auto tokens = ids.get<std::vector<int32_t>>();
        return copy_string(session_of(engine).tokenizer().decode(tokens, skip_special_tokens));
    });
}

char* mi_apply_chat_template(mi_engine* engine, const char* messages_json, const char* options_json,
                             char** error) {
    return guarded<char*>(error, nullptr, [&] {
        using Ordered = nlohmann::ordered_json;  // key order matters to a template (tool args)
        const auto messages = parse_untrusted_json<Ordered>(messages_json, "messages");
        const auto options = parse_untrusted_json<Ordered>(options_json, "chat options");
        const Ordered tools = options.value("tools", Ordered());
        const Ordered kwargs = options.value("chat_template_kwargs", Ordered::object());
        const bool add_generation_prompt = options.value("add_generation_prompt", true);
        return copy_string(session_of(engine).chat_template().render(
            messages, tools, add_generation_prompt, kwargs.is_null() ? Ordered::object() : kwargs));
    });
}

int mi_sampling_params_validate(const char* params_json, char** error) {
    return guarded<int>(error, -1, [&] {
        const Json json = parse_untrusted_json(params_json, "sampling params");
        check_request_fields(json, FrontEnd::kPython);
        const SamplingParams p = SamplingParams::from_json(json, {});
        // The vocabulary is not known here: stop_token_ids are checked when a request is added.
        p.validate(std::numeric_limits<int64_t>::max());
        return 0;
    });
}

char* mi_bench_workload(const char* name, const char* balanced_file, char** error) {
    return guarded<char*>(error, nullptr, [&] {
        const bench::BenchWorkload w = bench::make_bench_workload(name, balanced_file);
        return copy_json({{"name", w.name},
                          {"prompts", w.prompts},
                          {"max_tokens", w.max_tokens},
                          {"temperature", w.temperature}});
    });
}

double mi_engine_bench_sol_seconds(mi_engine* engine, const char* workload_json,
                                   double hbm_bytes_per_s, double matmul_flops, char** error) {
    return guarded<double>(error, -1.0, [&] {
        Session& s = session_of(engine);
        const bench::BenchWorkload w =
            workload_from_json(parse_untrusted_json(workload_json, "workload"));
        return bench::sol_seconds(w, s.model_config(), s.config().max_num_seqs,
                                  bench::SolHardware{hbm_bytes_per_s, matmul_flops},
                                  s.config().fp8_kv_cache() ? 1.0 : 2.0);
    });
}

}  // extern "C"
