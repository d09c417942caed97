// Reading .safetensors files (https://huggingface.co/docs/safetensors): an 8-byte little-endian
// header length, a JSON header {name: {dtype, shape, data_offsets}}, then the raw data.
//
// The file is memory-mapped; tensors are views into the mapping and keep it alive. Everything
// is validated at open time (header length, JSON, dtypes, shapes against byte ranges, ranges
// inside the file and not overlapping), so a truncated or corrupt file is an Error naming the
// file (and the tensor) before any byte of data is touched — never a crash.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <string>

#include "core/tensor.h"

namespace miniinfer {

struct SafetensorsEntry {
    std::string dtype_name;  // as written: "BF16", "F32", "I64", ...
    Shape shape;
    size_t begin = 0;  // byte range within the data section
    size_t end = 0;
};

class SafetensorsFile {
  public:
    // Throws Error naming the path on any problem.
    static SafetensorsFile open(const std::filesystem::path& path);

    const std::filesystem::path& path() const { return path_; }
    const std::map<std::string, SafetensorsEntry>& entries() const { return entries_; }
    bool contains(const std::string& name) const { return entries_.count(name) != 0; }
    const std::map<std::string, std::string>& metadata() const { return metadata_; }

    // A view of tensor `name` (BF16, F16, F32 or F8_E4M3; other dtypes are an Error naming the file
    // and tensor). The view keeps the mapping alive.
    Tensor tensor(const std::string& name) const;

    // Gives back this process's resident pages of bytes [begin, end) of tensor `name`'s data
    // (end clamped to its size; only pages wholly inside, so neighbours keep theirs). The data
    // stays readable: the mapping is read-only and private, so a later read faults the page in
    // again from the file. A loader calls this once it has copied the bytes, so its peak memory
    // holds the copy and not the mapping as well. The page cache is the kernel's to keep.
    void release(const std::string& name, size_t begin = 0, size_t end = SIZE_MAX) const;

  private:
    std::filesystem::path path_;
    std::shared_ptr<Storage> mapping_;
    const char* data_ = nullptr;  // start of the data section
    std::map<std::string, SafetensorsEntry> entries_;
    std::map<std::string, std::string> metadata_;
};

}  // namespace miniinfer
