// Completing a snapshot from the hub. Internal to loader/hub.cpp (see hub.h for the layout).
#pragma once

#include <filesystem>
#include <string>

namespace miniinfer::hub {

struct DownloadRequest {
    std::string endpoint;            // "https://huggingface.co", no trailing slash
    std::string repo_id;             // "org/name"
    std::string revision;            // branch, tag or commit hash
    std::string token;               // "" for none
    std::filesystem::path cache;     // the hub cache
    std::filesystem::path repo_dir;  // cache / models--org--name
};

// Asks the hub for the revision's commit and file list, downloads the files MiniInfer needs that
// the commit's snapshot lacks (blob, then symlink), writes refs/{revision} and returns the
// snapshot directory. Throws Error (see resolve_model).
std::filesystem::path download_snapshot(const DownloadRequest& request);

}  // namespace miniinfer::hub
