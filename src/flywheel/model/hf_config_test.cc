#include "flywheel/model/hf_config.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "flywheel/core/strings.h"
#include "flywheel/model/hf_generation_config.h"

namespace flywheel {
namespace {

using nlohmann::json;
using ::testing::AllOf;
using ::testing::HasSubstr;

// Published configs the simulator's tests keep (Llama 3 8B, Qwen2.5 7B, Qwen3 4B).
std::filesystem::path SimTestData() {
  const char* source = std::getenv("FLYWHEEL_SOURCE_DIR");
  EXPECT_NE(source, nullptr) << "FLYWHEEL_SOURCE_DIR is not set (ctest sets it)";
  return std::filesystem::path(source ? source : ".") / "src/flywheel/sim/testdata";
}

// The keys and values of Qwen3-0.6B's config.json (head_dim 128 although 1024 / 16 = 64).
json Qwen3_0_6B() {
  return json::parse(R"({
    "architectures": ["Qwen3ForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
    "bos_token_id": 151643, "eos_token_id": 151645, "head_dim": 128, "hidden_act": "silu",
    "hidden_size": 1024, "initializer_range": 0.02, "intermediate_size": 3072,
    "max_position_embeddings": 40960, "max_window_layers": 28, "model_type": "qwen3",
    "num_attention_heads": 16, "num_hidden_layers": 28, "num_key_value_heads": 8,
    "rms_norm_eps": 1e-06, "rope_scaling": null, "rope_theta": 1000000, "sliding_window": null,
    "tie_word_embeddings": true, "torch_dtype": "bfloat16", "transformers_version": "4.51.0",
    "use_cache": true, "use_sliding_window": false, "vocab_size": 151936})");
}

// The keys and values of Llama-3.2-1B's config.json (Llama 3 rope scaling, tied head).
json Llama3_2_1B() {
  return json::parse(R"({
    "architectures": ["LlamaForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
    "bos_token_id": 128000, "eos_token_id": 128001, "head_dim": 64, "hidden_act": "silu",
    "hidden_size": 2048, "initializer_range": 0.02, "intermediate_size": 8192,
    "max_position_embeddings": 131072, "mlp_bias": false, "model_type": "llama",
    "num_attention_heads": 32, "num_hidden_layers": 16, "num_key_value_heads": 8,
    "pretraining_tp": 1, "rms_norm_eps": 1e-05,
    "rope_scaling": {"factor": 32.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
                     "original_max_position_embeddings": 8192, "rope_type": "llama3"},
    "rope_theta": 500000.0, "tie_word_embeddings": true, "torch_dtype": "bfloat16",
    "transformers_version": "4.45.0.dev0", "use_cache": true, "vocab_size": 128256})");
}

absl::StatusOr<HfModelConfig> Parse(const json& config) {
  return ParseHfModelConfig(config.dump(), "test/config.json");
}

TEST(HfModelConfigTest, Qwen3HasQkNormAndItsOwnHeadDim) {
  auto hf = Parse(Qwen3_0_6B());
  ASSERT_TRUE(hf.ok()) << hf.status();
  const ModelOptions& o = hf->model;
  EXPECT_EQ(hf->architecture, "Qwen3ForCausalLM");
  EXPECT_EQ(o.vocab_size, 151936);
  EXPECT_EQ(o.hidden_size, 1024);
  EXPECT_EQ(o.num_layers, 28);
  EXPECT_EQ(o.num_heads, 16);
  EXPECT_EQ(o.num_kv_heads, 8);
  EXPECT_EQ(o.HeadDim(), 128);
  EXPECT_EQ(o.intermediate_size, 3072);
  EXPECT_TRUE(o.qk_norm);
  EXPECT_FALSE(o.attention_bias);
  EXPECT_TRUE(o.tie_embeddings);
  EXPECT_EQ(o.rope_theta, 1e6);
  EXPECT_FALSE(o.rope_scaling.enabled());
  EXPECT_EQ(o.rms_norm_eps, 1e-6);
  EXPECT_EQ(hf->max_position_embeddings, 40960);
  EXPECT_EQ(hf->torch_dtype, "bfloat16");
  EXPECT_EQ(hf->eos_token_ids, std::vector<int64_t>{151645});
}

TEST(HfModelConfigTest, Llama32ReadsItsLlama3RopeScaling) {
  auto hf = Parse(Llama3_2_1B());
  ASSERT_TRUE(hf.ok()) << hf.status();
  const RopeScalingOptions& s = hf->model.rope_scaling;
  EXPECT_EQ(s.type, "llama3");
  EXPECT_EQ(s.factor, 32);
  EXPECT_EQ(s.low_freq_factor, 1);
  EXPECT_EQ(s.high_freq_factor, 4);
  EXPECT_EQ(s.original_max_position_embeddings, 8192);
  EXPECT_EQ(hf->model.rope_theta, 500000);
  EXPECT_EQ(hf->model.HeadDim(), 64);
  EXPECT_FALSE(hf->model.qk_norm);
}

TEST(HfModelConfigTest, PublishedConfigsOfEachFamilyLoad) {
  for (const char* name : {"llama-3-8b", "qwen2.5-7b", "qwen3-4b"}) {
    auto hf = LoadHfModelConfig(SimTestData() / name);
    ASSERT_TRUE(hf.ok()) << name << ": " << hf.status();
    EXPECT_EQ(hf->model.attention_bias, std::string(name) == "qwen2.5-7b") << name;
    EXPECT_EQ(hf->model.qk_norm, std::string(name) == "qwen3-4b") << name;
  }
  auto qwen2 = LoadHfModelConfig(SimTestData() / "qwen2.5-7b");
  ASSERT_TRUE(qwen2.ok());
  EXPECT_EQ(qwen2->model.HeadDim(), 3584 / 28);  // no head_dim key: hidden / heads
  EXPECT_FALSE(qwen2->model.tie_embeddings);
}

TEST(HfModelConfigTest, TransformersV5RopeParametersAreRead) {
  json c = Llama3_2_1B();
  json rope = c["rope_scaling"];
  rope["rope_theta"] = 500000.0;
  c.erase("rope_scaling");
  c.erase("rope_theta");
  c.erase("torch_dtype");
  c["rope_parameters"] = rope;
  c["dtype"] = "bfloat16";
  auto hf = Parse(c);
  ASSERT_TRUE(hf.ok()) << hf.status();
  EXPECT_EQ(hf->model.rope_theta, 500000);
  EXPECT_EQ(hf->model.rope_scaling.factor, 32);
  EXPECT_EQ(hf->torch_dtype, "bfloat16");
}

TEST(HfModelConfigTest, UnknownArchitectureIsRefused) {
  json c = Qwen3_0_6B();
  c["architectures"] = {"MistralForCausalLM"};
  EXPECT_THAT(Parse(c).status().message(),
              AllOf(HasSubstr("test/config.json"), HasSubstr("MistralForCausalLM"),
                    HasSubstr("Qwen3ForCausalLM")));
  c = Qwen3_0_6B();
  c["model_type"] = "qwen2";
  EXPECT_THAT(Parse(c).status().message(), HasSubstr("model_type"));
}

TEST(HfModelConfigTest, SlidingWindowOnIsRefusedNamingTheKey) {
  json c = Qwen3_0_6B();
  c["use_sliding_window"] = true;
  c["sliding_window"] = 4096;
  const auto s = Parse(c).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), AllOf(HasSubstr("use_sliding_window = true"), HasSubstr("4096")));
  c = Qwen3_0_6B();
  c["layer_types"] = {"full_attention", "sliding_attention"};
  EXPECT_THAT(Parse(c).status().message(), HasSubstr("layer_types"));
  // Off, a window size is harmless (Qwen2.5 ships one).
  c = Qwen3_0_6B();
  c["sliding_window"] = 4096;
  EXPECT_TRUE(Parse(c).ok());
}

