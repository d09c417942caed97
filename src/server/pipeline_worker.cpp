#include "server/pipeline_worker.h"

#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstring>
#include <map>
#include <mutex>

#include "core/logging.h"
#include "engine/llm_engine.h"
#include "engine/request_inputs.h"
#include "server/engine_client.h"
#include "server/pipeline_detokenizer.h"
#include "server/pipeline_ipc.h"

namespace miniinfer::pipeline {
namespace {

using namespace std::chrono_literals;

// A worker's inbox and its stop signals. SIGTERM/SIGINT are blocked before ZeroMQ starts its
// threads (they inherit the mask) and read from a signalfd polled beside the inbox, so a
// stop request never interrupts a step and is never lost.
class Inbox {
  public:
    // `stop_signals` must be blocked in every thread already.
    Inbox(zmq::context_t& context, const WorkerOptions& o, const sigset_t& stop_signals)
        : dir_(o.ipc_dir),
          socket_(bind_inbox(context, IpcDir::endpoint(o.ipc_dir, o.role))),
          signal_fd_(signalfd(-1, &stop_signals, SFD_CLOEXEC)) {
        if (signal_fd_ < 0) fail("signalfd: {}", std::strerror(errno));
    }
    ~Inbox() { close(signal_fd_); }
    Inbox(const Inbox&) = delete;
    Inbox& operator=(const Inbox&) = delete;

    // Blocks up to `timeout` (-1: no limit) for a message or a stop signal; false on a signal.
    bool wait(std::chrono::milliseconds timeout) {
        zmq::pollitem_t items[] = {{socket_.handle(), 0, ZMQ_POLLIN, 0},
                                   {nullptr, signal_fd_, ZMQ_POLLIN, 0}};
        zmq::poll(items, 2, timeout);
        return !(items[1].revents & ZMQ_POLLIN);
    }
    std::optional<Json> next(zmq::message_t* raw = nullptr) { return receive(socket_, 0ms, raw); }
    zmq::socket_t connect(zmq::context_t& context, const std::string& role) {
        return connect_to(context, IpcDir::endpoint(dir_, role));
    }

