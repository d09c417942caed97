#include "core/json.h"

#include <fstream>
#include <sstream>

namespace miniinfer {

std::string read_text_file(const std::filesystem::path& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) fail("{}: cannot open file", path.string());
    std::stringstream text;
    text << in.rdbuf();
    return text.str();
}

bool json_nests_deeper_than(std::string_view text, int max_depth) {
    int depth = 0;
    bool in_string = false, escaped = false;
    for (const char c : text) {
        if (in_string) {
            if (escaped)
                escaped = false;
            else if (c == '\\')
                escaped = true;
            else if (c == '"')
                in_string = false;
        } else if (c == '"') {
            in_string = true;
        } else if (c == '[' || c == '{') {
            if (++depth > max_depth) return true;
        } else if ((c == ']' || c == '}') && depth > 0) {
            --depth;
        }
    }
    return false;
}

Json read_json_file(const std::filesystem::path& path) {
    const std::string text = read_text_file(path);
    try {
        return Json::parse(text);
    } catch (const nlohmann::json::parse_error& e) {
        fail("{}: not valid JSON ({})", path.string(), e.what());
    }
}

}  // namespace miniinfer
