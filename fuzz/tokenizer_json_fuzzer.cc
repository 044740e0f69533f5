// A Hugging Face tokenizer.json (tokenizer/hf_tokenizer.h), downloaded with a model: the input is
// the file's text. A tokenizer that loads encodes a few strings (plain, special tokens, CJK,
// invalid UTF-8 replaced), and its ids decode, as a whole and id by id, to the same text.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "flywheel/tokenizer/hf_tokenizer.h"
#include "flywheel/tokenizer/streaming_decoder.h"

namespace flywheel {
namespace {

void Check(bool ok) {
  if (!ok) std::abort();
}

void Exercise(const HfTokenizer& tok) {
  for (std::string_view text : {std::string_view("Hello, world! 123 <|im_start|>user\n  x"),
                                std::string_view("\xE4\xBD\xA0\xE5\xA5\xBD \xF0\x9F\x98\x80\t\r\n"),
                                std::string_view("bad \xFF\xC3 bytes")}) {
    absl::StatusOr<std::vector<int64_t>> ids = tok.Encode(text);
    if (!ids.ok()) continue;
    for (int64_t id : *ids) Check(id >= 0 && id < tok.vocab_size());
    absl::StatusOr<std::string> decoded = tok.Decode(*ids);
    Check(decoded.ok());
    StreamingDecoder stream(&tok);
    std::string streamed;
    for (int64_t id : *ids) {
      absl::StatusOr<std::string> piece = stream.Next(id);
      Check(piece.ok());
      streamed += *piece;
    }
    streamed += stream.Flush();
    Check(streamed == *decoded);
  }
}

}  // namespace
}  // namespace flywheel

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  flywheel::HfTokenizerOptions options;
  options.invalid_utf8 = flywheel::HfTokenizerOptions::InvalidUtf8::kReplace;
  options.cache_capacity = 16;
  absl::StatusOr<std::unique_ptr<flywheel::HfTokenizer>> tok =
      flywheel::ParseHfTokenizer(text, "tokenizer.json", options);
  if (tok.ok()) flywheel::Exercise(**tok);
  return 0;
}
