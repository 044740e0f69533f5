#include "flywheel/observe/trace_recorder.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <thread>

namespace flywheel {
namespace {

TEST(TraceRecorderTest, DisabledRecordsNothing) {
  TraceRecorder recorder;
  const int64_t t = TraceRecorder::NowNanos();
  recorder.Record("learner", "forward", t, t + 10);
  EXPECT_TRUE(recorder.Tracks().empty());

  TraceRecorder::Global().Stop();
  { TraceSpan span("learner", "forward"); }
  EXPECT_TRUE(TraceRecorder::Global().Tracks().empty());
}

TEST(TraceRecorderTest, SpansCloseWithTheirScope) {
  TraceRecorder& global = TraceRecorder::Global();
  global.Start({});
  {
    TraceSpan outer("learner", "step");
    { TraceSpan inner("learner", "forward"); }
  }
  global.Stop();
  { TraceSpan after("learner", "backward"); }  // stopped: not recorded
  const std::vector<TraceRecorder::TrackSpans> tracks = global.Tracks();
  ASSERT_EQ(tracks.size(), 1u);
  EXPECT_EQ(tracks[0].name, "learner");
  ASSERT_EQ(tracks[0].spans.size(), 2u);
  // Recorded as they close: the inner one first, contained in the outer one.
  const TraceRecorder::Span& inner = tracks[0].spans[0];
  const TraceRecorder::Span& outer = tracks[0].spans[1];
  EXPECT_STREQ(inner.name, "forward");
  EXPECT_STREQ(outer.name, "step");
  EXPECT_GE(inner.dur_ns, 0);
  EXPECT_GE(inner.start_ns, outer.start_ns);
  EXPECT_LE(inner.start_ns + inner.dur_ns, outer.start_ns + outer.dur_ns);

  global.Start({});  // a new recording forgets the old one
  EXPECT_TRUE(global.Tracks().empty());
  global.Stop();
}

TEST(TraceRecorderTest, RingKeepsTheNewestSpans) {
  TraceRecorder recorder;
  recorder.Start({.spans_per_track = 4});
  const int64_t t = TraceRecorder::NowNanos();
  for (int i = 0; i < 10; ++i) recorder.Record("buffer", "insert", t + i * 100, t + i * 100 + 50);
  const std::vector<TraceRecorder::TrackSpans> tracks = recorder.Tracks();
  ASSERT_EQ(tracks.size(), 1u);
  ASSERT_EQ(tracks[0].spans.size(), 4u);
  EXPECT_EQ(tracks[0].dropped, 6);
  for (int i = 0; i < 4; ++i) {  // spans 6..9, oldest first
    EXPECT_EQ(tracks[0].spans[i].start_ns, t + (6 + i) * 100);
    EXPECT_EQ(tracks[0].spans[i].dur_ns, 50);
  }
  const nlohmann::json j = nlohmann::json::parse(recorder.ToJson());
  EXPECT_EQ(j["otherData"]["dropped_spans"]["buffer"], 6);
}

TEST(TraceRecorderTest, OneTrackPerCategoryAndThread) {
  TraceRecorder recorder;
  recorder.Start({});
  auto work = [&recorder](const char* label) {
    TraceRecorder::SetThreadLabel(label);
    const int64_t t = TraceRecorder::NowNanos();
    recorder.Record("actor", "generate", t, t + 1000);
    recorder.Record("buffer", "insert", t + 1000, t + 2000);
  };
  std::thread a(work, "actor-0");
  a.join();
  std::thread b(work, "actor-1");
  b.join();
  std::thread c(work, "");
  c.join();
  std::thread d(work, "");
  d.join();
  std::thread e(work, "actor-0");  // a later thread of the same label: the same tracks
  e.join();
  std::vector<std::string> names;
  for (const auto& t : recorder.Tracks()) names.push_back(t.name);
  EXPECT_EQ(names,
            (std::vector<std::string>{"actor-0", "buffer / actor-0", "actor-1", "buffer / actor-1",
                                      "actor", "buffer", "actor #2", "buffer #2"}));
}

TEST(TraceRecorderTest, WritesChromeTraceEvents) {
  TraceRecorder recorder;
  const int64_t before = TraceRecorder::NowNanos();
  recorder.Start({});
  const int64_t t = TraceRecorder::NowNanos();
  recorder.Record("learner", "forward", t + 1500, t + 4000);
  recorder.Record("learner", "before the start", before - 1000, before);  // dropped: predates Start
  const nlohmann::json j = nlohmann::json::parse(recorder.ToJson());
  int complete = 0;
  bool named = false;
  for (const nlohmann::json& e : j["traceEvents"]) {
    if (e["ph"] == "M" && e["name"] == "thread_name") {
      named = named || (e["args"]["name"] == "learner" && e["tid"] == 1);
    }
    if (e["ph"] != "X") continue;
    ++complete;
    EXPECT_EQ(e["name"], "forward");
    EXPECT_EQ(e["tid"], 1);
    EXPECT_NEAR(e["dur"].get<double>(), 2.5, 1e-9);  // microseconds
    EXPECT_GE(e["ts"].get<double>(), 1.5);
  }
  EXPECT_EQ(complete, 1);
  EXPECT_TRUE(named);
}

}  // namespace
}  // namespace flywheel
