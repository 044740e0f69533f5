#include "flywheel/model/hf_config.h"

#include <algorithm>
#include <fstream>
#include <set>
#include <sstream>

#include "flywheel/core/status_macros.h"
#include "flywheel/core/strings.h"

namespace flywheel {
namespace {

// A value for an error message: a scalar, or an array or object of scalars, as JSON; anything
// nested deeper is named by its kind only: dump() recurses once per level, and a config.json can
// nest deep enough to overflow the stack (as sim/hf_model_config.cc found).
std::string Describe(const nlohmann::json& v) {
  if (v.is_structured()) {
    for (const auto& item : v) {
      if (item.is_structured()) return StrCat("an ", v.type_name());
    }
  }
  return v.dump();
}

using nlohmann::json;

struct Architecture {
  std::string_view name;
  std::string_view model_type;
  int64_t default_max_position_embeddings;  // the transformers config class's default
};
constexpr Architecture kArchitectures[] = {
    {"LlamaForCausalLM", "llama", 2048},
    {"Qwen2ForCausalLM", "qwen2", 32768},
    {"Qwen3ForCausalLM", "qwen3", 32768},
};

// Keys that never change what the model computes: provenance, token ids (the tokenizer's and
// the generation config's business), inference-time switches of transformers.
constexpr std::string_view kHarmlessKeys[] = {
    "transformers_version", "_name_or_path",        "bos_token_id",
    "eos_token_id",         "pad_token_id",         "use_cache",
    "initializer_range",    "tokenizer_class",      "return_dict",
    "output_attentions",    "output_hidden_states", "_attn_implementation_autoset",
};

// Mixture-of-experts sizes: any of them set (not null, not 0) makes a sparse model.
constexpr std::string_view kExpertKeys[] = {
    "num_experts",         "num_local_experts",     "n_routed_experts",
    "num_experts_per_tok", "moe_intermediate_size", "shared_expert_intermediate_size",
    "n_shared_experts",
};

// One config.json object, read key by key. Every key read or explicitly allowed is marked;
// Unclaimed() lists the rest, which the caller refuses.
class KeyReader {
 public:
  KeyReader(const json& object, std::string source, std::string prefix = "")
      : object_(object), source_(std::move(source)), prefix_(std::move(prefix)) {}

  // The value, or null when absent or JSON null (transformers writes null for "derived").
  const json* Get(std::string_view key) {
    claimed_.insert(std::string(key));
    const auto it = object_.find(std::string(key));
    if (it == object_.end() || it->is_null()) return nullptr;
    return &*it;
  }
  void Allow(std::string_view key) { claimed_.insert(std::string(key)); }
  bool Has(std::string_view key) const { return object_.contains(std::string(key)); }

  absl::StatusOr<int64_t> Int(std::string_view key, std::optional<int64_t> fallback,
                              int64_t min = 1) {
    const json* v = Get(key);
    if (v == nullptr) {
      if (fallback) return *fallback;
      return Error(key, "is missing (flywheel needs it to build the model)");
    }
    if (!v->is_number_integer() || v->get<int64_t>() < min) {
      return Error(key, StrCat("= ", Describe(*v), ": expected an integer >= ", min));
    }
    return v->get<int64_t>();
  }
  absl::StatusOr<double> Number(std::string_view key, std::optional<double> fallback) {
    const json* v = Get(key);
    if (v == nullptr) {
      if (fallback) return *fallback;
      return Error(key, "is missing");
    }
    if (!v->is_number()) return Error(key, StrCat("= ", Describe(*v), ": expected a number"));
    return v->get<double>();
  }
  absl::StatusOr<bool> Bool(std::string_view key, bool fallback) {
    const json* v = Get(key);
    if (v == nullptr) return fallback;
    if (!v->is_boolean()) return Error(key, StrCat("= ", Describe(*v), ": expected true or false"));
    return v->get<bool>();
  }
  absl::StatusOr<std::string> String(std::string_view key, std::string fallback) {
    const json* v = Get(key);
    if (v == nullptr) return fallback;
    if (!v->is_string()) return Error(key, StrCat("= ", Describe(*v), ": expected a string"));
    return v->get<std::string>();
  }

