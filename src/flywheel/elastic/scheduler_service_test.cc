#include "flywheel/elastic/scheduler_service.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "flywheel/elastic/control_plane.h"
#include "flywheel/elastic/local_channel.h"
#include "flywheel/elastic/scheduler_client.h"
#include "flywheel/learner/parallel_test_util.h"
#include "flywheel/rpc/auth.h"
#include "flywheel/rpc/test_certs.h"
#include "flywheel/scheduler/micro_step_queue.h"

namespace flywheel {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr char kConfig[] = "config-abc";
constexpr char kModel[] = "model-123";

absl::Time Soon() { return absl::Now() + absl::Seconds(20); }

std::string Message(const absl::Status& s) { return std::string(s.message()); }

// Two groups of four random trajectories: several micro-steps of the parallel tests' shapes.
std::vector<Trajectory> Groups(int64_t step) {
  std::mt19937 rng(static_cast<uint32_t>(300 + step));
  std::vector<Trajectory> out;
  for (int g = 0; g < 2; ++g) {
    for (int i = 0; i < 4; ++i) out.push_back(testing::RandomTrajectory(rng, step, g, i));
  }
  return out;
}

// The core's process: a queue, the service on 127.0.0.1:0, and a client to it.
class SchedulerServiceTest : public ::testing::Test {
 protected:
  void Start(absl::Duration heartbeat_timeout = absl::Seconds(30), const std::string& token = "") {
    StartWith(RpcSecurity::Token(token), RpcSecurity::Token(token), heartbeat_timeout);
  }
  void StartWith(const RpcSecurity& server_security, const RpcSecurity& client_security,
                 absl::Duration heartbeat_timeout = absl::Seconds(30)) {
    queue_ = std::make_unique<MicroStepQueue>(MicroStepQueueOptions::FromLearnerOptions(
        testing::ParallelLearnerOptions(PolicyLossKind::kDecoupledPpo)));
    ControlPlaneOptions plane;
    plane.config_hash = kConfig;
    plane.model_hash = kModel;
    plane.heartbeat_interval = absl::Milliseconds(50);
    plane.heartbeat_timeout = heartbeat_timeout;
    plane.store_address = "127.0.0.1:29999";
    auto created = ControlPlane::Create(plane, nullptr, LocalChannel::RequeueOn(queue_.get()));
    ASSERT_TRUE(created.ok()) << created.status();
    plane_ = std::move(*created);
    channel_ = std::make_unique<LocalChannel>(plane_.get(), queue_.get());
    SchedulerServerOptions options;
    options.security = server_security;
    auto server = SchedulerServer::Start(channel_.get(), options);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server);
    client_ = SchedulerClient::Connect(server_->address(), client_security).value();
  }

  // Begins step `step` (version = step) with the core joined and the data closed.
  void BeginFullStep(int64_t step) {
    ASSERT_TRUE(channel_->BeginStep(step, step, step).ok());
    ASSERT_TRUE(queue_->Join(0, step).ok());
    ASSERT_TRUE(queue_->Add(Groups(step)).ok());
    ASSERT_TRUE(queue_->Close().ok());
  }

  int Register() {
    auto r = client_->Register(kConfig, kModel, "test cell", absl::Seconds(5));
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? r->cell() : -1;
  }

  // The core claims and finishes whatever is left.
  void CoreRunsTheRest() {
    for (;;) {
      auto ms = queue_->Claim(0, Soon());
      ASSERT_TRUE(ms.ok()) << ms.status();
      if (*ms == nullptr) return;
      ASSERT_TRUE(queue_->Done(0, (*ms)->id).ok());
    }
  }

  std::unique_ptr<MicroStepQueue> queue_;
  std::unique_ptr<ControlPlane> plane_;
  std::unique_ptr<LocalChannel> channel_;
  std::unique_ptr<SchedulerServer> server_;
  std::unique_ptr<SchedulerClient> client_;
};

