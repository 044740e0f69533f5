#include "flywheel/runtime/run_export.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "flywheel/core/strings.h"
#include "flywheel/learner/checkpoint.h"
#include "flywheel/learner/learner_step.h"
#include "flywheel/learner/sharded_checkpoint.h"
#include "flywheel/learner/sharding.h"
#include "flywheel/model/hf_config.h"
#include "flywheel/model/hf_weights.h"
#include "flywheel/model/safetensors.h"
#include "flywheel/model/test_util.h"
#include "flywheel/runtime/job_config.h"
#include "flywheel/runtime/policy_setup.h"
#include "flywheel/runtime/transformer_policy.h"

namespace flywheel {
namespace {

namespace fs = std::filesystem;
using ::testing::AllOf;
using ::testing::HasSubstr;

RunExportOptions Export(fs::path run_dir, fs::path out, std::optional<int64_t> step = std::nullopt,
                        std::optional<torch::ScalarType> dtype = std::nullopt) {
  RunExportOptions o;
  o.run_dir = std::move(run_dir);
  o.out = std::move(out);
  o.step = step;
  o.dtype = dtype;
  return o;
}

std::string Bytes(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

// A run directory made by hand the way a job leaves it (config.toml, checkpoints/step-N with
// DONE), and a Hugging Face source directory, in a scratch directory removed at the end.
class RunExportTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::path(::testing::TempDir()) /
            StrCat("flywheel_run_export_",
                   ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(root_);
    fs::create_directories(root_);
    config_.run.runs_dir = (root_ / "runs").string();
    config_.run.name = "r";
    config_.model = testing::TinyModelOptions();
    config_.model.vocab_size = 0;  // as a job config leaves it: the tokenizer's at run time
  }
  void TearDown() override { fs::remove_all(root_); }

  fs::path RunDir() const { return root_ / "runs" / "r"; }
  fs::path Out() const { return root_ / "export"; }

  // config.toml as the job wrote it, and a full checkpoint of `model` at `step`.
  void WriteRun(const Transformer& model, std::vector<int64_t> steps) {
    fs::create_directories(RunDir());
    std::ofstream(RunDir() / "config.toml") << FormatJobConfig(config_);
    CheckpointManager manager({(RunDir() / "checkpoints").string(), 10});
    for (int64_t step : steps) {
      auto saved = manager.Save(step, [&](const std::string& dir) {
        return SaveStateDict(StrCat(dir, "/model.safetensors"), *model);
      });
      ASSERT_TRUE(saved.ok()) << saved.status();
    }
  }

  // A Hugging Face directory of `options` with its weights stored in `dtype`.
  fs::path WriteSource(const ModelOptions& options, torch::ScalarType dtype) {
    const fs::path dir = root_ / "source";
    fs::create_directories(dir);
    std::ofstream(dir / "config.json") << HfConfigJsonFor(options, HfDtypeName(dtype)).dump(2);
    std::ofstream(dir / "tokenizer.json") << R"({"model": {"type": "BPE"}})";
    std::ofstream(dir / "special_tokens_map.json") << R"({"eos_token": "<|end|>"})";
    const Transformer model = *MakeTransformer(options);
    NamedTensors tensors;
    for (const auto& item : model->named_parameters()) {
      tensors.emplace_back(item.key(), item.value());
    }
    EXPECT_TRUE(WriteSafetensors((dir / kHfWeightsFile).string(), tensors, dtype).ok());
    return dir;
  }

  static void ExpectSameWeights(const Transformer& a, const fs::path& exported) {
    auto hf = LoadHfModelConfig(exported);
    ASSERT_TRUE(hf.ok()) << hf.status();
    auto b = LoadHfModel(exported, hf->model);
    ASSERT_TRUE(b.ok()) << b.status();
    const auto params = (*b)->named_parameters();
    for (const auto& item : a->named_parameters()) {
      EXPECT_TRUE(params[item.key()].equal(item.value())) << item.key();
    }
  }

  fs::path root_;
  JobConfig config_;
};

TEST_F(RunExportTest, SelfInitialisedRunExportsItsNewestCheckpointAsLlama) {
  ModelOptions resolved = config_.model;
  resolved.vocab_size = 40;
  const Transformer model = *MakeInitialModel(resolved);
  WriteRun(model, {5, 10});
  auto result = ExportRun(Export(RunDir(), Out()));
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->step, 10);
  EXPECT_EQ(result->architecture, "LlamaForCausalLM");
  EXPECT_EQ(result->dtype, torch::kFloat32);
  ExpectSameWeights(model, Out());
  EXPECT_TRUE(fs::exists(Out() / "generation_config.json"));

