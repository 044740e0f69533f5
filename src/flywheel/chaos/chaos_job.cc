#include "flywheel/chaos/chaos_job.h"

#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <sstream>

#include "absl/strings/numbers.h"
#include "absl/time/clock.h"
#include "flywheel/buffer/durable_store.h"
#include "flywheel/chaos/child_process.h"
#include "flywheel/chaos/ledger.h"
#include "flywheel/chaos/tcp_proxy.h"
#include "flywheel/core/status_macros.h"
#include "flywheel/core/strings.h"
#include "flywheel/core/trajectory_proto.h"
#include "flywheel/env/env_factory.h"
#include "flywheel/learner/checkpoint.h"
#include "flywheel/runtime/consumed_log.h"
#include "flywheel/runtime/job_config.h"
#include "flywheel/runtime/learner_leases.h"
#include "flywheel/runtime/learner_session.h"
#include "flywheel/runtime/policy_setup.h"
#include "flywheel/runtime/policy_text.h"

namespace flywheel::chaos {
namespace fs = std::filesystem;
namespace {

constexpr char kRunName[] = "chaos";
constexpr absl::Duration kTick = absl::Milliseconds(100);
constexpr absl::Duration kConnectTimeout = absl::Seconds(600);  // outlasts any outage here
constexpr absl::Duration kCutHold = absl::Milliseconds(200);     // traffic a cut loses

// A port that was free a moment ago on 127.0.0.1 (the processes bind it for the whole run).
absl::StatusOr<int> FreePort() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof(addr);
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    close(fd);
    return absl::UnavailableError("chaos: no free port on 127.0.0.1");
  }
  close(fd);
  return ntohs(addr.sin_port);
}

// The complete lines appended to a file since the last call (a partial last line waits).
class LogTail {
 public:
  explicit LogTail(std::string path) : path_(std::move(path)) {}
  std::vector<std::string> ReadNew() {
    std::vector<std::string> lines;
    std::ifstream in(path_, std::ios::binary);
    if (!in) return lines;
    in.seekg(offset_);
    std::string chunk((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    offset_ += static_cast<std::streamoff>(chunk.size());
    partial_ += chunk;
    size_t start = 0;
    for (size_t nl; (nl = partial_.find('\n', start)) != std::string::npos; start = nl + 1) {
      lines.push_back(partial_.substr(start, nl - start));
    }
    partial_.erase(0, start);
    return lines;
  }

 private:
  std::string path_;
  std::streamoff offset_ = 0;
  std::string partial_;
};

std::string OneDecimal(double x) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.1f", x);
  return text;
}

double Percentile(std::vector<double> values, double q) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const double at = q * static_cast<double>(values.size() - 1);
  const size_t lo = static_cast<size_t>(at);
  const size_t hi = std::min(values.size() - 1, lo + 1);
  return values[lo] + (values[hi] - values[lo]) * (at - static_cast<double>(lo));
}

std::string LastLines(const std::string& path, int count) {
  std::ifstream in(path);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  std::string out;
  for (size_t i = lines.size() > static_cast<size_t>(count) ? lines.size() - count : 0;
       i < lines.size(); ++i) {
    out += lines[i] + "\n";
  }
  return out;
}

enum class Kind { kBuffer, kLearner, kActor };
const char* KindName(Kind kind) {
  switch (kind) {
    case Kind::kBuffer:
      return "buffer";
    case Kind::kLearner:
      return "learner";
    case Kind::kActor:
      return "actor";
  }
  return "?";
}

struct Process {
  std::string name;  // buffer, learner, actor-0, …
  Kind kind = Kind::kActor;
  int index = 0;  // actors
  ChildProcess child{};
  int incarnation = 0;
  bool killed = false;                             // by the chaos (not an unexpected exit)
  absl::Time restart_at = absl::InfiniteFuture();  // down until then
  absl::Time thaw_at = absl::InfiniteFuture();     // frozen until then
  std::string out{}, err{};                        // this incarnation's log files
  // Recovery of the latest restart: from `restarted` to the next sign of work.
  std::optional<absl::Time> restarted{};
};

