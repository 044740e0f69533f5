#include "flywheel/actor/actor_threads.h"

#include <utility>

namespace flywheel {

void ActorThreads::Start(const std::vector<std::unique_ptr<Actor>>& actors) {
  {
    absl::MutexLock lock(&mu_);
    errors_.assign(actors.size(), absl::OkStatus());
  }
  for (const auto& actor : actors) actors_.push_back(actor.get());
  for (size_t i = 0; i < actors_.size(); ++i) {
    threads_.emplace_back([this, i] {
      absl::Status status = actors_[i]->Run();
      if (stopping_.load()) return;  // e.g. an insert cancelled by a closing buffer
      absl::MutexLock lock(&mu_);
      errors_[i] = std::move(status);
    });
  }
}

absl::Status ActorThreads::FirstError() {
  absl::MutexLock lock(&mu_);
  for (const absl::Status& s : errors_) {
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
}

void ActorThreads::Stop() {
  stopping_.store(true);
  for (Actor* actor : actors_) actor->Stop();
  for (std::thread& t : threads_) t.join();
  threads_.clear();
  actors_.clear();
}

}  // namespace flywheel
