#include "flywheel/env/tasks/repair.h"

#include <algorithm>
#include <numeric>
#include <random>

#include "flywheel/core/strings.h"
#include "flywheel/env/task_source.h"
#include "flywheel/env/tasks/text.h"

namespace flywheel {
namespace {

using Operand = RepairLine::Operand;

std::string OperandText(const Operand& o) {
  if (o.kind == 'x') return "x";
  if (o.kind == 'v') return StrCat("v", o.index);
  return std::to_string(o.index);
}

std::optional<Operand> ParseOperand(std::string_view w, int line) {
  if (w == "x") return Operand{'x', 0};
  if (w.size() == 1 && w[0] >= '0' && w[0] <= '9') return Operand{'c', w[0] - '0'};
  if (w.size() >= 2 && w[0] == 'v') {
    std::optional<int64_t> j = ParseInt(w.substr(1));
    if (j && *j >= 1 && *j < line) return Operand{'v', static_cast<int>(*j)};
  }
  return std::nullopt;
}

std::optional<char> ParseOp(std::string_view w) {
  if (w == "+" || w == "-" || w == "*") return w[0];
  return std::nullopt;
}

// "vN = A O B": `l` as line N (1-based).
std::string LineTextAt(size_t n, const RepairLine& l) {
  return StrCat("v", n, " = ", OperandText(l.a), " ", l.op, " ", OperandText(l.b));
}

// "patch N vN = A O B": line N replaced by `l`.
std::string PatchAction(int line, const RepairLine& l) {
  return StrCat("patch ", line, " ", LineTextAt(line, l));
}

// "patch N O B": line N's operator and second operand replaced, its first operand kept — the
// one-token edits the search expert makes, without retyping the rest of the line.
std::string EditAction(int line, const RepairLine& l) {
  return StrCat("patch ", line, " ", l.op, " ", OperandText(l.b));
}

bool SameLine(const RepairLine& p, const RepairLine& q) {
  return p.op == q.op && p.a.kind == q.a.kind && p.a.index == q.a.index && p.b.kind == q.b.kind &&
         p.b.index == q.b.index;
}

// Operand b of line i (1-based), with a = v(i-1): x, a variable older than a, or a constant.
// Multiplying only by a unit of Z/10 (1, 3, 7, 9) keeps every line a bijection of a, so a
// change anywhere reaches the output and mutations stay visible to the tests.
Operand RandomOperand(std::mt19937_64& rng, int line, char op) {
  static constexpr int kUnits[] = {1, 3, 7, 9};
  if (op == '*') return {'c', kUnits[std::uniform_int_distribution<int>(0, 3)(rng)]};
  const int choice = std::uniform_int_distribution<int>(0, 2)(rng);
  if (choice == 0) return {'x', 0};
  if (choice == 1 && line > 2) return {'v', std::uniform_int_distribution<int>(1, line - 2)(rng)};
  return {'c', std::uniform_int_distribution<int>(1, 9)(rng)};
}

char RandomOp(std::mt19937_64& rng) { return "+-*"[std::uniform_int_distribution<int>(0, 2)(rng)]; }

RepairLine RandomLine(std::mt19937_64& rng, int line) {
  RepairLine l;
  l.op = RandomOp(rng);
  l.a = line == 1 ? Operand{'x', 0} : Operand{'v', line - 1};  // a chain: every line matters
  l.b = RandomOperand(rng, line, l.op);
  return l;
}

bool FailsSomeTest(const RepairProgram& p, const RepairInstance& inst) {
  for (int x : inst.test_inputs) {
    if (p.Run(x) != inst.correct.Run(x)) return true;
  }
  return false;
}

VocabularySpec RepairVocabulary(const RepairOptions& o) {
  std::vector<std::string> words = {"inspect", "test", "patch", "submit", "ok", "invalid",
                                    "passed",  "of",   ":",     ";",      "x",  "got",
                                    "want",    "=",    "+",     "-",      "*"};
  const int64_t max_number = std::max<int64_t>({9, o.num_lines, o.num_tests});
  for (int64_t i = 0; i <= max_number; ++i) words.push_back(std::to_string(i));
  for (int64_t i = 1; i <= o.num_lines; ++i) words.push_back(StrCat("v", i));
  return VocabularySpec::Words(std::move(words));
}

class RepairExpert : public Policy {
 public:
  explicit RepairExpert(const RepairOptions& options) : options_(options) {}
  void Begin(const TaskInstance& task, std::string_view) override {
    const RepairInstance inst = GenerateRepair(options_, task.seed);
    // It reads the program before it patches, as a policy must: a policy that imitates it has
    // the buggy lines in its context, so that reinforcement learning can learn which one to
    // change from the failing tests. (It used to run the tests, which the reset had already
    // reported, and patch from the hidden correct program, so its imitators never looked.)
    plan_ = {"inspect"};
    for (size_t i = 0; i < inst.correct.lines.size(); ++i) {
      if (!SameLine(inst.correct.lines[i], inst.buggy.lines[i])) {
        plan_.push_back(StrCat("patch ", i + 1, " ", inst.correct.LineText(i)));
      }
    }
    plan_.push_back("submit");
    next_ = 0;
  }
  std::string Act(std::string_view) override {
    return next_ < plan_.size() ? plan_[next_++] : "submit";
  }

