#include "flywheel/gateway/generation_loop.h"

#include <spdlog/spdlog.h>
#include <torch/torch.h>

#include <algorithm>
#include <utility>

#include "flywheel/core/strings.h"

namespace flywheel::gateway {

std::vector<GeneratedToken> GenerationStream::Next(size_t have, absl::Time deadline) {
  absl::MutexLock lock(&mu_);
  auto ready = [&]() ABSL_SHARED_LOCKS_REQUIRED(mu_) { return done_ || tokens_.size() > have; };
  mu_.AwaitWithDeadline(absl::Condition(&ready), deadline);
  if (tokens_.size() <= have) return {};
  return {tokens_.begin() + static_cast<std::ptrdiff_t>(have), tokens_.end()};
}

absl::StatusOr<std::vector<GeneratedToken>> GenerationStream::Wait(absl::Time deadline) {
  absl::MutexLock lock(&mu_);
  if (!mu_.AwaitWithDeadline(absl::Condition(&done_), deadline)) {
    return absl::DeadlineExceededError("generation did not finish in time");
  }
  if (!status_.ok()) return status_;
  return tokens_;
}

bool GenerationStream::done() const {
  absl::MutexLock lock(&mu_);
  return done_;
}

absl::Status GenerationStream::status() const {
  absl::MutexLock lock(&mu_);
  return status_;
}

void GenerationStream::Cancel() {
  absl::MutexLock lock(&mu_);
  cancelled_ = true;
}

bool GenerationStream::cancelled() const {
  absl::MutexLock lock(&mu_);
  return cancelled_;
}

void GenerationStream::Push(const GeneratedToken& token) {
  absl::MutexLock lock(&mu_);
  tokens_.push_back(token);
}

void GenerationStream::Finish(absl::Status status) {
  absl::MutexLock lock(&mu_);
  if (done_) return;
  done_ = true;
  status_ = std::move(status);
}

absl::StatusOr<std::unique_ptr<GenerationLoop>> GenerationLoop::Start(
    std::unique_ptr<RolloutEngine> engine, const GenerationLoopOptions& options) {
  if (engine == nullptr) return absl::InvalidArgumentError("gateway: no rollout engine");
  if (options.max_sequences < 1) {
    return absl::InvalidArgumentError(
        StrCat("gateway.max_sequences must be >= 1 (got ", options.max_sequences, ")"));
  }
  std::unique_ptr<GenerationLoop> loop(new GenerationLoop(std::move(engine), options));
  loop->thread_ = std::thread([l = loop.get()] { l->Run(); });
  return loop;
}

GenerationLoop::GenerationLoop(std::unique_ptr<RolloutEngine> engine,
                               const GenerationLoopOptions& options)
    : options_(options), engine_(std::move(engine)), max_seq_len_(engine_->max_seq_len()) {}

GenerationLoop::~GenerationLoop() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  if (thread_.joinable()) thread_.join();
}

std::shared_ptr<GenerationStream> GenerationLoop::Submit(GenerationRequest request) {
  auto stream = std::make_shared<GenerationStream>();
  absl::MutexLock lock(&mu_);
  if (stopping_) {
    stream->Finish(absl::CancelledError("gateway: the generation loop is stopping"));
    return stream;
  }
  queue_.push_back({std::move(request), stream});
  return stream;
}

void GenerationLoop::PublishSnapshot(std::shared_ptr<const WeightSnapshot> snapshot) {
  engine_->PublishSnapshot(std::move(snapshot));
}

void GenerationLoop::Admit() {
  std::vector<Queued> admitted;
  {
    absl::MutexLock lock(&mu_);
    while (!queue_.empty() &&
           static_cast<int64_t>(running_.size() + admitted.size()) < options_.max_sequences) {
      admitted.push_back(std::move(queue_.front()));
      queue_.pop_front();
    }
  }
  for (Queued& q : admitted) {
    if (q.stream->cancelled()) {
      q.stream->Finish(absl::CancelledError("cancelled before it started"));
      continue;
    }
    absl::StatusOr<SequenceId> id = engine_->AddSequence(
        q.request.prompt, {.sampling = q.request.sampling, .seed = q.request.seed});
    absl::Status started = id.status();
    if (started.ok()) started = engine_->StartTurn(*id, q.request.turn);
    if (!started.ok()) {
      if (id.ok()) engine_->RemoveSequence(*id).IgnoreError();
      q.stream->Finish(absl::InvalidArgumentError(started.message()));
      continue;
    }
    running_.push_back({*id, std::move(q.stream)});
  }
}

void GenerationLoop::DropCancelled() {
  auto end = std::remove_if(running_.begin(), running_.end(), [&](const Running& r) {
    if (!r.stream->cancelled()) return false;
    engine_->RemoveSequence(r.sequence).IgnoreError();
    r.stream->Finish(absl::CancelledError("cancelled"));
    return true;
  });
  running_.erase(end, running_.end());
}

void GenerationLoop::EndAll(const absl::Status& status) {
  for (Running& r : running_) {
    engine_->RemoveSequence(r.sequence).IgnoreError();
    r.stream->Finish(status);
  }
  running_.clear();
  absl::MutexLock lock(&mu_);
  for (Queued& q : queue_) q.stream->Finish(status);
  queue_.clear();
}

void GenerationLoop::Run() {
  c10::InferenceMode inference;
  while (true) {
    {
      absl::MutexLock lock(&mu_);
      // Idle: sleep until a request arrives or the loop stops. (The condition may run on
      // another thread, so it reads only what mu_ guards.)
      auto has_work = [&]()
                          ABSL_SHARED_LOCKS_REQUIRED(mu_) { return stopping_ || !queue_.empty(); };
      if (running_.empty()) mu_.Await(absl::Condition(&has_work));
      if (stopping_) break;
    }
    Admit();
    DropCancelled();
    if (running_.empty()) continue;
    absl::StatusOr<std::vector<GeneratedToken>> step;
    try {
      step = engine_->Step();
    } catch (const std::exception& e) {
      step = absl::InternalError(StrCat("decode step: ", e.what()));
    }
    if (!step.ok()) {
      spdlog::error("gateway: {}", step.status().ToString());
      EndAll(step.status());
      continue;
    }
    for (const GeneratedToken& token : *step) {
      auto it = std::find_if(running_.begin(), running_.end(),
                             [&](const Running& r) { return r.sequence == token.sequence; });
      if (it == running_.end()) continue;
      it->stream->Push(token);
      if (token.end == TurnEnd::kNone) continue;
      engine_->RemoveSequence(it->sequence).IgnoreError();
      it->stream->Finish(absl::OkStatus());
      running_.erase(it);
    }
  }
  EndAll(absl::CancelledError("gateway: shutting down"));
}

}  // namespace flywheel::gateway