  std::vector<std::string> Unclaimed() const {
    std::vector<std::string> out;
    for (const auto& [key, value] : object_.items()) {
      if (!claimed_.contains(key)) out.push_back(prefix_ + key);
    }
    return out;
  }

  absl::Status Error(std::string_view key, std::string_view what) const {
    return absl::InvalidArgumentError(StrCat(source_, ": ", prefix_, key, " ", what));
  }
  const std::string& source() const { return source_; }

 private:
  const json& object_;
  std::string source_;
  std::string prefix_;
  std::set<std::string> claimed_;
};

absl::Status Refuse(const KeyReader& r, std::string_view key, const json& value,
                    std::string_view why) {
  return absl::InvalidArgumentError(
      StrCat(r.source(), ": ", key, " = ", Describe(value), " is not supported: ", why));
}

// rope_scaling (transformers < 5) or rope_parameters (5: rope_theta inside too).
absl::Status ReadRope(KeyReader& top, ModelOptions& o) {
  const json* scaling = top.Get("rope_scaling");
  const json* parameters = top.Get("rope_parameters");
  if (scaling != nullptr && parameters != nullptr) {
    return top.Error("rope_scaling", "and rope_parameters are both set: give one");
  }
  const std::string key = parameters != nullptr ? "rope_parameters" : "rope_scaling";
  const json* rope = parameters != nullptr ? parameters : scaling;
  ASSIGN_OR_RETURN(o.rope_theta, top.Number("rope_theta", 10000.0));
  if (rope == nullptr) return absl::OkStatus();
  if (!rope->is_object()) {
    return top.Error(key, StrCat("= ", Describe(*rope), ": expected an object or null"));
  }
  KeyReader r(*rope, top.source(), key + ".");
  std::string type;
  if (r.Has("rope_type")) {
    ASSIGN_OR_RETURN(type, r.String("rope_type", "default"));
    r.Allow("type");  // older files repeat it under its old name
  } else {
    ASSIGN_OR_RETURN(type, r.String("type", "default"));
  }
  if (parameters != nullptr) {
    ASSIGN_OR_RETURN(o.rope_theta, r.Number("rope_theta", o.rope_theta));
  }
  if (type == "llama3") {
    RopeScalingOptions& s = o.rope_scaling;
    s.type = "llama3";
    ASSIGN_OR_RETURN(s.factor, r.Number("factor", std::nullopt));
    ASSIGN_OR_RETURN(s.low_freq_factor, r.Number("low_freq_factor", std::nullopt));
    ASSIGN_OR_RETURN(s.high_freq_factor, r.Number("high_freq_factor", std::nullopt));
    ASSIGN_OR_RETURN(s.original_max_position_embeddings,
                     r.Int("original_max_position_embeddings", std::nullopt));
  } else if (type != "default") {
    return Refuse(top, key + ".rope_type", json(type),
                  "flywheel computes unscaled rotary embeddings and Llama 3's (\"llama3\"); "
                  "linear, dynamic, yarn, longrope and the others would give other positions");
  }
  if (const auto extra = r.Unclaimed(); !extra.empty()) {
    return absl::InvalidArgumentError(StrCat(top.source(), ": unknown key(s) ", Join(extra, ", "),
                                             " in ", key, " (rope type ", type, ")"));
  }
  return absl::OkStatus();
}

// Keys that would change the maths when active.
absl::Status RefuseActiveKeys(KeyReader& r, std::string_view model_type) {
  ASSIGN_OR_RETURN(const std::string act, r.String("hidden_act", "silu"));
  if (act != "silu") {
    return Refuse(r, "hidden_act", json(act), "the MLP is SwiGLU with silu");
  }
  if (const json* v = r.Get("mlp_bias"); v != nullptr && *v != json(false)) {
    return Refuse(r, "mlp_bias", *v, "the MLP projections have no bias");
  }
  if (const json* v = r.Get("attention_dropout"); v != nullptr && !(v->is_number() && *v == 0)) {
    return Refuse(r, "attention_dropout", *v, "training applies no attention dropout");
  }
  if (const json* v = r.Get("quantization_config"); v != nullptr) {
    return Refuse(r, "quantization_config", *v, "quantised checkpoints are not read");
  }
  for (std::string_view key : kExpertKeys) {
    const json* v = r.Get(key);
    if (v != nullptr && *v != json(0)) {
      return Refuse(r, key, *v, "a mixture-of-experts model; flywheel computes dense models");
    }
  }
  if (model_type == "qwen2" || model_type == "qwen3") {
    // A sliding window applies only when use_sliding_window is true; the size and the layers
    // it would apply to are then harmless.
    if (const json* v = r.Get("use_sliding_window"); v != nullptr && *v != json(false)) {
      const json* window = r.Get("sliding_window");
      return Refuse(r, "use_sliding_window", *v,
                    StrCat("sliding-window attention (sliding_window = ",
                           window != nullptr ? Describe(*window) : "null",
                           ") is not computed; every layer attends to the whole sequence"));
    }
    r.Allow("sliding_window");
    r.Allow("max_window_layers");
    if (const json* types = r.Get("layer_types"); types != nullptr) {
      if (!types->is_array()) return r.Error("layer_types", "must be a list");
      for (const auto& t : *types) {
        if (t != json("full_attention")) {
          return Refuse(r, "layer_types", *types,
                        "only \"full_attention\" layers are computed (no sliding windows)");
        }
      }
    }
  }
  if (model_type == "llama") {
    // pretraining_tp > 1 made transformers split each projection into slices and sum them:
    // the same function up to float summation order.
    r.Allow("pretraining_tp");
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<int64_t>> TokenIds(const KeyReader& r, std::string_view key,
                                              const json* v) {
  std::vector<int64_t> ids;
  if (v == nullptr) return ids;
  if (v->is_number_integer()) {
    ids.push_back(v->get<int64_t>());
    return ids;
  }
  if (v->is_array()) {
    for (const auto& id : *v) {
      if (!id.is_number_integer()) break;
      ids.push_back(id.get<int64_t>());
    }
    if (ids.size() == v->size()) return ids;
  }
  return r.Error(key, StrCat("= ", Describe(*v), ": expected a token id or a list of them"));
}

absl::StatusOr<std::string> TorchDtype(KeyReader& r) {
  std::string_view key = "torch_dtype";
  const json* v = r.Get(key);
  if (const json* newer = r.Get("dtype"); v == nullptr) {
    key = "dtype";
    v = newer;
  }
  if (v == nullptr) return std::string();
  if (*v == json("bfloat16") || *v == json("float16") || *v == json("float32")) {
    return v->get<std::string>();
  }
  return Refuse(r, key, *v, "weights are read from bfloat16, float16 or float32");
}

}  // namespace

absl::StatusOr<HfModelConfig> ParseHfModelConfig(std::string_view json_text,
                                                 std::string_view source) {
  HfModelConfig hf;
  hf.source = std::string(source);
  hf.json = json::parse(json_text.begin(), json_text.end(), nullptr, /*allow_exceptions=*/false);
  if (hf.json.is_discarded()) {
    return absl::InvalidArgumentError(StrCat(source, ": not valid JSON"));
  }
  if (!hf.json.is_object()) {
    return absl::InvalidArgumentError(
        StrCat(source, ": expected a JSON object, got ", hf.json.type_name()));
  }
  KeyReader r(hf.json, hf.source);
  const json* architectures = r.Get("architectures");
  if (architectures == nullptr || !architectures->is_array() || architectures->size() != 1 ||
      !(*architectures)[0].is_string()) {
    return r.Error("architectures", StrCat("= ", architectures ? Describe(*architectures) : "null",
                                           ": expected a list of one architecture"));
  }
  hf.architecture = (*architectures)[0].get<std::string>();
  const auto arch = std::find_if(std::begin(kArchitectures), std::end(kArchitectures),
                                 [&](const Architecture& a) { return a.name == hf.architecture; });
  if (arch == std::end(kArchitectures)) {
    return Refuse(r, "architectures", *architectures,
                  "flywheel computes LlamaForCausalLM, Qwen2ForCausalLM and Qwen3ForCausalLM");
  }
  hf.model_type = std::string(arch->model_type);
  ASSIGN_OR_RETURN(const std::string model_type, r.String("model_type", hf.model_type));
  if (model_type != hf.model_type) {
    return r.Error("model_type", StrCat("= \"", model_type, "\" does not match architecture ",
                                        hf.architecture, " (model_type \"", hf.model_type, "\")"));
  }
  RETURN_IF_ERROR(RefuseActiveKeys(r, hf.model_type));

  ModelOptions& o = hf.model;
  ASSIGN_OR_RETURN(o.vocab_size, r.Int("vocab_size", std::nullopt));
  ASSIGN_OR_RETURN(o.hidden_size, r.Int("hidden_size", std::nullopt));
  ASSIGN_OR_RETURN(o.intermediate_size, r.Int("intermediate_size", std::nullopt));
  ASSIGN_OR_RETURN(o.num_layers, r.Int("num_hidden_layers", std::nullopt));
  ASSIGN_OR_RETURN(o.num_heads, r.Int("num_attention_heads", std::nullopt));
  ASSIGN_OR_RETURN(o.num_kv_heads, r.Int("num_key_value_heads", o.num_heads));
  // Qwen3Config's head_dim defaults to 128; Llama's and Qwen2's to hidden / heads.
  ASSIGN_OR_RETURN(o.head_dim,
                   r.Int("head_dim", hf.model_type == "qwen3" ? int64_t{128} : int64_t{0},
                         /*min=*/0));
  ASSIGN_OR_RETURN(o.rms_norm_eps, r.Number("rms_norm_eps", 1e-6));
  ASSIGN_OR_RETURN(hf.max_position_embeddings,
                   r.Int("max_position_embeddings", arch->default_max_position_embeddings));
  o.max_seq_len = hf.max_position_embeddings;
  ASSIGN_OR_RETURN(o.tie_embeddings, r.Bool("tie_word_embeddings", false));
  RETURN_IF_ERROR(ReadRope(r, o));
  if (hf.model_type == "qwen2") {
    // Qwen2's attention always has q/k/v biases; the key does not exist there.
    ASSIGN_OR_RETURN(const bool bias, r.Bool("attention_bias", true));
    if (!bias) {
      return Refuse(r, "attention_bias", json(false), "Qwen2 attention always has q/k/v biases");
    }
    o.attention_bias = true;
  } else {
    ASSIGN_OR_RETURN(o.attention_bias, r.Bool("attention_bias", false));
  }
  o.qk_norm = hf.model_type == "qwen3";
  ASSIGN_OR_RETURN(hf.torch_dtype, TorchDtype(r));
  ASSIGN_OR_RETURN(hf.eos_token_ids, TokenIds(r, "eos_token_id", r.Get("eos_token_id")));
  for (std::string_view key : kHarmlessKeys) r.Allow(key);
  if (const auto unknown = r.Unclaimed(); !unknown.empty()) {
    return absl::InvalidArgumentError(StrCat(
        source, ": unknown key(s) ", Join(unknown, ", "), " for ", hf.architecture,
        ": flywheel refuses keys it does not know rather than compute another model than the "
        "checkpoint's (docs/models.md lists the keys it reads)"));
  }
  if (o.num_heads % o.num_kv_heads != 0) {
    return r.Error(
        "num_key_value_heads",
        StrCat("= ", o.num_kv_heads, " must divide num_attention_heads = ", o.num_heads));
  }
  if (absl::Status s = o.Validate(); !s.ok()) return Annotate(s, source);
  return hf;
}

absl::StatusOr<HfModelConfig> LoadHfModelConfig(const std::filesystem::path& dir) {
  const std::filesystem::path file = dir / "config.json";
  std::ifstream in(file, std::ios::binary);
  if (!in) {
    return absl::NotFoundError(StrCat("model directory ", dir.string(),
                                      ": cannot read config.json (", file.string(), ")"));
  }
  std::ostringstream text;
  text << in.rdbuf();
  return ParseHfModelConfig(text.str(), file.string());
}

namespace {

// job's value where the job config set one (it differs from the default), else config.json's;
// both set and different is an error naming both.
template <typename T>
absl::Status TakeShape(T& out, const T& job, const T& job_default, const T& hf,
                       std::string_view job_key, std::string_view hf_key,
                       const HfModelConfig& config) {
  if (job != job_default && job != hf) {
    return absl::InvalidArgumentError(
        StrCat("model.", job_key, " = ", job, " in the job config disagrees with ", hf_key, " = ",
               hf, " in ", config.source, ": model.path sets the shape; remove model.", job_key,
               " or make it agree"));
  }
  out = hf;
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ModelOptions> ApplyHfModelConfig(const ModelOptions& job, const HfModelConfig& hf) {
  const ModelOptions d;  // the defaults: a key left there was not set by the job config
  const ModelOptions& h = hf.model;
  ModelOptions o = job;
  RETURN_IF_ERROR(TakeShape(o.vocab_size, job.vocab_size, d.vocab_size, h.vocab_size, "vocab_size",
                            "vocab_size", hf));
  RETURN_IF_ERROR(TakeShape(o.hidden_size, job.hidden_size, d.hidden_size, h.hidden_size,
                            "hidden_size", "hidden_size", hf));
  RETURN_IF_ERROR(TakeShape(o.num_layers, job.num_layers, d.num_layers, h.num_layers, "num_layers",
                            "num_hidden_layers", hf));
  RETURN_IF_ERROR(TakeShape(o.num_heads, job.num_heads, d.num_heads, h.num_heads, "num_heads",
                            "num_attention_heads", hf));
  RETURN_IF_ERROR(TakeShape(o.num_kv_heads, job.num_kv_heads, d.num_kv_heads, h.num_kv_heads,
                            "num_kv_heads", "num_key_value_heads", hf));
  // Compared as widths: head_dim 0 in either means hidden / heads.
  int64_t head_dim = 0;
  RETURN_IF_ERROR(TakeShape(head_dim, job.head_dim == 0 ? int64_t{0} : job.HeadDim(), int64_t{0},
                            h.HeadDim(), "head_dim", "head_dim", hf));
  o.head_dim = h.head_dim;
  RETURN_IF_ERROR(TakeShape(o.intermediate_size, job.intermediate_size, d.intermediate_size,
                            h.intermediate_size, "intermediate_size", "intermediate_size", hf));
  RETURN_IF_ERROR(TakeShape(o.rope_theta, job.rope_theta, d.rope_theta, h.rope_theta, "rope_theta",
                            "rope_theta", hf));
  RETURN_IF_ERROR(TakeShape(o.rms_norm_eps, job.rms_norm_eps, d.rms_norm_eps, h.rms_norm_eps,
                            "rms_norm_eps", "rms_norm_eps", hf));
  RETURN_IF_ERROR(TakeShape(o.tie_embeddings, job.tie_embeddings, d.tie_embeddings,
                            h.tie_embeddings, "tie_embeddings", "tie_word_embeddings", hf));
  RETURN_IF_ERROR(TakeShape(o.attention_bias, job.attention_bias, d.attention_bias,
                            h.attention_bias, "attention_bias", "attention_bias", hf));
  RETURN_IF_ERROR(TakeShape(o.qk_norm, job.qk_norm, d.qk_norm, h.qk_norm, "qk_norm",
                            StrCat("qk_norm (", hf.architecture, ")"), hf));
  const RopeScalingOptions &js = job.rope_scaling, &ds = d.rope_scaling, &hs = h.rope_scaling;
  RopeScalingOptions& os = o.rope_scaling;
  RETURN_IF_ERROR(TakeShape(os.type, js.type, ds.type, hs.type, "rope_scaling.type",
                            "rope_scaling.rope_type", hf));
  RETURN_IF_ERROR(TakeShape(os.factor, js.factor, ds.factor, hs.factor, "rope_scaling.factor",
                            "rope_scaling.factor", hf));
  RETURN_IF_ERROR(TakeShape(os.low_freq_factor, js.low_freq_factor, ds.low_freq_factor,
                            hs.low_freq_factor, "rope_scaling.low_freq_factor",
                            "rope_scaling.low_freq_factor", hf));
  RETURN_IF_ERROR(TakeShape(os.high_freq_factor, js.high_freq_factor, ds.high_freq_factor,
                            hs.high_freq_factor, "rope_scaling.high_freq_factor",
                            "rope_scaling.high_freq_factor", hf));
  RETURN_IF_ERROR(
      TakeShape(os.original_max_position_embeddings, js.original_max_position_embeddings,
                ds.original_max_position_embeddings, hs.original_max_position_embeddings,
                "rope_scaling.original_max_position_embeddings",
                "rope_scaling.original_max_position_embeddings", hf));
  if (o.max_seq_len > hf.max_position_embeddings) {
    return absl::InvalidArgumentError(StrCat(
        "model.max_seq_len = ", o.max_seq_len,
        " is longer than max_position_embeddings = ", hf.max_position_embeddings, " in ", hf.source,
        ": the model was not trained on positions that far; set model.max_seq_len <= ",
        hf.max_position_embeddings));
  }
  if (absl::Status s = o.Validate(); !s.ok()) return Annotate(s, hf.source);
  return o;
}

nlohmann::json HfConfigJsonFor(const ModelOptions& o, std::string_view torch_dtype) {
  const bool qwen3 = o.qk_norm;
  json rope_scaling = nullptr;
  if (o.rope_scaling.enabled()) {
    rope_scaling = {
        {"rope_type", o.rope_scaling.type},
        {"factor", o.rope_scaling.factor},
        {"low_freq_factor", o.rope_scaling.low_freq_factor},
        {"high_freq_factor", o.rope_scaling.high_freq_factor},
        {"original_max_position_embeddings", o.rope_scaling.original_max_position_embeddings}};
  }
  json config = {
      {"architectures", {qwen3 ? "Qwen3ForCausalLM" : "LlamaForCausalLM"}},
      {"model_type", qwen3 ? "qwen3" : "llama"},
      {"vocab_size", o.vocab_size},
      {"hidden_size", o.hidden_size},
      {"intermediate_size", o.intermediate_size},
      {"num_hidden_layers", o.num_layers},
      {"num_attention_heads", o.num_heads},
      {"num_key_value_heads", o.num_kv_heads},
      {"head_dim", o.HeadDim()},
      {"hidden_act", "silu"},
      {"max_position_embeddings", o.max_seq_len},
      {"rms_norm_eps", o.rms_norm_eps},
      {"rope_theta", o.rope_theta},
      {"rope_scaling", rope_scaling},
      {"attention_bias", o.attention_bias},
      {"attention_dropout", 0.0},
      {"tie_word_embeddings", o.tie_embeddings},
      {"torch_dtype", torch_dtype},
      {"use_cache", true},
      {"initializer_range", 0.02},
  };
  if (qwen3) {
    config["use_sliding_window"] = false;
    config["sliding_window"] = nullptr;
  } else {
    config["mlp_bias"] = false;
  }
  return config;
}

}  // namespace flywheel
