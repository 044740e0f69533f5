#include "flywheel/actor/rollout_engine.h"

#include <algorithm>

#include "flywheel/core/status_macros.h"
#include "flywheel/core/strings.h"
#include "flywheel/model/torch_status.h"

namespace flywheel {

const char* TurnEndName(TurnEnd end) {
  switch (end) {
    case TurnEnd::kNone:
      return "none";
    case TurnEnd::kStopToken:
      return "stop_token";
    case TurnEnd::kMaxNewTokens:
      return "max_new_tokens";
    case TurnEnd::kMaxLength:
      return "max_length";
  }
  return "?";
}

absl::StatusOr<std::unique_ptr<RolloutEngine>> RolloutEngine::Create(
    const RolloutEngineOptions& options, std::shared_ptr<const WeightSnapshot> snapshot) {
  RETURN_IF_ERROR(options.Validate());
  if (snapshot == nullptr || snapshot->model.is_empty()) {
    return absl::InvalidArgumentError("rollout engine: no weight snapshot to start from");
  }
  std::unique_ptr<RolloutEngine> engine;
  RETURN_IF_ERROR(TorchCall("creating the rollout engine", [&] {
    c10::InferenceMode guard;
    engine.reset(new RolloutEngine(options, std::move(snapshot)));
  }));
  return engine;
}

RolloutEngine::RolloutEngine(const RolloutEngineOptions& options,
                             std::shared_ptr<const WeightSnapshot> snapshot)
    : options_(options),
      snapshot_(std::move(snapshot)),
      cache_(snapshot_->model->options(),
             snapshot_->model->parameters().front().options().requires_grad(false),
             options.initial_slots, options.initial_capacity) {}

void RolloutEngine::PublishSnapshot(std::shared_ptr<const WeightSnapshot> snapshot) {
  if (snapshot == nullptr || snapshot->model.is_empty()) return;  // nothing to swap to
  absl::MutexLock lock(&mu_);
  if (published_ == nullptr || snapshot->version > published_->version) {
    published_ = std::move(snapshot);
  }
}

void RolloutEngine::MaybeSwap() {
  std::shared_ptr<const WeightSnapshot> newer;
  {
    absl::MutexLock lock(&mu_);
    if (published_ != nullptr && published_->version > snapshot_->version) newer = published_;
  }
  if (newer == nullptr) return;
  // The old snapshot is released here, outside the lock (it may be the last reference).
  snapshot_ = std::move(newer);
  if (options_.kv_on_swap == KvOnSwap::kRecompute) {
    for (auto& [id, seq] : sequences_) seq.cached = 0;  // re-prefilled lazily, at the next use
  }
}

absl::StatusOr<RolloutEngine::Sequence*> RolloutEngine::Find(SequenceId id,
                                                             std::string_view action) {
  auto it = sequences_.find(id);
  if (it == sequences_.end()) {
    return absl::NotFoundError(StrCat("rollout engine: ", action, ": no sequence ", id));
  }
  return &it->second;
}

const RolloutEngine::Sequence* RolloutEngine::FindConst(SequenceId id) const {
  auto it = sequences_.find(id);
  return it == sequences_.end() ? nullptr : &it->second;
}

absl::StatusOr<SequenceId> RolloutEngine::AddSequence(const std::vector<int64_t>& prompt,
                                                      const SequenceOptions& options) {
  RETURN_IF_ERROR(options.sampling.Validate());
  if (prompt.empty()) {
    return absl::InvalidArgumentError(
        "rollout engine: a sequence needs at least one prompt token (e.g. BOS)");
  }
  const auto& model = snapshot_->model->options();
  if (static_cast<int64_t>(prompt.size()) > model.max_seq_len) {
    return absl::OutOfRangeError(StrCat("rollout engine: prompt of ", prompt.size(),
                                        " tokens exceeds model.max_seq_len ", model.max_seq_len));
  }
  for (int64_t t : prompt) {
    if (t < 0 || t >= model.vocab_size) {
      return absl::InvalidArgumentError(StrCat("rollout engine: prompt token ", t,
                                               " outside the vocabulary [0, ", model.vocab_size,
                                               ")"));
    }
  }
  const SequenceId id = next_id_++;
  Sequence seq;
  seq.slot = static_cast<int64_t>(slot_owner_.size());
  seq.tokens.assign(prompt.begin(), prompt.end());
  seq.sampling = options.sampling;
  seq.rng.seed(options.seed);
  RETURN_IF_ERROR(TorchCall("rollout engine: growing the KV cache", [&] {
    c10::InferenceMode guard;
    cache_.Reserve(seq.slot + 1, 1);
  }));
  slot_owner_.push_back(id);
  sequences_.emplace(id, std::move(seq));
  return id;
}

absl::Status RolloutEngine::AppendTokens(SequenceId id, const std::vector<int64_t>& tokens) {
  ASSIGN_OR_RETURN(Sequence * seq, Find(id, "append tokens"));
  if (seq->generating) {
    return absl::FailedPreconditionError(StrCat(
        "rollout engine: sequence ", id, " is generating; append only after its turn ended"));
  }
  const auto& model = snapshot_->model->options();
  if (static_cast<int64_t>(seq->tokens.size() + tokens.size()) > model.max_seq_len) {
    return absl::OutOfRangeError(
        StrCat("rollout engine: sequence ", id, " would reach ", seq->tokens.size() + tokens.size(),
               " tokens, more than model.max_seq_len ", model.max_seq_len));
  }
  for (int64_t t : tokens) {
    if (t < 0 || t >= model.vocab_size) {
      return absl::InvalidArgumentError(StrCat("rollout engine: sequence ", id, ": token ", t,
                                               " outside the vocabulary [0, ", model.vocab_size,
                                               ")"));
    }
  }
  seq->tokens.insert(seq->tokens.end(), tokens.begin(), tokens.end());
  return absl::OkStatus();
}

absl::Status RolloutEngine::StartTurn(SequenceId id, const TurnOptions& turn) {
  ASSIGN_OR_RETURN(Sequence * seq, Find(id, "start turn"));
  if (turn.max_new_tokens <= 0) {
    return absl::InvalidArgumentError("rollout engine: max_new_tokens must be > 0");
  }
  if (static_cast<int64_t>(seq->tokens.size()) >= snapshot_->model->options().max_seq_len) {
    return absl::OutOfRangeError(
        StrCat("rollout engine: sequence ", id, " is at model.max_seq_len; no room to generate"));
  }
  seq->generating = true;
  seq->turn = turn;
  seq->generated_in_turn = 0;
  return absl::OkStatus();
}

absl::Status RolloutEngine::RemoveSequence(SequenceId id) {
  ASSIGN_OR_RETURN(Sequence * seq, Find(id, "remove"));
  const int64_t hole = seq->slot;
  const int64_t last = static_cast<int64_t>(slot_owner_.size()) - 1;
  if (hole != last) {
    // Keep slots dense so that a decode over every sequence reads the cache without a gather.
    Sequence& moved = sequences_.at(slot_owner_[last]);
    RETURN_IF_ERROR(TorchCall("rollout engine: compacting the KV cache", [&] {
      c10::InferenceMode guard;
      cache_.MoveSlot(last, hole, moved.cached);
    }));
    moved.slot = hole;
    slot_owner_[hole] = slot_owner_[last];
  }
  slot_owner_.pop_back();
  sequences_.erase(id);
  return absl::OkStatus();
}

int64_t RolloutEngine::num_generating() const {
  int64_t n = 0;
  for (const auto& [id, seq] : sequences_) n += seq.generating ? 1 : 0;
  return n;
}

absl::StatusOr<std::vector<int64_t>> RolloutEngine::Tokens(SequenceId id) const {
  const Sequence* seq = FindConst(id);
  if (seq == nullptr) return absl::NotFoundError(StrCat("rollout engine: no sequence ", id));
  return seq->tokens;
}

std::string RolloutEngine::DebugString() const {
  return StrCat("RolloutEngine{version=", version(), " sequences=", num_sequences(),
                " generating=", num_generating(), " kv_slots=", cache_.num_slots(),
                " kv_capacity=", cache_.capacity(),
                " kv_on_swap=", options_.kv_on_swap == KvOnSwap::kKeep ? "keep" : "recompute", "}");
}

torch::Tensor RolloutEngine::DecodeBatch(const std::vector<Sequence*>& rows) {
  const int64_t n = static_cast<int64_t>(rows.size());
  std::vector<int64_t> slots(n), starts(n), tokens(n);
  int64_t attend = 0;
  for (int64_t b = 0; b < n; ++b) {
    slots[b] = rows[b]->slot;
    starts[b] = rows[b]->cached;
    tokens[b] = rows[b]->tokens[rows[b]->cached];
    attend = std::max(attend, rows[b]->cached + 1);
  }
  cache_.Reserve(cache_.num_slots(), attend);
  const auto device = cache_.device();
  const auto positions = torch::tensor(starts, torch::kInt64).to(device).unsqueeze(1);  // [n, 1]
  // Row b sees keys [0, cached_b]; the rest of the padded key range is another length's tail.
  const auto allowed =
      (torch::arange(attend, torch::TensorOptions().dtype(torch::kInt64).device(device))
           .unsqueeze(0) <= positions)
          .unsqueeze(1);  // [n, 1, attend]
  auto binding = cache_.Bind(slots, starts, attend);
  const auto& model = snapshot_->model;
  const auto hidden = model->Hidden(torch::tensor(tokens, torch::kInt64).to(device).unsqueeze(1),
                                    positions, allowed, &binding);
  for (Sequence* seq : rows) seq->cached += 1;
  return model->Logits(hidden.select(1, 0));  // [n, V]
}

torch::Tensor RolloutEngine::Prefill(Sequence& seq) {
  const int64_t start = seq.cached;
  const int64_t m = static_cast<int64_t>(seq.tokens.size()) - start;
  const int64_t total = start + m;
  cache_.Reserve(cache_.num_slots(), total);
  const auto device = cache_.device();
  const auto int_options = torch::TensorOptions().dtype(torch::kInt64).device(device);
  const auto positions = torch::arange(start, total, int_options).unsqueeze(0);  // [1, m]
  // New token i (at position start+i) sees the cached prefix and new tokens up to itself.
  const auto allowed =
      (torch::arange(total, int_options).unsqueeze(0) <= positions.squeeze(0).unsqueeze(1))
          .unsqueeze(0);  // [1, m, total]
  std::vector<int64_t> fresh(seq.tokens.begin() + start, seq.tokens.end());
  auto binding = cache_.Bind({seq.slot}, {start}, total);
  const auto& model = snapshot_->model;
  const auto hidden = model->Hidden(torch::tensor(fresh, torch::kInt64).to(device).unsqueeze(0),
                                    positions, allowed, &binding);
  seq.cached = total;
  return model->Logits(hidden.select(1, m - 1));  // [1, V]
}

void RolloutEngine::Sample(const std::vector<Sequence*>& rows, const std::vector<SequenceId>& ids,
                           const torch::Tensor& logits, std::vector<GeneratedToken>& out) {
  const int64_t n = static_cast<int64_t>(rows.size());
  bool shared_params = true;
  for (const Sequence* seq : rows) {
    const auto& a = seq->sampling;
    const auto& b = rows.front()->sampling;
    shared_params =
        shared_params && a.temperature == b.temperature && a.top_k == b.top_k && a.top_p == b.top_p;
  }
  torch::Tensor logprobs;
  if (shared_params) {
    logprobs = SamplingLogProbs(logits, rows.front()->sampling);
  } else {
    std::vector<torch::Tensor> parts;
    for (int64_t b = 0; b < n; ++b) {
      parts.push_back(SamplingLogProbs(logits.narrow(0, b, 1), rows[b]->sampling));
    }
    logprobs = torch::cat(parts, 0);
  }
  logprobs = logprobs.to(torch::kCPU, torch::kFloat32).contiguous();
  const auto probs = logprobs.exp();  // one vectorised exp for the whole batch
  const int64_t vocab = logprobs.size(1);
  const float* data = logprobs.data_ptr<float>();
  const float* prob_data = probs.data_ptr<float>();
  const int64_t max_len = snapshot_->model->options().max_seq_len;
  for (int64_t b = 0; b < n; ++b) {
    Sequence& seq = *rows[b];
    const float* row = data + b * vocab;
    const int64_t token = DrawToken(prob_data + b * vocab, vocab, seq.rng);
    GeneratedToken g;
    g.sequence = ids[b];
    g.token = token;
    g.position = static_cast<int64_t>(seq.tokens.size());
    g.logprob = row[token];
    g.version = snapshot_->version;
    seq.tokens.push_back(token);
    seq.generated_in_turn += 1;
    const auto& stops = seq.turn.stop_tokens;
    if (std::find(stops.begin(), stops.end(), token) != stops.end()) {
      g.end = TurnEnd::kStopToken;
    } else if (seq.generated_in_turn >= seq.turn.max_new_tokens) {
      g.end = TurnEnd::kMaxNewTokens;
    } else if (static_cast<int64_t>(seq.tokens.size()) >= max_len) {
      g.end = TurnEnd::kMaxLength;
    }
    if (g.end != TurnEnd::kNone) seq.generating = false;
    out.push_back(g);
  }
}

absl::StatusOr<std::vector<GeneratedToken>> RolloutEngine::Step() {
  std::vector<GeneratedToken> out;
  const absl::Status status = TorchCall("rollout engine step", [&] {
    c10::InferenceMode guard;
    if (options_.intra_op_threads > 0 && at::get_num_threads() != options_.intra_op_threads) {
      at::set_num_threads(static_cast<int>(options_.intra_op_threads));
    }
    MaybeSwap();
    // Slot order, so that "every sequence decodes" binds slots 0..n-1 and reads without a copy.
    std::vector<Sequence*> decode, prefill;
    std::vector<SequenceId> decode_ids, prefill_ids;
    for (SequenceId id : slot_owner_) {
      Sequence& seq = sequences_.at(id);
      if (!seq.generating) continue;
      const int64_t pending = static_cast<int64_t>(seq.tokens.size()) - seq.cached;
      if (pending == 1) {
        decode.push_back(&seq);
        decode_ids.push_back(id);
      } else {
        prefill.push_back(&seq);
        prefill_ids.push_back(id);
      }
    }
    if (!decode.empty()) Sample(decode, decode_ids, DecodeBatch(decode), out);
    for (size_t i = 0; i < prefill.size(); ++i) {
      Sample({prefill[i]}, {prefill_ids[i]}, Prefill(*prefill[i]), out);
    }
  });
  if (!status.ok()) return Annotate(status, DebugString());
  return out;
}

}  // namespace flywheel
