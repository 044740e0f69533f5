#include "flywheel/dist/liveness.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>
#include <torch/csrc/distributed/c10d/HashStore.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

#include "absl/time/clock.h"
#include "flywheel/core/strings.h"
#include "flywheel/dist/communicator.h"
#include "flywheel/dist/membership.h"
#include "flywheel/dist/rendezvous.h"
#include "flywheel/dist/spawn_self_test_util.h"

namespace flywheel::dist {
namespace {

LivenessOptions FastOptions() {
  LivenessOptions options;
  options.interval = absl::Milliseconds(50);
  options.stale_after = absl::Milliseconds(400);
  return options;
}

void SetHeartbeat(c10d::Store& store, int id, absl::Time t) {
  const std::string value = StrCat(absl::ToUnixMicros(t));
  store.set(StrCat("heartbeat/", id), std::vector<uint8_t>(value.begin(), value.end()));
}

bool StatusContains(const absl::Status& s, std::string_view text) {
  return s.message().find(ToAbsl(text)) != absl::string_view::npos;
}

const absl::Status kCollectiveError = absl::InternalError("all-reduce: Connection closed by peer");

TEST(LivenessOptionsTest, StaleAfterMustCoverTwoHeartbeats) {
  LivenessOptions options;
  options.interval = absl::Seconds(1);
  options.stale_after = absl::Milliseconds(1500);
  EXPECT_EQ(options.Validate().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(LivenessOptions().Validate().ok());
}

TEST(LivenessTest, HeartbeatsKeepPeersAlive) {
  auto store = c10::make_intrusive<c10d::HashStore>();
  auto a = Liveness::Start(store, 0, {0, 1}, FastOptions());
  auto b = Liveness::Start(store, 1, {0, 1}, FastOptions());
  ASSERT_TRUE(a.ok() && b.ok());
  // Wait past stale_after: a live peer keeps beating.
  const absl::Time until = absl::Now() + absl::Milliseconds(600);
  while (absl::Now() < until || (*b)->beats() < 5) {
    ASSERT_LT(absl::Now(), until + absl::Seconds(10)) << "heartbeat thread does not beat";
    absl::SleepFor(absl::Milliseconds(20));
  }
  auto peers = (*a)->Check();
  ASSERT_TRUE(peers.ok()) << peers.status();
  ASSERT_EQ(peers->size(), 1u);
  EXPECT_EQ((*peers)[0].id, 1);
  EXPECT_EQ((*peers)[0].state, Liveness::State::kAlive);
}

TEST(LivenessTest, ExplainNamesAPeerWithAStaleHeartbeat) {
  auto store = c10::make_intrusive<c10d::HashStore>();
  auto a = Liveness::Start(store, 0, {0, 1, 2}, FastOptions());
  auto b = Liveness::Start(store, 1, {0, 1, 2}, FastOptions());
  ASSERT_TRUE(a.ok() && b.ok());
  SetHeartbeat(*store, 2, absl::Now() - absl::Seconds(5));
  absl::Status s = (*a)->Explain(kCollectiveError);
  EXPECT_EQ(s.code(), absl::StatusCode::kInternal);
  EXPECT_TRUE(StatusContains(s, "Connection closed by peer; rank 2 stopped (no heartbeat for 5."))
      << s;
  EXPECT_FALSE(StatusContains(s, "rank 1")) << s;
}

TEST(LivenessTest, ExplainWaitsForARecentlyKilledPeerToTurnStale) {
  auto store = c10::make_intrusive<c10d::HashStore>();
  auto a = Liveness::Start(store, 0, {0, 3}, FastOptions());
  ASSERT_TRUE(a.ok());
  SetHeartbeat(*store, 3, absl::Now());  // its last heartbeat, just before it died
  const absl::Time start = absl::Now();
  absl::Status s = (*a)->Explain(kCollectiveError);
  const absl::Duration took = absl::Now() - start;
  EXPECT_TRUE(StatusContains(s, "rank 3 stopped (no heartbeat for 0.4")) << s;
  EXPECT_GE(took, absl::Milliseconds(350));
  EXPECT_LT(took, absl::Seconds(5));
}

TEST(LivenessTest, ExplainSaysWhenEveryPeerIsAlive) {
  auto store = c10::make_intrusive<c10d::HashStore>();
  auto a = Liveness::Start(store, 0, {0, 1}, FastOptions());
  auto b = Liveness::Start(store, 1, {0, 1}, FastOptions());
  ASSERT_TRUE(a.ok() && b.ok());
  absl::Status s = (*a)->Explain(kCollectiveError);
  EXPECT_EQ(s.code(), absl::StatusCode::kInternal);
  EXPECT_TRUE(StatusContains(s, "no rank stopped")) << s;
  EXPECT_TRUE((*a)->Explain(absl::OkStatus()).ok());
}

TEST(LivenessTest, ARankAloneReturnsTheErrorAtOnce) {
  auto store = c10::make_intrusive<c10d::HashStore>();
  auto a = Liveness::Start(store, 0, {0}, FastOptions());
  ASSERT_TRUE(a.ok());
  EXPECT_EQ((*a)->Explain(kCollectiveError), kCollectiveError);
}

TEST(LivenessTest, APeerThatStoppedOnPurposeLeft) {
  auto store = c10::make_intrusive<c10d::HashStore>();
  auto a = Liveness::Start(store, 0, {0, 1, 2}, FastOptions());
  auto b = Liveness::Start(store, 1, {0, 1, 2}, FastOptions());
  ASSERT_TRUE(a.ok() && b.ok());
  (*b)->Stop();
  absl::Status s = (*a)->Explain(kCollectiveError);
  EXPECT_TRUE(StatusContains(s, "rank 1 left the group")) << s;
  (*a)->SetPeers({0, 2});
  s = (*a)->Explain(kCollectiveError);
  EXPECT_TRUE(StatusContains(s, "rank 2 never sent a heartbeat")) << s;
}

// --- Real processes: one rank is killed with SIGKILL in the middle of a loop of all-reduces.

constexpr char kChildEnv[] = "FLYWHEEL_LIVENESS_CHILD";  // "rank,world_size,port"
constexpr int kChildExitOnError = 3;

// The body of each child process: join, beat, all-reduce until a collective fails, then print
// the explained error and exit non-zero.
TEST(LivenessChild, AllReduceUntilAPeerDies) {
  const char* spec = std::getenv(kChildEnv);
  if (spec == nullptr) GTEST_SKIP() << "runs as a child of LivenessProcessTest";
  int rank = 0, world = 0, port = 0;
  ASSERT_EQ(std::sscanf(spec, "%d,%d,%d", &rank, &world, &port), 3);
  const auto die = [&](const absl::Status& s) {
    std::fprintf(stderr, "flywheel test child rank %d: %s\n", rank,
                 std::string(s.message()).c_str());
    std::fflush(stderr);
    std::_Exit(kChildExitOnError);
  };
  RendezvousOptions options;
  options.port = port;
  options.world_size = world;
  options.rank = rank;
  options.timeout = std::chrono::milliseconds(30000);
  auto rendezvous = Rendezvous::Join(options);
  if (!rendezvous.ok()) die(rendezvous.status());
  auto connection = (*rendezvous)->Connect();
  if (!connection.ok()) die(connection.status());
  std::vector<int> members;
  for (int i = 0; i < world; ++i) members.push_back(i);
  LivenessOptions liveness_options;
  liveness_options.stale_after = absl::Seconds(2);
  auto liveness = Liveness::Start(*connection, rank, members, liveness_options);
  if (!liveness.ok()) die(liveness.status());
  MembershipOptions membership_options;
  membership_options.group.timeout = std::chrono::milliseconds(20000);
  membership_options.group.name = "liveness test";
  Membership membership((*rendezvous)->store(), membership_options);
  auto comm = membership.FormGroup(0, members, rank);
  if (!comm.ok()) die(comm.status());
  const absl::Time give_up = absl::Now() + absl::Seconds(120);
  for (int step = 0; absl::Now() < give_up; ++step) {
    torch::Tensor t = torch::ones({4096});
    absl::Status s = (*comm)->AllReduceSumNow(t);
    if (!s.ok()) {
      absl::Status explained = (*liveness)->Explain(s);
      (*rendezvous)->Close(absl::Now() + absl::Seconds(5));
      die(explained);
    }
    if (t[0].item<float>() != static_cast<float>(world)) die(absl::InternalError("wrong sum"));
    if (step == 20) (*rendezvous)->store()->set(StrCat("progress/", rank), std::vector<uint8_t>{1});
  }
  die(absl::DeadlineExceededError("no peer died within 120 s"));
}

class LivenessProcessTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() / StrCat("flywheel_liveness_test_", getpid());
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override {
    for (pid_t pid : pids_) {
      if (pid > 0) {
        kill(pid, SIGKILL);
        waitpid(pid, nullptr, 0);
      }
    }
    std::filesystem::remove_all(dir_);
  }

  // Starts this test binary as child `rank`, its stderr into a file.
  void Spawn(int rank, int world, int port) {
    absl::StatusOr<pid_t> pid =
        testing::SpawnSelf("LivenessChild.*", {StrCat(kChildEnv, "=", rank, ",", world, ",", port)},
                           (dir_ / StrCat("rank", rank, ".stderr")).string());
    ASSERT_TRUE(pid.ok()) << pid.status();
    pids_.push_back(*pid);
  }

  std::string Stderr(int rank) {
    return testing::ReadTextFile((dir_ / StrCat("rank", rank, ".stderr")).string());
  }

  // Waits for child `rank` to exit until the deadline; returns its wait status, or -1.
  int Await(int rank, absl::Time deadline) {
    while (true) {
      int status = 0;
      pid_t got = waitpid(pids_[rank], &status, WNOHANG);
      if (got == pids_[rank]) {
        pids_[rank] = -1;
        return status;
      }
      if (absl::Now() >= deadline) return -1;
      absl::SleepFor(absl::Milliseconds(20));
    }
  }

  void KillAndExpect(int victim, const std::string& expected);

  std::filesystem::path dir_;
  std::vector<pid_t> pids_;
};

// Starts kWorld ranks, waits until each is in its all-reduce loop, SIGKILLs `victim`, and checks
// that the others exit non-zero within 60 s with `expected` in their stderr.
void LivenessProcessTest::KillAndExpect(int victim, const std::string& expected) {
  constexpr int kWorld = 3;
  const int kVictim = victim;
  absl::StatusOr<int> port = PickFreePort();
  ASSERT_TRUE(port.ok()) << port.status();
  for (int rank = 0; rank < kWorld; ++rank) Spawn(rank, kWorld, *port);

  // Wait until every rank is in its all-reduce loop.
  {
    c10d::TCPStoreOptions options;
    options.port = static_cast<uint16_t>(*port);
    options.timeout = std::chrono::milliseconds(60000);
    c10d::TCPStore store("127.0.0.1", options);
    std::vector<std::string> keys;
    for (int rank = 0; rank < kWorld; ++rank) keys.push_back(StrCat("progress/", rank));
    ASSERT_NO_THROW(store.wait(keys, std::chrono::milliseconds(60000)))
        << "ranks did not start their loops; stderr of rank 0: " << Stderr(0);
  }
  const absl::Time killed = absl::Now();
  ASSERT_EQ(kill(pids_[kVictim], SIGKILL), 0);
  ASSERT_NE(Await(kVictim, killed + absl::Seconds(10)), -1);

  for (int rank = 0; rank < kWorld; ++rank) {
    if (rank == kVictim) continue;
    const int status = Await(rank, killed + absl::Seconds(60));
    ASSERT_NE(status, -1) << "rank " << rank << " still runs 60 s after rank " << kVictim
                          << " was killed; its stderr: " << Stderr(rank);
    EXPECT_TRUE(WIFEXITED(status))
        << "rank " << rank << " died of signal " << (WIFSIGNALED(status) ? WTERMSIG(status) : 0)
        << ": " << Stderr(rank);
    if (WIFEXITED(status)) {
      EXPECT_EQ(WEXITSTATUS(status), kChildExitOnError);
    }
    std::cout << "rank " << rank << " exited " << absl::FormatDuration(absl::Now() - killed)
              << " after the kill: " << Stderr(rank);
    EXPECT_NE(Stderr(rank).find(expected), std::string::npos)
        << "rank " << rank << ": " << Stderr(rank);
  }
  EXPECT_LT(absl::Now() - killed, absl::Seconds(60));
}

TEST_F(LivenessProcessTest, SurvivorsOfASigkilledRankFailNamingIt) {
  KillAndExpect(2, "rank 2 stopped (no heartbeat for");
}

// Rank 0 hosts the store: with it gone the heartbeats cannot be read, and the error says so.
TEST_F(LivenessProcessTest, SurvivorsOfASigkilledRankZeroFailNamingIt) {
  KillAndExpect(0, "rank 0 probably stopped: the store it hosts is unreachable");
}

}  // namespace
}  // namespace flywheel::dist