class ChaosJob {
 public:
  explicit ChaosJob(const ChaosOptions& options)
      : options_(options), schedule_(options.seed, options.faults) {}
  ~ChaosJob() { StopAll(/*clean=*/false); }

  absl::StatusOr<nlohmann::json> Run();

 private:
  void Log(const std::string& line);
  absl::Status Setup();
  std::vector<std::string> Argv(const Process& p) const;
  absl::Status Start(Process& p);
  absl::Status WaitForLine(Process& p, const std::string& text, absl::Duration timeout);
  bool HasCheckpoint() const;
  std::vector<std::string> Targets(bool for_kill) const;
  void Apply(const Fault& fault);
  // Reaps exits, thaws, restarts and ends proxy faults that are due; follows the logs.
  absl::Status Tick();
  void FollowLogs();
  void Recovered(Process& p, absl::Time at);
  void StopAll(bool clean);
  absl::StatusOr<nlohmann::json> Report(absl::Duration wall);
  Process* Find(const std::string& name);

  const ChaosOptions options_;
  FaultSchedule schedule_;
  fs::path work_;
  std::string buffer_address_;
  std::string weights_address_;
  std::vector<std::string> sets_;  // --set for every process
  JobConfig job_;
  std::vector<Process> processes_;  // buffer, learner, actors
  std::unique_ptr<TcpProxy> proxy_;
  TcpProxy::Stats proxy_stats_;  // when it stopped
  absl::Time start_;
  absl::Time delay_until_ = absl::InfiniteFuture();
  absl::Duration current_delay_;                 // of the delay fault in force
  absl::Time cut_at_ = absl::InfiniteFuture();  // a cut holding traffic until then
  std::vector<std::unique_ptr<LogTail>> ack_tails_;  // per actor
  std::unique_ptr<LogTail> consumed_tail_;
  int64_t learner_steps_seen_ = 0;

  std::map<std::string, int64_t> kills_;  // by kind
  int64_t stops_ = 0;
  std::map<std::string, int64_t> proxy_faults_;
  std::map<std::string, std::vector<double>> recovery_;  // by kind, seconds
  int64_t interrupted_ = 0;  // restarts killed again before they recovered
  nlohmann::json unexpected_ = nlohmann::json::array();
};

void ChaosJob::Log(const std::string& line) {
  if (options_.log == nullptr) return;
  std::fprintf(options_.log, "[%7.1fs] %s\n", absl::ToDoubleSeconds(absl::Now() - start_),
               line.c_str());
  std::fflush(options_.log);
}

Process* ChaosJob::Find(const std::string& name) {
  for (Process& p : processes_) {
    if (p.name == name) return &p;
  }
  return nullptr;
}

absl::Status ChaosJob::Setup() {
  work_ = options_.work_dir;
  std::error_code ec;
  if (fs::exists(work_) && !fs::is_empty(work_, ec)) {
    return absl::AlreadyExistsError(
        StrCat("chaos: the work directory ", work_.string(), " is not empty"));
  }
  for (const char* sub : {"logs", "acks", "runs"}) fs::create_directories(work_ / sub, ec);
  if (ec)
    return absl::InternalError(StrCat("chaos: creating ", work_.string(), ": ", ec.message()));
  ASSIGN_OR_RETURN(job_, LoadJobConfig(options_.config, options_.overrides));
  ASSIGN_OR_RETURN(const int buffer_port, FreePort());
  ASSIGN_OR_RETURN(const int weights_port, FreePort());
  buffer_address_ = StrCat("127.0.0.1:", buffer_port);
  weights_address_ = StrCat("127.0.0.1:", weights_port);
  sets_ = options_.overrides;
  const int64_t remember = options_.breakage == Breakage::kIdempotency ? 0 : 1 << 22;
  for (std::string set : {
           StrCat("buffer.durable=true"),
           StrCat("buffer.path=\"", (work_ / "buffer.db").string(), "\""),
           StrCat("buffer.group_size=", job_.actor.group_size),
           // Every consumed id stays on record: the ledger reads the buffer's drops from it.
           StrCat("buffer.remember_ids=", remember),
           StrCat("run.runs_dir=\"", (work_ / "runs").string(), "\""),
           StrCat("run.name=\"", kRunName, "\""),
           StrCat("run.max_steps=1000000000"),
           StrCat("run.max_wall_seconds=0"),
       }) {
    sets_.push_back(std::move(set));
  }
  ASSIGN_OR_RETURN(job_, LoadJobConfig(options_.config, sets_));

  processes_.push_back(Process{.name = "buffer", .kind = Kind::kBuffer});
  processes_.push_back(Process{.name = "learner", .kind = Kind::kLearner});
  for (int i = 0; i < options_.actors; ++i) {
    processes_.push_back(Process{.name = StrCat("actor-", i), .kind = Kind::kActor, .index = i});
    ack_tails_.push_back(
        std::make_unique<LogTail>((work_ / "acks" / StrCat("actor-", i, ".log")).string()));
  }
  consumed_tail_ =
      std::make_unique<LogTail>((work_ / "runs" / kRunName / ConsumedLog::kFileName).string());
  return absl::OkStatus();
}

