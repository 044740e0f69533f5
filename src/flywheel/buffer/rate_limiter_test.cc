#include "flywheel/buffer/rate_limiter.h"

#include <gtest/gtest.h>

#include "flywheel/buffer/buffer_options.h"

namespace flywheel {
namespace {

TEST(RateLimiterTest, NoSampleBeforeMinSizeAndInsertsFreeUntilThen) {
  RateLimiter limiter(RateLimiterOptions::SampleToInsertRatio(2.0, 3, 2.0));
  for (int size = 0; size < 3; ++size) {
    EXPECT_FALSE(limiter.CanSample(size));
    EXPECT_TRUE(limiter.CanInsert(size));
    limiter.Insert();
  }
  EXPECT_TRUE(limiter.CanSample(3));
}

TEST(RateLimiterTest, RatioBoundsDriftBothWays) {
  // spi = 2, min_size 1, error_buffer 2: diff = 2 * inserts - samples must stay in [0, 4].
  RateLimiter limiter(RateLimiterOptions::SampleToInsertRatio(2.0, 1, 2.0));
  limiter.Insert();                    // diff 2
  EXPECT_TRUE(limiter.CanInsert(1));   // would be 4 <= 4
  limiter.Insert();                    // diff 4
  EXPECT_FALSE(limiter.CanInsert(2));  // would be 6 > 4: the learner must catch up
  for (int i = 0; i < 4; ++i) {
    ASSERT_TRUE(limiter.CanSample(2)) << i;
    limiter.Sample();
  }
  EXPECT_FALSE(limiter.CanSample(2));  // diff 0: one more would go below min_diff
  EXPECT_TRUE(limiter.CanInsert(2));
}

TEST(RateLimiterTest, QueueSamplesEachInsertOnceAndCapsOutstanding) {
  RateLimiter limiter(RateLimiterOptions::Queue(2));
  EXPECT_FALSE(limiter.CanSample(0));
  limiter.Insert();
  limiter.Insert();
  EXPECT_FALSE(limiter.CanInsert(2));
  EXPECT_TRUE(limiter.CanSample(2));
  limiter.Sample();
  limiter.Sample();
  EXPECT_FALSE(limiter.CanSample(0));
  EXPECT_TRUE(limiter.CanInsert(0));
}

TEST(RateLimiterTest, ValidateRefusesWindowsThatCanDeadlock) {
  EXPECT_TRUE(RateLimiterOptions::SampleToInsertRatio(4.0, 10, 4.0).Validate().ok());
  absl::Status s = RateLimiterOptions::SampleToInsertRatio(4.0, 10, 3.0).Validate();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("error_buffer"), absl::string_view::npos) << s;
  EXPECT_FALSE(RateLimiterOptions::SampleToInsertRatio(0.5, 1, 0.5).Validate().ok());
  EXPECT_FALSE(RateLimiterOptions::SampleToInsertRatio(0.0, 1, 5).Validate().ok());
}

TEST(BufferOptionsTest, ValidateRefusesDeadlockingConfigs) {
  BufferOptions ok;
  EXPECT_TRUE(ok.Validate().ok());

  BufferOptions small_window;
  small_window.rate_limiter = RateLimiterKind::kRatio;
  small_window.samples_per_insert = 4;
  small_window.max_times_sampled = 4;
  small_window.error_buffer = 2;
  EXPECT_NE(small_window.Validate().message().find("error_buffer"), absl::string_view::npos);

  BufferOptions too_big_min;
  too_big_min.max_size = 10;
  too_big_min.min_size_to_sample = 11;
  EXPECT_NE(too_big_min.Validate().message().find("deadlock"), absl::string_view::npos);

  // Items must be sampled 4 times to leave but only 1 sample per insert is allowed: with a
  // blocking remover the table fills while samples are held back.
  BufferOptions pile_up;
  pile_up.rate_limiter = RateLimiterKind::kRatio;
  pile_up.samples_per_insert = 1;
  pile_up.max_times_sampled = 4;
  pile_up.remover = RemoverKind::kBlock;
  EXPECT_NE(pile_up.Validate().message().find("deadlock"), absl::string_view::npos);
  pile_up.remover = RemoverKind::kFifo;
  EXPECT_TRUE(pile_up.Validate().ok()) << pile_up.Validate();

  BufferOptions groups;
  groups.group_size = 4;
  groups.min_group_size = 5;
  EXPECT_NE(groups.Validate().message().find("min_group_size"), absl::string_view::npos);
}

}  // namespace
}  // namespace flywheel
