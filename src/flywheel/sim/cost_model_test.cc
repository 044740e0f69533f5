#include "flywheel/sim/cost_model.h"

#include <gtest/gtest.h>

#include <random>

namespace flywheel::sim {
namespace {

// Round numbers, so every expectation below is a line of arithmetic.
ClusterOptions Cluster() {
  ClusterOptions c;
  c.devices = 4;
  c.bf16_flops = 1e15;
  c.memory_bytes = 80e9;
  c.memory_bandwidth = 2e12;
  c.interconnect_bandwidth = 100e9;
  c.price_per_device_hour = 3.6;
  return c;
}

WorkloadOptions Workload() {
  WorkloadOptions w;
  w.model.params = 1e9;  // W = 2e9 bytes
  w.model.layers = 16;
  w.model.hidden = 2048;  // κ = 2 · 16 · 2048 · 2 = 131072 bytes/token
  w.generation.max_batch = 1000;
  w.generation.prefill_mfu = 0.5;
  w.generation.bandwidth_efficiency = 0.8;
  w.training.mfu = 0.4;
  w.training.switch_overhead_s = 1.5;
  w.episode.max_tokens = 8192;
  return w;
}

TEST(CostModelTest, PrefillIsComputeBoundWithAttentionQuadraticInTheContext) {
  absl::StatusOr<CostModel> m = CostModel::Create(Cluster(), Workload());
  ASSERT_TRUE(m.ok()) << m.status();
  // Weights 2 · 1e9 · 1000 FLOPs, attention 2 · 16 · 2048 · 1000 · 1000, over 1e15 · 0.5.
  EXPECT_DOUBLE_EQ(m->PrefillSeconds(1000), (2e12 + 2.0 * 16 * 2048 * 1e6) / 5e14);
  // 1000 new tokens after 9000 cached attend over all 10000: 2 · 16 · 2048 · 1000 · 19000.
  EXPECT_DOUBLE_EQ(m->PrefillSeconds(1000, 9000), (2e12 + 2.0 * 16 * 2048 * 1000 * 19000) / 5e14);
  // A handed-over context of 100K tokens prefilled whole: attention is most of it.
  const double weights = 2e9 * 1e5 / 5e14;
  EXPECT_GT(m->PrefillSeconds(100'000), 4 * weights);
}

TEST(CostModelTest, DecodeIsBandwidthBoundUntilTheBatchMakesItComputeBound) {
  absl::StatusOr<CostModel> m = CostModel::Create(Cluster(), Workload());
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_DOUBLE_EQ(m->kv_bytes_per_token(), 131072);
  // Batch 1, empty cache: the weights once, 2e9 / (2e12 · 0.8) = 1.25 ms.
  EXPECT_DOUBLE_EQ(m->DecodeStepSeconds(1, 0), 1.25e-3);
  // 1000 tokens of cache add 1000 · 131072 bytes.
  EXPECT_DOUBLE_EQ(m->DecodeStepSeconds(1, 1000), (2e9 + 131072e3) / 1.6e12);
  // Compute 2 · 1e9 · b / 5e14 passes 1.25 ms at b = 312.5: batch 400 is compute-bound.
  EXPECT_DOUBLE_EQ(m->DecodeStepSeconds(400, 0), 2e9 * 400 / 5e14);
}

TEST(CostModelTest, KvMemoryLimitsTheEpisodesOfAReplica) {
  absl::StatusOr<CostModel> m = CostModel::Create(Cluster(), Workload());
  ASSERT_TRUE(m.ok()) << m.status();
  // (80e9 − 2e9) / (131072 · 8192) = 72.6: 72 episodes.
  EXPECT_EQ(m->episode_slots(), 72);
  WorkloadOptions capped = Workload();
  capped.generation.max_batch = 16;
  EXPECT_EQ(CostModel::Create(Cluster(), capped)->episode_slots(), 16);
}

TEST(CostModelTest, AMillionTokenEpisodeNeedsAWiderReplica) {
  WorkloadOptions w = Workload();
  w.episode.min_tokens = 700'000;
  w.episode.max_tokens = 1'000'000;
  w.episode.mean_tokens = 850'000;
  // 1e6 · 131072 = 131 GB of KV per episode: not on one 80 GB device.
  absl::StatusOr<CostModel> narrow = CostModel::Create(Cluster(), w);
  EXPECT_EQ(narrow.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(narrow.status().message().find("devices_per_replica"), std::string_view::npos);
  w.model.devices_per_replica = 2;  // (160e9 − 2e9) / 131.072e9 = 1.2: one episode
  absl::StatusOr<CostModel> wide = CostModel::Create(Cluster(), w);
  ASSERT_TRUE(wide.ok()) << wide.status();
  EXPECT_EQ(wide->episode_slots(), 1);
  EXPECT_EQ(wide->replicas(), 2);
  // The replica's two devices share the prefill: 2 · 1e9 · 1e6 / (2 · 5e14) = 2 s for the
  // weights, and attention over the million tokens 2 · 16 · 2048 · 1e12 / 1e15 = 65.5 s more.
  EXPECT_DOUBLE_EQ(wide->PrefillSeconds(1'000'000), 2.0 + 2.0 * 16 * 2048 * 1e12 / 1e15);
  EXPECT_EQ(wide->kv_budget_tokens(), (160e9 - 2e9) / 131072);
}

TEST(CostModelTest, TrainingTransferAndSwitchTimes) {
  absl::StatusOr<CostModel> m = CostModel::Create(Cluster(), Workload());
  ASSERT_TRUE(m.ok()) << m.status();
  // 6 · 1e9 · 1e5 tokens / (1e15 · 0.4) = 1.5 s on one replica, half that on two.
  EXPECT_DOUBLE_EQ(m->TrainSeconds(1e5), 1.5);
  EXPECT_DOUBLE_EQ(m->TrainSeconds(1e5, 2), 0.75);
  // 2e9 bytes / 100e9 bytes/s = 20 ms.
  EXPECT_DOUBLE_EQ(m->WeightTransferSeconds(), 0.02);
  EXPECT_DOUBLE_EQ(m->AllReduceSeconds(1), 0);
  EXPECT_DOUBLE_EQ(m->AllReduceSeconds(4), 2 * 0.75 * 0.02);
  EXPECT_DOUBLE_EQ(m->SwitchToTrainSeconds(), 1.52);
  EXPECT_DOUBLE_EQ(m->SwitchToRolloutSeconds(), 1.5);
  // 3.6 $/device-hour: one device-second costs 0.1 cent.
  EXPECT_DOUBLE_EQ(m->CostUsd(1000), 1.0);
}

TEST(CostModelTest, EpisodesFollowTheConfiguredShape) {
  WorkloadOptions w = Workload();
  w.episode.min_turns = 4;
  w.episode.max_turns = 4;
  w.episode.prompt_tokens = 512;
  w.episode.mean_tokens = 4096;
  w.episode.generated_fraction = 0.5;
  absl::StatusOr<CostModel> m = CostModel::Create(Cluster(), w);
  ASSERT_TRUE(m.ok()) << m.status();
  std::mt19937_64 rng(1);
  const EpisodeShape fixed = m->DrawEpisode(rng);
  EXPECT_EQ(fixed.turns, 4);
  EXPECT_EQ(fixed.generated_per_turn, 448);    // (4096 − 512) · 0.5 / 4
  EXPECT_EQ(fixed.observation_per_turn, 597);  // (4096 − 512) · 0.5 / 3, rounded
  EXPECT_NEAR(fixed.total_tokens(), 4096, 2);

  w.episode.length = LengthKind::kUniform;
  w.episode.min_tokens = 700'000;
  w.episode.max_tokens = 1'000'000;
  w.model.devices_per_replica = 4;
  absl::StatusOr<CostModel> long_horizon = CostModel::Create(Cluster(), w);
  ASSERT_TRUE(long_horizon.ok()) << long_horizon.status();
  for (int i = 0; i < 100; ++i) {
    const EpisodeShape s = long_horizon->DrawEpisode(rng);
    EXPECT_GE(s.total_tokens(), 700'000 - 4);
    EXPECT_LE(s.total_tokens(), 1'000'000 + 4);
  }
}

TEST(CostModelTest, BadKnobsAreRefusedByName) {
  ClusterOptions c = Cluster();
  c.devices = 3;
  WorkloadOptions w = Workload();
  w.model.devices_per_replica = 2;
  EXPECT_NE(CostModel::Create(c, w).status().message().find("devices_per_replica"),
            std::string_view::npos);
  w = Workload();
  w.training.mfu = 1.5;
  EXPECT_NE(CostModel::Create(Cluster(), w).status().message().find("workload.training.mfu"),
            std::string_view::npos);
}

}  // namespace
}  // namespace flywheel::sim
