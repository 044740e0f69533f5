// Small helpers shared by the buffer tests.
#ifndef FLYWHEEL_BUFFER_TEST_UTIL_H_
#define FLYWHEEL_BUFFER_TEST_UTIL_H_

#include <memory>
#include <string>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "flywheel/buffer/item.h"
#include "flywheel/core/trajectory.h"

namespace flywheel::testing {

// A valid trajectory: two prompt tokens, then `generated` tokens sampled at `version`.
inline std::shared_ptr<const Trajectory> MakeTrajectory(const std::string& id, int64_t version = 0,
                                                        const std::string& group_id = "",
                                                        Role role = Role::kMain,
                                                        int generated = 3) {
  auto t = std::make_shared<Trajectory>();
  t->id = id;
  t->group_id = group_id;
  t->role = role;
  t->AppendPrompt(1);
  t->AppendPrompt(2);
  for (int i = 0; i < generated; ++i) t->AppendGenerated(3 + i, -0.5f, version);
  t->turn_ends = {static_cast<int32_t>(t->tokens.size())};
  t->turn_rewards = {1.0f};
  return t;
}

inline ItemPtr MakeTestItem(const std::string& id, int64_t version = 0, Role role = Role::kMain,
                            double priority = 1.0) {
  auto item = std::make_shared<Item>();
  item->members.push_back(ItemMember{MakeTrajectory(id, version, "", role), nullptr, 0});
  item->priority = priority;
  item->Summarize();
  return item;
}

// A deadline `d` from now, and one long enough that only a defect reaches it.
inline absl::Time In(absl::Duration d) { return absl::Now() + d; }
inline constexpr absl::Duration kLong = absl::Seconds(30);

inline std::string IdOf(const SampledItem& s) { return s.item->members[0].trajectory->id; }

}  // namespace flywheel::testing

#endif  // FLYWHEEL_BUFFER_TEST_UTIL_H_
