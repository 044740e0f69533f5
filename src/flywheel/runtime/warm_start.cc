#include "flywheel/runtime/warm_start.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <numeric>
#include <random>
#include <string>

#include "flywheel/core/status_macros.h"
#include "flywheel/core/strings.h"
#include "flywheel/env/policy.h"
#include "flywheel/env/task_source.h"
#include "flywheel/learner/optimizer.h"
#include "flywheel/learner/packer.h"
#include "flywheel/learner/token_logprobs.h"
#include "flywheel/model/torch_status.h"
#include "flywheel/runtime/sft_conversations.h"
#include "flywheel/runtime/transformer_policy.h"

namespace flywheel {
namespace {

// One expert episode in the actor's token layout.
absl::StatusOr<Trajectory> ExpertEpisode(const JobConfig& config, const EnvFactory& factory,
                                         const PolicyText& text, Policy& expert,
                                         const TaskInstance& task) {
  std::unique_ptr<Environment> env = factory.NewEnvironment();
  Trajectory t;
  t.id = StrCat("expert-", task.seed, "-", task.group, "-", task.rollout);
  t.env_name = factory.task_name();
  ASSIGN_OR_RETURN(StepResult step, env->Reset(task));
  expert.Begin(task, step.observation);
  for (int64_t turn = 0; turn < config.actor.max_turns && !step.done; ++turn) {
    const std::string action = expert.Act(step.observation);
    const absl::Status appended = AppendExchange(config, text, step.observation, action, t);
    if (!appended.ok()) {
      return absl::Status(appended.code(), StrCat("sft: the expert's turn: ", appended.message()));
    }
    ASSIGN_OR_RETURN(step, env->Step(action));
    t.turn_rewards.push_back(static_cast<float>(step.reward));
    t.final_reward += static_cast<float>(step.reward);
  }
  env->Close();
  return t;
}

}  // namespace

absl::StatusOr<std::vector<Trajectory>> ExpertTrajectories(const JobConfig& config,
                                                           const EnvFactory& factory,
                                                           const PolicyText& text, uint64_t seed,
                                                           int64_t count) {
  ASSIGN_OR_RETURN(std::unique_ptr<Policy> expert, factory.MakeExpert());
  TaskSource tasks(factory.task_name(), seed, /*group_size=*/1);
  std::vector<Trajectory> out;
  out.reserve(count);
  for (int64_t i = 0; i < count; ++i) {
    ASSIGN_OR_RETURN(Trajectory t, ExpertEpisode(config, factory, text, *expert, tasks.Next()));
    out.push_back(std::move(t));
  }
  return out;
}

absl::StatusOr<WarmStartResult> SupervisedWarmStart(const JobConfig& config,
                                                    const EnvFactory& factory,
                                                    const PolicyText& text, Transformer model,
                                                    const RunStop* stop) {
  const SftOptions& sft = config.sft;
  WarmStartResult result;
  if (!sft.enabled()) return result;
  LearnerOptions lo = config.learner;
  lo.lr = sft.lr > 0 ? sft.lr : config.learner.lr;
  lo.warmup_steps = std::min(lo.warmup_steps, sft.steps);
  lo.total_steps = sft.steps;
  Optimizer optimizer(model->parameters(), OptimizerOptions::FromLearnerOptions(lo, sft.steps));
  PackerOptions po = PackerOptions::FromLearnerOptions(lo);
  po.carry_over = false;
  po.aggregation = LossAggregation::kTokenMean;
  Packer packer(po);
  const PolicyForward forward = TransformerPolicy(model);
  const uint64_t seed =
      static_cast<uint64_t>(sft.seed != 0 ? sft.seed : config.run.seed) * 7919u + 17u;
  // sft.source = "jsonl": the whole file, checked before the first step; each step takes the
  // next episodes_per_step conversations of a seeded shuffle, a new one every pass.
  std::vector<Trajectory> conversations;
  std::vector<size_t> order;
  std::mt19937_64 shuffle(seed);
  size_t next = 0;
  if (sft.source == "jsonl") {
    ASSIGN_OR_RETURN(conversations, ReadSftConversations(sft.path, config, text,
                                                         model->options().max_seq_len));
    order.resize(conversations.size());
    std::iota(order.begin(), order.end(), 0);
    std::shuffle(order.begin(), order.end(), shuffle);
    spdlog::info("sft: {} conversations from {}", conversations.size(), sft.path);
  }
  double reward = 0;
  for (int64_t step = 0; step < sft.steps; ++step) {
    if (stop != nullptr && stop->Reached()) {
      spdlog::info("sft: stopped after {} of {} steps ({})", step, sft.steps, stop->Reason());
      result.stopped = true;
      break;
    }
    std::vector<Trajectory> batch;
    if (conversations.empty()) {
      ASSIGN_OR_RETURN(batch, ExpertTrajectories(config, factory, text, seed + step * 1000003u,
                                                 sft.episodes_per_step));
    } else {
      for (int64_t i = 0; i < sft.episodes_per_step; ++i) {
        if (next == order.size()) {
          std::shuffle(order.begin(), order.end(), shuffle);
          next = 0;
        }
        batch.push_back(conversations[order[next++]]);
      }
    }
    std::vector<std::vector<float>> ones;
    for (const Trajectory& t : batch) {
      ones.emplace_back(t.tokens.size(), 1.0f);
      reward += t.final_reward;
    }
    ASSIGN_OR_RETURN(const PackedStep packed, packer.Pack(batch, ones));
    optimizer.ZeroGrad();
    double nll = 0;
    for (const PackedMicroBatch& mb : packed.micro_batches) {
      ASSIGN_OR_RETURN(const torch::Tensor logits, forward(mb));
      RETURN_IF_ERROR(TorchCall(StrCat("sft step ", step + 1, ": backward"), [&] {
        const torch::Device device = logits.device();
        const torch::Tensor logp = TokenLogprobs(logits, mb.targets.to(device));
        const torch::Tensor weights =
            mb.loss_weights.to(device) * mb.trainable.to(device).to(torch::kFloat);
        // Token mean over the step: the packer's weights are 1 / (trainable tokens).
        const torch::Tensor loss = -(logp * weights).sum();
        loss.backward();
        nll += loss.item<double>();
      }));
    }
    ASSIGN_OR_RETURN(const OptimizerStepInfo info, optimizer.Step());
    if (step == 0) result.first_nll = nll;
    result.last_nll = nll;
    result.steps += 1;
    result.episodes += static_cast<int64_t>(batch.size());
    spdlog::info("sft step {}/{}: {}-token NLL {:.4f}, lr {:.2e}, grad norm {:.3f}", step + 1,
                 sft.steps, conversations.empty() ? "expert" : "assistant", nll, info.lr,
                 info.grad_norm);
  }
  result.expert_reward = result.episodes > 0 ? reward / result.episodes : 0;
  return result;
}

}  // namespace flywheel
