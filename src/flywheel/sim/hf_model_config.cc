#include "flywheel/sim/hf_model_config.h"

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <utility>

#include "flywheel/core/status_macros.h"
#include "flywheel/core/strings.h"

namespace flywheel::sim {
namespace {

using nlohmann::json;

// A value for an error message. An array or object is named by its kind only: dumping it would
// recurse once per level of nesting, and a config.json can nest deep enough to overflow the stack.
std::string Describe(const json& v) {
  return v.is_structured() ? StrCat("an ", v.type_name()) : v.dump();
}

// A field that is absent or JSON null: Hugging Face writes `"head_dim": null` for "derived".
const json* Lookup(const json& config, std::string_view field) {
  const auto it = config.find(std::string(field));
  if (it == config.end() || it->is_null()) return nullptr;
  return &*it;
}

absl::StatusOr<int64_t> PositiveInt(const json& config, std::string_view field,
                                    std::string_view source) {
  const json* value = Lookup(config, field);
  if (value == nullptr) {
    return absl::InvalidArgumentError(
        StrCat(source, ": field \"", field, "\" is missing (the cost model needs it)"));
  }
  if (!value->is_number_integer() || value->get<int64_t>() < 1) {
    return absl::InvalidArgumentError(StrCat(
        source, ": field \"", field, "\" must be an integer >= 1 (got ", Describe(*value), ")"));
  }
  return value->get<int64_t>();
}

absl::StatusOr<int64_t> OptionalPositiveInt(const json& config, std::string_view field,
                                            int64_t fallback, std::string_view source) {
  if (Lookup(config, field) == nullptr) return fallback;
  return PositiveInt(config, field, source);
}

absl::StatusOr<bool> OptionalBool(const json& config, std::string_view field, bool fallback,
                                  std::string_view source) {
  const json* value = Lookup(config, field);
  if (value == nullptr) return fallback;
  if (!value->is_boolean()) {
    return absl::InvalidArgumentError(StrCat(source, ": field \"", field,
                                             "\" must be true or false (got ", Describe(*value),
                                             ")"));
  }
  return value->get<bool>();
}

// torch_dtype (transformers < 4.56) or dtype (later); a checkpoint without either is taken to be
// bfloat16, the dtype these families are published in.
absl::StatusOr<int64_t> BytesPerElement(const json& config, std::string_view source) {
  std::string_view field = "torch_dtype";
  const json* value = Lookup(config, field);
  if (value == nullptr) {
    field = "dtype";
    value = Lookup(config, field);
  }
  if (value == nullptr) return int64_t{2};
  const std::string name = value->is_string() ? value->get<std::string>() : "";
  if (name == "bfloat16" || name == "float16") return int64_t{2};
  if (name == "float32") return int64_t{4};
  return absl::InvalidArgumentError(
      StrCat(source, ": field \"", field, "\" = ", Describe(*value),
             " is not one of \"bfloat16\", \"float16\", \"float32\""));
}

}  // namespace

double HfModelShape::params() const {
  const double h = static_cast<double>(hidden);
  const double q = static_cast<double>(heads * head_dim);
  const double kv = static_cast<double>(kv_heads * head_dim);
  double layer = h * q + 2 * h * kv + q * h + 3 * h * static_cast<double>(intermediate) + 2 * h;
  if (attention_bias) layer += q + 2 * kv;
  if (qk_norm) layer += 2 * static_cast<double>(head_dim);
  const double embeddings = static_cast<double>(vocab) * h * (tied_embeddings ? 1 : 2);
  return embeddings + static_cast<double>(layers) * layer + h;
}

double HfModelShape::kv_bytes_per_token() const {
  return 2.0 * static_cast<double>(layers * kv_heads * head_dim * bytes_per_element);
}

std::string HfModelShape::DebugString() const {
  return StrCat(model_type.empty() ? "model" : model_type, "(", params() / 1e9, "B params, ",
                layers, " layers, hidden ", hidden, ", ", heads, " heads / ", kv_heads,
                " KV heads of ", head_dim, ", intermediate ", intermediate, ", vocab ", vocab,
                tied_embeddings ? ", tied" : ", untied", ", ", bytes_per_element,
                " bytes/element, KV ", kv_bytes_per_token(), " B/token)");
}

absl::StatusOr<HfModelShape> ParseHfModelConfig(std::string_view json_text,
                                                std::string_view source) {
  json config;
  try {
    config = json::parse(json_text.begin(), json_text.end());
  } catch (const json::exception& e) {  // a syntax error, or a number too large for a double
    return absl::InvalidArgumentError(StrCat(source, ": not valid JSON: ", e.what()));
  }
  if (!config.is_object()) {
    return absl::InvalidArgumentError(
        StrCat(source, ": expected a JSON object, got ", config.type_name()));
  }
  for (std::string_view moe : {"num_experts", "num_local_experts", "n_routed_experts"}) {
    const json* experts = Lookup(config, moe);
    if (experts != nullptr && experts->is_number() && experts->get<double>() > 0) {
      return absl::UnimplementedError(
          StrCat(source, ": field \"", moe, "\" = ", experts->dump(),
                 ": a mixture-of-experts model; the cost model takes dense models only (give "
                 "workload.model.params as the active parameters and kv_bytes_per_token instead)"));
    }
  }
  HfModelShape s;
  if (const json* type = Lookup(config, "model_type"); type != nullptr && type->is_string()) {
    s.model_type = type->get<std::string>();
  }
  ASSIGN_OR_RETURN(s.hidden, PositiveInt(config, "hidden_size", source));
  ASSIGN_OR_RETURN(s.layers, PositiveInt(config, "num_hidden_layers", source));
  ASSIGN_OR_RETURN(s.heads, PositiveInt(config, "num_attention_heads", source));
  ASSIGN_OR_RETURN(s.kv_heads, OptionalPositiveInt(config, "num_key_value_heads", s.heads, source));
  if (s.kv_heads > s.heads || s.heads % s.kv_heads != 0) {
    return absl::InvalidArgumentError(StrCat(source,
                                             ": field \"num_key_value_heads\" = ", s.kv_heads,
                                             " must divide \"num_attention_heads\" = ", s.heads));
  }
  if (Lookup(config, "head_dim") == nullptr && s.hidden % s.heads != 0) {
    return absl::InvalidArgumentError(
        StrCat(source, ": field \"head_dim\" is missing and \"hidden_size\" = ", s.hidden,
               " is not a multiple of \"num_attention_heads\" = ", s.heads));
  }
  ASSIGN_OR_RETURN(s.head_dim, OptionalPositiveInt(config, "head_dim", s.hidden / s.heads, source));
  ASSIGN_OR_RETURN(s.intermediate, PositiveInt(config, "intermediate_size", source));
  ASSIGN_OR_RETURN(s.vocab, PositiveInt(config, "vocab_size", source));
  ASSIGN_OR_RETURN(s.tied_embeddings, OptionalBool(config, "tie_word_embeddings", false, source));
  ASSIGN_OR_RETURN(s.attention_bias,
                   OptionalBool(config, "attention_bias", s.model_type == "qwen2", source));
  s.qk_norm = s.model_type == "qwen3";
  ASSIGN_OR_RETURN(s.bytes_per_element, BytesPerElement(config, source));
  return s;
}

absl::StatusOr<HfModelShape> ReadHfModelConfig(const std::filesystem::path& file) {
  std::ifstream in(file, std::ios::binary);
  if (!in) {
    return absl::NotFoundError(StrCat("cannot read the Hugging Face config ", file.string()));
  }
  std::ostringstream text;
  text << in.rdbuf();
  return ParseHfModelConfig(text.str(), file.string());
}

absl::Status ApplyHfConfig(const std::filesystem::path& base_dir, ModelCostOptions& model) {
  if (model.hf_config.empty()) return absl::OkStatus();
  const std::filesystem::path given(model.hf_config);
  const std::filesystem::path file = given.is_absolute() ? given : base_dir / given;
  absl::StatusOr<HfModelShape> shape = ReadHfModelConfig(file);
  if (!shape.ok()) {
    return Annotate(shape.status(), StrCat("workload.model.hf_config = \"", model.hf_config, "\""));
  }
  model.params = shape->params();
  model.layers = shape->layers;
  model.hidden = shape->hidden;
  model.kv_bytes_per_token = shape->kv_bytes_per_token();
  model.bytes_per_param = static_cast<double>(shape->bytes_per_element);
  model.hf_config.clear();
  return absl::OkStatus();
}

}  // namespace flywheel::sim
