#include "flywheel/model/hf_generation_config.h"

#include <fstream>
#include <sstream>

#include "flywheel/core/status_macros.h"
#include "flywheel/core/strings.h"

namespace flywheel {
namespace {

using nlohmann::json;

absl::Status TypeError(std::string_view source, std::string_view key, const json& v,
                       std::string_view expected) {
  return absl::InvalidArgumentError(
      StrCat(source, ": ", key, " = ", v.is_structured() ? StrCat("an ", v.type_name()) : v.dump(),
             ": expected ", expected));
}

}  // namespace

absl::StatusOr<HfGenerationConfig> ParseHfGenerationConfig(std::string_view json_text,
                                                           std::string_view source) {
  HfGenerationConfig g;
  g.present = true;
  g.json = json::parse(json_text.begin(), json_text.end(), nullptr, /*allow_exceptions=*/false);
  if (g.json.is_discarded() || !g.json.is_object()) {
    return absl::InvalidArgumentError(StrCat(source, ": not a JSON object"));
  }
  for (const auto& [key, v] : g.json.items()) {
    if (v.is_null()) continue;
    if (key == "eos_token_id") {
      if (v.is_number_integer()) {
        g.eos_token_ids.push_back(v.get<int64_t>());
      } else if (v.is_array()) {
        for (const auto& id : v) {
          if (!id.is_number_integer()) return TypeError(source, key, v, "a token id or a list");
          g.eos_token_ids.push_back(id.get<int64_t>());
        }
      } else {
        return TypeError(source, key, v, "a token id or a list");
      }
    } else if (key == "bos_token_id" || key == "pad_token_id" || key == "top_k") {
      if (!v.is_number_integer()) return TypeError(source, key, v, "an integer");
      (key == "top_k"          ? g.top_k
       : key == "bos_token_id" ? g.bos_token_id
                               : g.pad_token_id) = v.get<int64_t>();
    } else if (key == "temperature" || key == "top_p") {
      if (!v.is_number()) return TypeError(source, key, v, "a number");
      (key == "temperature" ? g.temperature : g.top_p) = v.get<double>();
    } else if (key == "do_sample") {
      if (!v.is_boolean()) return TypeError(source, key, v, "true or false");
      g.do_sample = v.get<bool>();
    } else if (key != "transformers_version" && key != "_from_model_config") {
      g.ignored_keys.push_back(key);
    }
  }
  return g;
}

absl::StatusOr<HfGenerationConfig> LoadHfGenerationConfig(const std::filesystem::path& dir) {
  const std::filesystem::path file = dir / "generation_config.json";
  if (!std::filesystem::exists(file)) {
    HfGenerationConfig absent;
    absent.json = json::object();
    return absent;
  }
  std::ifstream in(file, std::ios::binary);
  if (!in) return absl::NotFoundError(StrCat("cannot read ", file.string()));
  std::ostringstream text;
  text << in.rdbuf();
  return ParseHfGenerationConfig(text.str(), file.string());
}

}  // namespace flywheel
