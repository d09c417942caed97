// Models by Hugging Face name ("Qwen/Qwen3-0.6B"), found in or downloaded into the cache that
// huggingface_hub uses, laid out as it lays it out, so each sees the other's files:
//
//   {cache}/models--{org}--{name}/
//     refs/{revision}              the commit hash a branch or tag points at ("main" -> 4f8e...)
//     blobs/{etag}                 file contents, named by the hub's ETag (sha256 for LFS files)
//     blobs/{etag}.incomplete      a download in progress (continued with a Range request)
//     snapshots/{commit}/{file}    symlink -> ../../blobs/{etag}
//   {cache}/.locks/models--{org}--{name}/{etag}.lock   held while a blob is written
//
// {cache} is HF_HUB_CACHE, else HF_HOME/hub, else ~/.cache/huggingface/hub. Downloads come from
// HF_ENDPOINT (default https://huggingface.co) with HF_TOKEN (else the token file `hf auth login`
// writes) as a bearer token; HF_HUB_OFFLINE=1 never touches the network.
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace miniinfer::hub {

// What MiniInfer needs from a model repository: a directory that holds config.json, the
// generation config, the tokenizer files, the chat template and the safetensors checkpoint.
//
// `model` that is an existing directory is returned as it is. One that looks like a repo id
// (org/name) resolves to its snapshot for `revision` (a branch, a tag or a commit hash) in the
// cache; a snapshot missing files is completed from the hub (unless offline), printing a
// progress line per file on stderr when that is a terminal. Anything else is returned as it is
// (the loader then says it is not a directory).
// Throws Error: repo or revision not found, gated (401/403, naming HF_TOKEN), a file missing,
// offline and not cached, a failed write (disk full), no connection, a corrupt download.
std::filesystem::path resolve_model(const std::string& model, const std::string& revision = "main");

// The pieces, for tests and for callers that want to know where things are.
bool is_repo_id(const std::string& model);  // "org/name" as the hub allows names
std::filesystem::path cache_dir();          // from the environment, as above
bool offline();                             // HF_HUB_OFFLINE is 1/true/yes/on
// models--{org}--{name}
std::string repo_folder_name(const std::string& repo_id);
// The commit `revision` means in the cache: itself when a 40-hex hash, else refs/{revision}.
std::optional<std::string> cached_commit(const std::filesystem::path& repo_dir,
                                         const std::string& revision);
// Files a snapshot needs to load that it lacks: config.json, then the shards that
// model.safetensors.index.json lists (or "*.safetensors" when there are none).
std::vector<std::string> missing_files(const std::filesystem::path& snapshot);

}  // namespace miniinfer::hub
