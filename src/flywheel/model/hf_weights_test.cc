#include "flywheel/model/hf_weights.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "flywheel/core/strings.h"
#include "flywheel/model/hf_config.h"
#include "flywheel/model/safetensors.h"
#include "flywheel/model/test_util.h"

namespace flywheel {
namespace {

namespace fs = std::filesystem;
using ::testing::AllOf;
using ::testing::HasSubstr;

// A scratch model directory per test, removed whatever the outcome.
class HfWeightsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::path(::testing::TempDir()) /
           StrCat("flywheel_hf_weights_",
                  ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    options_ = testing::TinyQwen3StyleOptions();
    options_.tie_embeddings = false;
    source_ = *MakeTransformer(options_);
    std::ofstream(dir_ / "config.json") << HfConfigJsonFor(options_, "bfloat16").dump(2);
  }
  void TearDown() override { fs::remove_all(dir_); }

  NamedTensors SourceTensors() const {
    NamedTensors out;
    for (const auto& item : source_->named_parameters()) out.emplace_back(item.key(), item.value());
    return out;
  }
  void Write(const NamedTensors& tensors, const std::string& file = kHfWeightsFile) {
    ASSERT_TRUE(WriteSafetensors((dir_ / file).string(), tensors, torch::kBFloat16).ok());
  }
  absl::StatusOr<Transformer> Load() {
    auto hf = LoadHfModelConfig(dir_);
    if (!hf.ok()) return hf.status();
    return LoadHfModel(dir_, hf->model);
  }

  fs::path dir_;
  ModelOptions options_;
  Transformer source_{nullptr};
};

TEST_F(HfWeightsTest, BF16FileLoadsIntoTheFloat32ModelExactly) {
  Write(SourceTensors());
  auto hf = LoadHfModelConfig(dir_);
  ASSERT_TRUE(hf.ok()) << hf.status();
  HfWeightsSummary summary;
  auto model = LoadHfModel(dir_, hf->model, &summary);
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_EQ(summary.dtype, torch::kBFloat16);
  EXPECT_EQ(summary.tensors, static_cast<int64_t>(source_->named_parameters().size()));
  const auto loaded = (*model)->named_parameters();
  for (const auto& item : source_->named_parameters()) {
    EXPECT_EQ(loaded[item.key()].scalar_type(), torch::kFloat32);
    EXPECT_TRUE(loaded[item.key()].equal(item.value().to(torch::kBFloat16).to(torch::kFloat32)))
        << item.key();
  }
  EXPECT_EQ(*HfWeightsDtype(dir_), torch::kBFloat16);
}

TEST_F(HfWeightsTest, MissingTensorIsAnErrorNamingIt) {
  NamedTensors tensors = SourceTensors();
  std::erase_if(tensors,
                [](const auto& t) { return t.first == "model.layers.1.mlp.up_proj.weight"; });
  Write(tensors);
  const auto s = Load().status();
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(s.message(),
              AllOf(HasSubstr("missing tensor"), HasSubstr("model.layers.1.mlp.up_proj.weight")));
}

TEST_F(HfWeightsTest, WrongShapeIsAnErrorNamingTensorAndShapes) {
  NamedTensors tensors = SourceTensors();
  for (auto& [name, t] : tensors) {
    if (name == "model.layers.0.self_attn.q_norm.weight") t = torch::ones({8});
  }
  Write(tensors);
  EXPECT_THAT(Load().status().message(), AllOf(HasSubstr("model.layers.0.self_attn.q_norm.weight"),
                                               HasSubstr("[8]"), HasSubstr("[12]")));
}

TEST_F(HfWeightsTest, ExtraTensorsAreErrorsAndTiedHeadsSaySo) {
  NamedTensors tensors = SourceTensors();
  tensors.emplace_back("model.layers.0.mlp.gate_proj.bias", torch::zeros({48}));
  Write(tensors);
  EXPECT_THAT(Load().status().message(),
              AllOf(HasSubstr("does not have"), HasSubstr("model.layers.0.mlp.gate_proj.bias")));
  // config.json ties the head, the file still has one.
  options_.tie_embeddings = true;
  std::ofstream(dir_ / "config.json") << HfConfigJsonFor(options_, "bfloat16").dump(2);
  tensors.pop_back();
  Write(tensors);
  EXPECT_THAT(Load().status().message(),
              AllOf(HasSubstr("lm_head.weight"), HasSubstr("ties the LM head")));
  // Old exports' rotary buffers are derived data: skipped.
  std::erase_if(tensors, [](const auto& t) { return t.first == "lm_head.weight"; });
  tensors.emplace_back("model.layers.0.self_attn.rotary_emb.inv_freq", torch::ones({6}));
  Write(tensors);
  EXPECT_TRUE(Load().ok()) << Load().status();
}

TEST_F(HfWeightsTest, ShardsFollowTheIndexStrictly) {
  NamedTensors tensors = SourceTensors();
  const size_t half = tensors.size() / 2;
  NamedTensors first(tensors.begin(), tensors.begin() + half);
  NamedTensors second(tensors.begin() + half, tensors.end());
  Write(first, "model-00001-of-00002.safetensors");
  Write(second, "model-00002-of-00002.safetensors");
  nlohmann::json index;
  for (const auto& [name, t] : first)
    index["weight_map"][name] = "model-00001-of-00002.safetensors";
  for (const auto& [name, t] : second) {
    index["weight_map"][name] = "model-00002-of-00002.safetensors";
  }
  std::ofstream(dir_ / kHfWeightsIndexFile) << index.dump();
  auto model = Load();
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_EQ(HfWeightFiles(dir_)->size(), 2u);

  // The index puts a tensor in the other shard.
  nlohmann::json wrong = index;
  wrong["weight_map"][first[0].first] = "model-00002-of-00002.safetensors";
  std::ofstream(dir_ / kHfWeightsIndexFile) << wrong.dump();
  EXPECT_THAT(Load().status().message(),
              AllOf(HasSubstr(first[0].first), HasSubstr("puts it in model-00002")));
  // A file name that leaves the directory.
  wrong = index;
  wrong["weight_map"][first[0].first] = "../elsewhere.safetensors";
  std::ofstream(dir_ / kHfWeightsIndexFile) << wrong.dump();
  EXPECT_THAT(Load().status().message(), HasSubstr("is not a file name in the model directory"));
}

TEST_F(HfWeightsTest, ADirectoryWithoutSafetensorsSaysWhatItNeeds) {
  EXPECT_THAT(Load().status().message(),
              AllOf(HasSubstr("model.safetensors"), HasSubstr("pytorch_model.bin")));
  std::ofstream(dir_ / kHfWeightsFile) << "garbage";
  EXPECT_EQ(Load().status().code(), absl::StatusCode::kDataLoss);
}

}  // namespace
}  // namespace flywheel
