// `flywheel chaos`: the multi-process job under faults, and the proof that it loses nothing it
// acknowledged and trains on nothing twice (docs/reliability.md, "Chaos: the whole job").
//
//   actors ×N ──▶ TcpProxy (delay, refuse, cut) ──▶ serve buffer (durable) ◀── learner
//      │ --ack-log                                       │ buffer.db           │ consumed.jsonl,
//      ▼                                                 ▼                     ▼ checkpoints
//   acks/actor-i.log ──────────────────────▶ Ledger ◀── store at the end ◀── run directory
//
// Every process is a child (posix_spawn) of this one, its stdout and stderr in
// work_dir/logs/<name>.<incarnation>.{out,err}. After the learner's first step, faults from a
// seeded FaultSchedule hit for `duration`: SIGKILL and restart (the buffer on the same address
// and directory, the learner with --resume on the same run and weights address, an actor
// fresh), SIGSTOP/SIGCONT, and proxy faults. The last `quiet_tail` has none, so that every
// process recovers. Recovery is measured from each restart to the process's next sign of work:
// the buffer's next acknowledged insert (any actor's ack log), the learner's next step
// (consumed.jsonl), an actor's next acknowledged insert (its own ack log). Then every process is
// stopped cleanly, the buffer's store is read, the newest checkpoint is loaded as --resume
// would, and the ledger (ledger.h) is built.
#ifndef FLYWHEEL_CHAOS_CHAOS_JOB_H_
#define FLYWHEEL_CHAOS_CHAOS_JOB_H_

#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "flywheel/chaos/fault_schedule.h"

namespace flywheel::chaos {

// A protection switched off, to see the test fail the way it must (tests only).
enum class Breakage {
  kNone,
  kIdempotency,  // buffer.remember_ids = 0: a retried insert is stored twice
  kLeases,       // flywheel learner --no-leases: a killed learner loses what it sampled
};

struct ChaosOptions {
  std::string flywheel;                        // the flywheel binary the processes run
  std::string config;                          // job config (TOML)
  std::vector<std::string> overrides;          // --set, for every process
  absl::Duration duration = absl::Minutes(5);  // of faults, once the learner stepped
  absl::Duration quiet_tail = absl::Seconds(20);
  uint64_t seed = 1;
  int actors = 2;
  std::string work_dir;  // must not exist yet, or be empty
  FaultScheduleOptions faults;
  // The stated recovery bound: a restarted process must be back at work within it.
  absl::Duration recovery_bound = absl::Seconds(60);
  Breakage breakage = Breakage::kNone;
  std::FILE* log = stdout;  // one line per fault and a summary; nullptr = none
};

// Runs the job under faults and returns the report (`ok`: every invariant held). An error
// means the run itself could not be carried out (a process would not start, say).
absl::StatusOr<nlohmann::json> RunChaos(const ChaosOptions& options);

}  // namespace flywheel::chaos

#endif  // FLYWHEEL_CHAOS_CHAOS_JOB_H_