TEST_F(SchedulerServiceTest, RegisterRefusesOtherHashesNamingBoth) {
  Start();
  auto config = client_->Register("config-xyz", kModel, "cell a", absl::Seconds(5));
  EXPECT_EQ(config.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(Message(config.status()),
              HasSubstr("cell a refused: its config hash 'config-xyz' differs from the core's "
                        "'config-abc': start it with the core's config file"));
  auto both = client_->Register("config-xyz", "model-9", "cell b", absl::Seconds(5));
  EXPECT_EQ(both.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(Message(both.status()), HasSubstr("'model-9' differs from the core's 'model-123'"));
  EXPECT_THAT(Message(both.status()), HasSubstr("config hash 'config-xyz'"));
  EXPECT_TRUE(plane_->cells().empty());

  auto ok = client_->Register(kConfig, kModel, "cell c", absl::Seconds(5));
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(ok->cell(), 1);  // the core is 0
  EXPECT_EQ(ok->core_cell(), 0);
  EXPECT_EQ(ok->store_address(), "127.0.0.1:29999");
  EXPECT_EQ(ok->heartbeat_interval_ms(), 50);
  EXPECT_EQ(Register(), 2);  // ids are never reused
}

TEST_F(SchedulerServiceTest, CallsNeedTheBearerToken) {
  Start(absl::Seconds(30), "s3cret");
  auto anonymous = SchedulerClient::Connect(server_->address()).value();
  auto refused = anonymous->Register(kConfig, kModel, "x", absl::Seconds(5));
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kUnauthenticated);
  EXPECT_THAT(Message(refused.status()), HasSubstr("authorization: Bearer"));
  auto wrong = SchedulerClient::Connect(server_->address(), RpcSecurity::Token("guess")).value();
  EXPECT_EQ(wrong->Register(kConfig, kModel, "x", absl::Seconds(5)).status().code(),
            absl::StatusCode::kUnauthenticated);
  const int cell = Register();
  ASSERT_EQ(cell, 1);
  EXPECT_EQ(anonymous->Heartbeat(cell).status().code(), absl::StatusCode::kUnauthenticated);
  EXPECT_TRUE(client_->Heartbeat(cell).ok());
}

TEST_F(SchedulerServiceTest, CellsRegisterOverMutualTls) {
  testing::TestCerts certs;
  ASSERT_TRUE(certs.ok()) << "make_test_certs.sh failed (openssl?)";
  auto server = LoadRpcSecurity(certs.Server(/*mutual=*/true));
  auto client = LoadRpcSecurity(certs.Client("ca.pem", "client"));
  ASSERT_TRUE(server.ok() && client.ok()) << server.status() << client.status();
  server->auth_token = client->auth_token = "s3cret";
  StartWith(*server, *client);
  EXPECT_EQ(Register(), 1);
  auto plaintext = SchedulerClient::Connect(server_->address(), RpcSecurity::Token("s3cret"));
  ASSERT_TRUE(plaintext.ok());
  // Register waits for the core to come up, so the failed handshakes end in its deadline.
  const absl::StatusCode refused =
      (*plaintext)->Register(kConfig, kModel, "x", absl::Seconds(1)).status().code();
  EXPECT_TRUE(refused == absl::StatusCode::kUnavailable ||
              refused == absl::StatusCode::kDeadlineExceeded)
      << refused;
}

TEST_F(SchedulerServiceTest, ASatelliteJoinsClaimsAndReducesOverTheWire) {
  Start();
  const int cell = Register();
  auto hb = client_->Heartbeat(cell);
  ASSERT_TRUE(hb.ok()) << hb.status();
  EXPECT_EQ(hb->role(), v1::CELL_ROLE_ROLLOUT);
  EXPECT_EQ(hb->step(), -1);
  ASSERT_TRUE(plane_->SetRole(cell, v1::CELL_ROLE_TRAIN).ok());
  EXPECT_EQ(plane_->SetRole(9, v1::CELL_ROLE_TRAIN).code(), absl::StatusCode::kNotFound);

  BeginFullStep(0);
  hb = client_->Heartbeat(cell);
  EXPECT_EQ(hb->role(), v1::CELL_ROLE_TRAIN);
  EXPECT_EQ(hb->step(), 0);
  auto joined = client_->Join(cell, 0, Soon());
  ASSERT_TRUE(joined.ok()) << joined.status();
  EXPECT_EQ(joined->version(), 0);

  auto ms = client_->Claim(cell, 0, Soon());
  ASSERT_TRUE(ms.ok()) << ms.status();
  ASSERT_NE(*ms, nullptr);
  EXPECT_EQ((*ms)->id, 0);
  EXPECT_EQ((*ms)->step, 0);
  EXPECT_GT((*ms)->batch.rows, 0);
  ASSERT_TRUE(client_->Done(cell, 0, (*ms)->id).ok());
  CoreRunsTheRest();
  auto none = client_->Claim(cell, 0, Soon());
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_EQ(*none, nullptr);

  auto participants = client_->AwaitParticipants(cell, 0, Soon());
  ASSERT_TRUE(participants.ok()) << participants.status();
  EXPECT_THAT(participants->cells, ElementsAre(0, cell));
  EXPECT_EQ(participants->epoch, 0);
  EXPECT_GT(participants->normaliser, 0);
  EXPECT_THAT(queue_->report().ran_by.at(cell), ElementsAre(0));

  // A join that waits for the next step: it has not begun within the deadline.
  auto early = client_->Join(cell, 1, absl::Now() + absl::Milliseconds(200));
  EXPECT_EQ(early.status().code(), absl::StatusCode::kDeadlineExceeded);
}

TEST_F(SchedulerServiceTest, BadCallsAreRefusedClearly) {
  Start();
  const int cell = Register();
  // Unknown cell.
  auto unknown = client_->Heartbeat(42);
  EXPECT_EQ(unknown.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(Message(unknown.status()), HasSubstr("unknown cell 42: call Register first"));
  EXPECT_EQ(client_->Done(42, 0, 0).code(), absl::StatusCode::kNotFound);

  BeginFullStep(3);
  // Wrong steps.
  auto future = client_->Claim(cell, 5, Soon());
  EXPECT_EQ(future.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(Message(future.status()),
              HasSubstr("cell 1 claims in step 5 but the current step is 3"));
  auto past = client_->Join(cell, 2, Soon());
  EXPECT_EQ(past.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(Message(past.status()), HasSubstr("joins step 2 but the current step is 3"));
  EXPECT_EQ(client_->Done(cell, 4, 0).code(), absl::StatusCode::kFailedPrecondition);
  // Claim without Join.
  auto unjoined = client_->Claim(cell, 3, Soon());
  EXPECT_EQ(unjoined.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(Message(unjoined.status()), HasSubstr("without Join"));

  ASSERT_TRUE(client_->Join(cell, 3, Soon()).ok());
  // A micro-step the step does not have, or that the cell did not claim.
  const absl::Status no_such = client_->Done(cell, 3, 999);
  EXPECT_EQ(no_such.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Message(no_such), HasSubstr("has no micro-step 999"));
  auto core_ms = queue_->Claim(0, Soon());
  ASSERT_TRUE(core_ms.ok() && *core_ms != nullptr);
  const absl::Status not_yours = client_->Done(cell, 3, (*core_ms)->id);
  EXPECT_EQ(not_yours.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(Message(not_yours), HasSubstr("claimed by cell 0, not by cell 1"));
  EXPECT_TRUE(plane_->cells()[0].dead == false);  // bad calls do not kill
}

// A satellite that claimed two micro-steps and finished one stops heartbeating: it is declared
// dead, both go back, the step completes without it and its later calls are refused.
TEST_F(SchedulerServiceTest, ASilentCellIsDeclaredDeadAndItsClaimsRequeued) {
  Start(absl::Seconds(1));
  SchedulerClient* client = client_.get();
  const int survivor = Register();
  const int victim = Register();
  // The survivor keeps beating; the victim beats only until it "dies".
  HeartbeatSender survivor_beats(client, survivor, absl::Milliseconds(50));
  auto victim_beats = std::make_unique<HeartbeatSender>(client, victim, absl::Milliseconds(50));
  BeginFullStep(0);
  ASSERT_TRUE(client_->Join(victim, 0, Soon()).ok());
  ASSERT_TRUE(client_->Join(survivor, 0, Soon()).ok());
  auto a = client_->Claim(victim, 0, Soon());
  auto b = client_->Claim(victim, 0, Soon());
  ASSERT_TRUE(a.ok() && b.ok() && *a != nullptr && *b != nullptr);
  ASSERT_TRUE(client_->Done(victim, 0, (*a)->id).ok());
  // Still alive well past the timeout while it beats.
  absl::SleepFor(absl::Milliseconds(1200));
  EXPECT_FALSE(plane_->cells()[1].dead);

  victim_beats.reset();
  ASSERT_TRUE(plane_->AwaitDead(victim, Soon()).ok());
  EXPECT_EQ(plane_->cells()[1].requeued, 2);
  EXPECT_FALSE(plane_->cells()[0].dead);
  const StepReport report = queue_->report();
  EXPECT_EQ(report.requeued, 2);
  EXPECT_THAT(report.dead, ElementsAre(victim));

  auto refused = client_->Claim(victim, 0, Soon());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(Message(refused.status()), HasSubstr("declared dead"));
  EXPECT_EQ(client_->Heartbeat(victim).status().code(), absl::StatusCode::kFailedPrecondition);

  CoreRunsTheRest();
  auto participants = client_->AwaitParticipants(survivor, 0, Soon());
  ASSERT_TRUE(participants.ok()) << participants.status();
  EXPECT_THAT(participants->cells, ElementsAre(0, survivor));
  EXPECT_EQ(queue_->report().ran_by.count(victim), 0u);
}

TEST(ControlPlaneOptionsTest, Validate) {
  ControlPlaneOptions o;
  // No hashes.
  EXPECT_EQ(o.Validate().code(), absl::StatusCode::kInvalidArgument);
  o.config_hash = "c";
  o.model_hash = "m";
  EXPECT_TRUE(o.Validate().ok());
  o.heartbeat_timeout = o.heartbeat_interval;
  EXPECT_THAT(Message(o.Validate()), HasSubstr("must cover two heartbeats"));
}

TEST_F(SchedulerServiceTest, HeartbeatsReportTheCellAndCarryItsGrant) {
  Start();
  const int cell = Register();
  v1::HeartbeatRequest report;
  report.set_cell(cell);
  report.set_role(v1::CELL_ROLE_ROLLOUT);
  report.set_dispatched(12);
  report.set_finished(5);
  report.set_weights_version(3);
  ASSERT_TRUE(plane_->SetAdmission(cell, 16, 3).ok());
  EXPECT_EQ(plane_->SetAdmission(9, 1, 0).code(), absl::StatusCode::kNotFound);
  auto hb = client_->Heartbeat(report, absl::Seconds(5));
  ASSERT_TRUE(hb.ok()) << hb.status();
  EXPECT_EQ(hb->admit_until(), 16);
  EXPECT_EQ(hb->admit_version(), 3);
  CellInfo info = plane_->cells().at(0);
  EXPECT_EQ(info.reported_role, v1::CELL_ROLE_ROLLOUT);
  EXPECT_EQ(info.dispatched, 12);
  EXPECT_EQ(info.finished, 5);
  EXPECT_EQ(info.weights_version, 3);

  // An older report (reordered on the wire) never takes counts back.
  report.set_dispatched(10);
  report.set_finished(4);
  ASSERT_TRUE(client_->Heartbeat(report, absl::Seconds(5)).ok());
  info = plane_->cells().at(0);
  EXPECT_EQ(info.dispatched, 12);
  EXPECT_EQ(info.finished, 5);

  // Impossible counts are refused, naming them.
  report.set_finished(20);
  auto bad = client_->Heartbeat(report, absl::Seconds(5));
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Message(bad.status()), HasSubstr("reports 20 of 10 episodes finished"));
}

TEST_F(SchedulerServiceTest, LeaveGivesTheClaimsBackAndExitUnregisters) {
  Start();
  const int cell = Register();
  BeginFullStep(0);
  ASSERT_TRUE(client_->Join(cell, 0, Soon()).ok());
  auto ms = client_->Claim(cell, 0, Soon());
  ASSERT_TRUE(ms.ok() && *ms != nullptr) << ms.status();
  // A step other than the current one is refused.
  EXPECT_EQ(client_->Leave(cell, 3, false).status().code(), absl::StatusCode::kFailedPrecondition);
  auto left = client_->Leave(cell, 0, false);
  ASSERT_TRUE(left.ok()) << left.status();
  EXPECT_EQ(*left, 1);
  EXPECT_EQ(queue_->report().requeued, 1);
  // The core runs everything, the satellite included none: it is not a participant.
  CoreRunsTheRest();
  auto participants = queue_->AwaitParticipants(0, Soon());
  ASSERT_TRUE(participants.ok()) << participants.status();
  EXPECT_THAT(participants->cells, ElementsAre(0));

  // Still registered: it may join the next step. Exit unregisters it at once.
  BeginFullStep(1);
  ASSERT_TRUE(client_->Join(cell, 1, Soon()).ok());
  ms = client_->Claim(cell, 1, Soon());
  ASSERT_TRUE(ms.ok() && *ms != nullptr) << ms.status();
  left = client_->Leave(cell, -1, true);
  ASSERT_TRUE(left.ok()) << left.status();
  EXPECT_EQ(*left, 1);
  const CellInfo info = plane_->cells().at(0);
  EXPECT_TRUE(info.dead);
  EXPECT_TRUE(info.left);
  EXPECT_EQ(client_->Heartbeat(cell).status().code(), absl::StatusCode::kFailedPrecondition);
  CoreRunsTheRest();
  EXPECT_TRUE(queue_->AwaitParticipants(1, Soon()).ok());
}

}  // namespace
}  // namespace flywheel
