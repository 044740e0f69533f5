// LibTorch's own profiler (Kineto) around a piece of a benchmark: which operators ran on the host
// and, on CUDA, which kernels ran on the device and for how long. The trace is Chrome's JSON
// format (chrome://tracing, Perfetto); scripts/gpu/trace_summary.py sums its kernels by name.
// Used where no system profiler can attach (the GPU machine has no Nsight Systems).
#ifndef FLYWHEEL_BENCH_TORCH_PROFILE_H_
#define FLYWHEEL_BENCH_TORCH_PROFILE_H_

#include <functional>
#include <string>

#include "absl/status/status.h"

namespace flywheel::bench {

// Runs `body` with the profiler recording host operators (and CUDA kernels when `cuda`) and
// writes the trace to `path`. `body`'s status is returned; a profiler that cannot start or save
// is an error of its own, after `body` ran.
absl::Status WriteTorchProfile(const std::string& path, bool cuda,
                               const std::function<absl::Status()>& body);

}  // namespace flywheel::bench

#endif  // FLYWHEEL_BENCH_TORCH_PROFILE_H_
