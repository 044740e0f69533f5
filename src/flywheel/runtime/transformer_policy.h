// The policy forward every trainer of a job runs: the transformer over a packed micro-batch,
// with the block-diagonal attention of its documents, in model.dtype (placement.h).
#ifndef FLYWHEEL_RUNTIME_TRANSFORMER_POLICY_H_
#define FLYWHEEL_RUNTIME_TRANSFORMER_POLICY_H_

#include "flywheel/learner/gradient_accumulator.h"
#include "flywheel/model/transformer.h"

namespace flywheel {

// Keeps a reference to `model`: the forward uses its current weights.
PolicyForward TransformerPolicy(Transformer model);

}  // namespace flywheel

#endif  // FLYWHEEL_RUNTIME_TRANSFORMER_POLICY_H_
