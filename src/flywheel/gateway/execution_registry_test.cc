#include "flywheel/gateway/execution_registry.h"

#include <gtest/gtest.h>

#include <optional>
#include <string>
#include <vector>

namespace flywheel::gateway {
namespace {

ExecutionStart Named(std::string id, std::string group = "", std::string task = "") {
  ExecutionStart start;
  start.execution_id = std::move(id);
  start.group_id = std::move(group);
  start.task_id = std::move(task);
  return start;
}

ExecutionOutcome Outcome(Termination termination, std::optional<float> reward,
                         std::optional<float> partial = std::nullopt) {
  ExecutionOutcome outcome;
  outcome.termination = termination;
  outcome.final_reward = reward;
  outcome.partial_score = partial;
  return outcome;
}

LlmCall Call(std::vector<int32_t> context, std::vector<int32_t> generated) {
  LlmCall call;
  call.context = std::move(context);
  call.generated = std::move(generated);
  call.logprobs.assign(call.generated.size(), -0.5f);
  call.versions.assign(call.generated.size(), 3);
  return call;
}

struct Sunk {
  std::vector<Execution> executions;
  ExecutionRegistry registry{[this](Execution e) {
    executions.push_back(std::move(e));
    return absl::OkStatus();
  }};
};

TEST(ExecutionRegistryTest, AnExecutionIsWrittenOnlyWithItsOwnToken) {
  Sunk s;
  const OpenedExecution a = *s.registry.Open({});
  const OpenedExecution b = *s.registry.Open(Named("task-7.b"));
  EXPECT_EQ(b.execution_id, "task-7.b");
  EXPECT_NE(a.execution_id, b.execution_id);
  EXPECT_NE(a.token, b.token);
  EXPECT_EQ(a.token.size(), 32u);
  EXPECT_TRUE(s.registry.Authorize(a.execution_id, a.token).ok());
  EXPECT_EQ(s.registry.Authorize(a.execution_id, b.token).code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(s.registry.Authorize(a.execution_id, "").code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(s.registry.Authorize("nobody", a.token).code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(s.registry.counts().refused_tokens, 3);
  EXPECT_EQ(s.registry.Open(Named("task-7.b")).status().code(), absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(s.registry.Open(Named("a/b")).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(ExecutionRegistryTest, FinishHandsTheWholeExecutionOnceAndClosesIt) {
  Sunk s;
  const OpenedExecution e = *s.registry.Open(Named("", "g", "t"));
  ASSERT_TRUE(s.registry.Record(e.execution_id, Call({1, 2}, {3, 4})).ok());
  ASSERT_TRUE(s.registry.Record(e.execution_id, Call({1, 2, 3, 4, 5}, {6})).ok());
  // A done execution without a reward cannot be trained on: refused, and it stays open.
  EXPECT_EQ(s.registry.Finish(e.execution_id, {}).status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(s.executions.empty());
  absl::StatusOr<Execution> done =
      s.registry.Finish(e.execution_id, Outcome(Termination::kDone, 1.0f));
  ASSERT_TRUE(done.ok()) << done.status();
  ASSERT_EQ(s.executions.size(), 1u);
  const Execution& x = s.executions[0];
  EXPECT_EQ(x.group_id, "g");
  EXPECT_EQ(x.task_id, "t");
  ASSERT_EQ(x.calls.size(), 2u);
  EXPECT_EQ(x.calls[0].call_id, "c1");
  EXPECT_EQ(x.calls[1].call_id, "c2");
  EXPECT_EQ(x.calls[1].generated, std::vector<int32_t>({6}));
  EXPECT_EQ(*x.final_reward, 1.0f);
  // Closed: no more calls, no second finish, and the id is not reused.
  EXPECT_EQ(s.registry.Authorize(e.execution_id, e.token).code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(s.registry.Record(e.execution_id, Call({1}, {2})).code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(s.registry.Finish(e.execution_id, Outcome(Termination::kDone, 0.0f)).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(s.registry.Open(Named(e.execution_id)).status().code(),
            absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(s.executions.size(), 1u);
}

TEST(ExecutionRegistryTest, ATimedOutExecutionTrainsOnItsPartialScoreAndAnEmptyOneIsRefused) {
  Sunk s;
  const OpenedExecution e = *s.registry.Open({});
  ASSERT_TRUE(s.registry.Record(e.execution_id, Call({1}, {2})).ok());
  EXPECT_FALSE(
      s.registry.Finish(e.execution_id, Outcome(Termination::kTimeout, std::nullopt)).ok());
  EXPECT_TRUE(
      s.registry.Finish(e.execution_id, Outcome(Termination::kTimeout, std::nullopt, 0.25f)).ok());
  ASSERT_EQ(s.executions.size(), 1u);
  EXPECT_EQ(s.executions[0].termination, Termination::kTimeout);
  const OpenedExecution empty = *s.registry.Open({});
  absl::Status refused =
      s.registry.Finish(empty.execution_id, Outcome(Termination::kDone, 1.0f)).status();
  EXPECT_EQ(refused.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(refused.message().find("made no LLM call"), std::string::npos) << refused;
}

}  // namespace
}  // namespace flywheel::gateway
