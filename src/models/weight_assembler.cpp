#include "models/weight_assembler.h"

#include <set>

#include "core/check.h"
#include "core/thread_pool.h"

namespace miniinfer {

std::pair<int64_t, int64_t> block_view(const Shape& shape) {
    if (shape.size() < 2) return {shape.at(0), 1};
    int64_t rows = 1;
    for (size_t d = 0; d + 1 < shape.size(); ++d) rows *= shape[d];
    return {rows, shape.back()};
}

WeightBlock shard_block(const Shape& shape, Shard shard, const WeightTarget& target,
                        const std::optional<RowRange>& rows) {
    const auto [num_rows, cols] = block_view(shape);
    const auto [first, last] = rows.value_or(RowRange{0, num_rows});
    MI_CHECK(0 <= first && first <= last && last <= num_rows, "rows [{}, {}) of a tensor of {}",
             first, last, num_rows);
    WeightBlock b{num_rows, cols, first, last, 0, cols};
    if (shard == Shard::kColumn) {
        b.row_begin = first + target.rank * (last - first) / target.world;
        b.row_end = first + (target.rank + 1) * (last - first) / target.world;
    } else if (shard == Shard::kRow) {
        b.col_begin = target.rank * cols / target.world;
        b.col_end = (target.rank + 1) * cols / target.world;
    }
    return b;
}

Tensor WeightAssembler::fused(const std::vector<Part>& parts, const Shape& view,
                              std::optional<DType> dtype) {
    const DType out_dtype = dtype.value_or(target_.dtype);
    for (const Part& part : parts) jobs_.push_back({part, out_dtype, nullptr});
    if (!writer_.write) return Tensor();
    std::vector<WeightBlock> blocks;
    for (const Part& part : parts) blocks.push_back(block(part));
    Shape shape = {0};
    if (parts.at(0).shape.size() > 1) shape.push_back(blocks[0].col_end - blocks[0].col_begin);
    for (const WeightBlock& b : blocks) shape[0] += b.row_end - b.row_begin;
    Tensor out =
        writer_.allocate ? writer_.allocate(shape, out_dtype) : Tensor::zeros(shape, out_dtype);
    auto* dst = static_cast<char*>(out.raw());
    for (size_t i = 0; i < parts.size(); ++i) {
        const WeightBlock& b = blocks[i];
        MI_CHECK(shape.size() == 1 || b.col_end - b.col_begin == shape[1],
                 "parts of different widths fused: {}", parts[i].name);
        jobs_[jobs_.size() - parts.size() + i].dst = dst;
        const int64_t numel = (b.row_end - b.row_begin) * (b.col_end - b.col_begin);
        dst += size_t(numel) * dtype_size(out_dtype);
    }
    bytes_written_ += int64_t(out.nbytes());
    return view.empty() ? out : out.view(view);
}

std::vector<std::pair<std::string, Shape>> WeightAssembler::planned() const {
    std::vector<std::pair<std::string, Shape>> out;
    std::set<std::string> seen;
    for (const Job& j : jobs_)
        if (seen.insert(j.part.name).second) out.emplace_back(j.part.name, j.part.shape);
    return out;
}

std::map<std::string, DType> WeightAssembler::planned_dtypes() const {
    std::map<std::string, DType> out;
    for (const Job& j : jobs_) out.emplace(j.part.name, j.dtype);
    return out;
}

void WeightAssembler::run(LoadStats* stats) {
    if (!writer_.write) return;
    auto write = [&](int64_t begin, int64_t end) {
        for (int64_t i = begin; i < end; ++i) {
            const Job& j = jobs_[size_t(i)];
            writer_.write(j.part.name, j.part.shape, block(j.part), j.dtype, j.dst);
        }
    };
    if (writer_.parallel)
        ThreadPool::current().parallel_for(int64_t(jobs_.size()), write);
    else
        write(0, int64_t(jobs_.size()));
    stats->num_tensors = int64_t(planned().size());
    stats->bytes_written = bytes_written_;
}

}  // namespace miniinfer
