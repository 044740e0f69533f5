// The BLAS under LibTorch's CPU matmuls and the size of its own thread pool.
//
// Debian's libtorch calls the system libblas.so.3, which is OpenBLAS when libopenblas0-pthread
// is installed. OpenBLAS keeps a pthread pool of its own beside LibTorch's intra-op threads, sized
// to every core unless told otherwise. Each GEMM hands slices to the pool, whose threads then
// busy-wait (a sched_yield loop) for the next call: between a learner's small GEMMs, or while
// actor threads decode, that loop shows as system time and takes cores from the job's own
// threads. The runtime therefore sets the pool's size per process (run.blas_threads, see
// runtime/blas_choice.h) instead of leaving OpenBLAS's default.
//
// Everything here is looked up at run time (dlsym): a process on another BLAS (reference BLAS,
// MKL, a CUDA LibTorch's bundled one) reports what it found and leaves it alone.
#ifndef FLYWHEEL_MODEL_BLAS_THREADS_H_
#define FLYWHEEL_MODEL_BLAS_THREADS_H_

#include <string>

#include "absl/status/status.h"

namespace flywheel {

struct BlasInfo {
  std::string library = "unknown";  // path of the BLAS mapped into the process
  std::string parallel = "unknown";  // OpenBLAS's threading model: pthreads, openmp or serial
  int threads = 0;                   // OpenBLAS's pool size now; 0 where not OpenBLAS
  bool settable = false;             // openblas_set_num_threads is available

  std::string DebugString() const;
};

BlasInfo LoadedBlas();

// Sets OpenBLAS's pool size for the whole process (it is not per thread). kUnimplemented where
// the BLAS has no such call; the caller decides whether that matters.
absl::Status SetBlasThreads(int threads);

}  // namespace flywheel

#endif  // FLYWHEEL_MODEL_BLAS_THREADS_H_
