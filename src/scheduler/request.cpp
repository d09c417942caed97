#include "scheduler/request.h"

namespace miniinfer {

const char* finish_reason_name(FinishReason reason) {
    switch (reason) {
        case FinishReason::kNone:
            return "";
        case FinishReason::kStop:
            return "stop";
        case FinishReason::kLength:
            return "length";
        case FinishReason::kAbort:
            return "abort";
        case FinishReason::kError:
            return "error";
    }
    return "";
}

std::vector<int32_t> Request::all_tokens() const {
    std::vector<int32_t> out(prompt_ids);
    out.insert(out.end(), output_ids.begin(), output_ids.end());
    return out;
}

}  // namespace miniinfer
