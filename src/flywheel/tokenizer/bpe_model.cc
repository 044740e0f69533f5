#include "flywheel/tokenizer/bpe_model.h"

#include <algorithm>
#include <limits>

#include "absl/container/inlined_vector.h"
#include "flywheel/core/status_macros.h"
#include "flywheel/core/strings.h"
#include "flywheel/tokenizer/byte_level.h"
#include "flywheel/tokenizer/json_fields.h"

namespace flywheel {
namespace {

// Gaps a vocabulary's ids may leave beyond twice its size (see FromJson).
constexpr int64_t kVocabIdSlack = 65536;

namespace tj = tokenizer_json;

constexpr int32_t kNoMerge = std::numeric_limits<int32_t>::max();

// Pieces up to this many bytes scan for the best pair; longer ones use the priority queue. Both
// give the same merges; the scan is faster while a piece fits in a few cache lines.
constexpr size_t kScanMaxBytes = 48;

// "a b" (the legacy merges.txt line) or ["a", "b"].
absl::StatusOr<std::pair<std::string, std::string>> ParseMerge(const nlohmann::json& merge,
                                                               const std::string& path) {
  if (merge.is_string()) {
    const std::string line = merge.get<std::string>();
    const size_t space = line.find(' ');
    if (space == std::string::npos || line.find(' ', space + 1) != std::string::npos) {
      return absl::InvalidArgumentError(
          StrCat(path, " = ", tj::Brief(merge), ": a merge is \"left right\" with one space"));
    }
    return std::make_pair(line.substr(0, space), line.substr(space + 1));
  }
  if (merge.is_array() && merge.size() == 2 && merge[0].is_string() && merge[1].is_string()) {
    return std::make_pair(merge[0].get<std::string>(), merge[1].get<std::string>());
  }
  return absl::InvalidArgumentError(StrCat(path, " = ", tj::Brief(merge),
                                           ": a merge is \"left right\" or [\"left\", \"right\"]"));
}

}  // namespace

absl::StatusOr<BpeModel> BpeModel::FromJson(const nlohmann::json& model) {
  const std::string path = "model";
  RETURN_IF_ERROR(tj::CheckKeys(
      model, path,
      {"type", "dropout", "unk_token", "continuing_subword_prefix", "end_of_word_suffix",
       "fuse_unk", "byte_fallback", "ignore_merges", "vocab", "merges"}));
  // HF infers BPE from the presence of merges when "type" is missing.
  if (model.contains("type") && model["type"] != "BPE") {
    return tj::Unsupported("model.type", model["type"], "only BPE models are supported");
  }
  if (model.contains("dropout") && !model["dropout"].is_null() &&
      !(model["dropout"].is_number() && model["dropout"].get<double>() == 0.0)) {
    return tj::Unsupported("model.dropout", model["dropout"],
                           "BPE dropout (random merges) is not supported; use null");
  }
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    if (model.contains(key) && !model[key].is_null() && model[key] != "") {
      return tj::Unsupported(tj::Join(path, key), model[key],
                             "not supported by byte-level BPE here; use null");
    }
  }
  ASSIGN_OR_RETURN(const bool byte_fallback, tj::OptionalBool(model, path, "byte_fallback", false));
  if (byte_fallback) {
    return tj::Unsupported("model.byte_fallback", true,
                           "byte fallback (<0x..> tokens) is not supported; byte-level BPE "
                           "spells every byte already");
  }
  ASSIGN_OR_RETURN(const bool ignore_merges, tj::OptionalBool(model, path, "ignore_merges", false));
  // fuse_unk only shapes how unknown characters become unk_token; a byte-level vocabulary with
  // every byte (checked in Create) has no unknown characters, so neither key changes any id.
  RETURN_IF_ERROR(tj::OptionalBool(model, path, "fuse_unk", false).status());
  if (model.contains("unk_token") && !model["unk_token"].is_null() &&
      !model["unk_token"].is_string()) {
    return absl::InvalidArgumentError(
        StrCat("model.unk_token = ", tj::Brief(model["unk_token"]), ": a string or null"));
  }

