// Reads one hex-encoded byte string per line on stdin and prints, per line:
//   <ids with parse_special> | <ids without parse_special> | <hex of decode(first ids)>
// A line "ids 1 2 3" instead prints <hex of decode(ids)> | <hex of decode(ids, skip special)>.
// Used by fuzz_vs_hf.py to compare raw bytes (which JSON cannot carry) with Hugging Face.
#include <cstdio>
#include <iostream>
#include <sstream>
#include <string>

#include "tokenizer/tokenizer.h"

namespace {

std::string from_hex(const std::string& hex) {
    std::string out;
    for (size_t i = 0; i + 1 < hex.size(); i += 2)
        out += char(std::stoi(hex.substr(i, 2), nullptr, 16));
    return out;
}

void print_ids(const std::vector<int32_t>& ids) {
    for (size_t i = 0; i < ids.size(); ++i) std::printf(i ? " %d" : "%d", ids[i]);
}

void print_hex(const std::string& bytes) {
    for (unsigned char c : bytes) std::printf("%02x", c);
}

}  // namespace

int main(int argc, char** argv) {
    if (argc != 2) {
        std::fprintf(stderr, "usage: %s MODEL_DIR < hex_lines\n", argv[0]);
        return 2;
    }
    try {
        auto tok = miniinfer::Tokenizer::load(argv[1]);
        std::string line;
        while (std::getline(std::cin, line)) {
            if (line.rfind("ids", 0) == 0) {
                std::vector<int32_t> ids;
                std::istringstream in(line.substr(3));
                for (int32_t id; in >> id;) ids.push_back(id);
                print_hex(tok.decode(ids, false));
                std::printf(" | ");
                print_hex(tok.decode(ids, true));
                std::printf("\n");
                continue;
            }
            const std::string text = from_hex(line);
            const auto ids = tok.encode(text, {.add_special_tokens = true, .parse_special = true});
            print_ids(ids);
            std::printf(" | ");
            print_ids(tok.encode(text, {.add_special_tokens = true, .parse_special = false}));
            std::printf(" | ");
            print_hex(tok.decode(ids));
            std::printf("\n");
        }
    } catch (const std::exception& e) {
        std::fprintf(stderr, "error: %s\n", e.what());
        return 1;
    }
    return 0;
}
