#include "flywheel/env/observation_limit.h"

#include <gtest/gtest.h>

#include "flywheel/core/metrics.h"
#include "flywheel/env/env_factory.h"

namespace flywheel {
namespace {

TEST(ObservationLimitTest, CutsOnAUtf8BoundaryAndCounts) {
  Counter* counter = MetricsRegistry::Global().GetCounter("env.observation_truncated");
  const int64_t before = counter->value();
  StepResult r;
  r.observation = "ab\xc3\xa9xyz";  // "abé" + "xyz": é is two bytes
  EXPECT_FALSE(TruncateObservation(r, 100));
  EXPECT_TRUE(TruncateObservation(r, 3));  // would split é: cut before it
  EXPECT_EQ(r.observation, "ab");
  EXPECT_TRUE(r.truncated);
  EXPECT_EQ(counter->value(), before + 1);
}

TEST(ObservationLimitTest, AppliesToBuiltInTasks) {
  EnvOptions options;
  options.kind = EnvKind::kRepair;
  options.repair.num_lines = 200;
  options.repair.max_turns = 10;
  options.max_observation_bytes = 256;
  auto factory = EnvFactory::Create(options);
  ASSERT_TRUE(factory.ok()) << factory.status();
  auto env = (*factory)->NewEnvironment();
  ASSERT_TRUE(env->Reset(TaskInstance{"repair", 1}).ok());
  auto listing = env->Step("inspect");  // 200 lines: several kilobytes
  ASSERT_TRUE(listing.ok());
  EXPECT_TRUE(listing->truncated);
  EXPECT_EQ(listing->observation.size(), 256u);
  auto line = env->Step("inspect 7");
  ASSERT_TRUE(line.ok());
  EXPECT_FALSE(line->truncated);
}

}  // namespace
}  // namespace flywheel