  if (!model.contains("vocab") || !model["vocab"].is_object()) {
    return absl::InvalidArgumentError("model.vocab: an object {token: id} is required");
  }
  std::vector<std::pair<std::string, int64_t>> vocab;
  vocab.reserve(model["vocab"].size());
  for (const auto& [token, id] : model["vocab"].items()) {
    if (!id.is_number_integer() || id.get<int64_t>() < 0 ||
        id.get<int64_t>() >= std::numeric_limits<int32_t>::max()) {
      return absl::InvalidArgumentError(StrCat("model.vocab[", tj::Brief(nlohmann::json(token)),
                                               "] = ", tj::Brief(id),
                                               ": an id is an integer in [0, 2^31 - 1)"));
    }
    vocab.emplace_back(token, id.get<int64_t>());
  }
  // The model keeps a table indexed by id, so the largest id sets its size: one id near 2^31 in
  // a file of 40 tokens made the loader ask for 32 GB (found by fuzz/tokenizer_json_fuzzer.cc).
  // Real vocabularies number their tokens 0..n-1; ids may leave gaps, but not sparser than this.
  const int64_t max_id = 2 * static_cast<int64_t>(vocab.size()) + kVocabIdSlack;
  for (const auto& [token, id] : vocab) {
    if (id >= max_id) {
      return absl::InvalidArgumentError(
          StrCat("model.vocab[", tj::Brief(nlohmann::json(token)), "] = ", id, ": ids of ",
                 vocab.size(), " tokens must be below ", max_id,
                 " (twice the vocabulary's size + ", kVocabIdSlack, ")"));
    }
  }
  if (!model.contains("merges") || !model["merges"].is_array()) {
    return absl::InvalidArgumentError("model.merges: an array of merges is required");
  }
  std::vector<std::pair<std::string, std::string>> merges;
  merges.reserve(model["merges"].size());
  size_t i = 0;
  for (const nlohmann::json& merge : model["merges"]) {
    // merges.txt's header line, which HF skips when it reads legacy merges
    if (merge.is_string() && merge.get<std::string>().starts_with("#version")) {
      ++i;
      continue;
    }
    ASSIGN_OR_RETURN(auto pair, ParseMerge(merge, tj::Index("model.merges", i)));
    merges.push_back(std::move(pair));
    ++i;
  }
  ASSIGN_OR_RETURN(BpeModel bpe, Create(vocab, merges, ignore_merges));
  if (model.contains("unk_token") && model["unk_token"].is_string() &&
      !bpe.TokenId(model["unk_token"].get<std::string>())) {
    return absl::InvalidArgumentError(
        StrCat("model.unk_token = ", tj::Brief(model["unk_token"]), ": not in model.vocab"));
  }
  return bpe;
}