TEST(HfModelConfigTest, MixtureOfExpertsKeysAreRefused) {
  json c = Qwen3_0_6B();
  c["num_experts"] = 128;
  EXPECT_THAT(Parse(c).status().message(),
              AllOf(HasSubstr("num_experts = 128"), HasSubstr("mixture-of-experts")));
  c = Qwen3_0_6B();
  c["num_experts"] = 0;  // a dense model that spells it out
  EXPECT_TRUE(Parse(c).ok());
}

TEST(HfModelConfigTest, UnknownKeysAreRefusedNamingThem) {
  json c = Qwen3_0_6B();
  c["partial_rotary_factor"] = 0.5;
  c["some_new_knob"] = 1;
  const auto s = Parse(c).status();
  EXPECT_THAT(s.message(), AllOf(HasSubstr("unknown key(s)"), HasSubstr("partial_rotary_factor"),
                                 HasSubstr("some_new_knob")));
  c = Llama3_2_1B();
  c["rope_scaling"]["beta_fast"] = 32;
  EXPECT_THAT(Parse(c).status().message(), HasSubstr("rope_scaling.beta_fast"));
}

// A million nested arrays as a value: the error message dump()ed it, which recursed once per level
// and overflowed the stack (the same bug sim/hf_model_config.cc had; found reading this parser
// for fuzz/hf_config_fuzzer.cc, whose inputs are too short to nest that deep).
TEST(HfModelConfigTest, ADeeplyNestedValueIsNamedByItsKind) {
  const std::string nested = std::string(1'000'000, '[') + std::string(1'000'000, ']');
  json c = Qwen3_0_6B();
  c["hidden_size"] = "NESTED";
  std::string text = c.dump();
  text.replace(text.find(R"("NESTED")"), 8, nested);
  const absl::Status s = ParseHfModelConfig(text, "test/config.json").status();
  EXPECT_THAT(s.message(), HasSubstr("hidden_size = an array: expected an integer"))
      << s.message().substr(0, 200);
  const absl::Status g =
      ParseHfGenerationConfig(StrCat(R"({"top_k": )", nested, "}"), "generation_config.json")
          .status();
  EXPECT_THAT(g.message(), HasSubstr("top_k = an array: expected")) << g.message().substr(0, 200);
}

