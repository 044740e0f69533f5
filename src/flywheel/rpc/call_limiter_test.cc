#include "flywheel/rpc/call_limiter.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <thread>

#include "absl/time/clock.h"
#include "flywheel/core/strings.h"
#include "flywheel/v1/buffer_service.grpc.pb.h"

namespace flywheel {
namespace {

using ::testing::HasSubstr;

// A service with the buffer's wire types whose handlers use a CallLimiter the way flywheel's
// services do. Insert: one response per request, after sleeping the request's timeout_ms (the
// server working on the client's behalf). Sample: writes 256 KiB responses until the client
// stops taking them.
class LimitedService final : public v1::BufferService::Service {
 public:
  LimitedService(const std::string& name, const ServerLimits& limits)
      : limiter(name, limits, "test.") {}

  grpc::Status Insert(
      grpc::ServerContext* context,
      grpc::ServerReaderWriter<v1::InsertResponse, v1::InsertRequest>* stream) override {
    CallSlot slot = limiter.Admit(context, CallKind::kStream);
    if (!slot.admitted()) return slot.refusal();
    v1::InsertRequest request;
    while (stream->Read(&request)) {
      if (grpc::Status s = slot.RefuseIfTooLarge(static_cast<int64_t>(request.ByteSizeLong()));
          !s.ok()) {
        return s;
      }
      slot.Received();
      slot.Owe(1);
      absl::SleepFor(absl::Milliseconds(request.timeout_ms()));
      v1::InsertResponse response;
      response.add_acks()->set_sequence(request.sequence());
      {
        auto writing = slot.Writing();
        if (!stream->Write(response)) return grpc::Status::OK;
      }
      slot.Owe(-1);
    }
    return grpc::Status::OK;
  }

  grpc::Status Sample(
      grpc::ServerContext* context,
      grpc::ServerReaderWriter<v1::SampleResponse, v1::SampleRequest>* stream) override {
    CallSlot slot = limiter.Admit(context, CallKind::kStream);
    if (!slot.admitted()) return slot.refusal();
    v1::SampleRequest request;
    if (!stream->Read(&request)) return grpc::Status::OK;
    slot.Received();
    v1::SampleResponse response;
    response.add_items()->add_trajectories(std::string(256 << 10, 'x'));
    for (;;) {
      auto writing = slot.Writing();
      if (!stream->Write(response)) break;
      written_bytes += 256 << 10;
    }
    return grpc::Status::OK;
  }

