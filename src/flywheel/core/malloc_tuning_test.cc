#include "flywheel/core/malloc_tuning.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace flywheel {
namespace {

// AddressSanitizer and ThreadSanitizer serve malloc from their own allocator, which glibc's
// counters (mallinfo2) do not see.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr bool kMallocReplaced = true;
#elif defined(__has_feature)
constexpr bool kMallocReplaced =
    __has_feature(address_sanitizer) || __has_feature(thread_sanitizer);
#else
constexpr bool kMallocReplaced = false;
#endif

#if defined(__GLIBC__)
// A 4 MiB block is above glibc's initial 128 KiB mmap threshold: untuned it is mapped on its own
// (counted in hblks) and unmapped at free; tuned it comes from the heap and stays there.
TEST(MallocTuningTest, MidSizedBlocksComeFromTheHeap) {
  if (kMallocReplaced) GTEST_SKIP() << "a sanitizer's allocator serves malloc, not glibc";
  ASSERT_TRUE(TuneMallocForTensors().applied);
  const size_t mapped_before = mallinfo2().hblks;
  void* block = std::malloc(4 << 20);
  ASSERT_NE(block, nullptr);
  std::memset(block, 1, 4 << 20);
  EXPECT_EQ(mallinfo2().hblks, mapped_before);
  std::free(block);
}

TEST(MallocTuningTest, LargeBlocksAreStillMapped) {
  if (kMallocReplaced) GTEST_SKIP() << "a sanitizer's allocator serves malloc, not glibc";
  TuneMallocForTensors();
  const size_t mapped_before = mallinfo2().hblks;
  void* block = std::malloc(256 << 20);  // more than the heap's padded free top
  ASSERT_NE(block, nullptr);
  EXPECT_EQ(mallinfo2().hblks, mapped_before + 1);
  std::free(block);
}
#endif

TEST(MallocTuningTest, DescribesItself) {
  EXPECT_FALSE(TuneMallocForTensors().DebugString().empty());
}

}  // namespace
}  // namespace flywheel
