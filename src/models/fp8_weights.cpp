#include "models/fp8_weights.h"

#include "core/check.h"
#include "kernels/cpu/fp8_linear.h"

namespace miniinfer {
namespace {

constexpr int64_t kBlock = cpu::kFp8Block;

int64_t ceil_blocks(int64_t n) {
    return (n + kBlock - 1) / kBlock;
}

std::string module_of(const std::string& weight_name) {
    constexpr std::string_view kSuffix = ".weight";
    MI_CHECK(weight_name.ends_with(kSuffix), "not a weight: {}", weight_name);
    return weight_name.substr(0, weight_name.size() - kSuffix.size());
}

// The scales' block of a weight part's block `b`: the 128 x 128 blocks it covers, which must be
// whole ones (a shorter last block only at the tensor's end, and only in the last fused part).
WeightBlock scale_block(const WeightBlock& b, const std::string& name, bool last_part,
                        const WeightTarget& t) {
    const auto refuse = [&](const char* what, int64_t begin, int64_t end, int64_t size) {
        fail(
            "{}: {} [{}, {}) of {} (tensor-parallel rank {} of {}) do not start and end on the "
            "FP8 checkpoint's {}-element scale blocks; a block's one scale cannot be split "
            "between ranks or fused projections",
            name, what, begin, end, size, t.rank, t.world, kBlock);
    };
    const bool rows_end_ok = b.row_end % kBlock == 0 || (b.row_end == b.rows && last_part);
    if (b.row_begin % kBlock != 0 || !rows_end_ok) refuse("rows", b.row_begin, b.row_end, b.rows);
    if (b.col_begin % kBlock != 0 || (b.col_end % kBlock != 0 && b.col_end != b.cols))
        refuse("columns", b.col_begin, b.col_end, b.cols);
    return {ceil_blocks(b.rows),    ceil_blocks(b.cols),  b.row_begin / kBlock,
            ceil_blocks(b.row_end), b.col_begin / kBlock, ceil_blocks(b.col_end)};
}

}  // namespace

ProjectionWeights assemble_projection(const ModelConfig& config, const WeightTarget& target,
                                      WeightAssembler& a,
                                      const std::vector<WeightAssembler::Part>& parts,
                                      const Shape& view) {
    size_t num_quantized = 0;
    for (const WeightAssembler::Part& part : parts)
        num_quantized += config.quantization.quantizes(module_of(part.name));
    if (num_quantized == 0) return {a.fused(parts, view), Tensor()};
    if (num_quantized != parts.size())
        fail(
            "{}: fused at load with {} other projections, of which only some are FP8 "
            "(quantization_config modules_to_not_convert): fused projections must be quantized "
            "alike",
            parts[0].name, parts.size() - 1);
    std::vector<WeightAssembler::Part> scale_parts;
    for (size_t i = 0; i < parts.size(); ++i) {
        const WeightAssembler::Part& part = parts[i];
        MI_CHECK(part.shape.size() == 2, "FP8 weight {} of shape {}", part.name,
                 shape_str(part.shape));
        const WeightTarget& t = part.target.value_or(target);
        const WeightBlock b = shard_block(part.shape, part.shard, t, part.rows);
        const WeightBlock sb = scale_block(b, part.name, i + 1 == parts.size(), t);
        scale_parts.push_back({.name = module_of(part.name) + ".weight_scale_inv",
                               .shape = {sb.rows, sb.cols},
                               .shard = part.shard,
                               .target = part.target,
                               .block = sb});
    }
    ProjectionWeights w{a.fused(parts, view, DType::kF8E4M3),
                        a.fused(scale_parts, {}, DType::kF32)};
    if (view.size() == 3 && w.scale.defined())
        w.scale = w.scale.view({view[0], w.scale.size(0) / view[0], w.scale.size(1)});
    return w;
}

}  // namespace miniinfer
