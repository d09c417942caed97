// An embedding lookup is a row gather of the table: the same bandwidth-bound copy as
// gather_rows (16-byte vectors when hidden % 8 == 0), so it is one, behind its own name and
// shape checks.
#include "kernels/cuda/embedding.h"

#include "core/cuda/cuda_check.h"
#include "kernels/cuda/gather_rows.h"

namespace miniinfer::cuda {

void embedding(const Tensor& ids, const Tensor& table, Tensor& out, cudaStream_t stream) {
    MI_LAUNCH_CHECK(table.ndim() == 2, "embedding: table must be [vocab, hidden]");
    MI_LAUNCH_CHECK(ids.ndim() == 1, "embedding: ids must be [n]");
    MI_LAUNCH_CHECK(out.ndim() == 2 && out.size(0) == ids.size(0) && out.size(1) == table.size(1),
                    "embedding: out must be [n, hidden]");
    gather_rows(table, ids, out, stream);
}

}  // namespace miniinfer::cuda
