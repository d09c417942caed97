#include "loader/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>
#include <vector>

#include "core/json.h"

namespace miniinfer {
namespace {

constexpr uint64_t kMaxHeaderBytes = 100ull << 20;  // the format's own limit

class MappedFile : public Storage {
  public:
    MappedFile(const std::filesystem::path& path, size_t size) {
        int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
        if (fd < 0) fail("{}: cannot open ({})", path.string(), std::strerror(errno));
        void* p = size == 0 ? nullptr : ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
        int err = errno;
        ::close(fd);
        if (p == MAP_FAILED) fail("{}: mmap failed ({})", path.string(), std::strerror(err));
        data = p;
        bytes = size;
    }
    ~MappedFile() override {
        if (data) ::munmap(data, bytes);
    }
};

// Element size of every dtype the format defines, so any valid file parses; only BF16, F16,
// F32 and F8_E4M3 can be turned into tensors.
size_t element_bytes(const std::string& dtype) {
    static const std::map<std::string, size_t> sizes = {
        {"BOOL", 1}, {"U8", 1},  {"I8", 1},  {"F8_E4M3", 1}, {"F8_E5M2", 1},
        {"U16", 2},  {"I16", 2}, {"F16", 2}, {"BF16", 2},    {"U32", 4},
        {"I32", 4},  {"F32", 4}, {"U64", 8}, {"I64", 8},     {"F64", 8}};
    auto it = sizes.find(dtype);
    return it == sizes.end() ? 0 : it->second;
}

}  // namespace

SafetensorsFile SafetensorsFile::open(const std::filesystem::path& path) {
    const std::string where = path.string();
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0) fail("{}: cannot open ({})", where, std::strerror(errno));
    if (!S_ISREG(st.st_mode)) fail("{}: not a regular file", where);
    const size_t file_bytes = size_t(st.st_size);
    if (file_bytes < 8)
        fail("{}: {} bytes is too short for a safetensors file (truncated?)", where, file_bytes);

    SafetensorsFile file;
    file.path_ = path;
    file.mapping_ = std::make_shared<MappedFile>(path, file_bytes);
    const char* base = static_cast<const char*>(file.mapping_->data);
    uint64_t header_bytes = 0;
    std::memcpy(&header_bytes, base, 8);  // little-endian, as is every machine we run on
    if (header_bytes > kMaxHeaderBytes || header_bytes > file_bytes - 8)
        fail(
            "{}: header length {} does not fit in the file of {} bytes (truncated or not "
            "safetensors)",
            where, header_bytes, file_bytes);
    file.data_ = base + 8 + header_bytes;
    const size_t data_bytes = file_bytes - 8 - header_bytes;

    Json header;
    try {
        header = Json::parse(base + 8, base + 8 + header_bytes);
    } catch (const nlohmann::json::parse_error& e) {
        fail("{}: header is not valid JSON ({})", where, e.what());
    }
    if (!header.is_object()) fail("{}: header is not a JSON object", where);

    std::vector<std::pair<size_t, size_t>> ranges;
    for (const auto& [name, info] : header.items()) {
        if (name == "__metadata__") {
            if (!info.is_object()) fail("{}: __metadata__ is not an object", where);
            for (const auto& [k, v] : info.items())
                if (v.is_string()) file.metadata_[k] = v.get<std::string>();
            continue;
        }
        const std::string field = fmt::format("{}: tensor '{}'", where, name);
        if (!info.is_object()) fail("{}: entry is not an object", field);
        SafetensorsEntry entry;
        entry.dtype_name = json_get<std::string>(info, "dtype", field);
        size_t elem = element_bytes(entry.dtype_name);
        if (elem == 0) fail("{}: unknown dtype '{}'", field, entry.dtype_name);
        entry.shape = json_get<Shape>(info, "shape", field);
        auto offsets = json_get<std::vector<int64_t>>(info, "data_offsets", field);
        if (offsets.size() != 2 || offsets[0] < 0 || offsets[1] < offsets[0])
            fail("{}: bad data_offsets {}", field, info["data_offsets"].dump());
        entry.begin = size_t(offsets[0]);
        entry.end = size_t(offsets[1]);
        uint64_t numel = 1;
        for (int64_t d : entry.shape) {
            if (d < 0) fail("{}: negative dimension in shape {}", field, shape_str(entry.shape));
            if (d != 0 && numel > std::numeric_limits<uint64_t>::max() / 8 / uint64_t(d))
                fail("{}: shape {} is too large", field, shape_str(entry.shape));
            numel *= uint64_t(d);
        }
        if (entry.end > data_bytes)
            fail("{}: data [{}, {}) runs past the end of the file's {} data bytes (truncated?)",
                 field, entry.begin, entry.end, data_bytes);
        if (entry.end - entry.begin != numel * elem)
            fail("{}: {} {} needs {} bytes but data_offsets span {}", field, entry.dtype_name,
                 shape_str(entry.shape), numel * elem, entry.end - entry.begin);
        ranges.emplace_back(entry.begin, entry.end);
        file.entries_.emplace(name, std::move(entry));
    }
    std::sort(ranges.begin(), ranges.end());
    for (size_t i = 1; i < ranges.size(); ++i)
        if (ranges[i].first < ranges[i - 1].second)
            fail("{}: tensors' data ranges overlap at byte {}", where, ranges[i].first);
    return file;
}

Tensor SafetensorsFile::tensor(const std::string& name) const {
    auto it = entries_.find(name);
    if (it == entries_.end()) fail("{}: no tensor '{}'", path_.string(), name);
    const SafetensorsEntry& e = it->second;
    DType dtype;
    if (e.dtype_name == "BF16")
        dtype = DType::kBF16;
    else if (e.dtype_name == "F16")
        dtype = DType::kF16;
    else if (e.dtype_name == "F32")
        dtype = DType::kF32;
    else if (e.dtype_name == "F8_E4M3")
        dtype = DType::kF8E4M3;
    else
        fail("{}: tensor '{}' has dtype {}; expected BF16, F16, F32 or F8_E4M3", path_.string(),
             name, e.dtype_name);
    const char* p = data_ + e.begin;
    // The format aligns data only if the writer padded its header; Hugging Face's does, others
    // need not. Misaligned data is copied rather than read through a misaligned pointer.
    if (reinterpret_cast<uintptr_t>(p) % dtype_size(dtype) != 0) {
        Tensor copy = Tensor::zeros(e.shape, dtype);
        std::memcpy(copy.raw(), p, e.end - e.begin);
        return copy;
    }
    return Tensor(const_cast<char*>(p), dtype, e.shape, Device::kCPU, mapping_);
}

void SafetensorsFile::release(const std::string& name, size_t begin, size_t end) const {
    auto it = entries_.find(name);
    if (it == entries_.end()) fail("{}: no tensor '{}'", path_.string(), name);
    const SafetensorsEntry& e = it->second;
    end = std::min(end, e.end - e.begin);
    if (begin >= end) return;
    static const uintptr_t page = uintptr_t(::sysconf(_SC_PAGESIZE));
    const auto first = reinterpret_cast<uintptr_t>(data_ + e.begin + begin);
    const auto last = reinterpret_cast<uintptr_t>(data_ + e.begin + end);
    const uintptr_t lo = (first + page - 1) / page * page, hi = last / page * page;
    // Advice only: a failure leaves the pages resident, which costs memory but not correctness.
    if (lo < hi) ::madvise(reinterpret_cast<void*>(lo), hi - lo, MADV_DONTNEED);
}

}  // namespace miniinfer
