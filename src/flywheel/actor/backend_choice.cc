#include "flywheel/actor/backend_choice.h"

#include <algorithm>
#include <chrono>
#include <limits>

#include "flywheel/actor/rollout_engine.h"
#include "flywheel/core/status_macros.h"
#include "flywheel/core/strings.h"
#include "flywheel/model/cpu_decoder.h"
#include "flywheel/model/simd_kernels.h"

namespace flywheel {
namespace {

const char* BackendName(DecodeBackend backend) {
  return backend == DecodeBackend::kCpu     ? "cpu"
         : backend == DecodeBackend::kTorch ? "torch"
                                            : "auto";
}

// A scratch engine on `backend` with the prompts prefilled, ready to decode.
absl::StatusOr<std::unique_ptr<RolloutEngine>> Prefilled(
    RolloutEngineOptions options, DecodeBackend backend,
    std::shared_ptr<const WeightSnapshot> snapshot,
    const std::vector<std::vector<int64_t>>& prompts, int64_t new_tokens) {
  options.backend = backend;
  ASSIGN_OR_RETURN(auto engine, RolloutEngine::Create(options, std::move(snapshot)));
  for (size_t i = 0; i < prompts.size(); ++i) {
    ASSIGN_OR_RETURN(SequenceId id, engine->AddSequence(prompts[i], {{}, i}));
    RETURN_IF_ERROR(engine->StartTurn(id, {new_tokens, {}}));
  }
  RETURN_IF_ERROR(engine->Step().status());  // the prefill, not timed
  return engine;
}

// Seconds of `steps` decode steps.
absl::StatusOr<double> TimeSteps(RolloutEngine& engine, int64_t steps) {
  const auto start = std::chrono::steady_clock::now();
  for (int64_t i = 0; i < steps; ++i) RETURN_IF_ERROR(engine.Step().status());
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

std::string BackendChoice::DebugString() const {
  return StrCat("BackendChoice{chosen=", BackendName(chosen), " cpu_decoder(", cpu_target,
                ")=", static_cast<int64_t>(cpu_tokens_per_s),
                " tokens/s libtorch_ops=", static_cast<int64_t>(torch_tokens_per_s),
                " tokens/s sequences=", sequences, "}");
}

absl::StatusOr<BackendChoice> MeasureBackends(const RolloutEngineOptions& options,
                                              std::shared_ptr<const WeightSnapshot> snapshot,
                                              const std::vector<std::vector<int64_t>>& prompts,
                                              const BackendMeasureOptions& measure) {
  BackendChoice choice;
  choice.sequences = static_cast<int64_t>(prompts.size());
  choice.cpu_target = simd::TargetName(simd::CurrentTarget());
  if (snapshot == nullptr || snapshot->model.is_empty()) {
    return absl::InvalidArgumentError("choosing the decode backend: no weight snapshot");
  }
  if (!CpuDecoderWeights::Supports(snapshot->model)) {
    choice.chosen = DecodeBackend::kTorch;
    return choice;
  }
  if (prompts.empty() || measure.steps <= 0 || measure.rounds <= 0) {
    return absl::InvalidArgumentError(
        "choosing the decode backend: needs at least one prompt, one step and one round");
  }
  // Room for the prefill's token and every timed step: prompts longer than that keep their
  // last tokens (the cost of a step depends on the length, not on the tokens).
  const int64_t new_tokens = 1 + measure.steps * measure.rounds;
  const int64_t max_prompt = snapshot->model->options().max_seq_len - new_tokens;
  if (max_prompt < 1) {
    return absl::InvalidArgumentError("choosing the decode backend: model.max_seq_len too short");
  }
  std::vector<std::vector<int64_t>> fitted;
  for (const auto& p : prompts) {
    if (p.empty()) return absl::InvalidArgumentError("choosing the decode backend: empty prompt");
    const int64_t keep = std::min<int64_t>(max_prompt, static_cast<int64_t>(p.size()));
    fitted.emplace_back(p.end() - keep, p.end());
  }
  ASSIGN_OR_RETURN(auto cpu, Prefilled(options, DecodeBackend::kCpu, snapshot, fitted, new_tokens));
  ASSIGN_OR_RETURN(auto torch,
                   Prefilled(options, DecodeBackend::kTorch, snapshot, fitted, new_tokens));
  double cpu_best = std::numeric_limits<double>::infinity(), torch_best = cpu_best;
  for (int64_t r = 0; r < measure.rounds; ++r) {
    ASSIGN_OR_RETURN(const double cpu_s, TimeSteps(*cpu, measure.steps));
    ASSIGN_OR_RETURN(const double torch_s, TimeSteps(*torch, measure.steps));
    cpu_best = std::min(cpu_best, cpu_s);
    torch_best = std::min(torch_best, torch_s);
  }
  const double tokens = static_cast<double>(measure.steps * choice.sequences);
  choice.cpu_tokens_per_s = tokens / cpu_best;
  choice.torch_tokens_per_s = tokens / torch_best;
  choice.chosen = choice.cpu_tokens_per_s >= choice.torch_tokens_per_s ? DecodeBackend::kCpu
                                                                       : DecodeBackend::kTorch;
  return choice;
}

}  // namespace flywheel
