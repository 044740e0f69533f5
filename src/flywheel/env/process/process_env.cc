#include "flywheel/env/process/process_env.h"

#include <spdlog/spdlog.h>

#include <algorithm>

#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "flywheel/core/status_macros.h"
#include "flywheel/env/observation_limit.h"

namespace flywheel {
namespace {

absl::Duration Seconds(double s) { return absl::Milliseconds(static_cast<int64_t>(s * 1000)); }

std::string MetricName(std::string_view kind) {
  return kind == "observation_truncated" ? "env.observation_truncated"
                                         : StrCat("env.failures{kind=", kind, "}");
}

void Count(std::string_view kind) {
  MetricsRegistry::Global()
      .GetCounter(MetricName(kind), "environment process failures, by kind (env-protocol.md)")
      ->Increment();
}

std::string WithStderr(const Subprocess& p) {
  const std::string tail = p.StderrTail();
  return tail.empty() ? "" : StrCat("; stderr: ", tail);
}

}  // namespace

ProcessPool::ProcessPool(const ProcessOptions& options, int64_t max_observation_bytes)
    : options_(options),
      max_observation_bytes_(max_observation_bytes),
      restarts_(MetricsRegistry::Global().GetCounter(
          "env.restarts", "environment processes restarted after a failure")) {}

std::string ProcessPool::command() const { return Join(options_.command, " "); }

absl::StatusOr<std::unique_ptr<Subprocess>> ProcessPool::StartOne(protocol::Hello* hello) {
  ASSIGN_OR_RETURN(std::unique_ptr<Subprocess> p, Subprocess::Start(options_.command));
  const std::string who = StrCat("environment `", command(), "` (pid ", p->pid(), ")");
  absl::Status status = p->WriteLine(protocol::HelloRequest());
  absl::StatusOr<std::string> line;
  if (status.ok()) {
    line = ReadReply(*p, absl::Now() + Seconds(options_.start_timeout_seconds));
    status = line.status();
  }
  absl::StatusOr<protocol::Hello> parsed;
  if (status.ok()) {
    parsed = protocol::ParseHello(*line);
    status = parsed.status();
  }
  if (!status.ok()) {
    p->WaitExit(absl::Now() + absl::Milliseconds(100));
    const std::string exit = p->ExitDescription();
    p->Kill();
    return absl::Status(status.code() == absl::StatusCode::kDeadlineExceeded
                            ? status.code()
                            : absl::StatusCode::kUnavailable,
                        StrCat(who, " failed the hello handshake: ", status.message(), " (process ",
                               exit, ")", WithStderr(*p)));
  }
  if (hello != nullptr) *hello = *std::move(parsed);
  return p;
}

absl::StatusOr<std::shared_ptr<ProcessPool>> ProcessPool::Create(const ProcessOptions& options,
                                                                 int64_t max_observation_bytes) {
  RETURN_IF_ERROR(options.Validate());
  if (options.command.empty()) return absl::InvalidArgumentError("env.process.command is empty");
  std::shared_ptr<ProcessPool> pool(new ProcessPool(options, max_observation_bytes));
  std::vector<Lease> started;
  for (int64_t i = 0; i < options.copies; ++i) {
    ASSIGN_OR_RETURN(std::unique_ptr<Subprocess> p,
                     pool->StartOne(i == 0 ? &pool->hello_ : nullptr));
    started.push_back(Lease{static_cast<int>(i), std::move(p)});
  }
  absl::MutexLock lock(&pool->mu_);
  pool->idle_ = std::move(started);
  return pool;
}

ProcessPool::~ProcessPool() {
  std::vector<Lease> idle;
  {
    absl::MutexLock lock(&mu_);
    idle.swap(idle_);
  }
  for (Lease& l : idle) {
    if (l.process) (void)l.process->WriteLine(protocol::CloseRequest(), absl::Milliseconds(100));
  }
  const absl::Time deadline = absl::Now() + absl::Seconds(1);  // for all of them together
  for (Lease& l : idle) {
    if (l.process) l.process->WaitExit(deadline);
  }
  // Remaining processes are killed by ~Subprocess.
}

int64_t ProcessPool::AcquireAsync(Grant grant) {
  Lease lease;
  int64_t ticket;
  {
    absl::MutexLock lock(&mu_);
    ticket = next_ticket_++;
    if (idle_.empty()) {
      waiting_.emplace_back(ticket, std::move(grant));
      return ticket;
    }
    lease = std::move(idle_.back());
    idle_.pop_back();
  }
  grant(std::move(lease));
  return ticket;
}

bool ProcessPool::CancelWait(int64_t ticket) {
  Grant grant;
  {
    absl::MutexLock lock(&mu_);
    auto it = std::find_if(waiting_.begin(), waiting_.end(),
                           [ticket](const auto& w) { return w.first == ticket; });
    if (it == waiting_.end()) return false;
    grant = std::move(it->second);
    waiting_.erase(it);
  }
  grant(absl::CancelledError(StrCat("wait for a copy of environment `", command(), "` cancelled")));
  return true;
}

absl::StatusOr<ProcessPool::Lease> ProcessPool::Acquire(absl::Time deadline) {
  struct Result {
    absl::Notification granted;
    absl::StatusOr<Lease> lease;
  };
  auto result = std::make_shared<Result>();
  const int64_t ticket = AcquireAsync([result](absl::StatusOr<Lease> lease) {
    result->lease = std::move(lease);
    result->granted.Notify();
  });
  if (!result->granted.WaitForNotificationWithDeadline(deadline) && CancelWait(ticket)) {
    return absl::DeadlineExceededError(StrCat("all ", options_.copies, " copies of environment `",
                                              command(),
                                              "` stayed busy (raise env.process.copies)"));
  }
  result->granted.WaitForNotification();  // granted, or being granted, on another thread
  return std::move(result->lease);
}

absl::Status ProcessPool::EnsureRunning(Lease& lease) {
  if (lease.process != nullptr && lease.process->Running()) return absl::OkStatus();
  lease.process.reset();  // died while idle, or killed after a failure: restart
  ASSIGN_OR_RETURN(lease.process, StartOne(nullptr));
  restarts_->Increment();
  return absl::OkStatus();
}

void ProcessPool::Release(Lease lease, bool healthy) {
  if (!healthy && lease.process) {
    lease.process->Kill();
    lease.process.reset();
  }
  Grant next;
  {
    absl::MutexLock lock(&mu_);
    if (waiting_.empty()) {
      idle_.push_back(std::move(lease));
      return;
    }
    next = std::move(waiting_.front().second);
    waiting_.pop_front();
  }
  next(std::move(lease));
}

void ProcessPool::Interrupt() {
  std::deque<std::pair<int64_t, Grant>> waiting;
  {
    absl::MutexLock lock(&mu_);
    waiting.swap(waiting_);
  }
  // After the waiters are gone, so that no copy an interrupted call releases goes to one.
  interrupts_.fetch_add(1);
  for (auto& [ticket, grant] : waiting) {
    grant(absl::CancelledError(StrCat("environment `", command(), "`: the job is stopping")));
  }
}

absl::StatusOr<std::string> ProcessPool::ReadReply(Subprocess& p, absl::Time deadline) {
  const int64_t interrupts = interrupts_.load();
  while (true) {
    const absl::Time slice = std::min(deadline, absl::Now() + kInterruptPoll);
    absl::StatusOr<std::string> line =
        p.ReadLine(slice, static_cast<size_t>(options_.max_line_bytes));
    if (!absl::IsDeadlineExceeded(line.status()) || slice >= deadline) return line;
    if (interrupts_.load() != interrupts) {
      return absl::CancelledError(StrCat("environment `", command(), "`: the job is stopping"));
    }
  }
}

void ProcessPool::Incident(std::string_view kind, const std::string& message) {
  int64_t n;
  {
    absl::MutexLock lock(&mu_);
    n = ++incidents_[std::string(kind)];
  }
  if (n == 1) {
    spdlog::warn("{} (logged once; later ones are counted in {})", message, MetricName(kind));
  } else if (n % 100 == 0) {
    spdlog::warn("{} ({} so far in {})", message, n, MetricName(kind));
  } else {
    spdlog::debug("{}", message);
  }
}

ProcessEnv::ProcessEnv(std::shared_ptr<ProcessPool> pool) : pool_(std::move(pool)) {}

ProcessEnv::~ProcessEnv() { Close(); }

std::string ProcessEnv::Context(std::string_view what) const {
  return StrCat("environment `", pool_->command(), "` (pid ",
                lease_.process ? lease_.process->pid() : -1, ") ", what);
}

std::string ProcessEnv::DebugString() const {
  return StrCat("process(", pool_->name(), ": ", pool_->command(),
                ", copies=", pool_->options().copies, ")");
}

void ProcessEnv::AwaitResources(absl::AnyInvocable<void(absl::Status)> ready) {
  if (lease_.slot >= 0) {  // still holds the copy of its previous episode
    ready(absl::OkStatus());
    return;
  }
  absl::MutexLock lock(&await_mu_);
  ticket_ = pool_->AcquireAsync(
      [this, ready = std::move(ready)](absl::StatusOr<ProcessPool::Lease> lease) mutable {
        if (lease.ok()) lease_ = *std::move(lease);
        ready(lease.status());
      });
}

void ProcessEnv::CancelAwait() {
  absl::MutexLock lock(&await_mu_);
  if (ticket_ >= 0) pool_->CancelWait(ticket_);
  ticket_ = -1;
}

absl::StatusOr<StepResult> ProcessEnv::Reset(const TaskInstance& task) {
  last_partial_.reset();
  {
    absl::MutexLock lock(&await_mu_);
    ticket_ = -1;  // granted, if there was a wait
  }
  if (lease_.slot < 0) {
    const ProcessOptions& o = pool_->options();
    absl::StatusOr<ProcessPool::Lease> lease =
        pool_->Acquire(absl::Now() + Seconds(o.start_timeout_seconds + o.step_timeout_seconds));
    if (!lease.ok()) return StartFailure(lease.status());
    lease_ = *std::move(lease);
  }
  if (absl::Status started = pool_->EnsureRunning(lease_); !started.ok()) {
    pool_->Release(std::move(lease_), /*healthy=*/false);
    lease_ = {};
    return StartFailure(started);
  }
  in_episode_ = true;
  StepResult r = Exchange(protocol::ResetRequest(task.task, task.seed), "reset");
  if (r.end == EpisodeEnd::kRunning && r.done) {
    r.end = EpisodeEnd::kDone;
  }
  return r;
}

StepResult ProcessEnv::StartFailure(const absl::Status& status) {
  if (absl::IsCancelled(status)) {
    return StepResult::Failure(EpisodeEnd::kEnvError, std::string(status.message()));
  }
  Count("start_failures");
  pool_->Incident("start_failures", std::string(status.message()));
  return StepResult::Failure(EpisodeEnd::kEnvError, std::string(status.message()));
}

absl::StatusOr<StepResult> ProcessEnv::Step(std::string_view action) {
  if (!in_episode_) {
    return absl::FailedPreconditionError(
        StrCat(DebugString(), ": step without a running episode (reset first)"));
  }
  return Exchange(protocol::StepRequest(action), "step");
}

StepResult ProcessEnv::Exchange(const std::string& request, std::string_view what) {
  Subprocess& p = *lease_.process;
  const ProcessOptions& o = pool_->options();
  absl::Status status = p.WriteLine(request);
  absl::StatusOr<std::string> line = std::string();
  if (!status.ok()) line = status;
  if (status.ok()) {
    line = pool_->ReadReply(p, absl::Now() + Seconds(o.step_timeout_seconds));
  }
  if (!line.ok()) {
    switch (line.status().code()) {
      case absl::StatusCode::kCancelled: {  // the job is stopping: not the process's fault
        in_episode_ = false;
        pool_->Release(std::move(lease_), /*healthy=*/false);
        lease_ = {};
        return StepResult::Failure(EpisodeEnd::kEnvError, std::string(line.status().message()));
      }
      case absl::StatusCode::kDeadlineExceeded: {
        std::optional<double> partial = ScoreAfterTimeout();
        const bool healthy = partial.has_value();
        if (!partial) partial = last_partial_;
        return EndEpisode(
            EpisodeEnd::kTimeout, "timeouts",
            Context(StrCat("did not answer ", what, " within ", o.step_timeout_seconds,
                           " s (env.process."
                           "step_timeout_seconds)",
                           healthy ? "" : "; restarting it")),
            healthy, partial);
      }
      case absl::StatusCode::kResourceExhausted:
        return EndEpisode(
            EpisodeEnd::kProtocolError, "protocol_errors",
            Context(StrCat("sent an invalid reply to ", what, ": ", line.status().message(),
                           " (env.process.max_line_bytes); restarting it")),
            false);
      default: {
        p.WaitExit(absl::Now() + absl::Milliseconds(500));
        return EndEpisode(
            EpisodeEnd::kEnvError, "crashes",
            Context(StrCat("crashed during ", what, ": ", line.status().message(), ", process ",
                           p.ExitDescription(), WithStderr(p), "; restarting it")),
            false);
      }
    }
  }
  absl::StatusOr<StepResult> r = protocol::ParseObservation(*line);
  if (r.status().code() == absl::StatusCode::kFailedPrecondition) {
    return EndEpisode(EpisodeEnd::kEnvError, "env_errors",
                      Context(StrCat("refused ", what, ": ", r.status().message())), true);
  }
  if (!r.ok()) {
    return EndEpisode(EpisodeEnd::kProtocolError, "protocol_errors",
                      Context(StrCat("sent an invalid reply to ", what, ": ", r.status().message(),
                                     "; restarting it")),
                      false);
  }
  Truncate(*r);
  if (r->partial_score) last_partial_ = r->partial_score;
  if (r->done) in_episode_ = false;
  return *std::move(r);
}

// After a step timeout: the process may only be slow. Ask for a score; a late step reply
// arriving first is skipped. An answer means the process is in sync again and can be kept.
std::optional<double> ProcessEnv::ScoreAfterTimeout() {
  Subprocess& p = *lease_.process;
  if (!p.WriteLine(protocol::ScoreRequest()).ok()) return std::nullopt;
  const absl::Time deadline = absl::Now() + Seconds(pool_->options().score_timeout_seconds);
  for (int replies = 0; replies < 2; ++replies) {
    absl::StatusOr<std::string> line = pool_->ReadReply(p, deadline);
    if (!line.ok()) return std::nullopt;
    absl::StatusOr<double> score = protocol::ParseScore(*line);
    if (score.ok()) return *score;
    if (!protocol::ParseObservation(*line).ok()) return std::nullopt;  // not the late reply
  }
  return std::nullopt;
}

StepResult ProcessEnv::EndEpisode(EpisodeEnd end, std::string_view kind, std::string message,
                                  bool healthy, std::optional<double> partial) {
  Count(kind);
  pool_->Incident(kind, message);
  in_episode_ = false;
  pool_->Release(std::move(lease_), healthy);
  lease_ = {};
  return StepResult::Failure(end, std::move(message), partial);
}

void ProcessEnv::Truncate(StepResult& r) {
  const size_t original = r.observation.size();
  const size_t limit = static_cast<size_t>(pool_->max_observation_bytes());
  if (!TruncateObservation(r, limit)) return;
  pool_->Incident("observation_truncated",
                  Context(StrCat("sent an observation of ", original,
                                 " bytes; truncated to env.max_observation_bytes = ", limit)));
}

absl::StatusOr<double> ProcessEnv::ScorePartial() {
  if (!in_episode_ || lease_.process == nullptr) {
    if (last_partial_) return *last_partial_;
    return absl::FailedPreconditionError(StrCat(DebugString(), ": no episode to score"));
  }
  Subprocess& p = *lease_.process;
  absl::Status status = p.WriteLine(protocol::ScoreRequest());
  absl::StatusOr<std::string> line = std::string();
  if (!status.ok()) line = status;
  if (status.ok()) {
    line = pool_->ReadReply(p, absl::Now() + Seconds(pool_->options().score_timeout_seconds));
  }
  absl::StatusOr<double> score = line.ok() ? protocol::ParseScore(*line) : line.status();
  if (score.ok()) {
    last_partial_ = *score;
    return *score;
  }
  StepResult ended =
      EndEpisode(EpisodeEnd::kEnvError, "score_failures",
                 Context(StrCat("could not give a partial score: ", score.status().message(),
                                "; restarting it")),
                 false);
  return absl::UnavailableError(ended.error);
}

void ProcessEnv::Close() {
  CancelAwait();
  in_episode_ = false;
  if (lease_.slot >= 0) {
    pool_->Release(std::move(lease_), /*healthy=*/true);
    lease_ = {};
  }
}

}  // namespace flywheel
