// Machine description for benchmark reports: cores, LibTorch version and threads, and the BLAS
// library actually loaded (Debian's libtorch calls the system libblas.so.3, which is OpenBLAS
// only when libopenblas0-pthread is installed).
#include <fstream>
#include <string>
#include <thread>

#include <torch/torch.h>

#include "bench/bench.h"

namespace flywheel::bench {
namespace {

std::string LoadedBlas() {
  std::ifstream maps("/proc/self/maps");
  std::string line;
  std::string found = "unknown";
  while (std::getline(maps, line)) {
    const size_t slash = line.find('/');
    if (slash == std::string::npos) continue;
    const std::string path = line.substr(slash);
    if (path.find("openblas") != std::string::npos) return path;
    if (path.find("libmkl") != std::string::npos) return path;
    if (path.find("libblas") != std::string::npos) found = path;
  }
  return found;
}

}  // namespace

nlohmann::json MachineInfo() {
  return {{"cores", std::thread::hardware_concurrency()},
          {"torch_threads", torch::get_num_threads()},
          {"torch_version", TORCH_VERSION},
          {"blas", LoadedBlas()}};
}

}  // namespace flywheel::bench
