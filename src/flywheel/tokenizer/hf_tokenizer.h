// A Hugging Face tokenizer.json with a byte-level BPE model (Qwen2/3, Llama-3, GPT-2 style) as
// a flywheel Tokenizer: the same ids as Hugging Face's `tokenizers` library, which the tests
// check on a corpus of 10,000+ strings against the library itself.
//
//   text ─▶ added tokens (raw) ─▶ normalizer ─▶ added tokens (normalized) ─▶ pre-tokenizer ─▶ BPE
//           <|im_start|> etc.     NFC or none    normalized = true ones       RE2 regex merges,
//           never split                                                       + ByteLevel   word
//           cache
//
// Encode adds no special tokens (flywheel's TurnTemplate places them); with
// HfTokenizerOptions::add_special_tokens it adds those of the post_processor's
// TemplateProcessing (Llama-3's <|begin_of_text|>), as HF's encode(add_special_tokens=True).
// Decode renders every id, special or not, as its text, as HF's decode(skip_special_tokens=
// False): token bytes are joined and invalid UTF-8 becomes U+FFFD (StreamingDecoder gives the
// same text id by id).
//
// Thread safety: const methods may be called from any number of threads; the word cache inside
// locks its shards (word_cache.h). SetSpecialTokens is for set-up, before sharing.
#ifndef FLYWHEEL_TOKENIZER_HF_TOKENIZER_H_
#define FLYWHEEL_TOKENIZER_HF_TOKENIZER_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "flywheel/model/tokenizer.h"
#include "flywheel/tokenizer/added_vocabulary.h"
#include "flywheel/tokenizer/bpe_model.h"
#include "flywheel/tokenizer/normalizer.h"
#include "flywheel/tokenizer/pre_tokenizer.h"
#include "flywheel/tokenizer/word_cache.h"

namespace flywheel {

struct HfTokenizerOptions {
  // What Encode does with bytes that are not valid UTF-8 (HF's own API takes only valid text).
  enum class InvalidUtf8 {
    kError,    // InvalidArgument naming the byte offset of the first bad byte
    kReplace,  // each maximal invalid subpart becomes U+FFFD first (as a JavaScript string
               // or Python's errors="replace" would give it to HF)
  };
  InvalidUtf8 invalid_utf8 = InvalidUtf8::kError;

  // Encode adds the post_processor template's special tokens (HF's add_special_tokens=True).
  bool add_special_tokens = false;

  // Pieces remembered by the word cache (0: none). HF's BPE keeps 10,000.
  size_t cache_capacity = 10000;

  // Optional tokenizer_config.json (transformers' file beside tokenizer.json): its bos_token and
  // eos_token become special().bos / .eos. Without it both stay -1.
  std::string tokenizer_config;
};

class HfTokenizer : public Tokenizer {
 public:
  // Max id + 1 over the model vocabulary and the added tokens (Qwen3: 151,669; Llama-3:
  // 128,256). The model's embedding table may be larger (padded); it must not be smaller.
  int64_t vocab_size() const override { return vocab_size_; }
  // bos and eos from tokenizer_config.json when given; end_of_turn is -1 until the integration
  // sets it (<|im_end|> for Qwen chat, <|eot_id|> for Llama-3 chat) with SetSpecialTokens.
  const SpecialTokens& special() const override { return special_; }
  absl::StatusOr<std::vector<int64_t>> Encode(std::string_view text) const override;
  absl::StatusOr<std::string> Decode(const std::vector<int64_t>& ids) const override;
  std::string DebugString() const override;

  // Appends the ids of `text` to `ids` (Encode without the vector's allocation).
  absl::Status EncodeInto(std::string_view text, std::vector<int64_t>* ids) const;

  // The id of an added token by its content ("<|im_end|>"), or else of a vocabulary entry in the
  // byte-level alphabet ("Ġworld"); HF's token_to_id.
  std::optional<int64_t> TokenId(std::string_view token) const;
  // The added token's content or the vocabulary entry of `id` (HF's id_to_token).
  std::optional<std::string_view> TokenText(int64_t id) const;
  // The bytes `id` decodes to (possibly part of a UTF-8 character); empty when `id` has no token.
  std::string_view TokenBytes(int64_t id) const;
  bool HasToken(int64_t id) const { return id >= 0 && id < vocab_size_ && has_token_[id]; }
  // The added token with `id`, or nullptr.
  const AddedToken* FindAddedToken(int64_t id) const;

  // Checks every id against the vocabulary; for set-up, before the tokenizer is shared.
  absl::Status SetSpecialTokens(const SpecialTokens& special);

  // The post_processor's special tokens around a single sequence (empty without a
  // TemplateProcessing).
  const std::vector<int64_t>& template_prefix() const { return template_prefix_; }
  const std::vector<int64_t>& template_suffix() const { return template_suffix_; }

  const HfTokenizerOptions& options() const { return options_; }
  const WordCache& cache() const { return *cache_; }
  WordCache& mutable_cache() { return *cache_; }

 private:
  friend absl::StatusOr<std::unique_ptr<HfTokenizer>> ParseHfTokenizer(
      std::string_view json_text, const std::string& source, const HfTokenizerOptions& options);
  HfTokenizer() = default;

  void EncodeRaw(std::string_view text, std::vector<int64_t>* ids) const;
  void EncodeNormalized(std::string_view text, std::vector<int64_t>* ids) const;
  void EncodePiece(std::string_view piece, std::vector<int64_t>* ids) const;
  absl::Status BuildDecodeTable();

  std::string path_;  // of tokenizer.json, for messages
  HfTokenizerOptions options_;
  BpeModel model_;
  Normalizer normalizer_;
  PreTokenizer pre_tokenizer_;
  AddedVocabulary added_;
  absl::flat_hash_map<int64_t, int32_t> added_by_id_;  // into added_.tokens()
  std::vector<int64_t> template_prefix_;
  std::vector<int64_t> template_suffix_;
  std::string post_processor_;  // for DebugString
  int64_t vocab_size_ = 0;
  std::string decode_bytes_;             // every id's bytes, back to back
  std::vector<uint32_t> decode_offset_;  // id -> start in decode_bytes_ (vocab_size_ + 1)
  std::vector<bool> has_token_;          // id -> an added token or a vocabulary entry
  SpecialTokens special_;
  std::unique_ptr<WordCache> cache_;
};

// Loads a tokenizer.json. Everything in the file is either implemented or refused with an error
// naming its JSON path (model.type = "Unigram", normalizer = {"type": "NFKC"}, …); nothing is
// ignored.
absl::StatusOr<std::unique_ptr<HfTokenizer>> LoadHfTokenizer(
    const std::string& tokenizer_json, const HfTokenizerOptions& options = {});
// The same from the file's text; `source` names it in errors (the fuzz target's entry).
absl::StatusOr<std::unique_ptr<HfTokenizer>> ParseHfTokenizer(
    std::string_view json_text, const std::string& source, const HfTokenizerOptions& options = {});

}  // namespace flywheel

#endif  // FLYWHEEL_TOKENIZER_HF_TOKENIZER_H_
