#include "flywheel/tokenizer/added_vocabulary.h"

#include <algorithm>
#include <cstring>

#include "flywheel/core/strings.h"
#include "flywheel/tokenizer/unicode_properties.h"
#include "flywheel/tokenizer/utf8.h"

namespace flywheel {
namespace {

// Rust regex \w$ on text[..pos]: the character before `pos` is a word character.
bool EndsWithWord(std::string_view text) {
  if (text.empty()) return false;
  char32_t c;
  DecodeUtf8(text, LastCharStart(text), &c);
  return IsWordChar(c);
}

// ^\w on text[pos..].
bool StartsWithWord(std::string_view text) {
  if (text.empty()) return false;
  char32_t c;
  DecodeUtf8(text, 0, &c);
  return IsWordChar(c);
}

// Start of the white space at the end of `text` (\s*$'s leftmost match).
size_t TrailingSpaceStart(std::string_view text) {
  size_t end = text.size();
  while (end > 0) {
    const size_t start = LastCharStart(text.substr(0, end));
    char32_t c;
    DecodeUtf8(text, start, &c);
    if (!IsWhiteSpace(c)) break;
    end = start;
  }
  return end;
}

// Length of the white space at the start of `text` (^\s*).
size_t LeadingSpaceLength(std::string_view text) {
  size_t pos = 0;
  while (pos < text.size()) {
    char32_t c;
    const size_t len = DecodeUtf8(text, pos, &c);
    if (!IsWhiteSpace(c)) break;
    pos += len;
  }
  return pos;
}

}  // namespace

void LiteralMatcher::Add(std::string_view pattern, int32_t index) {
  patterns_.push_back({std::string(pattern), index});
  auto& bucket = by_first_byte_[static_cast<unsigned char>(pattern[0])];
  bucket.push_back(static_cast<int32_t>(patterns_.size() - 1));
  std::stable_sort(bucket.begin(), bucket.end(), [this](int32_t a, int32_t b) {
    return patterns_[a].text.size() > patterns_[b].text.size();
  });
}

bool LiteralMatcher::Find(std::string_view text, size_t from, size_t* begin, size_t* end,
                          int32_t* index) const {
  if (patterns_.empty()) return false;
  const auto* bytes = reinterpret_cast<const unsigned char*>(text.data());
  for (size_t pos = from; pos < text.size(); ++pos) {
    const auto& bucket = by_first_byte_[bytes[pos]];
    for (int32_t p : bucket) {  // longest first: the first that fits is the longest here
      const std::string& literal = patterns_[p].text;
      if (literal.size() <= text.size() - pos &&
          std::memcmp(text.data() + pos, literal.data(), literal.size()) == 0) {
        *begin = pos;
        *end = pos + literal.size();
        *index = patterns_[p].index;
        return true;
      }
    }
  }
  return false;
}

absl::StatusOr<AddedVocabulary> AddedVocabulary::Create(std::vector<AddedToken> tokens,
                                                        const Normalizer& normalizer) {
  AddedVocabulary added;
  added.tokens_ = std::move(tokens);
  for (size_t i = 0; i < added.tokens_.size(); ++i) {
    const AddedToken& token = added.tokens_[i];
    const std::string path = StrCat("added_tokens[", i, "]");
    if (token.content.empty()) {
      return absl::InvalidArgumentError(StrCat(path, ".content is empty"));
    }
    if (FirstInvalidUtf8(token.content)) {
      return absl::InvalidArgumentError(StrCat(path, ".content is not valid UTF-8"));
    }
    if (!added.by_content_.emplace(token.content, static_cast<int32_t>(i)).second) {
      return absl::InvalidArgumentError(
          StrCat(path, ".content \"", token.content, "\" repeats an earlier added token"));
    }
    if (token.normalized) {
      std::string scratch;
      const std::string content(normalizer.Normalize(token.content, &scratch));
      if (!content.empty()) added.normalized_.Add(content, static_cast<int32_t>(i));
    } else {
      added.raw_.Add(token.content, static_cast<int32_t>(i));
    }
  }
  return added;
}

const AddedToken* AddedVocabulary::FindByContent(std::string_view content) const {
  auto it = by_content_.find(ToAbsl(content));
  return it == by_content_.end() ? nullptr : &tokens_[it->second];
}

void AddedVocabulary::FindMatches(std::string_view text, bool normalized_set,
                                  std::vector<Split>* splits) const {
  const LiteralMatcher& matcher = normalized_set ? normalized_ : raw_;
  size_t done = 0;  // text before this is in `splits`
  size_t from = 0;  // where the next search starts: the end of the last match (before rstrip)
  size_t begin, end;
  int32_t index;
  while (from < text.size() && matcher.Find(text, from, &begin, &end, &index)) {
    from = end;
    const AddedToken& token = tokens_[index];
    if (token.single_word &&
        (EndsWithWord(text.substr(0, begin)) || StartsWithWord(text.substr(end)))) {
      continue;
    }
    if (token.lstrip) begin = std::max(TrailingSpaceStart(text.substr(0, begin)), done);
    if (token.rstrip) end += LeadingSpaceLength(text.substr(end));
    if (done < begin) splits->push_back({done, begin, -1});
    splits->push_back({begin, end, token.id});
    done = end;
  }
  if (done < text.size()) splits->push_back({done, text.size(), -1});
}

}  // namespace flywheel
