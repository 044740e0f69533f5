#include "flywheel/dist/membership.h"

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>

#include <algorithm>
#include <chrono>
#include <set>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "flywheel/core/status_macros.h"
#include "flywheel/core/strings.h"
#include "flywheel/model/torch_status.h"

namespace flywheel::dist {
namespace {

// c10d::PrefixStore joins prefix and key with a "/": the group's keys are "epoch/<e>/...".
std::string Prefix(int64_t epoch) { return StrCat("epoch/", epoch); }
std::string MembersKey(int64_t epoch) { return StrCat(Prefix(epoch), "/members"); }

std::string Encode(const std::vector<int>& members) { return Join(members, ","); }

absl::StatusOr<std::vector<int>> Decode(int64_t epoch, const std::string& text) {
  std::vector<int> members;
  for (absl::string_view part : absl::StrSplit(text, ',', absl::SkipEmpty())) {
    int id = 0;
    if (!absl::SimpleAtoi(part, &id)) {
      return absl::DataLossError(
          StrCat("membership: epoch ", epoch, ": bad member list '", text, "' in the store"));
    }
    members.push_back(id);
  }
  return members;
}

absl::Status CheckMembers(int64_t epoch, const std::vector<int>& members) {
  if (epoch < 0) return absl::InvalidArgumentError(StrCat("membership: epoch ", epoch, " < 0"));
  if (members.empty()) {
    return absl::InvalidArgumentError(StrCat("membership: epoch ", epoch, " has no members"));
  }
  std::set<int> seen;
  for (int id : members) {
    if (id < 0) {
      return absl::InvalidArgumentError(
          StrCat("membership: epoch ", epoch, ": member id ", id, " < 0"));
    }
    if (!seen.insert(id).second) {
      return absl::InvalidArgumentError(StrCat("membership: epoch ", epoch, ": member ", id,
                                               " is listed twice in [", Encode(members), "]"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status MembershipOptions::Validate() const {
  if (group.timeout <= std::chrono::milliseconds(0)) {
    return absl::InvalidArgumentError("membership: group timeout must be > 0");
  }
  if (group.threads < 1)
    return absl::InvalidArgumentError("membership: group threads must be >= 1");
  return absl::OkStatus();
}

Membership::Membership(c10::intrusive_ptr<c10d::Store> store, MembershipOptions options)
    : store_(std::move(store)), options_(std::move(options)) {}

absl::StatusOr<int> Membership::RankOf(const std::vector<int>& members, int id) {
  auto it = std::find(members.begin(), members.end(), id);
  if (it == members.end()) {
    return absl::NotFoundError(
        StrCat("membership: worker ", id, " is not a member of [", Encode(members), "]"));
  }
  return static_cast<int>(it - members.begin());
}

absl::Status Membership::ProposeEpoch(int64_t epoch, const std::vector<int>& members) {
  RETURN_IF_ERROR(CheckMembers(epoch, members));
  const std::string wanted = Encode(members);
  std::string current;
  RETURN_IF_ERROR(TorchCall(StrCat("membership: proposing epoch ", epoch), [&] {
    // Set only if absent, atomically: the first proposal of an epoch is the one everybody sees.
    std::vector<uint8_t> value =
        store_->compareSet(MembersKey(epoch), std::vector<uint8_t>(),
                           std::vector<uint8_t>(wanted.begin(), wanted.end()));
    current.assign(value.begin(), value.end());
  }));
  if (current != wanted) {
    return absl::AlreadyExistsError(StrCat("membership: epoch ", epoch,
                                           " was already proposed as [", current, "], not [",
                                           wanted, "]"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<int>> Membership::AwaitEpoch(int64_t epoch, absl::Time deadline) {
  const std::string key = MembersKey(epoch);
  std::string text;
  bool proposed = false;
  absl::Status s = TorchCall(StrCat("membership: awaiting epoch ", epoch), [&] {
    proposed = store_->check({key});
    if (!proposed) {
      const auto wait = std::max(std::chrono::milliseconds(1),
                                 absl::ToChronoMilliseconds(deadline - absl::Now()));
      store_->wait({key}, wait);  // throws when the wait times out
      proposed = true;
    }
    std::vector<uint8_t> value = store_->get(key);
    text.assign(value.begin(), value.end());
  });
  if (!proposed) {
    return absl::DeadlineExceededError(StrCat(
        "membership: epoch ", epoch, " was not proposed by the deadline (", s.message(), ")"));
  }
  RETURN_IF_ERROR(s);
  return Decode(epoch, text);
}

absl::StatusOr<std::unique_ptr<Communicator>> Membership::FormGroup(int64_t epoch,
                                                                    const std::vector<int>& members,
                                                                    int my_id) {
  RETURN_IF_ERROR(options_.Validate());
  RETURN_IF_ERROR(CheckMembers(epoch, members));
  ASSIGN_OR_RETURN(int rank, RankOf(members, my_id));
  const std::string key = MembersKey(epoch);
  std::string proposed;
  RETURN_IF_ERROR(TorchCall(StrCat("membership: epoch ", epoch), [&] {
    if (store_->check({key})) {
      std::vector<uint8_t> value = store_->get(key);
      proposed.assign(value.begin(), value.end());
    }
  }));
  if (!proposed.empty() && proposed != Encode(members)) {
    return absl::FailedPreconditionError(StrCat("membership: worker ", my_id, " forms epoch ",
                                                epoch, " with [", Encode(members),
                                                "] but it was proposed as [", proposed, "]"));
  }
  CommunicatorOptions group = options_.group;
  group.name = StrCat(group.name, " epoch ", epoch);
  auto prefixed = c10::make_intrusive<c10d::PrefixStore>(Prefix(epoch), store_);
  return Communicator::Create(std::move(prefixed), rank, static_cast<int>(members.size()),
                              std::move(group));
}

}  // namespace flywheel::dist
