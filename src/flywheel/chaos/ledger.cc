#include "flywheel/chaos/ledger.h"

#include <fstream>
#include <set>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/numbers.h"
#include "flywheel/core/strings.h"

namespace flywheel::chaos {
namespace {

constexpr size_t kMaxProblems = 20;
constexpr size_t kMaxExamples = 10;

// The buffer's consumed reasons that are drops (the others are the learner's acknowledgements
// and non-leased samples).
bool IsBufferDrop(const std::string& reason) {
  return reason == "stale" || reason == "incomplete_group" || reason == "late_group_member" ||
         reason == "evicted";
}

struct Step {
  int64_t incarnation = 0;
  std::vector<std::string> trained;
  std::vector<std::pair<std::string, std::string>> dropped;  // (id, reason)
};

void Problem(Ledger& ledger, std::string text) {
  if (ledger.problems.size() < kMaxProblems) ledger.problems.push_back(std::move(text));
}

}  // namespace

absl::StatusOr<std::vector<std::pair<int64_t, std::string>>> ReadAckLog(const std::string& path,
                                                                        int64_t* torn) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(StrCat("cannot read ack log ", path));
  std::vector<std::pair<int64_t, std::string>> out;
  std::string line;
  while (std::getline(in, line)) {
    const size_t space = line.find(' ');
    int64_t ms = 0;
    if (space == std::string::npos || space + 1 >= line.size() ||
        !absl::SimpleAtoi(line.substr(0, space), &ms)) {
      if (torn != nullptr) ++*torn;
      continue;
    }
    out.emplace_back(ms, line.substr(space + 1));
  }
  return out;
}

