#include "loader/hub.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <fstream>
#include <regex>

#include "core/check.h"
#include "core/json.h"
#include "loader/hub_download.h"

namespace miniinfer::hub {
namespace fs = std::filesystem;

namespace {

std::string env(const char* name) {
    const char* v = std::getenv(name);
    return v ? v : "";
}

fs::path expand_user(const std::string& p) {
    if (p == "~" || p.rfind("~/", 0) == 0)
        return fs::path(env("HOME")) / p.substr(std::min<size_t>(2, p.size()));
    return p;
}

bool is_commit_hash(const std::string& s) {
    return s.size() == 40 && std::all_of(s.begin(), s.end(), [](char c) {
               return std::isxdigit((unsigned char)c) && !std::isupper((unsigned char)c);
           });
}

std::string trim(std::string s) {
    while (!s.empty() && std::isspace((unsigned char)s.back())) s.pop_back();
    size_t begin = 0;
    while (begin < s.size() && std::isspace((unsigned char)s[begin])) ++begin;
    return s.substr(begin);
}

fs::path hf_home() {
    if (const std::string home = env("HF_HOME"); !home.empty()) return expand_user(home);
    if (const std::string xdg = env("XDG_CACHE_HOME"); !xdg.empty())
        return expand_user(xdg) / "huggingface";
    return expand_user("~/.cache/huggingface");
}

std::string token() {
    if (const std::string t = env("HF_TOKEN"); !t.empty()) return trim(t);
    const std::string path = env("HF_TOKEN_PATH");
    std::ifstream file(path.empty() ? hf_home() / "token" : expand_user(path));
    std::string t;
    if (file) std::getline(file, t);
    return trim(t);
}

std::string endpoint() {
    std::string e = env("HF_ENDPOINT");
    if (e.empty()) e = "https://huggingface.co";
    while (!e.empty() && e.back() == '/') e.pop_back();
    return e;
}

}  // namespace

bool is_repo_id(const std::string& model) {
    // The hub's rule: letters, digits, '-', '_', '.'; no "--" or ".."; at most 96 characters.
    static const std::regex part("[A-Za-z0-9][A-Za-z0-9._-]*");
    const size_t slash = model.find('/');
    if (slash == std::string::npos || model.find('/', slash + 1) != std::string::npos) return false;
    const std::string org = model.substr(0, slash), name = model.substr(slash + 1);
    for (const std::string& p : {org, name})
        if (p.size() > 96 || !std::regex_match(p, part) || p.find("--") != std::string::npos ||
            p.find("..") != std::string::npos || p.back() == '.')
            return false;
    return true;
}

fs::path cache_dir() {
    if (const std::string c = env("HF_HUB_CACHE"); !c.empty()) return expand_user(c);
    return hf_home() / "hub";
}

bool offline() {
    std::string v = env("HF_HUB_OFFLINE");
    std::transform(v.begin(), v.end(), v.begin(),
                   [](unsigned char c) { return char(std::tolower(c)); });
    return v == "1" || v == "true" || v == "yes" || v == "on";
}

std::string repo_folder_name(const std::string& repo_id) {
    std::string name = "models--" + repo_id;
    const size_t slash = name.find('/');
    if (slash != std::string::npos) name.replace(slash, 1, "--");
    return name;
}

std::optional<std::string> cached_commit(const fs::path& repo_dir, const std::string& revision) {
    if (is_commit_hash(revision)) return revision;
    std::ifstream ref(repo_dir / "refs" / revision);
    std::string hash;
    if (!ref || !std::getline(ref, hash)) return std::nullopt;
    hash = trim(hash);
    if (hash.empty()) return std::nullopt;
    return hash;
}

std::vector<std::string> missing_files(const fs::path& snapshot) {
    std::vector<std::string> missing;
    if (!fs::exists(snapshot / "config.json")) missing.push_back("config.json");
    const fs::path index = snapshot / "model.safetensors.index.json";
    if (fs::exists(index)) {
        std::vector<std::string> shards;
        try {
            const Json weight_map = Json::parse(read_text_file(index)).at("weight_map");
            for (const auto& [tensor, file] : weight_map.items())
                if (std::find(shards.begin(), shards.end(), file.get<std::string>()) ==
                    shards.end())
                    shards.push_back(file.get<std::string>());
        } catch (const std::exception&) {
            missing.push_back("model.safetensors.index.json");  // unreadable: fetch it again
            return missing;
        }
        for (const std::string& s : shards)
            if (!fs::exists(snapshot / s)) missing.push_back(s);
        return missing;
    }
    bool any = false;
    std::error_code ec;
    if (fs::is_directory(snapshot))
        for (const auto& entry : fs::directory_iterator(snapshot, ec))
            any |= entry.path().extension() == ".safetensors" && fs::exists(entry.path());
    if (!any) missing.push_back("*.safetensors");
    return missing;
}

fs::path resolve_model(const std::string& model, const std::string& revision) {
    if (fs::is_directory(model) || !is_repo_id(model)) return model;
    if (revision.empty()) fail("--revision must not be empty");
    const fs::path cache = cache_dir();
    const fs::path repo_dir = cache / repo_folder_name(model);
    if (const auto commit = cached_commit(repo_dir, revision)) {
        const fs::path snapshot = repo_dir / "snapshots" / *commit;
        const auto missing = missing_files(snapshot);
        // Online, a snapshot without a tokenizer may lack files the hub has: ask it.
        if (missing.empty() && (offline() || fs::exists(snapshot / "tokenizer.json")))
            return snapshot;
        if (offline()) {
            if (!fs::is_directory(snapshot))
                fail(
                    "{}: revision '{}' (commit {}) is not in the Hugging Face cache {} and "
                    "HF_HUB_OFFLINE is set",
                    model, revision, *commit, cache.string());
            std::string names;
            for (const std::string& m : missing) names += (names.empty() ? "" : ", ") + m;
            fail(
                "{}: the cached snapshot {} lacks {} and HF_HUB_OFFLINE is set (unset it to "
                "download them)",
                model, snapshot.string(), names);
        }
    } else if (offline()) {
        fail(
            "{}: not a local directory, and revision '{}' is not in the Hugging Face cache {} "
            "(HF_HUB_OFFLINE is set, so nothing is downloaded)",
            model, revision, cache.string());
    }
    return download_snapshot({endpoint(), model, revision, token(), cache, repo_dir});
}

}  // namespace miniinfer::hub
