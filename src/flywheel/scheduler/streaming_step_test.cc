// Streaming equality: a step trained as a queue of micro-steps, by cells that join mid-step or
// die in it, gives the weights of single-process training on the same micro-steps; and one cell
// streaming a step in chunks gives the weights of LearnerStep::Step on the whole batch.
//
// Cells are threads over one HashStore; each holds its own tiny Transformer. The choreography
// is deterministic: the core runs k micro-steps, then waits until the satellites have joined
// (and, in a kill step, until the dying satellite has claimed two micro-steps, finished one and
// been declared dead), then everybody claims what is left.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <memory>
#include <thread>
#include <torch/csrc/distributed/c10d/HashStore.hpp>
#include <vector>

#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "flywheel/core/status_macros.h"
#include "flywheel/core/strings.h"
#include "flywheel/dist/membership.h"
#include "flywheel/learner/learner_step.h"
#include "flywheel/learner/parallel_test_util.h"
#include "flywheel/learner/streaming_learner.h"
#include "flywheel/scheduler/micro_step_queue.h"
#include "flywheel/scheduler/step_group.h"
#include "flywheel/scheduler/streaming_test_util.h"

namespace flywheel {
namespace {

using testing::Chunks;
using testing::GroupsForStep;
using testing::kParallelRunSteps;
using testing::MaxAbsDiff;
using testing::ParallelLearnerOptions;
using testing::TinyPolicy;
using Reference = testing::StreamingReference;

constexpr int64_t kSteps = 3;

absl::Time StepDeadline() { return absl::Now() + absl::Seconds(60); }

struct Scenario {
  int cells = 1;
  int64_t join_after = 0;  // satellites join once the core has done this many micro-steps
  int kill_cell = -1;      // this satellite dies in step kill_step (claims 2, finishes 1)
  int64_t kill_step = 1;
  int per_chunk = 1;
  int cores = 1;  // cells 0 … cores−1 hold a shard of the optimiser each and join at once
};

struct Outcome {
  std::vector<torch::Tensor> core_weights;
  std::vector<std::vector<torch::Tensor>> satellite_weights;  // those alive at the end
  std::vector<double> losses;                                 // per step, as the core saw it
  std::vector<StepReport> reports;
  int64_t groups_formed = 0;                   // by the core
  std::vector<size_t> core_optimizer_tensors;  // parameters each core's optimiser steps
};

// Runs the cells of `scenario` for kSteps steps; every cell's failure cancels the queue so that
// the others stop waiting.
class StreamingRun {
 public:
  StreamingRun(const LearnerOptions& options, Scenario scenario)
      : options_(options),
        scenario_(scenario),
        queue_(MicroStepQueueOptions::FromLearnerOptions(options, /*core_cell=*/0, scenario.cores)),
        store_(c10::make_intrusive<c10d::HashStore>()),
        membership_(store_, MembershipOpts()),
        resume_(kSteps),
        died_(kSteps),
        requeued_(kSteps) {
    // Built here, not on the cell threads: the initialisers share torch's global generator.
    for (int c = 0; c < scenario_.cells; ++c) {
      policies_.push_back(std::make_unique<TinyPolicy>(/*seed=*/7 + c));  // satellites load
      const OptimizerShard shard = c < scenario_.cores ? OptimizerShard{c, scenario_.cores}
                                                       : OptimizerShard::Satellite(scenario_.cores);
      learners_.push_back(std::make_unique<StreamingLearner>(
          options_, kParallelRunSteps, policies_[c]->Parameters(), policies_[c]->Forward(), nullptr,
          1.0, 0, RealClock(), shard));
    }
  }