 private:
  const RepairOptions options_;
  std::vector<std::string> plan_;
  size_t next_ = 0;
};

// Searches instead of knowing: reads the program, picks one line at random and tries its
// one-token edits (another operator, or another second operand) in random order, running the
// tests after each. It submits when they all pass, when its edits run out, or — after a failed
// run — with probability give_up. A policy that imitates it learns the loop and how often to
// give up; whether to keep going is what reinforcement learning can then improve (each further
// edit is another chance; it never learns here which line is wrong).
class RepairSearchExpert : public Policy {
 public:
  explicit RepairSearchExpert(const RepairOptions& options) : options_(options) {}
  void Begin(const TaskInstance& task, std::string_view) override {
    const RepairInstance inst = GenerateRepair(options_, task.seed);
    rng_.seed(MixSeed(task.seed ^ (static_cast<uint64_t>(task.rollout) << 32)));
    line_ = std::uniform_int_distribution<int>(1, static_cast<int>(options_.num_lines))(rng_);
    const RepairLine& shown = inst.buggy.lines[line_ - 1];
    std::vector<RepairLine> candidates;
    for (char op : {'+', '-', '*'}) candidates.push_back({shown.a, shown.b, op});
    candidates.push_back({shown.a, {'x', 0}, shown.op});
    for (int j = 1; j < line_; ++j) candidates.push_back({shown.a, {'v', j}, shown.op});
    for (int c = 0; c <= 9; ++c) candidates.push_back({shown.a, {'c', c}, shown.op});
    edits_.clear();
    for (const RepairLine& edit : candidates) {
      if (!SameLine(edit, shown)) edits_.push_back(edit);
    }
    std::shuffle(edits_.begin(), edits_.end(), rng_);
    all_pass_ = StrCat("passed ", options_.num_tests, " of ", options_.num_tests);
    next_edit_ = 0;
    last_ = Last::kNothing;
  }
  std::string Act(std::string_view observation) override {
    switch (last_) {
      case Last::kNothing:
        last_ = Last::kInspect;
        return "inspect";
      case Last::kPatch:
        last_ = Last::kTest;
        return "test";
      case Last::kTest:
        if (observation == all_pass_ ||
            std::bernoulli_distribution(options_.expert_give_up)(rng_)) {
          return "submit";
        }
        break;
      case Last::kInspect:
        break;
    }
    if (next_edit_ == edits_.size()) return "submit";
    last_ = Last::kPatch;
    return EditAction(line_, edits_[next_edit_++]);
  }

