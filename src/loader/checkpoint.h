// Checkpoint: the tensors of a Hugging Face model directory, from model.safetensors or from
// the shards listed in model.safetensors.index.json. Opening validates every file (see
// SafetensorsFile) and that the index and the shards agree.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "loader/safetensors.h"

namespace miniinfer {

class Checkpoint {
  public:
    // Throws Error naming the directory or file at fault.
    static Checkpoint open(const std::filesystem::path& model_dir);

    bool contains(const std::string& name) const { return where_.count(name) != 0; }
    // The tensor, checked against `expected` shape: missing or misshapen is an Error naming the
    // tensor (and the file it is in).
    Tensor get(const std::string& name, const Shape& expected) const;
    // The tensor whatever its shape (optional tensors whose shape varies between writers).
    Tensor get_any(const std::string& name) const;
    // Gives back the resident pages of bytes [begin, end) of tensor `name`'s data once they are
    // copied (see SafetensorsFile::release); the tensor stays readable.
    void release(const std::string& name, size_t begin = 0, size_t end = SIZE_MAX) const;

    std::vector<std::string> names() const;
    size_t num_tensors() const { return where_.size(); }
    int64_t num_params() const;  // elements over all tensors
    size_t num_bytes() const;    // data bytes over all tensors
    const std::vector<SafetensorsFile>& files() const { return files_; }
    const std::filesystem::path& dir() const { return dir_; }

  private:
    std::filesystem::path dir_;
    std::vector<SafetensorsFile> files_;
    std::map<std::string, size_t> where_;  // tensor name -> index in files_
};

}  // namespace miniinfer
