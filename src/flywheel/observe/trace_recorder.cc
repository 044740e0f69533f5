#include "flywheel/observe/trace_recorder.h"

#include <chrono>
#include <nlohmann/json.hpp>

#include "absl/container/flat_hash_map.h"
#include "flywheel/core/file_util.h"
#include "flywheel/core/strings.h"

namespace flywheel {

struct TraceRecorder::Track {
  Track(std::string category, std::string label)
      : category(std::move(category)), label(std::move(label)) {}

  // The track's name before duplicates are numbered (see the header).
  std::string BaseName() const {
    if (label.empty() || label.starts_with(category)) return label.empty() ? category : label;
    return StrCat(category, " / ", label);
  }

  const std::string category;
  const std::string label;  // the thread's label when the track was made
  absl::Mutex mu;           // the owning thread appends; Tracks() and Start() read or clear
  std::vector<Span> ring ABSL_GUARDED_BY(mu);
  size_t oldest ABSL_GUARDED_BY(mu) = 0;  // once full: the slot the next span overwrites
  int64_t dropped ABSL_GUARDED_BY(mu) = 0;
};

namespace {

std::atomic<uint64_t> next_recorder_id{1};

// A thread's tracks, by category, with the recorder they belong to: a handful per thread, or one
// per episode slot on an actor's thread (hundreds), hence a hash map.
struct CachedTrack {
  uint64_t recorder;
  void* track;
};
thread_local absl::flat_hash_map<std::string, CachedTrack> thread_tracks;
thread_local std::string thread_label;

}  // namespace

TraceRecorder::TraceRecorder() : id_(next_recorder_id.fetch_add(1)) {}
TraceRecorder::~TraceRecorder() = default;

TraceRecorder& TraceRecorder::Global() {
  static TraceRecorder* const recorder = new TraceRecorder();
  return *recorder;
}

int64_t TraceRecorder::NowNanos() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

void TraceRecorder::SetThreadLabel(std::string_view label) {
  thread_label = std::string(label);
  thread_tracks.clear();  // tracks made from now on carry the new label
}

void TraceRecorder::Start(const Options& options) {
  enabled_.store(false, std::memory_order_relaxed);
  capacity_.store(std::max<int64_t>(1, options.spans_per_track));
  origin_ns_.store(NowNanos());
  absl::MutexLock lock(&mu_);
  for (const auto& track : tracks_) {
    absl::MutexLock track_lock(&track->mu);
    track->ring.clear();
    track->ring.shrink_to_fit();
    track->oldest = 0;
    track->dropped = 0;
  }
  enabled_.store(true, std::memory_order_relaxed);
}

void TraceRecorder::Stop() { enabled_.store(false, std::memory_order_relaxed); }

TraceRecorder::Track* TraceRecorder::TrackOfThisThread(std::string_view category) {
  const auto cached = thread_tracks.find(ToAbsl(category));
  if (cached != thread_tracks.end() && cached->second.recorder == id_) {
    return static_cast<Track*>(cached->second.track);
  }
  Track* raw = nullptr;
  {
    absl::MutexLock lock(&mu_);
    // A labelled thread shares the track of an earlier thread of the same label (the threads a
    // colocated job starts per batch for one actor); an unlabelled one gets its own.
    if (!thread_label.empty()) {
      for (const auto& t : tracks_) {
        if (t->label == thread_label && t->category == category) raw = t.get();
      }
    }
    if (raw == nullptr) {
      tracks_.push_back(std::make_unique<Track>(std::string(category), thread_label));
      raw = tracks_.back().get();
    }
  }
  thread_tracks.insert_or_assign(std::string(category), CachedTrack{id_, raw});
  return raw;
}

void TraceRecorder::Record(std::string_view category, const char* name, int64_t start_ns,
                           int64_t end_ns) {
  if (!enabled()) return;
  // A span that began before Start belongs to the previous recording.
  const int64_t origin = origin_ns_.load(std::memory_order_relaxed);
  if (start_ns < origin) return;
  Track* track = TrackOfThisThread(category);
  const size_t capacity = static_cast<size_t>(capacity_.load(std::memory_order_relaxed));
  const Span span{name, start_ns, std::max<int64_t>(0, end_ns - start_ns)};
  absl::MutexLock lock(&track->mu);
  if (track->ring.size() < capacity) {
    track->ring.push_back(span);
    return;
  }
  track->ring[track->oldest] = span;  // full: the newest replaces the oldest
  track->oldest = (track->oldest + 1) % track->ring.size();
  ++track->dropped;
}

std::vector<TraceRecorder::TrackSpans> TraceRecorder::Tracks() const {
  std::vector<TrackSpans> out;
  absl::flat_hash_map<std::string, int> uses;  // base name → tracks of that name so far
  absl::MutexLock lock(&mu_);
  for (const auto& track : tracks_) {
    TrackSpans t;
    {
      absl::MutexLock track_lock(&track->mu);
      if (track->ring.empty()) continue;
      const size_t n = track->ring.size();
      t.spans.reserve(n);
      for (size_t i = 0; i < n; ++i) t.spans.push_back(track->ring[(track->oldest + i) % n]);
      t.dropped = track->dropped;
    }
    t.name = track->BaseName();
    if (const int k = ++uses[t.name]; k > 1) t.name = StrCat(t.name, " #", k);
    out.push_back(std::move(t));
  }
  return out;
}

std::string TraceRecorder::ToJson() const {
  const std::vector<TrackSpans> tracks = Tracks();
  const int64_t origin = origin_ns_.load();
  // Written as it goes rather than through a json tree: a full trace has ~10^5–10^6 events.
  std::string out = "{\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n";
  out += R"({"name":"process_name","ph":"M","pid":1,"tid":0,"args":{"name":"flywheel"}})";
  absl::flat_hash_map<const char*, std::string> quoted;  // span name → its JSON string
  nlohmann::json dropped = nlohmann::json::object();
  char buf[160];
  for (size_t i = 0; i < tracks.size(); ++i) {
    const TrackSpans& track = tracks[i];
    const int tid = static_cast<int>(i) + 1;
    const std::string name = nlohmann::json(track.name).dump();
    out += fmt::format(
        ",\n{{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":1,\"tid\":{},"
        "\"args\":{{\"name\":{}}}}}",
        tid, name);
    out += fmt::format(
        ",\n{{\"name\":\"thread_sort_index\",\"ph\":\"M\",\"pid\":1,\"tid\":{},"
        "\"args\":{{\"sort_index\":{}}}}}",
        tid, tid);
    if (track.dropped > 0) dropped[track.name] = track.dropped;
    for (const Span& span : track.spans) {
      auto [it, inserted] = quoted.try_emplace(span.name);
      if (inserted) it->second = nlohmann::json(span.name).dump();
      const int n = std::snprintf(buf, sizeof(buf),
                                  ",\n{\"ph\":\"X\",\"pid\":1,\"tid\":%d,\"ts\":%.3f,\"dur\":%.3f,"
                                  "\"name\":",
                                  tid, static_cast<double>(span.start_ns - origin) / 1e3,
                                  static_cast<double>(span.dur_ns) / 1e3);
      out.append(buf, static_cast<size_t>(n));
      out += it->second;
      out += '}';
    }
  }
  nlohmann::json other = {{"spans_per_track", capacity_.load()}, {"dropped_spans", dropped}};
  out += "\n],\"otherData\":";
  out += other.dump();
  out += "}\n";
  return out;
}

absl::Status TraceRecorder::WriteJson(const std::filesystem::path& path) const {
  return WriteFileAtomically(path, ToJson());
}

}  // namespace flywheel