TEST(HfModelConfigTest, KeysThatChangeTheMathsAreRefused) {
  const std::vector<std::pair<std::string, json>> cases = {
      {"hidden_act", "gelu"},
      {"mlp_bias", true},
      {"attention_dropout", 0.1},
      {"quantization_config", {{"quant_method", "gptq"}}},
      {"rope_scaling", {{"rope_type", "yarn"}, {"factor", 4.0}}},
      {"torch_dtype", "float8_e4m3fn"},
  };
  for (const auto& [key, value] : cases) {
    json c = Llama3_2_1B();
    c[key] = value;
    const auto s = Parse(c).status();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << key;
    EXPECT_THAT(s.message(), HasSubstr(key)) << key;
  }
  json qwen2 = json::parse(std::ifstream(SimTestData() / "qwen2.5-7b/config.json"));
  qwen2["attention_bias"] = false;
  EXPECT_THAT(Parse(qwen2).status().message(), HasSubstr("always has q/k/v biases"));
  json missing = Qwen3_0_6B();
  missing.erase("hidden_size");
  EXPECT_THAT(Parse(missing).status().message(), HasSubstr("hidden_size is missing"));
}

TEST(HfModelConfigTest, JobOptionsTakeTheShapeAndDisagreementsNameBothValues) {
  auto hf = Parse(Qwen3_0_6B());
  ASSERT_TRUE(hf.ok());
  ModelOptions job;
  job.path = "/models/Qwen3-0.6B";
  job.max_seq_len = 4096;
  auto merged = ApplyHfModelConfig(job, *hf);
  ASSERT_TRUE(merged.ok()) << merged.status();
  EXPECT_EQ(merged->hidden_size, 1024);
  EXPECT_EQ(merged->HeadDim(), 128);
  EXPECT_TRUE(merged->qk_norm);
  EXPECT_EQ(merged->max_seq_len, 4096);  // the job's
  EXPECT_EQ(merged->path, "/models/Qwen3-0.6B");
  job.hidden_size = 1024;  // set, and agreeing: fine
  EXPECT_TRUE(ApplyHfModelConfig(job, *hf).ok());
  job.hidden_size = 2048;
  EXPECT_THAT(ApplyHfModelConfig(job, *hf).status().message(),
              AllOf(HasSubstr("model.hidden_size = 2048"), HasSubstr("hidden_size = 1024"),
                    HasSubstr("test/config.json")));
  job.hidden_size = ModelOptions().hidden_size;
  job.num_layers = 3;
  EXPECT_THAT(ApplyHfModelConfig(job, *hf).status().message(),
              AllOf(HasSubstr("model.num_layers = 3"), HasSubstr("num_hidden_layers = 28")));
  job.num_layers = ModelOptions().num_layers;
  job.max_seq_len = 50000;
  EXPECT_THAT(
      ApplyHfModelConfig(job, *hf).status().message(),
      AllOf(HasSubstr("model.max_seq_len = 50000"), HasSubstr("max_position_embeddings = 40960")));
}

