// repair: fix a small program so that its unit tests pass — a software-engineering task in
// miniature, with horizons from a few turns to hundreds.
//
// The language: each line i defines v<i> from two operands (x, an earlier v<j>, or a digit)
// and one of + - *, all modulo 10; the program's output is its last variable:
//
//   1 : v1 = x + 3
//   2 : v2 = v1 * 7
//   3 : v3 = v2 - x
//
// Some lines were mutated (num_bugs); each mutation alone breaks at least one test. Actions:
//   inspect            → the whole program, lines joined by " ; "
//   inspect N          → line N
//   test               → "passed 4 of 6 : x 3 got 7 want 1 ; x 5 got 2 want 0"
//   patch N vN = A O B → "ok" (line N replaced) or "invalid"
//   submit             → done, reward = fraction of tests passing (partial_credit = false:
//                        1 when all pass, else 0)
// The partial score is always the score of the program as it stands. Running out of max_turns
// ends the episode as a timeout with that partial score. Word-level vocabulary, closed per config.
#ifndef FLYWHEEL_ENV_TASKS_REPAIR_H_
#define FLYWHEEL_ENV_TASKS_REPAIR_H_

#include <memory>
#include <string>
#include <vector>

#include "flywheel/env/env_options.h"
#include "flywheel/env/interface.h"
#include "flywheel/env/policy.h"

namespace flywheel {

struct RepairLine {
  // An operand: 'x', 'v' (variable `index`) or 'c' (constant `index`).
  struct Operand {
    char kind = 'x';
    int index = 0;
  };
  Operand a, b;
  char op = '+';
};

struct RepairProgram {
  std::vector<RepairLine> lines;  // line i (0-based) defines v<i+1>
  int Run(int x) const;
  std::string LineText(size_t i) const;  // "v2 = v1 * 7"
};

struct RepairInstance {
  RepairProgram correct;
  RepairProgram buggy;
  std::vector<int> test_inputs;  // expected outputs come from `correct`
};

// The instance for `seed` (deterministic): used by the environment and by the expert.
RepairInstance GenerateRepair(const RepairOptions& options, uint64_t seed);

// Parses "vN = A O B" as line N (1-based) of a program; nullopt when malformed.
std::optional<RepairLine> ParseRepairLine(const std::vector<std::string_view>& words, int n);

class RepairEnv : public Environment {
 public:
  explicit RepairEnv(const RepairOptions& options);

  absl::StatusOr<StepResult> Reset(const TaskInstance& task) override;
  absl::StatusOr<StepResult> Step(std::string_view action) override;
  absl::StatusOr<double> ScorePartial() override;
  const VocabularySpec& vocabulary() const override { return vocabulary_; }
  std::string DebugString() const override;

 private:
  std::string Act(std::string_view action, bool& submitted);
  // The fraction of tests passing, or with partial_credit off 1 when all pass and 0 otherwise.
  double Score() const;
  std::string TestReport() const;

  const RepairOptions options_;
  const VocabularySpec vocabulary_;
  bool started_ = false;
  bool done_ = false;
  RepairInstance instance_;
  RepairProgram program_;  // the buggy program as patched so far
  int64_t turns_ = 0;
};

// options.expert: `oracle` knows the correct program (it regenerates the instance from the
// seed), reads the program, patches every wrong line and submits; `search` tries one-token
// edits of a random line with a test run after each and gives up with probability
// options.expert_give_up after each failed run.
std::unique_ptr<Policy> MakeRepairExpert(const RepairOptions& options);
// Random inspections, test runs, syntactically valid random patches and submits.
std::unique_ptr<Policy> MakeRepairRandom(const RepairOptions& options, uint64_t seed);

}  // namespace flywheel

#endif  // FLYWHEEL_ENV_TASKS_REPAIR_H_
