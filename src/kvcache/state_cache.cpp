#include "kvcache/state_cache.h"

#include <algorithm>
#include <cstring>

#include "core/check.h"

namespace miniinfer {

StateCache::StateCache(const ModelConfig& model, int64_t num_slots) : num_slots_(num_slots) {
    MI_CHECK(num_slots >= 0, "negative state slot count {}", num_slots);
    const LinearAttentionConfig& la = model.linear_attention;
    for (int64_t l = 0; l < model.num_linear_attention_layers(); ++l) {
        conv_.push_back(
            Tensor::zeros({num_slots, la.conv_kernel_dim - 1, la.conv_dim()}, DType::kF32));
        recurrent_.push_back(Tensor::zeros(
            {num_slots, la.num_value_heads, la.key_head_dim, la.value_head_dim}, DType::kF32));
    }
}

int64_t StateCache::slot_bytes() const {
    int64_t bytes = 0;
    for (size_t l = 0; l < conv_.size(); ++l)
        bytes +=
            int64_t(conv_[l].nbytes() + recurrent_[l].nbytes()) / std::max<int64_t>(num_slots_, 1);
    return bytes;
}

void StateCache::check_slot(int32_t slot) const {
    MI_CHECK(slot >= 0 && slot < num_slots_, "state slot {} of {}", slot, num_slots_);
}

namespace {
// Slot `slot`'s elements of a [num_slots, ...] f32 tensor.
float* slot_data(Tensor& t, int32_t slot) {
    return t.data<float>() + int64_t(slot) * (t.numel() / t.size(0));
}
}  // namespace

void StateCache::reset(int32_t slot) {
    check_slot(slot);
    for (std::vector<Tensor>* states : {&conv_, &recurrent_})
        for (Tensor& t : *states) std::fill_n(slot_data(t, slot), t.numel() / t.size(0), 0.f);
}

void StateCache::copy(int32_t from, int32_t to) {
    check_slot(from);
    check_slot(to);
    if (from == to) return;
    for (std::vector<Tensor>* states : {&conv_, &recurrent_})
        for (Tensor& t : *states)
            std::memcpy(slot_data(t, to), slot_data(t, from),
                        size_t(t.numel() / t.size(0)) * sizeof(float));
}

}  // namespace miniinfer
