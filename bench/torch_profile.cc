#include "bench/torch_profile.h"

#ifdef FLYWHEEL_HAVE_TORCH_PROFILER
#include <torch/csrc/autograd/profiler_kineto.h>

#include <memory>
#include <set>

#include "flywheel/core/status_macros.h"
#include "flywheel/core/strings.h"
#include "flywheel/model/torch_status.h"
#endif

namespace flywheel::bench {

absl::Status WriteTorchProfile(const std::string& path, bool cuda,
                               const std::function<absl::Status()>& body) {
#ifdef FLYWHEEL_HAVE_TORCH_PROFILER
  namespace impl = torch::profiler::impl;
  namespace profiler = torch::autograd::profiler;
  const impl::ProfilerConfig config(impl::ProfilerState::KINETO);
  std::set<impl::ActivityType> activities = {impl::ActivityType::CPU};
  if (cuda) activities.insert(impl::ActivityType::CUDA);
  RETURN_IF_ERROR(TorchCall("starting the profiler", [&] {
    profiler::prepareProfiler(config, activities);
    profiler::enableProfiler(config, activities);
  }));
  const absl::Status ran = body();
  std::unique_ptr<profiler::ProfilerResult> result;
  RETURN_IF_ERROR(TorchCall("stopping the profiler", [&] { result = profiler::disableProfiler(); }));
  RETURN_IF_ERROR(ran);
  if (result == nullptr) return absl::InternalError("the profiler returned no result");
  return TorchCall(StrCat("saving the profile to ", path), [&] { result->save(path); });
#else
  return absl::UnimplementedError(
      "this build's LibTorch headers have no profiler API (bench/CMakeLists.txt checks for it)");
#endif
}

}  // namespace flywheel::bench
