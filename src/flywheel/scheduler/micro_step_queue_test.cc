#include "flywheel/scheduler/micro_step_queue.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <map>
#include <thread>

#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "flywheel/core/strings.h"

namespace flywheel {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

absl::Time Deadline() { return absl::Now() + absl::Seconds(20); }

// A trajectory of `prompt` prompt tokens and `generated` generated ones at `version`, rewarded
// `reward`.
Trajectory Make(const std::string& id, const std::string& group, int prompt, int generated,
                float reward = 0.5f, int64_t version = 0) {
  Trajectory t;
  t.id = id;
  t.group_id = group;
  for (int j = 0; j < prompt; ++j) t.AppendPrompt(1 + j % 7);
  for (int j = 0; j < generated; ++j) t.AppendGenerated(2 + j % 5, -1.0f, version);
  t.final_reward = reward;
  return t;
}

// A group of `n` trajectories of 3 + `generated` tokens each.
std::vector<Trajectory> Group(const std::string& name, int n, int generated, int64_t version = 0) {
  std::vector<Trajectory> out;
  for (int i = 0; i < n; ++i) {
    out.push_back(Make(StrCat(name, "-", i), name, 3, generated, 0.25f * i, version));
  }
  return out;
}

MicroStepQueueOptions Options(LossAggregation aggregation = LossAggregation::kTokenMean) {
  MicroStepQueueOptions o;
  o.packer.buckets = {16, 32};
  o.packer.token_budget = 32;
  o.packer.aggregation = aggregation;
  return o;
}

TEST(MicroStepQueueTest, ClaimBlocksUntilAMicroStepArrivesThenNullOnceComplete) {
  MicroStepQueue queue(Options());
  ASSERT_TRUE(queue.BeginStep(0, 5).ok());
  ASSERT_TRUE(queue.Join(0, 0).ok());
  absl::Notification claimed;
  absl::StatusOr<std::shared_ptr<const MicroStep>> first;
  std::thread cell([&] {
    first = queue.Claim(0, Deadline());
    claimed.Notify();
  });
  EXPECT_FALSE(claimed.WaitForNotificationWithTimeout(absl::Milliseconds(200)));  // still blocked
  ASSERT_TRUE(queue.Add(Group("g0", 4, 8)).ok());  // 44 tokens: a micro-batch's worth
  ASSERT_TRUE(claimed.WaitForNotificationWithTimeout(absl::Seconds(20)));
  cell.join();
  ASSERT_TRUE(first.ok()) << first.status();
  ASSERT_NE(*first, nullptr);
  EXPECT_EQ((*first)->step, 0);
  EXPECT_EQ((*first)->version, 5);
  EXPECT_EQ((*first)->id, 0);
  // Un-normalised token_mean weights: 1 on every trainable token.
  const PackedMicroBatch& mb = (*first)->batch;
  EXPECT_TRUE(torch::equal(mb.loss_weights, mb.trainable.to(torch::kFloat)));
  EXPECT_EQ(queue.normaliser().status().code(), absl::StatusCode::kFailedPrecondition);

  ASSERT_TRUE(queue.Done(0, 0).ok());
  ASSERT_TRUE(queue.Close().ok());
  for (;;) {
    auto next = queue.Claim(0, Deadline());
    ASSERT_TRUE(next.ok()) << next.status();
    if (*next == nullptr) break;
    ASSERT_TRUE(queue.Done(0, (*next)->id).ok());
  }
  EXPECT_TRUE(queue.complete());
  auto participants = queue.AwaitParticipants(0, Deadline());
  ASSERT_TRUE(participants.ok()) << participants.status();
  EXPECT_THAT(participants->cells, ElementsAre(0));
  // 4 trajectories of 8 generated tokens: 8 trainable targets each.
  EXPECT_EQ(participants->normaliser, 32.0);
  EXPECT_EQ(*queue.normaliser(), 32.0);
}

// A step of one micro-step, the core (cell 0) and a satellite (cell 1) both waiting for it:
// the core runs it every time, whichever thread the kernel wakes first.
TEST(MicroStepQueueTest, AWaitingCoreCellClaimsBeforeASatellite) {
  MicroStepQueue queue(Options());
  for (int64_t step = 0; step < 20; ++step) {
    ASSERT_TRUE(queue.BeginStep(step, 0).ok());
    ASSERT_TRUE(queue.Join(0, step).ok());
    ASSERT_TRUE(queue.Join(1, step).ok());
    std::map<int, int64_t> ran;  // cell → micro-steps it ran
    absl::Mutex mu;
    auto run = [&](int cell) {
      for (;;) {
        auto claimed = queue.Claim(cell, Deadline());
        ASSERT_TRUE(claimed.ok()) << claimed.status();
        if (*claimed == nullptr) return;
        ASSERT_TRUE(queue.Done(cell, (*claimed)->id).ok());
        absl::MutexLock lock(&mu);
        ++ran[cell];
      }
    };
    std::thread core([&] { run(0); });
    while (queue.waiting_core_claims() == 0) absl::SleepFor(absl::Microseconds(100));
    std::thread satellite([&] { run(1); });
    absl::SleepFor(absl::Milliseconds(2));  // most often the satellite waits too by now
    ASSERT_TRUE(queue.Add(Group(StrCat("g", step), 2, 5)).ok());  // 16 tokens: packed at Close
    ASSERT_TRUE(queue.Close().ok());
    core.join();
    satellite.join();
    EXPECT_THAT(ran, ElementsAre(std::pair<const int, int64_t>(0, 1))) << "step " << step;
  }
}

TEST(MicroStepQueueTest, BuffersArrivalsUntilAMicroBatchsWorthAndFlushesAtClose) {
  MicroStepQueue queue(Options());
  ASSERT_TRUE(queue.BeginStep(0, 0).ok());
  ASSERT_TRUE(queue.Add(Group("small", 2, 5)).ok());  // 16 tokens < token_budget 32
  EXPECT_EQ(queue.report().micro_steps, 0);
  ASSERT_TRUE(queue.Add(Group("more", 2, 5)).ok());  // 32: packed now
  const int64_t before_close = queue.report().micro_steps;
  EXPECT_GE(before_close, 1);
  ASSERT_TRUE(queue.Add(Group("tail", 1, 2)).ok());  // 5 tokens wait for Close
  EXPECT_EQ(queue.report().micro_steps, before_close);
  ASSERT_TRUE(queue.Close().ok());
  EXPECT_GT(queue.report().micro_steps, before_close);
  EXPECT_EQ(queue.report().kept, 5);
  EXPECT_EQ(*queue.normaliser(), 4 * 5 + 2);
}

// Σ_t u_t / D over every micro-step is 1 for each aggregation (the loss weights of the step sum
// to one), and D is what the packer reports for the whole batch at once.
TEST(MicroStepQueueTest, DeferredWeightsOverTheStepEqualWholeBatchWeights) {
  for (LossAggregation aggregation : {LossAggregation::kTokenMean, LossAggregation::kSequenceMean,
                                      LossAggregation::kExecutionMean}) {
    SCOPED_TRACE(static_cast<int>(aggregation));
    MicroStepQueue queue(Options(aggregation));
    ASSERT_TRUE(queue.BeginStep(0, 0).ok());
    std::vector<Trajectory> all;
    for (int g = 0; g < 4; ++g) {
      std::vector<Trajectory> group = Group(StrCat("g", g), 3, 4 + 3 * g);
      if (g == 3) group[0].trainable.assign(group[0].size(), 0);  // a sequence with nothing
      all.insert(all.end(), group.begin(), group.end());
      ASSERT_TRUE(queue.Add(std::move(group)).ok());
    }
    ASSERT_TRUE(queue.Close().ok());
    ASSERT_TRUE(queue.Join(0, 0).ok());
    const double d = *queue.normaliser();
    double sum = 0;
    for (;;) {
      auto ms = queue.Claim(0, Deadline());
      ASSERT_TRUE(ms.ok()) << ms.status();
      if (*ms == nullptr) break;
      sum += (*ms)->batch.loss_weights.sum().item<double>() / d;
      ASSERT_TRUE(queue.Done(0, (*ms)->id).ok());
    }
    EXPECT_NEAR(sum, 1.0, 1e-6);
    PackerOptions whole = Options(aggregation).packer;
    Packer packer(whole);
    std::vector<std::vector<float>> advantages;
    for (const Trajectory& t : all) advantages.emplace_back(t.tokens.size(), 0.0f);
    auto packed = packer.Pack(all, advantages);
    ASSERT_TRUE(packed.ok()) << packed.status();
    EXPECT_EQ(d, packed->normaliser);
  }
}

TEST(MicroStepQueueTest, RequeueSendsBackEverythingTheDeadCellClaimedDoneOrNot) {
  MicroStepQueue queue(Options());
  ASSERT_TRUE(queue.BeginStep(0, 0).ok());
  for (int g = 0; g < 3; ++g) ASSERT_TRUE(queue.Add(Group(StrCat("g", g), 4, 8)).ok());
  ASSERT_TRUE(queue.Close().ok());
  const int64_t total = queue.report().micro_steps;
  ASSERT_GE(total, 3);
  ASSERT_TRUE(queue.Join(0, 0).ok());
  ASSERT_TRUE(queue.Join(1, 0).ok());
  auto a = queue.Claim(1, Deadline());
  auto b = queue.Claim(1, Deadline());
  ASSERT_TRUE(a.ok() && b.ok());
  ASSERT_TRUE(queue.Done(1, (*a)->id).ok());  // finished, but its gradient dies with the cell

  auto requeued = queue.Requeue(1);
  ASSERT_TRUE(requeued.ok()) << requeued.status();
  EXPECT_EQ(*requeued, 2);
  EXPECT_EQ(*queue.Requeue(1), 0);  // declared dead once
  EXPECT_EQ(queue.Claim(1, Deadline()).status().code(), absl::StatusCode::kAborted);
  EXPECT_EQ(queue.Done(1, (*b)->id).code(), absl::StatusCode::kAborted);
  EXPECT_EQ(queue.Join(1, 0).code(), absl::StatusCode::kAborted);

  std::vector<int64_t> ran;
  for (;;) {
    auto ms = queue.Claim(0, Deadline());
    ASSERT_TRUE(ms.ok()) << ms.status();
    if (*ms == nullptr) break;
    ran.push_back((*ms)->id);
    ASSERT_TRUE(queue.Done(0, (*ms)->id).ok());
  }
  // The re-queued ones come first, in id order.
  ASSERT_EQ(static_cast<int64_t>(ran.size()), total);
  EXPECT_EQ(ran[0], (*a)->id);
  EXPECT_EQ(ran[1], (*b)->id);
  const StepReport report = queue.report();
  EXPECT_TRUE(report.complete);
  EXPECT_EQ(report.requeued, 2);
  EXPECT_EQ(report.claims, total + 2);
  EXPECT_THAT(report.dead, ElementsAre(1));
  ASSERT_EQ(report.ran_by.size(), 1u);
  EXPECT_EQ(static_cast<int64_t>(report.ran_by.at(0).size()), total);
  auto participants = queue.AwaitParticipants(0, Deadline());
  ASSERT_TRUE(participants.ok());
  EXPECT_THAT(participants->cells, ElementsAre(0));
  EXPECT_EQ(queue.Requeue(0).status().code(), absl::StatusCode::kFailedPrecondition);
}

TEST(MicroStepQueueTest, ACellWithoutClaimsLeavesAliveAndMayJoinAgain) {
  MicroStepQueue queue(Options());
  ASSERT_TRUE(queue.BeginStep(0, 0).ok());
  for (int g = 0; g < 3; ++g) ASSERT_TRUE(queue.Add(Group(StrCat("g", g), 4, 8)).ok());
  ASSERT_TRUE(queue.Join(0, 0).ok());
  ASSERT_TRUE(queue.Join(1, 0).ok());
  auto left = queue.Leave(1);  // sent back to rollout before it claimed anything
  ASSERT_TRUE(left.ok()) << left.status();
  EXPECT_EQ(*left, 0);
  EXPECT_TRUE(queue.report().dead.empty());
  ASSERT_TRUE(queue.Join(1, 0).ok());  // back to training within the same step
  auto a = queue.Claim(1, Deadline());
  ASSERT_TRUE(a.ok() && *a != nullptr) << a.status();
  ASSERT_TRUE(queue.Done(1, (*a)->id).ok());
  // With a claim, leaving is a death for the step: its micro-step goes back.
  left = queue.Leave(1);
  ASSERT_TRUE(left.ok()) << left.status();
  EXPECT_EQ(*left, 1);
  EXPECT_EQ(queue.Join(1, 0).code(), absl::StatusCode::kAborted);
  ASSERT_TRUE(queue.Close().ok());
  for (;;) {
    auto ms = queue.Claim(0, Deadline());
    ASSERT_TRUE(ms.ok()) << ms.status();
    if (*ms == nullptr) break;
    ASSERT_TRUE(queue.Done(0, (*ms)->id).ok());
  }
  auto participants = queue.AwaitParticipants(0, Deadline());
  ASSERT_TRUE(participants.ok());
  EXPECT_THAT(participants->cells, ElementsAre(0));
}

TEST(MicroStepQueueTest, ABlockedClaimOfADeadCellReturnsAborted) {
  MicroStepQueue queue(Options());
  ASSERT_TRUE(queue.BeginStep(0, 0).ok());
  ASSERT_TRUE(queue.Join(2, 0).ok());
  absl::StatusOr<std::shared_ptr<const MicroStep>> claim;
  std::thread cell([&] { claim = queue.Claim(2, Deadline()); });
  absl::SleepFor(absl::Milliseconds(50));
  ASSERT_TRUE(queue.Requeue(2).ok());
  cell.join();
  EXPECT_EQ(claim.status().code(), absl::StatusCode::kAborted) << claim.status();
}

// Participants: the live joiners, core first; a new epoch only when the list changes.
TEST(MicroStepQueueTest, ParticipantsAndEpochsFollowWhoJoinedAndSurvived) {
  MicroStepQueueOptions options = Options();
  options.core_cell = 3;
  MicroStepQueue queue(options);
  const std::vector<std::vector<int>> joins = {{1, 3}, {3, 1}, {3}, {2, 3, 1}, {2, 3, 1}};
  const std::vector<int64_t> epochs = {0, 0, 1, 2, 2};
  for (int64_t s = 0; s < static_cast<int64_t>(joins.size()); ++s) {
    ASSERT_TRUE(queue.BeginStep(s, s).ok());
    for (int cell : joins[s]) ASSERT_TRUE(queue.Join(cell, s).ok());
    ASSERT_TRUE(queue.Add(Group(StrCat("s", s), 4, 8)).ok());
    ASSERT_TRUE(queue.Close().ok());
    for (;;) {
      auto ms = queue.Claim(3, Deadline());
      ASSERT_TRUE(ms.ok()) << ms.status();
      if (*ms == nullptr) break;
      ASSERT_TRUE(queue.Done(3, (*ms)->id).ok());
    }
    auto participants = queue.AwaitParticipants(s, Deadline());
    ASSERT_TRUE(participants.ok()) << participants.status();
    EXPECT_EQ(participants->step, s);
    EXPECT_EQ(participants->epoch, epochs[s]) << "step " << s;
    EXPECT_EQ(participants->cells.front(), 3);
    EXPECT_EQ(participants->cells.size(), joins[s].size());
    // A participant that ran nothing still takes part (it contributes zero gradients).
    if (s == 3) {
      EXPECT_THAT(participants->cells, ElementsAre(3, 1, 2));
    }
    EXPECT_EQ(queue.Join(4, s).code(), absl::StatusCode::kFailedPrecondition);  // too late
  }
  ASSERT_TRUE(queue.BeginStep(10, 10).ok());
  EXPECT_EQ(queue.AwaitParticipants(3, Deadline()).status().code(),
            absl::StatusCode::kFailedPrecondition);          // gone: step 4 completed since
  EXPECT_TRUE(queue.AwaitParticipants(4, Deadline()).ok());  // kept until the next completes
}

TEST(MicroStepQueueTest, AStepWithoutTheCoreCannotBeApplied) {
  MicroStepQueue queue(Options());
  ASSERT_TRUE(queue.BeginStep(0, 0).ok());
  ASSERT_TRUE(queue.Join(0, 0).ok());
  ASSERT_TRUE(queue.Join(1, 0).ok());
  ASSERT_TRUE(queue.Requeue(0).ok());
  ASSERT_TRUE(queue.Add(Group("g", 4, 8)).ok());
  ASSERT_TRUE(queue.Close().ok());
  for (;;) {
    auto ms = queue.Claim(1, Deadline());
    ASSERT_TRUE(ms.ok()) << ms.status();
    if (*ms == nullptr) break;
    ASSERT_TRUE(queue.Done(1, (*ms)->id).ok());
  }
  auto participants = queue.AwaitParticipants(0, Deadline());
  EXPECT_EQ(participants.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(participants.status().message(), HasSubstr("core cell(s) [0]"));
}

// Two core cells: both lead every step's group, in order, and a step without one of them cannot
// be applied (each holds a shard of the optimiser).
TEST(MicroStepQueueTest, EveryCoreCellLeadsTheParticipantsAndNoneMayBeMissing) {
  MicroStepQueueOptions options = Options();
  options.core_cells = 2;  // cells 0 and 1
  MicroStepQueue queue(options);
  EXPECT_TRUE(options.IsCore(1));
  EXPECT_FALSE(options.IsCore(2));
  auto run_step = [&](int64_t s, const std::vector<int>& joins, int dies) {
    EXPECT_TRUE(queue.BeginStep(s, s).ok());
    for (int cell : joins) EXPECT_TRUE(queue.Join(cell, s).ok());
    if (dies >= 0) {
      EXPECT_TRUE(queue.Requeue(dies).ok());
    }
    EXPECT_TRUE(queue.Add(Group(StrCat("s", s), 4, 8)).ok());
    EXPECT_TRUE(queue.Close().ok());
    for (;;) {
      auto ms = queue.Claim(3, Deadline());
      EXPECT_TRUE(ms.ok()) << ms.status();
      if (!ms.ok() || *ms == nullptr) break;
      EXPECT_TRUE(queue.Done(3, (*ms)->id).ok());
    }
    return queue.AwaitParticipants(s, Deadline());
  };
  auto participants = run_step(0, {3, 1, 0}, -1);
  ASSERT_TRUE(participants.ok()) << participants.status();
  EXPECT_THAT(participants->cells, ElementsAre(0, 1, 3));
  participants = run_step(1, {3, 0, 1}, 1);
  EXPECT_EQ(participants.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(participants.status().message(), HasSubstr("core cell(s) [1]"));
  MicroStepQueueOptions none = Options();
  none.core_cells = 0;
  EXPECT_THAT(none.Validate().message(), HasSubstr("core_cells = 0"));
}

TEST(MicroStepQueueTest, BlockingCallsHonourTheirDeadlineAndCancel) {
  MicroStepQueue queue(Options());
  ASSERT_TRUE(queue.BeginStep(0, 0).ok());
  ASSERT_TRUE(queue.Join(0, 0).ok());
  const absl::Time soon = absl::Now() + absl::Milliseconds(50);
  EXPECT_EQ(queue.Claim(0, soon).status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(queue.AwaitParticipants(0, soon).status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(queue.AwaitDone(0, 1, soon).code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(queue.AwaitJoined(0, 2, soon).code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(queue.AwaitStep(1, soon).code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_TRUE(queue.AwaitJoined(0, 1, soon).ok());

  absl::StatusOr<std::shared_ptr<const MicroStep>> claim;
  std::thread cell([&] { claim = queue.Claim(0, Deadline()); });
  absl::SleepFor(absl::Milliseconds(50));
  queue.Cancel();
  cell.join();
  EXPECT_EQ(claim.status().code(), absl::StatusCode::kCancelled);
  EXPECT_EQ(queue.AwaitStep(1, Deadline()).code(), absl::StatusCode::kCancelled);
}

// A job that stops mid-step: a step completed before Cancel keeps its participants (some may be
// forming its group already, and that waits for every one); one not complete never completes.
TEST(MicroStepQueueTest, CancelKeepsACompletedStepsParticipantsAndCompletesNoOther) {
  MicroStepQueue queue(Options());
  ASSERT_TRUE(queue.BeginStep(0, 0).ok());
  ASSERT_TRUE(queue.Join(0, 0).ok());
  ASSERT_TRUE(queue.Join(1, 0).ok());
  ASSERT_TRUE(queue.Add(Group("g0", 2, 4)).ok());
  ASSERT_TRUE(queue.Close().ok());
  for (;;) {
    absl::StatusOr<std::shared_ptr<const MicroStep>> ms = queue.Claim(0, Deadline());
    ASSERT_TRUE(ms.ok()) << ms.status();
    if (*ms == nullptr) break;
    ASSERT_TRUE(queue.Done(0, (*ms)->id).ok());
  }
  queue.Cancel();
  absl::StatusOr<StepParticipants> fixed = queue.AwaitParticipants(0, Deadline());
  ASSERT_TRUE(fixed.ok()) << fixed.status();
  EXPECT_THAT(fixed->cells, ElementsAre(0, 1));

  MicroStepQueue open(Options());
  ASSERT_TRUE(open.BeginStep(0, 0).ok());
  ASSERT_TRUE(open.Join(0, 0).ok());
  ASSERT_TRUE(open.Add(Group("g0", 2, 4)).ok());
  ASSERT_TRUE(open.Close().ok());
  absl::StatusOr<std::shared_ptr<const MicroStep>> claimed = open.Claim(0, Deadline());
  ASSERT_TRUE(claimed.ok() && *claimed != nullptr) << claimed.status();
  open.Cancel();
  open.Done(0, (*claimed)->id).IgnoreError();  // its last micro-step: it would complete the step
  EXPECT_FALSE(open.complete());
  EXPECT_EQ(open.AwaitParticipants(0, Deadline()).status().code(), absl::StatusCode::kCancelled);
}

TEST(MicroStepQueueTest, BadInputIsRefusedAndNothingOfItIsTaken) {
  MicroStepQueue queue(Options());
  EXPECT_EQ(queue.Add(Group("early", 1, 3)).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(queue.Join(0, 0).code(), absl::StatusCode::kFailedPrecondition);
  ASSERT_TRUE(queue.BeginStep(0, 0).ok());
  EXPECT_EQ(queue.Claim(0, Deadline()).status().code(), absl::StatusCode::kFailedPrecondition);

  std::vector<Trajectory> with_long = Group("g", 2, 4);
  with_long.push_back(Make("too-long", "g", 3, 40));  // 43 > the largest bucket, 32
  absl::Status s = queue.Add(with_long);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("'too-long'"));
  EXPECT_THAT(s.message(), HasSubstr("learner.buckets"));
  EXPECT_EQ(queue.report().kept, 0);

  std::vector<Trajectory> broken = Group("h", 1, 4);
  broken[0].logprobs.pop_back();
  EXPECT_EQ(queue.Add(broken).code(), absl::StatusCode::kInvalidArgument);

  ASSERT_TRUE(queue.Add(Group("g", 2, 4)).ok());  // the refused Adds did not claim "g"
  s = queue.Add(Group("g", 1, 4));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("group 'g'"));
  EXPECT_EQ(queue.report().kept, 2);

  EXPECT_EQ(queue.BeginStep(1, 1).code(), absl::StatusCode::kFailedPrecondition);  // incomplete
  ASSERT_TRUE(queue.Close().ok());
  EXPECT_EQ(queue.Close().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(queue.Add(Group("late", 1, 3)).code(), absl::StatusCode::kFailedPrecondition);
  ASSERT_TRUE(queue.Join(0, 0).ok());
  auto ms = queue.Claim(0, Deadline());
  ASSERT_TRUE(ms.ok() && *ms != nullptr);
  EXPECT_EQ(queue.Done(1, (*ms)->id).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(queue.Done(0, 99).code(), absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(queue.Done(0, (*ms)->id).ok());
  EXPECT_EQ(queue.Done(0, (*ms)->id).code(), absl::StatusCode::kFailedPrecondition);

  MicroStepQueueOptions bad = Options();
  bad.packer.buckets = {32, 16};
  EXPECT_EQ(MicroStepQueue(bad).BeginStep(0, 0).code(), absl::StatusCode::kInvalidArgument);
}

TEST(MicroStepQueueTest, TooLongDropAndStalenessAreCounted) {
  MicroStepQueueOptions options = Options();
  options.packer.too_long = TooLongPolicy::kDrop;
  options.max_staleness = 1;
  MicroStepQueue queue(options);
  ASSERT_TRUE(queue.BeginStep(0, 3).ok());  // trains from version 3
  std::vector<Trajectory> batch = Group("fresh", 3, 6, /*version=*/2);
  batch.push_back(Make("long", "fresh", 3, 40, 0.f, 3));
  for (Trajectory& t : Group("stale", 2, 6, /*version=*/1)) batch.push_back(std::move(t));
  ASSERT_TRUE(queue.Add(batch).ok());
  ASSERT_TRUE(queue.Close().ok());
  const StepReport report = queue.report();
  EXPECT_EQ(report.kept, 3);
  EXPECT_EQ(report.dropped_too_long, 1);
  EXPECT_EQ(report.dropped_stale, 2);
  EXPECT_EQ(*queue.normaliser(), 18.0);
  EXPECT_THAT(report.DebugString(), HasSubstr("dropped 2 stale"));
}

}  // namespace
}  // namespace flywheel