absl::StatusOr<BpeModel> BpeModel::Create(
    const std::vector<std::pair<std::string, int64_t>>& vocab,
    const std::vector<std::pair<std::string, std::string>>& merges, bool ignore_merges) {
  BpeModel bpe;
  bpe.ignore_merges_ = ignore_merges;
  int64_t bound = 0;
  for (const auto& [token, id] : vocab) bound = std::max(bound, id + 1);
  bpe.text_of_id_.resize(bound);
  bpe.has_id_.resize(bound, false);
  bpe.vocab_.reserve(vocab.size());
  for (const auto& [token, id] : vocab) {
    if (bpe.has_id_[id]) {
      return absl::InvalidArgumentError(StrCat("model.vocab: id ", id, " is given to both ",
                                               tj::Brief(bpe.text_of_id_[id]), " and ",
                                               tj::Brief(token)));
    }
    bpe.has_id_[id] = true;
    bpe.text_of_id_[id] = token;
    bpe.vocab_.emplace(token, static_cast<int32_t>(id));
    // Only entries spelt in the byte-level alphabet can be a pre-tokenized piece.
    if (std::optional<std::string> bytes = ByteLevelDecode(token)) {
      bpe.bytes_vocab_.emplace(*std::move(bytes), static_cast<int32_t>(id));
    }
  }
  for (int b = 0; b < 256; ++b) {
    std::string text;
    text.push_back(static_cast<char>(b));
    auto it = bpe.bytes_vocab_.find(text);
    if (it == bpe.bytes_vocab_.end()) {
      return absl::InvalidArgumentError(
          StrCat("model.vocab has no token for byte ", b, " (", ByteLevelEncode(text),
                 " in the byte-level alphabet): not a byte-level BPE vocabulary"));
    }
    bpe.byte_id_[b] = it->second;
  }
  bpe.merges_.reserve(merges.size());
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const auto& [left, right] = merges[rank];
    const std::string path = tj::Index("model.merges", rank);
    auto l = bpe.vocab_.find(left);
    auto r = bpe.vocab_.find(right);
    auto merged = bpe.vocab_.find(left + right);
    for (const auto& [it, token] :
         {std::pair{l, left}, std::pair{r, right}, std::pair{merged, left + right}}) {
      if (it == bpe.vocab_.end()) {
        return absl::InvalidArgumentError(StrCat(path, " = ", tj::Brief(left + " " + right), ": ",
                                                 tj::Brief(token), " is not in model.vocab"));
      }
    }
    // A repeated pair keeps its last rank, as HF's map of merges does.
    bpe.merges_[PairKey(l->second, r->second)] =
        MergeRule{static_cast<int32_t>(rank), merged->second};
  }
  return bpe;
}

std::optional<int64_t> BpeModel::TokenId(std::string_view token) const {
  auto it = vocab_.find(ToAbsl(token));
  if (it == vocab_.end()) return std::nullopt;
  return it->second;
}

std::optional<std::string_view> BpeModel::TokenText(int64_t id) const {
  if (id < 0 || id >= id_bound() || !has_id_[id]) return std::nullopt;
  return text_of_id_[id];
}

bool BpeModel::TokenizeWhole(std::string_view piece, std::vector<int64_t>* ids) const {
  if (piece.size() == 1) {
    ids->push_back(byte_id_[static_cast<unsigned char>(piece[0])]);
    return true;
  }
  if (ignore_merges_) {
    auto it = bytes_vocab_.find(ToAbsl(piece));
    if (it != bytes_vocab_.end()) {
      ids->push_back(it->second);
      return true;
    }
  }
  return false;
}

void BpeModel::Merge(std::string_view piece, Strategy strategy, std::vector<int64_t>* ids) const {
  if (strategy == Strategy::kScan ||
      (strategy == Strategy::kAuto && piece.size() <= kScanMaxBytes)) {
    MergeByScan(piece, ids);
  } else {
    MergeByQueue(piece, ids);
  }
}

