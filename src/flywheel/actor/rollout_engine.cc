#include "flywheel/actor/rollout_engine.h"

#include <algorithm>
#include <cstring>
#include <map>

#include <spdlog/spdlog.h>

#include "flywheel/actor/actor_metrics.h"
#include "flywheel/core/status_macros.h"
#include "flywheel/core/strings.h"
#include "flywheel/model/torch_status.h"
#include "flywheel/observe/trace_recorder.h"

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

namespace {

// The snapshot's weights in the CPU decoder's layout: its shared copy, or one built here for a
// snapshot made without it.
std::shared_ptr<const CpuDecoderWeights> CpuWeightsOf(const WeightSnapshot& snapshot) {
  if (snapshot.cpu_weights != nullptr) return snapshot.cpu_weights;
  return std::make_shared<const CpuDecoderWeights>(CpuDecoderWeights::From(snapshot.model));
}

}  // namespace

absl::StatusOr<std::unique_ptr<RolloutEngine>> RolloutEngine::Create(
    const RolloutEngineOptions& options, std::shared_ptr<const WeightSnapshot> snapshot) {
  RETURN_IF_ERROR(options.Validate());
  if (snapshot == nullptr || snapshot->model.is_empty()) {
    return absl::InvalidArgumentError("rollout engine: no weight snapshot to start from");
  }
  if (options.backend == DecodeBackend::kCpu && !CpuDecoderWeights::Supports(snapshot->model)) {
    return absl::InvalidArgumentError(
        "rollout engine: actor.backend = \"cpu\" needs float32 weights on the CPU; use \"auto\" "
        "or \"torch\" for other weights");
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
      vocab_size_(snapshot->model->options().vocab_size),
      snapshot_(std::move(snapshot)) {
  if (options.backend == DecodeBackend::kCpu) {
    BuildBackend(DecodeBackend::kCpu);
  } else if (options.backend == DecodeBackend::kTorch ||
             !CpuDecoderWeights::Supports(snapshot_->model)) {
    BuildBackend(DecodeBackend::kTorch);
  }
  // else auto: decided at the first Step (ChooseBackend), when the batch is known.
}

void RolloutEngine::BuildBackend(DecodeBackend backend) {
  const int64_t slots = std::max<int64_t>(options_.initial_slots, num_sequences());
  if (backend == DecodeBackend::kCpu) {
    cpu_ =
        std::make_unique<CpuDecoder>(snapshot_->model->options(), slots, options_.initial_capacity);
    cpu_weights_ = CpuWeightsOf(*snapshot_);
  } else {
    cache_ = std::make_unique<KvCache>(
        snapshot_->model->options(),
        snapshot_->model->parameters().front().options().requires_grad(false), slots,
        options_.initial_capacity);
    const bool graphs =
        options_.decode_graphs == DecodeGraphMode::kOn ||
        (options_.decode_graphs == DecodeGraphMode::kAuto && cache_->device().is_cuda());
    if (graphs) decode_graphs_ = std::make_unique<DecodeGraphs>(options_.max_decode_graphs);
  }
}

DecodeBackend RolloutEngine::backend() const {
  if (cpu_ != nullptr) return DecodeBackend::kCpu;
  if (cache_ != nullptr) return DecodeBackend::kTorch;
  return DecodeBackend::kAuto;
}

absl::Status RolloutEngine::ChooseBackend(const std::vector<Sequence*>& batch) {
  // Nothing is cached before the first Step, so every sequence's tokens are its prompt.
  std::vector<std::vector<int64_t>> prompts;
  prompts.reserve(batch.size());
  for (const Sequence* seq : batch) prompts.push_back(seq->tokens);
  ASSIGN_OR_RETURN(BackendChoice choice, MeasureBackends(options_, snapshot_, prompts));
  if (choice.cpu_tokens_per_s > 0) {
    spdlog::info(
        "rollout engine: actor.backend = \"auto\" chose {}: CPU decoder ({}) {:.0f} tokens/s, "
        "LibTorch ops {:.0f} tokens/s, decoding {} sequences (force one with --set "
        "actor.backend=cpu or torch)",
        choice.chosen == DecodeBackend::kCpu ? "cpu" : "torch", choice.cpu_target,
        choice.cpu_tokens_per_s, choice.torch_tokens_per_s, choice.sequences);
  }
  BuildBackend(choice.chosen);
  choice_ = std::move(choice);
  return absl::OkStatus();
}

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
  TraceSpan span("actor", "swap");
  const absl::Time swap_start = absl::Now();
  if (cpu_ != nullptr) {
    TORCH_CHECK(CpuDecoderWeights::Supports(newer->model), "weights version ", newer->version,
                " are not float32 on the CPU, but this engine decodes with the CPU decoder "
                "(set actor.backend = \"torch\" for such weights)");
    cpu_weights_ = CpuWeightsOf(*newer);
  }
  // The old snapshot is released here, outside the lock (it may be the last reference).
  snapshot_ = std::move(newer);
  if (decode_graphs_ != nullptr) decode_graphs_->Clear();  // they read the old weights
  if (options_.kv_on_swap == KvOnSwap::kRecompute) {
    for (auto& [id, seq] : sequences_) seq.cached = 0;  // re-prefilled lazily, at the next use
  }
  const ActorMetrics& metrics = ActorMetrics::Get();
  metrics.weight_swaps->Increment();
  metrics.weight_swap_seconds->Observe(absl::ToDoubleSeconds(absl::Now() - swap_start));
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
  RETURN_IF_ERROR(ReserveSlot(seq.slot));
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
      MoveSlot(last, hole, moved.cached);
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

absl::Status RolloutEngine::ReserveSlot(int64_t slot) {
  return TorchCall("rollout engine: growing the KV cache", [&] {
    c10::InferenceMode guard;
    if (cpu_ != nullptr) {
      cpu_->Reserve(slot + 1, 1);
    } else if (cache_ != nullptr) {
      cache_->Reserve(slot + 1, 1);
    }  // else no backend yet: BuildBackend sizes it for every sequence
  });
}

void RolloutEngine::MoveSlot(int64_t from, int64_t to, int64_t length) {
  if (cpu_ != nullptr) {
    cpu_->MoveSlot(from, to, length);
  } else if (cache_ != nullptr) {
    cache_->MoveSlot(from, to, length);
  }  // else no backend yet, so nothing is cached
}

std::string RolloutEngine::DebugString() const {
  const char* backend = cpu_ != nullptr ? "cpu" : cache_ != nullptr ? "torch" : "auto (undecided)";
  int64_t slots = 0, capacity = 0;
  if (cpu_ != nullptr) {
    slots = cpu_->num_slots();
    capacity = cpu_->capacity();
  } else if (cache_ != nullptr) {
    slots = cache_->num_slots();
    capacity = cache_->capacity();
  }
  return StrCat("RolloutEngine{version=", version(), " sequences=", num_sequences(),
                " generating=", num_generating(), " backend=", backend, " kv_slots=", slots,
                " kv_capacity=", capacity,
                " kv_on_swap=", options_.kv_on_swap == KvOnSwap::kKeep ? "keep" : "recompute",
                choice_ ? " " + choice_->DebugString() : std::string(), "}");
}

torch::Tensor RolloutEngine::ForwardPending(const std::vector<Sequence*>& rows) {
  const int64_t n = static_cast<int64_t>(rows.size());
  const int64_t m = static_cast<int64_t>(rows[0]->tokens.size()) - rows[0]->cached;
  if (m == 1 && decode_graphs_ != nullptr) {
    std::vector<int64_t> tokens(n), positions(n), slots(n);
    for (int64_t b = 0; b < n; ++b) {
      tokens[b] = rows[b]->tokens.back();
      positions[b] = rows[b]->cached;
      slots[b] = rows[b]->slot;
      rows[b]->cached += 1;
    }
    // Slots are dense, so the first one past the sequences is free for the padding rows.
    return decode_graphs_->Forward(snapshot_->model, *cache_, tokens, positions, slots,
                                   num_sequences());
  }
  std::vector<int64_t> slots(n), starts(n), tokens;
  tokens.reserve(n * m);
  int64_t attend = 0;
  for (int64_t b = 0; b < n; ++b) {
    slots[b] = rows[b]->slot;
    starts[b] = rows[b]->cached;
    tokens.insert(tokens.end(), rows[b]->tokens.begin() + rows[b]->cached, rows[b]->tokens.end());
    attend = std::max(attend, rows[b]->cached + m);
  }
  cache_->Reserve(cache_->num_slots(), attend);
  const auto device = cache_->device();
  const auto int_options = torch::TensorOptions().dtype(torch::kInt64).device(device);
  // Row b's new token i is at position cached_b + i and sees keys [0, cached_b + i] of its slot;
  // the rest of the padded key range is another length's tail.
  const auto positions = torch::tensor(starts, torch::kInt64).to(device).unsqueeze(1) +
                         torch::arange(m, int_options).unsqueeze(0);  // [n, m]
  const auto allowed = torch::arange(attend, int_options).view({1, 1, attend}) <=
                       positions.unsqueeze(2);  // [n, m, attend]
  auto binding = cache_->Bind(slots, starts, attend);
  const auto& model = snapshot_->model;
  const auto hidden =
      model->Hidden(torch::tensor(tokens, torch::kInt64).to(device).view({n, m}), positions,
                    allowed, &binding);
  for (Sequence* seq : rows) seq->cached += m;
  return model->Logits(hidden.select(1, m - 1));  // [n, V]
}

std::vector<std::vector<int64_t>> RolloutEngine::PendingGroups(
    const std::vector<Sequence*>& batch) {
  // Rows with the same number of pending tokens go together, in batch order, as many as keep
  // one forward's query-key pairs (its attention scores, per head) within kMaxPendingPairs; a
  // row alone may exceed it (a long prompt, as before batching).
  constexpr int64_t kMaxPendingPairs = int64_t{1} << 24;
  std::map<int64_t, std::vector<int64_t>> by_pending;
  for (size_t i = 0; i < batch.size(); ++i) {
    by_pending[static_cast<int64_t>(batch[i]->tokens.size()) - batch[i]->cached].push_back(
        static_cast<int64_t>(i));
  }
  std::vector<std::vector<int64_t>> groups;
  for (const auto& [m, rows] : by_pending) {
    std::vector<int64_t> group;
    int64_t attend = 0;
    for (int64_t i : rows) {
      const int64_t need = batch[i]->cached + m;  // keys row i attends to
      if (!group.empty() && static_cast<int64_t>(group.size() + 1) * m *
                                    std::max(attend, need) > kMaxPendingPairs) {
        groups.push_back(std::move(group));
        group.clear();
        attend = 0;
      }
      group.push_back(i);
      attend = std::max(attend, need);
    }
    groups.push_back(std::move(group));
  }
  return groups;
}

void RolloutEngine::ForwardCpu(const std::vector<Sequence*>& batch) {
  rows_.clear();
  logit_rows_.clear();
  int64_t longest = 0;
  for (Sequence* seq : batch) {
    const int64_t total = static_cast<int64_t>(seq->tokens.size());
    for (int64_t p = seq->cached; p < total; ++p) rows_.push_back({seq->slot, p, seq->tokens[p]});
    logit_rows_.push_back(static_cast<int64_t>(rows_.size()) - 1);
    longest = std::max(longest, total);
  }
  cpu_->Reserve(cpu_->num_slots(), longest);
  logits_.resize(batch.size() * snapshot_->model->options().vocab_size);
  cpu_->Forward(*cpu_weights_, rows_, logit_rows_, logits_.data());
  for (Sequence* seq : batch) seq->cached = static_cast<int64_t>(seq->tokens.size());
}

void RolloutEngine::ForwardTorch(const std::vector<Sequence*>& batch) {
  // One batched forward per group of rows with as many pending tokens (decode steps: one; new
  // prompts and tool output: more); logits in batch order.
  const int64_t vocab = snapshot_->model->options().vocab_size;
  const bool on_device = !cache_->device().is_cpu();
  std::vector<torch::Tensor> device_rows(on_device ? batch.size() : 0);
  if (!on_device) logits_.resize(batch.size() * vocab);
  const std::vector<std::vector<int64_t>> groups = PendingGroups(batch);
  for (const std::vector<int64_t>& at : groups) {
    std::vector<Sequence*> rows;
    for (int64_t i : at) rows.push_back(batch[i]);
    const torch::Tensor logits = ForwardPending(rows);
    if (on_device && groups.size() == 1) {
      device_logits_ = logits;  // one group: already in batch order
      return;
    }
    if (on_device) {
      // On a GPU the logits stay there: Sample draws on the device (SampleRows) and only the
      // tokens and their log-probs come back, not batch x V floats.
      for (size_t r = 0; r < at.size(); ++r) device_rows[at[r]] = logits.narrow(0, r, 1);
      continue;
    }
    const auto cpu = logits.to(torch::kCPU, torch::kFloat32).contiguous();
    for (size_t r = 0; r < at.size(); ++r) {
      std::memcpy(logits_.data() + at[r] * vocab, cpu.data_ptr<float>() + r * vocab,
                  vocab * sizeof(float));
    }
  }
  if (on_device) device_logits_ = torch::cat(device_rows, 0);
}

void RolloutEngine::Sample(const std::vector<Sequence*>& batch, const std::vector<SequenceId>& ids,
                           std::vector<GeneratedToken>& out) {
  const int64_t vocab = snapshot_->model->options().vocab_size;
  logprobs_.resize(vocab);
  probs_.resize(vocab);
  const int64_t max_len = snapshot_->model->options().max_seq_len;
  SampledRows on_device;
  if (device_logits_.defined()) {
    std::vector<const SamplingParams*> params;
    std::vector<std::mt19937_64*> rngs;
    for (Sequence* seq : batch) {
      params.push_back(&seq->sampling);
      rngs.push_back(&seq->rng);
    }
    on_device = SampleRows(device_logits_, params, rngs);
    device_logits_ = torch::Tensor();
  }
  for (size_t b = 0; b < batch.size(); ++b) {
    Sequence& seq = *batch[b];
    GeneratedToken g;
    if (!on_device.tokens.empty()) {
      g.token = on_device.tokens[b];
      g.logprob = on_device.logprobs[b];
    } else {
      g.token = SampleRow(logits_.data() + b * vocab, vocab, seq.sampling, seq.rng,
                          logprobs_.data(), probs_.data());
      g.logprob = logprobs_[g.token];
    }
    const int64_t token = g.token;
    g.sequence = ids[b];
    g.position = static_cast<int64_t>(seq.tokens.size());
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
  absl::Status choose = absl::OkStatus();
  const absl::Status status = TorchCall("rollout engine step", [&] {
    c10::InferenceMode guard;
    if (options_.intra_op_threads > 0 && at::get_num_threads() != options_.intra_op_threads) {
      at::set_num_threads(static_cast<int>(options_.intra_op_threads));
    }
    MaybeSwap();
    // Slot order: with every sequence decoding, the LibTorch backend binds slots 0..n-1 and
    // reads its cache without a copy.
    std::vector<Sequence*> batch;
    std::vector<SequenceId> ids;
    for (SequenceId id : slot_owner_) {
      Sequence& seq = sequences_.at(id);
      if (!seq.generating) continue;
      batch.push_back(&seq);
      ids.push_back(id);
    }
    if (batch.empty()) return;
    if (backend() == DecodeBackend::kAuto) {
      choose = ChooseBackend(batch);
      if (!choose.ok()) return;
    }
    out.reserve(batch.size());
    if (cpu_ != nullptr) {
      ForwardCpu(batch);
    } else {
      ForwardTorch(batch);
    }
    Sample(batch, ids, out);
  });
  if (!status.ok()) return Annotate(status, DebugString());
  if (!choose.ok()) return Annotate(choose, "rollout engine: actor.backend = \"auto\"");
  return out;
}

}  // namespace flywheel
