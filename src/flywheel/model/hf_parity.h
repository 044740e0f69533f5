// How far flywheel's logits for a Hugging Face model directory are from reference logits of the
// same tokens — transformers' own (scripts/gpu/hf_parity.py, on the GPU machine) or the float64
// re-implementation of testdata/hf_tiny_checkpoints.py — on each path a job computes them:
//
//   packed  the learner's forward: float32 master weights on model.device, the sequence as one
//           document of a padded packed row, under autocast to model.dtype (placement.h)
//   decode  the rollout engine's: a snapshot copy in model.dtype (MakeSnapshot), KV-cache
//           prefill of the first `prefill` tokens, then one token per step
//
// and two agreements that need no reference: the learner's log-probs against the engine's (what
// the importance weights rest on; equal up to rounding in float32, apart by bfloat16's rounding
// of the weights otherwise), and the sequence packed after another document against it alone
// (no attention across documents, positions restarting).
#ifndef FLYWHEEL_MODEL_HF_PARITY_H_
#define FLYWHEEL_MODEL_HF_PARITY_H_

#include <cstdint>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "absl/status/statusor.h"

namespace flywheel {

struct HfParity {
  double packed_max_error = 0;
  double decode_max_error = 0;
  double engine_vs_learner_logprob = 0;  // max |log-prob difference| over positions and vocab
  double packed_vs_single = 0;           // max |logit difference| of the second document
  double max_abs_logit = 0;  // of the reference: the scale the errors are measured against
};

// `reference` [tokens.size(), vocab] (any floating dtype, on the CPU). `device`, `dtype` as
// model.device and model.dtype.
absl::StatusOr<HfParity> MeasureHfParity(const std::string& model_dir,
                                         const std::vector<int64_t>& tokens,
                                         const torch::Tensor& reference, const std::string& device,
                                         const std::string& dtype, int64_t prefill);

}  // namespace flywheel

#endif  // FLYWHEEL_MODEL_HF_PARITY_H_
