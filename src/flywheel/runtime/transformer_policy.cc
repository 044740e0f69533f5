#include "flywheel/runtime/transformer_policy.h"

#include "flywheel/core/status_macros.h"
#include "flywheel/model/attention_layout.h"
#include "flywheel/model/torch_status.h"

namespace flywheel {

PolicyForward TransformerPolicy(Transformer model) {
  return [model](const PackedMicroBatch& mb) -> absl::StatusOr<torch::Tensor> {
    ASSIGN_OR_RETURN(AttentionLayout layout, MakePackedLayout(mb.doc_lengths, mb.length));
    return TorchCallOr("policy forward", [&] { return model->forward(mb.tokens, layout); });
  };
}

}  // namespace flywheel
