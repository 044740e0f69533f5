// The trained-once ledger of a chaos run: from the records the processes keep, whether every
// trajectory the buffer acknowledged was trained exactly once in the surviving history.
//
//   acked      ids in the actors' --ack-log files (the buffer acknowledged each one)
//   history    the learner's consumed.jsonl: step lines (and the drops of a stopping learner
//              after its last step, which belong to that step), {"resumed_from": c} lines after
//              which every step above c of earlier lines is rolled back (its weights were
//              lost); at the end, steps above the newest complete checkpoint are rolled back
//              too (a resume would start there)
//   trained    ids in the surviving steps' "trained" lists
//   dropped    the surviving steps' "dropped" ids (learner_stale, …) and the buffer's consumed
//              records with a drop reason (stale, incomplete_group, late_group_member, evicted)
//   remaining  ids still in the buffer's store after it stopped
//
//   lost        = acked − trained − dropped − remaining          (must be empty)
//   duplicates  = ids trained more than once in the history     (must be empty)
//   trained_still_in_buffer = trained ∩ remaining − the final checkpoint's pending ids: a
//               resume would train them again (must be empty)
//
// Checks on the history itself: steps strictly increasing within each learner incarnation,
// the surviving steps exactly 1..N, and every id the buffer recorded as consumed "trained" in
// the surviving history.
#ifndef FLYWHEEL_CHAOS_LEDGER_H_
#define FLYWHEEL_CHAOS_LEDGER_H_

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace flywheel::chaos {

struct LedgerInputs {
  std::vector<std::string> ack_logs;       // "<unix_ms> <id>" lines
  std::string consumed_log;                // the learner's consumed.jsonl
  int64_t final_checkpoint_step = 0;       // newest complete checkpoint (0: none)
  std::vector<std::string> final_pending;  // that checkpoint's leases.json ids
  std::vector<std::string> remaining;      // ids in the buffer's store
  std::vector<std::pair<std::string, std::string>> buffer_consumed;  // (id, reason) records
};

struct Ledger {
  int64_t acked = 0;
  int64_t trained = 0;                     // distinct ids trained in the surviving history
  std::map<std::string, int64_t> dropped;  // by reason, distinct ids (learner_*, buffer_*)
  int64_t remaining = 0;
  int64_t lost = 0;
  int64_t duplicates = 0;   // extra trainings of an id in the surviving history
  int64_t rolled_back = 0;  // trajectories trained in steps that were rolled back
  int64_t rolled_back_steps = 0;
  int64_t steps = 0;                // surviving history: 1..steps
  int64_t incarnations = 0;         // learner processes that wrote to the history
  int64_t skipped_redelivered = 0;  // deliveries of held ids the learner skipped
  int64_t trained_still_in_buffer = 0;
  int64_t torn_lines = 0;             // unparsable lines (a process killed mid-write)
  std::vector<std::string> problems;  // history checks that failed (capped)
  std::vector<std::string> lost_examples;
  std::vector<std::string> duplicate_examples;

  bool ok() const {
    return lost == 0 && duplicates == 0 && trained_still_in_buffer == 0 && problems.empty();
  }
  nlohmann::json ToJson() const;
};

absl::StatusOr<Ledger> BuildLedger(const LedgerInputs& inputs);

// "<unix_ms> <id>" lines of an ack log; torn lines are skipped and counted in *torn.
absl::StatusOr<std::vector<std::pair<int64_t, std::string>>> ReadAckLog(const std::string& path,
                                                                        int64_t* torn = nullptr);

}  // namespace flywheel::chaos

#endif  // FLYWHEEL_CHAOS_LEDGER_H_
