#include "loader/checkpoint.h"

#include <algorithm>
#include <set>

#include "core/json.h"
#include "core/thread_pool.h"

namespace miniinfer {
namespace {

std::vector<std::filesystem::path> shard_paths(const std::filesystem::path& dir,
                                               std::map<std::string, std::string>* index_map) {
    const auto index = dir / "model.safetensors.index.json";
    if (std::filesystem::exists(index)) {
        Json json = read_json_file(index);
        if (!json.is_object() || !json.contains("weight_map") || !json["weight_map"].is_object())
            fail("{}: missing object 'weight_map'", index.string());
        std::set<std::string> files;
        for (const auto& [name, file] : json["weight_map"].items()) {
            if (!file.is_string())
                fail("{}: weight_map['{}'] is not a file name", index.string(), name);
            std::string fn = file.get<std::string>();
            if (fn.find('/') != std::string::npos || fn == "..")
                fail("{}: weight_map['{}'] = '{}' is not a file in the directory", index.string(),
                     name, fn);
            (*index_map)[name] = fn;
            files.insert(fn);
        }
        std::vector<std::filesystem::path> paths;
        for (const auto& fn : files) paths.push_back(dir / fn);
        return paths;
    }
    if (std::filesystem::exists(dir / "model.safetensors")) return {dir / "model.safetensors"};
    fail(
        "{}: no model.safetensors or model.safetensors.index.json (only safetensors checkpoints "
        "are supported)",
        dir.string());
}

}  // namespace

Checkpoint Checkpoint::open(const std::filesystem::path& model_dir) {
    if (!std::filesystem::is_directory(model_dir)) fail("{}: not a directory", model_dir.string());
    Checkpoint ckpt;
    ckpt.dir_ = model_dir;
    std::map<std::string, std::string> index_map;
    auto paths = shard_paths(model_dir, &index_map);

    // Shards are opened (mapped and validated) in parallel.
    std::vector<std::optional<SafetensorsFile>> opened(paths.size());
    ThreadPool::current().parallel_for(int64_t(paths.size()), [&](int64_t begin, int64_t end) {
        for (int64_t i = begin; i < end; ++i)
            opened[size_t(i)] = SafetensorsFile::open(paths[size_t(i)]);
    });
    for (auto& f : opened) ckpt.files_.push_back(std::move(*f));

    for (size_t i = 0; i < ckpt.files_.size(); ++i) {
        for (const auto& [name, entry] : ckpt.files_[i].entries()) {
            auto [it, inserted] = ckpt.where_.emplace(name, i);
            if (!inserted)
                fail("tensor '{}' appears in both {} and {}", name,
                     ckpt.files_[it->second].path().string(), ckpt.files_[i].path().string());
        }
    }
    for (const auto& [name, fn] : index_map) {
        auto it = ckpt.where_.find(name);
        if (it == ckpt.where_.end() || ckpt.files_[it->second].path().filename() != fn)
            fail("{}: the index places tensor '{}' in this file but it is not there",
                 (model_dir / fn).string(), name);
    }
    return ckpt;
}

Tensor Checkpoint::get(const std::string& name, const Shape& expected) const {
    auto it = where_.find(name);
    if (it == where_.end()) fail("{}: checkpoint has no tensor '{}'", dir_.string(), name);
    const SafetensorsFile& file = files_[it->second];
    Tensor t = file.tensor(name);
    if (t.shape() != expected)
        fail("{}: tensor '{}' has shape {}, expected {} from config.json", file.path().string(),
             name, shape_str(t.shape()), shape_str(expected));
    return t;
}

Tensor Checkpoint::get_any(const std::string& name) const {
    auto it = where_.find(name);
    if (it == where_.end()) fail("{}: checkpoint has no tensor '{}'", dir_.string(), name);
    return files_[it->second].tensor(name);
}

void Checkpoint::release(const std::string& name, size_t begin, size_t end) const {
    auto it = where_.find(name);
    if (it == where_.end()) fail("{}: checkpoint has no tensor '{}'", dir_.string(), name);
    files_[it->second].release(name, begin, end);
}

std::vector<std::string> Checkpoint::names() const {
    std::vector<std::string> out;
    for (const auto& [name, _] : where_) out.push_back(name);
    return out;
}

int64_t Checkpoint::num_params() const {
    int64_t n = 0;
    for (const auto& f : files_)
        for (const auto& [_, e] : f.entries()) {
            int64_t k = 1;
            for (int64_t d : e.shape) k *= d;
            n += k;
        }
    return n;
}

size_t Checkpoint::num_bytes() const {
    size_t n = 0;
    for (const auto& f : files_)
        for (const auto& [_, e] : f.entries()) n += e.end - e.begin;
    return n;
}

}  // namespace miniinfer
