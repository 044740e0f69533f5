#include "flywheel/tokenizer/streaming_decoder.h"

#include "flywheel/core/strings.h"
#include "flywheel/tokenizer/utf8.h"

namespace flywheel {

absl::StatusOr<std::string> StreamingDecoder::Next(int64_t id) {
  if (!tokenizer_->HasToken(id)) {
    return absl::InvalidArgumentError(StrCat("StreamingDecoder: id ", id,
                                             " is not in the vocabulary (",
                                             tokenizer_->vocab_size(), " ids)"));
  }
  std::string text;
  if (pending_.empty()) {
    const std::string_view bytes = tokenizer_->TokenBytes(id);
    const size_t used = AppendUtf8Lossy(bytes, /*final=*/false, &text);
    pending_.assign(bytes.substr(used));
    return text;
  }
  pending_ += tokenizer_->TokenBytes(id);
  const size_t used = AppendUtf8Lossy(pending_, /*final=*/false, &text);
  pending_.erase(0, used);
  return text;
}

std::string StreamingDecoder::Flush() {
  std::string text;
  AppendUtf8Lossy(pending_, /*final=*/true, &text);
  pending_.clear();
  return text;
}

}  // namespace flywheel
