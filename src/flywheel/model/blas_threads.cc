#include "flywheel/model/blas_threads.h"

#include <dlfcn.h>

#include <fstream>

#include "flywheel/core/strings.h"

namespace flywheel {
namespace {

template <typename Fn>
Fn Lookup(const char* name) {
  return reinterpret_cast<Fn>(dlsym(RTLD_DEFAULT, name));
}

std::string MappedBlasPath() {
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

std::string BlasInfo::DebugString() const {
  if (threads == 0) return StrCat(library, " (not OpenBLAS: its threads are left as they are)");
  return StrCat(library, " (OpenBLAS, ", parallel, ", ", threads, " threads)");
}

BlasInfo LoadedBlas() {
  BlasInfo info;
  info.library = MappedBlasPath();
  if (auto get = Lookup<int (*)()>("openblas_get_num_threads")) info.threads = get();
  if (auto parallel = Lookup<int (*)()>("openblas_get_parallel")) {
    switch (parallel()) {
      case 0: info.parallel = "serial"; break;
      case 1: info.parallel = "pthreads"; break;
      case 2: info.parallel = "openmp"; break;
      default: break;
    }
  }
  info.settable = Lookup<void (*)(int)>("openblas_set_num_threads") != nullptr;
  return info;
}

absl::Status SetBlasThreads(int threads) {
  if (threads < 1) return absl::InvalidArgumentError(StrCat("BLAS threads (", threads, ") < 1"));
  auto set = Lookup<void (*)(int)>("openblas_set_num_threads");
  if (set == nullptr) {
    return absl::UnimplementedError(
        StrCat("the BLAS in this process (", MappedBlasPath(), ") has no openblas_set_num_threads"));
  }
  set(threads);
  return absl::OkStatus();
}

}  // namespace flywheel
