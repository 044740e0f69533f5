// The rollout engine behind the gateway: one thread owns the engine (it is single-threaded) and
// runs continuous batching over every request that the gateway's HTTP threads submit.
//
//   HTTP thread                      loop thread (owns RolloutEngine)
//   ───────────                      ────────────────────────────────
//   Submit(request) ──▶ queue ─────▶ AddSequence + StartTurn (joins the running batch)
//     ◀── shared_ptr<GenerationStream>   Step(): one token for every generating sequence
//   stream->Next(deadline) ◀──────── Push(token)           (n requests = n sequences)
//   stream->Cancel() ───────────────▶ RemoveSequence at the next iteration
//                                     turn ended: RemoveSequence, Finish(end)
//
// A request's tokens are exactly what a direct engine call with the same prompt, sampling, seed
// and weights gives (the engine's sequences do not interact), so a recorded call carries the
// behaviour log-probs of the distribution its tokens were drawn from.
#ifndef FLYWHEEL_GATEWAY_GENERATION_LOOP_H_
#define FLYWHEEL_GATEWAY_GENERATION_LOOP_H_

#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "flywheel/actor/rollout_engine.h"

namespace flywheel::gateway {

struct GenerationRequest {
  std::vector<int64_t> prompt;  // at least one token
  SamplingParams sampling;
  uint64_t seed = 0;
  TurnOptions turn;  // max_new_tokens and the stop tokens (generated, then the turn ends)
};

// The tokens of one request as they are generated. Filled by the loop thread, read by one
// consumer thread.
class GenerationStream {
 public:
  // Waits until a token beyond the `have` already read exists, the stream ended, or `deadline`.
  // Returns the tokens from index `have` on (empty when the deadline passed or it ended).
  std::vector<GeneratedToken> Next(size_t have, absl::Time deadline) ABSL_LOCKS_EXCLUDED(mu_);
  // Waits for the end (or `deadline`: DeadlineExceeded) and returns every token.
  absl::StatusOr<std::vector<GeneratedToken>> Wait(absl::Time deadline) ABSL_LOCKS_EXCLUDED(mu_);
  // True once the turn ended or failed; `status()` says which.
  bool done() const ABSL_LOCKS_EXCLUDED(mu_);
  absl::Status status() const ABSL_LOCKS_EXCLUDED(mu_);
  // The consumer gives up (client gone, stop string seen): the loop drops the sequence.
  void Cancel() ABSL_LOCKS_EXCLUDED(mu_);

 private:
  friend class GenerationLoop;
  void Push(const GeneratedToken& token) ABSL_LOCKS_EXCLUDED(mu_);
  void Finish(absl::Status status) ABSL_LOCKS_EXCLUDED(mu_);
  bool cancelled() const ABSL_LOCKS_EXCLUDED(mu_);

  mutable absl::Mutex mu_;
  std::vector<GeneratedToken> tokens_ ABSL_GUARDED_BY(mu_);
  bool done_ ABSL_GUARDED_BY(mu_) = false;
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status status_ ABSL_GUARDED_BY(mu_);
};

struct GenerationLoopOptions {
  // Sequences decoded together; further requests wait in the queue (their clients see the
  // latency, not an error).
  int64_t max_sequences = 64;
};

class GenerationLoop {
 public:
  // Starts the loop thread; it owns `engine` from now on.
  static absl::StatusOr<std::unique_ptr<GenerationLoop>> Start(
      std::unique_ptr<RolloutEngine> engine, const GenerationLoopOptions& options);
  ~GenerationLoop();  // ends every stream (Cancelled) and joins the thread

  GenerationLoop(const GenerationLoop&) = delete;
  GenerationLoop& operator=(const GenerationLoop&) = delete;

  // Queues a request; its stream fails (InvalidArgument) if the engine refuses the prompt.
  std::shared_ptr<GenerationStream> Submit(GenerationRequest request) ABSL_LOCKS_EXCLUDED(mu_);
  // Newer weights for the sequences' next steps (any thread).
  void PublishSnapshot(std::shared_ptr<const WeightSnapshot> snapshot);

  // Fixed for the engine's life: the longest sequence.
  int64_t max_seq_len() const { return max_seq_len_; }

 private:
  struct Running {
    SequenceId sequence = 0;
    std::shared_ptr<GenerationStream> stream;
  };
  struct Queued {
    GenerationRequest request;
    std::shared_ptr<GenerationStream> stream;
  };

  GenerationLoop(std::unique_ptr<RolloutEngine> engine, const GenerationLoopOptions& options);
  void Run() ABSL_LOCKS_EXCLUDED(mu_);
  // Moves queued requests into the engine, up to max_sequences running.
  void Admit() ABSL_LOCKS_EXCLUDED(mu_);
  // Removes the running requests whose consumer cancelled.
  void DropCancelled();
  void EndAll(const absl::Status& status) ABSL_LOCKS_EXCLUDED(mu_);

  const GenerationLoopOptions options_;
  std::unique_ptr<RolloutEngine> engine_;  // loop thread only (PublishSnapshot: any thread)
  const int64_t max_seq_len_;
  std::vector<Running> running_;  // loop thread only

  mutable absl::Mutex mu_;
  std::deque<Queued> queue_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace flywheel::gateway

#endif  // FLYWHEEL_GATEWAY_GENERATION_LOOP_H_
