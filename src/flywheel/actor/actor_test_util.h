// A one-actor fixture for the actor tests: the guess task with a constant step latency, a tiny
// policy, and a sink that collects the trajectories.
#ifndef FLYWHEEL_ACTOR_ACTOR_TEST_UTIL_H_
#define FLYWHEEL_ACTOR_ACTOR_TEST_UTIL_H_

#include <memory>
#include <utility>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "flywheel/actor/actor.h"
#include "flywheel/actor/env_tokenizer.h"
#include "flywheel/model/weight_snapshot.h"

namespace flywheel {

struct ActorHarness {
  // `max_seq_len` 0 keeps the model's default.
  explicit ActorHarness(double latency_ms, ActorOptions actor_options = {},
                        int64_t max_seq_len = 0) {
    EnvOptions env_options;
    env_options.latency.model = LatencyKind::kConstant;
    env_options.latency.mean_ms = latency_ms;
    factory = *EnvFactory::Create(env_options);
    executor = std::make_unique<EnvExecutor>(EnvExecutor::Options{.num_workers = 1});
    tokenizer = *MakeTokenizer(factory->vocabulary());
    ModelOptions model_options;
    model_options.vocab_size = tokenizer->vocab_size();
    model_options.hidden_size = 32;
    model_options.num_layers = 1;
    model_options.num_heads = 2;
    model_options.num_kv_heads = 1;
    model_options.intermediate_size = 64;
    if (max_seq_len > 0) model_options.max_seq_len = max_seq_len;
    model = *MakeTransformer(model_options);
    tasks = std::make_unique<TaskSource>(factory->task_name(), 7, 4);
    actor_options.episodes_in_flight = 6;
    actor_options.max_new_tokens = 3;
    actor_options.max_turns = 4;
    actor = std::make_unique<Actor>(
        "actor-0", actor_options, SamplingParams{},
        *RolloutEngine::Create({}, *MakeSnapshot(model, 0)), factory.get(), executor.get(),
        tokenizer.get(), tasks.get(),
        [this](Trajectory t) {
          absl::MutexLock lock(&mu);
          trajectories.push_back(std::move(t));
          return absl::OkStatus();
        },
        11);
  }
  ~ActorHarness() {
    executor->Close();
    actor.reset();
  }
  std::vector<Trajectory> Take() {
    absl::MutexLock lock(&mu);
    return std::exchange(trajectories, {});
  }

  std::unique_ptr<EnvFactory> factory;
  std::unique_ptr<EnvExecutor> executor;
  std::unique_ptr<Tokenizer> tokenizer;
  Transformer model{nullptr};
  std::unique_ptr<TaskSource> tasks;
  std::unique_ptr<Actor> actor;
  absl::Mutex mu;
  std::vector<Trajectory> trajectories ABSL_GUARDED_BY(mu);
};

}  // namespace flywheel

#endif  // FLYWHEEL_ACTOR_ACTOR_TEST_UTIL_H_
