#include "flywheel/weights/chunk_checker.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace flywheel {
namespace {

using ::testing::HasSubstr;

v1::TensorInfo Info(const std::string& name, const std::string& dtype, std::vector<int64_t> shape,
                    int64_t byte_size) {
  v1::TensorInfo info;
  info.set_name(name);
  info.set_dtype(dtype);
  for (int64_t d : shape) info.add_shape(d);
  info.set_byte_size(byte_size);
  return info;
}

v1::WeightsChunk Data(int32_t index, const std::string& name, int64_t offset,
                      const std::string& data, bool last = false, int64_t version = 3) {
  v1::WeightsChunk chunk;
  chunk.set_version(version);
  chunk.set_tensor_index(index);
  chunk.set_tensor_name(name);
  chunk.set_offset(offset);
  chunk.set_data(data);
  chunk.set_last(last);
  return chunk;
}

// w: F32 [2, 3] (24 bytes), e: F32 [0, 4] (empty), b: BF16 [4] (8 bytes).
v1::WeightsChunk First() {
  v1::WeightsChunk chunk = Data(0, "w", 0, std::string(16, 'a'));
  *chunk.add_manifest() = Info("w", "F32", {2, 3}, 24);
  *chunk.add_manifest() = Info("e", "F32", {0, 4}, 0);
  *chunk.add_manifest() = Info("b", "BF16", {4}, 8);
  return chunk;
}

TEST(ChunkCheckerTest, PlacesEveryChunkAndFinishesAWholeStream) {
  WeightsChunkChecker checker;
  ChunkPlacement p;
  ASSERT_TRUE(checker.Add(First(), &p).ok());
  EXPECT_EQ(p.tensor, 0u);
  EXPECT_EQ(p.offset, 0);
  EXPECT_EQ(p.size, 16);
  ASSERT_EQ(checker.manifest().size(), 3u);
  EXPECT_EQ(checker.total_bytes(), 32);
  EXPECT_THAT(checker.Finish().message(), HasSubstr("tensor w has 16 of 24"));
  ASSERT_TRUE(checker.Add(Data(0, "w", 16, std::string(8, 'b')), &p).ok());
  EXPECT_EQ(p.offset, 16);
  // The empty tensor is skipped: the next bytes are b's.
  ASSERT_TRUE(checker.Add(Data(2, "b", 0, std::string(8, 'c'), /*last=*/true), &p).ok());
  EXPECT_EQ(p.tensor, 2u);
  EXPECT_EQ(p.size, 8);
  EXPECT_TRUE(checker.Finish().ok()) << checker.Finish();
  EXPECT_EQ(checker.bytes_received(), 32);
  EXPECT_THAT(checker.Add(Data(2, "b", 8, "x"), &p).message(), HasSubstr("after the last"));
}

TEST(ChunkCheckerTest, AManifestThatLiesIsRefusedNamingTheTensor) {
  struct Case {
    v1::TensorInfo info;
    const char* error;
  };
  const std::vector<Case> cases = {
      {Info("", "F32", {1}, 4), "empty name"},
      {Info("w", "F64", {1}, 8), "unknown dtype \"F64\""},
      {Info("w", "F32", {-1}, 4), "bad shape [-1]"},
      {Info("w", "F32", {1 << 21, 1 << 20}, 0), "bad shape"},  // 2^41 elements
      {Info("w", "F32", {3}, 13), "byte_size 13 but F32 [3] is 12 bytes"},
      // A zero dimension does not let the others be anything.
      {Info("w", "F32", {0, int64_t{1} << 62, int64_t{1} << 62}, 0), "bad shape"},
  };
  for (const Case& c : cases) {
    v1::WeightsChunk chunk;
    chunk.set_version(3);
    *chunk.add_manifest() = c.info;
    WeightsChunkChecker checker;
    ChunkPlacement p;
    const absl::Status status = checker.Add(chunk, &p);
    EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss) << c.error;
    EXPECT_THAT(status.message(), HasSubstr(c.error));
    EXPECT_FALSE(checker.started()) << c.error;
  }
  v1::WeightsChunk twice;
  *twice.add_manifest() = Info("w", "F32", {1}, 4);
  *twice.add_manifest() = Info("w", "F32", {1}, 4);
  WeightsChunkChecker checker;
  ChunkPlacement p;
  EXPECT_THAT(checker.Add(twice, &p).message(), HasSubstr("listed twice"));
}

TEST(ChunkCheckerTest, ChunksThatDoNotContinueTheStreamAreRefused) {
  struct Case {
    v1::WeightsChunk chunk;
    const char* error;
  };
  const std::vector<Case> cases = {
      {Data(0, "w", 8, "abcd"), "a gap or reordering"},
      {Data(0, "w", 24, "abcd"), "a gap or reordering"},
      {Data(2, "b", 0, "ab"), "a gap or reordering"},
      {Data(1, "e", 0, "ab"), "a gap or reordering"},
      {Data(0, "w", 16, std::string(9, 'x')), "ends at byte 25 of 24"},
      {Data(0, "v", 16, "abcd"), "calls it \"v\""},
      {Data(7, "w", 16, "abcd"), "names tensor index 7 of 3"},
      {Data(-1, "w", 16, "abcd"), "names tensor index -1 of 3"},
      {Data(0, "w", 16, "abcd", false, 4), "is of version 4"},
      {First(), "a second manifest"},
  };
  for (const Case& c : cases) {
    WeightsChunkChecker checker;
    ChunkPlacement p;
    ASSERT_TRUE(checker.Add(First(), &p).ok());
    const absl::Status status = checker.Add(c.chunk, &p);
    EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss) << c.error;
    EXPECT_THAT(status.message(), HasSubstr(c.error));
    EXPECT_EQ(p.size, 0) << c.error;
    // The stream stays broken, even for the chunk that would have continued it.
    EXPECT_EQ(checker.Add(Data(0, "w", 16, "abcd"), &p), status);
    EXPECT_EQ(checker.Finish(), status);
  }
}

TEST(ChunkCheckerTest, AStreamThatEndsEarlyIsNotWhole) {
  WeightsChunkChecker none;
  EXPECT_THAT(none.Finish().message(), HasSubstr("before its first chunk"));
  WeightsChunkChecker no_manifest;
  ChunkPlacement p;
  EXPECT_THAT(no_manifest.Add(Data(0, "w", 0, "abcd"), &p).message(), HasSubstr("no manifest"));
  // Every byte there, but the chunk marked last never came.
  WeightsChunkChecker unmarked;
  ASSERT_TRUE(unmarked.Add(First(), &p).ok());
  ASSERT_TRUE(unmarked.Add(Data(0, "w", 16, std::string(8, 'b')), &p).ok());
  ASSERT_TRUE(unmarked.Add(Data(2, "b", 0, std::string(8, 'c')), &p).ok());
  EXPECT_THAT(unmarked.Finish().message(), HasSubstr("without its last chunk"));
}

}  // namespace
}  // namespace flywheel
