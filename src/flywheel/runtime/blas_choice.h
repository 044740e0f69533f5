// How many threads OpenBLAS's own pool gets in this process (run.blas_threads; 0 = auto), per
// role (model/blas_threads.h says why the pool matters):
//
//   kEmbedded (flywheel train)   1: the actor threads and the learner thread already occupy the
//                                cores; a pool on top oversubscribes them and busy-waits between
//                                the small GEMMs (measured in docs/model.md: system time 57 % of
//                                user time on the main job with OpenBLAS's default pool).
//   kLearnerProcess              measured at start-up: the learner's GEMM shapes (one micro-batch
//   (flywheel learner)           of token_budget rows through the model's projections) timed with
//                                1 thread and with every core, alternately; more threads are kept
//                                only when they make those GEMMs at least 1.25x faster.
//   kActorProcess (flywheel actor) 1: decode GEMMs have a few rows; the CPU decoder uses no BLAS.
//
// A configured run.blas_threads > 0 is applied as it is. Where the BLAS is not OpenBLAS nothing is
// changed and the choice says so.
#ifndef FLYWHEEL_RUNTIME_BLAS_CHOICE_H_
#define FLYWHEEL_RUNTIME_BLAS_CHOICE_H_

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "absl/status/statusor.h"
#include "flywheel/model/model_options.h"

namespace flywheel {

enum class BlasRole { kEmbedded, kLearnerProcess, kActorProcess };

struct BlasChoice {
  std::string library;
  int threads_before = 0;  // OpenBLAS's pool size as loaded
  int threads = 0;         // chosen (0: not OpenBLAS, left alone)
  std::string reason;
  // kLearnerProcess auto only: median seconds of the GEMM probe at 1 and at `cores` threads.
  double probe_seconds_one = 0;
  double probe_seconds_many = 0;
  int cores = 0;

  nlohmann::json ToJson() const;
  std::string DebugString() const;
};

// Decides and applies the pool size. `configured` is run.blas_threads.
absl::StatusOr<BlasChoice> ChooseBlasThreads(BlasRole role, int64_t configured,
                                             const ModelOptions& model, int64_t token_budget);

}  // namespace flywheel

#endif  // FLYWHEEL_RUNTIME_BLAS_CHOICE_H_
