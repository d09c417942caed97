// Reading the JSON-lines golden files made by tools/make_tokenizer_goldens.py.
#pragma once

#include <gtest/gtest.h>

#include <fstream>
#include <string>
#include <vector>

#include "core/json.h"

namespace miniinfer::testing {

inline std::vector<nlohmann::ordered_json> read_jsonl(const std::string& name) {
    const std::string path = std::string(MINIINFER_TOKENIZER_GOLDEN) + "/" + name;
    std::ifstream in(path);
    EXPECT_TRUE(in.good()) << "cannot open " << path;
    std::vector<nlohmann::ordered_json> rows;
    std::string line;
    while (std::getline(in, line))
        if (!line.empty()) rows.push_back(nlohmann::ordered_json::parse(line));
    return rows;
}

inline std::string qwen3_dir() {
    return std::string(MINIINFER_FIXTURES) + "/qwen3-demo";
}

// A small byte-level BPE in Qwen3.5's form (made by tools/make_tokenizer_goldens.py).
inline std::string qwen35_dir() {
    return std::string(MINIINFER_FIXTURES) + "/qwen35-tokenizer";
}

}  // namespace miniinfer::testing
