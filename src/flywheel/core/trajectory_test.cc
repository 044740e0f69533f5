#include "flywheel/core/trajectory.h"

#include <cmath>
#include <limits>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "flywheel/core/strings.h"

namespace flywheel {
namespace {

using ::testing::HasSubstr;

// prompt (3 tokens), action (2), observation (1), action (1)
Trajectory MakeValid() {
  Trajectory t;
  t.id = "traj-7";
  t.execution_id = "exec-1";
  t.group_id = "group-1";
  t.task_id = "guess/42";
  t.env_name = "guess";
  for (int tok : {1, 2, 3}) t.AppendPrompt(tok);
  t.AppendGenerated(10, -0.5f, 3);
  t.AppendGenerated(11, -1.5f, 4);
  t.AppendPrompt(5);
  t.AppendGenerated(12, -0.1f, 4);
  t.turn_ends = {6, 7};
  t.turn_rewards = {0.0f, 1.0f};
  t.final_reward = 1.0f;
  return t;
}

TEST(TrajectoryTest, ValidTrajectoryPasses) {
  const Trajectory t = MakeValid();
  EXPECT_TRUE(t.Validate(100).ok()) << t.Validate(100);
  EXPECT_EQ(t.size(), 7);
  EXPECT_EQ(t.NumTrainable(), 3);
  EXPECT_EQ(t.MinVersion(), 3);
  EXPECT_EQ(t.MaxVersion(), 4);
}

TEST(TrajectoryTest, RejectsEmpty) {
  Trajectory t;
  t.id = "empty-1";
  const absl::Status s = t.Validate();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("'empty-1'"));
  EXPECT_THAT(s.message(), HasSubstr("empty"));
}

TEST(TrajectoryTest, RejectsMismatchedLengths) {
  for (const char* field : {"trainable", "logprobs", "versions"}) {
    Trajectory t = MakeValid();
    if (std::string(field) == "trainable") t.trainable.pop_back();
    if (std::string(field) == "logprobs") t.logprobs.push_back(-1.0f);
    if (std::string(field) == "versions") t.versions.clear();
    const absl::Status s = t.Validate();
    EXPECT_THAT(s.message(), HasSubstr(StrCat("field ", field))) << field;
    EXPECT_THAT(s.message(), HasSubstr("traj-7"));
  }
}

TEST(TrajectoryTest, RejectsNonFiniteLogprob) {
  Trajectory t = MakeValid();
  t.logprobs[4] = -std::numeric_limits<float>::infinity();
  EXPECT_THAT(t.Validate().message(), HasSubstr("logprobs[4]"));
  t.logprobs[4] = 0.7f;  // a probability above one
  EXPECT_THAT(t.Validate().message(), HasSubstr("logprobs[4]"));
}

TEST(TrajectoryTest, RejectsTokenOutsideVocabulary) {
  Trajectory t = MakeValid();
  t.tokens[3] = 100;
  EXPECT_TRUE(t.Validate(0).ok());  // no vocabulary given: only negative ids are rejected
  const absl::Status s = t.Validate(100);
  EXPECT_THAT(s.message(), HasSubstr("tokens[3]"));
  EXPECT_THAT(s.message(), HasSubstr("outside the vocabulary"));
  t.tokens[3] = -1;
  EXPECT_THAT(t.Validate().message(), HasSubstr("tokens[3]"));
}

TEST(TrajectoryTest, RejectsTrainableTokenWithoutLogprob) {
  Trajectory t = MakeValid();
  t.logprobs[6] = kNoLogprob;
  const absl::Status s = t.Validate();
  EXPECT_THAT(s.message(), HasSubstr("logprobs[6]"));
  EXPECT_THAT(s.message(), HasSubstr("no behaviour log-prob"));
}

TEST(TrajectoryTest, RejectsTrainableTokenWithoutVersion) {
  Trajectory t = MakeValid();
  t.versions[3] = kNoVersion;
  EXPECT_THAT(t.Validate().message(), HasSubstr("versions[3]"));
}

TEST(TrajectoryTest, RejectsBadTurns) {
  Trajectory t = MakeValid();
  t.turn_rewards.pop_back();
  EXPECT_THAT(t.Validate().message(), HasSubstr("turn_rewards"));
  t = MakeValid();
  t.turn_ends = {6, 6};
  EXPECT_THAT(t.Validate().message(), HasSubstr("turn_ends[1]"));
  t = MakeValid();
  t.turn_ends = {6, 8};
  EXPECT_THAT(t.Validate().message(), HasSubstr("turn_ends[1]"));
}

TEST(TrajectoryTest, CallRolesNeedOneTurnPerCallCoveringEveryToken) {
  Trajectory t = MakeValid();  // 7 tokens, turns end at 6 and 7
  t.call_roles = {Role::kMain, Role::kSubAgent};
  EXPECT_TRUE(t.Validate().ok()) << t.Validate();
  t.call_roles.pop_back();
  EXPECT_THAT(t.Validate().message(), HasSubstr("call_roles"));
  t.call_roles = {Role::kMain, static_cast<Role>(7)};
  EXPECT_THAT(t.Validate().message(), HasSubstr("call_roles[1]"));
  t = MakeValid();
  t.turn_ends = {6};
  t.turn_rewards = {0.0f};
  t.call_roles = {Role::kMain};  // the last token belongs to no call
  EXPECT_THAT(t.Validate().message(), HasSubstr("cover all 7 tokens"));
}

TEST(TrajectoryTest, RejectsNonFiniteRewards) {
  Trajectory t = MakeValid();
  t.final_reward = std::nanf("");
  EXPECT_THAT(t.Validate().message(), HasSubstr("final_reward"));
  t = MakeValid();
  t.partial_score = std::numeric_limits<float>::infinity();
  EXPECT_THAT(t.Validate().message(), HasSubstr("partial_score"));
}

TEST(TrajectoryTest, BranchNeedsParentAndForkTogether) {
  Trajectory t = MakeValid();
  t.parent_id = "traj-6";
  EXPECT_THAT(t.Validate().message(), HasSubstr("fork_position"));
  t.fork_position = 3;
  EXPECT_TRUE(t.Validate().ok());
}

TEST(TrajectoryTest, EqualityTreatsMissingLogprobsAsEqual) {
  EXPECT_EQ(MakeValid(), MakeValid());
  Trajectory t = MakeValid();
  t.logprobs[3] = -0.25f;
  EXPECT_FALSE(t == MakeValid());
}

TEST(TrajectoryTest, RoleAndTerminationNamesRoundTrip) {
  for (Role r : {Role::kMain, Role::kMainSummary, Role::kSubAgent, Role::kSubAgentSummary}) {
    EXPECT_EQ(*ParseRole(RoleName(r)), r);
  }
  for (Termination t : {Termination::kDone, Termination::kMaxTurns, Termination::kTimeout,
                        Termination::kEnvError, Termination::kCancelled}) {
    EXPECT_EQ(*ParseTermination(TerminationName(t)), t);
  }
  EXPECT_FALSE(ParseRole("critic").ok());
}

}  // namespace
}  // namespace flywheel
