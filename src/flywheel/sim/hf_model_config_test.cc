#include "flywheel/sim/hf_model_config.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "flywheel/core/strings.h"
#include "flywheel/sim/sim_config.h"

namespace flywheel::sim {
namespace {

std::filesystem::path TestData() {
  const char* source = std::getenv("FLYWHEEL_SOURCE_DIR");
  EXPECT_NE(source, nullptr);
  return std::filesystem::path(source ? source : ".") / "src/flywheel/sim/testdata";
}

// A scratch directory removed by the fixture, whatever the test's outcome.
class HfConfigFilesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::path(::testing::TempDir()) /
           StrCat("flywheel_hf_", ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_ / "models");
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string Write(const std::string& name, const std::string& text) {
    std::ofstream(dir_ / name) << text;
    return (dir_ / name).string();
  }
  std::filesystem::path dir_;
};

// Qwen2.5-7B, by hand: embeddings 152064 · 3584 = 544,997,376, untied: twice. A layer:
// q, o 3584² = 12,845,056 each; k, v 3584 · 512 = 1,835,008 each; q/k/v biases 3584 + 2 · 512;
// MLP 3 · 3584 · 18944 = 203,685,888; norms 2 · 3584: 233,057,792. 28 layers + final norm 3584:
// 7,615,616,512 (published: 7.61B). KV: 2 · 28 · 4 · 128 · 2 = 57,344 bytes per token.
TEST(HfModelConfigTest, Qwen25_7B) {
  absl::StatusOr<HfModelShape> s = ReadHfModelConfig(TestData() / "qwen2.5-7b/config.json");
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->head_dim, 128);  // 3584 / 28
  EXPECT_TRUE(s->attention_bias);
  EXPECT_FALSE(s->tied_embeddings);
  EXPECT_DOUBLE_EQ(s->params(), 7'615'616'512.0);
  EXPECT_DOUBLE_EQ(s->kv_bytes_per_token(), 57'344);
}

// Llama-3-8B: embeddings 128256 · 4096 = 525,336,576, twice; a layer: q, o 4096² each, k, v
// 4096 · 1024 each, MLP 3 · 4096 · 14336, norms 2 · 4096: 218,112,000; 32 layers + 4096:
// 8,030,261,248 (published: 8.03B). KV: 2 · 32 · 8 · 128 · 2 = 131,072 bytes per token.
TEST(HfModelConfigTest, Llama3_8B) {
  absl::StatusOr<HfModelShape> s = ReadHfModelConfig(TestData() / "llama-3-8b/config.json");
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_FALSE(s->attention_bias);
  EXPECT_DOUBLE_EQ(s->params(), 8'030'261'248.0);
  EXPECT_DOUBLE_EQ(s->kv_bytes_per_token(), 131'072);
}

// Qwen3-4B: head_dim 128 given, not 2560 / 32 = 80; tied embeddings; per-head q/k norms. Tied
// embeddings 151936 · 2560 = 388,956,160; a layer: q 2560 · 4096, o 4096 · 2560 (10,485,760
// each), k, v 2560 · 1024 (2,621,440 each), MLP 3 · 2560 · 9728 = 74,711,040, norms 2 · 2560,
// q/k norms 2 · 128: 100,930,816; 36 layers + 2560: 4,022,468,096 (published: 4.02B).
TEST(HfModelConfigTest, Qwen3_4BHasItsOwnHeadDimAndTiedEmbeddings) {
  absl::StatusOr<HfModelShape> s = ReadHfModelConfig(TestData() / "qwen3-4b/config.json");
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->head_dim, 128);
  EXPECT_TRUE(s->tied_embeddings);
  EXPECT_TRUE(s->qk_norm);
  EXPECT_DOUBLE_EQ(s->params(), 4'022'468'096.0);
  EXPECT_DOUBLE_EQ(s->kv_bytes_per_token(), 2.0 * 36 * 8 * 128 * 2);
}

TEST(HfModelConfigTest, OptionalFieldsTakeTheirHuggingFaceDefaults) {
  // No num_key_value_heads (multi-head attention), head_dim null, no dtype: float32 given.
  absl::StatusOr<HfModelShape> s = ParseHfModelConfig(
      R"({"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "head_dim": null,
          "intermediate_size": 128, "vocab_size": 100, "torch_dtype": "float32"})",
      "inline");
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->kv_heads, 4);
  EXPECT_EQ(s->head_dim, 16);
  EXPECT_EQ(s->bytes_per_element, 4);
  // 2 · 100 · 64 + 2 · (4 · 64² + 3 · 64 · 128 + 2 · 64) + 64.
  EXPECT_DOUBLE_EQ(s->params(), 12800 + 2 * (16384 + 24576 + 128) + 64);
  EXPECT_DOUBLE_EQ(s->kv_bytes_per_token(), 2.0 * 2 * 4 * 16 * 4);
}

TEST(HfModelConfigTest, ErrorsNameTheFileAndTheField) {
  absl::Status missing =
      ParseHfModelConfig(
          R"({"hidden_size": 64, "num_attention_heads": 4, "intermediate_size": 128,
          "vocab_size": 100})",
          "m/config.json")
          .status();
  EXPECT_EQ(missing.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(missing.message().find("m/config.json"), std::string_view::npos) << missing;
  EXPECT_NE(missing.message().find("\"num_hidden_layers\" is missing"), std::string_view::npos)
      << missing;

  absl::Status wrong_type =
      ParseHfModelConfig(R"({"hidden_size": "big"})", "m/config.json").status();
  EXPECT_NE(wrong_type.message().find("\"hidden_size\" must be an integer"), std::string_view::npos)
      << wrong_type;

  // A million nested arrays as a field: the message used to dump() the value, which recursed
  // once per level and overflowed the stack.
  const std::string nested = std::string(1'000'000, '[') + std::string(1'000'000, ']');
  absl::Status deep =
      ParseHfModelConfig(StrCat(R"({"hidden_size": )", nested, "}"), "m/config.json").status();
  EXPECT_NE(deep.message().find("must be an integer >= 1 (got an array)"), std::string_view::npos)
      << deep.message().substr(0, 200);

  absl::Status malformed = ParseHfModelConfig(R"({"hidden_size": 64,)", "m/config.json").status();
  EXPECT_EQ(malformed.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(malformed.message().find("m/config.json: not valid JSON"), std::string_view::npos)
      << malformed;

  // A number beyond a double's range ends the parse with out_of_range rather than parse_error.
  absl::Status huge = ParseHfModelConfig(R"({"hidden_size": 4091e308})", "m/config.json").status();
  EXPECT_EQ(huge.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(huge.message().find("m/config.json: not valid JSON"), std::string_view::npos) << huge;

  absl::Status dtype = ParseHfModelConfig(
                           R"({"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
          "intermediate_size": 128, "vocab_size": 100, "torch_dtype": "int4"})",
                           "m/config.json")
                           .status();
  EXPECT_NE(dtype.message().find("\"torch_dtype\""), std::string_view::npos) << dtype;

  absl::Status moe = ParseHfModelConfig(
                         R"({"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
          "intermediate_size": 128, "vocab_size": 100, "num_experts": 8})",
                         "m/config.json")
                         .status();
  EXPECT_EQ(moe.code(), absl::StatusCode::kUnimplemented);
  EXPECT_NE(moe.message().find("mixture-of-experts"), std::string_view::npos) << moe;

  absl::Status absent = ReadHfModelConfig("/nonexistent/flywheel/config.json").status();
  EXPECT_EQ(absent.code(), absl::StatusCode::kNotFound);
  EXPECT_NE(absent.message().find("/nonexistent/flywheel/config.json"), std::string_view::npos);
}

