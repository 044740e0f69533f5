// actor.backend = "auto": which decode backend is faster for this model and batch on this
// machine, decided by timing both rather than by a rule. The CPU decoder wins at the sizes it
// was written for (small models, per-op overhead dominating LibTorch), but how much depends on
// the vector unit, the model width and the batch; a fixed rule once picked a decoder 5x slower
// than LibTorch ops on CPUs without AVX-512.
//
//   first Step of an auto engine, prompts of the generating sequences
//        │
//        ├─▶ scratch engine, backend = cpu   ─┐  prefill (untimed), then `rounds` × `steps`
//        └─▶ scratch engine, backend = torch ─┘  decode steps, alternating; best round each
//        ▼
//   BackendChoice{chosen, cpu tokens/s, torch tokens/s} ─▶ logged; the engine builds that backend
#ifndef FLYWHEEL_ACTOR_BACKEND_CHOICE_H_
#define FLYWHEEL_ACTOR_BACKEND_CHOICE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "flywheel/actor/rollout_options.h"
#include "flywheel/model/weight_snapshot.h"

namespace flywheel {

struct BackendChoice {
  DecodeBackend chosen = DecodeBackend::kCpu;
  // Decode tokens/s of each backend in the measurement; 0 when it was not measured (the CPU
  // decoder cannot run these weights).
  double cpu_tokens_per_s = 0;
  double torch_tokens_per_s = 0;
  std::string cpu_target;  // the SIMD target the CPU decoder ran on (simd_kernels.h)
  int64_t sequences = 0;   // batch size of the measurement
  std::string DebugString() const;
};

struct BackendMeasureOptions {
  int64_t steps = 4;   // timed decode steps per round
  int64_t rounds = 2;  // rounds per backend, alternating; the fastest round counts
};

// Times both backends on `snapshot` with one sequence per prompt (the prompts of the batch the
// engine is about to decode) and returns the faster. `options` are the engine's (threads, cache
// sizes); its `backend` is ignored. Weights the CPU decoder cannot run choose LibTorch ops
// without measuring.
absl::StatusOr<BackendChoice> MeasureBackends(const RolloutEngineOptions& options,
                                              std::shared_ptr<const WeightSnapshot> snapshot,
                                              const std::vector<std::vector<int64_t>>& prompts,
                                              const BackendMeasureOptions& measure = {});

}  // namespace flywheel

#endif  // FLYWHEEL_ACTOR_BACKEND_CHOICE_H_
