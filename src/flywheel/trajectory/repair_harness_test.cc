#include "flywheel/trajectory/repair_harness.h"

#include <gtest/gtest.h>

#include <iostream>
#include <set>

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

// Writes garbage for the main calls `bad_calls` (an unknown-word token, BOS, a cut-off action),
// the scripted agent otherwise.
class GarblingPolicy : public HarnessPolicy {
 public:
  GarblingPolicy(std::unique_ptr<HarnessPolicy> inner, std::set<int> bad_calls)
      : inner_(std::move(inner)), bad_calls_(std::move(bad_calls)) {}
  absl::StatusOr<HarnessTurn> Generate(const HarnessRequest& request) override {
    absl::StatusOr<HarnessTurn> turn = inner_->Generate(request);
    const int k = request.role == Role::kMain ? main_calls_++ : -1;
    if (!turn.ok() || !bad_calls_.count(k)) return turn;
    HarnessTurn bad;
    bad.generated = {3, 0, 9, 2};                  // <unk> BOS … end-of-turn
    if (k % 3 == 2) bad.generated = {4, 4, 4};     // "inspect inspect inspect", cut off
    if (k % 3 == 0) bad.generated = {4, 1000, 2};  // past the tokenizer's vocabulary
    bad.logprobs.assign(bad.generated.size(), -1.0f);
    bad.versions.assign(bad.generated.size(), 0);
    return bad;
  }

 private:
  std::unique_ptr<HarnessPolicy> inner_;
  std::set<int> bad_calls_;
  int main_calls_ = 0;
};

TEST(RepairHarnessTest, AMalformedActionGetsTheEnvironmentsAnswerAndTheAgentGoesOn) {
  RepairHarnessOptions options;
  auto tokenizer = MakeRepairHarnessTokenizer(options.repair);
  ASSERT_TRUE(tokenizer.ok());
  const std::vector<int64_t> invalid = *(*tokenizer)->Encode("invalid");
  auto scripted = MakeScriptedRepairPolicy(options, 5);
  ASSERT_TRUE(scripted.ok());
  GarblingPolicy policy(std::move(*scripted), {1, 2, 3});
  absl::StatusOr<Execution> e = RunRepairHarness(options, 5, policy);
  ASSERT_TRUE(e.ok()) << e.status();
  ASSERT_TRUE(e->Validate().ok());
  // Main calls 1, 2 and 3 were garbage: the contexts of calls 2, 3 and 4 end with the garbage
  // and the environment's "invalid" observation.
  std::vector<const LlmCall*> main;
  for (const LlmCall& c : e->calls) {
    if (c.role == Role::kMain) main.push_back(&c);
  }
  ASSERT_GE(main.size(), 6u);
  for (int k : {1, 2, 3}) {
    const std::vector<int32_t>& next = main[k + 1]->context;
    const std::vector<int32_t>& garbage = main[k]->generated;
    ASSERT_GE(next.size(), garbage.size() + 2);
    EXPECT_TRUE(std::equal(garbage.begin(), garbage.end(), next.end() - garbage.size() - 2));
    EXPECT_EQ(next[next.size() - 2], invalid[0]);
    EXPECT_EQ(next.back(), 2);
  }
  // The agent went on and finished with a score.
  EXPECT_TRUE(e->final_reward.has_value());
}

int MainCalls(const Execution& e) {
  int n = 0;
  for (const LlmCall& c : e.calls) n += c.role == Role::kMain;
  return n;
}

TEST(RepairHarnessTest, AnAttemptOutOfTurnsEndsWithTheHarnessesTestRunAndRetries) {
  RepairHarnessOptions options;
  options.max_attempt_turns = 1;  // fewer than the scripted agent's plan needs
  options.max_retries = 2;
  absl::StatusOr<Execution> e = RunRepairHarness(options, 2);
  ASSERT_TRUE(e.ok()) << e.status();
  // First call, then 1 main call per attempt (3 attempts), then the harness submits.
  EXPECT_EQ(MainCalls(*e), 1 + 3);
  EXPECT_EQ(e->termination, Termination::kDone);
  EXPECT_TRUE(e->final_reward.has_value());
}

TEST(RepairHarnessTest, AnAgentThatGivesUpSubmitsAtAnAttemptsStart) {
  RepairHarnessOptions options;
  options.give_up = 1;
  for (uint64_t seed = 1; seed <= 4; ++seed) {
    absl::StatusOr<Execution> e = RunRepairHarness(options, seed);
    ASSERT_TRUE(e.ok()) << e.status();
    // Its first call ("test"), then "submit" as the first attempt's first call.
    EXPECT_EQ(MainCalls(*e), 2) << seed;
    EXPECT_EQ(e->termination, Termination::kDone);
    EXPECT_EQ(e->calls.back().role, Role::kMain);
  }
  // Giving up half the time: fewer main calls over the same instances than never giving up.
  int never = 0, sometimes = 0;
  for (uint64_t seed = 1; seed <= 16; ++seed) {
    RepairHarnessOptions half = options;
    half.give_up = 0.5;
    absl::StatusOr<Execution> a = RunRepairHarness(RepairHarnessOptions{}, seed);
    absl::StatusOr<Execution> b = RunRepairHarness(half, seed);
    ASSERT_TRUE(a.ok() && b.ok());
    never += MainCalls(*a);
    sometimes += MainCalls(*b);
  }
  EXPECT_LT(sometimes, never);
}

TEST(RepairHarnessTest, RejectsBadOptions) {
  RepairHarnessOptions noisy;
  noisy.noise = 2.0;
  absl::StatusOr<Execution> e = RunRepairHarness(noisy, 1);
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.status().message().find("noise"), std::string::npos);
  RepairHarnessOptions quitter;
  quitter.give_up = -0.5;
  e = RunRepairHarness(quitter, 1);
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.status().message().find("give_up"), std::string::npos);
}

}  // namespace
}  // namespace flywheel
