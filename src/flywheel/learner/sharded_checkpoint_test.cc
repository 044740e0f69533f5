#include "flywheel/learner/sharded_checkpoint.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/torch.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "flywheel/learner/parallel_test_util.h"

namespace flywheel {
namespace {

namespace fs = std::filesystem;
using testing::BatchForStep;
using testing::BitEqual;
using ::testing::HasSubstr;
using testing::MaxAbsDiff;
using testing::ParallelLearnerOptions;
using testing::ReferenceWeights;
using testing::RunRanks;
using testing::TinyPolicy;

class ShardedCheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           fmt::format("flywheel-sharded-ckpt-{}-{}", ::getpid(),
                       ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  struct Run {
    int world_size = 1;
    ShardingMode sharding = ShardingMode::kNone;
    int64_t first_step = 0;
    int64_t end_step = 0;
    std::string load;         // a checkpoint to resume from first
    int64_t save_after = -1;  // save once this many steps are done
    int64_t seed = 7;         // model init (a resumed run starts from other weights)
  };

  // Rank 0's weights at the end; path of the checkpoint saved, if any, in saved_.
  std::vector<torch::Tensor> Train(const Run& run) {
    LearnerOptions options = ParallelLearnerOptions(PolicyLossKind::kDecoupledPpo);
    options.sharding = run.sharding;
    std::vector<std::vector<torch::Tensor>> weights(run.world_size);
    auto body = [&](int rank, dist::Communicator* comm) {
      torch::set_num_threads(1);
      TinyPolicy policy(run.seed);
      LearnerStep learner(options, testing::kParallelRunSteps, policy.Parameters(),
                          policy.Forward(), nullptr, 1.0, RealClock(), 0,
                          ParallelContext{comm, policy.Units(), policy.model.get()});
      if (!run.load.empty()) {
        const absl::Status loaded = LoadShardedCheckpoint(run.load, learner);
        ASSERT_TRUE(loaded.ok()) << loaded;
        EXPECT_EQ(learner.version(), run.first_step);
      }
      CheckpointManager manager({dir_.string(), 3});
      for (int64_t s = run.first_step; s < run.end_step; ++s) {
        auto result = learner.Step(BatchForStep(s));
        ASSERT_TRUE(result.ok()) << "rank " << rank << ": " << result.status();
        if (s + 1 == run.save_after) {
          auto saved = SaveShardedCheckpoint(manager, learner, comm);
          ASSERT_TRUE(saved.ok()) << saved.status();
          if (rank == 0) saved_ = *saved;
        }
      }
      auto full = learner.FullParameters();  // every rank: gathers when fully sharded
      ASSERT_TRUE(full.ok()) << full.status();
      weights[rank] = *full;
    };
    if (run.world_size == 1 && run.sharding == ShardingMode::kNone) {
      body(0, nullptr);  // one process, no communicator at all
    } else {
      RunRanks(run.world_size, [&](int rank, dist::Communicator& comm) { body(rank, &comm); });
    }
    return weights[0];
  }

  fs::path dir_;
  std::string saved_;
};

TEST_F(ShardedCheckpointTest, SaveAtFourResumeAtFourTwoAndOne) {
  const std::vector<torch::Tensor> reference =
      ReferenceWeights(ParallelLearnerOptions(PolicyLossKind::kDecoupledPpo), 5);
  const std::vector<torch::Tensor> uninterrupted =
      Train({.world_size = 4, .end_step = 5, .load = "", .save_after = 3});
  ASSERT_FALSE(saved_.empty());
  EXPECT_TRUE(fs::exists(fs::path(saved_) / "DONE"));
  for (int r = 0; r < 4; ++r) {
    EXPECT_TRUE(fs::exists(fs::path(saved_) / fmt::format("shard-{:05d}-of-00004.pt", r)));
  }
  std::ifstream in(fs::path(saved_) / kShardManifestFile);
  const nlohmann::json manifest = nlohmann::json::parse(in);
  EXPECT_EQ(manifest["world_size"], 4);
  EXPECT_EQ(manifest["step"], 3);
  ASSERT_EQ(manifest["units"].size(), 3u);  // root, layers.0, layers.1
  EXPECT_EQ(manifest["units"][0]["name"], "root");
  for (const auto& unit : manifest["units"]) {
    EXPECT_EQ(unit["shard_length"].get<int64_t>() * 4,
              unit["length"].get<int64_t>() + unit["padding"].get<int64_t>());
  }
  EXPECT_FALSE(fs::exists(dir_ / ".staging-step-0000000003"));

  const auto at4 =
      Train({.world_size = 4, .first_step = 3, .end_step = 5, .load = saved_, .seed = 99});
  EXPECT_TRUE(BitEqual(at4, uninterrupted)) << MaxAbsDiff(at4, uninterrupted);
  for (int world : {2, 1}) {
    const auto resumed =
        Train({.world_size = world, .first_step = 3, .end_step = 5, .load = saved_, .seed = 99});
    const double diff = MaxAbsDiff(resumed, reference);
    std::printf(
        "[ sharded checkpoint ] saved at N = 4, resumed at N = %d: max |w - w_ref| = "
        "%.3g (vs the uninterrupted N = 4 run: %.3g)\n",
        world, diff, MaxAbsDiff(resumed, uninterrupted));
    EXPECT_LT(diff, 1e-5) << "N = " << world;
  }
}

TEST_F(ShardedCheckpointTest, ShardedOptimizerStateReshardsToOtherModes) {
  const std::vector<torch::Tensor> reference =
      ReferenceWeights(ParallelLearnerOptions(PolicyLossKind::kDecoupledPpo), 5);
  const auto uninterrupted = Train({.world_size = 4,
                                    .sharding = ShardingMode::kGradsOptimizer,
                                    .end_step = 5,
                                    .load = "",
                                    .save_after = 3});
  ASSERT_FALSE(saved_.empty());
  const auto at4 = Train({.world_size = 4,
                          .sharding = ShardingMode::kGradsOptimizer,
                          .first_step = 3,
                          .end_step = 5,
                          .load = saved_,
                          .seed = 99});
  EXPECT_TRUE(BitEqual(at4, uninterrupted)) << MaxAbsDiff(at4, uninterrupted);
  const auto at2 = Train({.world_size = 2,
                          .sharding = ShardingMode::kGradsOptimizer,
                          .first_step = 3,
                          .end_step = 5,
                          .load = saved_,
                          .seed = 99});
  const auto at1 =
      Train({.world_size = 1, .first_step = 3, .end_step = 5, .load = saved_, .seed = 99});
  std::printf(
      "[ sharded checkpoint ] ZeRO-2 at N = 4 → ZeRO-2 at N = 2: %.3g, → one process: "
      "%.3g (max |w - w_ref|)\n",
      MaxAbsDiff(at2, reference), MaxAbsDiff(at1, reference));
  EXPECT_LT(MaxAbsDiff(at2, reference), 1e-5);
  EXPECT_LT(MaxAbsDiff(at1, reference), 1e-5);
}

TEST_F(ShardedCheckpointTest, FullyShardedStateReshards) {
  const std::vector<torch::Tensor> reference =
      ReferenceWeights(ParallelLearnerOptions(PolicyLossKind::kDecoupledPpo), 5);
  const auto uninterrupted = Train({.world_size = 4,
                                    .sharding = ShardingMode::kFull,
                                    .end_step = 5,
                                    .load = "",
                                    .save_after = 3});
  ASSERT_FALSE(saved_.empty());
  const auto at4 = Train({.world_size = 4,
                          .sharding = ShardingMode::kFull,
                          .first_step = 3,
                          .end_step = 5,
                          .load = saved_,
                          .seed = 99});
  EXPECT_TRUE(BitEqual(at4, uninterrupted)) << MaxAbsDiff(at4, uninterrupted);
  const auto at2 = Train({.world_size = 2,
                          .sharding = ShardingMode::kFull,
                          .first_step = 3,
                          .end_step = 5,
                          .load = saved_,
                          .seed = 99});
  const auto at1 =
      Train({.world_size = 1, .first_step = 3, .end_step = 5, .load = saved_, .seed = 99});
  std::printf(
      "[ sharded checkpoint ] full at N = 4 → full at N = 2: %.3g, → one process: %.3g "
      "(max |w - w_ref|)\n",
      MaxAbsDiff(at2, reference), MaxAbsDiff(at1, reference));
  EXPECT_LT(MaxAbsDiff(at2, reference), 1e-5);
  EXPECT_LT(MaxAbsDiff(at1, reference), 1e-5);
}

TEST_F(ShardedCheckpointTest, AnIncompleteOrForeignCheckpointIsRefused) {
  Train({.world_size = 2, .end_step = 1, .load = "", .save_after = 1});
  ASSERT_FALSE(saved_.empty());
  // Another model (3 layers): the unit layout differs, and the error says so.
  ModelOptions other = testing::ParallelModelOptions();
  other.num_layers = 3;
  auto model = MakeTransformer(other);
  ASSERT_TRUE(model.ok());
  std::vector<std::string> names;
  for (const auto& item : (*model)->named_parameters()) names.push_back(item.key());
  LearnerStep learner(ParallelLearnerOptions(PolicyLossKind::kDecoupledPpo), 10,
                      (*model)->parameters(), nullptr, nullptr, 1.0, RealClock(), 0,
                      ParallelContext{nullptr, TransformerUnits(names)});
  EXPECT_THAT(LoadShardedCheckpoint(saved_, learner).message(), HasSubstr("unit"));

  fs::remove(fs::path(saved_) / CheckpointManager::kDoneMarker);
  TinyPolicy policy;
  LearnerStep same(ParallelLearnerOptions(PolicyLossKind::kDecoupledPpo), 10, policy.Parameters(),
                   policy.Forward(), nullptr, 1.0, RealClock(), 0,
                   ParallelContext{nullptr, policy.Units()});
  const absl::Status s = LoadShardedCheckpoint(saved_, same);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.message(), HasSubstr("DONE"));
}

}  // namespace
}  // namespace flywheel
