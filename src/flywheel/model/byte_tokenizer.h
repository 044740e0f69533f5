// Byte-level tokenizer: ids 0..255 are the UTF-8 bytes of the text, then BOS = 256, EOS = 257,
// end-of-turn = 258. Encodes any text; vocab_size 259.
#ifndef FLYWHEEL_MODEL_BYTE_TOKENIZER_H_
#define FLYWHEEL_MODEL_BYTE_TOKENIZER_H_

#include "flywheel/model/tokenizer.h"

namespace flywheel {

class ByteTokenizer : public Tokenizer {
 public:
  ByteTokenizer();
  int64_t vocab_size() const override { return 259; }
  const SpecialTokens& special() const override { return special_; }
  absl::StatusOr<std::vector<int64_t>> Encode(std::string_view text) const override;
  absl::StatusOr<std::string> Decode(const std::vector<int64_t>& ids) const override;
  std::string DebugString() const override { return "ByteTokenizer{vocab_size=259}"; }

 private:
  SpecialTokens special_;
};

}  // namespace flywheel

#endif  // FLYWHEEL_MODEL_BYTE_TOKENIZER_H_
