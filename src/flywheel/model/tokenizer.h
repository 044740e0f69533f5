// Text <-> token ids for the policy. An extension point: byte-level (any text, 259 ids) and
// word-level from a vocabulary the environment declares (small vocabularies train fast).
// Every tokenizer has the three special tokens the turn template needs.
#ifndef FLYWHEEL_MODEL_TOKENIZER_H_
#define FLYWHEEL_MODEL_TOKENIZER_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace flywheel {

struct SpecialTokens {
  int64_t bos = -1;          // begins a sequence
  int64_t eos = -1;          // the policy ends the episode
  int64_t end_of_turn = -1;  // closes a turn (the policy's or the environment's)
};

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  virtual int64_t vocab_size() const = 0;
  virtual const SpecialTokens& special() const = 0;
  // Text to ids, without special tokens; an error names what cannot be encoded.
  virtual absl::StatusOr<std::vector<int64_t>> Encode(std::string_view text) const = 0;
  // Ids to text; special tokens render as <|bos|>, <|eos|>, <|eot|>. An id outside the
  // vocabulary is an error.
  virtual absl::StatusOr<std::string> Decode(const std::vector<int64_t>& ids) const = 0;
  virtual std::string DebugString() const = 0;
};

}  // namespace flywheel

#endif  // FLYWHEEL_MODEL_TOKENIZER_H_
