// The MINIINFER_* environment switches (README, "Environment"): each caller reads its own once,
// at first use, and keeps the value.
#pragma once

#include <cstdlib>
#include <string_view>

namespace miniinfer {

// Whether a switch is on: `fallback` when the variable is unset, off when it is "0", on for any
// other value.
inline bool env_switch(const char* name, bool fallback) {
    const char* v = std::getenv(name);
    return v == nullptr ? fallback : std::string_view(v) != "0";
}

// The variable's integer value (std::atoi: 0 for text that is not a number), or fallback when
// it is unset.
inline int env_int(const char* name, int fallback) {
    const char* v = std::getenv(name);
    return v == nullptr ? fallback : std::atoi(v);
}

}  // namespace miniinfer
