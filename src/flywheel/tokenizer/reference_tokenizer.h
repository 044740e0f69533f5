// Runs Hugging Face's `tokenizers` library (its Node binding, which scripts/setup fetches into
// third_party/tokenizers/node_modules) through reference_tokenizer.js: the oracle of the
// tokenizer tests and the peer of `flywheel bench tokenizer`.
#ifndef FLYWHEEL_TOKENIZER_REFERENCE_TOKENIZER_H_
#define FLYWHEEL_TOKENIZER_REFERENCE_TOKENIZER_H_

#include <nlohmann/json.hpp>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace flywheel {

// third_party/tokenizers/<name>/tokenizer.json of the repository at `source_dir`.
std::string TokenizerJsonPath(const std::string& source_dir, const std::string& name);
std::string TokenizerConfigPath(const std::string& source_dir, const std::string& name);

// OK when node, the Node binding and the Qwen3 and Llama-3 files are in place; otherwise a
// FailedPrecondition naming what is missing and scripts/setup, which fetches them.
absl::Status CheckReferenceInstalled(const std::string& source_dir);

// Writes `request` (see reference_tokenizer.js) to `work_dir`, runs node on it with
// `environment` ("NAME=value …") and returns the response.
absl::StatusOr<nlohmann::json> RunReferenceTokenizer(const std::string& source_dir,
                                                     const nlohmann::json& request,
                                                     const std::string& work_dir,
                                                     const std::string& environment = "");

}  // namespace flywheel

#endif  // FLYWHEEL_TOKENIZER_REFERENCE_TOKENIZER_H_
