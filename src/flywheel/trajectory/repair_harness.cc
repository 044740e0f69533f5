#include "flywheel/trajectory/repair_harness.h"

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

class RepairAgent {
 public:
  RepairAgent(const RepairHarnessOptions& options, uint64_t seed,
              std::unique_ptr<WordTokenizer> tokenizer)
      : options_(options),
        tokenizer_(std::move(tokenizer)),
        rng_(seed * 0x9E3779B97F4A7C15ull + 1),
        random_(MakeRepairRandom(options.repair, seed ^ 0x5bd1e995ull)) {
    task_.task = "repair";
    task_.seed = seed;
    execution_.execution_id = StrCat("repair-", seed);
    execution_.group_id = StrCat("repair-", seed);
    execution_.task_id = StrCat(seed);
    execution_.env_name = "repair";
  }

  absl::StatusOr<Execution> Run();

 private:
  absl::StatusOr<std::vector<int32_t>> Encode(std::string_view text) const {
    absl::StatusOr<std::vector<int64_t>> ids = tokenizer_->Encode(text);
    if (!ids.ok()) return ids.status();
    return std::vector<int32_t>(ids->begin(), ids->end());
  }
  // Appends `text` and an end-of-turn to `context`.
  absl::Status Append(std::vector<int32_t>& context, std::string_view text) const {
    absl::StatusOr<std::vector<int32_t>> ids = Encode(text);
    if (!ids.ok()) return ids.status();
    context.insert(context.end(), ids->begin(), ids->end());
    context.push_back(kEndOfTurn);
    return absl::OkStatus();
  }
  // Records a call that generates `text` + end-of-turn from `context`; returns its tokens.
  absl::StatusOr<std::vector<int32_t>> Call(Role role, const std::vector<int32_t>& context,
                                            std::string_view text) {
    LlmCall call;
    call.call_id = StrCat(execution_.execution_id, "-", execution_.calls.size());
    call.role = role;
    call.context = context;
    if (absl::Status s = Append(call.generated, text); !s.ok()) return s;
    std::uniform_real_distribution<float> logprob(-2.5f, -0.05f);
    for (size_t i = 0; i < call.generated.size(); ++i) call.logprobs.push_back(logprob(rng_));
    call.versions.assign(call.generated.size(), 0);
    call.start_unix_ns = static_cast<int64_t>(execution_.calls.size()) * 1000;  // logical clock
    call.end_unix_ns = call.start_unix_ns + 500;
    execution_.calls.push_back(call);
    return call.generated;
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
  std::string RandomPatch() {
    for (int i = 0; i < 100; ++i) {
      std::string a = random_->Act("");
      if (StartsWith(a, "patch ")) return a;
    }
    return "inspect 1";
  }
  double Uniform() { return std::uniform_real_distribution<double>(0, 1)(rng_); }

  // One main step: call, environment step, observation appended; summarises when long.
  absl::StatusOr<StepResult> MainStep(std::vector<int32_t>& context, RepairEnv& env,
                                      std::vector<std::string>& actions,
                                      const std::string& action);
  absl::StatusOr<std::string> SubAgent(const std::vector<std::string>& actions,
                                       const std::string& failure, int index);

  const RepairHarnessOptions options_;
  std::unique_ptr<WordTokenizer> tokenizer_;
  std::mt19937_64 rng_;
  std::unique_ptr<Policy> random_;
  TaskInstance task_;
  Execution execution_;
  std::vector<std::string> plan_;  // the expert's patches
  std::string first_observation_;
};

absl::StatusOr<StepResult> RepairAgent::MainStep(std::vector<int32_t>& context, RepairEnv& env,
                                                 std::vector<std::string>& actions,
                                                 const std::string& action) {
  absl::StatusOr<std::vector<int32_t>> generated = Call(Role::kMain, context, action);
  if (!generated.ok()) return generated.status();
  absl::StatusOr<StepResult> r = env.Step(action);
  if (!r.ok()) return r.status();
  actions.push_back(action);
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
    absl::StatusOr<std::vector<int32_t>> summary =
        Call(Role::kMainSummary, prompt, state->observation);
    if (!summary.ok()) return summary.status();
    context = {kBos};
    if (absl::Status s = Append(context, first_observation_); !s.ok()) return s;
    if (absl::Status s = Append(context, "summary"); !s.ok()) return s;
    context.insert(context.end(), summary->begin(), summary->end());
    if (state->done) return state;
  }
  return r;
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
  const bool on_target = !plan_.empty() && Uniform() >= options_.noise;
  const std::string patch = on_target ? plan_[index % plan_.size()] : RandomPatch();
  const std::string line = SplitWords(patch).size() > 1 ? std::string(SplitWords(patch)[1]) : "1";
  const std::string inspect = StrCat("inspect ", line);
  absl::StatusOr<std::vector<int32_t>> generated = Call(Role::kSubAgent, context, inspect);
  if (!generated.ok()) return generated.status();
  absl::StatusOr<StepResult> seen = env->first->Step(inspect);
  if (!seen.ok()) return seen.status();
  context.insert(context.end(), generated->begin(), generated->end());
  if (absl::Status s = Append(context, seen->observation); !s.ok()) return s;
  generated = Call(Role::kSubAgent, context, patch);
  if (!generated.ok()) return generated.status();
  return patch;
}

