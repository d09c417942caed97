// What the config tests share: the error ModelConfig::from_json raises for a config.
#pragma once

#include <string>

#include "config/model_config.h"
#include "core/check.h"

namespace miniinfer::testing {

// The message from_json throws for `json`, or "" if it parses.
inline std::string error_of(const Json& json) {
    try {
        ModelConfig::from_json(json, "config.json");
    } catch (const Error& e) {
        return e.what();
    }
    return "";
}

}  // namespace miniinfer::testing
