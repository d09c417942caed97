/* The C API of MiniInfer: what the Python package (python/miniinfer) loads with ctypes.
 *
 * Why C and not a CPython extension: one shared library, libminiinfer_c.so, serves every
 * Python 3 version (no Python headers at build time, no ABI per interpreter), and ctypes
 * releases the GIL for the whole of every call, so the engine steps while Python threads run.
 *
 * Conventions:
 *  - Everything structured crosses as UTF-8 JSON text; the boundary stays small and the C++
 *    side reuses its own parsers and validation (SamplingParams, EngineConfig).
 *  - Every `char*` returned is the caller's: free it with mi_free_string.
 *  - A function that can fail takes `char** error`. On failure it returns NULL (or -1) and sets
 *    *error to "ValueError: <message>" (bad input: a request, a parameter, a config value, a
 *    model directory) or "RuntimeError: <message>" (anything else); the Python side raises
 *    that exception with that message. On success *error is left untouched.
 *  - A handle is used by one thread at a time (the Python side holds a lock around calls).
 *    No exception crosses this boundary.
 */
#ifndef MINIINFER_C_H
#define MINIINFER_C_H

#include <stdint.h>

/* The library's build defines MI_API as default visibility; every other symbol is hidden. */
#ifndef MI_API
#define MI_API
#endif

#ifdef __cplusplus
extern "C" {
#endif

typedef struct mi_engine mi_engine;

/* The library's version ("0.1.0"), static storage. */
MI_API const char* mi_version(void);
/* 1 if this build has the CUDA backend. */
MI_API int mi_has_cuda(void);
MI_API void mi_free_string(char* s);

/* The engine options and their defaults, as a JSON object (EngineConfig::to_json): the
 * keywords LLMEngine accepts. */
MI_API char* mi_engine_config_defaults(void);

/* Loads the model. config_json: an EngineConfig object (every field; see
 * mi_engine_config_defaults), plus an optional "revision" (default "main") for a model_dir
 * that is a Hugging Face name (org/name: found in its cache or downloaded, loader/hub.h). With
 * "use_multiprocess": true the tokenizer, engine core and detokenizer run as child processes of
 * `worker_binary` (the `miniinfer` executable); they receive SIGTERM if the calling thread ends, so
 * create the engine on a long-lived thread. worker_binary may be NULL otherwise. */
MI_API mi_engine* mi_engine_create(const char* config_json, const char* worker_binary,
                                   char** error);
/* Stops child processes, frees the model and the KV cache. NULL is ignored. */
MI_API void mi_engine_destroy(mi_engine* engine);

/* What the engine resolved: {"config": {...}, "max_model_len", "vocab_size",
 * "eos_token_ids": [...], "default_sampling_params": {...}, "overlap", "has_tokenizer",
 * "has_chat_template"}. */
MI_API char* mi_engine_info(mi_engine* engine, char** error);

/* Queues requests, all or none. requests_json: an array of {"request_id": str, "prompt": str
 * | "prompt_token_ids": [int] | "prompt_token_range": [offset, length], "params":
 * {SamplingParams fields} | null (the engine's defaults)}. A range points into token_ids (may
 * be NULL if no request has one): big batches of ids cross as one int32 array instead of JSON
 * text. Ids must be unique among open requests. On failure nothing stays queued, -1 is returned
 * and *failed_index (if not NULL) is the position of the bad request (-1: none in particular).
 * Returns 0 on success. */
MI_API int mi_engine_add_requests(mi_engine* engine, const char* requests_json,
                                  const int32_t* token_ids, int64_t num_token_ids,
                                  int64_t* failed_index, char** error);

/* One step's outputs (deltas), as a JSON array of objects: request_id, finished,
 * finish_reason, stop_reason, error, new_token_ids, delta_text, new_logprobs,
 * num_output_tokens, num_prompt_tokens, num_cached_tokens, and in a final output (finished)
 * also prompt_token_ids, token_ids, text, logprobs. A logprob entry is {"id", "logprob",
 * "top": [{"id", "logprob"}]}. One process: exactly one engine step. Multi-process: what
 * arrived, waiting up to timeout_s for the first output. */
MI_API char* mi_engine_step(mi_engine* engine, double timeout_s, char** error);

/* Runs the engine for up to max_seconds (at least one step if any work is left) and returns
 * the final outputs of the requests that finished meanwhile (deltas are dropped). Returns early
 * when no request is left. generate()'s hot loop: the steps run here, in C++, and Python wakes
 * a few times a second. The outputs are mi_engine_step's objects except that token_ids and
 * prompt_token_ids are replaced by "token_range" and "prompt_token_range", [offset, length]
 * into *tokens: a malloc'ed int32 array of *num_tokens ids (free it with mi_free_string; NULL
 * when empty), as ids are most of the bytes and JSON text is slow to parse in Python. */
MI_API char* mi_engine_run(mi_engine* engine, double max_seconds, int32_t** tokens,
                           int64_t* num_tokens, char** error);

/* Ends requests (a JSON array of ids; unknown ids are ignored). Their outputs, the final one
 * included, are dropped: no later step or run returns them. */
MI_API int mi_engine_abort(mi_engine* engine, const char* ids_json, char** error);

/* 1 while any request (aborted ones included, until the engine has let them go) is open. */
MI_API int mi_engine_has_unfinished(mi_engine* engine);

/* The model's tokenizer: text -> JSON array of ids; JSON array of ids -> text; a chat
 * (messages_json: [{role, content, ...}]) -> the rendered prompt. options_json: {"tools":
 * [...] | null, "add_generation_prompt": bool, "chat_template_kwargs": {...}}. */
MI_API char* mi_tokenize(mi_engine* engine, const char* text, int add_special_tokens, char** error);
MI_API char* mi_detokenize(mi_engine* engine, const char* ids_json, int skip_special_tokens,
                           char** error);
MI_API char* mi_apply_chat_template(mi_engine* engine, const char* messages_json,
                                    const char* options_json, char** error);

/* Checks sampling parameters as the engine will: the request-field table's rules for the
 * Python front end (server/request_fields.h: vLLM's fields MiniInfer does not implement are
 * refused), SamplingParams::from_json, then validate (token ids are checked against the
 * vocabulary only when a request is added). Returns 0, or -1 with "ValueError: <message naming
 * the field>". */
MI_API int mi_sampling_params_validate(const char* params_json, char** error);

/* `miniinfer bench`'s workloads: {"name", "prompts": [[ids]], "max_tokens": [...],
 * "temperature"} for a name (balanced, decode128, ...); balanced_file holds balanced's prompts.
 * multiturn is an error (ValueError): its prompts depend on the model's outputs. */
MI_API char* mi_bench_workload(const char* name, const char* balanced_file, char** error);
/* The speed of light of a workload (the JSON above) on this engine's model and max_num_seqs,
 * for the given memory bandwidth and matrix rate (see bench/workloads.h). -1 on error. */
MI_API double mi_engine_bench_sol_seconds(mi_engine* engine, const char* workload_json,
                                          double hbm_bytes_per_s, double matmul_flops,
                                          char** error);

#ifdef __cplusplus
}
#endif

#endif /* MINIINFER_C_H */