  private:
    std::string dir_;
    zmq::socket_t socket_;
    int signal_fd_;
};

Json rejected(const Json& add, const std::string& error, bool queue_full = false) {
    return {
        {"type", kRejected}, {"id", add.at("id")}, {"error", error}, {"queue_full", queue_full}};
}

void run_tokenizer(zmq::context_t& context, Inbox& inbox, const WorkerOptions& o) {
    const std::optional<Tokenizer> tokenizer = load_tokenizer(o.config.model_dir);
    zmq::socket_t to_engine = inbox.connect(context, "engine");
    zmq::socket_t to_frontend = inbox.connect(context, "frontend");
    while (inbox.wait(-1ms)) {
        while (std::optional<Json> m = inbox.next()) {
            if (m->contains("text")) {
                const std::string text = m->at("text").get<std::string>();
                if (!text.empty() && !tokenizer) {  // LLMEngine::add_request's words
                    send(to_frontend, rejected(*m,
                                               "this model directory has no tokenizer.json: give "
                                               "prompt token ids instead of text"));
                    continue;
                }
                (*m)["ids"] = text.empty() ? std::vector<int32_t>{} : tokenizer->encode(text);
                m->erase("text");
            }
            // bad_words resolved where the tokenizer is; a bad constraint refused before the
            // engine core (which compiles the grammar's masks) sees it.
            const Json& params_json = m->at("params");
            if (params_json.contains("bad_words") || params_json.contains("structured_outputs")) {
                try {
                    SamplingParams params = params_from_json(params_json);
                    check_structured_output(params);
                    resolve_bad_words(params, tokenizer ? &*tokenizer : nullptr);
                    (*m)["params"] = to_json(params);
                } catch (const Error& e) {
                    send(to_frontend, rejected(*m, e.what()));
                    continue;
                }
            }
            send(to_engine, *m);
        }
    }
}

void run_engine(zmq::context_t& context, Inbox& inbox, const WorkerOptions& o) {
    EngineConfig config = o.config;
    config.detokenize = false;
    LLMEngine engine(config);
    // Structured output's times since the last outputs message, which carries them to the
    // frontend's metrics. Compiles report from the engine's compile thread.
    std::vector<double> mask_seconds, compile_seconds;
    std::mutex compile_mutex;
    auto take_compile_seconds = [&] {
        std::lock_guard lock(compile_mutex);
        return std::exchange(compile_seconds, {});
    };
    engine.set_structured_timers({.mask = [&](double s) { mask_seconds.push_back(s); },
                                  .compile =
                                      [&](double s) {
                                          std::lock_guard lock(compile_mutex);
                                          compile_seconds.push_back(s);
                                      }});
    zmq::socket_t to_detokenizer = inbox.connect(context, "detokenizer");
    send(to_detokenizer, {{"type", kReady},
                          {"max_model_len", engine.config().max_model_len},
                          {"eos_token_ids", engine.stop_rules().eos_token_ids},
                          {"default_params", to_json(engine.default_params())}});
    auto handle = [&](const Json& m) {
        const std::string type = m.at("type").get<std::string>();
        if (type == kAdd) {
            const std::string id = m.at("id").get<std::string>();
            // The queue is counted here, where it is exact (as EngineLoop does on its thread).
            if (std::optional<QueueFull> full =
                    check_queue(int64_t(engine.num_waiting()), o.max_queued)) {
                send(to_detokenizer, rejected(m, full->what(), true));
                return;
            }
            try {
                const SamplingParams params = params_from_json(m.at("params"));
                // Truncated here, where max_model_len is known; the outputs report these ids.
                std::vector<int32_t> ids = m.at("ids").get<std::vector<int32_t>>();
                truncate_prompt(ids, params, engine.config().max_model_len);
                engine.add_request(Prompt::from_ids(ids), params, id);
                send(to_detokenizer, {{"type", kAccepted},
                                      {"id", id},
                                      {"prompt_ids", ids},
                                      {"params", m.at("params")}});
            } catch (const Error& e) {
                send(to_detokenizer, rejected(m, e.what()));
            }
        } else if (type == kAbort) {
            engine.abort(m.at("id").get<std::string>());
        } else if (type == kPing) {
            send(to_detokenizer, {{"type", kPong}, {"seq", m.at("seq")}});
        } else {
            MI_LOG_WARN("engine process: unexpected message '{}'", type);
        }
    };
    // The loop of EngineLoop::run, across processes: messages, then one step if there is work.
    while (inbox.wait(engine.has_unfinished() ? 0ms : -1ms)) {
        while (std::optional<Json> m = inbox.next()) handle(*m);
        if (!engine.has_unfinished()) continue;
        // One message a step: its outputs and the scheduler's numbers after it.
        Json outputs = Json::array();
        for (const RequestOutput& out : engine.step()) outputs.push_back(to_json(delta_of(out)));
        const Scheduler& s = engine.scheduler();
        send(to_detokenizer, {{"type", kOutputs},
                              {"outputs", std::move(outputs)},
                              {"stats",
                               {{"running", s.num_running()},
                                {"waiting", engine.num_waiting()},
                                {"kv_usage", s.kv_usage()},
                                {"preemptions", s.num_preemptions()},
                                {"mask_seconds", std::exchange(mask_seconds, {})},
                                {"compile_seconds", take_compile_seconds()}}}});
    }
}

void run_detokenizer(zmq::context_t& context, Inbox& inbox, const WorkerOptions& o) {
    const std::optional<Tokenizer> tokenizer = load_tokenizer(o.config.model_dir);
    std::optional<PipelineDetokenizer> detokenizer;  // once the engine core is ready
    zmq::socket_t to_frontend = inbox.connect(context, "frontend");
    zmq::socket_t to_engine = inbox.connect(context, "engine");
    while (inbox.wait(-1ms)) {
        zmq::message_t raw;
        while (std::optional<Json> m = inbox.next(&raw)) {
            const std::string type = m->at("type").get<std::string>();
            if (type == kReady)  // the engine core's stop rules, before any request
                detokenizer.emplace(
                    tokenizer ? &*tokenizer : nullptr,
                    StopRules{.eos_token_ids = m->at("eos_token_ids").get<std::vector<int64_t>>(),
                              .max_model_len = m->at("max_model_len").get<int64_t>()});
            if ((type == kAccepted || type == kOutputs) && !detokenizer)
                fail("detokenizer process: '{}' before the engine core was ready", type);
            if (type == kAccepted)
                detokenizer->add(m->at("id").get<std::string>(), params_from_json(m->at("params")),
                                 int64_t(m->at("prompt_ids").size()));
            if (type != kOutputs) {  // accepted, rejected, pong, ready: the frontend's
                send_raw(to_frontend, raw);
                continue;
            }
            Json outputs = Json::array();
            for (const Json& d : m->at("outputs")) {
                PipelineDetokenizer::Result r = detokenizer->process(delta_from_json(d));
                if (r.abort_in_engine)
                    send(to_engine, {{"type", kAbort}, {"id", r.delta->request_id}});
                if (r.delta) outputs.push_back(to_json(*r.delta));
            }
            send(to_frontend, {{"type", kOutputs},
                               {"outputs", std::move(outputs)},
                               {"stats", std::move(m->at("stats"))}});
        }
    }
}

}  // namespace

void run_worker(const WorkerOptions& o) {
    if (o.role != "tokenizer" && o.role != "engine" && o.role != "detokenizer")
        fail("pipeline-worker: unknown role '{}' (tokenizer, engine, detokenizer)", o.role);
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (getppid() != o.parent_pid) return;  // the frontend died before prctl took effect
    sigset_t stop_signals;
    sigemptyset(&stop_signals);
    sigaddset(&stop_signals, SIGTERM);
    sigaddset(&stop_signals, SIGINT);
    pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
    zmq::context_t context(1);
    Inbox inbox(context, o, stop_signals);
    if (o.role == "tokenizer")
        run_tokenizer(context, inbox, o);
    else if (o.role == "engine")
        run_engine(context, inbox, o);
    else
        run_detokenizer(context, inbox, o);
}

}  // namespace miniinfer::pipeline
