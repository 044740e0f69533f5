#include "flywheel/model/hf_export.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "flywheel/core/strings.h"
#include "flywheel/model/hf_config.h"
#include "flywheel/model/hf_weights.h"
#include "flywheel/model/safetensors.h"
#include "flywheel/model/test_util.h"

namespace flywheel {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

HfExportOptions ExportOptions(fs::path source_dir, torch::ScalarType dtype = torch::kFloat32,
                              std::vector<int64_t> eos_token_ids = {}) {
  HfExportOptions o;
  o.source_dir = std::move(source_dir);
  o.dtype = dtype;
  o.eos_token_ids = std::move(eos_token_ids);
  return o;
}

std::string Bytes(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

class HfExportTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::path(::testing::TempDir()) /
            StrCat("flywheel_hf_export_",
                   ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(root_);
    fs::create_directories(root_);
  }
  void TearDown() override { fs::remove_all(root_); }

  // A Hugging Face directory holding `model`'s weights in `dtype`, in `shards` files, with a
  // generation config and tokenizer files.
  fs::path WriteSource(const std::string& name, const Transformer& model, torch::ScalarType dtype,
                       int shards) {
    const fs::path dir = root_ / name;
    fs::create_directories(dir);
    std::ofstream(dir / "config.json") << HfConfigJsonFor(model->options(), HfDtypeName(dtype));
    std::ofstream(dir / "generation_config.json") << R"({"eos_token_id": [5, 6], "top_k": 7})";
    std::ofstream(dir / "tokenizer.json") << R"({"model": {"type": "BPE"}, "bytes": "é"})";
    std::ofstream(dir / "merges.txt") << "a b\n";
    NamedTensors tensors;
    for (const auto& item : model->named_parameters()) {
      tensors.emplace_back(item.key(), item.value());
    }
    if (shards == 1) {
      EXPECT_TRUE(WriteSafetensors((dir / kHfWeightsFile).string(), tensors, dtype).ok());
      return dir;
    }
    nlohmann::json index;
    const size_t per_shard = (tensors.size() + shards - 1) / shards;
    for (int s = 0; s < shards; ++s) {
      const std::string file = StrCat("model-0000", s + 1, "-of-0000", shards, ".safetensors");
      NamedTensors part;
      for (size_t i = s * per_shard; i < std::min(tensors.size(), (s + 1) * per_shard); ++i) {
        part.push_back(tensors[i]);
        index["weight_map"][tensors[i].first] = file;
      }
      EXPECT_TRUE(WriteSafetensors((dir / file).string(), part, dtype).ok());
    }
    std::ofstream(dir / kHfWeightsIndexFile) << index.dump();
    return dir;
  }

  static Transformer Load(const fs::path& dir) {
    auto hf = LoadHfModelConfig(dir);
    EXPECT_TRUE(hf.ok()) << hf.status();
    auto model = LoadHfModel(dir, hf->model);
    EXPECT_TRUE(model.ok()) << model.status();
    return *model;
  }

  // Loaded source → export in the source's dtype → the export holds exactly the source's
  // tensors, loads back bit-exactly, and carries config, generation config and tokenizer files.
  void CheckRoundTrip(const fs::path& source, torch::ScalarType dtype) {
    auto source_dtype = HfSourceDtype(source);
    ASSERT_TRUE(source_dtype.ok()) << source_dtype.status();
    EXPECT_EQ(*source_dtype, dtype);
    const Transformer loaded = Load(source);
    const fs::path out = root_ / (source.filename().string() + "_export");
    ASSERT_TRUE(ExportHfModelDirectory(*loaded, ExportOptions(source, *source_dtype), out).ok());

    // The exported tensors are the source's, bit for bit, in the source's dtype.
    std::map<std::string, torch::Tensor> original;
    auto files = HfWeightFiles(source);
    ASSERT_TRUE(files.ok());
    for (const fs::path& file : *files) {
      auto read = ReadSafetensors(file.string());
      ASSERT_TRUE(read.ok());
      for (auto& [name, t] : read->tensors) original[name] = t;
    }
    auto exported = ReadSafetensors((out / kHfWeightsFile).string());
    ASSERT_TRUE(exported.ok()) << exported.status();
    ASSERT_EQ(exported->tensors.size(), original.size());
    for (const auto& [name, t] : exported->tensors) {
      EXPECT_EQ(t.scalar_type(), dtype) << name;
      EXPECT_TRUE(t.equal(original.at(name))) << name;
    }
    // And load back as the same model.
    const Transformer again = Load(out);
    const auto params = again->named_parameters();
    for (const auto& item : loaded->named_parameters()) {
      EXPECT_TRUE(params[item.key()].equal(item.value())) << item.key();
    }
    auto config = LoadHfModelConfig(out);
    ASSERT_TRUE(config.ok());
    EXPECT_EQ(config->json, LoadHfModelConfig(source)->json);
    for (const char* name : {"generation_config.json", "tokenizer.json", "merges.txt"}) {
      EXPECT_EQ(Bytes(out / name), Bytes(source / name)) << name;
    }
    EXPECT_FALSE(fs::exists(out / "special_tokens_map.json"));  // not in the source
  }

  fs::path root_;
};

TEST_F(HfExportTest, BF16SourceRoundTripsBitExactly) {
  const Transformer model = *MakeTransformer(testing::TinyQwen3StyleOptions());
  CheckRoundTrip(WriteSource("qwen3_bf16", model, torch::kBFloat16, 1), torch::kBFloat16);
}

TEST_F(HfExportTest, F32ShardedSourceRoundTripsBitExactly) {
  ModelOptions o = testing::TinyModelOptions();
  o.attention_bias = true;
  o.tie_embeddings = false;
  o.rope_scaling.type = "llama3";
  const Transformer model = *MakeTransformer(o);
  CheckRoundTrip(WriteSource("llama_f32", model, torch::kFloat32, 3), torch::kFloat32);
}

TEST_F(HfExportTest, SelfInitialisedModelExportsAsLlamaInFloat32) {
  for (bool qk_norm : {false, true}) {
    ModelOptions o = qk_norm ? testing::TinyQwen3StyleOptions() : testing::TinyModelOptions();
    const Transformer model = *MakeTransformer(o);
    const fs::path out = root_ / StrCat("self_", qk_norm);
    ASSERT_TRUE(ExportHfModelDirectory(*model, ExportOptions("", torch::kFloat32, {2}), out).ok());
    auto hf = LoadHfModelConfig(out);
    ASSERT_TRUE(hf.ok()) << hf.status();
    EXPECT_EQ(hf->architecture, qk_norm ? "Qwen3ForCausalLM" : "LlamaForCausalLM");
    EXPECT_EQ(hf->torch_dtype, "float32");
    const Transformer again = Load(out);
    const auto params = again->named_parameters();
    for (const auto& item : model->named_parameters()) {
      EXPECT_TRUE(params[item.key()].equal(item.value())) << item.key();
    }
    EXPECT_THAT(Bytes(out / "generation_config.json"), HasSubstr("\"eos_token_id\": 2"));
    EXPECT_FALSE(fs::exists(out / "tokenizer.json"));
  }
}

TEST_F(HfExportTest, RefusesANonEmptyDirectoryAndAForeignConfig) {
  const Transformer model = *MakeTransformer(testing::TinyModelOptions());
  fs::create_directories(root_ / "full");
  std::ofstream(root_ / "full" / "README.md") << "someone else's";
  EXPECT_THAT(ExportHfModelDirectory(*model, {}, root_ / "full").message(), HasSubstr("not empty"));
  // A source whose config.json describes another shape.
  ModelOptions other = testing::TinyModelOptions();
  other.num_layers = 3;
  const fs::path source = WriteSource("other", *MakeTransformer(other), torch::kFloat32, 1);
  EXPECT_THAT(ExportHfModelDirectory(*model, ExportOptions(source), root_ / "out").message(),
              HasSubstr("not the one"));
}

}  // namespace
}  // namespace flywheel
