#include "flywheel/runtime/learner_leases.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "flywheel/core/strings.h"

namespace flywheel {
namespace {

std::vector<std::vector<Trajectory>> Groups(const std::vector<std::vector<std::string>>& ids) {
  std::vector<std::vector<Trajectory>> groups;
  for (const auto& group : ids) {
    std::vector<Trajectory>& g = groups.emplace_back();
    for (const std::string& id : group) g.emplace_back().id = id;
  }
  return groups;
}

TEST(LearnerLeasesTest, ATrajectoryHeldAlreadyIsSkippedUntilAcknowledged) {
  LearnerLeases leases;
  auto batch = Groups({{"a", "b"}, {"c"}});
  EXPECT_EQ(leases.Admit(batch), 0);
  // Delivered again (the buffer restarted): "a" and "c" are held, whole group {c} disappears.
  auto again = Groups({{"a", "d"}, {"c"}});
  EXPECT_EQ(leases.Admit(again), 2);
  ASSERT_EQ(again.size(), 1u);
  ASSERT_EQ(again[0].size(), 1u);
  EXPECT_EQ(again[0][0].id, "d");

  leases.Consume({"a", "b"}, "trained");
  leases.Consume({"c"}, "learner_stale");
  ASSERT_EQ(leases.pending().size(), 3u);
  EXPECT_EQ(leases.pending()[2].reason, "learner_stale");
  leases.Acknowledged(2);  // nothing: no checkpoint holds them yet
  EXPECT_EQ(leases.pending().size(), 3u);
  leases.Checkpointed(2);
  leases.Acknowledged(3);  // a and b: only what the checkpoint holds
  ASSERT_EQ(leases.pending().size(), 1u);
  EXPECT_EQ(leases.held().size(), 2u);  // c pending, d in hand
  auto late = Groups({{"a"}, {"c"}});
  EXPECT_EQ(leases.Admit(late), 1);  // a is forgotten once acknowledged; c is still held
}

TEST(LearnerLeasesTest, TheCheckpointRecordRestoresThePendingList) {
  const std::string dir =
      (std::filesystem::temp_directory_path() / StrCat("flywheel_learner_leases_test_", ::getpid()))
          .string();
  std::filesystem::create_directories(dir);
  LearnerLeases leases;
  auto batch = Groups({{"a", "b"}});
  leases.Admit(batch);
  leases.Consume({"a"}, "trained");
  leases.Consume({"b"}, "learner_too_long");
  ASSERT_TRUE(leases.Write(dir).ok());

  LearnerLeases resumed;
  ASSERT_TRUE(resumed.Read(dir).ok());
  ASSERT_EQ(resumed.pending().size(), 2u);
  EXPECT_EQ(resumed.acknowledgeable(), 2u);
  EXPECT_EQ(resumed.pending()[1].id, "b");
  EXPECT_EQ(resumed.pending()[1].reason, "learner_too_long");
  auto again = Groups({{"a"}});
  EXPECT_EQ(resumed.Admit(again), 1);

  // No record (a checkpoint written without leases): nothing pending. A corrupt one is an error
  // naming the file.
  LearnerLeases none;
  EXPECT_TRUE(none.Read(dir + "/missing").ok());
  std::ofstream(dir + "/" + LearnerLeases::kCheckpointFile) << "{\"pending\": 3}";
  absl::Status corrupt = LearnerLeases().Read(dir);
  EXPECT_EQ(corrupt.code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(corrupt.message().find("leases.json"), std::string::npos) << corrupt;
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace flywheel
