#include "flywheel/observe/tensorboard_writer.h"

#include <gtest/gtest.h>

#include <fstream>
#include <optional>
#include <sstream>

#include "tensorboard/event.pb.h"

namespace flywheel {
namespace {

namespace fs = std::filesystem;

// The reader's own CRC32C, bit by bit (Castagnoli, reflected 0x82F63B78), so that the test does
// not check the writer's checksum with the writer's code.
uint32_t BitwiseCrc32c(std::string_view data) {
  uint32_t crc = 0xffffffffu;
  for (unsigned char c : data) {
    crc ^= c;
    for (int k = 0; k < 8; ++k) crc = (crc & 1) ? (crc >> 1) ^ 0x82f63b78u : crc >> 1;
  }
  return ~crc;
}

uint32_t Mask(uint32_t crc) { return ((crc >> 15) | (crc << 17)) + 0xa282ead8u; }

uint64_t ReadLittleEndian(std::string_view bytes) {
  uint64_t v = 0;
  for (size_t i = 0; i < bytes.size(); ++i) {
    v |= static_cast<uint64_t>(static_cast<unsigned char>(bytes[i])) << (8 * i);
  }
  return v;
}

// The records of a TFRecord file, or nullopt when a length or a checksum is wrong.
std::optional<std::vector<std::string>> ReadRecords(const std::string& file) {
  std::vector<std::string> records;
  std::string_view rest(file);
  while (!rest.empty()) {
    if (rest.size() < 12) return std::nullopt;
    const uint64_t length = ReadLittleEndian(rest.substr(0, 8));
    if (Mask(BitwiseCrc32c(rest.substr(0, 8))) != ReadLittleEndian(rest.substr(8, 4))) {
      return std::nullopt;
    }
    if (rest.size() < 16 + length) return std::nullopt;
    const std::string_view data = rest.substr(12, length);
    if (Mask(BitwiseCrc32c(data)) != ReadLittleEndian(rest.substr(12 + length, 4))) {
      return std::nullopt;
    }
    records.emplace_back(data);
    rest.remove_prefix(16 + length);
  }
  return records;
}

std::string ReadFile(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

fs::path FreshDir(const std::string& name) {
  const fs::path dir = fs::temp_directory_path() / ("flywheel_tensorboard_test_" + name);
  fs::remove_all(dir);
  return dir;
}

TEST(TensorBoardWriterTest, Crc32cVectors) {
  EXPECT_EQ(BitwiseCrc32c("123456789"), 0xe3069283u);
  EXPECT_EQ(BitwiseCrc32c(std::string(32, '\0')), 0x8a9136aau);
  EXPECT_EQ(MaskedCrc32c("123456789"), Mask(0xe3069283u));
  EXPECT_EQ(MaskedCrc32c(std::string(32, '\0')), Mask(0x8a9136aau));
}

TEST(TensorBoardWriterTest, FlattensNumericFields) {
  const nlohmann::json line = {{"step", 3},
                               {"reward_mean", 0.5},
                               {"mode", "async"},
                               {"ok", true},
                               {"dropped", {{"learner_stale", 2}, {"buffer", {{"evicted", 1}}}}}};
  const std::vector<std::pair<std::string, double>> scalars = MetricsScalars(line);
  const std::vector<std::pair<std::string, double>> expected = {
      {"dropped/buffer/evicted", 1}, {"dropped/learner_stale", 2}, {"reward_mean", 0.5}};
  EXPECT_EQ(scalars, expected);
}

TEST(TensorBoardWriterTest, AnIndependentReaderReadsTheEvents) {
  const fs::path dir = FreshDir("read");
  absl::StatusOr<std::unique_ptr<TensorBoardWriter>> writer = TensorBoardWriter::Open(dir);
  ASSERT_TRUE(writer.ok()) << writer.status();
  EXPECT_EQ((*writer)->path().parent_path(), dir);
  EXPECT_TRUE((*writer)->path().filename().string().starts_with("events.out.tfevents."));
  for (int step = 1; step <= 3; ++step) {
    const nlohmann::json line = {
        {"step", step * 10}, {"loss", 0.25 * step}, {"dropped", {{"learner_stale", step}}}};
    ASSERT_TRUE((*writer)->WriteMetricsLine(line).ok());
  }
  // Flushed as written: readable before the writer is closed.
  std::optional<std::vector<std::string>> records = ReadRecords(ReadFile((*writer)->path()));
  ASSERT_TRUE(records.has_value());
  ASSERT_EQ(records->size(), 4u);
  tensorboard::Event first;
  ASSERT_TRUE(first.ParseFromString((*records)[0]));
  EXPECT_EQ(first.file_version(), "brain.Event:2");
  EXPECT_GT(first.wall_time(), 1.6e9);
  for (int step = 1; step <= 3; ++step) {
    tensorboard::Event event;
    ASSERT_TRUE(event.ParseFromString((*records)[step]));
    EXPECT_EQ(event.step(), step * 10);
    EXPECT_GT(event.wall_time(), 1.6e9);
    ASSERT_EQ(event.summary().value_size(), 2);
    EXPECT_EQ(event.summary().value(0).tag(), "dropped/learner_stale");
    EXPECT_EQ(event.summary().value(0).simple_value(), static_cast<float>(step));
    EXPECT_EQ(event.summary().value(1).tag(), "loss");
    EXPECT_EQ(event.summary().value(1).simple_value(), 0.25f * step);
  }
}

TEST(TensorBoardWriterTest, ACorruptedByteIsDetected) {
  const fs::path dir = FreshDir("corrupt");
  fs::path path;
  {
    absl::StatusOr<std::unique_ptr<TensorBoardWriter>> writer = TensorBoardWriter::Open(dir);
    ASSERT_TRUE(writer.ok()) << writer.status();
    ASSERT_TRUE((*writer)->WriteScalars(1, {{"loss", 1.5}}).ok());
    path = (*writer)->path();
  }
  const std::string file = ReadFile(path);
  ASSERT_TRUE(ReadRecords(file).has_value());
  for (size_t i = 0; i < file.size(); ++i) {  // any byte: length, either checksum or the data
    std::string corrupted = file;
    corrupted[i] ^= 0x01;
    EXPECT_FALSE(ReadRecords(corrupted).has_value()) << "byte " << i;
  }
}

}  // namespace
}  // namespace flywheel
