#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <random>

#include "loader/safetensors.h"
#include "safetensors_writer.h"

using namespace miniinfer;
using namespace miniinfer::testing;
using ::testing::HasSubstr;

namespace {
std::filesystem::path good_file(const std::filesystem::path& dir) {
    FakeTensor bf{"b", "BF16", {2}, {}};
    for (float v : {1.5f, -3.f}) {
        uint16_t h = f32_to_bf16(v);
        bf.bytes.push_back(uint8_t(h & 0xff));
        bf.bytes.push_back(uint8_t(h >> 8));
    }
    FakeTensor hf{"h", "F16", {1}, {0x00, 0x3c}};  // 1.0
    auto path = dir / "good.safetensors";
    write_safetensors(path, {f32_tensor("a", {2, 3}), bf, hf});
    return path;
}
}  // namespace

TEST(Safetensors, ReadsF32Bf16F16) {
    auto path = good_file(fresh_dir("st_good"));
    SafetensorsFile f = SafetensorsFile::open(path);
    EXPECT_EQ(f.entries().size(), 3u);
    EXPECT_EQ(f.metadata().at("format"), "pt");
    Tensor a = f.tensor("a");
    EXPECT_EQ(a.shape(), (Shape{2, 3}));
    EXPECT_EQ(a.dtype(), DType::kF32);
    EXPECT_EQ(a.data<float>()[5], 5.f);
    Tensor b = f.tensor("b").to_f32();
    EXPECT_EQ(b.data<float>()[0], 1.5f);
    EXPECT_EQ(b.data<float>()[1], -3.f);
    EXPECT_EQ(f.tensor("h").to_f32().data<float>()[0], 1.f);
}

TEST(Safetensors, TensorsOutliveTheFileObject) {
    auto path = good_file(fresh_dir("st_alive"));
    Tensor a;
    { a = SafetensorsFile::open(path).tensor("a"); }
    EXPECT_EQ(a.data<float>()[4], 4.f);  // the mapping is kept alive by the tensor
}

TEST(Safetensors, TruncatedFilesAreErrorsNamingTheFile) {
    auto dir = fresh_dir("st_trunc");
    auto path = good_file(dir);
    const auto size = std::filesystem::file_size(path);
    for (uintmax_t cut :
         {size - 1, size - 10, uintmax_t(40), uintmax_t(9), uintmax_t(5), uintmax_t(0)}) {
        auto p = dir / ("cut" + std::to_string(cut) + ".safetensors");
        std::filesystem::copy_file(path, p, std::filesystem::copy_options::overwrite_existing);
        std::filesystem::resize_file(p, cut);
        std::string err = error_message([&] { SafetensorsFile::open(p); });
        EXPECT_THAT(err, HasSubstr(p.string())) << "cut at " << cut;
        EXPECT_THAT(err, ::testing::AnyOf(HasSubstr("truncated"), HasSubstr("not valid JSON")))
            << err;
    }
}

TEST(Safetensors, GarbageHeaders) {
    auto dir = fresh_dir("st_garbage");
    auto p = dir / "g.safetensors";
    // Random bytes: the header length is nonsense.
    {
        std::mt19937 rng(1);
        std::ofstream out(p, std::ios::binary);
        for (int i = 0; i < 4096; ++i) out.put(char(rng()));
    }
    EXPECT_THAT(error_message([&] { SafetensorsFile::open(p); }), HasSubstr("header length"));
    auto fake = {f32_tensor("a", {4})};
    write_safetensors(p, fake, "this is not json at all!");
    EXPECT_THAT(error_message([&] { SafetensorsFile::open(p); }), HasSubstr("not valid JSON"));
    write_safetensors(p, fake, "[1, 2, 3]");
    EXPECT_THAT(error_message([&] { SafetensorsFile::open(p); }), HasSubstr("not a JSON object"));
    write_safetensors(p, fake, R"({"a": {"dtype": "F32", "shape": [5], "data_offsets": [0, 16]}})");
    EXPECT_THAT(error_message([&] { SafetensorsFile::open(p); }), HasSubstr("needs 20 bytes"));
    write_safetensors(p, fake, R"({"a": {"dtype": "F32", "shape": [4], "data_offsets": [16, 0]}})");
    EXPECT_THAT(error_message([&] { SafetensorsFile::open(p); }), HasSubstr("bad data_offsets"));
    write_safetensors(p, fake,
                      R"({"a": {"dtype": "F32", "shape": [-4], "data_offsets": [0, 16]}})");
    EXPECT_THAT(error_message([&] { SafetensorsFile::open(p); }), HasSubstr("negative dimension"));
    write_safetensors(p, fake, R"({"a": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]},
                                   "b": {"dtype": "F32", "shape": [2], "data_offsets": [8, 16]}})");
    EXPECT_THAT(error_message([&] { SafetensorsFile::open(p); }), HasSubstr("overlap"));
    write_safetensors(p, fake, R"({"a": {"dtype": "F32", "shape": [4]}})");
    EXPECT_THAT(error_message([&] { SafetensorsFile::open(p); }),
                HasSubstr("missing field 'data_offsets'"));
    write_safetensors(
        p, fake,
        R"({"a": {"dtype": "F32", "shape": [4000000000, 4000000000, 4000000000], "data_offsets": [0, 16]}})");
    EXPECT_THAT(error_message([&] { SafetensorsFile::open(p); }), HasSubstr("too large"));
}

TEST(Safetensors, WrongAndUnknownDtypes) {
    auto dir = fresh_dir("st_dtype");
    auto p = dir / "d.safetensors";
    FakeTensor ints{"ids", "I64", {2}, std::vector<uint8_t>(16)};
    write_safetensors(p, {ints});
    SafetensorsFile f = SafetensorsFile::open(p);               // a valid file...
    std::string err = error_message([&] { f.tensor("ids"); });  // ...whose tensor we cannot use
    EXPECT_THAT(err, HasSubstr("'ids' has dtype I64; expected BF16, F16, F32 or F8_E4M3"));
    EXPECT_THAT(err, HasSubstr(p.string()));
    FakeTensor q{"q", "Q4_K", {2}, std::vector<uint8_t>(2)};
    write_safetensors(p, {q});
    EXPECT_THAT(error_message([&] { SafetensorsFile::open(p); }),
                HasSubstr("unknown dtype 'Q4_K'"));
    EXPECT_THAT(error_message([&] { SafetensorsFile::open(dir / "absent.safetensors"); }),
                HasSubstr("cannot open"));
    EXPECT_THAT(error_message([&] { SafetensorsFile::open(dir); }),
                HasSubstr("not a regular file"));
}