absl::StatusOr<Ledger> BuildLedger(const LedgerInputs& inputs) {
  Ledger ledger;
  absl::flat_hash_set<std::string> acked;
  for (const std::string& path : inputs.ack_logs) {
    auto lines = ReadAckLog(path, &ledger.torn_lines);
    if (!lines.ok()) continue;  // an actor that never acknowledged anything
    for (auto& [ms, id] : *lines) acked.insert(std::move(id));
  }
  ledger.acked = static_cast<int64_t>(acked.size());

  // The history, step by step, with rollbacks applied as they happened.
  std::map<int64_t, Step> history;
  std::ifstream in(inputs.consumed_log);
  if (!in) return absl::NotFoundError(StrCat("cannot read ", inputs.consumed_log));
  std::string line;
  int64_t incarnation = 1;
  int64_t last_step = -1;  // in this incarnation
  auto roll_back_above = [&](int64_t step) {
    for (auto it = history.upper_bound(step); it != history.end();) {
      ledger.rolled_back += static_cast<int64_t>(it->second.trained.size());
      ++ledger.rolled_back_steps;
      it = history.erase(it);
    }
  };
  while (std::getline(in, line)) {
    const nlohmann::json record = nlohmann::json::parse(line, nullptr, false);
    if (record.is_discarded() || !record.is_object()) {
      ++ledger.torn_lines;
      continue;
    }
    if (record.contains("resumed_from")) {
      const int64_t from = record["resumed_from"].get<int64_t>();
      ++incarnation;
      last_step = from;
      roll_back_above(from);
      continue;
    }
    if (record.contains("dropped_after")) {  // drops a stopping learner made after its step
      auto it = history.find(record["dropped_after"].get<int64_t>());
      if (it == history.end()) {
        Problem(ledger, StrCat("drops after step ", record["dropped_after"].get<int64_t>(),
                               ", which is not in the history"));
        continue;
      }
      const nlohmann::json dropped = record.value("dropped", nlohmann::json::object());
      for (const auto& [reason, ids] : dropped.items()) {
        for (const auto& id : ids) it->second.dropped.emplace_back(id.get<std::string>(), reason);
      }
      continue;
    }
    if (!record.contains("step")) continue;
    const int64_t step = record["step"].get<int64_t>();
    if (step <= last_step) {
      Problem(ledger, StrCat("learner incarnation ", incarnation, ": step ", step, " after step ",
                             last_step, " (steps must increase)"));
    }
    if (last_step >= 0 && step > last_step + 1) {
      Problem(ledger, StrCat("learner incarnation ", incarnation, ": step ", step, " follows step ",
                             last_step));
    }
    last_step = step;
    if (history.contains(step)) {
      Problem(ledger, StrCat("step ", step, " recorded twice without a rollback"));
    }
    Step& s = history[step];
    s = Step{incarnation, {}, {}};
    for (const auto& id : record.value("trained", nlohmann::json::array())) {
      s.trained.push_back(id.get<std::string>());
    }
    if (record.contains("dropped") && record["dropped"].is_object()) {
      for (const auto& [reason, ids] : record["dropped"].items()) {
        for (const auto& id : ids) s.dropped.emplace_back(id.get<std::string>(), reason);
      }
    }
    ledger.skipped_redelivered += record.value("skipped", int64_t{0});
  }
  ledger.incarnations = incarnation;
  roll_back_above(inputs.final_checkpoint_step);

  // The surviving history: 1..N without gaps.
  int64_t expect = 1;
  for (const auto& [step, s] : history) {
    if (step != expect) {
      Problem(ledger, StrCat("the surviving history has step ", step, " where step ", expect,
                             " should be"));
      expect = step;
    }
    ++expect;
  }
  ledger.steps = history.empty() ? 0 : history.rbegin()->first;

  absl::flat_hash_map<std::string, int64_t> trained;
  absl::flat_hash_map<std::string, std::string> dropped;  // id -> reason
  for (const auto& [step, s] : history) {
    for (const std::string& id : s.trained) ++trained[id];
    for (const auto& [id, reason] : s.dropped) dropped.emplace(id, reason);
  }
  for (const auto& [id, reason] : inputs.buffer_consumed) {
    if (IsBufferDrop(reason)) dropped.emplace(id, StrCat("buffer_", reason));
    if (reason == "trained" && !trained.contains(id)) {
      Problem(ledger,
              StrCat("the buffer deleted ", id, " as trained, but no surviving step trained it"));
    }
  }
  for (const auto& [id, count] : trained) {
    if (count > 1) {
      ledger.duplicates += count - 1;
      if (ledger.duplicate_examples.size() < kMaxExamples) {
        ledger.duplicate_examples.push_back(StrCat(id, " x", count));
      }
    }
  }
  ledger.trained = static_cast<int64_t>(trained.size());
  for (const auto& [id, reason] : dropped) ++ledger.dropped[reason];

  const absl::flat_hash_set<std::string> remaining(inputs.remaining.begin(),
                                                   inputs.remaining.end());
  const absl::flat_hash_set<std::string> pending(inputs.final_pending.begin(),
                                                 inputs.final_pending.end());
  ledger.remaining = static_cast<int64_t>(remaining.size());
  for (const std::string& id : acked) {
    if (trained.contains(id) || dropped.contains(id) || remaining.contains(id)) continue;
    ++ledger.lost;
    if (ledger.lost_examples.size() < kMaxExamples) ledger.lost_examples.push_back(id);
  }
  for (const auto& [id, count] : trained) {
    if (remaining.contains(id) && !pending.contains(id)) ++ledger.trained_still_in_buffer;
  }
  return ledger;
}

nlohmann::json Ledger::ToJson() const {
  return {{"acked", acked},
          {"trained", trained},
          {"dropped", dropped},
          {"remaining", remaining},
          {"lost", lost},
          {"duplicates", duplicates},
          {"rolled_back", rolled_back},
          {"rolled_back_steps", rolled_back_steps},
          {"steps", steps},
          {"learner_incarnations", incarnations},
          {"skipped_redelivered", skipped_redelivered},
          {"trained_still_in_buffer", trained_still_in_buffer},
          {"torn_lines", torn_lines},
          {"problems", problems},
          {"lost_examples", lost_examples},
          {"duplicate_examples", duplicate_examples}};
}

}  // namespace flywheel::chaos
