// Machine description for benchmark reports: cores, LibTorch version and threads, and the BLAS
// library actually loaded (Debian's libtorch calls the system libblas.so.3, which is OpenBLAS
// only when libopenblas0-pthread is installed).
#include <string>
#include <thread>

#include <torch/torch.h>

#include "bench/bench.h"
#include "flywheel/model/blas_threads.h"
#include "flywheel/model/simd_kernels.h"

namespace flywheel::bench {

nlohmann::json MachineInfo() {
  std::vector<std::string> simd_targets;  // that this CPU runs, best (the default) first
  for (int64_t t : simd::SupportedTargets()) simd_targets.push_back(simd::TargetName(t));
  return {{"cores", std::thread::hardware_concurrency()},
          {"simd_targets", simd_targets},
          {"torch_threads", torch::get_num_threads()},
          {"torch_version", TORCH_VERSION},
          {"blas", LoadedBlas().library}};
}

}  // namespace flywheel::bench
