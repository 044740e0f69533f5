#include "flywheel/runtime/transformer_policy.h"

#include "flywheel/core/status_macros.h"
#include "flywheel/model/attention_layout.h"
#include "flywheel/model/placement.h"
#include "flywheel/model/torch_status.h"

namespace flywheel {

PolicyForward TransformerPolicy(Transformer model) {
  // Where the model was placed (MakeInitialModel) and what it computes in: fixed for its life.
  const torch::Device device = model->parameters().front().device();
  const torch::ScalarType dtype = ModelDtype(model->options());
  return [model, device, dtype](const PackedMicroBatch& mb) -> absl::StatusOr<torch::Tensor> {
    ASSIGN_OR_RETURN(AttentionLayout layout, MakePackedLayout(mb.doc_lengths, mb.length));
    return TorchCallOr("policy forward", [&] {
      // The parameters stay float32 (the master weights); bfloat16 is the forward's compute.
      AutocastScope autocast(device, dtype);
      return model->forward(mb.tokens, layout);
    });
  };
}

}  // namespace flywheel
