#include "flywheel/model/byte_tokenizer.h"

#include "flywheel/core/strings.h"

namespace flywheel {

ByteTokenizer::ByteTokenizer() { special_ = {256, 257, 258}; }

absl::StatusOr<std::vector<int64_t>> ByteTokenizer::Encode(std::string_view text) const {
  std::vector<int64_t> ids;
  ids.reserve(text.size());
  for (unsigned char c : text) ids.push_back(c);
  return ids;
}

absl::StatusOr<std::string> ByteTokenizer::Decode(const std::vector<int64_t>& ids) const {
  std::string out;
  for (size_t i = 0; i < ids.size(); ++i) {
    const int64_t id = ids[i];
    if (id >= 0 && id < 256) {
      out.push_back(static_cast<char>(id));
    } else if (id == special_.bos) {
      out += "<|bos|>";
    } else if (id == special_.eos) {
      out += "<|eos|>";
    } else if (id == special_.end_of_turn) {
      out += "<|eot|>";
    } else {
      return absl::InvalidArgumentError(StrCat("byte tokenizer: token ", id, " at index ", i,
                                               " outside the vocabulary [0, 259)"));
    }
  }
  return out;
}

}  // namespace flywheel
