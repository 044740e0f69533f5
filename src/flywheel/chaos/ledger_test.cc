#include "flywheel/chaos/ledger.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "flywheel/core/strings.h"

namespace flywheel::chaos {
namespace {

class LedgerTest : public ::testing::Test {
 protected:
  LedgerTest()
      : dir_(std::filesystem::temp_directory_path() /
             StrCat("flywheel_ledger_test_", ::getpid(), "_",
                    ::testing::UnitTest::GetInstance()->current_test_info()->name())) {
    std::filesystem::create_directories(dir_);
    inputs_.ack_logs = {(dir_ / "actor-0.log").string(), (dir_ / "missing.log").string()};
    inputs_.consumed_log = (dir_ / "consumed.jsonl").string();
  }
  ~LedgerTest() override { std::filesystem::remove_all(dir_); }

  void Acks(const std::vector<std::string>& ids) {
    std::ofstream out(inputs_.ack_logs[0], std::ios::app);
    for (const std::string& id : ids) out << "1000 " << id << "\n";
  }
  void History(const std::vector<std::string>& lines) {
    std::ofstream out(inputs_.consumed_log, std::ios::app);
    for (const std::string& line : lines) out << line << "\n";
  }
  Ledger Build() {
    auto ledger = BuildLedger(inputs_);
    EXPECT_TRUE(ledger.ok()) << ledger.status();
    return ledger.ok() ? *ledger : Ledger{};
  }

  std::filesystem::path dir_;
  LedgerInputs inputs_;
};

// A learner killed after step 3 resumes from its checkpoint at step 2: step 3 (c) is rolled
// back and c is trained again at the new step 3. Everything acknowledged is accounted for.
TEST_F(LedgerTest, ARolledBackStepIsTrainedOnceInTheSurvivingHistory) {
  Acks({"a", "b", "c", "d", "e", "f"});
  History({R"({"step":1,"trained":["a"],"dropped":{}})",
           R"({"step":2,"trained":["b"],"dropped":{"learner_stale":["e"]}})",
           R"({"step":3,"trained":["c"],"dropped":{}})", R"({"step":4,"tra)",  // torn
           R"({"resumed_from":2})", R"({"step":3,"trained":["c"],"dropped":{},"skipped":1})",
           R"({"dropped_after":3,"dropped":{"learner_stale":["f"]}})"});
  inputs_.final_checkpoint_step = 3;
  inputs_.remaining = {"d"};
  const Ledger ledger = Build();
  EXPECT_TRUE(ledger.ok()) << ledger.ToJson().dump();
  EXPECT_EQ(ledger.acked, 6);
  EXPECT_EQ(ledger.trained, 3);
  EXPECT_EQ(ledger.dropped.at("learner_stale"), 2);
  EXPECT_EQ(ledger.remaining, 1);
  EXPECT_EQ(ledger.rolled_back, 1);
  EXPECT_EQ(ledger.steps, 3);
  EXPECT_EQ(ledger.incarnations, 2);
  EXPECT_EQ(ledger.torn_lines, 1);
  EXPECT_EQ(ledger.skipped_redelivered, 1);
}

// What the invariants exist for: an acknowledged id nobody has (lost), one trained twice, one
// trained but still in the buffer (a resume would train it again), and a gap in the steps.
TEST_F(LedgerTest, LostDuplicatedAndGappedHistoriesFail) {
  Acks({"a", "b", "c", "x"});
  History({R"({"step":1,"trained":["a","b"]})", R"({"step":2,"trained":["b"]})",
           R"({"step":4,"trained":["c"]})"});
  inputs_.final_checkpoint_step = 4;
  inputs_.remaining = {"c"};
  const Ledger ledger = Build();
  EXPECT_FALSE(ledger.ok());
  EXPECT_EQ(ledger.lost, 1);
  EXPECT_EQ(ledger.lost_examples, std::vector<std::string>{"x"});
  EXPECT_EQ(ledger.duplicates, 1);
  EXPECT_EQ(ledger.trained_still_in_buffer, 1);
  ASSERT_EQ(ledger.problems.size(), 2u) << ledger.ToJson().dump();
  EXPECT_NE(ledger.problems[0].find("step 4 follows step 2"), std::string::npos);

  // "c" is in the final checkpoint's pending list: a resume acknowledges it, not trains it.
  inputs_.final_pending = {"c"};
  EXPECT_EQ(Build().trained_still_in_buffer, 0);
}

// Steps after the newest complete checkpoint are rolled back: their ids must still be in the
// buffer. The buffer's own drops count as dropped; a "trained" deletion must be in the history.
TEST_F(LedgerTest, TheFinalCheckpointCutsTheHistoryAndBufferDropsCount) {
  Acks({"a", "b", "s"});
  History({R"({"step":1,"trained":["a"]})", R"({"step":2,"trained":["b"]})"});
  inputs_.final_checkpoint_step = 1;
  inputs_.buffer_consumed = {{"a", "trained"}, {"s", "stale"}, {"b", "trained"}};
  const Ledger ledger = Build();
  EXPECT_EQ(ledger.steps, 1);
  EXPECT_EQ(ledger.rolled_back, 1);
  EXPECT_EQ(ledger.dropped.at("buffer_stale"), 1);
  EXPECT_EQ(ledger.lost, 1);  // b: rolled back, yet deleted by the buffer
  ASSERT_EQ(ledger.problems.size(), 1u);
  EXPECT_NE(ledger.problems[0].find("deleted b as trained"), std::string::npos);
}

}  // namespace
}  // namespace flywheel::chaos
