#include "flywheel/learner/checkpoint.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <torch/torch.h>

#include <filesystem>
#include <fstream>
#include <random>

#include "flywheel/core/status_macros.h"
#include "flywheel/learner/optimizer.h"
#include "flywheel/learner/trainer_state.h"

namespace flywheel {
namespace {

namespace fs = std::filesystem;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::string MakeTempDir() {
  std::string pattern = (fs::temp_directory_path() / "flywheel-ckpt-XXXXXX").string();
  return mkdtemp(pattern.data());
}

class CheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = MakeTempDir(); }
  void TearDown() override { fs::remove_all(dir_); }
  std::string dir_;
};

CheckpointManager::Writer WriteFile(std::string name, std::string text) {
  return [name, text](const std::string& dir) {
    std::ofstream(fs::path(dir) / name) << text;
    return absl::OkStatus();
  };
}

TEST_F(CheckpointTest, SaveMakesACompleteDirectoryAndKeepsTheLastN) {
  CheckpointManager manager({dir_, /*keep_last=*/2});
  for (int64_t step : {10, 20, 30}) {
    auto path = manager.Save(step, WriteFile("model.txt", std::to_string(step)));
    ASSERT_TRUE(path.ok()) << path.status();
    EXPECT_TRUE(fs::exists(fs::path(*path) / "DONE"));
    EXPECT_TRUE(fs::exists(fs::path(*path) / "model.txt"));
  }
  auto steps = manager.CompleteSteps();
  ASSERT_TRUE(steps.ok());
  EXPECT_THAT(*steps, ElementsAre(20, 30));
  EXPECT_FALSE(fs::exists(manager.PathFor(10)));
  auto latest = manager.Latest();
  ASSERT_TRUE(latest.ok());
  EXPECT_EQ(latest->value(), manager.PathFor(30));
  // Nothing temporary is left behind.
  for (const auto& entry : fs::directory_iterator(dir_)) {
    EXPECT_EQ(entry.path().filename().string().rfind("step-", 0), 0u) << entry.path();
  }
}

TEST_F(CheckpointTest, DirectoryWithoutMarkerIsIgnored) {
  CheckpointManager manager({dir_, 3});
  ASSERT_TRUE(manager.Save(5, WriteFile("model.txt", "5")).ok());
  // A checkpoint of step 9 whose writer died before the marker (files present, no DONE).
  fs::create_directories(manager.PathFor(9));
  std::ofstream(fs::path(manager.PathFor(9)) / "model.txt") << "half";
  // And a crashed writer's temporary directory.
  fs::create_directories(fs::path(dir_) / ".tmp-step-0000000011-1-0");
  auto latest = manager.Latest();
  ASSERT_TRUE(latest.ok());
  EXPECT_EQ(latest->value(), manager.PathFor(5));
  EXPECT_THAT(*manager.CompleteSteps(), ElementsAre(5));

  // Saving step 9 replaces the incomplete directory; the stale temporary is cleaned up.
  ASSERT_TRUE(manager.Save(9, WriteFile("model.txt", "9")).ok());
  EXPECT_EQ(manager.Latest()->value(), manager.PathFor(9));
  std::ifstream in(fs::path(manager.PathFor(9)) / "model.txt");
  std::string text;
  in >> text;
  EXPECT_EQ(text, "9");
  EXPECT_FALSE(fs::exists(fs::path(dir_) / ".tmp-step-0000000011-1-0"));
}

TEST_F(CheckpointTest, FailedWriterLeavesNothingVisible) {
  CheckpointManager manager({dir_, 3});
  ASSERT_TRUE(manager.Save(1, WriteFile("model.txt", "1")).ok());
  auto failed = manager.Save(2, [](const std::string& dir) {
    std::ofstream(fs::path(dir) / "model.txt") << "partial";
    return absl::ResourceExhaustedError("disk full");
  });
  ASSERT_FALSE(failed.ok());
  EXPECT_THAT(failed.status().message(), HasSubstr("checkpoint step 2"));
  EXPECT_THAT(failed.status().message(), HasSubstr("disk full"));
  EXPECT_FALSE(fs::exists(manager.PathFor(2)));
  EXPECT_EQ(manager.Latest()->value(), manager.PathFor(1));
  int entries = 0;
  for ([[maybe_unused]] const auto& e : fs::directory_iterator(dir_)) ++entries;
  EXPECT_EQ(entries, 1);
  // A complete checkpoint is never overwritten.
  EXPECT_EQ(manager.Save(1, WriteFile("model.txt", "x")).status().code(),
            absl::StatusCode::kAlreadyExists);
}

