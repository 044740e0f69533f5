#include "flywheel/dist/collectives.h"

#include <gtest/gtest.h>
#include <torch/csrc/distributed/c10d/HashStore.hpp>

#include <functional>
#include <thread>
#include <vector>

namespace flywheel::dist {
namespace {

// Runs fn(rank, communicator) on `size` threads that form one group over a HashStore.
void RunCollectiveGroup(int size, const std::function<void(int, Communicator&)>& fn) {
  auto store = c10::make_intrusive<c10d::HashStore>();
  std::vector<std::thread> threads;
  for (int rank = 0; rank < size; ++rank) {
    threads.emplace_back([&, rank] {
      CommunicatorOptions options;
      options.timeout = std::chrono::milliseconds(20000);
      options.name = "test group";
      auto comm = Communicator::Create(store, rank, size, options);
      ASSERT_TRUE(comm.ok()) << comm.status();
      fn(rank, **comm);
    });
  }
  for (auto& t : threads) t.join();
}

TEST(BroadcastBytesTest, EveryRankGetsTheRootsBytes) {
  std::string batch(100003, '\0');
  for (size_t i = 0; i < batch.size(); ++i) batch[i] = static_cast<char>(i * 31 % 251);
  RunCollectiveGroup(3, [&](int rank, Communicator& comm) {
    // Non-root ranks start with other contents and sizes, longer and shorter.
    std::string bytes = rank == 1 ? batch : std::string(rank == 0 ? 7 : 200000, 'x');
    ASSERT_TRUE(BroadcastBytes(comm, bytes, 1).ok());
    EXPECT_EQ(bytes, batch);
  });
}

TEST(BroadcastBytesTest, EmptyBytesStayEmpty) {
  RunCollectiveGroup(2, [](int rank, Communicator& comm) {
    std::string bytes = rank == 0 ? "" : "stale";
    ASSERT_TRUE(BroadcastBytes(comm, bytes, 0).ok());
    EXPECT_EQ(bytes, "");
  });
}

TEST(AgreeOkTest, OkWhenEveryRankIsOk) {
  RunCollectiveGroup(3, [](int, Communicator& comm) { EXPECT_TRUE(AgreeOk(comm, true).ok()); });
}

TEST(AgreeOkTest, EveryRankLearnsWhichRanksFailed) {
  RunCollectiveGroup(4, [](int rank, Communicator& comm) {
    absl::Status s = AgreeOk(comm, rank != 1 && rank != 3);
    EXPECT_EQ(s.code(), absl::StatusCode::kAborted) << s;
    EXPECT_NE(s.message().find("ranks 1, 3 of 4 failed"), absl::string_view::npos) << s;
  });
}

}  // namespace
}  // namespace flywheel::dist
