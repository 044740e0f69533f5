#include "flywheel/actor/rollout_options.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "flywheel/model/sampling_params.h"

namespace flywheel {
namespace {

using ::testing::HasSubstr;

template <typename Options>
absl::Status BindText(const std::string& text, Options& options) {
  auto table = config::ParseToml(text, "test.toml");
  if (!table.ok()) return table.status();
  if (auto s = config::Bind(*table, "test.toml", options); !s.ok()) return s;
  return options.Validate();
}

TEST(RolloutOptionsTest, BindsFromToml) {
  RolloutEngineOptions options;
  ASSERT_TRUE(BindText("kv_on_swap = \"recompute\"\nintra_op_threads = 2\nbackend = \"torch\"\n",
                       options)
                  .ok());
  EXPECT_EQ(options.kv_on_swap, KvOnSwap::kRecompute);
  EXPECT_EQ(options.backend, DecodeBackend::kTorch);
  EXPECT_EQ(options.intra_op_threads, 2);
  SamplingParams sampling;
  ASSERT_TRUE(BindText("temperature = 0.7\ntop_k = 50\ntop_p = 0.9\n", sampling).ok());
  EXPECT_EQ(sampling.top_k, 50);
}

TEST(RolloutOptionsTest, BadValuesNameTheKey) {
  RolloutEngineOptions options;
  EXPECT_THAT(std::string(BindText("kv_on_swap = \"drop\"\n", options).message()),
              HasSubstr("expected one of: keep, recompute"));
  options = {};
  EXPECT_THAT(std::string(BindText("backend = \"gpu\"\n", options).message()),
              HasSubstr("expected one of: auto, cpu, torch"));
  options = {};
  EXPECT_THAT(std::string(BindText("initial_slots = 0\n", options).message()),
              HasSubstr("actor.initial_slots"));
  SamplingParams sampling;
  EXPECT_THAT(std::string(BindText("temperature = 0.0\n", sampling).message()),
              HasSubstr("sampling.temperature"));
}

}  // namespace
}  // namespace flywheel