  EXPECT_THAT(ExportRun(Export(RunDir(), root_ / "other", 7)).status().message(),
              AllOf(HasSubstr("--step 7"), HasSubstr("5, 10")));
  EXPECT_THAT(ExportRun(Export(RunDir(), Out())).status().message(), HasSubstr("not empty"));
  EXPECT_THAT(ExportRun(Export(root_, root_ / "x")).status().message(),
              HasSubstr("not a run directory"));
}

// Started from a BF16 Hugging Face directory: the export is in BF16 again, with the source's
// config and tokenizer files, and (weights not trained here) holds the source's tensors exactly.
TEST_F(RunExportTest, RunFromAModelDirectoryExportsInTheSourceDtypeBitExactly) {
  const fs::path source = WriteSource(testing::TinyQwen3StyleOptions(), torch::kBFloat16);
  config_.model = ModelOptions();
  config_.model.path = source.string();
  config_.model.max_seq_len = 64;
  auto hf = LoadHfModelConfig(source);
  ASSERT_TRUE(hf.ok()) << hf.status();
  auto resolved = ApplyHfModelConfig(config_.model, *hf);
  ASSERT_TRUE(resolved.ok()) << resolved.status();
  auto model = MakeInitialModel(*resolved);
  ASSERT_TRUE(model.ok()) << model.status();
  WriteRun(*model, {3});

  auto result = ExportRun(Export(RunDir(), Out(), 3));
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->architecture, "Qwen3ForCausalLM");
  EXPECT_EQ(result->dtype, torch::kBFloat16);
  auto source_file = ReadSafetensors((source / kHfWeightsFile).string());
  auto exported = ReadSafetensors((Out() / kHfWeightsFile).string());
  ASSERT_TRUE(source_file.ok() && exported.ok());
  std::map<std::string, torch::Tensor> original(source_file->tensors.begin(),
                                                source_file->tensors.end());
  ASSERT_EQ(exported->tensors.size(), original.size());
  for (const auto& [name, t] : exported->tensors) {
    EXPECT_TRUE(t.equal(original.at(name))) << name;  // same dtype, same bits
  }
  EXPECT_EQ(LoadHfModelConfig(Out())->json, hf->json);
  EXPECT_EQ(Bytes(Out() / "tokenizer.json"), Bytes(source / "tokenizer.json"));
  EXPECT_EQ(Bytes(Out() / "special_tokens_map.json"), Bytes(source / "special_tokens_map.json"));

  // --dtype float32 keeps every bit of trained weights.
  auto f32 = ExportRun(Export(RunDir(), root_ / "f32", std::nullopt, torch::kFloat32));
  ASSERT_TRUE(f32.ok()) << f32.status();
  EXPECT_EQ(LoadHfModelConfig(root_ / "f32")->torch_dtype, "float32");
  ExpectSameWeights(*model, root_ / "f32");
}

// A sharded checkpoint (manifest and flat units) exports the same weights as the model's.
TEST_F(RunExportTest, ShardedCheckpointExportsTheModelsWeights) {
  ModelOptions resolved = config_.model;
  resolved.vocab_size = 40;
  resolved.tie_embeddings = false;  // the vocabulary is recovered from an untied root unit too
  config_.model.tie_embeddings = false;
  const Transformer model = *MakeInitialModel(resolved);
  fs::create_directories(RunDir());
  std::ofstream(RunDir() / "config.toml") << FormatJobConfig(config_);
  std::vector<std::string> names;
  for (const auto& item : model->named_parameters()) names.push_back(item.key());
  LearnerStep learner(config_.learner, 10, model->parameters(), TransformerPolicy(model), nullptr,
                      1.0, RealClock(), 0, ParallelContext{nullptr, TransformerUnits(names)});
  CheckpointManager manager({(RunDir() / "checkpoints").string(), 3});
  auto saved = SaveShardedCheckpoint(manager, learner, nullptr);
  ASSERT_TRUE(saved.ok()) << saved.status();
  ASSERT_TRUE(fs::exists(fs::path(*saved) / kShardManifestFile));

  auto result = ExportRun(Export(RunDir(), Out()));
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->parameters, model->NumParameters());
  ExpectSameWeights(model, Out());
}

}  // namespace
}  // namespace flywheel
