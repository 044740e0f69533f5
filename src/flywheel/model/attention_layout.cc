#include "flywheel/model/attention_layout.h"

#include <algorithm>

#include "flywheel/model/torch_status.h"

namespace flywheel {
namespace {

// Layouts are built on the CPU with plain loops (they are small next to the forward pass) and
// moved to the model's device by the caller.
struct LayoutBuilder {
  LayoutBuilder(int64_t batch, int64_t length)
      : positions(torch::zeros({batch, length}, torch::kInt64)),
        allowed(torch::zeros({batch, length, length}, torch::kBool)),
        pos(positions.accessor<int64_t, 2>()),
        mask(allowed.accessor<bool, 3>()) {}

  // Unused tail of row b: each padding token sees itself only (no row is fully masked, so the
  // softmax stays finite), position 0.
  void Pad(int64_t b, int64_t from) {
    for (int64_t i = from; i < positions.size(1); ++i) mask[b][i][i] = true;
  }

  torch::Tensor positions;
  torch::Tensor allowed;
  torch::TensorAccessor<int64_t, 2> pos;
  torch::TensorAccessor<bool, 3> mask;
};

// The tree segments of a row's real tokens: column c starts a segment when no token from c on
// has a parent before c (then none has an ancestor before c either), so no attention crosses c.
std::vector<int64_t> TreeSegments(const std::vector<int64_t>& parents) {
  const auto n = static_cast<int64_t>(parents.size());
  std::vector<int64_t> lengths;
  int64_t reach = n;  // the smallest parent of the tokens from c on
  int64_t end = n;
  for (int64_t c = n - 1; c >= 0; --c) {
    if (parents[c] >= 0) reach = std::min(reach, parents[c]);
    if (reach >= c) {
      lengths.push_back(end - c);
      end = c;
    }
  }
  std::reverse(lengths.begin(), lengths.end());
  return lengths;
}

}  // namespace

AttentionLayout CausalLayout(int64_t batch, int64_t length) {
  TORCH_CHECK(batch >= 0 && length >= 0, "CausalLayout: negative batch or length");
  auto positions = torch::arange(length, torch::kInt64).unsqueeze(0).expand({batch, length});
  auto allowed = torch::ones({length, length}, torch::kBool)
                     .tril()
                     .unsqueeze(0)
                     .expand({batch, length, length});
  return {positions.contiguous(), allowed.contiguous(), /*doc_lengths=*/{}};
}

AttentionLayout PackedLayout(const std::vector<std::vector<int64_t>>& doc_lengths, int64_t length) {
  LayoutBuilder builder(static_cast<int64_t>(doc_lengths.size()), length);
  for (int64_t b = 0; b < static_cast<int64_t>(doc_lengths.size()); ++b) {
    int64_t start = 0;
    for (size_t d = 0; d < doc_lengths[b].size(); ++d) {
      const int64_t n = doc_lengths[b][d];
      TORCH_CHECK_VALUE(n > 0, "PackedLayout: row ", b, " document ", d, " has length ", n,
                        " (must be > 0)");
      TORCH_CHECK_VALUE(start + n <= length, "PackedLayout: row ", b, " documents total more than ",
                        "the row length ", length);
      for (int64_t i = 0; i < n; ++i) {
        builder.pos[b][start + i] = i;
        for (int64_t j = 0; j <= i; ++j) builder.mask[b][start + i][start + j] = true;
      }
      start += n;
    }
    builder.Pad(b, start);
  }
  return {builder.positions, builder.allowed, doc_lengths};
}

AttentionLayout TreeLayout(const std::vector<std::vector<int64_t>>& parents, int64_t length) {
  LayoutBuilder builder(static_cast<int64_t>(parents.size()), length);
  for (int64_t b = 0; b < static_cast<int64_t>(parents.size()); ++b) {
    const auto& row = parents[b];
    const int64_t n = static_cast<int64_t>(row.size());
    TORCH_CHECK_VALUE(n <= length, "TreeLayout: row ", b, " has ", n,
                      " tokens, more than the row length ", length);
    for (int64_t i = 0; i < n; ++i) {
      const int64_t p = row[i];
      TORCH_CHECK_VALUE(p >= -1 && p < i, "TreeLayout: row ", b, " token ", i, " has parent ", p,
                        " (must be -1 or an earlier token)");
      builder.mask[b][i][i] = true;
      if (p >= 0) {
        // Ancestors of i = p and p's ancestors; p's row is complete because p < i.
        builder.pos[b][i] = builder.pos[b][p] + 1;
        for (int64_t j = 0; j <= p; ++j) {
          if (builder.mask[b][p][j]) builder.mask[b][i][j] = true;
        }
      }
    }
    builder.Pad(b, n);
  }
  AttentionLayout layout{builder.positions, builder.allowed, /*doc_lengths=*/{}};
  for (const auto& row : parents) layout.doc_lengths.push_back(TreeSegments(row));
  layout.documents_masked = true;
  return layout;
}

absl::StatusOr<AttentionLayout> MakePackedLayout(
    const std::vector<std::vector<int64_t>>& doc_lengths, int64_t length) {
  return TorchCallOr("packed attention layout", [&] { return PackedLayout(doc_lengths, length); });
}

absl::StatusOr<AttentionLayout> MakeTreeLayout(const std::vector<std::vector<int64_t>>& parents,
                                               int64_t length) {
  return TorchCallOr("tree attention layout", [&] { return TreeLayout(parents, length); });
}

}  // namespace flywheel