TEST_F(CheckpointTest, EmptyOrMissingDirectoryHasNoLatest) {
  CheckpointManager manager({(fs::path(dir_) / "none").string(), 3});
  auto latest = manager.Latest();
  ASSERT_TRUE(latest.ok());
  EXPECT_FALSE(latest->has_value());
}

// A tiny training loop whose every step consumes torch's global RNG (data noise and dropout) and
// a data RNG, so resuming must restore all of them, and AdamW's moments, to match exactly.
struct TinyRun {
  torch::nn::Linear model{nullptr};
  std::unique_ptr<Optimizer> optimizer;
  std::mt19937_64 data_rng{123};

  explicit TinyRun(int64_t init_seed) {
    torch::manual_seed(init_seed);
    model = torch::nn::Linear(4, 1);
    OptimizerOptions o;
    o.schedule = {0.05, 2, 10, 0.1};
    o.grad_clip = 0.5;
    o.weight_decay = 0.01;
    optimizer = std::make_unique<Optimizer>(model->parameters(), o);
  }

  float Step() {
    std::uniform_real_distribution<float> scale(0.5f, 2.0f);
    const float s = scale(data_rng);
    const torch::Tensor x = torch::randn({8, 4}) * s;
    const torch::Tensor y = x.sum(1, true) + 0.1 * torch::randn({8, 1});
    optimizer->ZeroGrad();
    const torch::Tensor h = torch::dropout(model->forward(x), 0.2, /*train=*/true);
    const torch::Tensor loss = torch::mse_loss(h, y);
    loss.backward();
    EXPECT_TRUE(optimizer->Step().ok());
    return loss.item<float>();
  }

  CheckpointManager::Writer Writer() {
    return [this](const std::string& dir) -> absl::Status {
      torch::save(model, (fs::path(dir) / "model.pt").string());  // stands in for safetensors
      return WriteTrainerState(dir, *optimizer, &data_rng);
    };
  }

  absl::Status Restore(const std::string& dir) {
    torch::load(model, (fs::path(dir) / "model.pt").string());
    return ReadTrainerState(dir, *optimizer, &data_rng);
  }
};

TEST_F(CheckpointTest, ResumeContinuesBitIdentically) {
  const int k = 3, n = 7;
  torch::manual_seed(0);
  TinyRun reference(0);
  std::vector<float> expected;
  for (int i = 0; i < n; ++i) expected.push_back(reference.Step());

  CheckpointManager manager({dir_, 2});
  {
    TinyRun first(0);
    for (int i = 0; i < k; ++i) EXPECT_EQ(first.Step(), expected[i]) << i;
    ASSERT_TRUE(manager.Save(first.optimizer->step(), first.Writer()).ok());
    first.Step();  // the process runs on a little and dies
  }
  torch::manual_seed(999);  // a new process: different RNG, different initial weights
  TinyRun resumed(42);
  auto latest = manager.Latest();
  ASSERT_TRUE(latest.ok() && latest->has_value());
  ASSERT_TRUE(resumed.Restore(latest->value()).ok());
  EXPECT_EQ(resumed.optimizer->step(), k);
  EXPECT_EQ(resumed.optimizer->version(), k);
  for (int i = k; i < n; ++i) EXPECT_EQ(resumed.Step(), expected[i]) << "step " << i;
  EXPECT_TRUE(torch::equal(resumed.model->weight, reference.model->weight));
  EXPECT_TRUE(torch::equal(resumed.model->bias, reference.model->bias));
  EXPECT_EQ(resumed.optimizer->version(), n);
}

TEST_F(CheckpointTest, MissingTrainerStateIsAClearError) {
  TinyRun run(0);
  const absl::Status s = ReadTrainerState(dir_, *run.optimizer);
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(s.message(), HasSubstr("trainer_state.pt"));
}

}  // namespace
}  // namespace flywheel