absl::StatusOr<Execution> RepairAgent::Run() {
  auto start = EnvAfter({});
  if (!start.ok()) return start.status();
  std::unique_ptr<RepairEnv> env = std::move(start->first);
  first_observation_ = start->second;
  {
    std::unique_ptr<Policy> expert = MakeRepairExpert(options_.repair);
    expert->Begin(task_, first_observation_);
    for (int i = 0; i < 1000; ++i) {
      std::string a = expert->Act("");
      if (a == "submit") break;
      if (StartsWith(a, "patch ")) plan_.push_back(a);
    }
  }
  std::vector<int32_t> context = {kBos};
  if (absl::Status s = Append(context, first_observation_); !s.ok()) return s;
  std::vector<std::string> actions;
  absl::StatusOr<StepResult> r = MainStep(context, *env, actions, "test");
  if (!r.ok()) return r.status();

  // Sub-agents, one per failing test; their proposals come back as observations.
  const std::vector<std::string> failures = Failures(r->observation);
  for (int k = 0; k < options_.max_subagents && k < static_cast<int>(failures.size()); ++k) {
    absl::StatusOr<std::string> proposal = SubAgent(actions, failures[k], k);
    if (!proposal.ok()) return proposal.status();
    if (absl::Status s = Append(context, StrCat("proposal ", *proposal)); !s.ok()) return s;
  }
  const std::vector<int32_t> checkpoint = context;
  const std::vector<std::string> checkpoint_actions = actions;

  for (int attempt = 0; !r->done; ++attempt) {
    for (const std::string& planned : plan_) {
      const std::string patch = Uniform() < options_.noise ? RandomPatch() : planned;
      if (Uniform() < options_.inspect_probability) {
        const auto w = SplitWords(patch);
        r = MainStep(context, *env, actions, StrCat("inspect ", w.size() > 1 ? w[1] : "1"));
        if (!r.ok()) return r.status();
        if (r->done) break;
      }
      r = MainStep(context, *env, actions, patch);
      if (!r.ok()) return r.status();
      if (r->done) break;
    }
    if (r->done) break;
    r = MainStep(context, *env, actions, "test");
    if (!r.ok()) return r.status();
    if (r->done) break;
    const bool passing = Failures(r->observation).empty();
    if (passing || attempt >= options_.max_retries) {
      r = MainStep(context, *env, actions, "submit");
      if (!r.ok()) return r.status();
      break;
    }
    // Retry from the checkpoint: the environment and the context go back there.
    auto restored = EnvAfter(checkpoint_actions);
    if (!restored.ok()) return restored.status();
    env = std::move(restored->first);
    context = checkpoint;
    actions = checkpoint_actions;
  }
  if (r->end == EpisodeEnd::kDone) {
    execution_.termination = Termination::kDone;
    execution_.final_reward = static_cast<float>(r->reward);
  } else {
    execution_.termination = Termination::kMaxTurns;
  }
  execution_.partial_score = static_cast<float>(r->partial_score.value_or(0.0));
  return std::move(execution_);
}

}  // namespace

absl::StatusOr<std::unique_ptr<WordTokenizer>> MakeRepairHarnessTokenizer(
    const RepairOptions& options) {
  std::vector<std::string> words = RepairEnv(options).vocabulary().words;
  for (const char* w : {"summary", "subgoal", "proposal"}) words.push_back(w);
  return WordTokenizer::Create(std::move(words));
}

absl::StatusOr<Execution> RunRepairHarness(const RepairHarnessOptions& options, uint64_t seed) {
  if (absl::Status s = options.repair.Validate(); !s.ok()) return s;
  if (options.max_retries < 0 || options.max_subagents < 0 || options.noise < 0 ||
      options.noise > 1 || options.summarize_after_tokens < 16) {
    return absl::InvalidArgumentError(
        "repair harness: max_retries and max_subagents must be >= 0, noise in [0, 1], "
        "summarize_after_tokens >= 16");
  }
  absl::StatusOr<std::unique_ptr<WordTokenizer>> tokenizer =
      MakeRepairHarnessTokenizer(options.repair);
  if (!tokenizer.ok()) return tokenizer.status();
  const int64_t vocab_size = (*tokenizer)->vocab_size();
  RepairAgent agent(options, seed, std::move(*tokenizer));
  absl::StatusOr<Execution> execution = agent.Run();
  if (!execution.ok()) return execution.status();
  if (absl::Status s = execution->Validate(vocab_size); !s.ok()) return s;
  return execution;
}

}  // namespace flywheel
