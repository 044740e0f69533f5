#include "flywheel/buffer/wire_trajectory.h"

#include <memory>
#include <string>

#include "flywheel/buffer/test_util.h"
#include "flywheel/core/trajectory_proto.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace flywheel {
namespace {

using ::testing::HasSubstr;

std::shared_ptr<std::string> SharedWire(const Trajectory& t) {
  auto wire = std::make_shared<std::string>();
  ToProto(t).SerializeToString(wire.get());
  return wire;
}

TEST(WireTrajectoryTest, AValidTrajectoryBecomesAMemberHoldingItsBytes) {
  const auto t = testing::MakeTrajectory("t1", /*version=*/3);
  auto wire = SharedWire(*t);
  v1::Trajectory proto;
  bool parsed = false;
  absl::StatusOr<ItemMember> member = DecodeWireTrajectory(wire, proto, &parsed);
  ASSERT_TRUE(member.ok()) << member.status();
  EXPECT_TRUE(parsed);
  EXPECT_EQ(*member->trajectory, *t);
  EXPECT_EQ(member->wire, wire);
  EXPECT_EQ(member->storage_key, 0u);
}

TEST(WireTrajectoryTest, BytesThatAreNotATrajectoryAreRefused) {
  v1::Trajectory proto;
  bool parsed = true;
  absl::StatusOr<ItemMember> member =
      DecodeWireTrajectory(std::make_shared<std::string>("\xff\xff\xff"), proto, &parsed);
  EXPECT_FALSE(parsed);
  EXPECT_EQ(member.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(member.status().message(), HasSubstr("not a serialized flywheel.v1.Trajectory"));
}

TEST(WireTrajectoryTest, AnInvalidTrajectoryParsesButIsRefusedNamingTheField) {
  Trajectory t = *testing::MakeTrajectory("t2");
  t.logprobs.pop_back();
  v1::Trajectory proto;
  bool parsed = false;
  absl::StatusOr<ItemMember> member = DecodeWireTrajectory(SharedWire(t), proto, &parsed);
  EXPECT_TRUE(parsed);
  EXPECT_EQ(proto.id(), "t2");
  EXPECT_EQ(member.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(member.status().message(), HasSubstr("logprobs"));

  v1::Trajectory unknown_role = ToProto(*testing::MakeTrajectory("t3"));
  unknown_role.set_role(static_cast<v1::Role>(99));
  member = DecodeWireTrajectory(std::make_shared<std::string>(unknown_role.SerializeAsString()),
                                proto, &parsed);
  EXPECT_TRUE(parsed);
  EXPECT_THAT(member.status().message(), HasSubstr("field role: unknown value 99"));
}

}  // namespace
}  // namespace flywheel
