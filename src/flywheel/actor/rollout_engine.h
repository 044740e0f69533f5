// The rollout engine: token generation for many concurrent agent episodes of one actor, with a
// KV cache per sequence, continuous batching and weight swaps between decode steps.
//
//   actor thread                         RolloutEngine
//   ────────────                         ─────────────
//   AddSequence(prompt, seed) ─────────▶ sequence: tokens [cached | pending], KV slot
//   StartTurn(id, max_new, stop) ──────▶ marks it generating
//   loop: Step() ──────────────────────▶ 1. swap to the newest published snapshot (if any)
//          ◀── GeneratedToken{id, token,  2. ONE forward over every pending token of every
//               logprob, version, end}       generating sequence: one row per token, each at its
//                                           own position, attending to its own slot only (a
//                                           decode is 1 row, a new observation or a recompute
//                                           after a swap is a prefill of several rows)
//                                        3. sample every sequence from its last row's logits in
//                                           one pass over a float buffer, each with its own
//                                           seeded generator
//   AppendTokens(id, observation) ─────▶ pending; prefilled by the next Step that needs it
//   RemoveSequence(id) ────────────────▶ frees the slot (the last slot moves into the hole)
//
//   learner ── PublishSnapshot(shared_ptr<const WeightSnapshot>) ──▶ taken at the next Step
//
// Sequences join and leave between any two steps; a sequence whose turn ended (stop token,
// max_new_tokens, max length) keeps its cache and waits for AppendTokens + StartTurn. Every
// generated token carries the log-prob of the distribution it was drawn from (SamplingLogProbs,
// docs/sampling.md) and the version of the weights that produced it.
//
// At a swap the cached keys/values of in-flight sequences are either kept (cheap; tokens after
// the swap attend to keys computed with the old weights) or recomputed with the new weights
// (`kv_on_swap = "recompute"`: each sequence re-prefills its whole history at its next step, so
// every token is exactly what the new weights would produce from scratch).
//
// Backends (`backend` option): the CPU decoder (model/cpu_decoder.h: hand-written float32
// forward over its own cache, no LibTorch ops per step; float32 CPU weights only), or LibTorch
// ops over a KvCache (one batched forward per group of rows with as many pending tokens; on a
// GPU a decode step is replayed as a CUDA graph, actor/decode_graphs.h). Both compute the same
// function; the tests run both. `auto` decides at the first Step by timing a few decode steps of
// each on this model and batch (actor/backend_choice.h), logs both figures and keeps the faster;
// until then no cache exists.
//
// Threading: one engine per actor, used by one thread (all methods except PublishSnapshot are
// called from the owner thread). PublishSnapshot may be called from any thread. Inference runs
// under c10::InferenceMode; `intra_op_threads` sets the owner thread's LibTorch thread count
// (with the OpenMP backend this is per calling thread). Engines share nothing but snapshots.
#ifndef FLYWHEEL_ACTOR_ROLLOUT_ENGINE_H_
#define FLYWHEEL_ACTOR_ROLLOUT_ENGINE_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "flywheel/actor/backend_choice.h"
#include "flywheel/actor/decode_graphs.h"
#include "flywheel/actor/rollout_options.h"
#include "flywheel/model/cpu_decoder.h"
#include "flywheel/model/kv_cache.h"
#include "flywheel/model/sampling.h"
#include "flywheel/model/weight_snapshot.h"

namespace flywheel {

using SequenceId = int64_t;

struct SequenceOptions {
  SamplingParams sampling;
  uint64_t seed = 0;  // the sequence's own generator: same seed and weights → same tokens
};

struct TurnOptions {
  int64_t max_new_tokens = 256;
  std::vector<int64_t> stop_tokens;  // e.g. end-of-turn, EOS; the stop token is generated
};

enum class TurnEnd { kNone, kStopToken, kMaxNewTokens, kMaxLength };
const char* TurnEndName(TurnEnd end);

struct GeneratedToken {
  SequenceId sequence = 0;
  int64_t token = 0;
  int64_t position = 0;          // index of the token in its sequence
  float logprob = 0;             // log μ(token): the distribution it was drawn from
  int64_t version = 0;           // weights that produced it
  TurnEnd end = TurnEnd::kNone;  // != kNone: this token ends the turn
};

class RolloutEngine {
 public:
  static absl::StatusOr<std::unique_ptr<RolloutEngine>> Create(
      const RolloutEngineOptions& options, std::shared_ptr<const WeightSnapshot> snapshot);

  // A new sequence starting with `prompt` (at least one token, e.g. BOS). Not generating yet.
  absl::StatusOr<SequenceId> AddSequence(const std::vector<int64_t>& prompt,
                                         const SequenceOptions& options);
  // Appends tokens (an observation) to a sequence that is not generating.
  absl::Status AppendTokens(SequenceId id, const std::vector<int64_t>& tokens);
  // Starts generating for `id` from the next Step.
  absl::Status StartTurn(SequenceId id, const TurnOptions& turn);
  // One decode step over every generating sequence; one token per generating sequence.
  absl::StatusOr<std::vector<GeneratedToken>> Step();
  absl::Status RemoveSequence(SequenceId id);

