#include "flywheel/model/placement.h"

#include <ATen/autocast_mode.h>
#include <torch/cuda.h>
#include <torch/version.h>

#include <string>

#include "flywheel/core/strings.h"

// LibTorch 2.4 made autocast's state per device type (set_autocast_enabled(type, on)); 1.13 has
// one function per device type. Both spellings, so that Debian's 1.13 and a CUDA 2.x build agree.
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4)
#define FLYWHEEL_AUTOCAST_PER_DEVICE_TYPE 1
#endif

namespace flywheel {
namespace {

#ifdef FLYWHEEL_AUTOCAST_PER_DEVICE_TYPE
bool AutocastEnabled(c10::DeviceType type) { return at::autocast::is_autocast_enabled(type); }
void SetAutocastEnabled(c10::DeviceType type, bool on) {
  at::autocast::set_autocast_enabled(type, on);
}
torch::ScalarType AutocastDtype(c10::DeviceType type) {
  return at::autocast::get_autocast_dtype(type);
}
void SetAutocastDtype(c10::DeviceType type, torch::ScalarType dtype) {
  at::autocast::set_autocast_dtype(type, dtype);
}
#else
bool AutocastEnabled(c10::DeviceType type) {
  return type == c10::DeviceType::CUDA ? at::autocast::is_enabled()
                                       : at::autocast::is_cpu_enabled();
}
void SetAutocastEnabled(c10::DeviceType type, bool on) {
  if (type == c10::DeviceType::CUDA) {
    at::autocast::set_enabled(on);
  } else {
    at::autocast::set_cpu_enabled(on);
  }
}
torch::ScalarType AutocastDtype(c10::DeviceType type) {
  return type == c10::DeviceType::CUDA ? at::autocast::get_autocast_gpu_dtype()
                                       : at::autocast::get_autocast_cpu_dtype();
}
void SetAutocastDtype(c10::DeviceType type, torch::ScalarType dtype) {
  if (type == c10::DeviceType::CUDA) {
    at::autocast::set_autocast_gpu_dtype(dtype);
  } else {
    at::autocast::set_autocast_cpu_dtype(dtype);
  }
}
#endif

}  // namespace

absl::StatusOr<torch::Device> ModelDevice(const ModelOptions& options) {
  if (options.device == "cpu") return torch::Device(torch::kCPU);
  const std::string where = StrCat("model.device = \"", options.device, "\"");
  if (!options.device.starts_with("cuda")) {
    return absl::InvalidArgumentError(StrCat(where, ": use \"cpu\", \"cuda\" or \"cuda:N\""));
  }
  if (!torch::cuda::is_available()) {
    return absl::FailedPreconditionError(StrCat(
        where, ": this LibTorch (", TORCH_VERSION,
        ") has no CUDA or sees no GPU; build against a CUDA LibTorch (scripts/gpu-build) on a "
        "machine with a GPU, or set model.device = \"cpu\""));
  }
  if (options.device == "cuda") return torch::Device(torch::kCUDA);
  const int64_t index = std::stoll(options.device.substr(5));  // digits: Validate checked
  const int64_t count = static_cast<int64_t>(torch::cuda::device_count());
  if (index >= count) {
    return absl::FailedPreconditionError(
        StrCat(where, ": this machine has ", count, " GPU(s), cuda:0 to cuda:", count - 1));
  }
  return torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(index));
}

torch::ScalarType ModelDtype(const ModelOptions& options) {
  return options.dtype == "bfloat16" ? torch::kBFloat16 : torch::kFloat32;
}

AutocastScope::AutocastScope(torch::Device device, torch::ScalarType dtype) {
  if (dtype == torch::kFloat32) return;
  active_ = true;
  type_ = device.type();
  was_enabled_ = AutocastEnabled(type_);
  was_dtype_ = AutocastDtype(type_);
  SetAutocastEnabled(type_, true);
  SetAutocastDtype(type_, dtype);
  at::autocast::increment_nesting();
}

AutocastScope::~AutocastScope() {
  if (!active_) return;
  // The casts of the weights are cached while any scope is open (each weight is cast once per
  // forward, not once per use); the outermost scope drops them, as torch.autocast does.
  if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
  SetAutocastEnabled(type_, was_enabled_);
  SetAutocastDtype(type_, was_dtype_);
}

}  // namespace flywheel
