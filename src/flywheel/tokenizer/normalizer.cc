#include "flywheel/tokenizer/normalizer.h"

#include <unicode/bytestream.h>
#include <unicode/normalizer2.h>
#include <unicode/stringpiece.h>

#include "absl/base/internal/raw_logging.h"
#include "flywheel/core/strings.h"
#include "flywheel/tokenizer/json_fields.h"
#include "flywheel/tokenizer/utf8.h"

namespace flywheel {
namespace {

const icu::Normalizer2& IcuNfc() {
  static const icu::Normalizer2* nfc = [] {
    UErrorCode error = U_ZERO_ERROR;
    const icu::Normalizer2* n = icu::Normalizer2::getNFCInstance(error);
    ABSL_RAW_CHECK(U_SUCCESS(error), "ICU has no NFC data");
    return n;
  }();
  return *nfc;
}

}  // namespace

absl::StatusOr<Normalizer> Normalizer::FromJson(const nlohmann::json& json) {
  if (json.is_null()) return Normalizer(Form::kNone);
  if (json.is_object() && json.contains("type") && json["type"] == "NFC") {
    return Normalizer(Form::kNfc);
  }
  return absl::UnimplementedError(
      StrCat("normalizer = ", tokenizer_json::Brief(json),
             ": only null and {\"type\": \"NFC\"} are supported"));
}

std::string_view Normalizer::Normalize(std::string_view text, std::string* scratch) const {
  if (form_ == Form::kNone || IsAscii(text)) return text;
  const icu::Normalizer2& nfc = IcuNfc();
  const icu::StringPiece piece(text.data(), static_cast<int32_t>(text.size()));
  UErrorCode error = U_ZERO_ERROR;
  if (nfc.isNormalizedUTF8(piece, error) && U_SUCCESS(error)) return text;
  error = U_ZERO_ERROR;
  scratch->clear();
  icu::StringByteSink<std::string> sink(scratch, static_cast<int32_t>(text.size()));
  nfc.normalizeUTF8(0, piece, sink, nullptr, error);
  ABSL_RAW_CHECK(U_SUCCESS(error), "ICU NFC of valid UTF-8 failed");
  return *scratch;
}

}  // namespace flywheel