 private:
  enum class Last { kNothing, kInspect, kPatch, kTest };
  const RepairOptions options_;
  std::mt19937_64 rng_;
  int line_ = 1;
  std::vector<RepairLine> edits_;
  size_t next_edit_ = 0;
  std::string all_pass_;
  Last last_ = Last::kNothing;
};

class RepairRandom : public Policy {
 public:
  RepairRandom(const RepairOptions& options, uint64_t seed) : options_(options), rng_(seed) {}
  void Begin(const TaskInstance&, std::string_view) override {}
  std::string Act(std::string_view) override {
    const double u = std::uniform_real_distribution<double>(0, 1)(rng_);
    const int line = std::uniform_int_distribution<int>(1, options_.num_lines)(rng_);
    if (u < 0.1) return "submit";
    if (u < 0.3) return "test";
    if (u < 0.5) return StrCat("inspect ", line);
    return PatchAction(line, RandomLine(rng_, line));
  }

 private:
  const RepairOptions options_;
  std::mt19937_64 rng_;
};

}  // namespace

int RepairProgram::Run(int x) const {
  std::vector<int> v(lines.size() + 1, 0);
  auto value = [&](const Operand& o) {
    return o.kind == 'x' ? x : o.kind == 'v' ? v[o.index] : o.index;
  };
  int out = x % 10;
  for (size_t i = 0; i < lines.size(); ++i) {
    const int a = value(lines[i].a), b = value(lines[i].b);
    const int r = lines[i].op == '+' ? a + b : lines[i].op == '-' ? a - b : a * b;
    out = v[i + 1] = ((r % 10) + 10) % 10;
  }
  return out;
}

std::string RepairProgram::LineText(size_t i) const { return LineTextAt(i + 1, lines[i]); }

std::optional<RepairLine> ParseRepairLine(const std::vector<std::string_view>& w, int n) {
  if (w.size() != 5 || w[0] != StrCat("v", n) || w[1] != "=") return std::nullopt;
  std::optional<char> op = ParseOp(w[3]);
  std::optional<Operand> a = ParseOperand(w[2], n), b = ParseOperand(w[4], n);
  if (!op || !a || !b) return std::nullopt;
  return RepairLine{*a, *b, *op};
}

RepairInstance GenerateRepair(const RepairOptions& options, uint64_t seed) {
  std::mt19937_64 rng(MixSeed(seed));
  RepairInstance inst;
  const int n = static_cast<int>(options.num_lines);
  for (int i = 1; i <= n; ++i) inst.correct.lines.push_back(RandomLine(rng, i));
  std::vector<int> inputs(10);
  std::iota(inputs.begin(), inputs.end(), 0);
  std::shuffle(inputs.begin(), inputs.end(), rng);
  inst.test_inputs.assign(inputs.begin(), inputs.begin() + options.num_tests);

  // Mutate lines one at a time, keeping a mutation only if on its own it fails a test, so that
  // every bug is visible to the tests and the expert's fix is necessary.
  inst.buggy = inst.correct;
  std::vector<int> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), rng);
  int64_t bugs = 0;
  for (int i : order) {
    if (bugs == options.num_bugs) break;
    for (int attempt = 0; attempt < 20; ++attempt) {
      RepairLine mutated = inst.correct.lines[i];
      if (std::bernoulli_distribution(0.5)(rng)) {
        mutated.op = RandomOp(rng);
      } else {
        mutated.b = RandomOperand(rng, i + 1, mutated.op);
      }
      RepairProgram alone = inst.correct, together = inst.buggy;
      alone.lines[i] = together.lines[i] = mutated;
      // Visible alone, and not cancelling the bugs already placed.
      if (!SameLine(mutated, inst.correct.lines[i]) && FailsSomeTest(alone, inst) &&
          FailsSomeTest(together, inst)) {
        inst.buggy.lines[i] = mutated;
        ++bugs;
        break;
      }
    }
  }
  return inst;
}

RepairEnv::RepairEnv(const RepairOptions& options)
    : options_(options), vocabulary_(RepairVocabulary(options)) {}

absl::StatusOr<StepResult> RepairEnv::Reset(const TaskInstance& task) {
  instance_ = GenerateRepair(options_, task.seed);
  program_ = instance_.buggy;
  turns_ = 0;
  started_ = true;
  done_ = false;
  StepResult r;
  r.observation = TestReport();
  r.partial_score = Score();
  return r;
}

