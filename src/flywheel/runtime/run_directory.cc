#include "flywheel/runtime/run_directory.h"

#include <cerrno>
#include <cstring>

#include "flywheel/core/file_util.h"
#include "flywheel/core/metrics.h"
#include "flywheel/core/strings.h"
#include "flywheel/observe/trace_recorder.h"

namespace flywheel {
namespace {

absl::Status ErrnoError(std::string_view what, const std::filesystem::path& path) {
  return absl::UnavailableError(StrCat(what, " ", path.string(), ": ", std::strerror(errno)));
}

// A step line is the one report of a finished learner step that every job writes, so the
// registry's step counters (what Prometheus scrapes) are kept from it.
void CountStep(const nlohmann::json& line) {
  struct Metrics {
    Counter* steps;
    Counter* tokens;
    Counter* trajectories;
    Gauge* version;
  };
  static const Metrics m = [] {
    MetricsRegistry& r = MetricsRegistry::Global();
    return Metrics{r.GetCounter("learner.steps", "learner steps finished"),
                   r.GetCounter("learner.trained_tokens", "trainable tokens trained on"),
                   r.GetCounter("learner.trained_trajectories", "trajectories trained on"),
                   r.GetGauge("learner.version", "policy version of the learner's weights")};
  }();
  auto number = [&](const char* key) -> int64_t {
    auto it = line.find(key);
    return it != line.end() && it->is_number() ? it->get<int64_t>() : 0;
  };
  m.steps->Increment();
  m.tokens->Increment(number("trainable_tokens"));
  m.trajectories->Increment(number("trajectories"));
  if (line.contains("version")) m.version->Set(static_cast<double>(number("version")));
}

}  // namespace

absl::StatusOr<std::unique_ptr<RunDirectory>> RunDirectory::Open(
    const std::filesystem::path& runs_dir, const std::string& name,
    const std::string& effective_config, bool resume) {
  const std::filesystem::path path = runs_dir / name;
  std::error_code ec;
  const bool exists = std::filesystem::exists(path, ec);
  if (exists && !resume) {
    return absl::AlreadyExistsError(
        StrCat("run directory ", path.string(),
               " already exists: pass --resume to continue it, or choose another run.name "
               "(--set run.name=…)"));
  }
  if (!exists && resume) {
    return absl::NotFoundError(StrCat("--resume: no run directory ", path.string()));
  }
  std::filesystem::create_directories(path / "checkpoints", ec);
  if (ec) {
    return absl::UnavailableError(StrCat("create ", path.string(), ": ", ec.message()));
  }
  if (auto s = WriteFileAtomically(path / "config.toml", effective_config); !s.ok()) return s;
  std::FILE* metrics = std::fopen((path / "metrics.jsonl").c_str(), "a");
  if (metrics == nullptr) return ErrnoError("open", path / "metrics.jsonl");
  // A resumed run adds a new event file; TensorBoard reads the directory's files as one.
  absl::StatusOr<std::unique_ptr<TensorBoardWriter>> tensorboard =
      TensorBoardWriter::Open(path / "tb");
  if (!tensorboard.ok()) {
    std::fclose(metrics);
    return tensorboard.status();
  }
  return std::unique_ptr<RunDirectory>(new RunDirectory(path, metrics, *std::move(tensorboard)));
}

RunDirectory::~RunDirectory() {
  absl::MutexLock lock(&mu_);
  if (metrics_ != nullptr) std::fclose(metrics_);
}

absl::Status RunDirectory::AppendMetrics(const nlohmann::json& line) {
  CountStep(line);
  const std::string text = line.dump() + "\n";
  absl::MutexLock lock(&mu_);
  if (std::fwrite(text.data(), 1, text.size(), metrics_) != text.size() ||
      std::fflush(metrics_) != 0) {
    return ErrnoError("append to", path_ / "metrics.jsonl");
  }
  return tensorboard_->WriteMetricsLine(line);
}

absl::Status RunDirectory::WriteSummary(const nlohmann::json& summary) {
  if (auto s = WriteFileAtomically(path_ / "summary.json", summary.dump(2) + "\n"); !s.ok()) {
    return s;
  }
  if (!TraceRecorder::Global().enabled()) return absl::OkStatus();
  return TraceRecorder::Global().WriteJson(path_ / "trace.json");
}

}  // namespace flywheel
