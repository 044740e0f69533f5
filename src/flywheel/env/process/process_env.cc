#include "flywheel/env/process/process_env.h"

#include <spdlog/spdlog.h>

#include "absl/time/clock.h"
#include "flywheel/core/status_macros.h"
#include "flywheel/env/observation_limit.h"

namespace flywheel {
namespace {

absl::Duration Seconds(double s) { return absl::Milliseconds(static_cast<int64_t>(s * 1000)); }

std::string MetricName(std::string_view kind) {
  return kind == "observation_truncated" ? "env.observation_truncated"
                                         : StrCat("env.process.", kind);
}

void Count(std::string_view kind) {
  MetricsRegistry::Global().GetCounter(MetricName(kind))->Increment();
}

std::string WithStderr(const Subprocess& p) {
  const std::string tail = p.StderrTail();
  return tail.empty() ? "" : StrCat("; stderr: ", tail);
}

}  // namespace

ProcessPool::ProcessPool(const ProcessOptions& options, int64_t max_observation_bytes)
    : options_(options),
      max_observation_bytes_(max_observation_bytes),
      restarts_(MetricsRegistry::Global().GetCounter("env.process.restarts")) {}

std::string ProcessPool::command() const { return Join(options_.command, " "); }

absl::StatusOr<std::unique_ptr<Subprocess>> ProcessPool::StartOne(protocol::Hello* hello) {
  ASSIGN_OR_RETURN(std::unique_ptr<Subprocess> p, Subprocess::Start(options_.command));
  const std::string who = StrCat("environment `", command(), "` (pid ", p->pid(), ")");
  absl::Status status = p->WriteLine(protocol::HelloRequest());
  absl::StatusOr<std::string> line;
  if (status.ok()) {
    line = p->ReadLine(absl::Now() + Seconds(options_.start_timeout_seconds),
                       static_cast<size_t>(options_.max_line_bytes));
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

absl::StatusOr<ProcessPool::Lease> ProcessPool::Acquire(absl::Time deadline) {
  Lease lease;
  {
    absl::MutexLock lock(&mu_);
    auto available = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return !idle_.empty(); };
    if (!mu_.AwaitWithDeadline(absl::Condition(&available), deadline)) {
      return absl::DeadlineExceededError(StrCat("all ", options_.copies, " copies of environment `",
                                                command(),
                                                "` stayed busy (raise env.process.copies)"));
    }
    lease = std::move(idle_.back());
    idle_.pop_back();
  }
  if (lease.process == nullptr || !lease.process->Running()) {  // died while idle: restart
    absl::StatusOr<std::unique_ptr<Subprocess>> p = StartOne(nullptr);
    if (!p.ok()) {
      lease.process.reset();
      Release(std::move(lease), /*healthy=*/false);
      return p.status();
    }
    lease.process = *std::move(p);
    restarts_->Increment();
  }
  return lease;
}

void ProcessPool::Release(Lease lease, bool healthy) {
  if (!healthy && lease.process) {
    lease.process->Kill();
    lease.process.reset();
  }
  absl::MutexLock lock(&mu_);
  idle_.push_back(std::move(lease));
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

absl::StatusOr<StepResult> ProcessEnv::Reset(const TaskInstance& task) {
  last_partial_.reset();
  if (lease_.process == nullptr) {
    const ProcessOptions& o = pool_->options();
    absl::StatusOr<ProcessPool::Lease> lease =
        pool_->Acquire(absl::Now() + Seconds(o.start_timeout_seconds + o.step_timeout_seconds));
    if (!lease.ok()) {
      Count("start_failures");
      pool_->Incident("start_failures", std::string(lease.status().message()));
      return StepResult::Failure(EpisodeEnd::kEnvError, std::string(lease.status().message()));
    }
    lease_ = *std::move(lease);
  }
  in_episode_ = true;
  StepResult r = Exchange(protocol::ResetRequest(task.task, task.seed), "reset");
  if (r.end == EpisodeEnd::kRunning && r.done) {
    r.end = EpisodeEnd::kDone;
  }
  return r;
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
    line = p.ReadLine(absl::Now() + Seconds(o.step_timeout_seconds),
                      static_cast<size_t>(o.max_line_bytes));
  }
  if (!line.ok()) {
    switch (line.status().code()) {
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
    absl::StatusOr<std::string> line =
        p.ReadLine(deadline, static_cast<size_t>(pool_->options().max_line_bytes));
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
    line = p.ReadLine(absl::Now() + Seconds(pool_->options().score_timeout_seconds),
                      static_cast<size_t>(pool_->options().max_line_bytes));
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
  in_episode_ = false;
  if (lease_.process != nullptr) {
    pool_->Release(std::move(lease_), /*healthy=*/true);
    lease_ = {};
  }
}

}  // namespace flywheel