absl::StatusOr<StepResult> RepairEnv::Step(std::string_view action) {
  if (!started_) return absl::FailedPreconditionError("repair: step before reset");
  if (done_) return absl::FailedPreconditionError("repair: step after the episode ended");
  ++turns_;
  bool submitted = false;
  StepResult r;
  r.observation = Act(action, submitted);
  r.partial_score = Score();
  if (submitted) {
    r.reward = *r.partial_score;
    r.done = true;
    r.end = EpisodeEnd::kDone;
  } else if (turns_ >= options_.max_turns) {
    r.done = true;
    r.end = EpisodeEnd::kTimeout;  // horizon reached without a submit: scored partially
  }
  done_ = r.done;
  return r;
}

std::string RepairEnv::Act(std::string_view action, bool& submitted) {
  const std::vector<std::string_view> w = SplitWords(action);
  if (w.empty()) return "invalid";
  const int n = static_cast<int>(program_.lines.size());
  std::optional<int64_t> line = w.size() >= 2 ? ParseInt(w[1]) : std::nullopt;
  const bool line_ok = line && *line >= 1 && *line <= n;
  if (w[0] == "submit" && w.size() == 1) {
    submitted = true;
    return TestReport();
  }
  if (w[0] == "test" && w.size() == 1) return TestReport();
  if (w[0] == "inspect" && w.size() == 1) {
    std::vector<std::string> lines;
    for (int i = 0; i < n; ++i) lines.push_back(StrCat(i + 1, " : ", program_.LineText(i)));
    return Join(lines, " ; ");
  }
  if (w[0] == "inspect" && w.size() == 2 && line_ok) {
    return StrCat(*line, " : ", program_.LineText(*line - 1));
  }
  if (w[0] == "patch" && line_ok && w.size() == 4) {  // patch N O B
    std::optional<char> op = ParseOp(w[2]);
    std::optional<Operand> b = ParseOperand(w[3], static_cast<int>(*line));
    if (!op || !b) return "invalid";
    RepairLine& l = program_.lines[*line - 1];
    l.op = *op;
    l.b = *b;
    return "ok";
  }
  if (w[0] == "patch" && line_ok) {  // patch N vN = A O B
    std::optional<RepairLine> parsed = ParseRepairLine({w.begin() + 2, w.end()}, *line);
    if (!parsed) return "invalid";
    program_.lines[*line - 1] = *parsed;
    return "ok";
  }
  return "invalid";
}

double RepairEnv::Score() const {
  int passing = 0;
  for (int x : instance_.test_inputs) passing += program_.Run(x) == instance_.correct.Run(x);
  const size_t total = instance_.test_inputs.size();
  if (!options_.partial_credit) return passing == static_cast<int>(total) ? 1.0 : 0.0;
  return static_cast<double>(passing) / static_cast<double>(total);
}

std::string RepairEnv::TestReport() const {
  std::vector<std::string> failures;
  for (int x : instance_.test_inputs) {
    const int got = program_.Run(x), want = instance_.correct.Run(x);
    if (got != want) failures.push_back(StrCat("x ", x, " got ", got, " want ", want));
  }
  const size_t total = instance_.test_inputs.size();
  std::string report = StrCat("passed ", total - failures.size(), " of ", total);
  if (!failures.empty()) report += StrCat(" : ", Join(failures, " ; "));
  return report;
}

absl::StatusOr<double> RepairEnv::ScorePartial() {
  if (!started_) return absl::FailedPreconditionError("repair: score before reset");
  return Score();
}

std::string RepairEnv::DebugString() const {
  return StrCat("repair(num_lines=", options_.num_lines, ", num_bugs=", options_.num_bugs,
                ", num_tests=", options_.num_tests, ", max_turns=", options_.max_turns, ")");
}

std::unique_ptr<Policy> MakeRepairExpert(const RepairOptions& options) {
  if (options.expert == RepairExpertKind::kSearch) {
    return std::make_unique<RepairSearchExpert>(options);
  }
  return std::make_unique<RepairExpert>(options);
}

std::unique_ptr<Policy> MakeRepairRandom(const RepairOptions& options, uint64_t seed) {
  return std::make_unique<RepairRandom>(options, seed);
}

}  // namespace flywheel
