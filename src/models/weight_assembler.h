// WeightAssembler: the loader's plan of copies (models/weights.cpp, hybrid_weights.cpp; not a
// public header). Each destination tensor is the concatenation along dim 0 of parts, a part
// being one rank's block of a source tensor (or of some of its rows); the copies run at the
// end, in parallel, through the WeightWriter.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "models/weights.h"

namespace miniinfer {

// Source rows [first, second) of a tensor seen as [rows, cols] (WeightBlock).
using RowRange = std::pair<int64_t, int64_t>;

// `shape` as WeightBlock sees it, [rows, cols].
std::pair<int64_t, int64_t> block_view(const Shape& shape);

// Rank target.rank's block of a tensor of `shape` by `shard`, within `rows` if given (the
// rows then shard as a tensor of their own would).
WeightBlock shard_block(const Shape& shape, Shard shard, const WeightTarget& target,
                        const std::optional<RowRange>& rows = std::nullopt);

class WeightAssembler {
  public:
    struct Part {
        std::string name;
        Shape shape;  // the whole source tensor's
        Shard shard = Shard::kReplicated;
        std::optional<WeightTarget> target = {};  // this part's shard when not the load's
        std::optional<RowRange> rows = {};        // only these rows of the source
        // Exactly this block of the source, whatever the rule (an FP8 weight's scales: the
        // blocks its weight's part covers, fp8_weights.h).
        std::optional<WeightBlock> block = {};
    };

    // Without a writer (null `write`) it only plans: lists the tensors, allocates nothing.
    WeightAssembler(WeightWriter writer, WeightTarget target)
        : writer_(std::move(writer)), target_(std::move(target)) {}

    // Concatenates each part's block along dim 0 into one new tensor of `dtype` (none: the
    // target's), [sum of the blocks' rows] for 1-D sources, [sum of rows, cols] otherwise,
    // viewed as `view` (in shard sizes) if given.
    Tensor fused(const std::vector<Part>& parts, const Shape& view = {},
                 std::optional<DType> dtype = std::nullopt);
    Tensor single(const std::string& name, const Shape& shape, Shard shard = Shard::kReplicated,
                  const Shape& view = {}) {
        return fused({{name, shape, shard}}, view);
    }

    // The source tensors read, each once, in the order first planned.
    std::vector<std::pair<std::string, Shape>> planned() const;
    // The dtype each planned source tensor is written as (the target's, or e4m3 for an FP8
    // weight and f32 for its scales).
    std::map<std::string, DType> planned_dtypes() const;
    // Runs every copy; stats: the source tensors read and the bytes written.
    void run(LoadStats* stats);

  private:
    struct Job {
        Part part;
        DType dtype;
        void* dst;
    };
    WeightBlock block(const Part& part) const {
        if (part.block) return *part.block;
        return shard_block(part.shape, part.shard, part.target.value_or(target_), part.rows);
    }

    WeightWriter writer_;
    WeightTarget target_;
    std::vector<Job> jobs_;
    int64_t bytes_written_ = 0;
};

}  // namespace miniinfer
