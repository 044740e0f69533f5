#include "flywheel/observe/tensorboard_writer.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/time/clock.h"
#include "flywheel/buffer/crc32c.h"
#include "flywheel/core/strings.h"
#include "tensorboard/event.pb.h"

namespace flywheel {
namespace {

void AppendLittleEndian(std::string& out, uint64_t value, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<char>((value >> (8 * i)) & 0xff));
}

void Flatten(const nlohmann::json& j, const std::string& prefix,
             std::vector<std::pair<std::string, double>>& out) {
  for (const auto& [key, value] : j.items()) {
    const std::string tag = prefix.empty() ? key : StrCat(prefix, "/", key);
    if (value.is_object()) {
      Flatten(value, tag, out);
    } else if (value.is_number()) {
      out.emplace_back(tag, value.get<double>());
    }
  }
}

std::string Hostname() {
  char name[256] = {};
  if (gethostname(name, sizeof(name) - 1) != 0 || name[0] == '\0') return "localhost";
  return name;
}

}  // namespace

uint32_t MaskedCrc32c(std::string_view data) {
  const uint32_t crc = Crc32cExtend(0, data.data(), data.size());
  return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

std::string FrameRecord(std::string_view data) {
  std::string out;
  out.reserve(data.size() + 16);
  AppendLittleEndian(out, data.size(), 8);
  AppendLittleEndian(out, MaskedCrc32c(out), 4);
  out.append(data);
  AppendLittleEndian(out, MaskedCrc32c(data), 4);
  return out;
}

std::vector<std::pair<std::string, double>> MetricsScalars(const nlohmann::json& line) {
  std::vector<std::pair<std::string, double>> out;
  if (!line.is_object()) return out;
  Flatten(line, "", out);
  std::erase_if(out, [](const auto& scalar) { return scalar.first == "step"; });
  return out;
}

absl::StatusOr<std::unique_ptr<TensorBoardWriter>> TensorBoardWriter::Open(
    const std::filesystem::path& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return absl::UnavailableError(StrCat("create ", dir.string(), ": ", ec.message()));
  const double now = absl::ToDoubleSeconds(absl::Now() - absl::UnixEpoch());
  // TensorBoard's own name pattern; "ab": a resumed run within the same second appends.
  const std::filesystem::path path =
      dir / StrCat("events.out.tfevents.", static_cast<int64_t>(now), ".", Hostname());
  std::FILE* file = std::fopen(path.c_str(), "ab");
  if (file == nullptr) {
    return absl::UnavailableError(StrCat("open ", path.string(), ": ", std::strerror(errno)));
  }
  std::unique_ptr<TensorBoardWriter> writer(new TensorBoardWriter(path, file));
  tensorboard::Event event;
  event.set_wall_time(now);
  event.set_file_version("brain.Event:2");
  if (auto s = writer->WriteEvent(event.SerializeAsString()); !s.ok()) return s;
  return writer;
}

TensorBoardWriter::~TensorBoardWriter() { std::fclose(file_); }

absl::Status TensorBoardWriter::WriteScalars(
    int64_t step, const std::vector<std::pair<std::string, double>>& scalars) {
  tensorboard::Event event;
  event.set_wall_time(absl::ToDoubleSeconds(absl::Now() - absl::UnixEpoch()));
  event.set_step(step);
  tensorboard::Summary* summary = event.mutable_summary();
  for (const auto& [tag, value] : scalars) {
    tensorboard::Summary::Value* v = summary->add_value();
    v->set_tag(tag);
    v->set_simple_value(static_cast<float>(value));
  }
  return WriteEvent(event.SerializeAsString());
}

absl::Status TensorBoardWriter::WriteMetricsLine(const nlohmann::json& line) {
  ++lines_;
  const auto step = line.contains("step") && line["step"].is_number_integer()
                        ? line["step"].get<int64_t>()
                        : lines_;
  return WriteScalars(step, MetricsScalars(line));
}

absl::Status TensorBoardWriter::WriteEvent(const std::string& serialized) {
  const std::string record = FrameRecord(serialized);
  if (std::fwrite(record.data(), 1, record.size(), file_) != record.size() ||
      std::fflush(file_) != 0) {
    return absl::UnavailableError(StrCat("write ", path_.string(), ": ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

}  // namespace flywheel
