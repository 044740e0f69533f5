// Encoding with the real Qwen3 tokenizer (third_party/tokenizers/qwen3/tokenizer.json): the input
// is the text, any bytes (invalid UTF-8 is replaced, as HfTokenizerOptions::kReplace says). Ids
// are in the vocabulary; encoding again (now from the word cache) gives the same ids; the ids
// decode, as a whole and id by id, to the same text, which is the input itself when the input is
// ASCII (the NFC normalizer leaves ASCII alone, and byte-level BPE loses nothing).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "flywheel/tokenizer/hf_tokenizer.h"
#include "flywheel/tokenizer/streaming_decoder.h"
#include "real_files.h"

namespace {

void Check(bool ok) {
  if (!ok) std::abort();
}

const flywheel::HfTokenizer* qwen3 = nullptr;

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  flywheel::HfTokenizerOptions options;
  options.invalid_utf8 = flywheel::HfTokenizerOptions::InvalidUtf8::kReplace;
  options.cache_capacity = 1000;  // small, so that the fuzzer also sees it evict
  const std::string path =
      flywheel::fuzz::SourcePath("third_party/tokenizers/qwen3/tokenizer.json");
  absl::StatusOr<std::unique_ptr<flywheel::HfTokenizer>> tok =
      flywheel::LoadHfTokenizer(path, options);
  flywheel::fuzz::ExitUnlessOk(tok.status(), path);
  qwen3 = tok->release();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<std::vector<int64_t>> ids = qwen3->Encode(text);
  Check(ids.ok());
  for (int64_t id : *ids) Check(id >= 0 && id < qwen3->vocab_size());
  absl::StatusOr<std::vector<int64_t>> again = qwen3->Encode(text);
  Check(again.ok() && *again == *ids);
  absl::StatusOr<std::string> decoded = qwen3->Decode(*ids);
  Check(decoded.ok());
  bool ascii = true;
  for (char c : text) ascii = ascii && static_cast<unsigned char>(c) < 0x80;
  if (ascii) Check(*decoded == text);
  flywheel::StreamingDecoder stream(qwen3);
  std::string streamed;
  for (int64_t id : *ids) {
    absl::StatusOr<std::string> piece = stream.Next(id);
    Check(piece.ok());
    streamed += *piece;
  }
  streamed += stream.Flush();
  Check(streamed == *decoded);
  return 0;
}
