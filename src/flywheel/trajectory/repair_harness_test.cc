#include "flywheel/trajectory/repair_harness.h"

#include <iostream>

#include <gtest/gtest.h>

#include "flywheel/trajectory/path_selection.h"
#include "flywheel/trajectory/trajectory_tree.h"

namespace flywheel {
namespace {

bool IsPrefix(const std::vector<int32_t>& a, const std::vector<int32_t>& b) {
  return a.size() <= b.size() && std::equal(a.begin(), a.end(), b.begin());
}

TEST(RepairHarnessTest, ProducesRetriesSummariesAndSubAgents) {
  RepairHarnessOptions options;
  int retries = 0, summaries = 0, subagents = 0;
  double tokens_flat = 0, tokens_tree = 0;
  for (uint64_t seed = 1; seed <= 8; ++seed) {
    absl::StatusOr<Execution> e = RunRepairHarness(options, seed);
    ASSERT_TRUE(e.ok()) << e.status();
    ASSERT_TRUE(e->final_reward.has_value() || e->partial_score.has_value());
    const LlmCall* previous_main = nullptr;
    for (const LlmCall& call : e->calls) {
      ASSERT_FALSE(call.context.empty());
      EXPECT_EQ(call.context[0], 0);  // every context starts with BOS
      if (call.role == Role::kMainSummary) ++summaries;
      if (call.role == Role::kSubAgent) ++subagents;
      if (call.role == Role::kMain) {
        // A retry: a main call whose context is a strict prefix of the previous main context.
        if (previous_main != nullptr && call.context.size() < previous_main->context.size() &&
            IsPrefix(call.context, previous_main->context)) {
          ++retries;
        }
        previous_main = &call;
      }
    }
    absl::StatusOr<TrajectoryTree> tree = TrajectoryTree::FromExecution(*e);
    ASSERT_TRUE(tree.ok()) << tree.status();
    tokens_flat += static_cast<double>(tree->NumPathTokens());
    tokens_tree += static_cast<double>(tree->NumNodes());
  }
  std::cout << "8 executions: " << retries << " retries, " << summaries << " summaries, "
            << subagents << " sub-agent calls; path tokens " << tokens_flat << ", tree nodes "
            << tokens_tree << "\n";
  EXPECT_GT(retries, 0);
  EXPECT_GT(summaries, 0);
  EXPECT_GT(subagents, 0);
  EXPECT_GT(tokens_flat / tokens_tree, 1.0) << tokens_flat << " vs " << tokens_tree;
}

TEST(RepairHarnessTest, SubAgentsShareTheirListingPrefix) {
  absl::StatusOr<Execution> e = RunRepairHarness(RepairHarnessOptions{}, 3);
  ASSERT_TRUE(e.ok()) << e.status();
  std::vector<const LlmCall*> firsts;  // the first call of each sub-agent starts its episode
  for (const LlmCall& call : e->calls) {
    if (call.role == Role::kSubAgent && call.context.back() == 2 &&
        (firsts.empty() || !IsPrefix(firsts.back()->context, call.context))) {
      firsts.push_back(&call);
    }
  }
  ASSERT_GE(firsts.size(), 2u);
  size_t common = 0;
  while (common < firsts[0]->context.size() && common < firsts[1]->context.size() &&
         firsts[0]->context[common] == firsts[1]->context[common]) {
    ++common;
  }
  EXPECT_GT(common, 10u);
}

TEST(RepairHarnessTest, DeterministicForASeed) {
  RepairHarnessOptions options;
  absl::StatusOr<Execution> a = RunRepairHarness(options, 7);
  absl::StatusOr<Execution> b = RunRepairHarness(options, 7);
  absl::StatusOr<Execution> c = RunRepairHarness(options, 8);
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  ASSERT_EQ(a->calls.size(), b->calls.size());
  for (size_t i = 0; i < a->calls.size(); ++i) {
    EXPECT_EQ(a->calls[i].context, b->calls[i].context);
    EXPECT_EQ(a->calls[i].generated, b->calls[i].generated);
    EXPECT_EQ(a->calls[i].logprobs, b->calls[i].logprobs);
  }
  bool differs = a->calls.size() != c->calls.size();
  for (size_t i = 0; !differs && i < a->calls.size(); ++i) {
    differs = a->calls[i].generated != c->calls[i].generated;
  }
  EXPECT_TRUE(differs);
}

TEST(RepairHarnessTest, RejectsBadOptions) {
  RepairHarnessOptions options;
  options.noise = 2.0;
  absl::StatusOr<Execution> e = RunRepairHarness(options, 1);
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.status().message().find("noise"), std::string::npos);
}

}  // namespace
}  // namespace flywheel
