#include "distributed/communicator.h"

#include <algorithm>
#include <vector>

namespace miniinfer {

int64_t Communicator::min_over_ranks(int64_t value, CommStream stream) {
    std::vector<int64_t> values(static_cast<size_t>(world()));
    Tensor all(values.data(), DType::kI64, {world()});
    all_gather(Tensor(&value, DType::kI64, {1}), all, stream);
    return *std::min_element(values.begin(), values.end());
}

}  // namespace miniinfer