  Outcome Run() {
    std::vector<std::thread> threads;
    threads.emplace_back([this] { Guard(Coordinate()); });
    threads.emplace_back([this] { Guard(Core()); });
    for (int c = 1; c < scenario_.cells; ++c) {
      threads.emplace_back([this, c] { Guard(Satellite(c)); });
    }
    for (auto& t : threads) t.join();
    outcome_.core_weights = policies_[0]->Weights();
    for (int c = 1; c < scenario_.cells; ++c) {
      if (c != scenario_.kill_cell) outcome_.satellite_weights.push_back(policies_[c]->Weights());
    }
    for (int c = 0; c < scenario_.cores; ++c) {
      outcome_.core_optimizer_tensors.push_back(learners_[c]->optimizer().parameters().size());
    }
    return std::move(outcome_);
  }

 private:
  static dist::MembershipOptions MembershipOpts() {
    dist::MembershipOptions o;
    o.group.timeout = std::chrono::milliseconds(30000);
    o.group.name = "streaming test";
    o.group.threads = 1;
    return o;
  }

  void Guard(const absl::Status& s) {
    if (s.ok()) return;
    ADD_FAILURE() << s;
    queue_.Cancel();
  }

  bool KillIn(int64_t step) const { return scenario_.kill_cell > 0 && step == scenario_.kill_step; }
  int LiveCells(int64_t step) const {
    return scenario_.cells - (scenario_.kill_cell > 0 && step >= scenario_.kill_step ? 1 : 0);
  }
  static absl::Status Wait(absl::Notification& n, const char* what) {
    if (n.WaitForNotificationWithTimeout(absl::Seconds(60))) return absl::OkStatus();
    return absl::DeadlineExceededError(StrCat("test: waiting for ", what));
  }

  // Feeds the groups as they "arrive", then tells the core when everybody it waits for joined.
  absl::Status Coordinate() {
    for (int64_t s = 0; s < kSteps; ++s) {
      RETURN_IF_ERROR(queue_.AwaitStep(s, StepDeadline()));
      for (std::vector<Trajectory>& chunk : Chunks(s, scenario_.per_chunk)) {
        RETURN_IF_ERROR(queue_.Add(std::move(chunk)));
      }
      RETURN_IF_ERROR(queue_.Close());
      if (scenario_.cells == 1) continue;
      if (KillIn(s)) {
        RETURN_IF_ERROR(Wait(died_[s], "the satellite's death"));
        ASSIGN_OR_RETURN(int64_t requeued, queue_.Requeue(scenario_.kill_cell));
        EXPECT_EQ(requeued, 2);  // the finished one and the claimed one
        requeued_[s].Notify();
      }
      RETURN_IF_ERROR(queue_.AwaitJoined(s, LiveCells(s), StepDeadline()));
      resume_[s].Notify();
    }
    return absl::OkStatus();
  }

  absl::StatusOr<StreamingStepResult> Finish(int cell, int64_t step, StepGroup& group) {
    ASSIGN_OR_RETURN(StepParticipants participants, queue_.AwaitParticipants(step, StepDeadline()));
    ASSIGN_OR_RETURN(dist::Communicator * comm, group.For(participants));
    return learners_[cell]->FinishStep(comm, participants.normaliser);
  }

  absl::Status RunClaims(int cell) {
    for (;;) {
      ASSIGN_OR_RETURN(std::shared_ptr<const MicroStep> ms, queue_.Claim(cell, StepDeadline()));
      if (ms == nullptr) return absl::OkStatus();
      RETURN_IF_ERROR(learners_[cell]->RunMicroStep(*ms));
      RETURN_IF_ERROR(queue_.Done(cell, ms->id));
    }
  }

  absl::Status Core() {
    torch::set_num_threads(1);
    StreamingLearner& learner = *learners_[0];
    StepGroup group(&membership_, 0);
    for (int64_t s = 0; s < kSteps; ++s) {
      RETURN_IF_ERROR(queue_.BeginStep(s, learner.version()));
      RETURN_IF_ERROR(queue_.Join(0, s));
      for (int64_t ran = 0;; ++ran) {
        if (scenario_.cells > 1 && ran == scenario_.join_after) {
          RETURN_IF_ERROR(Wait(resume_[s], "the satellites"));
        }
        ASSIGN_OR_RETURN(std::shared_ptr<const MicroStep> ms, queue_.Claim(0, StepDeadline()));
        if (ms == nullptr) break;
        RETURN_IF_ERROR(learner.RunMicroStep(*ms));
        RETURN_IF_ERROR(queue_.Done(0, ms->id));
      }
      ASSIGN_OR_RETURN(StreamingStepResult result, Finish(0, s, group));
      EXPECT_EQ(result.optimizer.version, s + 1);
      outcome_.losses.push_back(result.loss);
      outcome_.reports.push_back(queue_.report());
    }
    outcome_.groups_formed = group.groups_formed();
    return absl::OkStatus();
  }

