// A timeline of what each thread of a run did, written as a Chrome trace (trace.json) that
// Perfetto (ui.perfetto.dev) and chrome://tracing open.
//
//   TraceRecorder::Global().Start({});        // run.trace = true
//   { TraceSpan span("learner", "forward"); ... }
//   TraceRecorder::Global().WriteJson(path);  // at the end of the run
//
//   thread A ──TraceSpan──▶ track (learner, A) ─┐   one ring buffer per (category, thread):
//   thread B ──TraceSpan──▶ track (actor, B)   ├─▶ the owning thread appends, the writer reads
//   thread B ──TraceSpan──▶ track (buffer, B)  ┘   at the end; the only lock is the track's own
//
// Cost: off (the default), a span is one relaxed atomic load. On, it is two steady-clock reads,
// a thread-local lookup of the track and an append under the track's mutex, which only the end
// of the run's writer ever contends; no lock of the code being traced is taken.
//
// Tracks. A track is one category ("learner", "actor", "buffer", "env", "scheduler") on one
// thread, or on the threads of one label (SetThreadLabel) when they take turns, so the spans of
// a track never overlap unless nested. Its name is the category, qualified by the label when
// the label says more: an actor thread labelled "actor-0" has track "actor-0" and, for its
// inserts, "buffer / actor-0". Unlabelled threads of one category get "env", "env #2", ….
//
// Bound. Each track keeps its newest `spans_per_track` spans in a ring: when it is full the
// oldest span is overwritten, and the number overwritten is reported in trace.json
// (otherData.dropped_spans). The file is then at most about tracks × spans_per_track × 100 bytes.
//
// Span names are `const char*` with static storage (string literals): only the pointer is kept.
#ifndef FLYWHEEL_OBSERVE_TRACE_RECORDER_H_
#define FLYWHEEL_OBSERVE_TRACE_RECORDER_H_

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"

namespace flywheel {

class TraceRecorder {
 public:
  struct Options {
    // Newest spans kept per track; 16384 keeps a run's file under about 50 MB with 30 tracks.
    int64_t spans_per_track = 16384;
  };

  struct Span {
    const char* name = "";
    int64_t start_ns = 0;  // steady clock
    int64_t dur_ns = 0;
  };
  // One track's spans, oldest first (a copy, for the writer and tests).
  struct TrackSpans {
    std::string name;
    std::vector<Span> spans;
    int64_t dropped = 0;  // overwritten because the ring was full
  };

  TraceRecorder();
  ~TraceRecorder();
  TraceRecorder(const TraceRecorder&) = delete;
  TraceRecorder& operator=(const TraceRecorder&) = delete;

  // The process-wide recorder the TraceSpans of the system record into. Never destroyed.
  static TraceRecorder& Global();

  // Forgets what was recorded, sets the time origin to now and starts recording.
  void Start(const Options& options);
  // Stops recording; what was recorded stays for Tracks() and WriteJson().
  void Stop();
  bool enabled() const { return enabled_.load(std::memory_order_relaxed); }

  // Records a span of the calling thread's `category` track, when enabled. Spans of one track
  // must not overlap unless one contains the other.
  void Record(std::string_view category, const char* name, int64_t start_ns, int64_t end_ns);

  // Names the calling thread's tracks (see the header comment); "" clears the label.
  static void SetThreadLabel(std::string_view label);
  // The steady clock of the spans, in nanoseconds.
  static int64_t NowNanos();

  // The tracks that hold spans, in the order they were created. Thread-safe.
  std::vector<TrackSpans> Tracks() const;
  // The Chrome trace event format (JSON object form): complete ("X") events, ts and dur in
  // microseconds since Start, one tid per track with thread_name metadata.
  std::string ToJson() const;
  // ToJson(), written atomically.
  absl::Status WriteJson(const std::filesystem::path& path) const;

 private:
  struct Track;
  Track* TrackOfThisThread(std::string_view category);

  const uint64_t id_;  // tells this recorder's entries apart in the threads' track caches
  std::atomic<bool> enabled_{false};
  std::atomic<int64_t> capacity_{16384};
  std::atomic<int64_t> origin_ns_{0};
  mutable absl::Mutex mu_;  // only to create and list tracks, never on a span's path
  // Tracks live as long as the recorder: threads keep pointers to theirs.
  std::vector<std::unique_ptr<Track>> tracks_ ABSL_GUARDED_BY(mu_);
};

// Records the scope it lives in as a span of the calling thread's `category` track.
class TraceSpan {
 public:
  TraceSpan(std::string_view category, const char* name)
      : category_(category),
        name_(name),
        start_ns_(TraceRecorder::Global().enabled() ? TraceRecorder::NowNanos() : -1) {}
  ~TraceSpan() {
    if (start_ns_ >= 0) {
      TraceRecorder::Global().Record(category_, name_, start_ns_, TraceRecorder::NowNanos());
    }
  }
  TraceSpan(const TraceSpan&) = delete;
  TraceSpan& operator=(const TraceSpan&) = delete;

 private:
  std::string_view category_;  // borrowed: must outlive the span
  const char* name_;
  int64_t start_ns_;  // -1 when the recorder was off at the start
};

// The recorder on for a run (run.trace) while this lives: what a job's entry point holds. The
// run directory writes trace.json with summary.json while the recorder is on.
class TraceRecording {
 public:
  TraceRecording(bool on, int64_t spans_per_track) : on_(on) {
    if (on_) TraceRecorder::Global().Start({.spans_per_track = spans_per_track});
  }
  ~TraceRecording() {
    if (on_) TraceRecorder::Global().Stop();
  }
  TraceRecording(const TraceRecording&) = delete;
  TraceRecording& operator=(const TraceRecording&) = delete;

 private:
  const bool on_;
};

}  // namespace flywheel

#endif  // FLYWHEEL_OBSERVE_TRACE_RECORDER_H_
