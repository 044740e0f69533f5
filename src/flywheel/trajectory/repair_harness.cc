#include "flywheel/trajectory/repair_harness.h"

#include <optional>
#include <random>
#include <utility>

#include "flywheel/core/strings.h"
#include "flywheel/env/policy.h"
#include "flywheel/env/tasks/repair.h"
#include "flywheel/env/tasks/text.h"

namespace flywheel {
namespace {

constexpr int32_t kBos = 0;
constexpr int32_t kEndOfTurn = 2;

bool StartsWith(const std::string& s, std::string_view prefix) {
  return s.compare(0, prefix.size(), prefix) == 0;
}

// The failures of a test report "passed 4 of 6 : x 3 got 7 want 1 ; x 5 got 2 want 0".
std::vector<std::string> Failures(const std::string& report) {
  std::vector<std::string> out;
  const size_t colon = report.find(" : ");
  if (colon == std::string::npos) return out;
  std::string rest = report.substr(colon + 3);
  size_t start = 0;
  while (start < rest.size()) {
    size_t end = rest.find(" ; ", start);
    if (end == std::string::npos) end = rest.size();
    out.push_back(rest.substr(start, end - start));
    start = end + 3;
  }
  return out;
}

// "inspect N" for the line a patch "patch N vN = …" touches.
std::string InspectFor(const std::string& patch) {
  const auto w = SplitWords(patch);
  return StrCat("inspect ", w.size() > 1 ? std::string(w[1]) : std::string("1"));
}

absl::StatusOr<std::vector<int32_t>> EncodeText(const WordTokenizer& tokenizer,
                                                std::string_view text) {
  absl::StatusOr<std::vector<int64_t>> ids = tokenizer.Encode(text);
  if (!ids.ok()) return ids.status();
  return std::vector<int32_t>(ids->begin(), ids->end());
}

// The scripted agent: the expert's plan, each patch replaced by a random one with probability
// `noise`, optionally inspecting each line first; test, then submit. Its random draws (noise,
// inspection, synthetic log-probs) come from one generator in call order, so an execution is a
// function of the seed.
class ScriptedRepairPolicy : public HarnessPolicy {
 public:
  ScriptedRepairPolicy(const RepairHarnessOptions& options, uint64_t seed,
                       std::unique_ptr<WordTokenizer> tokenizer)
      : options_(options),
        tokenizer_(std::move(tokenizer)),
        rng_(seed * 0x9E3779B97F4A7C15ull + 1),
        random_(MakeRepairRandom(options.repair, seed ^ 0x5bd1e995ull)) {
    TaskInstance task;
    task.task = "repair";
    task.seed = seed;
    std::unique_ptr<Policy> expert = MakeRepairExpert(options_.repair);
    expert->Begin(task, "");
    for (int i = 0; i < 1000; ++i) {
      std::string a = expert->Act("");
      if (a == "submit") break;
      if (StartsWith(a, "patch ")) plan_.push_back(a);
    }
  }

  absl::StatusOr<HarnessTurn> Generate(const HarnessRequest& request) override {
    const std::string text = NextAction(request);
    HarnessTurn turn;
    absl::StatusOr<std::vector<int32_t>> ids = EncodeText(*tokenizer_, text);
    if (!ids.ok()) return ids.status();
    turn.generated = std::move(*ids);
    turn.generated.push_back(kEndOfTurn);
    std::uniform_real_distribution<float> logprob(-2.5f, -0.05f);
    for (size_t i = 0; i < turn.generated.size(); ++i) turn.logprobs.push_back(logprob(rng_));
    turn.versions.assign(turn.generated.size(), 0);
    return turn;
  }

 private:
  std::string NextAction(const HarnessRequest& request) {
    if (request.role == Role::kMainSummary || request.role == Role::kSubAgentSummary) {
      return std::string(request.test_report);  // the summary states the current report
    }
    if (request.role == Role::kSubAgent) {
      if (request.subagent != subagent_) {  // a new sub-agent: inspect the line it will patch
        subagent_ = request.subagent;
        const bool on_target = !plan_.empty() && Uniform() >= options_.noise;
        subagent_patch_ = on_target ? plan_[request.subagent % plan_.size()] : RandomPatch();
        return InspectFor(subagent_patch_);
      }
      return subagent_patch_;  // its proposal
    }
    if (!started_) {
      started_ = true;
      return "test";
    }
    if (request.attempt != attempt_) {  // a new attempt (or a retry) starts the plan again
      attempt_ = request.attempt;
      next_planned_ = 0;
      pending_patch_.reset();
      tested_ = false;
      // Drawn only when asked for, so that executions without it keep their random numbers.
      if (options_.give_up > 0 && Uniform() < options_.give_up) return "submit";
    }
    if (pending_patch_) {
      std::string patch = std::move(*pending_patch_);
      pending_patch_.reset();
      return patch;
    }
    if (next_planned_ < plan_.size()) {
      const std::string& planned = plan_[next_planned_++];
      std::string patch = Uniform() < options_.noise ? RandomPatch() : planned;
      if (Uniform() < options_.inspect_probability) {
        pending_patch_ = patch;
        return InspectFor(patch);
      }
      return patch;
    }
    if (!tested_) {
      tested_ = true;
      return "test";
    }
    return "submit";
  }
  std::string RandomPatch() {
    for (int i = 0; i < 100; ++i) {
      std::string a = random_->Act("");
      if (StartsWith(a, "patch ")) return a;
    }
    return "inspect 1";
  }
  double Uniform() { return std::uniform_real_distribution<double>(0, 1)(rng_); }

