// A training run's directory, runs/<name>/:
//
//   config.toml      the effective configuration (defaults filled in, overrides applied)
//   metrics.jsonl    one JSON object per learner step, appended and flushed as it happens
//   tb/              the same lines' numbers as TensorBoard scalars (observe/tensorboard_writer.h)
//   checkpoints/     written by the learner (atomic, with a DONE marker)
//   summary.json     written once at the end
//   trace.json       with run.trace: the timeline, written next to summary.json
//
// Opening an existing directory without resume is an error, so one run never appends to
// another's metrics by accident.
#ifndef FLYWHEEL_RUNTIME_RUN_DIRECTORY_H_
#define FLYWHEEL_RUNTIME_RUN_DIRECTORY_H_

#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "flywheel/observe/tensorboard_writer.h"

namespace flywheel {

class RunDirectory {
 public:
  // Creates runs_dir/name (or reopens it when `resume`) and writes config.toml.
  static absl::StatusOr<std::unique_ptr<RunDirectory>> Open(const std::filesystem::path& runs_dir,
                                                            const std::string& name,
                                                            const std::string& effective_config,
                                                            bool resume);
  ~RunDirectory();

  const std::filesystem::path& path() const { return path_; }
  std::filesystem::path checkpoints() const { return path_ / "checkpoints"; }

  // Appends one line to metrics.jsonl and flushes it (a crash loses at most the line being
  // written), and its numeric fields to the TensorBoard event file. Thread-safe.
  absl::Status AppendMetrics(const nlohmann::json& line);
  // Writes summary.json and, when the process records a trace (run.trace), trace.json: every job
  // writes its summary last, also when stopped by a signal.
  absl::Status WriteSummary(const nlohmann::json& summary);

 private:
  RunDirectory(std::filesystem::path path, std::FILE* metrics,
               std::unique_ptr<TensorBoardWriter> tensorboard)
      : path_(std::move(path)), metrics_(metrics), tensorboard_(std::move(tensorboard)) {}

  const std::filesystem::path path_;
  absl::Mutex mu_;
  std::FILE* metrics_ ABSL_GUARDED_BY(mu_);
  const std::unique_ptr<TensorBoardWriter> tensorboard_ ABSL_GUARDED_BY(mu_);
};

}  // namespace flywheel

#endif  // FLYWHEEL_RUNTIME_RUN_DIRECTORY_H_
