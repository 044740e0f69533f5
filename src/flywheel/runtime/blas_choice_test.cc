#include "flywheel/runtime/blas_choice.h"

#include <gtest/gtest.h>

#include "flywheel/model/blas_threads.h"

namespace flywheel {
namespace {

ModelOptions SmallModel() {
  ModelOptions m;
  m.vocab_size = 64;
  m.hidden_size = 64;
  m.num_layers = 1;
  m.num_heads = 4;
  m.num_kv_heads = 4;
  m.intermediate_size = 128;
  return m;
}

// The suite needs OpenBLAS (scripts/setup installs libopenblas0-pthread); elsewhere the choice
// must leave the BLAS alone, which the last test checks.
bool HaveOpenBlas() { return LoadedBlas().settable; }

TEST(BlasChoiceTest, ConfiguredCountIsApplied) {
  if (!HaveOpenBlas()) GTEST_SKIP() << "not OpenBLAS: " << LoadedBlas().DebugString();
  auto c = ChooseBlasThreads(BlasRole::kLearnerProcess, 2, SmallModel(), 256);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->threads, 2);
  EXPECT_EQ(LoadedBlas().threads, 2);
  EXPECT_EQ(c->reason, "run.blas_threads");
}

TEST(BlasChoiceTest, EmbeddedAndActorProcessesUseOneThread) {
  if (!HaveOpenBlas()) GTEST_SKIP() << "not OpenBLAS: " << LoadedBlas().DebugString();
  ASSERT_TRUE(SetBlasThreads(2).ok());
  for (BlasRole role : {BlasRole::kEmbedded, BlasRole::kActorProcess}) {
    auto c = ChooseBlasThreads(role, 0, SmallModel(), 256);
    ASSERT_TRUE(c.ok()) << c.status();
    EXPECT_EQ(c->threads, 1);
    EXPECT_EQ(LoadedBlas().threads, 1);
    EXPECT_NE(c->reason.find("auto"), std::string::npos);
  }
}

TEST(BlasChoiceTest, LearnerProcessMeasuresBothCounts) {
  if (!HaveOpenBlas()) GTEST_SKIP() << "not OpenBLAS: " << LoadedBlas().DebugString();
  auto c = ChooseBlasThreads(BlasRole::kLearnerProcess, 0, SmallModel(), 512);
  ASSERT_TRUE(c.ok()) << c.status();
  if (c->cores == 1) {
    EXPECT_EQ(c->threads, 1);
    return;
  }
  EXPECT_GT(c->probe_seconds_one, 0);
  EXPECT_GT(c->probe_seconds_many, 0);
  const double speedup = c->probe_seconds_one / c->probe_seconds_many;
  EXPECT_EQ(c->threads, speedup >= 1.25 ? c->cores : 1) << c->DebugString();
  EXPECT_EQ(LoadedBlas().threads, c->threads);
  EXPECT_TRUE(c->ToJson().contains("probe_seconds_one"));
}

TEST(BlasChoiceTest, NegativeCountNamesTheKey) {
  auto c = ChooseBlasThreads(BlasRole::kEmbedded, -1, SmallModel(), 256);
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("run.blas_threads"), std::string::npos);
}

TEST(BlasChoiceTest, ReportsTheLoadedLibrary) {
  auto c = ChooseBlasThreads(BlasRole::kEmbedded, 0, SmallModel(), 256);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_FALSE(c->library.empty());
  if (!HaveOpenBlas()) {
    EXPECT_EQ(c->threads, 0);
  }
}

}  // namespace
}  // namespace flywheel
