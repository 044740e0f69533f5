#include "flywheel/learner/packer.h"

#include <algorithm>
#include <limits>
#include <map>
#include <numeric>

#include "flywheel/core/metrics.h"
#include "flywheel/core/status_macros.h"
#include "flywheel/core/strings.h"
#include "flywheel/model/torch_status.h"

namespace flywheel {
namespace {

// Per-token weights of the step's aggregation, computed on the host before packing (data only):
// 1 / (groups · n_g), or 1 / n_g without normalisation; `groups_out` receives D = groups.
std::vector<double> GroupWeights(const std::vector<int64_t>& trained_per_group, bool normalise,
                                 double& groups_out) {
  int64_t groups = 0;
  for (int64_t n : trained_per_group) groups += n > 0;
  groups_out = static_cast<double>(groups);
  std::vector<double> w(trained_per_group.size(), 0.0);
  for (size_t g = 0; g < w.size(); ++g) {
    if (trained_per_group[g] == 0) continue;
    w[g] = normalise ? 1.0 / (static_cast<double>(groups) * trained_per_group[g])
                     : 1.0 / static_cast<double>(trained_per_group[g]);
  }
  return w;
}

// Host-side buffers of one micro-batch, turned into tensors at the end.
struct MicroBatchBuilder {
  int64_t rows, length;
  std::vector<int64_t> tokens, targets, versions, sequence_ids, execution_ids;
  std::vector<uint8_t> trainable;
  std::vector<float> logprobs, advantages, weights;

  MicroBatchBuilder(int64_t r, int64_t l)
      : rows(r),
        length(l),
        tokens(r * l, 0),
        targets(r * l, 0),
        versions(r * l, kNoVersion),
        sequence_ids(r * l, -1),
        execution_ids(r * l, -1),
        trainable(r * l, 0),
        logprobs(r * l, 0.0f),
        advantages(r * l, 0.0f),
        weights(r * l, 0.0f) {}

  template <typename T>
  torch::Tensor Make(std::vector<T>& v, torch::Dtype dtype) {
    return torch::from_blob(v.data(), {rows, length}, dtype).clone();
  }
};

}  // namespace

std::vector<std::vector<int64_t>> FirstFitDecreasing(std::span<const int64_t> sizes,
                                                     int64_t capacity,
                                                     std::span<const uint8_t> priority) {
  std::vector<int64_t> order(sizes.size());
  std::iota(order.begin(), order.end(), 0);
  auto prio = [&](int64_t i) { return i < static_cast<int64_t>(priority.size()) && priority[i]; };
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
    if (prio(a) != prio(b)) return prio(a);
    return sizes[a] > sizes[b];
  });
  std::vector<std::vector<int64_t>> bins;
  std::vector<int64_t> room;
  for (int64_t item : order) {
    size_t b = 0;
    while (b < bins.size() && room[b] < sizes[item]) ++b;
    if (b == bins.size()) {
      bins.emplace_back();
      room.push_back(capacity);
    }
    bins[b].push_back(item);
    room[b] -= sizes[item];
  }
  return bins;
}

Packer::Packer(PackerOptions options) : options_(std::move(options)) {}

int64_t Packer::RowsFor(int64_t length) const {
  return std::max<int64_t>(1, options_.token_budget / length);
}

