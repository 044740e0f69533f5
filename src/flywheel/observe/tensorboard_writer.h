// TensorBoard event files of a run's metrics, so that `tensorboard --logdir runs` plots them:
// runs/<name>/tb/events.out.tfevents.<unix_time>.<hostname>.
//
// The file is a sequence of TFRecords, each framing one serialized Event proto
// (proto/tensorboard/event.proto, wire-compatible with TensorFlow's):
//
//   uint64 length (little-endian) │ uint32 masked CRC32C(length bytes) │ data │ uint32 masked
//   CRC32C(data) mask(crc) = ((crc >> 15) | (crc << 17)) + 0xa282ead8
//
// The first event carries file_version "brain.Event:2"; then one event per metrics line holds a
// scalar per numeric field (nested objects flattened with '/': "dropped/learner_stale"), at the
// line's "step". Each event is flushed as written: a crash loses at most the one being written.
// Not thread-safe: the run directory serialises its calls.
#ifndef FLYWHEEL_OBSERVE_TENSORBOARD_WRITER_H_
#define FLYWHEEL_OBSERVE_TENSORBOARD_WRITER_H_

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace flywheel {

// TFRecord's checksum of `data`: CRC32C, rotated and offset so that a CRC of data holding CRCs
// is not degenerate.
uint32_t MaskedCrc32c(std::string_view data);
// `data` as one TFRecord.
std::string FrameRecord(std::string_view data);
// The numeric fields of a metrics line as (tag, value), objects flattened with '/'. "step" (the
// x axis), strings, booleans and arrays are left out.
std::vector<std::pair<std::string, double>> MetricsScalars(const nlohmann::json& line);

class TensorBoardWriter {
 public:
  // Creates `dir` and a new event file in it, and writes its file_version event.
  static absl::StatusOr<std::unique_ptr<TensorBoardWriter>> Open(const std::filesystem::path& dir);
  ~TensorBoardWriter();
  TensorBoardWriter(const TensorBoardWriter&) = delete;
  TensorBoardWriter& operator=(const TensorBoardWriter&) = delete;

  // One event of `scalars` at `step`, stamped with the current wall time.
  absl::Status WriteScalars(int64_t step,
                            const std::vector<std::pair<std::string, double>>& scalars);
  // MetricsScalars(line) at the line's "step" (the count of lines written so far without one).
  absl::Status WriteMetricsLine(const nlohmann::json& line);

  const std::filesystem::path& path() const { return path_; }

 private:
  TensorBoardWriter(std::filesystem::path path, std::FILE* file)
      : path_(std::move(path)), file_(file) {}
  absl::Status WriteEvent(const std::string& serialized);

  const std::filesystem::path path_;
  std::FILE* file_;  // owned
  int64_t lines_ = 0;
};

}  // namespace flywheel

#endif  // FLYWHEEL_OBSERVE_TENSORBOARD_WRITER_H_
