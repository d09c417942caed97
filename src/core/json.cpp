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

Json read_json_file(const std::filesystem::path& path) {
    const std::string text = read_text_file(path);
    try {
        return Json::parse(text);
    } catch (const nlohmann::json::parse_error& e) {
        fail("{}: not valid JSON ({})", path.string(), e.what());
    }
}

}  // namespace miniinfer
