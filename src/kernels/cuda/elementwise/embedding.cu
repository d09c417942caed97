// An embedding lookup is a row gather of the table: the same bandwidth-bound copy as
// gather_rows (16-byte vectors when hidden % 8 == 0), so it is one, behind its own name and
// shape checks.
#include "kernels/cuda/elementwise/embedding.h"

#include "kernels/cuda/elementwise/gather_rows.h"
#include "kernels/cuda/primitives/check_tensor.h"

namespace miniinfer::cuda {

void embedding(const Tensor& ids, const Tensor& table, Tensor& out, cudaStream_t stream) {
    check_cuda_tensor(table, DType::kBF16, "embedding: table",
                      {kAnySize, kAnySize});                            // [vocab, hidden]
    check_cuda_tensor(ids, DType::kI32, "embedding: ids", {kAnySize});  // [n]
    check_cuda_tensor(out, DType::kBF16, "embedding: out", {ids.size(0), table.size(1)});
    gather_rows(table, ids, out, stream);
}

}  // namespace miniinfer::cuda