std::vector<std::string> ChaosJob::Argv(const Process& p) const {
  std::vector<std::string> argv = {options_.flywheel, "--log-level", "warn"};
  auto add_sets = [&] {
    argv.push_back("--set");
    for (const std::string& s : sets_) argv.push_back(s);
  };
  const std::string timeout = StrCat(absl::ToInt64Seconds(kConnectTimeout));
  switch (p.kind) {
    case Kind::kBuffer:
      argv.insert(argv.end(),
                  {"serve", "buffer", "--config", options_.config, "--address", buffer_address_});
      add_sets();
      break;
    case Kind::kLearner:
      argv.insert(argv.end(), {"learner", options_.config, "--buffer", buffer_address_,
                               "--weights-listen", weights_address_, "--connect-timeout", timeout});
      if (p.incarnation > 1) argv.push_back("--resume");
      if (options_.breakage == Breakage::kLeases) argv.push_back("--no-leases");
      add_sets();
      break;
    case Kind::kActor:
      argv.insert(argv.end(), {"actor", options_.config, "--buffer", proxy_->address(), "--weights",
                               weights_address_, "--actor-index", StrCat(p.index),
                               "--connect-timeout", timeout, "--poll-interval", "0.2", "--ack-log",
                               (work_ / "acks" / StrCat(p.name, ".log")).string()});
      add_sets();
      break;
  }
  return argv;
}

absl::Status ChaosJob::Start(Process& p) {
  ++p.incarnation;
  p.killed = false;
  p.restart_at = absl::InfiniteFuture();
  p.thaw_at = absl::InfiniteFuture();
  p.out = (work_ / "logs" / StrCat(p.name, ".", p.incarnation, ".out")).string();
  p.err = (work_ / "logs" / StrCat(p.name, ".", p.incarnation, ".err")).string();
  ASSIGN_OR_RETURN(p.child, ChildProcess::Spawn(Argv(p), p.out, p.err));
  if (p.incarnation > 1) p.restarted = absl::Now();
  return absl::OkStatus();
}

absl::Status ChaosJob::WaitForLine(Process& p, const std::string& text, absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  while (absl::Now() < deadline) {
    std::ifstream in(p.out);
    std::stringstream content;
    content << in.rdbuf();
    if (content.str().find(text) != std::string::npos) return absl::OkStatus();
    if (p.child.Poll().has_value()) break;
    absl::SleepFor(absl::Milliseconds(50));
  }
  return absl::UnavailableError(StrCat("chaos: the ", p.name, " did not start (no \"", text,
                                       "\" in ", p.out, "):\n", LastLines(p.err, 10)));
}

bool ChaosJob::HasCheckpoint() const {
  CheckpointManager checkpoints(
      CheckpointOptions{(work_ / "runs" / kRunName / "checkpoints").string(), 3});
  absl::StatusOr<std::optional<std::string>> latest = checkpoints.Latest();
  return latest.ok() && latest->has_value();
}

std::vector<std::string> ChaosJob::Targets(bool for_kill) const {
  std::vector<std::string> targets;
  for (const Process& p : processes_) {
    if (!p.child.running()) continue;
    if (!for_kill && p.thaw_at != absl::InfiniteFuture()) continue;  // frozen already
    // The learner restarts with --resume: only once there is a checkpoint to resume from.
    if (for_kill && p.kind == Kind::kLearner && !HasCheckpoint()) continue;
    targets.push_back(p.name);
  }
  return targets;
}

