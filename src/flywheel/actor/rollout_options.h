// Options of an actor's rollout engine; the [actor] section of a job config. No torch: the config
// layer includes it.
#ifndef FLYWHEEL_ACTOR_ROLLOUT_OPTIONS_H_
#define FLYWHEEL_ACTOR_ROLLOUT_OPTIONS_H_

#include <cstdint>

#include "absl/status/status.h"
#include "flywheel/core/config.h"

namespace flywheel {

enum class KvOnSwap { kKeep, kRecompute };
// auto: whichever of the two is faster on this model and batch, timed at the engine's first step
// (actor/backend_choice.h; LibTorch ops without timing for weights the CPU decoder cannot run);
// cpu: always the hand-written CPU decoder (model/cpu_decoder.h; an error for weights that are
// not float32 on the CPU); torch: always LibTorch ops (GPU weights, or to compare).
enum class DecodeBackend { kAuto, kCpu, kTorch };
inline constexpr config::ChoiceName<DecodeBackend> kDecodeBackendNames[] = {
    {"auto", DecodeBackend::kAuto}, {"cpu", DecodeBackend::kCpu}, {"torch", DecodeBackend::kTorch}};
// Decode steps as CUDA graphs (actor/decode_graphs.h). auto: on a GPU with the LibTorch backend;
// on: also on a CPU, where the same fixed-shape step runs without a graph (no gain: it is how
// the step is checked without a GPU); off: every step's operations launched one by one.
enum class DecodeGraphMode { kAuto, kOn, kOff };
inline constexpr config::ChoiceName<DecodeGraphMode> kDecodeGraphModeNames[] = {
    {"auto", DecodeGraphMode::kAuto}, {"on", DecodeGraphMode::kOn}, {"off", DecodeGraphMode::kOff}};
inline constexpr config::ChoiceName<KvOnSwap> kKvOnSwapNames[] = {
    {"keep", KvOnSwap::kKeep}, {"recompute", KvOnSwap::kRecompute}};

struct RolloutEngineOptions {
  int64_t intra_op_threads = 0;  // 0 = leave the thread's setting as it is
  KvOnSwap kv_on_swap = KvOnSwap::kKeep;
  int64_t initial_slots = 8;       // KV cache sequences before the first growth
  int64_t initial_capacity = 256;  // KV cache positions before the first growth
  DecodeBackend backend = DecodeBackend::kAuto;
  DecodeGraphMode decode_graphs = DecodeGraphMode::kAuto;
  int64_t max_decode_graphs = 8;

  template <typename V>
  void VisitFields(V& v) {
    v.Field("intra_op_threads", intra_op_threads, "LibTorch threads of this actor (0 = default)");
    v.Choice("kv_on_swap", kv_on_swap, kKvOnSwapNames,
             "cached keys/values at a weight swap: keep, or recompute with the new weights");
    v.Field("initial_slots", initial_slots, "KV cache sequences allocated up front");
    v.Field("initial_capacity", initial_capacity, "KV cache positions allocated up front");
    v.Choice("backend", backend, kDecodeBackendNames,
             "decode with the CPU kernel (cpu), LibTorch ops (torch), or the faster of the two "
             "measured at the first step (auto)");
    v.Choice("decode_graphs", decode_graphs, kDecodeGraphModeNames,
             "replay decode steps as CUDA graphs: auto (on a GPU), on, off");
    v.Field("max_decode_graphs", max_decode_graphs,
            "CUDA graphs kept (one per batch and key-length bucket), least recently used dropped");
  }
  absl::Status Validate() const {
    if (intra_op_threads < 0) {
      return absl::InvalidArgumentError("actor.intra_op_threads must be >= 0 (0 = default)");
    }
    if (initial_slots <= 0 || initial_capacity <= 0) {
      return absl::InvalidArgumentError(
          "actor.initial_slots and actor.initial_capacity must be > 0");
    }
    if (max_decode_graphs <= 0) {
      return absl::InvalidArgumentError("actor.max_decode_graphs must be > 0");
    }
    return absl::OkStatus();
  }
};

}  // namespace flywheel

#endif  // FLYWHEEL_ACTOR_ROLLOUT_OPTIONS_H_
