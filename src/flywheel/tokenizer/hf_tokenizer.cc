#include "flywheel/tokenizer/hf_tokenizer.h"

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "flywheel/core/status_macros.h"
#include "flywheel/core/strings.h"
#include "flywheel/tokenizer/byte_level.h"
#include "flywheel/tokenizer/json_fields.h"
#include "flywheel/tokenizer/post_processor.h"
#include "flywheel/tokenizer/utf8.h"

namespace flywheel {
namespace {

namespace tj = tokenizer_json;

absl::StatusOr<std::string> ReadText(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(StrCat("cannot open ", path));
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

absl::StatusOr<nlohmann::json> ParseJson(std::string_view text, std::string_view source) {
  // Every json::exception, not only parse_error: a number beyond a double's range (1e999) is
  // out_of_range, and escaping here it ended the process with std::terminate.
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    return absl::InvalidArgumentError(StrCat(source, ": not valid JSON: ", e.what()));
  }
}

absl::StatusOr<nlohmann::json> ReadJson(const std::string& path) {
  ASSIGN_OR_RETURN(const std::string text, ReadText(path));
  return ParseJson(text, path);
}

// added_tokens, with the ids HF's AddedVocabulary assigns: a token already in the model
// vocabulary keeps its id there, the others are numbered from the model's size on in file order.
// HF only warns when the file says otherwise; a differing id is refused here.
absl::StatusOr<std::vector<AddedToken>> AddedTokensFromJson(const nlohmann::json& json,
                                                            const BpeModel& model) {
  std::vector<AddedToken> tokens;
  if (json.is_null()) return tokens;
  if (!json.is_array()) {
    return absl::InvalidArgumentError(
        StrCat("added_tokens = ", tj::Brief(json), ": an array is required"));
  }
  int64_t next_id = model.size();
  absl::flat_hash_map<std::string, int64_t> assigned;
  for (size_t i = 0; i < json.size(); ++i) {
    const nlohmann::json& item = json[i];
    const std::string path = tj::Index("added_tokens", i);
    RETURN_IF_ERROR(tj::CheckKeys(
        item, path, {"id", "content", "single_word", "lstrip", "rstrip", "normalized", "special"}));
    AddedToken token;
    ASSIGN_OR_RETURN(token.content, tj::RequiredString(item, path, "content"));
    ASSIGN_OR_RETURN(token.special, tj::OptionalBool(item, path, "special", false));
    ASSIGN_OR_RETURN(token.single_word, tj::OptionalBool(item, path, "single_word", false));
    ASSIGN_OR_RETURN(token.lstrip, tj::OptionalBool(item, path, "lstrip", false));
    ASSIGN_OR_RETURN(token.rstrip, tj::OptionalBool(item, path, "rstrip", false));
    // HF's default: special tokens are matched in the raw text, the others after normalization.
    ASSIGN_OR_RETURN(token.normalized, tj::OptionalBool(item, path, "normalized", !token.special));
    if (auto it = assigned.find(token.content); it != assigned.end()) {
      token.id = it->second;
    } else if (std::optional<int64_t> id = model.TokenId(token.content)) {
      token.id = *id;
    } else {
      token.id = next_id++;
    }
    assigned.emplace(token.content, token.id);
    if (item.contains("id") &&
        !(item["id"].is_number_integer() && item["id"].get<int64_t>() == token.id)) {
      return absl::InvalidArgumentError(
          StrCat(path, ".id = ", tj::Brief(item["id"]), ": Hugging Face tokenizers gives \"",
                 token.content, "\" the id ", token.id,
                 " (a token of model.vocab keeps its id; the others follow the model's ",
                 model.size(), " entries in file order)"));
    }
    tokens.push_back(std::move(token));
  }
  return tokens;
}

absl::Status CheckDecoder(const nlohmann::json& json) {
  if (tj::StringOr(json, "type") == "ByteLevel") {
    // The three flags shape offsets and encoding only; ByteLevel decoding has no options.
    return tj::CheckKeys(json, "decoder",
                         {"type", "add_prefix_space", "trim_offsets", "use_regex"});
  }
  return tj::Unsupported(json.is_object() && json.contains("type") ? "decoder.type" : "decoder",
                         json.is_object() && json.contains("type") ? json["type"] : json,
                         "a byte-level BPE decodes with the ByteLevel decoder only");
}

// bos_token / eos_token of tokenizer_config.json: a string, {"content": …}, or null.
absl::StatusOr<int64_t> ConfigToken(const nlohmann::json& config, const std::string& path,
                                    const std::string& key, const HfTokenizer& tokenizer) {
  if (!config.contains(key) || config[key].is_null()) return -1;
  const nlohmann::json& value = config[key];
  std::string content;
  if (value.is_string()) {
    content = value.get<std::string>();
  } else if (value.is_object() && value.contains("content") && value["content"].is_string()) {
    content = value["content"].get<std::string>();
  } else {
    return absl::InvalidArgumentError(
        StrCat(path, ": ", key, " = ", tj::Brief(value), ": a string, {\"content\": …} or null"));
  }
  std::optional<int64_t> id = tokenizer.TokenId(content);
  if (!id) {
    return absl::InvalidArgumentError(
        StrCat(path, ": ", key, " \"", content, "\" is not a token of the tokenizer.json"));
  }
  return *id;
}

}  // namespace

absl::StatusOr<std::unique_ptr<HfTokenizer>> LoadHfTokenizer(const std::string& tokenizer_json,
                                                             const HfTokenizerOptions& options) {
  ASSIGN_OR_RETURN(const std::string text, ReadText(tokenizer_json));
  return ParseHfTokenizer(text, tokenizer_json, options);
}

absl::StatusOr<std::unique_ptr<HfTokenizer>> ParseHfTokenizer(std::string_view json_text,
                                                              const std::string& source,
                                                              const HfTokenizerOptions& options) {
  ASSIGN_OR_RETURN(const nlohmann::json json, ParseJson(json_text, source));
  auto in_file = [&](const absl::Status& status) { return Annotate(status, source); };
  absl::Status keys =
      tj::CheckKeys(json, "",
                    {"version", "truncation", "padding", "added_tokens", "normalizer",
                     "pre_tokenizer", "post_processor", "decoder", "model"});
  if (!keys.ok()) return in_file(keys);
  if (json.contains("version") && json["version"] != "1.0") {
    return in_file(tj::Unsupported("version", json["version"], "only \"1.0\" is known"));
  }
  for (const char* key : {"truncation", "padding"}) {
    if (json.contains(key) && !json[key].is_null()) {
      return in_file(tj::Unsupported(key, json[key],
                                     "Encode returns every id; truncate or pad the ids instead"));
    }
  }
  if (!json.contains("model")) return in_file(absl::InvalidArgumentError("model: missing"));

  std::unique_ptr<HfTokenizer> tok(new HfTokenizer());
  tok->path_ = source;
  tok->options_ = options;
  auto model = BpeModel::FromJson(json["model"]);
  if (!model.ok()) return in_file(model.status());
  tok->model_ = *std::move(model);
  auto normalizer =
      Normalizer::FromJson(tj::FieldOrNull(json, "normalizer"));
  if (!normalizer.ok()) return in_file(normalizer.status());
  tok->normalizer_ = *normalizer;
  auto pre = PreTokenizer::FromJson(tj::FieldOrNull(json, "pre_tokenizer"));
  if (!pre.ok()) return in_file(pre.status());
  tok->pre_tokenizer_ = *std::move(pre);
  absl::Status decoder =
      CheckDecoder(tj::FieldOrNull(json, "decoder"));
  if (!decoder.ok()) return in_file(decoder);
  auto added_tokens = AddedTokensFromJson(
      tj::FieldOrNull(json, "added_tokens"), tok->model_);
  if (!added_tokens.ok()) return in_file(added_tokens.status());
  auto added = AddedVocabulary::Create(*std::move(added_tokens), tok->normalizer_);
  if (!added.ok()) return in_file(added.status());
  tok->added_ = *std::move(added);

  tok->vocab_size_ = tok->model_.id_bound();
  for (size_t i = 0; i < tok->added_.tokens().size(); ++i) {
    const AddedToken& t = tok->added_.tokens()[i];
    tok->added_by_id_[t.id] = static_cast<int32_t>(i);
    tok->vocab_size_ = std::max(tok->vocab_size_, t.id + 1);
  }
  RETURN_IF_ERROR(tok->BuildDecodeTable());

  auto post = PostProcessorFromJson(tj::FieldOrNull(json, "post_processor"));
  if (!post.ok()) return in_file(post.status());
  for (const std::vector<int64_t>* side : {&post->prefix, &post->suffix}) {
    for (int64_t id : *side) {
      if (!tok->HasToken(id)) {
        return in_file(absl::InvalidArgumentError(
            StrCat("post_processor: the template's id ", id, " is not in the vocabulary")));
      }
    }
  }
  tok->template_prefix_ = post->prefix;
  tok->template_suffix_ = post->suffix;
  tok->post_processor_ = post->description;

  if (!options.tokenizer_config.empty()) {
    ASSIGN_OR_RETURN(const nlohmann::json config, ReadJson(options.tokenizer_config));
    SpecialTokens special;
    ASSIGN_OR_RETURN(special.bos, ConfigToken(config, options.tokenizer_config, "bos_token", *tok));
    ASSIGN_OR_RETURN(special.eos, ConfigToken(config, options.tokenizer_config, "eos_token", *tok));
    tok->special_ = special;
  }
  tok->cache_ = std::make_unique<WordCache>(options.cache_capacity);
  return tok;
}

absl::Status HfTokenizer::BuildDecodeTable() {
  decode_offset_.assign(vocab_size_ + 1, 0);
  has_token_.assign(vocab_size_, false);
  for (int64_t id = 0; id < vocab_size_; ++id) {
    decode_offset_[id] = static_cast<uint32_t>(decode_bytes_.size());
    // HF's decode looks up added tokens first, then the model vocabulary.
    if (const AddedToken* added = FindAddedToken(id)) {
      decode_bytes_ += ByteLevelTokenBytes(added->content);
      has_token_[id] = true;
    } else if (std::optional<std::string_view> text = model_.TokenText(id)) {
      decode_bytes_ += ByteLevelTokenBytes(*text);
      has_token_[id] = true;
    }
  }
  decode_offset_[vocab_size_] = static_cast<uint32_t>(decode_bytes_.size());
  if (decode_bytes_.size() > UINT32_MAX) {
    return absl::InvalidArgumentError(StrCat(path_, ": the tokens' text exceeds 4 GiB"));
  }
  return absl::OkStatus();
}

const AddedToken* HfTokenizer::FindAddedToken(int64_t id) const {
  auto it = added_by_id_.find(id);
  return it == added_by_id_.end() ? nullptr : &added_.tokens()[it->second];
}

std::optional<int64_t> HfTokenizer::TokenId(std::string_view token) const {
  if (const AddedToken* added = added_.FindByContent(token)) return added->id;
  return model_.TokenId(token);
}

std::optional<std::string_view> HfTokenizer::TokenText(int64_t id) const {
  if (const AddedToken* added = FindAddedToken(id)) return std::string_view(added->content);
  return model_.TokenText(id);
}

std::string_view HfTokenizer::TokenBytes(int64_t id) const {
  if (id < 0 || id >= vocab_size_) return {};
  return std::string_view(decode_bytes_)
      .substr(decode_offset_[id], decode_offset_[id + 1] - decode_offset_[id]);
}

absl::Status HfTokenizer::SetSpecialTokens(const SpecialTokens& special) {
  for (const auto& [name, id] : {std::pair{"bos", special.bos}, std::pair{"eos", special.eos},
                                 std::pair{"end_of_turn", special.end_of_turn}}) {
    if (id != -1 && !HasToken(id)) {
      return absl::InvalidArgumentError(
          StrCat("special token ", name, " = ", id, " is not in the vocabulary of ", path_));
    }
  }
  special_ = special;
  return absl::OkStatus();
}

absl::StatusOr<std::vector<int64_t>> HfTokenizer::Encode(std::string_view text) const {
  std::vector<int64_t> ids;
  ids.reserve(text.size() / 3 + 4);
  RETURN_IF_ERROR(EncodeInto(text, &ids));
  return ids;
}

absl::Status HfTokenizer::EncodeInto(std::string_view text, std::vector<int64_t>* ids) const {
  std::string repaired;
  if (!IsAscii(text)) {
    if (std::optional<size_t> bad = FirstInvalidUtf8(text)) {
      if (options_.invalid_utf8 == HfTokenizerOptions::InvalidUtf8::kError) {
        return absl::InvalidArgumentError(StrCat(
            "Encode: the text is not valid UTF-8 at byte offset ", *bad, " (byte 0x",
            fmt::format("{:02X}", static_cast<unsigned char>(text[*bad])), ") of ", text.size(),
            "; HfTokenizerOptions::invalid_utf8 = kReplace encodes U+FFFD instead"));
      }
      repaired = Utf8Lossy(text);
      text = repaired;
    }
  }
  if (options_.add_special_tokens) {
    ids->insert(ids->end(), template_prefix_.begin(), template_prefix_.end());
  }
  EncodeRaw(text, ids);
  if (options_.add_special_tokens) {
    ids->insert(ids->end(), template_suffix_.begin(), template_suffix_.end());
  }
  return absl::OkStatus();
}

// Added tokens matched in the raw text come out whole; the text between them is normalized.
void HfTokenizer::EncodeRaw(std::string_view text, std::vector<int64_t>* ids) const {
  if (!added_.HasTokens(/*normalized_set=*/false)) {
    EncodeNormalized(text, ids);
    return;
  }
  std::vector<AddedVocabulary::Split> splits;
  added_.FindMatches(text, /*normalized_set=*/false, &splits);
  for (const AddedVocabulary::Split& split : splits) {
    if (split.id >= 0) {
      ids->push_back(split.id);
    } else {
      EncodeNormalized(text.substr(split.begin, split.end - split.begin), ids);
    }
  }
}

void HfTokenizer::EncodeNormalized(std::string_view text, std::vector<int64_t>* ids) const {
  std::string scratch;
  const std::string_view normalized = normalizer_.Normalize(text, &scratch);
  auto encode_pieces = [&](std::string_view part) {
    pre_tokenizer_.Split(part, [&](std::string_view piece) { EncodePiece(piece, ids); });
  };
  if (!added_.HasTokens(/*normalized_set=*/true)) {
    encode_pieces(normalized);
    return;
  }
  std::vector<AddedVocabulary::Split> splits;
  added_.FindMatches(normalized, /*normalized_set=*/true, &splits);
  for (const AddedVocabulary::Split& split : splits) {
    if (split.id >= 0) {
      ids->push_back(split.id);
    } else {
      encode_pieces(normalized.substr(split.begin, split.end - split.begin));
    }
  }
}

void HfTokenizer::EncodePiece(std::string_view piece, std::vector<int64_t>* ids) const {
  // HF's order: a piece that needs no merging, then the cache, then the merge loop.
  if (model_.TokenizeWhole(piece, ids)) return;
  if (cache_->Lookup(piece, ids)) return;
  const size_t before = ids->size();
  model_.Merge(piece, BpeModel::Strategy::kAuto, ids);
  cache_->Insert(piece, std::span<const int64_t>(ids->data() + before, ids->size() - before));
}

absl::StatusOr<std::string> HfTokenizer::Decode(const std::vector<int64_t>& ids) const {
  std::string bytes;
  for (size_t i = 0; i < ids.size(); ++i) {
    if (!HasToken(ids[i])) {
      return absl::InvalidArgumentError(StrCat("Decode: id ", ids[i], " at position ", i,
                                               " is not in the vocabulary (", vocab_size_,
                                               " ids) of ", path_));
    }
    bytes += TokenBytes(ids[i]);
  }
  if (!IsAscii(bytes) && FirstInvalidUtf8(bytes)) return Utf8Lossy(bytes);
  return bytes;
}

std::string HfTokenizer::DebugString() const {
  return StrCat("HfTokenizer(", path_, ": BPE ", model_.size(), " tokens, ", model_.num_merges(),
                " merges", model_.ignore_merges() ? ", ignore_merges" : "", "; ",
                added_.tokens().size(), " added tokens; normalizer ", normalizer_.DebugString(),
                "; pre-tokenizer ", pre_tokenizer_.DebugString(), "; post-processor ",
                post_processor_,
                options_.add_special_tokens ? " (added by Encode)" : " (not added by Encode)",
                "; vocab_size ", vocab_size_, ")");
}

}  // namespace flywheel
