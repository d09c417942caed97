// The three processes of the multi-process pipeline, each a loop around its ZeroMQ inbox:
//
//   tokenizer    text prompts -> token ids (ids pass through), then to the engine core
//   engine       an LLMEngine with detokenize = false: adds requests (bad ones are rejected
//                to the frontend), steps while there is work, sends each step's deltas with
//                the stats in one message to the detokenizer, answers pings between steps
//   detokenizer  PipelineDetokenizer over the engine's deltas; forwards the rest
//
// Started by PipelineClient as `miniinfer pipeline-worker --role ROLE ...` (hidden). A worker
// exits 0 on SIGTERM/SIGINT, and when the frontend dies (PR_SET_PDEATHSIG); an error (e.g.
// the model does not load) is an Error thrown to the caller, which exits 1 with it.
#pragma once

#include <sys/types.h>
#include <string>

#include "config/engine_config.h"

namespace miniinfer::pipeline {

struct WorkerOptions {
    std::string role;        // tokenizer | engine | detokenizer
    std::string ipc_dir;     // where the inboxes are (IpcDir of the frontend)
    pid_t parent_pid = 0;    // the frontend: exit at once if it is already gone
    int64_t max_queued = 0;  // engine: refuse requests while this many wait (0: no limit)
    EngineConfig config;
};

// Runs one worker until it is told to stop (or its parent is gone). Throws Error on failure.
void run_worker(const WorkerOptions& options);

}  // namespace miniinfer::pipeline
