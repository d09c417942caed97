#include "server/tool_calls.h"

#include "core/json.h"

namespace miniinfer {
namespace {

constexpr std::string_view kOpen = "<tool_call>", kClose = "</tool_call>";

// The call a block's body describes, or nothing (the block is then plain text).
std::optional<ToolCall> call_of(std::string_view body) {
    Json j = Json::parse(body.begin(), body.end(), nullptr, /*allow_exceptions=*/false);
    if (!j.is_object() || !j.contains("name") || !j["name"].is_string()) return std::nullopt;
    Json args = j.value("arguments", Json::object());
    if (args.is_string()) {  // some models quote the object: keep it if it parses as one
        Json parsed = Json::parse(args.get<std::string>(), nullptr, false);
        if (!parsed.is_object()) return std::nullopt;
        args = parsed;
    }
    if (!args.is_object()) return std::nullopt;
    return ToolCall{"", j["name"].get<std::string>(), args.dump()};
}

// Length of the longest suffix of `s` that is a proper prefix of `tag`.
size_t partial_tag(std::string_view s, std::string_view tag) {
    for (size_t n = std::min(s.size(), tag.size() - 1); n > 0; --n)
        if (s.substr(s.size() - n) == tag.substr(0, n)) return n;
    return 0;
}

// Content around calls loses the line breaks that only separated it from a block.
std::string trim_newlines(std::string s) {
    const size_t begin = s.find_first_not_of("\n");
    if (begin == std::string::npos) return "";
    const size_t end = s.find_last_not_of("\n");
    return s.substr(begin, end - begin + 1);
}

}  // namespace

ToolCallText parse_tool_calls(const std::string& text, const std::string& id_prefix) {
    ToolCallStreamer streamer(id_prefix);
    ToolCallStreamer::Delta a = streamer.feed(text), b = streamer.finish();
    ToolCallText out{a.content + b.content, std::move(a.calls)};
    out.calls.insert(out.calls.end(), b.calls.begin(), b.calls.end());
    if (!out.calls.empty()) out.content = trim_newlines(out.content);
    return out;
}

ToolCallStreamer::Delta ToolCallStreamer::feed(const std::string& text) {
    Delta d;
    held_ += text;
    for (;;) {
        if (!in_block_) {
            const size_t open = held_.find(kOpen);
            if (open == std::string::npos) {
                const size_t keep = partial_tag(held_, kOpen);
                d.content += held_.substr(0, held_.size() - keep);
                held_.erase(0, held_.size() - keep);
                return d;
            }
            d.content += held_.substr(0, open);
            held_.erase(0, open);  // held_ starts with the tag
            in_block_ = true;
        }
        const size_t close = held_.find(kClose);
        if (close == std::string::npos) return d;  // the block goes on
        const std::string block = held_.substr(0, close + kClose.size());
        held_.erase(0, block.size());
        in_block_ = false;
        const std::string_view body =
            std::string_view(block).substr(kOpen.size(), close - kOpen.size());
        if (std::optional<ToolCall> call = call_of(body)) {
            call->id = id_prefix_ + std::to_string(num_calls_++);
            d.calls.push_back(std::move(*call));
        } else {
            d.content += block;  // not a call: the text as the model wrote it
        }
    }
}

ToolCallStreamer::Delta ToolCallStreamer::finish() {
    Delta d;
    d.content = std::exchange(held_, {});
    in_block_ = false;
    return d;
}

}  // namespace miniinfer
