// The tree job's actors (run.mode = "async"): threads that play the repair harness with the
// policy being trained and insert each instance's executions — one GRPO group — into the
// buffer, recorded as trajectories (trajectory/execution_record.h):
//
//   thread i:  instance = next++ ─▶ executions_per_instance × RunRepairHarness(instance, policy)
//                 ─▶ ExecutionToTrajectory ─▶ Buffer::Insert (group "repair-<seed>")
//   learner:   Publish(snapshot) ─▶ every thread's engine takes it at its next decode step
//
// Each thread owns a rollout engine and runs one execution at a time (a harness's calls are
// sequential); the threads are the parallelism. A full buffer blocks the insert (backpressure);
// an execution the actor could not play or record is its error (FirstError), which ends the
// job. Instances come from one counter: executions of one instance are played by one thread,
// so a group is complete as soon as its last member is inserted.
#ifndef FLYWHEEL_RUNTIME_HARNESS_ACTORS_H_
#define FLYWHEEL_RUNTIME_HARNESS_ACTORS_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "flywheel/actor/engine_harness_policy.h"
#include "flywheel/actor/rollout_options.h"
#include "flywheel/buffer/buffer.h"
#include "flywheel/trajectory/repair_harness.h"

namespace flywheel {

struct HarnessActorsOptions {
  int64_t num_actors = 1;
  RepairHarnessOptions harness;
  EngineHarnessPolicyOptions policy;  // policy.seed: thread i samples with seed + i · 2^32
  RolloutEngineOptions engine;
  int64_t executions_per_instance = 4;
  // Instance k is the repair instance instance_seed + k.
  uint64_t instance_seed = 0;
  // Admission (run.max_pipeline_batches): a thread starts an instance only while the instances
  // being played plus the groups waiting in the buffer are fewer than this; 0 = no bound (the
  // buffer's staleness bound then drops what waits too long).
  int64_t max_instances_ahead = 0;
};

class HarnessActors {
 public:
  // Starts the threads, each with an engine on `snapshot`. `buffer` is borrowed and must outlive
  // Stop.
  static absl::StatusOr<std::unique_ptr<HarnessActors>> Start(
      const HarnessActorsOptions& options, std::shared_ptr<const WeightSnapshot> snapshot,
      Buffer* buffer);
  ~HarnessActors() { Stop(); }

  // Any thread: every engine samples with `snapshot` from its next step on.
  void Publish(const std::shared_ptr<const WeightSnapshot>& snapshot);
  // The learner took groups from the buffer: threads waiting for admission look again.
  void Wake();
  // The first error of a thread, in thread order; OK while all run.
  absl::Status FirstError();
  // Ends every thread after the execution it is playing (an insert waiting on a full buffer
  // gives up at its next poll, within 200 ms) and joins them. Idempotent.
  void Stop();

  int64_t executions() const { return executions_.load(); }
  int64_t instances_started() const { return next_instance_.load(); }

 private:
  explicit HarnessActors(const HarnessActorsOptions& options, Buffer* buffer)
      : options_(options), buffer_(buffer) {}
  absl::Status Loop(size_t index);
  // Waits for room under max_instances_ahead and counts the instance in; false when stopping.
  bool AdmitInstance();
  // Inserts, retrying while the buffer is full; CANCELLED once stopping.
  absl::Status Insert(std::shared_ptr<const Trajectory> trajectory);

  const HarnessActorsOptions options_;
  Buffer* const buffer_;
  std::vector<std::unique_ptr<RolloutEngine>> engines_;
  std::vector<std::thread> threads_;
  std::atomic<bool> stopping_{false};
  std::atomic<int64_t> next_instance_{0};
  std::atomic<int64_t> executions_{0};
  absl::Mutex admission_mu_;
  absl::CondVar admission_cv_;
  int64_t in_flight_ ABSL_GUARDED_BY(admission_mu_) = 0;  // instances being played
  absl::Mutex mu_;
  std::vector<absl::Status> errors_ ABSL_GUARDED_BY(mu_);
};

}  // namespace flywheel

#endif  // FLYWHEEL_RUNTIME_HARNESS_ACTORS_H_