void ChaosJob::Apply(const Fault& fault) {
  switch (fault.kind) {
    case Fault::Kind::kKill: {
      Process* p = Find(fault.target);
      if (p->restarted.has_value()) {
        ++interrupted_;  // killed again before it was back at work
        p->restarted.reset();
      }
      p->child.Signal(SIGKILL);
      p->child.Wait(absl::Seconds(10));
      p->killed = true;
      p->thaw_at = absl::InfiniteFuture();
      p->restart_at = absl::Now() + fault.duration;
      ++kills_[KindName(p->kind)];
      break;
    }
    case Fault::Kind::kFreeze: {
      Process* p = Find(fault.target);
      p->child.Signal(SIGSTOP);
      p->thaw_at = absl::Now() + fault.duration;
      ++stops_;
      break;
    }
    case Fault::Kind::kDelay:
      proxy_->SetDelay(fault.delay);
      current_delay_ = fault.delay;
      delay_until_ = absl::Now() + fault.duration;
      ++proxy_faults_["delay"];
      break;
    case Fault::Kind::kRefuse:
      proxy_->RefuseFor(fault.duration);
      ++proxy_faults_["refuse"];
      break;
    case Fault::Kind::kCut:
      // Traffic is held for a moment first, then every connection reset: whatever was in
      // flight is lost, acknowledgements of inserts the buffer committed among it.
      proxy_->SetDelay(std::max(current_delay_, kCutHold + absl::Milliseconds(100)));
      cut_at_ = absl::Now() + kCutHold;
      ++proxy_faults_["cut"];
      break;
  }
  Log(fault.DebugString());
}

void ChaosJob::Recovered(Process& p, absl::Time at) {
  if (!p.restarted.has_value() || at <= *p.restarted) return;
  const double seconds = absl::ToDoubleSeconds(at - *p.restarted);
  recovery_[KindName(p.kind)].push_back(seconds);
  p.restarted.reset();
  Log(StrCat(p.name, " back at work ", OneDecimal(seconds), " s after its restart"));
}

void ChaosJob::FollowLogs() {
  for (size_t i = 0; i < ack_tails_.size(); ++i) {
    for (const std::string& line : ack_tails_[i]->ReadNew()) {
      int64_t ms = 0;
      if (!absl::SimpleAtoi(line.substr(0, line.find(' ')), &ms)) continue;
      const absl::Time at = absl::FromUnixMillis(ms);
      Recovered(*Find(StrCat("actor-", i)), at);
      Recovered(*Find("buffer"), at);
    }
  }
  for (const std::string& line : consumed_tail_->ReadNew()) {
    const nlohmann::json record = nlohmann::json::parse(line, nullptr, false);
    if (record.is_discarded() || !record.contains("step")) continue;
    ++learner_steps_seen_;
    Recovered(*Find("learner"),
              absl::FromUnixMicros(static_cast<int64_t>(record.value("t", 0.0) * 1e6)));
  }
}

absl::Status ChaosJob::Tick() {
  const absl::Time now = absl::Now();
  for (Process& p : processes_) {
    if (p.child.running() && p.thaw_at <= now) {
      p.child.Signal(SIGCONT);
      p.thaw_at = absl::InfiniteFuture();
    }
    if (!p.killed && p.incarnation > 0) {
      if (std::optional<int> status = p.child.Poll(); status.has_value()) {
        // Exited by itself: a robustness bug the report names; the job goes on without it.
        unexpected_.push_back({{"process", p.name},
                               {"incarnation", p.incarnation},
                               {"status", ChildProcess::Describe(*status)},
                               {"stderr", LastLines(p.err, 5)}});
        Log(StrCat(p.name, " exited by itself (", ChildProcess::Describe(*status),
                   "): ", LastLines(p.err, 1)));
        p.killed = true;
        p.restart_at = now + absl::Seconds(1);
      }
    }
    if (p.killed && p.restart_at <= now) {
      RETURN_IF_ERROR(Start(p));
      if (p.kind == Kind::kBuffer) {
        RETURN_IF_ERROR(WaitForLine(p, "serving on", absl::Seconds(60)));
      }
    }
  }
  if (delay_until_ <= now) {
    current_delay_ = absl::ZeroDuration();
    delay_until_ = absl::InfiniteFuture();
    proxy_->SetDelay(current_delay_);
  }
  if (cut_at_ <= now) {
    proxy_->CutAll();
    proxy_->SetDelay(current_delay_);
    cut_at_ = absl::InfiniteFuture();
  }
  FollowLogs();
  return absl::OkStatus();
}