// Symbols form a linked list in text order; symbol 0 is always the head, because a merge keeps
// the left symbol. Each symbol caches the merge it would make with its right neighbour.
void BpeModel::MergeByScan(std::string_view piece, std::vector<int64_t>* ids) const {
  struct Symbol {
    int32_t id;
    int32_t prev;
    int32_t next;  // -1 at the end
    int32_t rank;  // of the merge (this, next); kNoMerge when none
    int32_t merged_id;
  };
  const int32_t n = static_cast<int32_t>(piece.size());
  absl::InlinedVector<Symbol, kScanMaxBytes> symbols(n);
  for (int32_t i = 0; i < n; ++i) {
    symbols[i] = {byte_id_[static_cast<unsigned char>(piece[i])], i - 1, i + 1 < n ? i + 1 : -1,
                  kNoMerge, -1};
  }
  auto update = [&](int32_t i) {
    Symbol& s = symbols[i];
    const MergeRule* rule = s.next < 0 ? nullptr : FindMerge(s.id, symbols[s.next].id);
    s.rank = rule ? rule->rank : kNoMerge;
    s.merged_id = rule ? rule->new_id : -1;
  };
  for (int32_t i = 0; i < n; ++i) update(i);
  while (true) {
    int32_t best = -1;
    int32_t best_rank = kNoMerge;
    for (int32_t i = 0; i >= 0; i = symbols[i].next) {
      if (symbols[i].rank < best_rank) {  // strict: the leftmost of equal ranks wins
        best_rank = symbols[i].rank;
        best = i;
      }
    }
    if (best < 0) break;
    Symbol& s = symbols[best];
    const Symbol& right = symbols[s.next];
    s.id = s.merged_id;
    s.next = right.next;
    if (s.next >= 0) symbols[s.next].prev = best;
    update(best);
    if (s.prev >= 0) update(s.prev);
  }
  for (int32_t i = 0; i >= 0; i = symbols[i].next) ids->push_back(symbols[i].id);
}

// Word::merge_all of HF tokenizers: candidates ordered by (rank, position). A candidate whose
// pair changed since it was queued is dropped. HF tests that by looking the current pair up
// again and comparing the token it makes; a pair at a position only ever changes into a longer
// string, which is a different token, so comparing the two ids with those queued is the same
// test without the lookup.
void BpeModel::MergeByQueue(std::string_view piece, std::vector<int64_t>* ids) const {
  struct Symbol {
    int32_t id;
    int32_t prev;
    int32_t next;
    bool alive;
  };
  struct Candidate {
    uint64_t order;  // rank << 32 | pos: the lowest merges first
    int32_t new_id;
    int32_t left;  // the pair's ids when it was queued
    int32_t right;
  };
  // std::push_heap keeps the largest on top: order so that the lowest (rank, pos) is largest.
  auto later = [](const Candidate& a, const Candidate& b) { return a.order > b.order; };
  const int32_t n = static_cast<int32_t>(piece.size());
  std::vector<Symbol> symbols(n);
  std::vector<Candidate> queue;
  queue.reserve(n);
  for (int32_t i = 0; i < n; ++i) {
    symbols[i] = {byte_id_[static_cast<unsigned char>(piece[i])], i - 1, i + 1 < n ? i + 1 : -1,
                  true};
  }
  auto candidate = [&](int32_t pos) {
    const int32_t left = symbols[pos].id;
    const int32_t right = symbols[symbols[pos].next].id;
    if (const MergeRule* rule = FindMerge(left, right)) {
      queue.push_back({static_cast<uint64_t>(rule->rank) << 32 | static_cast<uint32_t>(pos),
                       rule->new_id, left, right});
      return true;
    }
    return false;
  };
  for (int32_t i = 0; i + 1 < n; ++i) candidate(i);
  std::make_heap(queue.begin(), queue.end(), later);
  while (!queue.empty()) {
    std::pop_heap(queue.begin(), queue.end(), later);
    const Candidate top = queue.back();
    queue.pop_back();
    const int32_t pos = static_cast<int32_t>(top.order & 0xFFFFFFFF);
    Symbol& s = symbols[pos];
    if (!s.alive || s.next < 0 || s.id != top.left || symbols[s.next].id != top.right) continue;
    Symbol& right = symbols[s.next];
    s.id = top.new_id;
    right.alive = false;
    s.next = right.next;
    if (s.next >= 0) symbols[s.next].prev = pos;
    if (s.prev >= 0 && candidate(s.prev)) std::push_heap(queue.begin(), queue.end(), later);
    if (s.next >= 0 && candidate(pos)) std::push_heap(queue.begin(), queue.end(), later);
  }
  for (int32_t i = 0; i >= 0; i = symbols[i].next) ids->push_back(symbols[i].id);
}

}  // namespace flywheel
