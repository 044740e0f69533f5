// Runs actors open-ended (Actor::Run() until Stop()), one thread each, and keeps the error each
// one's loop ended with, so that the caller (the embedded job's learner loop, an actor process's
// weight poller) can notice a failed actor between its own steps.
//
//   ActorThreads threads;
//   threads.Start(actors);
//   ... RETURN_IF_ERROR(threads.FirstError()); ...
//   threads.Stop();  // before anything the actors borrow goes away
#ifndef FLYWHEEL_ACTOR_ACTOR_THREADS_H_
#define FLYWHEEL_ACTOR_ACTOR_THREADS_H_

#include <atomic>
#include <memory>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "flywheel/actor/actor.h"

namespace flywheel {

class ActorThreads {
 public:
  ActorThreads() = default;
  ~ActorThreads() { Stop(); }
  ActorThreads(const ActorThreads&) = delete;
  ActorThreads& operator=(const ActorThreads&) = delete;

  // The actors are borrowed and must outlive Stop(). Call once.
  void Start(const std::vector<std::unique_ptr<Actor>>& actors);
  // The first error an actor's Run() returned, in actor order; OK while all run.
  absl::Status FirstError();
  // Stops every actor and joins its thread. What a loop returns once stopping has begun (such
  // as an insert cancelled by a closing buffer) is not an error. Idempotent.
  void Stop();

 private:
  std::vector<Actor*> actors_;
  std::vector<std::thread> threads_;
  std::atomic<bool> stopping_{false};
  absl::Mutex mu_;
  std::vector<absl::Status> errors_ ABSL_GUARDED_BY(mu_);
};

}  // namespace flywheel

#endif  // FLYWHEEL_ACTOR_ACTOR_THREADS_H_
