// The short version of the main job's learning check: from random initialisation, a few hundred
// learner steps on examples/guess.toml must lift the success rate clearly above what the
// untrained policy and a uniformly random guesser reach. Step-bounded (not time-bounded), so a
// slow shared machine makes it slower, not flakier.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include "flywheel/core/strings.h"
#include "flywheel/runtime/embedded_job.h"

namespace flywheel {
namespace {

namespace fs = std::filesystem;

// A uniformly random guesser finds the number with probability 1 − (15/16)^6.
constexpr double kRandomSuccess = 0.321;
// 160 steps of 64 episodes: about 0.5 success at the end (0.475 after 120 steps in one run,
// 0.53 after 150 in another), from about 0.24 at the start; about 25 s on 2 idle cores.
constexpr int kSteps = 160;
constexpr size_t kWindow = 20;
constexpr double kMargin = 0.08;

double MeanSuccess(const std::vector<nlohmann::json>& lines, size_t begin, size_t end) {
  double sum = 0;
  for (size_t i = begin; i < end; ++i) sum += lines[i]["success_rate"].get<double>();
  return sum / static_cast<double>(end - begin);
}

TEST(GuessLearningTest, SuccessRisesClearlyAboveRandom) {
  const char* source = std::getenv("FLYWHEEL_SOURCE_DIR");
  const std::string config_path =
      std::string(source != nullptr ? source : ".") + "/examples/guess.toml";
  const fs::path runs = fs::temp_directory_path() / "flywheel_guess_learning_test";
  fs::remove_all(runs);
  absl::StatusOr<JobConfig> config = LoadJobConfig(
      config_path,
      {StrCat("run.runs_dir=\"", runs.string(), "\""), "run.name=\"curve\"",
       StrCat("run.max_steps=", kSteps), "run.max_wall_seconds=0", "learner.checkpoint_every=0",
       // Half the example's batch: the same curve in fewer seconds.
       "run.batch_groups=8", "buffer.max_size=16", "actor.episodes_in_flight=32",
       // Latency is not what this test is about.
       "env.latency.model=\"constant\"", "env.latency.mean_ms=1"});
  ASSERT_TRUE(config.ok()) << config.status();
  EmbeddedJobOptions options;
  options.progress = nullptr;
  absl::StatusOr<EmbeddedJobResult> result = RunEmbeddedJob(*config, options);
  ASSERT_TRUE(result.ok()) << result.status();

  std::vector<nlohmann::json> lines;
  std::ifstream in(runs / "curve" / "metrics.jsonl");
  for (std::string line; std::getline(in, line);) lines.push_back(nlohmann::json::parse(line));
  ASSERT_EQ(lines.size(), static_cast<size_t>(kSteps));
  const double first = MeanSuccess(lines, 0, kWindow);
  const double last = MeanSuccess(lines, lines.size() - kWindow, lines.size());
  std::cout << "success over the first " << kWindow << " steps " << first << ", over the last "
            << kWindow << " steps " << last << " (random guesser " << kRandomSuccess << ")\n";
  EXPECT_GT(last, kRandomSuccess + kMargin);
  EXPECT_GT(last, first + kMargin);
  fs::remove_all(runs);
}

}  // namespace
}  // namespace flywheel
