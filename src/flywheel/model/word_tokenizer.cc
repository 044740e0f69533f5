#include "flywheel/model/word_tokenizer.h"

#include <cctype>

#include "flywheel/core/strings.h"

namespace flywheel {
namespace {
bool IsSpace(char c) { return std::isspace(static_cast<unsigned char>(c)) != 0; }
}  // namespace

absl::StatusOr<std::unique_ptr<WordTokenizer>> WordTokenizer::Create(std::vector<std::string> words,
                                                                     bool allow_unknown) {
  if (words.empty()) return absl::InvalidArgumentError("word tokenizer: empty vocabulary");
  std::unordered_map<std::string, int64_t> seen;
  for (size_t i = 0; i < words.size(); ++i) {
    const auto& w = words[i];
    if (w.empty()) {
      return absl::InvalidArgumentError(
          StrCat("word tokenizer: vocabulary entry ", i, " is empty"));
    }
    for (char c : w) {
      if (IsSpace(c)) {
        return absl::InvalidArgumentError(
            StrCat("word tokenizer: vocabulary word \"", w, "\" contains whitespace"));
      }
    }
    if (!seen.emplace(w, i).second) {
      return absl::InvalidArgumentError(StrCat("word tokenizer: vocabulary word \"", w,
                                               "\" appears twice (entries ", seen[w], " and ", i,
                                               ")"));
    }
  }
  return std::unique_ptr<WordTokenizer>(new WordTokenizer(std::move(words), allow_unknown));
}

WordTokenizer::WordTokenizer(std::vector<std::string> words, bool allow_unknown)
    : words_(std::move(words)), allow_unknown_(allow_unknown) {
  for (size_t i = 0; i < words_.size(); ++i) ids_[words_[i]] = kFirstWord + static_cast<int64_t>(i);
}

absl::StatusOr<std::vector<int64_t>> WordTokenizer::Encode(std::string_view text) const {
  std::vector<int64_t> out;
  size_t i = 0;
  while (i < text.size()) {
    while (i < text.size() && IsSpace(text[i])) ++i;
    size_t j = i;
    while (j < text.size() && !IsSpace(text[j])) ++j;
    if (j > i) {
      const std::string word(text.substr(i, j - i));
      auto it = ids_.find(word);
      if (it != ids_.end()) {
        out.push_back(it->second);
      } else if (allow_unknown_) {
        out.push_back(kUnknown);
      } else {
        return absl::InvalidArgumentError(
            StrCat("word tokenizer: \"", word, "\" is not in the vocabulary (", words_.size(),
                   " words; declare it in the environment's vocabulary)"));
      }
    }
    i = j;
  }
  return out;
}

absl::StatusOr<std::string> WordTokenizer::Decode(const std::vector<int64_t>& ids) const {
  std::vector<std::string_view> parts;
  for (size_t i = 0; i < ids.size(); ++i) {
    const int64_t id = ids[i];
    if (id == special_.bos) {
      parts.push_back("<|bos|>");
    } else if (id == special_.eos) {
      parts.push_back("<|eos|>");
    } else if (id == special_.end_of_turn) {
      parts.push_back("<|eot|>");
    } else if (id == kUnknown) {
      parts.push_back("<unk>");
    } else if (id >= kFirstWord && id < vocab_size()) {
      parts.push_back(words_[id - kFirstWord]);
    } else {
      return absl::InvalidArgumentError(StrCat("word tokenizer: token ", id, " at index ", i,
                                               " outside the vocabulary [0, ", vocab_size(), ")"));
    }
  }
  return Join(parts, " ");
}

std::string WordTokenizer::DebugString() const {
  return StrCat("WordTokenizer{words=", words_.size(), " vocab_size=", vocab_size(),
                " allow_unknown=", allow_unknown_, "}");
}

}  // namespace flywheel
