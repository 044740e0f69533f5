#include "flywheel/model/safetensors_header.h"

#include <cstring>
#include <string>

#include "flywheel/core/strings.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace flywheel {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// A safetensors file: the 8-byte header size, the header, then `data_bytes` zero bytes.
std::string File(const std::string& header, size_t data_bytes) {
  std::string file(8, '\0');
  const uint64_t n = header.size();
  std::memcpy(file.data(), &n, 8);
  return file + header + std::string(data_bytes, '\0');
}

TEST(SafetensorsHeaderTest, EntriesComeInDataOffsetOrderWithTheirMetadata) {
  const std::string file = File(R"({"__metadata__":{"format":"pt"},)"
                                R"("a":{"dtype":"F32","shape":[2],"data_offsets":[4,12]},)"
                                R"("b":{"dtype":"BF16","shape":[1,2],"data_offsets":[0,4]}})",
                                12);
  absl::StatusOr<SafetensorsHeader> header = ParseSafetensorsHeader(file, "m.safetensors");
  ASSERT_TRUE(header.ok()) << header.status();
  EXPECT_EQ(header->data_begin, file.size() - 12);
  EXPECT_EQ(header->metadata.at("format"), "pt");
  ASSERT_EQ(header->entries.size(), 2u);
  EXPECT_EQ(header->entries[0].name, "b");
  EXPECT_EQ(header->entries[0].dtype, "BF16");
  EXPECT_THAT(header->entries[0].shape, ElementsAre(1, 2));
  EXPECT_EQ(header->entries[1].name, "a");
  EXPECT_EQ(header->entries[1].begin, 4u);
  EXPECT_EQ(header->entries[1].end, 12u);
}

TEST(SafetensorsHeaderTest, ACorruptHeaderIsDataLossNamingTheFileAndTensor) {
  auto error = [](const std::string& file) {
    return ParseSafetensorsHeader(file, "m.safetensors").status();
  };
  EXPECT_THAT(error("1234").message(), HasSubstr("no header size"));
  EXPECT_THAT(error(File("{}", 0).substr(0, 9)).message(), HasSubstr("exceeds the file"));
  EXPECT_THAT(error(File("[1]", 0)).message(), HasSubstr("not a JSON object"));
  const absl::Status offsets =
      error(File(R"({"w":{"dtype":"F32","shape":[4],"data_offsets":[0,8]}})", 16));
  EXPECT_EQ(offsets.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(offsets.message(), HasSubstr("m.safetensors: tensor w"));
  EXPECT_THAT(offsets.message(), HasSubstr("shape and dtype need 16"));
  EXPECT_THAT(
      error(File(R"({"w":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", 8)).message(),
      HasSubstr("data ends at byte 16"));
  // A zero dimension once let the others be anything: 2^63 became a negative int64 for
  // torch::empty, and 2^62 x 2^62 overflowed the strides.
  for (const char* shape :
       {"[0,9223372036854775808]", "[0,4611686018427387904,4611686018427387904]"}) {
    const absl::Status huge = error(
        File(StrCat(R"({"e":{"dtype":"F32","shape":)", shape, R"(,"data_offsets":[0,0]}})"), 0));
    EXPECT_EQ(huge.code(), absl::StatusCode::kDataLoss) << shape;
    EXPECT_THAT(huge.message(), HasSubstr("more elements than an int64 counts")) << shape;
  }
  absl::StatusOr<SafetensorsHeader> empty = ParseSafetensorsHeader(
      File(R"({"e":{"dtype":"F32","shape":[0,5],"data_offsets":[0,0]}})", 0), "m.safetensors");
  ASSERT_TRUE(empty.ok()) << empty.status();
  EXPECT_THAT(empty->entries[0].shape, ElementsAre(0, 5));

  const absl::Status dtype =
      error(File(R"({"w":{"dtype":"I64","shape":[1],"data_offsets":[0,8]}})", 8));
  EXPECT_EQ(dtype.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(dtype.message(), HasSubstr("\"I64\" not supported"));
}

}  // namespace
}  // namespace flywheel
