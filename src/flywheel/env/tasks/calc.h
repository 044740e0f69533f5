// calc: arithmetic that needs a calculator tool.
//
//   reset   → "compute 37 * 48 + 12"
//   action  "CALL calc 37 * 48 + 12" → "1788"        (a tool call: StepResult::tool = "calc",
//                                                       so the wrapper adds tool latency)
//   action  "ANSWER 1788"            → "correct", reward 1, done   (or "wrong", reward 0, done)
//
// Operands are in [0, max_operand], operators + - * with the usual precedence. Anything else
// is "invalid" and uses up a turn. Byte-level vocabulary (numbers are open-ended).
#ifndef FLYWHEEL_ENV_TASKS_CALC_H_
#define FLYWHEEL_ENV_TASKS_CALC_H_

#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "flywheel/env/env_options.h"
#include "flywheel/env/interface.h"
#include "flywheel/env/policy.h"

namespace flywheel {

// Evaluates integers with + - * and parentheses; nullopt for anything malformed or overflowing.
std::optional<int64_t> EvaluateExpression(std::string_view expression);

class CalcEnv : public Environment {
 public:
  explicit CalcEnv(const CalcOptions& options) : options_(options) {}

  absl::StatusOr<StepResult> Reset(const TaskInstance& task) override;
  absl::StatusOr<StepResult> Step(std::string_view action) override;
  absl::StatusOr<double> ScorePartial() override;
  const VocabularySpec& vocabulary() const override { return vocabulary_; }
  std::string DebugString() const override;

 private:
  double Progress() const;

  const CalcOptions options_;
  const VocabularySpec vocabulary_ = VocabularySpec::Bytes();
  bool started_ = false;
  bool done_ = false;
  std::string expression_;
  int64_t answer_ = 0;
  int64_t turns_ = 0;
  bool computed_ = false;  // the calculator has returned the answer this episode
  bool solved_ = false;
};

// Calls the calculator on the shown expression, then answers with its result.
std::unique_ptr<Policy> MakeCalcExpert();
// Random tool calls on random numbers and random answers.
std::unique_ptr<Policy> MakeCalcRandom(const CalcOptions& options, uint64_t seed);

}  // namespace flywheel

#endif  // FLYWHEEL_ENV_TASKS_CALC_H_