// The path is taken from the TOML file's directory; the derived figures replace the defaults
// and the effective config, printed, loads back without the config.json.
TEST_F(HfConfigFilesTest, SimConfigReadsTheModelFromConfigJson) {
  std::filesystem::copy_file(TestData() / "llama-3-8b/config.json", dir_ / "models/config.json");
  const std::string toml =
      Write("sim.toml", "[workload.model]\nhf_config = \"models/config.json\"\n");
  absl::StatusOr<SimConfig> config = LoadSimConfig(toml);
  ASSERT_TRUE(config.ok()) << config.status();
  const ModelCostOptions& m = config->workload.model;
  EXPECT_DOUBLE_EQ(m.params, 8'030'261'248.0);
  EXPECT_EQ(m.layers, 32);
  EXPECT_EQ(m.hidden, 4096);
  EXPECT_DOUBLE_EQ(m.kv_bytes_per_token, 131'072);
  EXPECT_DOUBLE_EQ(m.bytes_per_param, 2);
  EXPECT_TRUE(m.hf_config.empty());

  const std::string printed = Write("printed.toml", FormatSimConfig(*config));
  std::filesystem::remove(dir_ / "models/config.json");
  absl::StatusOr<SimConfig> again = LoadSimConfig(printed);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_DOUBLE_EQ(again->workload.model.params, m.params);
  EXPECT_DOUBLE_EQ(again->workload.model.kv_bytes_per_token, m.kv_bytes_per_token);
}

TEST_F(HfConfigFilesTest, AFigureGivenTwiceIsRefusedNamingBoth) {
  const std::string toml =
      Write("sim.toml", "[workload.model]\nhf_config = \"models/config.json\"\nparams = 7e9\n");
  absl::Status status = LoadSimConfig(toml).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(
      status.message().find("workload.model.params given together with workload.model.hf_config"),
      std::string_view::npos)
      << status;
  EXPECT_NE(status.message().find(toml), std::string_view::npos) << status;
  // An override counts as given.
  const std::string alone =
      Write("alone.toml", "[workload.model]\nhf_config = \"models/config.json\"\n");
  status = LoadSimConfig(alone, {"workload.model.kv_bytes_per_token=65536"}).status();
  EXPECT_NE(status.message().find("workload.model.kv_bytes_per_token given together"),
            std::string_view::npos)
      << status;
}

TEST_F(HfConfigFilesTest, AMissingConfigJsonIsNamedWithTheKey) {
  const std::string toml =
      Write("sim.toml", "[workload.model]\nhf_config = \"models/nope.json\"\n");
  absl::Status status = LoadSimConfig(toml).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kNotFound);
  EXPECT_NE(status.message().find("workload.model.hf_config = \"models/nope.json\""),
            std::string_view::npos)
      << status;
  EXPECT_NE(status.message().find((dir_ / "models/nope.json").string()), std::string_view::npos)
      << status;
}

// Code that builds a SimConfig itself cannot pass an unread hf_config to the simulator.
TEST(HfModelConfigTest, AnUnreadHfConfigIsNotSimulated) {
  SimConfig config;
  config.workload.model.hf_config = "config.json";
  absl::Status status = config.Validate();
  EXPECT_NE(status.message().find("ApplyHfConfig"), std::string_view::npos) << status;
}

}  // namespace
}  // namespace flywheel::sim