void ChaosJob::StopAll(bool clean) {
  if (proxy_ != nullptr) proxy_->SetDelay(absl::ZeroDuration());
  for (Process& p : processes_) p.child.Signal(SIGCONT);
  // Actors first (nothing in flight to the buffer), then the learner (a last checkpoint and
  // its acknowledgement), then the buffer.
  for (Kind kind : {Kind::kActor, Kind::kLearner, Kind::kBuffer}) {
    for (Process& p : processes_) {
      if (p.kind != kind || !p.child.running()) continue;
      p.child.Signal(clean ? SIGTERM : SIGKILL);
    }
    for (Process& p : processes_) {
      if (p.kind != kind || !p.child.running()) continue;
      const int status =
          p.child.Wait(kind == Kind::kLearner ? absl::Seconds(120) : absl::Seconds(30));
      if (clean && status != 0) {
        unexpected_.push_back({{"process", p.name},
                               {"incarnation", p.incarnation},
                               {"status", StrCat("stopping: ", ChildProcess::Describe(status))},
                               {"stderr", LastLines(p.err, 5)}});
      }
    }
  }
  if (proxy_ != nullptr) proxy_stats_ = proxy_->stats();
  proxy_.reset();
}

absl::StatusOr<nlohmann::json> ChaosJob::Run() {
  start_ = absl::Now();
  RETURN_IF_ERROR(Setup());
  Process& buffer = *Find("buffer");
  RETURN_IF_ERROR(Start(buffer));
  RETURN_IF_ERROR(WaitForLine(buffer, "serving on", absl::Seconds(60)));
  ASSIGN_OR_RETURN(proxy_, TcpProxy::Start(0, buffer_address_));
  Process& learner = *Find("learner");
  RETURN_IF_ERROR(Start(learner));
  RETURN_IF_ERROR(WaitForLine(learner, "serving weights on", absl::Seconds(120)));
  for (Process& p : processes_) {
    if (p.kind == Kind::kActor) RETURN_IF_ERROR(Start(p));
  }
  Log(StrCat("buffer on ", buffer_address_, " (actors through the proxy on ", proxy_->address(),
             "), weights on ", weights_address_, ", work directory ", work_.string()));

  // Faults start once the job works end to end.
  const absl::Time warm_deadline = absl::Now() + absl::Seconds(300);
  while (learner_steps_seen_ == 0) {
    if (absl::Now() > warm_deadline) {
      return absl::DeadlineExceededError(StrCat(
          "chaos: the learner made no step within 300 s; its log:\n", LastLines(learner.err, 10)));
    }
    RETURN_IF_ERROR(Tick());
    absl::SleepFor(kTick);
  }
  const absl::Time faults_from = absl::Now();
  const absl::Time faults_until = faults_from + options_.duration - options_.quiet_tail;
  const absl::Time window_end = faults_from + options_.duration;
  Log(StrCat("the learner stepped: faults for ",
             absl::FormatDuration(options_.duration - options_.quiet_tail), ", then ",
             absl::FormatDuration(options_.quiet_tail), " without"));
  absl::Time next_fault = absl::Now() + schedule_.NextGap();
  while (absl::Now() < window_end) {
    RETURN_IF_ERROR(Tick());
    if (absl::Now() >= next_fault && absl::Now() < faults_until) {
      // Draw the fault first, then its target among the processes that can take it now.
      Fault fault = schedule_.Next(Targets(/*for_kill=*/true));
      if (fault.kind == Fault::Kind::kFreeze) {
        const std::vector<std::string> frozen_ok = Targets(/*for_kill=*/false);
        if (std::find(frozen_ok.begin(), frozen_ok.end(), fault.target) == frozen_ok.end()) {
          fault.kind = Fault::Kind::kCut;  // frozen already: the network takes it instead
        }
      }
      Apply(fault);
      next_fault = absl::Now() + schedule_.NextGap();
    }
    absl::SleepFor(kTick);
  }
  // Everything back at work (or the bound passed) before the clean stop.
  const absl::Time settle = absl::Now() + options_.recovery_bound;
  auto pending = [&] {
    for (const Process& p : processes_) {
      if (p.restarted.has_value() || !p.child.running()) return true;
    }
    return false;
  };
  while (pending() && absl::Now() < settle) {
    RETURN_IF_ERROR(Tick());
    absl::SleepFor(kTick);
  }
  Log("stopping every process cleanly");
  StopAll(/*clean=*/true);
  FollowLogs();
  return Report(absl::Now() - start_);
}

