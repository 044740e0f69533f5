// The normalizer step of a tokenizer.json: none, or Unicode NFC (Qwen's tokenizers). Anything
// else (NFKC, Lowercase, Replace, Sequence, BertNormalizer, …) is refused at load time with the
// JSON path. NFC comes from ICU.
#ifndef FLYWHEEL_TOKENIZER_NORMALIZER_H_
#define FLYWHEEL_TOKENIZER_NORMALIZER_H_

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace flywheel {

class Normalizer {
 public:
  enum class Form { kNone, kNfc };

  // `json` is the value of the "normalizer" key (null, or {"type": "NFC"}).
  static absl::StatusOr<Normalizer> FromJson(const nlohmann::json& json);
  static Normalizer Nfc() { return Normalizer(Form::kNfc); }
  Normalizer() = default;

  Form form() const { return form_; }

  // Normalizes valid UTF-8 `text`. Returns `text` itself when normalization leaves it unchanged
  // (always for kNone, and for ASCII or already normalized text under NFC); otherwise the
  // normalized text, stored in `*scratch`.
  std::string_view Normalize(std::string_view text, std::string* scratch) const;

  std::string DebugString() const { return form_ == Form::kNfc ? "NFC" : "none"; }

 private:
  explicit Normalizer(Form form) : form_(form) {}
  Form form_ = Form::kNone;
};

}  // namespace flywheel

#endif  // FLYWHEEL_TOKENIZER_NORMALIZER_H_
