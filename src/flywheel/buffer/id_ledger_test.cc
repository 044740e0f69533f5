#include "flywheel/buffer/id_ledger.h"

#include <gtest/gtest.h>

namespace flywheel {
namespace {

TEST(IdLedgerTest, AClaimedIdIsInFlightUntilCommittedThenADuplicate) {
  IdLedger ledger(10);
  EXPECT_EQ(ledger.TryClaim("a"), IdLedger::Claim::kNew);
  EXPECT_EQ(ledger.TryClaim("a"), IdLedger::Claim::kInFlight);
  ledger.Commit("a");
  EXPECT_TRUE(ledger.IsHeld("a"));
  EXPECT_EQ(ledger.held(), 1);
  EXPECT_EQ(ledger.TryClaim("a"), IdLedger::Claim::kDuplicate);
}

TEST(IdLedgerTest, AnAbandonedClaimMayBeRetried) {
  IdLedger ledger(10);
  ASSERT_EQ(ledger.TryClaim("a"), IdLedger::Claim::kNew);
  ledger.Abandon("a");
  EXPECT_EQ(ledger.TryClaim("a"), IdLedger::Claim::kNew);
  EXPECT_EQ(ledger.held(), 0);
}

TEST(IdLedgerTest, ConsumedIdsAreRememberedUpToTheBoundOldestForgottenFirst) {
  IdLedger ledger(2);
  for (const char* id : {"a", "b", "c"}) {
    ASSERT_EQ(ledger.TryClaim(id), IdLedger::Claim::kNew);
    ledger.Commit(id);
  }
  EXPECT_EQ(ledger.held(), 3);
  ledger.Consume("a");
  ledger.Consume("b");
  EXPECT_EQ(ledger.held(), 1);
  EXPECT_EQ(ledger.TryClaim("a"), IdLedger::Claim::kDuplicate);
  ledger.Consume("c");  // forgets "a"
  EXPECT_EQ(ledger.remembered(), 2);
  EXPECT_EQ(ledger.TryClaim("a"), IdLedger::Claim::kNew);
  EXPECT_EQ(ledger.TryClaim("b"), IdLedger::Claim::kDuplicate);
  EXPECT_EQ(ledger.TryClaim("c"), IdLedger::Claim::kDuplicate);
}

TEST(IdLedgerTest, AMemberConsumedBeforeItsInsertReturnedStaysConsumed) {
  IdLedger ledger(10);
  ASSERT_EQ(ledger.TryClaim("late"), IdLedger::Claim::kNew);
  ledger.Consume("late");  // e.g. discarded as a late group member inside the insert
  ledger.Commit("late");
  EXPECT_TRUE(ledger.IsConsumed("late"));
  EXPECT_EQ(ledger.held(), 0);
  ledger.Consume("late");  // twice: remembered once
  EXPECT_EQ(ledger.remembered(), 1);
}

TEST(IdLedgerTest, RestoredIdsAreDuplicates) {
  IdLedger ledger(10);
  ledger.RestoreHeld("kept");
  ledger.Consume("gone");
  EXPECT_EQ(ledger.TryClaim("kept"), IdLedger::Claim::kDuplicate);
  EXPECT_EQ(ledger.TryClaim("gone"), IdLedger::Claim::kDuplicate);
  EXPECT_EQ(ledger.held(), 1);
}

}  // namespace
}  // namespace flywheel