  // Thread-safe. The engine moves to `snapshot` at its next Step if it is newer than the
  // weights in use.
  void PublishSnapshot(std::shared_ptr<const WeightSnapshot> snapshot) ABSL_LOCKS_EXCLUDED(mu_);

  int64_t version() const { return snapshot_->version; }
  // Tokens a sequence may hold, prompt and generation together (fixed, like vocab_size).
  int64_t max_seq_len() const { return snapshot_->model->options().max_seq_len; }
  // Rows of the model's embedding table: the ids it can take and sample (any thread; fixed, as
  // every snapshot it swaps to has the model's shape). May exceed the tokenizer's vocabulary
  // (Qwen3's table has 151,936 rows for 151,669 tokens).
  int64_t vocab_size() const { return vocab_size_; }
  // kCpu or kTorch once decided; kAuto while an auto engine has not stepped yet.
  DecodeBackend backend() const;
  // The measurement behind an auto engine's choice; null unless one was made.
  const BackendChoice* backend_choice() const { return choice_ ? &*choice_ : nullptr; }
  int64_t num_sequences() const { return static_cast<int64_t>(slot_owner_.size()); }
  int64_t num_generating() const;
  absl::StatusOr<std::vector<int64_t>> Tokens(SequenceId id) const;
  std::string DebugString() const;

 private:
  struct Sequence {
    int64_t slot = 0;
    std::vector<int64_t> tokens;  // [0, cached) are in the KV cache, the rest pending
    int64_t cached = 0;
    SamplingParams sampling;
    std::mt19937_64 rng;
    bool generating = false;
    TurnOptions turn;
    int64_t generated_in_turn = 0;
  };

  RolloutEngine(const RolloutEngineOptions& options,
                std::shared_ptr<const WeightSnapshot> snapshot);
  absl::StatusOr<Sequence*> Find(SequenceId id, std::string_view action);
  const Sequence* FindConst(SequenceId id) const;
  void MaybeSwap() ABSL_LOCKS_EXCLUDED(mu_);
  // actor.backend = "auto": times both backends on the prompts of `batch` and builds the faster.
  absl::Status ChooseBackend(const std::vector<Sequence*>& batch);
  void BuildBackend(DecodeBackend backend);
  absl::Status ReserveSlot(int64_t slot);
  void MoveSlot(int64_t from, int64_t to, int64_t length);
  // Logits of the last pending token of each of `batch` into logits_ [batch, V] (on a GPU into
  // device_logits_); moves every pending token to cached.
  void ForwardCpu(const std::vector<Sequence*>& batch);
  void ForwardTorch(const std::vector<Sequence*>& batch);
  // LibTorch backend: logits [rows, V] of the last pending token of each of `rows`, which all
  // have the same number of pending tokens, in one forward; moves them to cached. A decode
  // (one pending token each) goes through decode_graphs_ when it is set.
  torch::Tensor ForwardPending(const std::vector<Sequence*>& rows);
  // The indices of `batch` grouped for ForwardPending, each group within a memory bound.
  static std::vector<std::vector<int64_t>> PendingGroups(const std::vector<Sequence*>& batch);
  // Samples one token per sequence of `batch` from logits_ (from device_logits_ on the device,
  // SampleRows, when it is set).
  void Sample(const std::vector<Sequence*>& batch, const std::vector<SequenceId>& ids,
              std::vector<GeneratedToken>& out);

  const RolloutEngineOptions options_;
  const int64_t vocab_size_;
  std::shared_ptr<const WeightSnapshot> snapshot_;  // weights in use (owner thread only)
  // At most one backend is set (none only before an auto engine's first Step): the CPU decoder
  // with the snapshot's weights in its layout, or the LibTorch KV cache.
  std::unique_ptr<CpuDecoder> cpu_;
  std::shared_ptr<const CpuDecoderWeights> cpu_weights_;
  std::unique_ptr<KvCache> cache_;
  std::unique_ptr<DecodeGraphs> decode_graphs_;  // with cache_, when actor.decode_graphs is on
  std::optional<BackendChoice> choice_;          // set by ChooseBackend
  // Per-step buffers, reused (no allocation per step once grown).
  std::vector<DecodeRow> rows_;
  std::vector<int64_t> logit_rows_;
  std::vector<float> logits_, logprobs_, probs_;
  torch::Tensor device_logits_;  // [batch, V] instead of logits_ when the model is on a GPU
  std::unordered_map<SequenceId, Sequence> sequences_;
  std::vector<SequenceId> slot_owner_;  // slot -> sequence; slots are dense 0..n-1
  SequenceId next_id_ = 1;

  mutable absl::Mutex mu_;
  std::shared_ptr<const WeightSnapshot> published_ ABSL_GUARDED_BY(mu_);
};

}  // namespace flywheel

#endif  // FLYWHEEL_ACTOR_ROLLOUT_ENGINE_H_
