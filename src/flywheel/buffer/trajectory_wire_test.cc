#include "flywheel/buffer/trajectory_wire.h"

#include <gtest/gtest.h>

#include <optional>
#include <random>
#include <string>

#include "flywheel/core/trajectory_proto.h"

namespace flywheel {
namespace {

std::string Serialize(const Trajectory& t) {
  std::string out;
  ToProto(t).SerializeToString(&out);
  return out;
}

// What protobuf + FromProto make of `wire`, re-serialized; nullopt where they reject it.
std::optional<std::string> ViaProtobuf(const std::string& wire) {
  v1::Trajectory proto;
  if (!proto.ParseFromString(wire)) return std::nullopt;
  absl::StatusOr<Trajectory> t = FromProto(proto);
  if (!t.ok()) return std::nullopt;
  return Serialize(*t);
}

// The fast path either declines or agrees with protobuf exactly (bit for bit, NaNs included).
void ExpectAgrees(const std::string& wire, bool expect_fast) {
  Trajectory fast;
  const bool decoded = DecodeTrajectoryWire(wire, &fast);
  if (expect_fast) {
    EXPECT_TRUE(decoded);
  }
  if (!decoded) return;
  const std::optional<std::string> slow = ViaProtobuf(wire);
  ASSERT_TRUE(slow.has_value()) << "fast path accepted bytes protobuf rejects";
  EXPECT_EQ(Serialize(fast), *slow);
}

// Strings are moved in, not assigned from short literals: GCC 12 reports a false
// -Wrestrict for the inlined assignment.
Trajectory Full() {
  Trajectory t;
  t.id = std::string("t-1");
  t.execution_id = std::string("exec");
  t.group_id = std::string("g");
  t.task_id = std::string("task");
  t.env_name = std::string("env");
  t.role = Role::kSubAgent;
  t.parent_id = std::string("parent");
  t.fork_position = 3;
  t.AppendPrompt(5);
  t.AppendPrompt(-7);  // negative int32: a 10-byte varint
  t.AppendGenerated(1 << 30, -0.5f, 0);
  t.AppendGenerated(300, -1e-9f, int64_t{1} << 40);
  t.AppendGenerated(0, -100.0f, 127);
  t.AppendPrompt(128);
  t.turn_ends = {2, 5, 6};
  t.turn_rewards = {0.25f, -1.0f, 3.5f};
  t.final_reward = 2.5f;
  t.partial_score = 0.75f;
  t.termination = Termination::kTimeout;
  t.actor_id = std::string("actor");
  t.created_unix_ns = 1700000000000000000;
  t.finished_unix_ns = -1;
  return t;
}

TEST(TrajectoryWireTest, DecodesWhatProtobufDecodes) {
  ExpectAgrees(Serialize(Full()), true);
  Trajectory root = Full();
  root.parent_id.clear();  // fork_position on the wire, but a root path has none
  ExpectAgrees(Serialize(root), true);
  Trajectory empty;
  ExpectAgrees(Serialize(empty), true);
  ExpectAgrees("", true);
  Trajectory big;
  big.id = "big";
  std::mt19937 rng(3);
  for (int i = 0; i < 10000; ++i) {
    if (i % 3 == 0) {
      big.AppendPrompt(static_cast<int32_t>(rng() % 200000));
    } else {
      big.AppendGenerated(static_cast<int32_t>(rng()), -static_cast<float>(rng() % 1000) / 7,
                          static_cast<int64_t>(rng() % 100000));
    }
  }
  ExpectAgrees(Serialize(big), true);
}

TEST(TrajectoryWireTest, MergesRepeatedOccurrencesAsProtobufDoes) {
  // Concatenated messages: arrays concatenate, the last scalar and string win.
  Trajectory second = Full();
  second.id = "second";
  second.role = Role::kMain;
  second.partial_score.reset();
  second.final_reward = -3.0f;
  ExpectAgrees(Serialize(Full()) + Serialize(second), true);
}

TEST(TrajectoryWireTest, LeavesOtherEncodingsToProtobuf) {
  Trajectory t;
  const std::string base = Serialize(Full());
  // An unknown field (99, varint).
  EXPECT_FALSE(DecodeTrajectoryWire(base + std::string("\x98\x06\x01", 3), &t));
  // A non-ASCII id (valid UTF-8: protobuf takes it).
  Trajectory accented = Full();
  accented.id = "caf\xc3\xa9";
  EXPECT_FALSE(DecodeTrajectoryWire(Serialize(accented), &t));
  EXPECT_TRUE(ViaProtobuf(Serialize(accented)).has_value());
  // tokens unpacked (field 10 as a varint).
  EXPECT_FALSE(DecodeTrajectoryWire(base + std::string("\x50\x05", 2), &t));
  // role 9: FromProto's error message applies.
  EXPECT_FALSE(DecodeTrajectoryWire(base + std::string("\x30\x09", 2), &t));
  // logprobs not a multiple of 4 bytes.
  EXPECT_FALSE(DecodeTrajectoryWire(std::string("\x62\x03\x00\x00\x00", 5), &t));
}

TEST(TrajectoryWireTest, TruncatedOrCorruptBytesNeverDecodeDifferently) {
  const std::string base = Serialize(Full());
  for (size_t n = 0; n < base.size(); ++n) ExpectAgrees(base.substr(0, n), false);
  std::mt19937 rng(11);
  for (int trial = 0; trial < 3000; ++trial) {
    std::string bad = base;
    bad[rng() % bad.size()] = static_cast<char>(rng());
    if (trial % 2 == 0) bad[rng() % bad.size()] = static_cast<char>(rng());
    ExpectAgrees(bad, false);
  }
}

}  // namespace
}  // namespace flywheel
