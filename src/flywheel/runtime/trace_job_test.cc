// run.trace = true end to end: a short embedded job writes trace.json beside summary.json, a
// well-formed Chrome trace whose learner busy time is the one summary.json reports.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "flywheel/runtime/embedded_job.h"
#include "flywheel/runtime/job_test_util.h"

namespace flywheel {
namespace {

namespace fs = std::filesystem;

nlohmann::json ReadJson(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return nlohmann::json::parse(text.str());  // throws (fails the test) when not valid JSON
}

struct Event {
  std::string name;
  double ts = 0;
  double dur = 0;
};

TEST(TraceJobTest, AsyncJobWritesAWellFormedTraceMatchingTheSummary) {
  absl::StatusOr<JobConfig> config = testing::LoadGuessJob(
      "trace", {"run.batch_groups=4", "buffer.max_size=8", "actor.episodes_in_flight=32",
                "run.max_steps=6", "run.trace=true"});
  ASSERT_TRUE(config.ok()) << config.status();
  EmbeddedJobOptions options;
  options.progress = nullptr;
  absl::StatusOr<EmbeddedJobResult> result = RunEmbeddedJob(*config, options);
  ASSERT_TRUE(result.ok()) << result.status();
  const fs::path dir = fs::path(config->run.runs_dir) / config->run.name;
  ASSERT_TRUE(fs::exists(dir / "trace.json"));
  const nlohmann::json trace = ReadJson(dir / "trace.json");
  const nlohmann::json summary = ReadJson(dir / "summary.json");

  std::map<int, std::string> track_names;
  std::map<int, std::vector<Event>> tracks;
  for (const nlohmann::json& e : trace.at("traceEvents")) {
    const std::string ph = e.at("ph");
    ASSERT_TRUE(ph == "X" || ph == "M") << e;  // complete events only: every span closed
    if (ph == "M") {
      if (e["name"] == "thread_name") track_names[e["tid"]] = e["args"]["name"];
      continue;
    }
    Event event{e.at("name"), e.at("ts"), e.at("dur")};
    EXPECT_GE(event.dur, 0) << e;
    EXPECT_GE(event.ts, 0) << e;
    tracks[e.at("tid")].push_back(event);
  }
  std::set<std::string> names;
  for (const auto& [tid, name] : track_names) names.insert(name);
  for (const char* track : {"learner", "actor-0", "buffer / actor-0", "buffer / learner", "env"}) {
    EXPECT_TRUE(names.contains(track)) << track;
  }

  // Within a track, spans are disjoint or nested (1 ns of slack for the microsecond rounding).
  for (auto& [tid, events] : tracks) {
    std::sort(events.begin(), events.end(), [](const Event& a, const Event& b) {
      return a.ts != b.ts ? a.ts < b.ts : a.dur > b.dur;
    });
    std::vector<double> open_ends;  // ends of the spans containing the current one
    for (const Event& e : events) {
      while (!open_ends.empty() && e.ts >= open_ends.back() - 1e-3) open_ends.pop_back();
      if (!open_ends.empty()) {
        EXPECT_LE(e.ts + e.dur, open_ends.back() + 1e-3)
            << track_names[tid] << ": " << e.name << " at " << e.ts << " overlaps its neighbour";
      }
      open_ends.push_back(e.ts + e.dur);
    }
  }

  // The learner's busy time: the phases utilisation counts as compute.
  double busy_us = 0;
  std::set<std::string> learner_spans;
  for (const auto& [tid, events] : tracks) {
    if (track_names[tid] != "learner") continue;
    for (const Event& e : events) {
      learner_spans.insert(e.name);
      if (e.name == "forward" || e.name == "backward" || e.name == "optimizer") busy_us += e.dur;
    }
  }
  for (const char* span : {"sample", "pack", "forward", "backward", "optimizer", "publish"}) {
    EXPECT_TRUE(learner_spans.contains(span)) << span;
  }
  const double busy_s = summary.at("latency_audit").at("learner_busy_seconds");
  ASSERT_GT(busy_s, 0);
  EXPECT_NEAR(busy_us / 1e6, busy_s, 0.02 * busy_s);
  EXPECT_EQ(trace["otherData"]["spans_per_track"], config->run.trace_spans_per_track);
}

TEST(TraceJobTest, NoTraceByDefault) {
  absl::StatusOr<JobConfig> config = testing::LoadGuessJob(
      "no_trace", {"run.batch_groups=2", "buffer.max_size=8", "run.max_steps=2"});
  ASSERT_TRUE(config.ok()) << config.status();
  EmbeddedJobOptions options;
  options.progress = nullptr;
  ASSERT_TRUE(RunEmbeddedJob(*config, options).ok());
  const fs::path dir = fs::path(config->run.runs_dir) / config->run.name;
  EXPECT_TRUE(fs::exists(dir / "summary.json"));
  EXPECT_FALSE(fs::exists(dir / "trace.json"));
}

}  // namespace
}  // namespace flywheel
