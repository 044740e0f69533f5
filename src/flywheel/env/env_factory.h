// Builds the configured environment: one per episode slot, wrapped with the latency models.
// The factory is created once per job from EnvOptions and shared by actors; it is thread-safe.
// For kind = "process" it owns the pool of running processes that the environments lease.
#ifndef FLYWHEEL_ENV_ENV_FACTORY_H_
#define FLYWHEEL_ENV_ENV_FACTORY_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "flywheel/core/clock.h"
#include "flywheel/env/env_options.h"
#include "flywheel/env/interface.h"
#include "flywheel/env/latency/latency_model.h"
#include "flywheel/env/policy.h"

namespace flywheel {

class ProcessPool;

class EnvFactory {
 public:
  // Reads latency traces and, for process environments, starts the processes and checks their
  // handshake. `wait_clock` as for LatencyEnv: nullptr to report latency to an EnvExecutor.
  static absl::StatusOr<std::unique_ptr<EnvFactory>> Create(const EnvOptions& options,
                                                            Clock* wait_clock = nullptr);
  ~EnvFactory();

  // A new environment (not thread-safe itself; one episode at a time).
  std::unique_ptr<Environment> NewEnvironment() const;

  // The task name carried by TaskInstance::task ("guess", or the process's declared name).
  const std::string& task_name() const { return task_name_; }
  const VocabularySpec& vocabulary() const { return vocabulary_; }

  // Scripted policies of built-in tasks. Process environments have no expert (NotFound); their
  // random policy picks words of the declared vocabulary (InvalidArgument for bytes).
  absl::StatusOr<std::unique_ptr<Policy>> MakeExpert() const;
  absl::StatusOr<std::unique_ptr<Policy>> MakeRandom(uint64_t seed) const;

  // Ends every environment call and resource wait in flight now (ProcessPool::Interrupt): a
  // stopping job has its executor's Close call it, so that a hung environment process cannot hold
  // the stop. Built-in tasks never block; for them it does nothing.
  void Interrupt() const;

  std::string DebugString() const;

 private:
  EnvFactory(const EnvOptions& options, Clock* wait_clock);
  std::unique_ptr<Environment> NewUnwrapped() const;

  const EnvOptions options_;
  Clock* const wait_clock_;
  std::shared_ptr<const LatencyModelFactory> step_latency_, tool_latency_;
  std::shared_ptr<ProcessPool> pool_;
  std::string task_name_;
  VocabularySpec vocabulary_;
};

}  // namespace flywheel

#endif  // FLYWHEEL_ENV_ENV_FACTORY_H_
