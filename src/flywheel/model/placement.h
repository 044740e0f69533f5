// Where the model computes and in what precision: [model] device and dtype.
//
//   learner   float32 parameters on model.device: the master weights the optimiser updates and
//             its state stay float32. With dtype = "bfloat16" the forward runs under autocast
//             (AutocastScope): matrix products in bfloat16, what autocast keeps in float32
//             (reductions, softmax, the loss) in float32, as PyTorch's mixed precision does.
//   rollout   each weight snapshot is a copy on model.device in model.dtype; the engine's KV
//             cache takes the snapshot's dtype (weight_snapshot.h).
//
// Both default to "cpu" / "float32", the build CI tests. "cuda" needs a CUDA LibTorch
// (scripts/gpu-build) and a GPU; asking for it elsewhere is an error that says so.
#ifndef FLYWHEEL_MODEL_PLACEMENT_H_
#define FLYWHEEL_MODEL_PLACEMENT_H_

#include <torch/torch.h>

#include "absl/status/statusor.h"
#include "flywheel/model/model_options.h"

namespace flywheel {

// model.device as a torch::Device; FailedPrecondition when this LibTorch has no CUDA, sees no GPU
// or fewer than N+1 of them.
absl::StatusOr<torch::Device> ModelDevice(const ModelOptions& options);

// model.dtype: torch::kFloat32 or torch::kBFloat16.
torch::ScalarType ModelDtype(const ModelOptions& options);

// While alive, ops on `device`'s type run in `dtype` where autocast lowers them (float32: does
// nothing). Nests: the previous state comes back at destruction; the cast cache is cleared when
// the outermost scope ends. Per thread, as autocast's state is.
class AutocastScope {
 public:
  AutocastScope(torch::Device device, torch::ScalarType dtype);
  ~AutocastScope();
  AutocastScope(const AutocastScope&) = delete;
  AutocastScope& operator=(const AutocastScope&) = delete;

 private:
  bool active_ = false;
  c10::DeviceType type_ = c10::DeviceType::CPU;
  bool was_enabled_ = false;
  torch::ScalarType was_dtype_ = torch::kFloat32;
};

}  // namespace flywheel

#endif  // FLYWHEEL_MODEL_PLACEMENT_H_
