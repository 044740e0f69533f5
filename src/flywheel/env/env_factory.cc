#include "flywheel/env/env_factory.h"

#include "flywheel/core/status_macros.h"
#include "flywheel/env/latency/latency_env.h"
#include "flywheel/env/observation_limit.h"
#include "flywheel/env/process/process_env.h"
#include "flywheel/env/tasks/calc.h"
#include "flywheel/env/tasks/copy.h"
#include "flywheel/env/tasks/guess.h"
#include "flywheel/env/tasks/repair.h"

namespace flywheel {

EnvFactory::EnvFactory(const EnvOptions& options, Clock* wait_clock)
    : options_(options), wait_clock_(wait_clock) {}

EnvFactory::~EnvFactory() = default;

absl::StatusOr<std::unique_ptr<EnvFactory>> EnvFactory::Create(const EnvOptions& options,
                                                               Clock* wait_clock) {
  RETURN_IF_ERROR(options.Validate());
  std::unique_ptr<EnvFactory> f(new EnvFactory(options, wait_clock));
  ASSIGN_OR_RETURN(f->step_latency_, LatencyModelFactory::Create(options.latency));
  ASSIGN_OR_RETURN(f->tool_latency_, LatencyModelFactory::Create(options.tool_latency));
  if (options.kind == EnvKind::kProcess) {
    ASSIGN_OR_RETURN(f->pool_, ProcessPool::Create(options.process, options.max_observation_bytes));
    f->task_name_ = f->pool_->name();
    f->vocabulary_ = f->pool_->vocabulary();
  } else {
    for (const auto& n : kEnvKindNames) {
      if (n.value == options.kind) f->task_name_ = std::string(n.name);
    }
    f->vocabulary_ = f->NewUnwrapped()->vocabulary();
  }
  return f;
}

void EnvFactory::Interrupt() const {
  if (pool_ != nullptr) pool_->Interrupt();
}

std::unique_ptr<Environment> EnvFactory::NewUnwrapped() const {
  switch (options_.kind) {
    case EnvKind::kGuess:
      return std::make_unique<GuessEnv>(options_.guess);
    case EnvKind::kCalc:
      return std::make_unique<CalcEnv>(options_.calc);
    case EnvKind::kRepair:
      return std::make_unique<RepairEnv>(options_.repair);
    case EnvKind::kCopy:
      return std::make_unique<CopyEnv>(options_.copy);
    case EnvKind::kProcess:
      return std::make_unique<ProcessEnv>(pool_);
  }
  return nullptr;
}

std::unique_ptr<Environment> EnvFactory::NewEnvironment() const {
  std::unique_ptr<Environment> env = NewUnwrapped();
  if (options_.kind != EnvKind::kProcess) {  // process environments cut (and log) themselves
    env = std::make_unique<ObservationLimitEnv>(
        std::move(env), static_cast<size_t>(options_.max_observation_bytes));
  }
  if (!step_latency_->enabled() && !tool_latency_->enabled()) return env;
  return std::make_unique<LatencyEnv>(std::move(env), step_latency_, tool_latency_, wait_clock_);
}

absl::StatusOr<std::unique_ptr<Policy>> EnvFactory::MakeExpert() const {
  switch (options_.kind) {
    case EnvKind::kGuess:
      return MakeGuessExpert(options_.guess);
    case EnvKind::kCalc:
      return MakeCalcExpert();
    case EnvKind::kRepair:
      return MakeRepairExpert(options_.repair);
    case EnvKind::kCopy:
      return MakeCopyExpert();
    case EnvKind::kProcess:
      break;
  }
  return absl::NotFoundError("process environments have no built-in expert policy");
}

absl::StatusOr<std::unique_ptr<Policy>> EnvFactory::MakeRandom(uint64_t seed) const {
  switch (options_.kind) {
    case EnvKind::kGuess:
      return MakeGuessRandom(options_.guess, seed);
    case EnvKind::kCalc:
      return MakeCalcRandom(options_.calc, seed);
    case EnvKind::kRepair:
      return MakeRepairRandom(options_.repair, seed);
    case EnvKind::kCopy:
      return MakeCopyRandom(options_.copy, seed);
    case EnvKind::kProcess:
      break;
  }
  return MakeRandomWordPolicy(vocabulary_, seed);  // random words of the declared vocabulary
}

std::string EnvFactory::DebugString() const { return NewEnvironment()->DebugString(); }

}  // namespace flywheel
