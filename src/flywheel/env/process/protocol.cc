#include "flywheel/env/process/protocol.h"

#include <cmath>
#include <nlohmann/json.hpp>
#include <set>

#include "flywheel/core/strings.h"

namespace flywheel::protocol {
namespace {

using nlohmann::json;

constexpr size_t kQuoteBytes = 200;

absl::Status Invalid(std::string_view what, std::string_view line) {
  return absl::InvalidArgumentError(StrCat(what, ": ", Quote(line)));
}

// Parses a reply and checks its "type"; an error reply becomes FAILED_PRECONDITION.
absl::StatusOr<json> ParseReply(std::string_view line, std::string_view expected_type) {
  json j = json::parse(line.begin(), line.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return Invalid("reply is not valid JSON", line);
  if (!j.is_object()) return Invalid("reply is not a JSON object", line);
  auto type = j.find("type");
  if (type == j.end() || !type->is_string()) {
    return Invalid("reply has no string field \"type\"", line);
  }
  if (*type == "error") {
    auto message = j.find("message");
    return absl::FailedPreconditionError(StrCat(
        "environment replied with an error: ",
        message != j.end() && message->is_string() ? message->get<std::string>() : Quote(line)));
  }
  if (*type != expected_type) {
    return Invalid(StrCat("expected a reply of type \"", expected_type, "\", got \"",
                          type->get<std::string>(), "\""),
                   line);
  }
  return j;
}

bool IsFiniteNumber(const json& j) { return j.is_number() && std::isfinite(j.get<double>()); }

// A value for an error message. An array or object is named by its kind only: dumping it would
// recurse once per level of nesting, and a reply line (up to env.process.max_line_bytes) can nest
// millions of levels deep, which overflowed the stack.
std::string Describe(const json& v) {
  return v.is_structured() ? StrCat("an ", v.type_name()) : v.dump();
}

}  // namespace

std::string Quote(std::string_view line) {
  if (line.size() <= kQuoteBytes) return StrCat("\"", line, "\"");
  return StrCat("\"", line.substr(0, kQuoteBytes), "…\" (", line.size(), " bytes)");
}

std::string HelloRequest() {
  return json{{"type", "hello"}, {"protocol_version", kVersion}}.dump();
}
std::string ResetRequest(std::string_view task, uint64_t seed) {
  return json{{"type", "reset"}, {"task", task}, {"seed", seed & ((uint64_t{1} << 53) - 1)}}.dump();
}
std::string StepRequest(std::string_view action) {
  // Actions come from a sampler and may hold invalid UTF-8; replace rather than throw.
  return json{{"type", "step"}, {"action", action}}.dump(-1, ' ', false,
                                                         json::error_handler_t::replace);
}
std::string ScoreRequest() { return json{{"type", "score"}}.dump(); }
std::string CloseRequest() { return json{{"type", "close"}}.dump(); }

absl::StatusOr<Hello> ParseHello(std::string_view line) {
  absl::StatusOr<json> j = ParseReply(line, "hello");
  if (!j.ok()) return j.status();
  Hello hello;
  auto version = j->find("protocol_version");
  if (version == j->end() || !version->is_number_integer()) {
    return Invalid("hello has no integer \"protocol_version\"", line);
  }
  // Compared as JSON numbers: get<int>() would narrow 4294967297 to 1 and accept it.
  if (*version != kVersion) {
    return Invalid(StrCat("hello has protocol_version ", version->dump(), ", flywheel speaks ",
                          kVersion),
                   line);
  }
  hello.version = kVersion;
  auto name = j->find("name");
  if (name == j->end() || !name->is_string() || name->get<std::string>().empty()) {
    return Invalid("hello has no non-empty string \"name\"", line);
  }
  hello.name = name->get<std::string>();
  auto vocab = j->find("vocabulary");
  if (vocab == j->end() || vocab->is_null()) return hello;  // bytes by default
  if (!vocab->is_object()) return Invalid("hello \"vocabulary\" is not an object", line);
  auto kind = vocab->find("kind");
  if (kind == vocab->end() || !kind->is_string() || (*kind != "words" && *kind != "bytes")) {
    return Invalid("hello vocabulary.kind must be \"words\" or \"bytes\"", line);
  }
  if (*kind == "bytes") return hello;
  auto words = vocab->find("words");
  if (words == vocab->end() || !words->is_array() || words->empty()) {
    return Invalid("hello vocabulary.words must be a non-empty array for kind \"words\"", line);
  }
  std::set<std::string> seen;
  hello.vocabulary.kind = VocabularySpec::kWords;
  for (const json& w : *words) {
    if (!w.is_string() || w.get<std::string>().empty() ||
        w.get<std::string>().find_first_of(" \t\n") != std::string::npos) {
      return Invalid(StrCat("hello vocabulary word ", Describe(w),
                            " is not a non-empty string "
                            "without whitespace"),
                     line);
    }
    if (!seen.insert(w.get<std::string>()).second) {
      return Invalid(StrCat("hello vocabulary word ", Describe(w), " appears twice"), line);
    }
    hello.vocabulary.words.push_back(w.get<std::string>());
  }
  return hello;
}

absl::StatusOr<StepResult> ParseObservation(std::string_view line) {
  absl::StatusOr<json> j = ParseReply(line, "observation");
  if (!j.ok()) return j.status();
  StepResult r;
  auto observation = j->find("observation");
  if (observation == j->end() || !observation->is_string()) {
    return Invalid("observation reply has no string field \"observation\"", line);
  }
  r.observation = observation->get<std::string>();
  auto reward = j->find("reward");
  if (reward == j->end() || !IsFiniteNumber(*reward)) {
    return Invalid("observation reply has no finite number \"reward\"", line);
  }
  r.reward = reward->get<double>();
  auto done = j->find("done");
  if (done == j->end() || !done->is_boolean()) {
    return Invalid("observation reply has no boolean \"done\"", line);
  }
  r.done = done->get<bool>();
  if (r.done) r.end = EpisodeEnd::kDone;
  auto partial = j->find("partial_score");
  if (partial != j->end() && !partial->is_null()) {
    if (!IsFiniteNumber(*partial) || partial->get<double>() < 0 || partial->get<double>() > 1) {
      return Invalid("observation reply \"partial_score\" must be a number in [0, 1] or null",
                     line);
    }
    r.partial_score = partial->get<double>();
  }
  auto tool = j->find("tool");
  if (tool != j->end() && !tool->is_null()) {
    if (!tool->is_string()) return Invalid("observation reply \"tool\" must be a string", line);
    r.tool = tool->get<std::string>();
  }
  return r;
}

absl::StatusOr<double> ParseScore(std::string_view line) {
  absl::StatusOr<json> j = ParseReply(line, "score");
  if (!j.ok()) return j.status();
  auto score = j->find("score");
  if (score == j->end() || !IsFiniteNumber(*score) || score->get<double>() < 0 ||
      score->get<double>() > 1) {
    return Invalid("score reply has no number \"score\" in [0, 1]", line);
  }
  return score->get<double>();
}

}  // namespace flywheel::protocol
