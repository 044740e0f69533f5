#include "flywheel/env/tasks/calc.h"

#include <random>

#include "flywheel/core/strings.h"
#include "flywheel/env/task_source.h"
#include "flywheel/env/tasks/text.h"

namespace flywheel {
namespace {

constexpr int64_t kLimit = int64_t{1} << 52;  // keeps every intermediate exact and overflow-free
constexpr std::string_view kCall = "CALL calc ";
constexpr std::string_view kAnswer = "ANSWER ";

// Recursive descent: expr = term {(+|-) term}; term = factor {* factor};
// factor = number | ( expr ) | - factor.
class Parser {
 public:
  explicit Parser(std::string_view s) : s_(s) {}
  std::optional<int64_t> Parse() {
    auto v = Expr();
    Skip();
    if (!v || pos_ != s_.size()) return std::nullopt;
    return v;
  }

 private:
  void Skip() {
    while (pos_ < s_.size() && s_[pos_] == ' ') ++pos_;
  }
  bool Eat(char c) {
    Skip();
    if (pos_ < s_.size() && s_[pos_] == c) {
      ++pos_;
      return true;
    }
    return false;
  }
  static std::optional<int64_t> Checked(int64_t v) {
    if (v > kLimit || v < -kLimit) return std::nullopt;
    return v;
  }
  std::optional<int64_t> Expr() {
    auto v = Term();
    while (v) {
      if (Eat('+')) {
        auto r = Term();
        v = r ? Checked(*v + *r) : std::nullopt;
      } else if (Eat('-')) {
        auto r = Term();
        v = r ? Checked(*v - *r) : std::nullopt;
      } else {
        break;
      }
    }
    return v;
  }
  std::optional<int64_t> Term() {
    auto v = Factor();
    while (v && Eat('*')) {
      auto r = Factor();
      if (!r) return std::nullopt;
      __int128 p = static_cast<__int128>(*v) * *r;
      if (p > kLimit || p < -kLimit) return std::nullopt;
      v = static_cast<int64_t>(p);
    }
    return v;
  }
  std::optional<int64_t> Factor() {
    if (++depth_ > 64) return std::nullopt;
    std::optional<int64_t> v;
    if (Eat('(')) {
      v = Expr();
      if (!Eat(')')) v = std::nullopt;
    } else if (Eat('-')) {
      auto f = Factor();
      if (f) v = -*f;
    } else {
      Skip();
      size_t start = pos_;
      while (pos_ < s_.size() && s_[pos_] >= '0' && s_[pos_] <= '9') ++pos_;
      if (pos_ > start && pos_ - start <= 15) v = ParseInt(s_.substr(start, pos_ - start));
    }
    --depth_;
    return v;
  }

  std::string_view s_;
  size_t pos_ = 0;
  int depth_ = 0;
};

class CalcExpert : public Policy {
 public:
  void Begin(const TaskInstance&, std::string_view observation) override {
    expression_ = std::string(observation.substr(std::string_view("compute ").size()));
    called_ = false;
  }
  std::string Act(std::string_view observation) override {
    if (!called_) {
      called_ = true;
      return StrCat(kCall, expression_);
    }
    return StrCat(kAnswer, observation);
  }

 private:
  std::string expression_;
  bool called_ = false;
};

class CalcRandom : public Policy {
 public:
  CalcRandom(const CalcOptions& options, uint64_t seed) : options_(options), rng_(seed) {}
  void Begin(const TaskInstance&, std::string_view) override {}
  std::string Act(std::string_view) override {
    std::uniform_int_distribution<int64_t> operand(0, options_.max_operand);
    if (std::bernoulli_distribution(0.5)(rng_)) {
      return StrCat(kCall, operand(rng_), " + ", operand(rng_));
    }
    return StrCat(kAnswer, operand(rng_) * operand(rng_));
  }

 private:
  const CalcOptions options_;
  std::mt19937_64 rng_;
};

}  // namespace

std::optional<int64_t> EvaluateExpression(std::string_view expression) {
  if (expression.size() > 4096) return std::nullopt;
  return Parser(expression).Parse();
}

absl::StatusOr<StepResult> CalcEnv::Reset(const TaskInstance& task) {
  std::mt19937_64 rng(MixSeed(task.seed));
  std::uniform_int_distribution<int64_t> operand(0, options_.max_operand);
  std::uniform_int_distribution<int> op(0, 2);
  expression_ = std::to_string(operand(rng));
  for (int64_t i = 1; i < options_.num_operands; ++i) {
    expression_ += StrCat(" ", "+-*"[op(rng)], " ", operand(rng));
  }
  answer_ = *EvaluateExpression(expression_);
  turns_ = 0;
  started_ = true;
  done_ = computed_ = solved_ = false;
  StepResult r;
  r.observation = StrCat("compute ", expression_);
  r.partial_score = 0;
  return r;
}

absl::StatusOr<StepResult> CalcEnv::Step(std::string_view action) {
  if (!started_) return absl::FailedPreconditionError("calc: step before reset");
  if (done_) return absl::FailedPreconditionError("calc: step after the episode ended");
  ++turns_;
  action = Trim(action);
  StepResult r;
  if (action.starts_with(kCall)) {
    r.tool = "calc";
    std::optional<int64_t> value = EvaluateExpression(action.substr(kCall.size()));
    r.observation = value ? std::to_string(*value) : "error";
    if (value && *value == answer_) computed_ = true;
  } else if (action.starts_with(kAnswer)) {
    std::optional<int64_t> value = ParseInt(Trim(action.substr(kAnswer.size())));
    solved_ = value && *value == answer_;
    r.observation = solved_ ? "correct" : "wrong";
    r.reward = solved_ ? 1 : 0;
    done_ = true;
  } else {
    r.observation = "invalid";
  }
  if (turns_ >= options_.max_turns) done_ = true;
  r.done = done_;
  if (done_) r.end = EpisodeEnd::kDone;
  r.partial_score = Progress();
  return r;
}

// Half credit for having the right number from the calculator, full credit for answering it.
double CalcEnv::Progress() const { return solved_ ? 1.0 : computed_ ? 0.5 : 0.0; }

absl::StatusOr<double> CalcEnv::ScorePartial() {
  if (!started_) return absl::FailedPreconditionError("calc: score before reset");
  return Progress();
}

std::string CalcEnv::DebugString() const {
  return StrCat("calc(num_operands=", options_.num_operands, ", max_operand=", options_.max_operand,
                ", max_turns=", options_.max_turns, ")");
}

std::unique_ptr<Policy> MakeCalcExpert() { return std::make_unique<CalcExpert>(); }

std::unique_ptr<Policy> MakeCalcRandom(const CalcOptions& options, uint64_t seed) {
  return std::make_unique<CalcRandom>(options, seed);
}

}  // namespace flywheel
