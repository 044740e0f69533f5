// The external environment protocol (env/process/protocol.h): every line an environment process
// writes to its stdout goes through these parsers. Each line of the input is read as a hello, an
// observation and a score reply; what a real pool then does with a parsed reply (vocabulary
// check, observation cut) runs too.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "flywheel/env/observation_limit.h"
#include "flywheel/env/process/protocol.h"
#include "flywheel/env/vocabulary.h"

namespace flywheel {
namespace {

void Check(bool ok) {
  if (!ok) std::abort();
}

// Whole UTF-8 sequences only (the JSON parser accepts nothing else, and a cut must keep it so).
bool IsUtf8(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    const size_t n = c < 0x80           ? 1
                     : (c >> 5) == 0x6  ? 2
                     : (c >> 4) == 0xE  ? 3
                     : (c >> 3) == 0x1E ? 4
                                        : 0;
    if (n == 0 || i + n > s.size()) return false;
    for (size_t k = 1; k < n; ++k) {
      if ((static_cast<unsigned char>(s[i + k]) & 0xC0) != 0x80) return false;
    }
    i += n;
  }
  return true;
}

void OneLine(std::string_view line, VocabularySpec& vocabulary) {
  if (absl::StatusOr<protocol::Hello> hello = protocol::ParseHello(line); hello.ok()) {
    Check(hello->version == protocol::kVersion && !hello->name.empty());
    // What was accepted is what the line says, not a narrowed copy of it.
    const nlohmann::json j = nlohmann::json::parse(line);
    Check(j.at("protocol_version") == protocol::kVersion && j.at("name") == hello->name);
    vocabulary = hello->vocabulary;
  }
  if (absl::StatusOr<StepResult> r = protocol::ParseObservation(line); r.ok()) {
    Check(!r->partial_score || (*r->partial_score >= 0 && *r->partial_score <= 1));
    InVocabulary(vocabulary, r->observation);
    Check(IsUtf8(r->observation));
    TruncateObservation(*r, 7);
    Check(r->observation.size() <= 7 && IsUtf8(r->observation));
  }
  if (absl::StatusOr<double> score = protocol::ParseScore(line); score.ok()) {
    Check(*score >= 0 && *score <= 1);
  }
  protocol::Quote(line);
}

}  // namespace
}  // namespace flywheel

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view input(reinterpret_cast<const char*>(data), size);
  flywheel::VocabularySpec vocabulary;
  while (!input.empty()) {
    const size_t end = input.find('\n');
    flywheel::OneLine(input.substr(0, end), vocabulary);
    if (end == std::string_view::npos) break;
    input.remove_prefix(end + 1);
  }
  return 0;
}
