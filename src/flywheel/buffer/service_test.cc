#include "flywheel/buffer/service.h"

#include <gtest/gtest.h>

#include "flywheel/buffer/client.h"
#include "flywheel/buffer/test_util.h"
#include "flywheel/core/trajectory_proto.h"

namespace flywheel {
namespace {

struct Served {
  std::unique_ptr<BufferServer> server;
  std::string address;
};

Served Serve(const BufferOptions& options, const std::string& token = "") {
  auto buffer = Buffer::Create(options);
  EXPECT_TRUE(buffer.ok()) << buffer.status();
  BufferServerOptions server_options;
  server_options.security = RpcSecurity::Token(token);
  auto server = BufferServer::Start(std::shared_ptr<Buffer>(std::move(*buffer)), server_options);
  EXPECT_TRUE(server.ok()) << server.status();
  Served s;
  s.address = (*server)->address();
  s.server = std::move(*server);
  return s;
}

std::string Wire(const Trajectory& t) {
  std::string out;
  ToProto(t).SerializeToString(&out);
  return out;
}

TEST(BufferServiceTest, InsertAckThenSampleOverGrpc) {
  Served served = Serve(BufferOptions{});
  EXPECT_EQ(served.address.rfind("127.0.0.1:", 0), 0u);  // loopback by default
  auto client = BufferClient::Connect(served.address);
  ASSERT_TRUE(client.ok());
  std::vector<Trajectory> batch;
  for (int i = 0; i < 5; ++i) batch.push_back(*testing::MakeTrajectory(StrCat("t", i), 7));
  auto acks = (*client)->Insert(batch, /*per_request=*/2);
  ASSERT_TRUE(acks.ok()) << acks.status();
  ASSERT_EQ(acks->size(), 5u);
  for (const auto& ack : *acks) EXPECT_EQ(ack.code(), 0) << ack.message();
  EXPECT_EQ((*acks)[4].sequence(), 4u);
  ASSERT_TRUE((*client)->SetLearnerVersion(8).ok());
  auto items = (*client)->Sample(10, absl::Seconds(5));
  ASSERT_TRUE(items.ok()) << items.status();
  ASSERT_EQ(items->size(), 5u);
  EXPECT_EQ((*items)[0][0], batch[0]);  // lossless round trip
  auto info = (*client)->Info();
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->samples(), 5);
  EXPECT_EQ(info->learner_version(), 8);
  // Nothing left: an empty batch after the timeout, not an error.
  items = (*client)->Sample(1, absl::Milliseconds(20));
  ASSERT_TRUE(items.ok());
  EXPECT_TRUE(items->empty());
}

// The learner's client checks what it samples as the service checks what it receives: bytes
// the buffer holds for an item (here stored beside a valid trajectory, as a faulty or hostile
// server could send them) that fail Validate are DATA_LOSS, not trajectories to train on.
TEST(BufferServiceTest, ASampledTrajectoryThatFailsValidationIsDataLoss) {
  Served served = Serve(BufferOptions{});
  Trajectory invalid = *testing::MakeTrajectory("bad", 1);
  invalid.logprobs.pop_back();
  ASSERT_TRUE(served.server->buffer()
                  .Insert(testing::MakeTrajectory("bad", 1), absl::InfiniteFuture(),
                          std::make_shared<std::string>(Wire(invalid)))
                  .ok());
  auto client = BufferClient::Connect(served.address);
  ASSERT_TRUE(client.ok());
  auto items = (*client)->Sample(1, absl::Seconds(5));
  EXPECT_EQ(items.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(items.status().message().find("logprobs"), std::string_view::npos) << items.status();
}

// The sample stream hands over the stored bytes of an item the table let go of; an item
// that stays in the table for another sample must go out as a copy, intact both times.
TEST(BufferServiceTest, ItemSampledTwiceArrivesWholeBothTimes) {
  BufferOptions options;
  options.rate_limiter = RateLimiterKind::kRatio;
  options.samples_per_insert = 2;
  options.min_size_to_sample = 1;
  options.max_times_sampled = 2;
  Served served = Serve(options);
  auto client = BufferClient::Connect(served.address);
  ASSERT_TRUE(client.ok());
  const Trajectory t = *testing::MakeTrajectory("twice", 3);
  auto acks = (*client)->Insert({t});
  ASSERT_TRUE(acks.ok()) << acks.status();
  for (int round = 0; round < 2; ++round) {
    auto items = (*client)->Sample(1, absl::Seconds(5));
    ASSERT_TRUE(items.ok()) << items.status();
    ASSERT_EQ(items->size(), 1u) << "round " << round;
    EXPECT_EQ((*items)[0][0], t) << "round " << round;
  }
}

TEST(BufferServiceTest, InvalidTrajectoriesFailAloneNamingTheFieldAndAreCounted) {
  Served served = Serve(BufferOptions{});
  auto client = BufferClient::Connect(served.address);
  Trajectory bad = *testing::MakeTrajectory("bad-logprob");
  bad.logprobs[3] = 0.5f;  // a log-prob above 0
  Trajectory short_versions = *testing::MakeTrajectory("short");
  short_versions.versions.pop_back();
  const std::vector<std::string> wire = {
      Wire(*testing::MakeTrajectory("good1")), "\xff\xff\xff not a proto", Wire(bad),
      Wire(short_versions), Wire(*testing::MakeTrajectory("good2"))};
  auto acks = (*client)->InsertSerialized(wire, /*per_request=*/5);
  ASSERT_TRUE(acks.ok()) << acks.status();  // the stream survived
  ASSERT_EQ(acks->size(), 5u);
  EXPECT_EQ((*acks)[0].code(), 0);
  const int kInvalid = static_cast<int>(grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ((*acks)[1].code(), kInvalid);
  EXPECT_NE((*acks)[1].message().find("trajectories[1]"), std::string::npos);
  EXPECT_EQ((*acks)[2].code(), kInvalid);
  EXPECT_NE((*acks)[2].message().find("logprobs[3]"), std::string::npos) << (*acks)[2].message();
  EXPECT_NE((*acks)[2].message().find("bad-logprob"), std::string::npos);
  EXPECT_EQ((*acks)[3].code(), kInvalid);
  EXPECT_NE((*acks)[3].message().find("versions"), std::string::npos) << (*acks)[3].message();
  EXPECT_EQ((*acks)[4].code(), 0);

  auto info = (*client)->Info();
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->size(), 2);  // both good ones held
  EXPECT_GE(info->dropped().at("invalid"), 3);
  // The server keeps serving.
  acks = (*client)->Insert({*testing::MakeTrajectory("after")});
  ASSERT_TRUE(acks.ok());
  EXPECT_EQ((*acks)[0].code(), 0);
}

TEST(BufferServiceTest, AuthTokenRequiredWhenConfigured) {
  Served served = Serve(BufferOptions{}, "s3cret");
  auto anonymous = BufferClient::Connect(served.address);
  auto info = (*anonymous)->Info();
  EXPECT_EQ(info.status().code(), absl::StatusCode::kUnauthenticated) << info.status();
  auto acks = (*anonymous)->Insert({*testing::MakeTrajectory("x")});
  EXPECT_EQ(acks.status().code(), absl::StatusCode::kUnauthenticated) << acks.status();
  EXPECT_EQ((*anonymous)->Sample(1, absl::Milliseconds(10)).status().code(),
            absl::StatusCode::kUnauthenticated);

  auto wrong = BufferClient::Connect(served.address, RpcSecurity::Token("guess"));
  EXPECT_EQ((*wrong)->Info().status().code(), absl::StatusCode::kUnauthenticated);

  auto right = BufferClient::Connect(served.address, RpcSecurity::Token("s3cret"));
  acks = (*right)->Insert({*testing::MakeTrajectory("x")});
  ASSERT_TRUE(acks.ok()) << acks.status();
  EXPECT_EQ((*acks)[0].code(), 0);
  info = (*right)->Info();
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->size(), 1);  // the anonymous insert got nowhere
}

TEST(BufferServiceTest, FullBufferDelaysAcksUntilTheLearnerSamples) {
  BufferOptions options;
  options.max_size = 2;
  Served served = Serve(options);
  auto client = BufferClient::Connect(served.address);
  auto context = (*client)->NewContext();
  auto stream = (*client)->stub().Insert(context.get());
  for (int i = 0; i < 3; ++i) {
    v1::InsertRequest request;
    request.set_sequence(i);
    request.add_trajectories(Wire(*testing::MakeTrajectory(StrCat("t", i))));
    ASSERT_TRUE(stream->Write(request));
  }
  v1::InsertResponse response;
  ASSERT_TRUE(stream->Read(&response));  // two fit
  int acked = response.acks_size();
  if (acked < 2) {
    ASSERT_TRUE(stream->Read(&response));
    acked += response.acks_size();
  }
  EXPECT_EQ(acked, 2);
  // The third ack is the backpressure: it comes only once the learner made room.
  auto sampled = (*client)->Sample(1, absl::Seconds(5));
  ASSERT_TRUE(sampled.ok());
  ASSERT_TRUE(stream->Read(&response));
  EXPECT_EQ(response.acks(0).sequence(), 2u);
  EXPECT_EQ(response.acks(0).code(), 0);
  stream->WritesDone();
  EXPECT_TRUE(stream->Finish().ok());
}

}  // namespace
}  // namespace flywheel
