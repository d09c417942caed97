// Writes small .safetensors files for loader tests, including deliberately broken ones.
#pragma once

#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "core/json.h"
#include "core/tensor.h"

namespace miniinfer::testing {

struct FakeTensor {
    std::string name;
    std::string dtype;  // "F32", "BF16", ...
    Shape shape;
    std::vector<uint8_t> bytes;
};

inline FakeTensor f32_tensor(std::string name, Shape shape, float start = 0.f) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    FakeTensor t{std::move(name), "F32", std::move(shape), std::vector<uint8_t>(size_t(n) * 4)};
    for (int64_t i = 0; i < n; ++i) {
        float v = start + float(i);
        std::memcpy(&t.bytes[size_t(i) * 4], &v, 4);
    }
    return t;
}

inline std::string header_for(const std::vector<FakeTensor>& tensors) {
    Json header = Json::object();
    size_t offset = 0;
    for (const auto& t : tensors) {
        header[t.name] = {{"dtype", t.dtype},
                          {"shape", t.shape},
                          {"data_offsets", {offset, offset + t.bytes.size()}}};
        offset += t.bytes.size();
    }
    header["__metadata__"] = {{"format", "pt"}};
    return header.dump();
}

// header_json empty: the correct header for `tensors`.
inline void write_safetensors(const std::filesystem::path& path,
                              const std::vector<FakeTensor>& tensors,
                              std::string header_json = "") {
    if (header_json.empty()) header_json = header_for(tensors);
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    uint64_t len = header_json.size();
    out.write(reinterpret_cast<const char*>(&len), 8);
    out << header_json;
    for (const auto& t : tensors)
        out.write(reinterpret_cast<const char*>(t.bytes.data()), std::streamsize(t.bytes.size()));
}

inline std::filesystem::path fresh_dir(const std::string& name) {
    auto dir = std::filesystem::temp_directory_path() / ("miniinfer_" + name);
    std::filesystem::remove_all(dir);
    std::filesystem::create_directories(dir);
    return dir;
}

// Runs fn and returns the Error's message ("" if nothing was thrown).
template <typename Fn>
std::string error_message(Fn&& fn) {
    try {
        fn();
    } catch (const Error& e) {
        return e.what();
    }
    return "";
}

}  // namespace miniinfer::testing