TEST(HfModelConfigTest, ConfigWrittenForASelfInitialisedModelReadsBack) {
  for (bool qk_norm : {false, true}) {
    ModelOptions o;
    o.vocab_size = 300;
    o.hidden_size = 64;
    o.num_layers = 3;
    o.num_heads = 4;
    o.num_kv_heads = 2;
    o.head_dim = qk_norm ? 24 : 0;
    o.qk_norm = qk_norm;
    o.attention_bias = !qk_norm;
    o.tie_embeddings = qk_norm;
    o.rope_theta = 50000;
    o.rope_scaling.type = qk_norm ? "none" : "llama3";
    o.max_seq_len = 512;
    auto hf = Parse(HfConfigJsonFor(o, "float32"));
    ASSERT_TRUE(hf.ok()) << hf.status();
    EXPECT_EQ(hf->architecture, qk_norm ? "Qwen3ForCausalLM" : "LlamaForCausalLM");
    const ModelOptions& r = hf->model;
    EXPECT_EQ(r.vocab_size, o.vocab_size);
    EXPECT_EQ(r.hidden_size, o.hidden_size);
    EXPECT_EQ(r.num_layers, o.num_layers);
    EXPECT_EQ(r.num_heads, o.num_heads);
    EXPECT_EQ(r.num_kv_heads, o.num_kv_heads);
    EXPECT_EQ(r.HeadDim(), o.HeadDim());
    EXPECT_EQ(r.intermediate_size, o.intermediate_size);
    EXPECT_EQ(r.rope_theta, o.rope_theta);
    EXPECT_EQ(r.rope_scaling, o.rope_scaling);
    EXPECT_EQ(r.rms_norm_eps, o.rms_norm_eps);
    EXPECT_EQ(r.tie_embeddings, o.tie_embeddings);
    EXPECT_EQ(r.attention_bias, o.attention_bias);
    EXPECT_EQ(r.qk_norm, o.qk_norm);
    EXPECT_EQ(hf->max_position_embeddings, 512);
    EXPECT_EQ(hf->torch_dtype, "float32");
  }
}

TEST(HfGenerationConfigTest, StopTokensAndSamplingDefaults) {
  auto g = ParseHfGenerationConfig(
      R"({"bos_token_id": 151643, "eos_token_id": [151645, 151643], "do_sample": true,
          "temperature": 0.6, "top_k": 20, "top_p": 0.95, "pad_token_id": 151643,
          "repetition_penalty": 1.1, "transformers_version": "4.51.0"})",
      "generation_config.json");
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ(g->eos_token_ids, (std::vector<int64_t>{151645, 151643}));
  EXPECT_EQ(g->bos_token_id, 151643);
  EXPECT_EQ(g->temperature, 0.6);
  EXPECT_EQ(g->top_p, 0.95);
  EXPECT_EQ(g->top_k, 20);
  EXPECT_EQ(g->do_sample, true);
  EXPECT_EQ(g->ignored_keys, std::vector<std::string>{"repetition_penalty"});
  auto single = ParseHfGenerationConfig(R"({"eos_token_id": 2})", "g.json");
  ASSERT_TRUE(single.ok());
  EXPECT_EQ(single->eos_token_ids, std::vector<int64_t>{2});
  EXPECT_FALSE(single->temperature.has_value());
  EXPECT_THAT(ParseHfGenerationConfig(R"({"top_k": "many"})", "g.json").status().message(),
              HasSubstr("top_k"));
  auto absent = LoadHfGenerationConfig(SimTestData());  // no generation_config.json there
  ASSERT_TRUE(absent.ok());
  EXPECT_FALSE(absent->present);
}

}  // namespace
}  // namespace flywheel
