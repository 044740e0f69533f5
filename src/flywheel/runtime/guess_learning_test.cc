// The short version of the main job's learning check: from random initialisation, a few hundred
// learner steps on examples/guess.toml must lift the success rate clearly above what the
// untrained policy and a uniformly random guesser reach. Step-bounded (not time-bounded), so a
// slow shared machine makes it slower, not flakier.
#include <gtest/gtest.h>

#include <iostream>
#include <string>

#include "flywheel/core/strings.h"
#include "flywheel/runtime/job_test_util.h"
#include "flywheel/runtime/learning_curve_test_util.h"

namespace flywheel {
namespace {

// A uniformly random guesser finds the number with probability 1 − (15/16)^6.
constexpr double kRandomSuccess = 0.321;
// 160 steps of 64 episodes: about 0.5 success at the end (0.475 after 120 steps in one run,
// 0.53 after 150 in another), from about 0.24 at the start; about 25 s on 2 idle cores.
constexpr int kSteps = 160;
constexpr size_t kWindow = 20;
constexpr double kMargin = 0.08;

TEST(GuessLearningTest, SuccessRisesClearlyAboveRandom) {
  absl::StatusOr<JobConfig> config = testing::LoadGuessJob(
      "curve",
      {StrCat("run.max_steps=", kSteps), "run.max_wall_seconds=0", "learner.checkpoint_every=0",
       // Half the example's batch: the same curve in fewer seconds.
       "run.batch_groups=8", "buffer.max_size=16", "actor.episodes_in_flight=32"});
  ASSERT_TRUE(config.ok()) << config.status();
  absl::StatusOr<testing::CurveEnds> curve = testing::TrainForCurve(*config, kWindow);
  ASSERT_TRUE(curve.ok()) << curve.status();
  EXPECT_EQ(curve->steps, static_cast<size_t>(kSteps));
  std::cout << "success over the first " << kWindow << " steps " << curve->first
            << ", over the last " << kWindow << " steps " << curve->last << " (random guesser "
            << kRandomSuccess << ")\n";
  EXPECT_GT(curve->last, kRandomSuccess + kMargin);
  EXPECT_GT(curve->last, curve->first + kMargin);
}

}  // namespace
}  // namespace flywheel