  absl::Status Satellite(int cell) {
    torch::set_num_threads(1);
    StreamingLearner& learner = *learners_[cell];
    StreamingLearner& core = *learners_[0];
    StepGroup group(&membership_, cell);
    bool reduced_last_step = false;  // then it holds the core's weights (the broadcast)
    for (int64_t s = 0; s < kSteps; ++s) {
      RETURN_IF_ERROR(queue_.AwaitStep(s, StepDeadline()));
      if (KillIn(s) && cell != scenario_.kill_cell) {
        RETURN_IF_ERROR(Wait(requeued_[s], "the dead satellite's requeue"));
      }
      // The other core cells join at once: the step cannot be applied without them.
      const int64_t join_after = cell < scenario_.cores ? 0 : scenario_.join_after;
      RETURN_IF_ERROR(queue_.AwaitDone(s, join_after, StepDeadline()));
      RETURN_IF_ERROR(queue_.Join(cell, s));
      // After Join the core's weights stay those of the step's start until everybody reduces.
      if (!reduced_last_step) {
        ASSIGN_OR_RETURN(std::vector<torch::Tensor> weights, core.CopyWeights());
        RETURN_IF_ERROR(learner.LoadWeights(weights, core.version(), core.optimizer_step()));
      }
      if (KillIn(s) && cell == scenario_.kill_cell) {
        // Claims two, finishes one, and dies without reducing.
        ASSIGN_OR_RETURN(std::shared_ptr<const MicroStep> a, queue_.Claim(cell, StepDeadline()));
        ASSIGN_OR_RETURN(std::shared_ptr<const MicroStep> b, queue_.Claim(cell, StepDeadline()));
        if (a == nullptr || b == nullptr) return absl::InternalError("test: too few micro-steps");
        RETURN_IF_ERROR(learner.RunMicroStep(*a));
        RETURN_IF_ERROR(queue_.Done(cell, a->id));
        died_[s].Notify();
        return absl::OkStatus();
      }
      // Claim only once every live cell has joined: a cell that claimed at once could finish
      // the step's last micro-steps before a slower one joined, and that one would then be
      // refused ("join the next"), as it should be, but the scenario would not be the one named.
      RETURN_IF_ERROR(Wait(resume_[s], "every cell's join"));
      RETURN_IF_ERROR(RunClaims(cell));
      ASSIGN_OR_RETURN(StreamingStepResult result, Finish(cell, s, group));
      EXPECT_EQ(result.optimizer.version, s + 1);
      EXPECT_GT(result.rank, 0);
      EXPECT_EQ(learner.version(), s + 1);
      reduced_last_step = true;
    }
    return absl::OkStatus();
  }

