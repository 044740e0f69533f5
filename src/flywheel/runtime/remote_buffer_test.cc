#include "flywheel/runtime/remote_buffer.h"

#include <gtest/gtest.h>

#include "flywheel/buffer/service.h"
#include "flywheel/buffer/test_util.h"
#include "flywheel/core/trajectory_proto.h"

namespace flywheel {
namespace {

std::unique_ptr<BufferServer> Serve(const BufferOptions& options) {
  auto buffer = Buffer::Create(options);
  EXPECT_TRUE(buffer.ok()) << buffer.status();
  BufferServerOptions server_options;
  server_options.security = RpcSecurity::Token("t0ken");
  auto server = BufferServer::Start(std::shared_ptr<Buffer>(std::move(*buffer)), server_options);
  EXPECT_TRUE(server.ok()) << server.status();
  return std::move(*server);
}

std::string Wire(const std::string& id, const std::string& group) {
  std::string out;
  ToProto(*testing::MakeTrajectory(id, 0, group)).SerializeToString(&out);
  return out;
}

TEST(RemoteBufferTest, InsertsOneAtATimeAndSamplesWholeGroups) {
  BufferOptions options;
  options.group_size = 2;
  auto server = Serve(options);
  auto buffer = RemoteBuffer::Connect(server->address(), RpcSecurity::Token("t0ken"));
  ASSERT_TRUE(buffer.ok());
  for (const char* id : {"a/0", "a/1"}) {
    auto ack = (*buffer)->InsertOne(Wire(id, "g"), absl::Seconds(1));
    ASSERT_TRUE(ack.ok()) << ack.status();
    EXPECT_EQ(ack->code(), 0) << ack->message();
  }
  auto groups = (*buffer)->SampleGroups(4, absl::Seconds(2));
  ASSERT_TRUE(groups.ok()) << groups.status();
  ASSERT_EQ(groups->size(), 1u);
  EXPECT_EQ((*groups)[0].size(), 2u);
  ASSERT_TRUE((*buffer)->SetLearnerVersion(3).ok());
  EXPECT_EQ((*buffer)->Info()->learner_version(), 3);
  // Nothing left: an empty batch once the wait is over, not an error.
  groups = (*buffer)->SampleGroups(4, absl::Milliseconds(50));
  ASSERT_TRUE(groups.ok()) << groups.status();
  EXPECT_TRUE(groups->empty());
}

TEST(RemoteBufferTest, FullBufferAcksDeadlineExceededSoTheActorAsksAgain) {
  BufferOptions options;
  options.max_size = 1;
  auto server = Serve(options);
  auto buffer = RemoteBuffer::Connect(server->address(), RpcSecurity::Token("t0ken"));
  ASSERT_TRUE(buffer.ok());
  ASSERT_EQ((*buffer)->InsertOne(Wire("a", ""), absl::Seconds(1))->code(), 0);
  auto ack = (*buffer)->InsertOne(Wire("b", ""), absl::Milliseconds(100));
  ASSERT_TRUE(ack.ok()) << ack.status();
  EXPECT_EQ(static_cast<absl::StatusCode>(ack->code()), absl::StatusCode::kDeadlineExceeded);
}

// The learner's side of leases over gRPC: a leased sample stays in the buffer until the learner
// acknowledges it, a retried insert is acknowledged once, and a release returns the rest.
TEST(RemoteBufferTest, LeasedSamplesAreAcknowledgedOrReleasedAndRetriedInsertsStoredOnce) {
  auto server = Serve(BufferOptions{});
  auto buffer = RemoteBuffer::Connect(server->address(), "t0ken");
  ASSERT_TRUE(buffer.ok());
  for (const char* id : {"a", "b", "c", "a"}) {
    auto ack = (*buffer)->InsertOne(Wire(id, ""), absl::Seconds(1));
    ASSERT_TRUE(ack.ok()) << ack.status();
    EXPECT_EQ(ack->code(), 0) << ack->message();
  }
  EXPECT_EQ((*buffer)->Info()->duplicate_inserts(), 1);
  auto groups = (*buffer)->SampleGroups(3, absl::Seconds(2), "run");
  ASSERT_TRUE(groups.ok()) << groups.status();
  ASSERT_EQ(groups->size(), 3u);
  EXPECT_EQ((*buffer)->Info()->leased(), 3);
  v1::AcknowledgeRequest request;
  request.set_lease_owner("run");
  v1::ConsumedTrajectory* consumed = request.add_consumed();
  consumed->set_id("a");
  consumed->set_reason("trained");
  request.set_release_others(true);
  request.add_keep("b");
  auto response = (*buffer)->Acknowledge(request);
  ASSERT_TRUE(response.ok()) << response.status();
  EXPECT_EQ(response->consumed(), 1);
  EXPECT_EQ(response->released(), 1);  // c; b is kept
  groups = (*buffer)->SampleGroups(3, absl::Seconds(2), "run");
  ASSERT_TRUE(groups.ok()) << groups.status();
  ASSERT_EQ(groups->size(), 1u);
  EXPECT_EQ((*groups)[0][0].id, "c");
  // A consumed id inserted again is acknowledged, not stored.
  ASSERT_EQ((*buffer)->InsertOne(Wire("a", ""), absl::Seconds(1))->code(), 0);
  EXPECT_EQ((*buffer)->Info()->size(), 0);
  request.Clear();
  EXPECT_EQ((*buffer)->Acknowledge(request).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(RemoteBufferTest, InvalidTrajectoryIsRefusedInItsAck) {
  auto server = Serve(BufferOptions{});
  auto buffer = RemoteBuffer::Connect(server->address(), RpcSecurity::Token("t0ken"));
  auto ack = (*buffer)->InsertOne("not a trajectory", absl::Seconds(1));
  ASSERT_TRUE(ack.ok()) << ack.status();
  EXPECT_EQ(static_cast<absl::StatusCode>(ack->code()), absl::StatusCode::kInvalidArgument);
}

TEST(RemoteBufferTest, ErrorsNameTheAddress) {
  auto server = Serve(BufferOptions{});
  auto wrong = RemoteBuffer::Connect(server->address(), RpcSecurity::Token("other"));
  absl::Status status = (*wrong)->Info().status();
  EXPECT_EQ(status.code(), absl::StatusCode::kUnauthenticated);
  EXPECT_NE(status.message().find("buffer at " + server->address()), absl::string_view::npos)
      << status;
  auto nowhere = RemoteBuffer::Connect("127.0.0.1:1", RpcSecurity());
  status = (*nowhere)->SampleGroups(1, absl::Milliseconds(10)).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable) << status;
  EXPECT_NE(status.message().find("127.0.0.1:1"), absl::string_view::npos) << status;
}

}  // namespace
}  // namespace flywheel