// Ids held by the stopped buffer's store and its consumed records.
absl::Status ReadStore(const std::string& path, std::vector<std::string>* remaining,
                       std::vector<std::pair<std::string, std::string>>* consumed) {
  ASSIGN_OR_RETURN(std::unique_ptr<DurableStore> store, DurableStore::Open(path));
  RETURN_IF_ERROR(store->ForEach([&](uint64_t key, std::string_view value) -> absl::Status {
    v1::Trajectory proto;
    if (!proto.ParseFromArray(value.data(), static_cast<int>(value.size()))) {
      return absl::DataLossError(StrCat("chaos: ", path, ": record ", key, " does not parse"));
    }
    remaining->push_back(proto.id());
    return absl::OkStatus();
  }));
  return store->ForEachConsumed([&](std::string_view id, std::string_view reason) {
    consumed->emplace_back(std::string(id), std::string(reason));
    return absl::OkStatus();
  });
}

// Loads the run's newest checkpoint as `flywheel learner --resume` would.
absl::StatusOr<int64_t> LoadFinalCheckpoint(const JobConfig& job) {
  ASSIGN_OR_RETURN(std::unique_ptr<EnvFactory> factory, EnvFactory::Create(job.env));
  ASSIGN_OR_RETURN(const PolicyText text, MakePolicyText(job, *factory));
  ASSIGN_OR_RETURN(ModelOptions model,
                   ResolveModelOptions(job, *text.tokenizer, text.tokenizer_name));
  ASSIGN_OR_RETURN(std::unique_ptr<LearnerSession> session,
                   LearnerSession::Open(job, model, /*resume=*/true));
  return session->step();
}

