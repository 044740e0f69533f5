#include "flywheel/model/weight_snapshot.h"

#include "flywheel/core/status_macros.h"
#include "flywheel/core/strings.h"
#include "flywheel/model/placement.h"
#include "flywheel/model/torch_status.h"

namespace flywheel {

absl::StatusOr<std::shared_ptr<const WeightSnapshot>> MakeSnapshot(const Transformer& model,
                                                                   int64_t version) {
  ASSIGN_OR_RETURN(const torch::Device device, ModelDevice(model->options()));
  return TorchCallOr(StrCat("snapshot of weights version ", version), [&] {
    auto snapshot = std::make_shared<WeightSnapshot>();
    snapshot->version = version;
    snapshot->model = Transformer(model->options());
    torch::NoGradGuard no_grad;
    const auto source = model->named_parameters();
    // Placed before the copy, which casts: no second float32 copy on the device.
    snapshot->model->to(device, ModelDtype(model->options()));
    for (auto& item : snapshot->model->named_parameters()) {
      const torch::Tensor* from = source.find(item.key());
      TORCH_CHECK(from != nullptr, "parameter ", item.key(), " missing in the source model");
      item.value().copy_(*from);
      item.value().set_requires_grad(false);
    }
    snapshot->model->FuseProjectionsForInference();
    // (Supports: float32 on the CPU; other placements decode with LibTorch ops.)
    if (CpuDecoderWeights::Supports(snapshot->model)) {
      snapshot->cpu_weights =
          std::make_shared<const CpuDecoderWeights>(CpuDecoderWeights::From(snapshot->model));
    }
    return std::shared_ptr<const WeightSnapshot>(std::move(snapshot));
  });
}

}  // namespace flywheel
