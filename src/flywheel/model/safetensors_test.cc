#include "flywheel/model/safetensors.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "flywheel/model/mapped_safetensors.h"
#include "flywheel/model/transformer.h"

namespace flywheel {
namespace {

using ::testing::HasSubstr;

std::string TempPath(const std::string& name) {
  const auto dir = std::filesystem::temp_directory_path() /
                   ("flywheel_safetensors_test_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  return (dir / name).string();
}

ModelOptions TinySaved(int64_t seed) {
  ModelOptions o;
  o.vocab_size = 30;
  o.hidden_size = 16;
  o.num_layers = 2;
  o.num_heads = 2;
  o.num_kv_heads = 1;
  o.intermediate_size = 24;
  o.tie_embeddings = false;
  o.seed = seed;
  return o;
}

TEST(SafetensorsTest, StateDictRoundTripsExactlyInFloat32) {
  auto a = *MakeTransformer(TinySaved(1));
  auto b = *MakeTransformer(TinySaved(2));
  const std::string path = TempPath("model.safetensors");
  ASSERT_TRUE(SaveStateDict(path, *a).ok());
  ASSERT_TRUE(LoadStateDict(path, *b).ok());
  const auto pb = b->named_parameters();
  for (const auto& item : a->named_parameters()) {
    EXPECT_TRUE(item.value().equal(pb[item.key()])) << item.key();
  }
  auto file = ReadSafetensors(path);
  ASSERT_TRUE(file.ok());
  EXPECT_EQ(file->metadata.at("format"), "pt");
  EXPECT_EQ(file->tensors.size(), a->named_parameters().size());
}

TEST(SafetensorsTest, HalfPrecisionDtypesRoundTripWithinTheirPrecision) {
  const auto x = torch::randn({3, 5});
  for (auto dtype : {torch::kBFloat16, torch::kFloat16}) {
    const std::string path = TempPath("half.safetensors");
    ASSERT_TRUE(WriteSafetensors(path, {{"x", x}, {"y", torch::ones({2})}}, dtype).ok());
    auto file = ReadSafetensors(path);
    ASSERT_TRUE(file.ok()) << file.status();
    ASSERT_EQ(file->tensors.size(), 2u);
    EXPECT_EQ(file->tensors[0].first, "x");
    EXPECT_EQ(file->tensors[0].second.scalar_type(), dtype);
    EXPECT_TRUE(torch::allclose(file->tensors[0].second.to(torch::kFloat32), x, 1e-2, 1e-2));
    EXPECT_TRUE(file->tensors[0].second.equal(x.to(dtype)));  // exactly the rounded values
  }
}

// An empty tensor has no storage and no bytes in the file (the copying reader once memcpy'd 0
// bytes to a null data_ptr(), which UBSan reports); its shape still comes back.
TEST(SafetensorsTest, AnEmptyTensorRoundTrips) {
  const std::string path = TempPath("empty.safetensors");
  ASSERT_TRUE(WriteSafetensors(path, {{"e", torch::zeros({0, 5})}, {"x", torch::ones({2})}}).ok());
  auto file = ReadSafetensors(path);
  ASSERT_TRUE(file.ok()) << file.status();
  ASSERT_EQ(file->tensors.size(), 2u);
  EXPECT_EQ(file->tensors[0].second.sizes(), (std::vector<int64_t>{0, 5}));
  EXPECT_TRUE(file->tensors[1].second.equal(torch::ones({2})));
}

// The mapped reader: views of the file's bytes in its dtype, and a load that converts BF16 to the
// model's float32 straight from them.
TEST(SafetensorsTest, MappedViewsReadTheFileAndLoadConvertsTheirDtype) {
  auto a = *MakeTransformer(TinySaved(1));
  auto b = *MakeTransformer(TinySaved(2));
  const std::string path = TempPath("bf16.safetensors");
  ASSERT_TRUE(SaveStateDict(path, *a, torch::kBFloat16).ok());
  auto mapped = MappedSafetensors::Open(path);
  ASSERT_TRUE(mapped.ok()) << mapped.status();
  const auto params = a->named_parameters();
  ASSERT_EQ((*mapped)->entries().size(), params.size());
  for (const auto& entry : (*mapped)->entries()) {
    const torch::Tensor view = (*mapped)->View(entry);
    EXPECT_EQ(view.scalar_type(), torch::kBFloat16);
    EXPECT_TRUE(view.equal(params[entry.name].to(torch::kBFloat16))) << entry.name;
  }
  EXPECT_EQ((*mapped)->Find("no.such.tensor"), nullptr);
  ASSERT_TRUE(LoadStateDict(path, *b).ok());
  for (const auto& item : b->named_parameters()) {
    EXPECT_EQ(item.value().scalar_type(), torch::kFloat32);
    EXPECT_TRUE(item.value().equal(params[item.key()].to(torch::kBFloat16).to(torch::kFloat32)))
        << item.key();
  }
}

TEST(SafetensorsTest, TruncatedFileIsAClearError) {
  auto a = *MakeTransformer(TinySaved(1));
  const std::string path = TempPath("truncated.safetensors");
  ASSERT_TRUE(SaveStateDict(path, *a).ok());
  const auto size = std::filesystem::file_size(path);
  std::filesystem::resize_file(path, size - 10);
  auto file = ReadSafetensors(path);
  ASSERT_FALSE(file.ok());
  EXPECT_EQ(file.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(file.status().message(), HasSubstr("truncated"));
  EXPECT_THAT(file.status().message(), HasSubstr(path));
  std::filesystem::resize_file(path, 5);
  EXPECT_THAT(ReadSafetensors(path).status().message(), HasSubstr("no header size"));
  std::filesystem::resize_file(path, 0);  // nothing to map
  EXPECT_THAT(ReadSafetensors(path).status().message(), HasSubstr("only 0 bytes"));
}

TEST(SafetensorsTest, CorruptHeaderIsAClearError) {
  const std::string path = TempPath("corrupt.safetensors");
  auto write = [&](const std::string& json, const std::string& data) {
    std::ofstream f(path, std::ios::binary | std::ios::trunc);
    const uint64_t n = json.size();
    f.write(reinterpret_cast<const char*>(&n), 8);
    f << json << data;
  };
  write("{not json", "");
  EXPECT_THAT(ReadSafetensors(path).status().message(), HasSubstr("not a JSON object"));
  write(R"({"w": {"dtype": "F32", "shape": [4], "data_offsets": [0, 12]}})", std::string(16, 'x'));
  EXPECT_THAT(ReadSafetensors(path).status().message(), HasSubstr("shape and dtype need 16"));
  write(R"({"w": {"dtype": "I8", "shape": [4], "data_offsets": [0, 4]}})", std::string(4, 'x'));
  EXPECT_THAT(ReadSafetensors(path).status().message(), HasSubstr("not supported"));
  std::ofstream(path, std::ios::binary | std::ios::trunc) << std::string(8, '\xff') << "{}";
  EXPECT_THAT(ReadSafetensors(path).status().message(), HasSubstr("exceeds the file"));
  EXPECT_EQ(ReadSafetensors(TempPath("absent.safetensors")).status().code(),
            absl::StatusCode::kNotFound);
}

TEST(SafetensorsTest, LoadNamesMissingMismatchedAndUnexpectedTensors) {
  auto model = *MakeTransformer(TinySaved(1));
  const std::string path = TempPath("partial.safetensors");
  ASSERT_TRUE(WriteSafetensors(path, {{"model.norm.weight", torch::ones({16})}}).ok());
  EXPECT_THAT(LoadStateDict(path, *model).message(), HasSubstr("missing tensor"));
  NamedTensors all;
  for (const auto& item : model->named_parameters()) all.emplace_back(item.key(), item.value());
  all.emplace_back("extra.weight", torch::ones({1}));
  ASSERT_TRUE(WriteSafetensors(path, all).ok());
  EXPECT_THAT(LoadStateDict(path, *model).message(), HasSubstr("extra.weight"));
  EXPECT_TRUE(LoadStateDict(path, *model, /*strict=*/false).ok());
  all.pop_back();
  for (auto& [name, t] : all) {
    if (name == "model.norm.weight") t = torch::ones({3});
  }
  ASSERT_TRUE(WriteSafetensors(path, all).ok());
  EXPECT_THAT(LoadStateDict(path, *model).message(), HasSubstr("has shape [3]"));
}

}  // namespace
}  // namespace flywheel
