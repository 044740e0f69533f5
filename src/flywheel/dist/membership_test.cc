#include "flywheel/dist/membership.h"

#include <gtest/gtest.h>
#include <torch/csrc/distributed/c10d/HashStore.hpp>

#include <map>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"

namespace flywheel::dist {
namespace {

MembershipOptions Options() {
  MembershipOptions options;
  options.group.timeout = std::chrono::milliseconds(20000);
  options.group.name = "test group";
  return options;
}

absl::Time Deadline() { return absl::Now() + absl::Seconds(30); }

// What one worker saw in one epoch.
struct Step {
  int64_t epoch;
  int rank;
  int size;
  float sum;
};

TEST(MembershipTest, GroupsReformAsWorkersJoinAndLeaveWithoutRestartingSurvivors) {
  auto store = c10::make_intrusive<c10d::HashStore>();
  const std::vector<std::vector<int>> epochs = {{0, 1}, {0, 1, 2}, {0, 2}};
  // Epoch e+1 is proposed while the group of epoch e exists and before its step runs.
  std::vector<absl::Notification> proposed(epochs.size() + 1);
  absl::Mutex mu;
  std::map<int, std::vector<Step>> steps;  // guarded by mu
  std::map<int, int> formed;               // epoch -> members that formed it; guarded by mu

  // One thread per worker for its whole life: a survivor is never restarted.
  auto worker = [&](int id) {
    Membership membership(store, Options());
    bool was_member = false;
    for (int64_t e = 0; e < static_cast<int64_t>(epochs.size()); ++e) {
      auto members = membership.AwaitEpoch(e, Deadline());
      ASSERT_TRUE(members.ok()) << members.status();
      auto rank = Membership::RankOf(*members, id);
      if (!rank.ok()) {
        if (was_member) return;  // left the group
        continue;                // not joined yet
      }
      was_member = true;
      auto comm = membership.FormGroup(e, *members, id);
      ASSERT_TRUE(comm.ok()) << comm.status();
      {
        absl::MutexLock lock(&mu);
        ++formed[e];
      }
      ASSERT_TRUE(proposed[e + 1].WaitForNotificationWithTimeout(absl::Seconds(30)));
      torch::Tensor t = torch::full({3}, static_cast<float>(id + 1));
      ASSERT_TRUE((*comm)->AllReduceSumNow(t).ok());
      absl::MutexLock lock(&mu);
      steps[id].push_back({e, (*comm)->rank(), (*comm)->size(), t[0].item<float>()});
    }
  };

  Membership coordinator(store, Options());
  ASSERT_TRUE(coordinator.ProposeEpoch(0, epochs[0]).ok());
  proposed[0].Notify();
  std::vector<std::thread> threads;
  for (int id = 0; id < 3; ++id) threads.emplace_back(worker, id);
  for (size_t e = 0; e < epochs.size(); ++e) {
    // Wait until the group of epoch e is formed, then propose e+1 while its step is pending.
    const int want = static_cast<int>(epochs[e].size());
    {
      absl::MutexLock lock(&mu);
      auto all_formed = [&] { return formed[static_cast<int>(e)] == want; };
      ASSERT_TRUE(mu.AwaitWithTimeout(absl::Condition(&all_formed), absl::Seconds(30)));
    }
    if (e + 1 < epochs.size()) {
      ASSERT_TRUE(coordinator.ProposeEpoch(e + 1, epochs[e + 1]).ok());
    }
    proposed[e + 1].Notify();
  }
  for (auto& t : threads) t.join();

  absl::MutexLock lock(&mu);
  ASSERT_EQ(steps[0].size(), 3u);
  ASSERT_EQ(steps[1].size(), 2u);
  ASSERT_EQ(steps[2].size(), 2u);
  // Sums of (id + 1) over the members of each epoch: {0,1} = 3, {0,1,2} = 6, {0,2} = 4.
  EXPECT_EQ(steps[0][0].sum, 3.f);
  EXPECT_EQ(steps[0][1].sum, 6.f);
  EXPECT_EQ(steps[0][2].sum, 4.f);
  EXPECT_EQ(steps[1][0].sum, 3.f);
  EXPECT_EQ(steps[1][1].sum, 6.f);
  EXPECT_EQ(steps[2][0].epoch, 1);
  EXPECT_EQ(steps[2][0].sum, 6.f);
  EXPECT_EQ(steps[2][1].sum, 4.f);
  // Rank = index in the member list: worker 2 is rank 2 of 3, then rank 1 of 2.
  EXPECT_EQ(steps[2][0].rank, 2);
  EXPECT_EQ(steps[2][0].size, 3);
  EXPECT_EQ(steps[2][1].rank, 1);
  EXPECT_EQ(steps[2][1].size, 2);
}

TEST(MembershipTest, AwaitEpochBlocksUntilProposed) {
  auto store = c10::make_intrusive<c10d::HashStore>();
  Membership membership(store, Options());
  absl::Notification done;
  absl::StatusOr<std::vector<int>> members;
  std::thread waiter([&] {
    members = membership.AwaitEpoch(4, Deadline());
    done.Notify();
  });
  EXPECT_FALSE(done.WaitForNotificationWithTimeout(absl::Milliseconds(200)));
  ASSERT_TRUE(Membership(store, Options()).ProposeEpoch(4, {3, 1}).ok());
  EXPECT_TRUE(done.WaitForNotificationWithTimeout(absl::Seconds(20)));
  waiter.join();
  ASSERT_TRUE(members.ok()) << members.status();
  EXPECT_EQ(*members, (std::vector<int>{3, 1}));
}

TEST(MembershipTest, AwaitEpochFailsAtTheDeadline) {
  auto store = c10::make_intrusive<c10d::HashStore>();
  Membership membership(store, Options());
  auto members = membership.AwaitEpoch(7, absl::Now() + absl::Milliseconds(100));
  EXPECT_EQ(members.status().code(), absl::StatusCode::kDeadlineExceeded) << members.status();
  EXPECT_NE(members.status().message().find("epoch 7"), absl::string_view::npos);
}

TEST(MembershipTest, AnEpochIsProposedOnce) {
  auto store = c10::make_intrusive<c10d::HashStore>();
  Membership membership(store, Options());
  ASSERT_TRUE(membership.ProposeEpoch(1, {0, 1}).ok());
  EXPECT_TRUE(membership.ProposeEpoch(1, {0, 1}).ok());  // the same again is harmless
  absl::Status s = membership.ProposeEpoch(1, {0, 2});
  EXPECT_EQ(s.code(), absl::StatusCode::kAlreadyExists) << s;
  EXPECT_NE(s.message().find("[0,1]"), absl::string_view::npos) << s;
  EXPECT_EQ(membership.ProposeEpoch(2, {0, 0}).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(membership.ProposeEpoch(2, {}).code(), absl::StatusCode::kInvalidArgument);
}

TEST(MembershipTest, FormingWithAnotherListThanProposedIsAnError) {
  auto store = c10::make_intrusive<c10d::HashStore>();
  Membership membership(store, Options());
  ASSERT_TRUE(membership.ProposeEpoch(0, {0, 1}).ok());
  auto comm = membership.FormGroup(0, {1, 0}, 0);
  EXPECT_EQ(comm.status().code(), absl::StatusCode::kFailedPrecondition) << comm.status();
  comm = membership.FormGroup(1, {1, 2}, 0);
  EXPECT_EQ(comm.status().code(), absl::StatusCode::kNotFound) << comm.status();
}

}  // namespace
}  // namespace flywheel::dist
