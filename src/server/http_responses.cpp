#include <algorithm>
#include <ctime>
#include <map>

#include "server/http_server_impl.h"

namespace miniinfer {

using namespace std::chrono_literals;
using namespace http_internal;

// Not streaming: the whole response once every choice has finished, with its real status (an
// engine failure is a 500, a shutdown a 503). The connection's own thread waits for it, and
// every 50 ms checks that the client is still there: one that has hung up gets its requests
// aborted instead of run to the end for nobody.
void HttpServer::Impl::respond_when_done(httplib::Response& res, std::shared_ptr<ApiRequest> r,
                                         std::shared_ptr<OutputChannel> channel,
                                         std::vector<std::string> ids, std::string response_id) {
    std::vector<Choice> choices(ids.size());
    std::map<std::string, size_t> index;
    for (size_t i = 0; i < ids.size(); ++i) index[ids[i]] = i;
    for (size_t done = 0; done < ids.size();) {
        if (server.draining() || HttpListener::peer_hung_up()) {
            for (const auto& id : ids) engine.abort(id);
            if (server.draining()) return send_error(res, shutdown_error());
            return HttpListener::close_after_response();  // nobody reads what would be sent
        }
        std::optional<RequestOutput> out = channel->next(50ms);
        if (!out || !out->finished) continue;
        choices[index.at(out->request_id)].last = std::move(*out);
        ++done;
    }
    for (const Choice& c : choices)
        if (c.last.finish_reason == "error")  // the engine failed it (e.g. its process died)
            return send_error(res, ApiError{500, c.last.error, "server_error"});
    Json list = Json::array();
    int64_t prompt_tokens = 0, completion_tokens = 0, cached = 0;
    for (size_t i = 0; i < choices.size(); ++i) {
        const RequestOutput& out = choices[i].last;
        if (i % size_t(r->n) == 0) {
            prompt_tokens += out.num_prompt_tokens;
            cached += out.num_cached_tokens;
        }
        completion_tokens += int64_t(out.token_ids.size());
        list.push_back(choice_json(*r, i, choices[i], out));
    }
    Json response = {{"id", response_id},
                     {"object", r->chat ? "chat.completion" : "text_completion"},
                     {"created", int64_t(std::time(nullptr))},
                     {"model", options.served_model_name},
                     {"choices", list},
                     {"usage", usage_json(prompt_tokens, completion_tokens, cached)}};
    if (r->return_token_ids && r->prompts.size() == 1)
        response["prompt_token_ids"] = choices.front().last.prompt_token_ids;
    res.set_content(dump(response), "application/json");
}

namespace {
// vLLM's stop_reason: the stop string, or the stop token id as a number, or null (EOS, length).
Json stop_reason_json(const SamplingParams& params, const RequestOutput& out) {
    if (out.stop_reason.empty()) return nullptr;
    if (std::find(params.stop.begin(), params.stop.end(), out.stop_reason) == params.stop.end())
        for (int64_t id : params.stop_token_ids)
            if (out.stop_reason == std::to_string(id)) return id;
    return out.stop_reason;
}
}  // namespace

// A whole choice (non-streaming) from its final output.
Json HttpServer::Impl::choice_json(const ApiRequest& r, size_t index, Choice&,
                                   const RequestOutput& out) {
    const Tokenizer* tok = logprob_tokenizer(r);
    Json logprobs = nullptr;
    if (r.params.logprobs)
        logprobs =
            r.chat ? chat_logprobs(out.logprobs, tok) : completion_logprobs(out.logprobs, tok);
    const Json finish = out.finish_reason.empty()
                            ? Json(nullptr)
                            : Json(out.finish_reason == "abort" ? "abort" : out.finish_reason);
    Json choice = {{"index", index}, {"logprobs", logprobs}};
    if (r.return_token_ids) {
        choice["token_ids"] = out.token_ids;
        choice["prompt_token_ids"] = out.prompt_token_ids;
    }
    if (!r.chat) {
        choice["text"] = out.text;
        choice["finish_reason"] = finish;
        choice["stop_reason"] = stop_reason_json(r.params, out);
        return choice;
    }
    Json message = {{"role", "assistant"}, {"content", out.text}};
    if (split_reasoning) {
        ReasoningSplitter splitter(r.reasoning_open);
        auto [reasoning, content] = splitter.feed(out.text);
        auto [r2, c2] = splitter.finish();
        message["content"] = content + c2;
        message["reasoning_content"] = reasoning + r2;
        if ((reasoning + r2).empty()) message["reasoning_content"] = nullptr;
        if (!r.include_reasoning) message.erase("reasoning_content");
    }
    Json finish_reason = finish;
    if (r.parse_tool_calls) {
        ToolCallText t = parse_tool_calls(message["content"].get<std::string>(), call_id_prefix());
        if (!t.calls.empty()) {
            Json calls = Json::array();
            for (const ToolCall& c : t.calls) calls.push_back(tool_call_json(c));
            message["tool_calls"] = calls;
            message["content"] = t.content.empty() ? Json(nullptr) : Json(t.content);
            if (out.finish_reason == "stop") finish_reason = "tool_calls";
        }
    }
    choice["message"] = message;
    choice["finish_reason"] = finish_reason;
    choice["stop_reason"] = stop_reason_json(r.params, out);
    return choice;
}

void HttpServer::Impl::stream_response(httplib::Response& res, std::shared_ptr<ApiRequest> r,
                                       std::shared_ptr<OutputChannel> channel,
                                       std::vector<std::string> ids, std::string response_id) {
    auto state = std::make_shared<std::vector<Choice>>(ids.size());
    for (Choice& c : *state) c.splitter = ReasoningSplitter(r->reasoning_open);
    auto index = std::make_shared<std::map<std::string, size_t>>();
    for (size_t i = 0; i < ids.size(); ++i) (*index)[ids[i]] = i;
    auto remaining = std::make_shared<size_t>(ids.size());
    auto usage = std::make_shared<std::array<int64_t, 3>>();  // prompt, completion, cached
    const int64_t created = int64_t(std::time(nullptr));
    auto chunk = [=, this](Json choices) {
        return Json{{"id", response_id},
                    {"object", r->chat ? "chat.completion.chunk" : "text_completion"},
                    {"created", created},
                    {"model", options.served_model_name},
                    {"choices", std::move(choices)}};
    };
    auto send = [](httplib::DataSink& sink, const Json& j) {
        const std::string line = "data: " + dump(j) + "\n\n";
        return sink.write(line.data(), line.size());
    };
    res.set_chunked_content_provider("text/event-stream", [=, this](size_t,
                                                                    httplib::DataSink& sink) {
        auto abort_all = [&] {
            for (const auto& id : ids) engine.abort(id);
            return false;
        };
        if (r->chat)  // the first chunk of each choice carries the role
            for (size_t i = 0; i < state->size(); ++i)
                if (!(*state)[i].role_sent) {
                    (*state)[i].role_sent = true;
                    Json delta = {{"role", "assistant"}, {"content", ""}};
                    if (!send(sink, chunk(Json::array({{{"index", i},
                                                        {"delta", delta},
                                                        {"logprobs", nullptr},
                                                        {"finish_reason", nullptr}}}))))
                        return abort_all();
                }
        auto end_with_error = [&](const ApiError& error) {  // an error event, then [DONE]
            for (const auto& id : ids) engine.abort(id);
            send(sink, error.body());
            const std::string done = "data: [DONE]\n\n";
            sink.write(done.data(), done.size());
            sink.done();
            return true;
        };
        while (*remaining > 0) {
            if (server.draining()) return end_with_error(shutdown_error());
            auto out = channel->next(200ms);
            if (!out) {
                if (!sink.is_writable()) return abort_all();
                continue;
            }
            const size_t i = index->at(out->request_id);
            Choice& c = (*state)[i];
            if (out->finish_reason ==
                "error")  // the engine failed it: an error event ends the stream
                return end_with_error(ApiError{500, out->error, "server_error"});
            Json logprobs = nullptr;
            if (r->params.logprobs && !out->new_logprobs.empty())
                logprobs = r->chat ? chat_logprobs(out->new_logprobs, logprob_tokenizer(*r))
                                   : completion_logprobs(out->new_logprobs, logprob_tokenizer(*r));
            const Json finish = out->finished ? Json(out->finish_reason) : Json(nullptr);
            Json choice = {{"index", i}, {"logprobs", logprobs}, {"finish_reason", finish}};
            if (out->finished) choice["stop_reason"] = stop_reason_json(r->params, *out);
            if (r->return_token_ids) choice["token_ids"] = out->new_token_ids;
            if (r->chat) {
                Json delta = Json::object();
                std::string content = out->delta_text, reasoning;
                if (split_reasoning) {
                    auto [rd, cd] = c.splitter.feed(out->delta_text);
                    if (out->finished) {
                        auto [r2, c2] = c.splitter.finish();
                        rd += r2;
                        cd += c2;
                    }
                    reasoning = r->include_reasoning ? rd : "";
                    content = cd;
                }
                std::vector<ToolCall> calls;
                if (r->parse_tool_calls) {
                    if (!c.tools) c.tools.emplace(call_id_prefix());
                    ToolCallStreamer::Delta t = c.tools->feed(content);
                    if (out->finished) {
                        ToolCallStreamer::Delta rest = c.tools->finish();
                        t.content += rest.content;
                    }
                    content = t.content;
                    calls = std::move(t.calls);
                    if (out->finished && c.tools->num_calls() > 0 && out->finish_reason == "stop")
                        choice["finish_reason"] = "tool_calls";
                }
                // OpenAI streams a call as two deltas: id, type and name, then arguments.
                for (const ToolCall& call : calls) {
                    Json head = tool_call_json(call);
                    head["index"] = c.num_calls_sent;
                    head["function"]["arguments"] = "";
                    Json args = {{"index", c.num_calls_sent},
                                 {"function", {{"arguments", call.arguments}}}};
                    ++c.num_calls_sent;
                    for (Json part : {head, args}) {
                        Json d = {{"tool_calls", Json::array({part})}};
                        if (!send(sink, chunk(Json::array({{{"index", i},
                                                            {"delta", d},
                                                            {"logprobs", nullptr},
                                                            {"finish_reason", nullptr}}}))))
                            return abort_all();
                    }
                }
                if (!reasoning.empty()) delta["reasoning_content"] = reasoning;
                if (!content.empty() || reasoning.empty()) delta["content"] = content;
                choice["delta"] = delta;
            } else {
                choice["text"] = out->delta_text;
            }
            if (out->finished) {
                --*remaining;
                if (i % size_t(r->n) == 0) {
                    (*usage)[0] += out->num_prompt_tokens;
                    (*usage)[2] += out->num_cached_tokens;
                }
                (*usage)[1] += out->num_output_tokens;
            }
            Json message = chunk(Json::array({choice}));
            if (r->return_token_ids && out->finished)  // known once the choice ends
                message["choices"][0]["prompt_token_ids"] = out->prompt_token_ids;
            if (!send(sink, message)) return abort_all();
        }
        if (r->include_usage) {
            Json last = chunk(Json::array());
            last["usage"] = usage_json((*usage)[0], (*usage)[1], (*usage)[2]);
            if (!send(sink, last)) return false;
        }
        const std::string done = "data: [DONE]\n\n";
        sink.write(done.data(), done.size());
        sink.done();
        return true;
    });
}

}  // namespace miniinfer
