// The "normalizer" of tokenizer.json: Unicode normalization applied to text between added
// tokens. Supported: null, NFC, NFD, NFKC, NFKD and a Sequence of those; anything else is an
// Error at load time (we never silently skip a step Hugging Face would run).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "core/json.h"

namespace miniinfer {

class Normalizer {
  public:
    // `spec` is the JSON value of tokenizer.json's "normalizer" (may be null).
    static Normalizer from_json(const Json& spec);

    bool empty() const { return forms_.empty(); }

    // Normalizes valid UTF-8 `text` into `out` (replacing its contents). Returns a view of the
    // result: `text` itself when no step changes it (the common, allocation-free case).
    std::string_view apply(std::string_view text, std::string& out) const;

  private:
    enum class Form { kNFC, kNFD, kNFKC, kNFKD };
    std::vector<Form> forms_;
};

}  // namespace miniinfer
