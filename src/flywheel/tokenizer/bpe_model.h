// The BPE model of a byte-level tokenizer.json ("model": {"type": "BPE", …}): vocabulary,
// ranked merges, and the merge loop that turns one pre-tokenized piece into ids.
//
// A piece is merged as Hugging Face tokenizers' Word::merge_all does: start from one symbol per
// byte, then repeatedly apply the merge of lowest rank among adjacent pairs, the leftmost one
// when a rank occurs twice (Sennrich et al. 2016, "Neural Machine Translation of Rare Words with
// Subword Units"; GPT-2's byte-level variant). Short pieces scan a doubly linked list of symbols
// for the best pair; long ones keep the candidate merges in a priority queue, as HF does, so a
// 10 kB piece costs O(n log n), not O(n²).
//
// The model works on raw bytes: the byte-level alphabet (byte_level.h) only matters for reading
// the vocabulary and for TokenText, so no piece is ever re-encoded into it.
#ifndef FLYWHEEL_TOKENIZER_BPE_MODEL_H_
#define FLYWHEEL_TOKENIZER_BPE_MODEL_H_

#include <array>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace flywheel {

class BpeModel {
 public:
  // `model` is the value of tokenizer.json's "model" key. Refused, with the JSON path: a type
  // other than BPE, dropout, byte_fallback, a continuing_subword_prefix or end_of_word_suffix,
  // unknown keys, a merge naming a token (or a concatenation) that is not in the vocabulary,
  // and a vocabulary without all 256 single-byte tokens.
  static absl::StatusOr<BpeModel> FromJson(const nlohmann::json& model);

  // `vocab` in the byte-level alphabet; `merges` in rank order (left, right), as in the file.
  static absl::StatusOr<BpeModel> Create(
      const std::vector<std::pair<std::string, int64_t>>& vocab,
      const std::vector<std::pair<std::string, std::string>>& merges, bool ignore_merges);

  // Appends the ids of one non-empty piece of raw bytes.
  void Tokenize(std::string_view piece, std::vector<int64_t>* ids) const {
    if (!TokenizeWhole(piece, ids)) Merge(piece, Strategy::kAuto, ids);
  }

  // The pieces that need no merging: a single byte, and with ignore_merges (Llama-3) a piece
  // that is itself a vocabulary entry, whatever the merges would make of it. Appends its id and
  // returns true; false when the piece needs Merge.
  bool TokenizeWhole(std::string_view piece, std::vector<int64_t>* ids) const;

  // The merge loop alone; kScan and kQueue force one of its two strategies (tests compare them).
  enum class Strategy { kAuto, kScan, kQueue };
  void Merge(std::string_view piece, Strategy strategy, std::vector<int64_t>* ids) const;

  // The id of a vocabulary entry written in the byte-level alphabet ("Ġworld").
  std::optional<int64_t> TokenId(std::string_view token) const;
  // The vocabulary entry of `id`, in the byte-level alphabet; nullopt when `id` has none.
  std::optional<std::string_view> TokenText(int64_t id) const;

  // Number of vocabulary entries (HF's get_vocab_size without added tokens).
  int64_t size() const { return static_cast<int64_t>(vocab_.size()); }
  // One more than the largest id.
  int64_t id_bound() const { return static_cast<int64_t>(text_of_id_.size()); }
  bool ignore_merges() const { return ignore_merges_; }
  int64_t num_merges() const { return static_cast<int64_t>(merges_.size()); }

 private:
  struct MergeRule {
    int32_t rank;
    int32_t new_id;
  };
  static uint64_t PairKey(int32_t left, int32_t right) {
    return static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32 | static_cast<uint32_t>(right);
  }
  const MergeRule* FindMerge(int32_t left, int32_t right) const {
    auto it = merges_.find(PairKey(left, right));
    return it == merges_.end() ? nullptr : &it->second;
  }
  void MergeByScan(std::string_view piece, std::vector<int64_t>* ids) const;
  void MergeByQueue(std::string_view piece, std::vector<int64_t>* ids) const;

  absl::flat_hash_map<std::string, int32_t> vocab_;        // byte-level text -> id
  absl::flat_hash_map<std::string, int32_t> bytes_vocab_;  // raw bytes -> id (ignore_merges)
  std::vector<std::string> text_of_id_;                    // id -> byte-level text ("" = none)
  std::vector<bool> has_id_;
  absl::flat_hash_map<uint64_t, MergeRule> merges_;  // (left, right) -> rank and result
  std::array<int32_t, 256> byte_id_{};               // the single-byte tokens
  bool ignore_merges_ = false;
};

}  // namespace flywheel

#endif  // FLYWHEEL_TOKENIZER_BPE_MODEL_H_
