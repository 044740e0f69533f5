#include "flywheel/dist/communicator.h"

#include <gtest/gtest.h>
#include <torch/csrc/distributed/c10d/HashStore.hpp>

#include <chrono>
#include <functional>
#include <thread>
#include <vector>

namespace flywheel::dist {
namespace {

// Runs fn(rank, communicator) on `size` threads that form one group over a HashStore.
void RunGroup(int size, const std::function<void(int, Communicator&)>& fn,
              std::chrono::milliseconds timeout = std::chrono::milliseconds(20000)) {
  auto store = c10::make_intrusive<c10d::HashStore>();
  std::vector<std::thread> threads;
  for (int rank = 0; rank < size; ++rank) {
    threads.emplace_back([&, rank] {
      CommunicatorOptions options;
      options.timeout = timeout;
      options.name = "test group";
      auto comm = Communicator::Create(store, rank, size, options);
      ASSERT_TRUE(comm.ok()) << comm.status();
      fn(rank, **comm);
    });
  }
  for (auto& t : threads) t.join();
}

TEST(CommunicatorTest, AllReduceSumsOverRanks) {
  RunGroup(3, [](int rank, Communicator& comm) {
    torch::Tensor t = torch::full({5}, static_cast<float>(rank + 1));
    auto pending = comm.AllReduceSum(t);
    ASSERT_TRUE(pending.ok()) << pending.status();
    ASSERT_TRUE(pending->Wait().ok());
    EXPECT_TRUE(torch::equal(t, torch::full({5}, 6.0f)));
    EXPECT_GT(comm.bytes_sent(), 0);
  });
}

TEST(CommunicatorTest, AllGatherConcatenatesInRankOrder) {
  RunGroup(4, [](int rank, Communicator& comm) {
    torch::Tensor shard = torch::arange(3, torch::kFloat) + 10 * rank;
    torch::Tensor full = torch::empty({12});
    ASSERT_TRUE(comm.AllGather(shard, full).ok());
    torch::Tensor expected = torch::cat({torch::arange(3, torch::kFloat),
                                         torch::arange(3, torch::kFloat) + 10,
                                         torch::arange(3, torch::kFloat) + 20,
                                         torch::arange(3, torch::kFloat) + 30});
    EXPECT_TRUE(torch::equal(full, expected));
  });
}

TEST(CommunicatorTest, ReduceScatterSumsEachRanksSlice) {
  RunGroup(2, [](int rank, Communicator& comm) {
    // Rank r contributes full = [r, r, 10 + r, 10 + r]; rank 0 gets slice 0 summed = [1, 1].
    torch::Tensor full = torch::tensor({0.f, 0.f, 10.f, 10.f}) + rank;
    torch::Tensor shard = torch::empty({2});
    ASSERT_TRUE(comm.ReduceScatterSum(full, shard).ok());
    const float expected = rank == 0 ? 1.f : 21.f;
    EXPECT_TRUE(torch::equal(shard, torch::full({2}, expected)));
  });
}

TEST(CommunicatorTest, BroadcastCopiesTheRootsTensor) {
  RunGroup(3, [](int rank, Communicator& comm) {
    torch::Tensor t = torch::full({4}, static_cast<float>(rank));
    ASSERT_TRUE(comm.Broadcast(t, 2).ok());
    EXPECT_TRUE(torch::equal(t, torch::full({4}, 2.0f)));
  });
}

TEST(CommunicatorTest, ShapeErrorsNameTheCollective) {
  RunGroup(1, [](int, Communicator& comm) {
    absl::Status s = comm.AllGather(torch::zeros({3}), torch::zeros({4}));
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(s.message().find("all-gather"), std::string::npos) << s;
  });
}

TEST(CommunicatorTest, BadRankIsRejected) {
  auto store = c10::make_intrusive<c10d::HashStore>();
  auto comm = Communicator::Create(store, 2, 2, {});
  EXPECT_EQ(comm.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(comm.status().message().find("rank 2"), std::string::npos);
}

TEST(CommunicatorTest, AMissingPeerFailsWithinTheTimeoutInsteadOfHanging) {
  const auto start = std::chrono::steady_clock::now();
  RunGroup(
      2,
      [](int rank, Communicator& comm) {
        if (rank == 1) return;  // never takes part in the all-reduce
        torch::Tensor t = torch::ones({4});
        absl::Status s = comm.AllReduceSumNow(t);
        EXPECT_FALSE(s.ok());
        EXPECT_NE(s.message().find("all-reduce"), std::string::npos) << s;
      },
      std::chrono::milliseconds(1500));
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(20));
}

}  // namespace
}  // namespace flywheel::dist
