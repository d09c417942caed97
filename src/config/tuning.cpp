#include "config/tuning.h"

#include <charconv>
#include <type_traits>
#include <utility>

#include "core/check.h"

namespace miniinfer {
namespace {

// Every field with its name, for set_tuning and to_string (T: Tuning or const Tuning).
template <class T, class F>
void visit(T& t, F&& f) {
    f("pdl", t.pdl);
    f("decode_min_keys", t.decode_min_keys);
    f("decode_qkv_max_seqs", t.decode_qkv_max_seqs);
    f("decode_cluster_splits", t.decode_cluster_splits);
    f("decode_longest_first", t.decode_longest_first);
    f("moe_silu_tile", t.moe_silu_tile);
}

}  // namespace

void set_tuning(Tuning& tuning, std::string_view key_value) {
    const size_t eq = key_value.find('=');
    if (eq == std::string_view::npos) fail("tuning '{}': expected key=value", key_value);
    const std::string_view key = key_value.substr(0, eq), text = key_value.substr(eq + 1);
    bool found = false;
    visit(tuning, [&](std::string_view name, auto& field) {
        if (name != key) return;
        found = true;
        int value = 0;
        const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
        if (ec != std::errc() || end != text.data() + text.size())
            fail("tuning '{}': '{}' is not an integer", key, text);
        if constexpr (std::is_same_v<std::decay_t<decltype(field)>, bool>) {
            if (value != 0 && value != 1) fail("tuning '{}': expected 0 or 1, got {}", key, text);
            field = value == 1;
        } else {
            if (value < -1) fail("tuning '{}': expected -1 or more, got {}", key, text);
            field = value;
        }
    });
    if (!found) {
        std::string keys;
        visit(std::as_const(tuning), [&](std::string_view name, const auto&) {
            keys += keys.empty() ? "" : ", ";
            keys += name;
        });
        fail("tuning '{}' is not a key ({})", key, keys);
    }
}

std::string to_string(const Tuning& tuning) {
    std::string out;
    visit(tuning, [&](std::string_view name, const auto& field) {
        out += fmt::format("{}{}={}", out.empty() ? "" : " ", name, int(field));
    });
    return out;
}

}  // namespace miniinfer