  const LearnerOptions options_;
  const Scenario scenario_;
  MicroStepQueue queue_;
  c10::intrusive_ptr<c10d::Store> store_;
  dist::Membership membership_;
  std::vector<std::unique_ptr<TinyPolicy>> policies_;
  std::vector<std::unique_ptr<StreamingLearner>> learners_;
  std::vector<absl::Notification> resume_, died_, requeued_;  // per step
  Outcome outcome_;  // written by the core thread, read after the join
};

Outcome RunStreaming(const LearnerOptions& options, Scenario scenario) {
  return StreamingRun(options, scenario).Run();
}

Reference LearnerStepReference(const LearnerOptions& options) {
  return testing::LearnerStepReference(options, kSteps);
}

int64_t SatelliteMicroSteps(const Outcome& outcome) {
  int64_t n = 0;
  for (const StepReport& r : outcome.reports) {
    for (const auto& [cell, ids] : r.ran_by) n += cell > 0 ? static_cast<int64_t>(ids.size()) : 0;
  }
  return n;
}

struct LossCase {
  PolicyLossKind loss;
  LossAggregation aggregation;
  int per_chunk;
};

// (a) One cell, groups arriving in chunks == LearnerStep::Step on the whole batch.
TEST(StreamingStepTest, OneCellStreamingInChunksEqualsLearnerStepOnTheWholeBatch) {
  const std::vector<LossCase> cases = {
      {PolicyLossKind::kPpoClip, LossAggregation::kTokenMean, 1},  // GRPO's clipped loss
      {PolicyLossKind::kDecoupledPpo, LossAggregation::kTokenMean, 2},
      {PolicyLossKind::kDecoupledPpo, LossAggregation::kSequenceMean, 1},
  };
  for (const LossCase& c : cases) {
    SCOPED_TRACE(StrCat("loss ", static_cast<int>(c.loss), " aggregation ",
                        static_cast<int>(c.aggregation), " chunk ", c.per_chunk));
    LearnerOptions options = ParallelLearnerOptions(c.loss);
    options.aggregation = c.aggregation;
    const Reference reference = LearnerStepReference(options);
    const Outcome streamed = RunStreaming(options, {.cells = 1, .per_chunk = c.per_chunk});
    ASSERT_EQ(streamed.losses.size(), static_cast<size_t>(kSteps));
    ASSERT_EQ(reference.losses.size(), static_cast<size_t>(kSteps));
    for (int64_t s = 0; s < kSteps; ++s) {
      EXPECT_NEAR(streamed.losses[s], reference.losses[s], 1e-5) << "step " << s;
      EXPECT_GT(streamed.reports[s].micro_steps, 1);
    }
    const double diff = MaxAbsDiff(streamed.core_weights, reference.weights);
    EXPECT_LT(diff, 1e-5);
    // The weights did move: the comparison is not vacuous.
    EXPECT_GT(MaxAbsDiff(reference.weights, TinyPolicy(7).Weights()), 1e-4);
  }
}

// (b) Satellites joining after k micro-steps == one cell on the same micro-steps.
TEST(StreamingStepTest, SatellitesJoiningMidStepGiveTheWeightsOfOneCell) {
  const LearnerOptions options = ParallelLearnerOptions(PolicyLossKind::kDecoupledPpo);
  const Outcome reference = RunStreaming(options, {.cells = 1});
  for (int cells : {2, 3}) {
    for (int64_t k : {0, 1, 3}) {
      SCOPED_TRACE(StrCat(cells, " cells, joining after ", k, " micro-steps"));
      const Outcome run = RunStreaming(options, {.cells = cells, .join_after = k});
      ASSERT_EQ(run.reports.size(), static_cast<size_t>(kSteps));
      EXPECT_LT(MaxAbsDiff(run.core_weights, reference.core_weights), 1e-5);
      for (int64_t s = 0; s < kSteps; ++s) {
        EXPECT_NEAR(run.losses[s], reference.losses[s], 1e-5);
        EXPECT_EQ(run.reports[s].micro_steps, reference.reports[s].micro_steps);
        // The core runs its k micro-steps alone; with k = 0 the satellites may take them all.
        const auto& ran_by = run.reports[s].ran_by;
        const auto core = ran_by.find(0);
        const int64_t by_core =
            core == ran_by.end() ? 0 : static_cast<int64_t>(core->second.size());
        EXPECT_GE(by_core, k);
      }
      EXPECT_GT(SatelliteMicroSteps(run), 0) << "the satellites ran nothing";
      // Satellites that stay in training hold the core's new weights (broadcast).
      for (const auto& weights : run.satellite_weights) {
        EXPECT_EQ(MaxAbsDiff(weights, run.core_weights), 0.0);
      }
      EXPECT_EQ(run.groups_formed, 1);  // the same participants every step: one group
    }
  }
}

// (c) A satellite dies mid-step: its micro-steps are re-queued, the step completes without it.
TEST(StreamingStepTest, ASatelliteKilledMidStepLeavesTheWeightsOfOneCell) {
  const LearnerOptions options = ParallelLearnerOptions(PolicyLossKind::kDecoupledPpo);
  const Outcome reference = RunStreaming(options, {.cells = 1});
  for (int cells : {2, 3}) {
    SCOPED_TRACE(StrCat(cells, " cells"));
    const Outcome run =
        RunStreaming(options, {.cells = cells, .join_after = 1, .kill_cell = cells - 1});
    ASSERT_EQ(run.reports.size(), static_cast<size_t>(kSteps));
    EXPECT_LT(MaxAbsDiff(run.core_weights, reference.core_weights), 1e-5);
    const StepReport& killed = run.reports[1];
    EXPECT_EQ(killed.requeued, 2);
    EXPECT_THAT(killed.dead, ::testing::ElementsAre(cells - 1));
    EXPECT_EQ(killed.ran_by.count(cells - 1), 0u);  // nothing of the dead cell counts
    EXPECT_EQ(killed.claims, killed.micro_steps + 2);
    for (const auto& weights : run.satellite_weights) {
      EXPECT_EQ(MaxAbsDiff(weights, run.core_weights), 0.0);
    }
    // The participants changed after the death: the survivors formed a new group (or the core
    // went on alone, which needs none).
    EXPECT_EQ(run.groups_formed, cells == 2 ? 1 : 2);
  }
}

// (d) Several core cells, each stepping AdamW on its own range of the parameters (ZeRO-1 over
// the cores), with satellites joining mid-step and one dying == one core alone.
TEST(StreamingStepTest, CoreCellsShardingTheOptimiserGiveTheWeightsOfOneCore) {
  const LearnerOptions options = ParallelLearnerOptions(PolicyLossKind::kDecoupledPpo);
  const Outcome reference = RunStreaming(options, {.cells = 1});
  const size_t tensors = TinyPolicy(7).Parameters().size();
  struct Case {
    int cores, cells, kill_cell;
  };
  for (const Case& c : {Case{2, 2, -1}, Case{2, 3, -1}, Case{2, 4, 3}, Case{3, 4, -1}}) {
    SCOPED_TRACE(StrCat(c.cores, " cores, ", c.cells, " cells, kill ", c.kill_cell));
    const Outcome run = RunStreaming(
        options, {.cells = c.cells, .join_after = 1, .kill_cell = c.kill_cell, .cores = c.cores});
    ASSERT_EQ(run.reports.size(), static_cast<size_t>(kSteps));
    EXPECT_LT(MaxAbsDiff(run.core_weights, reference.core_weights), 1e-5);
    for (int64_t s = 0; s < kSteps; ++s) EXPECT_NEAR(run.losses[s], reference.losses[s], 1e-5);
    for (const auto& weights : run.satellite_weights) {
      EXPECT_EQ(MaxAbsDiff(weights, run.core_weights), 0.0);
    }
    // The optimiser state is split: each core steps a part, together all of it.
    size_t stepped = 0;
    for (size_t n : run.core_optimizer_tensors) {
      EXPECT_GT(n, 0u);
      EXPECT_LT(n, tensors);
      stepped += n;
    }
    EXPECT_EQ(stepped, tensors);
  }
}

// The job stops just after a step completed: a participant that sees the stop still reduces,
// since the core may be forming the step's group already and that waits for every participant
// (it used to leave, and the core waited out the group's timeout). In a step not complete yet
// nobody reduces, and nobody waits.
TEST(StreamingStepTest, AStopAfterAStepCompletedStillReducesItAndBeforeNobodyWaits) {
  const LearnerOptions options = ParallelLearnerOptions(PolicyLossKind::kDecoupledPpo);
  MicroStepQueue queue(MicroStepQueueOptions::FromLearnerOptions(options, /*core_cell=*/0, 1));
  dist::MembershipOptions membership_options;
  membership_options.group.timeout = std::chrono::milliseconds(5000);
  membership_options.group.name = "stop test";
  membership_options.group.threads = 1;
  dist::Membership membership(c10::make_intrusive<c10d::HashStore>(), membership_options);
  TinyPolicy core_policy(7), satellite_policy(8);
  StreamingLearner core(options, kParallelRunSteps, core_policy.Parameters(), core_policy.Forward(),
                        nullptr, 1.0, 0, RealClock(), OptimizerShard{0, 1});
  StreamingLearner satellite(options, kParallelRunSteps, satellite_policy.Parameters(),
                             satellite_policy.Forward(), nullptr, 1.0, 0, RealClock(),
                             OptimizerShard::Satellite(1));
  StepGroup core_group(&membership, 0), satellite_group(&membership, 1);
  const auto never = [] { return false; };
  const auto now = [] { return true; };
  const absl::Duration poll = absl::Milliseconds(20);

  // Step 0: both join, the core runs every micro-step, the step completes, then the stop.
  ASSERT_TRUE(queue.BeginStep(0, core.version()).ok());
  ASSERT_TRUE(queue.Join(0, 0).ok());
  ASSERT_TRUE(queue.Join(1, 0).ok());
  absl::StatusOr<std::vector<torch::Tensor>> weights = core.CopyWeights();
  ASSERT_TRUE(weights.ok()) << weights.status();
  ASSERT_TRUE(satellite.LoadWeights(*weights, core.version(), core.optimizer_step()).ok());
  for (std::vector<Trajectory>& chunk : Chunks(0, 1)) ASSERT_TRUE(queue.Add(std::move(chunk)).ok());
  ASSERT_TRUE(queue.Close().ok());
  for (;;) {
    absl::StatusOr<std::shared_ptr<const MicroStep>> ms = queue.Claim(0, StepDeadline());
    ASSERT_TRUE(ms.ok()) << ms.status();
    if (*ms == nullptr) break;
    ASSERT_TRUE(core.RunMicroStep(**ms).ok());
    ASSERT_TRUE(queue.Done(0, (*ms)->id).ok());
  }
  absl::StatusOr<StreamingStepResult> by_core;
  std::thread core_thread([&] { by_core = ReduceStep(queue, core_group, core, 0, never, poll); });
  const absl::StatusOr<StreamingStepResult> by_satellite =
      ReduceStep(queue, satellite_group, satellite, 0, now, poll);
  core_thread.join();
  ASSERT_TRUE(by_satellite.ok()) << by_satellite.status();
  ASSERT_TRUE(by_core.ok()) << by_core.status();
  EXPECT_EQ(core.version(), 1);
  EXPECT_EQ(satellite.version(), 1);
  EXPECT_EQ(MaxAbsDiff(satellite_policy.Weights(), core_policy.Weights()), 0.0);

  // A step still open when the satellite sees the stop: it cancels, and the core is told so at
  // once instead of waiting for a step that can no longer complete.
  MicroStepQueue open(MicroStepQueueOptions::FromLearnerOptions(options, /*core_cell=*/0, 1));
  ASSERT_TRUE(open.BeginStep(1, core.version()).ok());
  ASSERT_TRUE(open.Join(0, 1).ok());
  ASSERT_TRUE(open.Join(1, 1).ok());
  EXPECT_EQ(ReduceStep(open, satellite_group, satellite, 1, now, poll).status().code(),
            absl::StatusCode::kCancelled);
  EXPECT_EQ(ReduceStep(open, core_group, core, 1, never, poll).status().code(),
            absl::StatusCode::kCancelled);
}

TEST(StreamingLearnerTest, OptimizerShardRangesAreContiguousBalancedAndNeverEmpty) {
  std::vector<torch::Tensor> params = {torch::zeros({100}), torch::zeros({10}), torch::zeros({10}),
                                       torch::zeros({60}),  torch::zeros({20}), torch::zeros({1})};
  using Ranges = std::vector<std::pair<size_t, size_t>>;
  EXPECT_EQ(OptimizerShardRanges(params, 1), (Ranges{{0, 6}}));
  EXPECT_EQ(OptimizerShardRanges(params, 2), (Ranges{{0, 1}, {1, 6}}));
  EXPECT_EQ(OptimizerShardRanges(params, 3), (Ranges{{0, 1}, {1, 4}, {4, 6}}));
  EXPECT_EQ(OptimizerShardRanges(params, 6),
            (Ranges{{0, 1}, {1, 2}, {2, 3}, {3, 4}, {4, 5}, {5, 6}}));
}

TEST(StreamingLearnerTest, RefusesOtherVersionsBadWeightsAndEmptySteps) {
  torch::set_num_threads(1);
  const LearnerOptions options = ParallelLearnerOptions(PolicyLossKind::kDecoupledPpo);
  TinyPolicy policy(7);
  StreamingLearner learner(options, kParallelRunSteps, policy.Parameters(), policy.Forward());
  MicroStepQueue queue(MicroStepQueueOptions::FromLearnerOptions(options));
  ASSERT_TRUE(queue.BeginStep(0, /*version=*/4).ok());
  ASSERT_TRUE(queue.Join(0, 0).ok());
  ASSERT_TRUE(queue.Add(GroupsForStep(0)[0]).ok());
  ASSERT_TRUE(queue.Close().ok());
  auto ms = queue.Claim(0, StepDeadline());
  ASSERT_TRUE(ms.ok() && *ms != nullptr);

  absl::Status s = learner.RunMicroStep(**ms);  // the learner holds version 0, the step is 4's
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_THAT(s.message(), ::testing::HasSubstr("LoadWeights"));

  std::vector<torch::Tensor> weights = policy.Weights();
  EXPECT_EQ(learner.LoadWeights({weights.data(), 1}, 4, 4).code(),
            absl::StatusCode::kInvalidArgument);
  std::vector<torch::Tensor> reshaped = weights;
  reshaped[0] = reshaped[0].reshape({-1});
  EXPECT_EQ(learner.LoadWeights(reshaped, 4, 4).code(), absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(learner.LoadWeights(weights, 4, 4).ok());
  EXPECT_EQ(learner.version(), 4);
  ASSERT_TRUE(learner.RunMicroStep(**ms).ok());
  EXPECT_EQ(learner.cell_micro_steps(), 1);

  // D = 0: nothing trainable; no step, and the accumulated gradient is dropped.
  auto empty = learner.FinishStep(nullptr, 0.0);
  EXPECT_EQ(empty.status().code(), absl::StatusCode::kUnavailable) << empty.status();
  EXPECT_EQ(learner.cell_micro_steps(), 0);
  EXPECT_EQ(learner.version(), 4);

  LearnerOptions sharded = options;
  sharded.sharding = ShardingMode::kGradsOptimizer;
  StreamingLearner refused(sharded, kParallelRunSteps, policy.Parameters(), policy.Forward());
  EXPECT_EQ(refused.RunMicroStep(**ms).code(), absl::StatusCode::kFailedPrecondition);

  // A core of two may not reduce alone; more cores than parameter tensors is refused.
  StreamingLearner half(options, kParallelRunSteps, policy.Parameters(), policy.Forward(), nullptr,
                        1.0, 4, RealClock(), OptimizerShard{0, 2});
  ASSERT_TRUE(half.RunMicroStep(**ms).ok());
  auto alone = half.FinishStep(nullptr, 1.0);
  EXPECT_EQ(alone.status().code(), absl::StatusCode::kFailedPrecondition) << alone.status();
  EXPECT_THAT(alone.status().message(), ::testing::HasSubstr("shard 0 of 2"));
  const int too_many = static_cast<int>(policy.Parameters().size()) + 1;
  StreamingLearner crowded(options, kParallelRunSteps, policy.Parameters(), policy.Forward(),
                           nullptr, 1.0, 4, RealClock(), OptimizerShard{0, too_many});
  EXPECT_EQ(crowded.RunMicroStep(**ms).code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace flywheel
