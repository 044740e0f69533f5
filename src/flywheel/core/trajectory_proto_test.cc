#include "flywheel/core/trajectory_proto.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace flywheel {
namespace {

Trajectory MakeFull() {
  Trajectory t;
  t.id = "p-3";
  t.execution_id = "exec-9";
  t.group_id = "g-2";
  t.task_id = "repair/17";
  t.env_name = "repair";
  t.role = Role::kSubAgentSummary;
  t.parent_id = "p-1";
  t.fork_position = 2;
  t.AppendPrompt(4);
  t.AppendPrompt(5);
  t.AppendGenerated(6, -0.75f, 11);
  t.AppendGenerated(7, -2.0f, 12);
  t.turn_ends = {4};
  t.turn_rewards = {0.5f};
  t.final_reward = 0.25f;
  t.partial_score = 0.4f;
  t.termination = Termination::kTimeout;
  t.call_roles = {Role::kSubAgent};
  t.actor_id = "actor-0";
  t.created_unix_ns = 1'700'000'000'000'000'000;
  t.finished_unix_ns = 1'700'000'000'500'000'000;
  return t;
}

TEST(TrajectoryProtoTest, RoundTripIsLossless) {
  const Trajectory original = MakeFull();
  const v1::Trajectory proto = ToProto(original);
  // Through the wire bytes too, not only the message object.
  v1::Trajectory parsed;
  ASSERT_TRUE(parsed.ParseFromString(proto.SerializeAsString()));
  absl::StatusOr<Trajectory> back = FromProto(parsed);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, original);
  EXPECT_TRUE(std::isnan(back->logprobs[0]));
}

TEST(TrajectoryProtoTest, UnknownCallRoleIsRefused) {
  v1::Trajectory proto = ToProto(MakeFull());
  proto.set_call_roles(0, static_cast<v1::Role>(9));
  absl::StatusOr<Trajectory> back = FromProto(proto);
  ASSERT_FALSE(back.ok());
  EXPECT_THAT(back.status().message(), testing::HasSubstr("call_roles[0]: unknown value 9"));
}

TEST(TrajectoryProtoTest, MissingPartialScoreStaysMissing) {
  Trajectory t = MakeFull();
  t.partial_score.reset();
  absl::StatusOr<Trajectory> back = FromProto(ToProto(t));
  ASSERT_TRUE(back.ok());
  EXPECT_FALSE(back->partial_score.has_value());
  EXPECT_EQ(*back, t);
}

TEST(TrajectoryProtoTest, RootPathFromAWireClientHasNoForkPosition) {
  v1::Trajectory proto = ToProto(MakeFull());
  proto.clear_parent_id();
  proto.clear_fork_position();  // proto3 reads this back as 0
  absl::StatusOr<Trajectory> back = FromProto(proto);
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->fork_position, -1);
  EXPECT_TRUE(back->Validate().ok()) << back->Validate();
}

TEST(TrajectoryProtoTest, UnknownEnumValueIsAnError) {
  v1::Trajectory proto = ToProto(MakeFull());
  proto.set_role(static_cast<v1::Role>(42));
  absl::StatusOr<Trajectory> back = FromProto(proto);
  ASSERT_FALSE(back.ok());
  EXPECT_THAT(back.status().message(), ::testing::HasSubstr("field role"));
}

}  // namespace
}  // namespace flywheel