  const RepairHarnessOptions options_;
  std::unique_ptr<WordTokenizer> tokenizer_;
  std::mt19937_64 rng_;
  std::unique_ptr<Policy> random_;
  std::vector<std::string> plan_;  // the expert's patches
  bool started_ = false;
  int attempt_ = -1;
  size_t next_planned_ = 0;
  std::optional<std::string> pending_patch_;  // to send after its inspection
  bool tested_ = false;
  int subagent_ = -1;
  std::string subagent_patch_;
};

class RepairAgent {
 public:
  RepairAgent(const RepairHarnessOptions& options, uint64_t seed,
              std::unique_ptr<WordTokenizer> tokenizer, HarnessPolicy& policy,
              const std::string& execution_id)
      : options_(options), tokenizer_(std::move(tokenizer)), policy_(policy) {
    task_.task = "repair";
    task_.seed = seed;
    execution_.execution_id = execution_id.empty() ? StrCat("repair-", seed) : execution_id;
    execution_.group_id = StrCat("repair-", seed);
    execution_.task_id = StrCat(seed);
    execution_.env_name = "repair";
  }

  absl::StatusOr<Execution> Run();

 private:
  // Appends `text` and an end-of-turn to `context`.
  absl::Status Append(std::vector<int32_t>& context, std::string_view text) const {
    absl::StatusOr<std::vector<int32_t>> ids = EncodeText(*tokenizer_, text);
    if (!ids.ok()) return ids.status();
    context.insert(context.end(), ids->begin(), ids->end());
    context.push_back(kEndOfTurn);
    return absl::OkStatus();
  }
  // Asks the policy for one call from `context` and records it; returns its tokens.
  absl::StatusOr<std::vector<int32_t>> Call(Role role, const std::vector<int32_t>& context,
                                            int attempt, int subagent) {
    LlmCall call;
    call.call_id = StrCat(execution_.execution_id, "-", execution_.calls.size());
    call.role = role;
    call.context = context;
    HarnessRequest request{role, context, attempt, subagent, last_report_};
    absl::StatusOr<HarnessTurn> turn = policy_.Generate(request);
    if (!turn.ok()) {
      return absl::Status(turn.status().code(), StrCat("repair harness: call ", call.call_id, ": ",
                                                       ToStd(turn.status().message())));
    }
    call.generated = std::move(turn->generated);
    call.logprobs = std::move(turn->logprobs);
    call.versions = std::move(turn->versions);
    call.start_unix_ns = static_cast<int64_t>(execution_.calls.size()) * 1000;  // logical clock
    call.end_unix_ns = call.start_unix_ns + 500;
    if (absl::Status s = call.Validate(execution_.execution_id); !s.ok()) {
      return s;
    }
    execution_.calls.push_back(std::move(call));
    return execution_.calls.back().generated;
  }
  // The action text of generated tokens: the words before the end-of-turn. Special tokens
  // (BOS, EOS, <unk>) or tokens past the tokenizer's vocabulary make it unreadable: the empty
  // action, which the environment answers with "invalid" like any other malformed action.
  std::string ActionText(const std::vector<int32_t>& generated) const {
    std::vector<int64_t> words;
    for (int32_t t : generated) {
      if (t == kEndOfTurn) break;
      if (t < WordTokenizer::kFirstWord || t >= tokenizer_->vocab_size()) return "";
      words.push_back(t);
    }
    absl::StatusOr<std::string> text = tokenizer_->Decode(words);
    return text.ok() ? *text : "";
  }
  // A fresh environment with `actions` replayed: the state a retry or a sub-agent starts from.
  absl::StatusOr<std::pair<std::unique_ptr<RepairEnv>, std::string>> EnvAfter(
      const std::vector<std::string>& actions) {
    auto env = std::make_unique<RepairEnv>(options_.repair);
    absl::StatusOr<StepResult> r = env->Reset(task_);
    if (!r.ok()) return r.status();
    for (const std::string& a : actions) {
      r = env->Step(a);
      if (!r.ok()) return r.status();
    }
    return std::make_pair(std::move(env), r->observation);
  }

