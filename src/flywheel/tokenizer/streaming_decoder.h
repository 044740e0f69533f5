// Decoding as ids arrive (one generated token at a time): returns only complete UTF-8 text.
// A character whose bytes are split over several tokens (common for CJK and emoji in byte-level
// BPE) is held until its last byte arrives; bytes that can no longer form a character become
// U+FFFD at once, one per maximal invalid subpart; Flush ends the stream, turning a held
// incomplete character into U+FFFD. The concatenation of everything returned equals
// HfTokenizer::Decode of all the ids, which is HF tokenizers' decode.
//
// (HF's own DecodeStream instead re-decodes a window of ids and holds text while it ends in
// U+FFFD, so it never emits an invalid tail and has no flush; the text it does emit is the
// same.) One decoder per sequence; not thread-safe; the tokenizer must outlive it.
#ifndef FLYWHEEL_TOKENIZER_STREAMING_DECODER_H_
#define FLYWHEEL_TOKENIZER_STREAMING_DECODER_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "flywheel/tokenizer/hf_tokenizer.h"

namespace flywheel {

class StreamingDecoder {
 public:
  explicit StreamingDecoder(const HfTokenizer* tokenizer) : tokenizer_(tokenizer) {}

  // The text that `id` completes (often empty for a partial character). An id outside the
  // vocabulary is an error and changes nothing.
  absl::StatusOr<std::string> Next(int64_t id);
  // The rest: a held incomplete character as U+FFFD. The decoder is then empty, ready for reuse.
  std::string Flush();
  // Bytes held back (0..3).
  size_t pending_bytes() const { return pending_.size(); }

 private:
  const HfTokenizer* tokenizer_;  // not owned
  std::string pending_;           // the start of a character whose remaining bytes may come
};

}  // namespace flywheel

#endif  // FLYWHEEL_TOKENIZER_STREAMING_DECODER_H_