absl::StatusOr<nlohmann::json> ChaosJob::Report(absl::Duration wall) {
  LedgerInputs inputs;
  for (int i = 0; i < options_.actors; ++i) {
    inputs.ack_logs.push_back((work_ / "acks" / StrCat("actor-", i, ".log")).string());
  }
  inputs.consumed_log = (work_ / "runs" / kRunName / ConsumedLog::kFileName).string();
  RETURN_IF_ERROR(
      ReadStore((work_ / "buffer.db").string(), &inputs.remaining, &inputs.buffer_consumed));
  CheckpointManager checkpoints(
      CheckpointOptions{(work_ / "runs" / kRunName / "checkpoints").string(), 3});
  ASSIGN_OR_RETURN(const std::vector<int64_t> steps, checkpoints.CompleteSteps());
  nlohmann::json final_checkpoint = {{"step", steps.empty() ? 0 : steps.back()}};
  if (!steps.empty()) {
    inputs.final_checkpoint_step = steps.back();
    LearnerLeases leases;
    RETURN_IF_ERROR(leases.Read(checkpoints.PathFor(steps.back())));
    for (const LearnerLeases::Consumed& c : leases.pending()) inputs.final_pending.push_back(c.id);
    absl::StatusOr<int64_t> loaded = LoadFinalCheckpoint(job_);
    final_checkpoint["loads"] = loaded.ok() && *loaded == steps.back();
    if (!loaded.ok()) final_checkpoint["error"] = std::string(loaded.status().message());
  } else {
    final_checkpoint["loads"] = false;
    final_checkpoint["error"] = "no complete checkpoint";
  }
  ASSIGN_OR_RETURN(const Ledger ledger, BuildLedger(inputs));

  nlohmann::json kills = {{"total", 0}};
  for (const auto& [kind, n] : kills_) {
    kills[kind] = n;
    kills["total"] = kills["total"].get<int64_t>() + n;
  }
  nlohmann::json proxy = {{"total", 0}};
  for (const auto& [kind, n] : proxy_faults_) {
    proxy[kind] = n;
    proxy["total"] = proxy["total"].get<int64_t>() + n;
  }
  proxy["connections_refused"] = proxy_stats_.refused;
  proxy["connections_cut"] = proxy_stats_.cut;
  proxy["connections"] = proxy_stats_.accepted;
  std::vector<double> all;
  nlohmann::json by_kind = nlohmann::json::object();
  for (const auto& [kind, seconds] : recovery_) {
    by_kind[kind] = {{"count", seconds.size()},
                     {"p50", Percentile(seconds, 0.5)},
                     {"max", *std::max_element(seconds.begin(), seconds.end())}};
    all.insert(all.end(), seconds.begin(), seconds.end());
  }
  int64_t unrecovered = 0;
  for (const Process& p : processes_) unrecovered += p.restarted.has_value();
  const double bound = absl::ToDoubleSeconds(options_.recovery_bound);
  const double max_recovery = all.empty() ? 0 : *std::max_element(all.begin(), all.end());
  nlohmann::json recovery = {{"bound", bound},
                             {"count", all.size()},
                             {"p50", Percentile(all, 0.5)},
                             {"max", max_recovery},
                             {"by_kind", by_kind},
                             {"interrupted", interrupted_},
                             {"unrecovered", unrecovered}};
  const bool ok = ledger.ok() && final_checkpoint["loads"].get<bool>() && unrecovered == 0 &&
                  max_recovery <= bound && unexpected_.empty();
  const nlohmann::json l = ledger.ToJson();
  nlohmann::json report = {
      {"ok", ok},
      {"config", options_.config},
      {"seed", options_.seed},
      {"minutes", absl::ToDoubleMinutes(options_.duration)},
      {"actors", options_.actors},
      {"break", options_.breakage == Breakage::kIdempotency ? "idempotency"
                : options_.breakage == Breakage::kLeases    ? "leases"
                                                            : "none"},
      {"work_dir", work_.string()},
      {"wall_seconds", absl::ToDoubleSeconds(wall)},
      {"kills", kills},
      {"stops", stops_},
      {"proxy_faults", proxy},
      {"unexpected_exits", unexpected_},
      {"acked", l["acked"]},
      {"trained", l["trained"]},
      {"dropped", l["dropped"]},
      {"rolled_back", l["rolled_back"]},
      {"remaining", l["remaining"]},
      {"lost", l["lost"]},
      {"duplicates", l["duplicates"]},
      {"recovery_seconds", recovery},
      {"final_checkpoint", final_checkpoint},
      {"ledger", l},
  };
  Log(StrCat(ok ? "OK" : "FAILED", ": ", kills["total"].get<int64_t>(), " kills, ", stops_,
             " freezes, ", proxy["total"].get<int64_t>(), " proxy faults; ", ledger.acked,
             " acknowledged, ", ledger.trained, " trained, ", ledger.remaining, " remaining, ",
             ledger.lost, " lost, ", ledger.duplicates, " trained twice; ", ledger.steps,
             " steps (", ledger.rolled_back, " trajectories rolled back); recovery p50 ",
             OneDecimal(Percentile(all, 0.5)), " s, max ", OneDecimal(max_recovery), " s (bound ",
             bound, " s)"));
  return report;
}

}  // namespace

absl::StatusOr<nlohmann::json> RunChaos(const ChaosOptions& options) {
  if (options.actors < 1) return absl::InvalidArgumentError("chaos: --actors must be >= 1");
  if (options.duration <= options.quiet_tail) {
    return absl::InvalidArgumentError("chaos: the run must be longer than its quiet tail");
  }
  ChaosJob job(options);
  return job.Run();
}

}  // namespace flywheel::chaos
