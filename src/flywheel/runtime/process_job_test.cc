// The embedded job on external environments (examples/guess_process.toml): more episodes in flight
// than process copies, and every way of stopping while environments hang.
#include <gtest/gtest.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/time/clock.h"
#include "flywheel/core/metrics.h"
#include "flywheel/core/strings.h"
#include "flywheel/runtime/embedded_job.h"
#include "flywheel/runtime/run_stop.h"

namespace flywheel {
namespace {

namespace fs = std::filesystem;

std::string SourcePath(const std::string& relative) {
  const char* source = std::getenv("FLYWHEEL_SOURCE_DIR");
  return std::string(source != nullptr ? source : ".") + "/" + relative;
}

// A TOML array of the command's words.
std::string CommandOverride(const std::vector<std::string>& argv) {
  std::string words;
  for (const std::string& w : argv) words += StrCat(words.empty() ? "" : ", ", "\"", w, "\"");
  return StrCat("env.process.command=[", words, "]");
}

// examples/guess_process.toml as shipped, in a fresh runs directory, with the environment's command
// given by absolute path (tests run in the build directory) and `overrides` last.
JobConfig Load(const std::string& name, const std::vector<std::string>& command,
               std::vector<std::string> overrides) {
  const fs::path runs = fs::temp_directory_path() / ("flywheel_process_job_test_" + name);
  fs::remove_all(runs);
  std::vector<std::string> all = {StrCat("run.runs_dir=\"", runs.string(), "\""),
                                  StrCat("run.name=\"", name, "\""), CommandOverride(command),
                                  "run.batch_groups=2"};
  all.insert(all.end(), overrides.begin(), overrides.end());
  absl::StatusOr<JobConfig> config = LoadJobConfig(SourcePath("examples/guess_process.toml"), all);
  EXPECT_TRUE(config.ok()) << config.status();
  return *config;
}

std::vector<std::string> GuessEnv() {
  return {"python3", SourcePath("examples/envs/guess_env.py"), "--range", "16"};
}

// misbehaving_env.py with `args` (see its docstring).
std::vector<std::string> Misbehaving(std::vector<std::string> args) {
  std::vector<std::string> argv = {"python3",
                                   SourcePath("examples/envs/broken/misbehaving_env.py")};
  argv.insert(argv.end(), args.begin(), args.end());
  return argv;
}

int64_t Counter(std::string_view name) {
  return MetricsRegistry::Global().GetCounter(name)->value();
}

nlohmann::json ReadSummary(const JobConfig& config) {
  std::ifstream in(fs::path(config.run.runs_dir) / config.run.name / "summary.json");
  EXPECT_TRUE(in.good()) << "no summary.json";
  return in.good() ? nlohmann::json::parse(in) : nlohmann::json();
}

// Every group the buffer handed out reached the learner: a stop threw none away.
void ExpectNothingSampledWasLost(const nlohmann::json& summary) {
  EXPECT_EQ(summary["groups"]["sampled"], summary["groups"]["trained"]) << summary.dump();
}

struct TimedRun {
  absl::StatusOr<EmbeddedJobResult> result;
  absl::Duration took;
};

TimedRun RunJob(const JobConfig& config, const std::atomic<bool>* stop = nullptr) {
  EmbeddedJobOptions options;
  options.progress = nullptr;
  options.stop = stop;
  const absl::Time start = absl::Now();
  absl::StatusOr<EmbeddedJobResult> result = RunEmbeddedJob(config, options);
  return {std::move(result), absl::Now() - start};
}

// Starting the job (four Python processes, the model) is outside the stop bound.
constexpr absl::Duration kStartAllowance = absl::Seconds(5);

TEST(ProcessJobTest, OneCopyServesSixtyFourEpisodesInFlight) {
  const JobConfig config =
      Load("one_copy", GuessEnv(),
           {"env.process.copies=1", "actor.episodes_in_flight=64", "run.max_steps=3"});
  const int64_t start_failures = Counter("env.failures{kind=start_failures}");
  const TimedRun run = RunJob(config);
  ASSERT_TRUE(run.result.ok()) << run.result.status();
  EXPECT_EQ(run.result->final_step, 3);
  // Episodes queued for the copy instead of failing to start.
  EXPECT_EQ(Counter("env.failures{kind=start_failures}"), start_failures);
  EXPECT_EQ(run.result->summary["episodes_failed"], 0);
  ExpectNothingSampledWasLost(ReadSummary(config));
}

TEST(ProcessJobTest, WallBudgetEndsAJobWhoseEnvironmentNeverAnswers) {
  // Every reset hangs: no trajectory ever comes, the learner waits for a batch, every copy is held
  // by a hung call and further episodes wait for a copy.
  const JobConfig config = Load("hung_wall", Misbehaving({"--fault", "hang", "--when", "always"}),
                                {"run.max_wall_seconds=2", "env.process.step_timeout_seconds=60"});
  const TimedRun run = RunJob(config);
  ASSERT_TRUE(run.result.ok()) << run.result.status();
  EXPECT_LT(run.took, absl::Seconds(2) + kStopBound + kStartAllowance);
  const nlohmann::json summary = ReadSummary(config);
  EXPECT_EQ(summary["stopped_by"], "max_wall_seconds");
  EXPECT_EQ(summary["steps"], 0);
}

TEST(ProcessJobTest, StopRequestEndsAJobWhoseEnvironmentNeverAnswers) {
  const JobConfig config = Load("hung_signal", Misbehaving({"--fault", "hang", "--when", "always"}),
                                {"env.process.step_timeout_seconds=60"});
  std::atomic<bool> stop{false};
  absl::Time requested;
  std::thread signal([&] {
    absl::SleepFor(absl::Seconds(3));
    requested = absl::Now();
    stop.store(true);
  });
  const TimedRun run = RunJob(config, &stop);
  const absl::Time ended = absl::Now();
  signal.join();
  ASSERT_TRUE(run.result.ok()) << run.result.status();
  EXPECT_LT(ended - requested, kStopBound);
  EXPECT_EQ(ReadSummary(config)["stopped_by"], "signal");
}

TEST(ProcessJobTest, MaxStepsEndsAJobWithoutWaitingForHungCalls) {
  // Each process serves six episodes, then hangs on everything: when the last step is trained,
  // calls are hung in every copy, each for up to step_timeout_seconds.
  const JobConfig config =
      Load("hung_steps", Misbehaving({"--fault", "hang", "--when", "always", "--after", "6"}),
           {"env.process.copies=8", "run.max_steps=2", "env.process.step_timeout_seconds=60"});
  const TimedRun run = RunJob(config);
  ASSERT_TRUE(run.result.ok()) << run.result.status();
  EXPECT_EQ(run.result->final_step, 2);
  EXPECT_LT(run.took, absl::Seconds(30)) << "the stop waited for hung environment calls";
  const nlohmann::json summary = ReadSummary(config);
  EXPECT_EQ(summary["stopped_by"], "max_steps");
  ExpectNothingSampledWasLost(summary);
}

TEST(ProcessJobTest, ColocatedJobStopsWhileItsBatchCannotComplete) {
  const JobConfig config = Load(
      "hung_colocated", Misbehaving({"--fault", "hang", "--when", "always"}),
      {"run.mode=\"colocated\"", "run.max_wall_seconds=2", "env.process.step_timeout_seconds=60"});
  const TimedRun run = RunJob(config);
  ASSERT_TRUE(run.result.ok()) << run.result.status();
  EXPECT_LT(run.took, absl::Seconds(2) + kStopBound + kStartAllowance);
  EXPECT_EQ(ReadSummary(config)["stopped_by"], "max_wall_seconds");
}

TEST(ProcessJobTest, AnEnvironmentThatCrashesHangsAndPrintsGarbageKeepsTrainingGoing) {
  const JobConfig config = Load("chaos", Misbehaving({"--fault", "chaos", "--rate", "0.05"}),
                                {"run.max_steps=4", "env.process.step_timeout_seconds=1",
                                 "env.process.score_timeout_seconds=0.2"});
  const int64_t crashes = Counter("env.failures{kind=crashes}");
  const int64_t timeouts = Counter("env.failures{kind=timeouts}");
  const int64_t protocol_errors = Counter("env.failures{kind=protocol_errors}");
  const TimedRun run = RunJob(config);
  ASSERT_TRUE(run.result.ok()) << run.result.status();
  EXPECT_EQ(run.result->final_step, 4);
  const int64_t faults = (Counter("env.failures{kind=crashes}") - crashes) +
                         (Counter("env.failures{kind=timeouts}") - timeouts) +
                         (Counter("env.failures{kind=protocol_errors}") - protocol_errors);
  EXPECT_GT(faults, 0) << "the environment misbehaved on none of the steps";
  const nlohmann::json summary = ReadSummary(config);
  EXPECT_GT(
      summary["episodes_failed"].get<int64_t>() + summary["episodes_timed_out"].get<int64_t>(), 0);
  ExpectNothingSampledWasLost(summary);
}

}  // namespace
}  // namespace flywheel
