#include "distributed/control_messages.h"

#include <cstring>
#include <span>

#include "core/check.h"

namespace miniinfer {

std::string encode_step(const ForwardBatch& b) {
    const std::span<const int32_t> parts[] = {b.input_ids,      b.positions,   b.query_start,
                                              b.seq_lens,       b.block_table, b.slot_mapping,
                                              b.logits_indices, b.state_slots};
    std::string out(1, 'S');
    auto put = [&](const void* p, size_t n) { out.append(static_cast<const char*>(p), n); };
    put(&b.max_pages, sizeof b.max_pages);
    for (const auto& part : parts) {
        const int64_t n = int64_t(part.size());
        put(&n, sizeof n);
        put(part.data(), part.size_bytes());
    }
    return out;
}

std::optional<DecodedStep> decode_control(const std::string& m) {
    if (m.empty() || m[0] == kQuitMessage) return std::nullopt;
    if (m[0] != 'S') fail("tensor-parallel link: an unknown control message");
    DecodedStep d;
    size_t at = 1;
    auto get = [&](void* p, size_t n) {
        if (at + n > m.size()) fail("tensor-parallel link: a truncated step message");
        std::memcpy(p, m.data() + at, n);
        at += n;
    };
    get(&d.max_pages, sizeof d.max_pages);
    for (auto& part : d.parts) {
        int64_t n = 0;
        get(&n, sizeof n);
        if (n < 0 || size_t(n) > m.size()) fail("tensor-parallel link: a corrupt step message");
        part.resize(size_t(n));
        get(part.data(), size_t(n) * sizeof(int32_t));
    }
    return d;
}

namespace tensor_parallel {

namespace {
Json identity(const ModelConfig& m) {
    return {
        {"vocab_size", m.vocab_size}, {"num_layers", m.num_layers}, {"hidden_size", m.hidden_size}};
}
}  // namespace

Json welcome(const EngineConfig& c, const ModelConfig& m) {
    return {{"num_pages", c.num_pages},
            {"page_size", c.page_size},
            {"expert_parallel", c.enable_expert_parallel},
            {"seed", c.seed},
            {"load_format", c.load_format},
            {"kv_cache_dtype", c.kv_cache_dtype},
            {"model", identity(m)}};
}

void check_same_model(const Json& welcome, const ModelConfig& m, const std::string& model_dir) {
    if (identity(m) != welcome.at("model"))
        fail("{} is not rank 0's model ({} here, {} there)", model_dir, identity(m).dump(),
             welcome.at("model").dump());
}

std::string to_hex(const std::string& bytes) {
    static const char* digits = "0123456789abcdef";
    std::string out;
    for (unsigned char c : bytes) {
        out += digits[c >> 4];
        out += digits[c & 15];
    }
    return out;
}

std::string from_hex(const std::string& hex) {
    MI_CHECK(hex.size() % 2 == 0, "tensor-parallel: a bad NCCL id");
    auto value = [](char c) {
        if (c >= '0' && c <= '9') return c - '0';
        if (c >= 'a' && c <= 'f') return c - 'a' + 10;
        fail("tensor-parallel: a bad NCCL id");
    };
    std::string out;
    for (size_t i = 0; i < hex.size(); i += 2) out += char(value(hex[i]) * 16 + value(hex[i + 1]));
    return out;
}

}  // namespace tensor_parallel

}  // namespace miniinfer