absl::StatusOr<PackedStep> Packer::Pack(std::span<const Trajectory> trajectories,
                                        std::span<const std::vector<float>> advantages,
                                        int64_t carried) {
  if (options_.buckets.empty() ||
      !std::is_sorted(options_.buckets.begin(), options_.buckets.end()) ||
      options_.buckets.front() <= 0) {
    return absl::InvalidArgumentError(
        StrCat("packer: buckets must be positive and ascending; got [",
               Join(options_.buckets, ", "), "]"));
  }
  if (advantages.size() != trajectories.size()) {
    return absl::InvalidArgumentError(StrCat("packer: ", advantages.size(),
                                             " advantage vectors for ", trajectories.size(),
                                             " trajectories"));
  }
  PackedStep step;
  const int64_t largest = options_.buckets.back();
  std::vector<int64_t> kept;  // input indices
  for (size_t i = 0; i < trajectories.size(); ++i) {
    const Trajectory& t = trajectories[i];
    RETURN_IF_ERROR(Annotate(t.Validate(), "packer"));
    if (advantages[i].size() != t.tokens.size()) {
      return absl::InvalidArgumentError(StrCat("packer: trajectory '", t.id, "' has ", t.size(),
                                               " tokens but ", advantages[i].size(),
                                               " advantages"));
    }
    if (t.size() > largest) {
      if (options_.too_long == TooLongPolicy::kError) {
        return absl::InvalidArgumentError(
            StrCat("packer: trajectory '", t.id, "' has ", t.size(),
                   " tokens, longer than the largest bucket ", largest,
                   " (learner.buckets); add a larger bucket or set learner.too_long = \"drop\""));
      }
      step.dropped_too_long.push_back(t.id);
      static Counter* dropped =
          MetricsRegistry::Global().GetCounter("learner.dropped{reason=too_long}");
      dropped->Increment();
      continue;
    }
    kept.push_back(static_cast<int64_t>(i));
  }
  if (kept.empty()) return step;

  // Bucket: the one with the least padding (ties: the shorter) among those that fit the longest
  // trajectory. With carry_over, trailing bins that would only part-fill the last micro-batch
  // are held back for the next step, unless they hold a trajectory carried over already.
  std::vector<int64_t> lengths;
  std::vector<uint8_t> priority;
  for (int64_t i : kept) {
    lengths.push_back(trajectories[i].size());
    priority.push_back(i < carried ? 1 : 0);
  }
  const int64_t longest = *std::max_element(lengths.begin(), lengths.end());
  std::vector<std::vector<int64_t>> bins;
  int64_t held_bins = 0;
  double best_waste = 2.0;
  for (int64_t L : options_.buckets) {
    if (L < longest) continue;
    auto candidate = FirstFitDecreasing(lengths, L, priority);
    const int64_t rows = RowsFor(L);
    const int64_t n = static_cast<int64_t>(candidate.size());
    int64_t held = 0;
    if (options_.carry_over && n > rows && n % rows != 0) {
      held = n % rows;
      for (int64_t b = n - held; b < n; ++b) {
        for (int64_t k : candidate[b]) held = priority[k] ? 0 : held;
      }
    }
    int64_t packed_tokens = 0;
    for (int64_t b = 0; b < n - held; ++b) {
      for (int64_t k : candidate[b]) packed_tokens += lengths[k];
    }
    const int64_t capacity = (n - held + rows - 1) / rows * rows * L;
    const double waste = 1.0 - static_cast<double>(packed_tokens) / capacity;
    if (waste < best_waste) {
      best_waste = waste;
      step.bucket = L;
      step.rows_per_micro_batch = rows;
      held_bins = held;
      bins = std::move(candidate);
    }
  }
  std::vector<uint8_t> packed(kept.size(), 1);
  for (int64_t b = static_cast<int64_t>(bins.size()) - held_bins;
       b < static_cast<int64_t>(bins.size()); ++b) {
    for (int64_t k : bins[b]) {
      packed[k] = 0;
      step.held_back.push_back(kept[k]);
    }
  }
  std::sort(step.held_back.begin(), step.held_back.end());
  bins.resize(bins.size() - held_bins);

  // Dense execution ids; a trajectory without an execution id is an execution of its own.
  std::vector<int64_t> execution(kept.size());
  std::map<std::string, int64_t> execution_index;
  for (size_t k = 0; k < kept.size(); ++k) {
    if (!packed[k]) continue;
    const Trajectory& t = trajectories[kept[k]];
    const std::string key =
        t.execution_id.empty() ? StrCat("\x01solo:", t.id, ":", k) : t.execution_id;
    auto [it, inserted] =
        execution_index.emplace(key, static_cast<int64_t>(execution_index.size()));
    execution[k] = it->second;
  }
  // Trainable targets per sequence and per execution (a target is token j ≥ 1).
  std::vector<int64_t> per_sequence(kept.size(), 0), per_execution(execution_index.size(), 0);
  for (size_t k = 0; k < kept.size(); ++k) {
    if (!packed[k]) continue;
    const Trajectory& t = trajectories[kept[k]];
    for (int64_t j = 1; j < t.size(); ++j) {
      if (t.trainable[j]) {
        ++per_sequence[k];
        ++per_execution[execution[k]];
        ++step.trainable_tokens;
      }
    }
  }
  std::vector<double> weight_of(kept.size(), 0.0);  // per sequence
  const bool normalise = options_.normalise_weights;
  switch (options_.aggregation) {
    case LossAggregation::kTokenMean:
      step.normaliser = static_cast<double>(step.trainable_tokens);
      for (auto& w : weight_of) {
        w = !normalise ? 1.0 : (step.trainable_tokens ? 1.0 / step.trainable_tokens : 0.0);
      }
      break;
    case LossAggregation::kSequenceMean:
      weight_of = GroupWeights(per_sequence, normalise, step.normaliser);
      break;
    case LossAggregation::kExecutionMean: {
      const std::vector<double> w = GroupWeights(per_execution, normalise, step.normaliser);
      for (size_t k = 0; k < kept.size(); ++k) weight_of[k] = packed[k] ? w[execution[k]] : 0.0;
      break;
    }
  }

  const int64_t L = step.bucket, rows = step.rows_per_micro_batch;
  for (size_t first = 0; first < bins.size(); first += rows) {
    MicroBatchBuilder b(rows, L);
    PackedMicroBatch mb;
    mb.rows = rows;
    mb.length = L;
    mb.doc_lengths.resize(rows);
    mb.doc_trajectories.resize(rows);
    for (int64_t r = 0; r < rows && first + r < bins.size(); ++r) {
      int64_t offset = r * L;
      for (int64_t k : bins[first + r]) {
        const Trajectory& t = trajectories[kept[k]];
        const std::vector<float>& adv = advantages[kept[k]];
        const int64_t n = t.size();
        for (int64_t j = 0; j < n; ++j) {
          const int64_t p = offset + j;
          b.tokens[p] = t.tokens[j];
          b.sequence_ids[p] = k;
          b.execution_ids[p] = execution[k];
          if (j + 1 < n) {
            b.targets[p] = t.tokens[j + 1];
            b.versions[p] = t.versions[j + 1];
            if (t.trainable[j + 1]) {
              b.trainable[p] = 1;
              b.logprobs[p] = t.logprobs[j + 1];
              b.advantages[p] = adv[j + 1];
              b.weights[p] = static_cast<float>(weight_of[k]);
            }
          }
        }
        offset += n;
        mb.doc_lengths[r].push_back(n);
        mb.doc_trajectories[r].push_back(kept[k]);
        mb.real_tokens += n;
      }
    }
    RETURN_IF_ERROR(TorchCall("packer: building tensors", [&] {
      mb.tokens = b.Make(b.tokens, torch::kLong);
      mb.targets = b.Make(b.targets, torch::kLong);
      mb.trainable = b.Make(b.trainable, torch::kUInt8).to(torch::kBool);
      mb.behaviour_logprobs = b.Make(b.logprobs, torch::kFloat);
      mb.versions = b.Make(b.versions, torch::kLong);
      mb.advantages = b.Make(b.advantages, torch::kFloat);
      mb.loss_weights = b.Make(b.weights, torch::kFloat);
      mb.sequence_ids = b.Make(b.sequence_ids, torch::kLong);
      mb.execution_ids = b.Make(b.execution_ids, torch::kLong);
    }));
    step.real_tokens += mb.real_tokens;
    step.capacity_tokens += rows * L;
    shapes_.insert({rows, L});
    step.micro_batches.push_back(std::move(mb));
  }
  return step;
}

}  // namespace flywheel