  CallLimiter limiter;
  std::atomic<int64_t> written_bytes{0};
};

struct Served {
  std::unique_ptr<LimitedService> service;
  std::unique_ptr<grpc::Server> server;
  std::unique_ptr<v1::BufferService::Stub> stub;
};

Served Serve(const std::string& name, const ServerLimits& limits) {
  EXPECT_TRUE(limits.Validate("").ok());
  Served s;
  s.service = std::make_unique<LimitedService>(name, limits);
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
  builder.RegisterService(s.service.get());
  limits.ApplyTo(builder, name, MessageSizeCheck::kByHandler);
  s.server = builder.BuildAndStart();
  grpc::ChannelArguments args;
  args.SetMaxSendMessageSize(64 << 20);
  s.stub = v1::BufferService::NewStub(grpc::CreateCustomChannel(
      StrCat("127.0.0.1:", port), grpc::InsecureChannelCredentials(), args));
  return s;
}

using InsertStream = grpc::ClientReaderWriter<v1::InsertRequest, v1::InsertResponse>;

// Opens an insert stream and waits for the answer to one request: the call is in a handler.
std::unique_ptr<InsertStream> OpenAdmitted(Served& s, grpc::ClientContext* context) {
  auto stream = s.stub->Insert(context);
  v1::InsertRequest request;
  v1::InsertResponse response;
  EXPECT_TRUE(stream->Write(request));
  EXPECT_TRUE(stream->Read(&response));
  return stream;
}

TEST(CallLimiterTest, CallsBeyondTheLimitAreRefusedAndCounted) {
  ServerLimits limits;
  limits.max_concurrent_calls = 2;
  Served s = Serve("test_admission", limits);
  grpc::ClientContext c1, c2, c3;
  auto s1 = OpenAdmitted(s, &c1);
  auto s2 = OpenAdmitted(s, &c2);
  EXPECT_EQ(s.service->limiter.active_calls(), 2);
  auto s3 = s.stub->Insert(&c3);
  s3->WritesDone();
  const grpc::Status refused = s3->Finish();
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_THAT(refused.error_message(),
              HasSubstr("test_admission: busy with 2 calls, its test.max_concurrent_calls"));
  EXPECT_EQ(s.service->limiter.refused("too_many_calls"), 1);
  // A freed slot takes the next call.
  s1->WritesDone();
  EXPECT_TRUE(s1->Finish().ok());
  grpc::ClientContext c4;
  auto s4 = OpenAdmitted(s, &c4);
  s4->WritesDone();
  EXPECT_TRUE(s4->Finish().ok());
  s2->WritesDone();
  EXPECT_TRUE(s2->Finish().ok());
  EXPECT_EQ(s.service->limiter.refused("too_many_calls"), 1);
}

TEST(CallLimiterTest, StreamThatSendsNothingIsCancelledButOneTheServerWorksOnIsNot) {
  ServerLimits limits;
  limits.idle_timeout = absl::Milliseconds(300);
  Served s = Serve("test_idle", limits);
  // The server sleeps 900 ms on this request (3 idle timeouts): its time, not the client's.
  grpc::ClientContext working_context;
  auto working = s.stub->Insert(&working_context);
  v1::InsertRequest slow;
  slow.set_timeout_ms(900);
  slow.set_sequence(7);
  ASSERT_TRUE(working->Write(slow));

  grpc::ClientContext idle_context;
  const absl::Time start = absl::Now();
  auto idle = OpenAdmitted(s, &idle_context);
  v1::InsertResponse response;
  EXPECT_FALSE(idle->Read(&response));  // the watchdog cancels it
  EXPECT_EQ(idle->Finish().error_code(), grpc::StatusCode::CANCELLED);
  const absl::Duration took = absl::Now() - start;
  EXPECT_GE(took, absl::Milliseconds(300));
  EXPECT_LT(took, absl::Seconds(3));

  ASSERT_TRUE(working->Read(&response));
  EXPECT_EQ(response.acks(0).sequence(), 7u);
  working->WritesDone();
  EXPECT_TRUE(working->Finish().ok());
  EXPECT_EQ(s.service->limiter.refused("idle"), 1);
}

TEST(CallLimiterTest, ClientThatDoesNotReadIsCancelledAndHoldsOnlyTheWindow) {
  ServerLimits limits;
  limits.idle_timeout = absl::Milliseconds(300);
  Served s = Serve("test_unread", limits);
  grpc::ClientContext context;
  auto stream = s.stub->Sample(&context);
  ASSERT_TRUE(stream->Write(v1::SampleRequest()));
  // Never read: the server's Write blocks once the HTTP/2 windows are full.
  const absl::Time deadline = absl::Now() + absl::Seconds(5);
  while (s.service->limiter.refused("idle") == 0 && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(20));
  }
  EXPECT_EQ(s.service->limiter.refused("idle"), 1);
  // What went out before the writes blocked: flow-control windows, not an unbounded queue.
  EXPECT_LT(s.service->written_bytes.load(), 32 << 20);
  context.TryCancel();
  stream->Finish();
}

TEST(CallLimiterTest, TooLargeMessagesAreRefusedNamingTheKnobAndCounted) {
  ServerLimits limits;
  limits.max_message_bytes = 64 << 10;
  limits.memory_quota_bytes = 64 << 20;
  Served s = Serve("test_too_large", limits);
  for (int i = 0; i < 3; ++i) {
    grpc::ClientContext context;
    auto stream = s.stub->Insert(&context);
    v1::InsertRequest big;
    big.add_trajectories(std::string(100 << 10, 'x'));
    stream->Write(big);
    stream->WritesDone();
    v1::InsertResponse response;
    while (stream->Read(&response)) {
    }
    const grpc::Status status = stream->Finish();
    EXPECT_EQ(status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
    EXPECT_THAT(status.error_message(),
                HasSubstr("test_too_large: refused a message of 102404 bytes, above "
                          "test.max_message_bytes (65536)"));
  }
  EXPECT_EQ(s.service->limiter.refused("message_too_large"), 3);
  // Within the limit: served.
  grpc::ClientContext context;
  auto stream = OpenAdmitted(s, &context);
  stream->WritesDone();
  EXPECT_TRUE(stream->Finish().ok());
  EXPECT_EQ(s.service->limiter.refused("message_too_large"), 3);
}

}  // namespace
}  // namespace flywheel
