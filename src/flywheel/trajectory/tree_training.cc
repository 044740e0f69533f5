#include "flywheel/trajectory/tree_training.h"

#include "flywheel/model/torch_status.h"

namespace flywheel {

absl::StatusOr<TreeBatchTensors> ToTensors(const PackedTrees& packed) {
  TreeBatchTensors out;
  auto layout = MakeTreeLayout(packed.parents, packed.length);
  if (!layout.ok()) return layout.status();
  out.layout = std::move(*layout);
  const auto long_opts = torch::TensorOptions().dtype(torch::kInt64);
  out.tokens =
      torch::tensor(std::vector<int64_t>(packed.tokens.begin(), packed.tokens.end()), long_opts)
          .view({packed.rows, packed.length});
  const size_t n = packed.contributions.size();
  std::vector<int64_t> rows(n), cols(n), targets(n);
  std::vector<float> behaviour(n), advantages(n), weights(n);
  for (size_t i = 0; i < n; ++i) {
    const auto& c = packed.contributions[i];
    rows[i] = c.row;
    cols[i] = packed.parents[c.row][c.col];
    targets[i] = packed.tokens[packed.Index(c.row, c.col)];
    behaviour[i] = c.behaviour_logprob;
    advantages[i] = c.advantage;
    weights[i] = c.weight;
  }
  out.rows = torch::tensor(rows, long_opts);
  out.source_cols = torch::tensor(cols, long_opts);
  out.targets = torch::tensor(targets, long_opts);
  out.behaviour_logprobs = torch::tensor(behaviour);
  out.advantages = torch::tensor(advantages);
  out.weights = torch::tensor(weights);
  return out;
}

torch::Tensor ContributionLogprobs(const torch::Tensor& logits, const TreeBatchTensors& batch,
                                   const SamplingParams& params) {
  using torch::indexing::Slice;
  const torch::Tensor source = logits.index({batch.rows, batch.source_cols});  // [C, V]
  return TokenLogprobs(source, batch.targets, params);
}

torch::Tensor ContributionLoss(const torch::Tensor& logprobs, const TreeBatchTensors& batch,
                               const TokenLoss& loss) {
  return (batch.weights * loss(logprobs, batch.behaviour_logprobs, batch.advantages)).sum();
}

}  // namespace flywheel
