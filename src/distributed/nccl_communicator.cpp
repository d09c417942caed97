#include "distributed/nccl_communicator.h"

#include <nccl.h>

#include "core/check.h"
#include "core/cuda/cuda_check.h"
#include "core/cuda/device_buffer.h"

namespace miniinfer::cuda {
namespace {

#define MI_NCCL_CHECK(expr)                                                                      \
    do {                                                                                         \
        const ncclResult_t mi_nccl_result = (expr);                                              \
        if (mi_nccl_result != ncclSuccess)                                                       \
            ::miniinfer::fail("NCCL: {} failed: {}", #expr, ncclGetErrorString(mi_nccl_result)); \
    } while (0)

ncclComm_t as_comm(void* p) {
    return static_cast<ncclComm_t>(p);
}

cudaStream_t as_stream(CommStream stream) {
    return static_cast<cudaStream_t>(stream);
}

void check_device(const Tensor& t) {
    MI_CHECK(t.device() == Device::kCUDA && t.is_contiguous(),
             "NcclCommunicator: contiguous device tensors only, got {}", t.describe());
}

ncclDataType_t nccl_type(DType t) {
    switch (t) {
        case DType::kBF16:
            return ncclBfloat16;
        case DType::kF32:
            return ncclFloat32;
        case DType::kI32:
            return ncclInt32;
        default:
            fail("NCCL: no collective for {}", dtype_name(t));
    }
}

}  // namespace

std::string NcclCommunicator::unique_id() {
    ncclUniqueId id;
    MI_NCCL_CHECK(ncclGetUniqueId(&id));
    return std::string(id.internal, sizeof id.internal);
}

NcclCommunicator::NcclCommunicator(const std::string& id, int64_t rank, int64_t world)
    : rank_(rank), world_(world) {
    ncclUniqueId uid;
    MI_CHECK(id.size() == sizeof uid.internal, "an NCCL id of {} bytes (want {})", id.size(),
             sizeof uid.internal);
    std::copy(id.begin(), id.end(), uid.internal);
    ncclComm_t comm = nullptr;
    MI_NCCL_CHECK(ncclCommInitRank(&comm, int(world), uid, int(rank)));
    comm_ = comm;
}

NcclCommunicator::~NcclCommunicator() {
    if (comm_) ncclCommDestroy(as_comm(comm_));
}

void NcclCommunicator::all_reduce_sum(Tensor& x, CommStream stream) {
    check_device(x);
    MI_NCCL_CHECK(ncclAllReduce(x.raw(), x.raw(), size_t(x.numel()), nccl_type(x.dtype()), ncclSum,
                                as_comm(comm_), as_stream(stream)));
}

void NcclCommunicator::all_gather(const Tensor& local, Tensor& out, CommStream stream) {
    check_device(local);
    check_device(out);
    MI_CHECK(out.dtype() == local.dtype() && out.numel() == world_ * local.numel(),
             "all_gather: {} into {} over {} ranks", local.describe(), out.describe(), world_);
    MI_NCCL_CHECK(ncclAllGather(local.raw(), out.raw(), size_t(local.numel()),
                                nccl_type(local.dtype()), as_comm(comm_), as_stream(stream)));
}

void NcclCommunicator::broadcast_from_rank0(Tensor& x, CommStream stream) {
    check_device(x);
    MI_NCCL_CHECK(ncclBroadcast(x.raw(), x.raw(), size_t(x.numel()), nccl_type(x.dtype()), 0,
                                as_comm(comm_), as_stream(stream)));
}

int64_t NcclCommunicator::min_over_ranks(int64_t value, CommStream stream) {
    const cudaStream_t s = as_stream(stream);
    DeviceBuffer buf(sizeof(int64_t));
    MI_CUDA_CHECK(cudaMemcpyAsync(buf.data(), &value, sizeof value, cudaMemcpyHostToDevice, s));
    MI_NCCL_CHECK(ncclAllReduce(buf.data(), buf.data(), 1, ncclInt64, ncclMin, as_comm(comm_), s));
    int64_t out = 0;
    MI_CUDA_CHECK(cudaMemcpyAsync(&out, buf.data(), sizeof out, cudaMemcpyDeviceToHost, s));
    MI_CUDA_CHECK(cudaStreamSynchronize(s));
    return out;
}

}  // namespace miniinfer::cuda
