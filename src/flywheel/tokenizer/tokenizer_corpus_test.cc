#include "flywheel/tokenizer/tokenizer_corpus.h"

#include <gtest/gtest.h>

#include <set>

#include "flywheel/tokenizer/utf8.h"

namespace flywheel {
namespace {

TEST(TokenizerCorpusTest, DeterministicValidAndVaried) {
  const std::vector<CorpusText> a = TokenizerCorpus(11000);
  const std::vector<CorpusText> b = TokenizerCorpus(11000);
  ASSERT_EQ(a.size(), 11000u);
  std::set<std::string> categories;
  std::set<std::string> distinct;
  for (size_t i = 0; i < a.size(); ++i) {
    ASSERT_EQ(a[i].text, b[i].text) << i;
    ASSERT_FALSE(FirstInvalidUtf8(a[i].text).has_value()) << a[i].category << " " << i;
    categories.insert(a[i].category);
    distinct.insert(a[i].text);
  }
  EXPECT_EQ(categories.size(), 11u);
  EXPECT_GT(distinct.size(), 9000u);
  EXPECT_NE(TokenizerCorpus(10, 1)[0].text + TokenizerCorpus(10, 1)[1].text,
            TokenizerCorpus(10, 2)[0].text + TokenizerCorpus(10, 2)[1].text);
  EXPECT_GT(CorpusBytes(a), 1000000u);
}

}  // namespace
}  // namespace flywheel
