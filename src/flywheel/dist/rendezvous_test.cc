#include "flywheel/dist/rendezvous.h"

#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <optional>
#include <thread>
#include <vector>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "flywheel/core/strings.h"

namespace flywheel::dist {
namespace {

using std::chrono::milliseconds;

RendezvousOptions Options(int port, int world_size, int rank, milliseconds timeout) {
  RendezvousOptions options;
  options.host = "127.0.0.1";
  options.port = port;
  options.world_size = world_size;
  options.rank = rank;
  options.timeout = timeout;
  options.config_hash = "cfg-a";
  return options;
}

// Joins every options entry on its own thread and returns what each Join returned.
std::vector<absl::StatusOr<std::unique_ptr<Rendezvous>>> JoinAll(
    const std::vector<RendezvousOptions>& all) {
  std::vector<std::optional<absl::StatusOr<std::unique_ptr<Rendezvous>>>> results(all.size());
  std::vector<std::thread> threads;
  for (size_t i = 0; i < all.size(); ++i) {
    threads.emplace_back([&, i] { results[i].emplace(Rendezvous::Join(all[i])); });
  }
  for (auto& t : threads) t.join();
  std::vector<absl::StatusOr<std::unique_ptr<Rendezvous>>> out;
  for (auto& r : results) out.push_back(std::move(*r));
  return out;
}

int FreePort() {
  absl::StatusOr<int> port = PickFreePort();
  EXPECT_TRUE(port.ok()) << port.status();
  return port.value_or(0);
}

bool Contains(const absl::Status& s, std::string_view text) {
  return s.message().find(ToAbsl(text)) != absl::string_view::npos;
}

TEST(RendezvousOptionsTest, RankOutsideTheWorldIsRejected) {
  absl::Status s = Options(29500, 2, 2, milliseconds(1000)).Validate();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(Contains(s, "rank 2 is outside the world of 2")) << s;
  EXPECT_TRUE(Contains(s, "--rank must be in 0..1")) << s;
  s = Options(29500, 2, -1, milliseconds(1000)).Validate();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(Contains(s, "rank -1")) << s;
  EXPECT_EQ(Options(0, 2, 0, milliseconds(1000)).Validate().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(Options(29500, 2, 1, milliseconds(1000)).Validate().ok());
}

TEST(RendezvousTest, RanksJoinAndShareTheStore) {
  const int port = FreePort();
  auto joined =
      JoinAll({Options(port, 3, 0, milliseconds(20000)), Options(port, 3, 1, milliseconds(20000)),
               Options(port, 3, 2, milliseconds(20000))});
  for (auto& r : joined) ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ((*joined[2])->rank(), 2);
  EXPECT_EQ((*joined[2])->world_size(), 3);
  EXPECT_EQ((*joined[0])->port(), port);
  (*joined[1])->store()->set("from-1", std::vector<uint8_t>{42});
  EXPECT_EQ((*joined[2])->store()->get("from-1"), std::vector<uint8_t>{42});
  auto second = (*joined[0])->Connect();
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_EQ((*second)->get("from-1"), std::vector<uint8_t>{42});
}

TEST(RendezvousTest, RanksStartedBeforeRankZeroWaitForIt) {
  const int port = FreePort();
  std::optional<absl::StatusOr<std::unique_ptr<Rendezvous>>> early;
  std::thread rank1(
      [&] { early.emplace(Rendezvous::Join(Options(port, 2, 1, milliseconds(3000)))); });
  absl::SleepFor(absl::Milliseconds(1500));  // a launcher starts every rank at once, in any order
  auto rank0 = Rendezvous::Join(Options(port, 2, 0, milliseconds(20000)));
  rank1.join();
  ASSERT_TRUE(rank0.ok()) << rank0.status();
  ASSERT_TRUE(early->ok()) << early->status();
}

TEST(RendezvousTest, WorldOfOneNeedsNoPeers) {
  auto joined = Rendezvous::Join(Options(0, 1, 0, milliseconds(5000)));
  ASSERT_TRUE(joined.ok()) << joined.status();
  EXPECT_GT((*joined)->port(), 0);
}

TEST(RendezvousTest, UnreachableStoreFailsWithinTheTimeoutNamingTheAddress) {
  const int port = FreePort();  // nobody listens there
  const absl::Time start = absl::Now();
  auto joined = Rendezvous::Join(Options(port, 2, 1, milliseconds(1500)));
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(1300));  // kept trying until the timeout
  EXPECT_LT(absl::Now() - start, absl::Seconds(10));
  ASSERT_FALSE(joined.ok());
  EXPECT_EQ(joined.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_TRUE(Contains(joined.status(), StrCat("127.0.0.1:", port))) << joined.status();
  EXPECT_TRUE(Contains(joined.status(), "is rank 0 running")) << joined.status();
}

TEST(RendezvousTest, TwoProcessesWithTheSameRankBothFail) {
  const int port = FreePort();
  auto joined =
      JoinAll({Options(port, 3, 0, milliseconds(20000)), Options(port, 3, 1, milliseconds(20000)),
               Options(port, 3, 1, milliseconds(20000))});
  for (auto& r : joined) {
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), absl::StatusCode::kAlreadyExists) << r.status();
    EXPECT_TRUE(Contains(r.status(), "rank 1 was claimed by 2 processes")) << r.status();
  }
}

TEST(RendezvousTest, ConfigMismatchFailsEveryRankWithBothHashes) {
  const int port = FreePort();
  RendezvousOptions odd = Options(port, 2, 1, milliseconds(20000));
  odd.config_hash = "cfg-b";
  auto joined = JoinAll({Options(port, 2, 0, milliseconds(20000)), odd});
  for (auto& r : joined) {
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition) << r.status();
    EXPECT_TRUE(Contains(r.status(), "cfg-a")) << r.status();
    EXPECT_TRUE(Contains(r.status(), "cfg-b")) << r.status();
    EXPECT_TRUE(Contains(r.status(), "rank 1")) << r.status();
  }
}

TEST(RendezvousTest, WorldSizeMismatchIsAnError) {
  const int port = FreePort();
  auto joined =
      JoinAll({Options(port, 2, 0, milliseconds(20000)), Options(port, 3, 1, milliseconds(20000))});
  for (auto& r : joined) {
    ASSERT_FALSE(r.ok());
    EXPECT_TRUE(Contains(r.status(), "--world-size")) << r.status();
  }
}

TEST(RendezvousTest, MissingRanksAreNamedAtTheDeadline) {
  const int port = FreePort();
  auto joined =
      JoinAll({Options(port, 4, 0, milliseconds(1500)), Options(port, 4, 1, milliseconds(1500))});
  for (auto& r : joined) {
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), absl::StatusCode::kDeadlineExceeded) << r.status();
    EXPECT_TRUE(Contains(r.status(), "ranks 2, 3 of 4 did not arrive")) << r.status();
  }
}

}  // namespace
}  // namespace flywheel::dist