  // One main call, its action stepped in the environment and the observation appended;
  // summarises when the context is long. Returns the action and the step's result.
  absl::StatusOr<std::pair<std::string, StepResult>> MainStep(std::vector<int32_t>& context,
                                                              RepairEnv& env,
                                                              std::vector<std::string>& actions,
                                                              int attempt);
  absl::StatusOr<std::string> SubAgent(const std::vector<std::string>& actions,
                                       const std::string& failure, int index);

  const RepairHarnessOptions options_;
  std::unique_ptr<WordTokenizer> tokenizer_;
  HarnessPolicy& policy_;
  TaskInstance task_;
  Execution execution_;
  std::string first_observation_;
  std::string last_report_;  // the latest test report seen
};

absl::StatusOr<std::pair<std::string, StepResult>> RepairAgent::MainStep(
    std::vector<int32_t>& context, RepairEnv& env, std::vector<std::string>& actions, int attempt) {
  absl::StatusOr<std::vector<int32_t>> generated = Call(Role::kMain, context, attempt, -1);
  if (!generated.ok()) return generated.status();
  const std::string action = ActionText(*generated);
  absl::StatusOr<StepResult> r = env.Step(action);
  if (!r.ok()) return r.status();
  actions.push_back(action);
  if (action == "test") last_report_ = r->observation;
  context.insert(context.end(), generated->begin(), generated->end());
  if (absl::Status s = Append(context, r->observation); !s.ok()) return s;
  if (static_cast<int64_t>(context.size()) > options_.summarize_after_tokens && !r->done) {
    // The summary call sees the whole context plus the summary prompt; the agent then goes on
    // from the task and the summary alone.
    std::vector<int32_t> prompt = context;
    if (absl::Status s = Append(prompt, "summary"); !s.ok()) return s;
    absl::StatusOr<StepResult> state = env.Step("test");  // what the summary states
    if (!state.ok()) return state.status();
    actions.push_back("test");
    last_report_ = state->observation;
    absl::StatusOr<std::vector<int32_t>> summary = Call(Role::kMainSummary, prompt, attempt, -1);
    if (!summary.ok()) return summary.status();
    context = {kBos};
    if (absl::Status s = Append(context, first_observation_); !s.ok()) return s;
    if (absl::Status s = Append(context, "summary"); !s.ok()) return s;
    context.insert(context.end(), summary->begin(), summary->end());
    if (state->done) return std::make_pair(action, *state);
  }
  return std::make_pair(action, *r);
}

absl::StatusOr<std::string> RepairAgent::SubAgent(const std::vector<std::string>& actions,
                                                  const std::string& failure, int index) {
  auto env = EnvAfter(actions);
  if (!env.ok()) return env.status();
  absl::StatusOr<StepResult> listing = env->first->Step("inspect");
  if (!listing.ok()) return listing.status();
  // Sub-agents share the listing prefix; each then gets its own failing test.
  std::vector<int32_t> context = {kBos};
  if (absl::Status s = Append(context, StrCat("subgoal ", listing->observation)); !s.ok()) {
    return s;
  }
  if (absl::Status s = Append(context, failure); !s.ok()) return s;
  absl::StatusOr<std::vector<int32_t>> generated = Call(Role::kSubAgent, context, 0, index);
  if (!generated.ok()) return generated.status();
  absl::StatusOr<StepResult> seen = env->first->Step(ActionText(*generated));
  if (!seen.ok()) return seen.status();
  context.insert(context.end(), generated->begin(), generated->end());
  if (absl::Status s = Append(context, seen->observation); !s.ok()) return s;
  generated = Call(Role::kSubAgent, context, 0, index);
  if (!generated.ok()) return generated.status();
  return ActionText(*generated);  // the proposal, whatever the sub-agent wrote
}

absl::StatusOr<Execution> RepairAgent::Run() {
  auto start = EnvAfter({});
  if (!start.ok()) return start.status();
  std::unique_ptr<RepairEnv> env = std::move(start->first);
  first_observation_ = start->second;  // the environment opens with a test report
  last_report_ = first_observation_;
  std::vector<int32_t> context = {kBos};
  if (absl::Status s = Append(context, first_observation_); !s.ok()) return s;
  std::vector<std::string> actions;
  absl::StatusOr<std::pair<std::string, StepResult>> step = MainStep(context, *env, actions, 0);
  if (!step.ok()) return step.status();
  StepResult r = step->second;

  // Sub-agents, one per failing test; their proposals come back as observations.
  if (!r.done) {
    const std::vector<std::string> failures =
        Failures(step->first == "test" ? r.observation : first_observation_);
    for (int k = 0; k < options_.max_subagents && k < static_cast<int>(failures.size()); ++k) {
      absl::StatusOr<std::string> proposal = SubAgent(actions, failures[k], k);
      if (!proposal.ok()) return proposal.status();
      if (absl::Status s = Append(context, StrCat("proposal ", *proposal)); !s.ok()) return s;
    }
  }
  const std::vector<int32_t> checkpoint = context;
  const std::vector<std::string> checkpoint_actions = actions;

  const int64_t turns_per_attempt = options_.AttemptTurns();
  for (int attempt = 0; !r.done; ++attempt) {
    const bool last_attempt = attempt >= options_.max_retries;
    bool retry = false;
    for (int64_t turn = 0; turn < turns_per_attempt && !r.done; ++turn) {
      step = MainStep(context, *env, actions, attempt);
      if (!step.ok()) return step.status();
      r = step->second;
      // A failed test run ends the attempt while retries remain; on the last attempt the
      // agent decides what to do with the failures.
      if (!r.done && step->first == "test" && !Failures(r.observation).empty() && !last_attempt) {
        retry = true;
        break;
      }
    }
    if (r.done) break;
    if (!retry) {
      // Out of turns: the harness runs the tests itself, then retries or submits.
      absl::StatusOr<StepResult> tested = env->Step("test");
      if (!tested.ok()) return tested.status();
      r = *tested;
      if (r.done) break;
      if (Failures(r.observation).empty() || last_attempt) {
        absl::StatusOr<StepResult> submitted = env->Step("submit");
        if (!submitted.ok()) return submitted.status();
        r = *submitted;
        break;
      }
    }
    // Retry from the checkpoint: the environment and the context go back there.
    auto restored = EnvAfter(checkpoint_actions);
    if (!restored.ok()) return restored.status();
    env = std::move(restored->first);
    context = checkpoint;
    actions = checkpoint_actions;
  }
  if (r.end == EpisodeEnd::kDone) {
    execution_.termination = Termination::kDone;
    execution_.final_reward = static_cast<float>(r.reward);
  } else {
    execution_.termination = Termination::kMaxTurns;
  }
  execution_.partial_score = static_cast<float>(r.partial_score.value_or(0.0));
  return std::move(execution_);
}

}  // namespace

absl::Status RepairHarnessOptions::Validate() const {
  if (absl::Status s = repair.Validate(); !s.ok()) return s;
  if (max_retries < 0 || max_subagents < 0 || !(noise >= 0 && noise <= 1) ||
      !(give_up >= 0 && give_up <= 1) || summarize_after_tokens < 16 || max_attempt_turns < 0) {
    return absl::InvalidArgumentError(
        "repair harness: max_retries, max_subagents and max_attempt_turns must be >= 0, noise "
        "and give_up in [0, 1], summarize_after_tokens >= 16");
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<WordTokenizer>> MakeRepairHarnessTokenizer(
    const RepairOptions& options) {
  std::vector<std::string> words = RepairEnv(options).vocabulary().words;
  for (const char* w : {"summary", "subgoal", "proposal"}) words.push_back(w);
  return WordTokenizer::Create(std::move(words));
}

absl::StatusOr<std::unique_ptr<HarnessPolicy>> MakeScriptedRepairPolicy(
    const RepairHarnessOptions& options, uint64_t seed) {
  if (absl::Status s = options.Validate(); !s.ok()) return s;
  absl::StatusOr<std::unique_ptr<WordTokenizer>> tokenizer =
      MakeRepairHarnessTokenizer(options.repair);
  if (!tokenizer.ok()) return tokenizer.status();
  return std::make_unique<ScriptedRepairPolicy>(options, seed, std::move(*tokenizer));
}

absl::StatusOr<Execution> RunRepairHarness(const RepairHarnessOptions& options, uint64_t seed) {
  absl::StatusOr<std::unique_ptr<HarnessPolicy>> policy = MakeScriptedRepairPolicy(options, seed);
  if (!policy.ok()) return policy.status();
  return RunRepairHarness(options, seed, **policy);
}

absl::StatusOr<Execution> RunRepairHarness(const RepairHarnessOptions& options, uint64_t seed,
                                           HarnessPolicy& policy, const std::string& execution_id) {
  if (absl::Status s = options.Validate(); !s.ok()) return s;
  absl::StatusOr<std::unique_ptr<WordTokenizer>> tokenizer =
      MakeRepairHarnessTokenizer(options.repair);
  if (!tokenizer.ok()) return tokenizer.status();
  RepairAgent agent(options, seed, std::move(*tokenizer), policy, execution_id);
  absl::StatusOr<Execution> execution = agent.Run();
  if (!execution.ok()) return execution.status();
  if (absl::Status s = execution->Validate(); !s.ok()) return s;
  return execution;
}

}  // namespace flywheel
