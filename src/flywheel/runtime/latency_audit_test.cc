#include "flywheel/runtime/latency_audit.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace flywheel {
namespace {

using ::testing::HasSubstr;

TEST(LatencyAuditTest, FedLearner) {
  LatencyAuditInput in;
  in.wall_seconds = 100;
  in.learner_busy_seconds = 97;
  in.learner_wait_seconds = 3;
  in.generation_seconds = 40;
  in.episodes_in_flight = 64;
  in.samples_consumed = in.samples_produced = 1000;
  const LatencyAudit a = AuditLatency(in);
  EXPECT_TRUE(a.learner_fed);
  EXPECT_NEAR(a.learner_utilization, 0.97, 1e-12);
  EXPECT_EQ(a.suggested_episodes_in_flight, 0);
  EXPECT_THAT(a.Verdict(), HasSubstr("kept the learner fed"));
}

TEST(LatencyAuditTest, StarvedLatencyBoundActorsNeedMoreEpisodes) {
  LatencyAuditInput in;
  in.wall_seconds = 100;
  in.learner_busy_seconds = 25;  // could consume 4x faster than it did
  in.learner_wait_seconds = 75;
  in.actor_threads = 2;
  in.generation_seconds = 50;  // 25% of actor time decoding: latency-bound
  in.episodes_in_flight = 16;
  in.samples_consumed = 500;
  in.samples_produced = 500;
  const LatencyAudit a = AuditLatency(in);
  EXPECT_FALSE(a.learner_fed);
  EXPECT_FALSE(a.generation_bound);
  // demand 500/25 = 20/s, supply 500/100 = 5/s: 4x the concurrency
  EXPECT_EQ(a.suggested_episodes_in_flight, 64);
  EXPECT_THAT(a.Verdict(), HasSubstr("about 64 episodes in flight (now 16)"));
  EXPECT_EQ(a.ToJson()["suggested_episodes_in_flight"], 64);
}

TEST(LatencyAuditTest, GenerationBoundActorsNeedMoreWorkers) {
  LatencyAuditInput in;
  in.wall_seconds = 10;
  in.learner_busy_seconds = 2;
  in.learner_wait_seconds = 8;
  in.actor_threads = 1;
  in.generation_seconds = 9.5;
  in.samples_consumed = in.samples_produced = 10;
  const LatencyAudit a = AuditLatency(in);
  EXPECT_TRUE(a.generation_bound);
  EXPECT_THAT(a.Verdict(), HasSubstr("add actor threads"));
}

}  // namespace
}  // namespace flywheel
