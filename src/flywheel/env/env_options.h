// Environment configuration: the [env] section of a job config.
//
//   [env]
//   kind = "guess"                 # guess | calc | repair | copy | process
//   [env.guess]    range = 16, max_guesses = 6
//   [env.copy]     min_length = 4, max_length = 64, length_alpha = 1.2, alphabet = 10
//   [env.latency]  model = "lognormal", mean_ms = 200, sigma = 1.0
//   [env.tool_latency] model = "pareto", mean_ms = 500, alpha = 1.5   # calc's tool calls
//   [env.process]  command = ["python3", "examples/envs/guess_env.py"], copies = 8
#ifndef FLYWHEEL_ENV_ENV_OPTIONS_H_
#define FLYWHEEL_ENV_ENV_OPTIONS_H_

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "flywheel/core/config.h"
#include "flywheel/core/strings.h"

namespace flywheel {

enum class EnvKind { kGuess, kCalc, kRepair, kCopy, kProcess };
inline constexpr config::ChoiceName<EnvKind> kEnvKindNames[] = {{"guess", EnvKind::kGuess},
                                                                {"calc", EnvKind::kCalc},
                                                                {"repair", EnvKind::kRepair},
                                                                {"copy", EnvKind::kCopy},
                                                                {"process", EnvKind::kProcess}};

enum class LatencyKind { kNone, kConstant, kLognormal, kPareto, kTrace };
inline constexpr config::ChoiceName<LatencyKind> kLatencyKindNames[] = {
    {"none", LatencyKind::kNone},
    {"constant", LatencyKind::kConstant},
    {"lognormal", LatencyKind::kLognormal},
    {"pareto", LatencyKind::kPareto},
    {"trace", LatencyKind::kTrace}};

// Delay added to each step by the latency wrapper (never by the task itself).
struct LatencyOptions {
  LatencyKind model = LatencyKind::kNone;
  double mean_ms = 0;      // constant, lognormal, pareto: the distribution's mean
  double sigma = 1.0;      // lognormal: standard deviation of log(latency)
  double alpha = 1.5;      // pareto: tail index (> 1 for a finite mean; smaller = heavier tail)
  std::string trace_file;  // trace: one latency in milliseconds per line, replayed in order
  // Phases of a load that moves (a tool that slows down and recovers): each drawn latency is
  // multiplied by phase_scales[i], i = ⌊t / phase_seconds⌋ mod the number of scales, t the time
  // since the environment factory was made (a job's start; the simulator's clock). 0: steady.
  double phase_seconds = 0;
  std::vector<double> phase_scales;

  template <typename V>
  void VisitFields(V& v) {
    v.Choice("model", model, kLatencyKindNames, "latency distribution per step");
    v.Field("mean_ms", mean_ms, "mean latency in ms (constant, lognormal, pareto)");
    v.Field("sigma", sigma, "lognormal: standard deviation of log(latency)");
    v.Field("alpha", alpha, "pareto: tail index, > 1 (smaller = heavier tail)");
    v.Field("trace_file", trace_file, "trace: file of latencies in ms, one per line");
    v.Field("phase_seconds", phase_seconds,
            "> 0: latency phases this long, cycling through phase_scales (0 = steady)");
    v.Field("phase_scales", phase_scales,
            "with phase_seconds: the factor of each phase's latencies, e.g. [0.1, 3.0]");
  }

  absl::Status Validate(std::string_view section) const {
    if (!std::isfinite(mean_ms) || mean_ms < 0) {
      return absl::InvalidArgumentError(StrCat(section, ".mean_ms must be >= 0"));
    }
    if (model == LatencyKind::kLognormal && !(sigma >= 0 && sigma < 10)) {
      return absl::InvalidArgumentError(StrCat(section, ".sigma must be in [0, 10)"));
    }
    if (model == LatencyKind::kPareto && !(alpha > 1)) {
      return absl::InvalidArgumentError(
          StrCat(section, ".alpha must be > 1 (the mean of a Pareto with alpha <= 1 is infinite)"));
    }
    if (!std::isfinite(phase_seconds) || phase_seconds < 0) {
      return absl::InvalidArgumentError(StrCat(section, ".phase_seconds must be >= 0"));
    }
    if (phase_seconds > 0 && phase_scales.empty()) {
      return absl::InvalidArgumentError(StrCat(
          section, ".phase_scales must list the factor of each phase when phase_seconds > 0"));
    }
    for (double scale : phase_scales) {
      if (!std::isfinite(scale) || scale < 0) {
        return absl::InvalidArgumentError(
            StrCat(section, ".phase_scales must be finite factors >= 0, got ", scale));
      }
    }
    if (model == LatencyKind::kTrace && trace_file.empty()) {
      return absl::InvalidArgumentError(
          StrCat(section, ".trace_file must name a file when model = \"trace\""));
    }
    return absl::OkStatus();
  }
};

struct GuessOptions {
  int64_t range = 16;       // the hidden number is in [0, range)
  int64_t max_guesses = 6;  // binary search needs ceil(log2(range + 1))
  // Dense credit: each guess also earns progress_reward x the share of the range its feedback
  // ruled out, so the episode's progress rewards sum to progress_reward x its final progress.
  // 0 = sparse (reward 1 for finding the number, nothing else). Kept below 1 so that a total
  // reward >= 1 still means the number was found.
  double progress_reward = 0.0;

  template <typename V>
  void VisitFields(V& v) {
    v.Field("range", range, "hidden number is in [0, range)");
    v.Field("max_guesses", max_guesses, "guesses before the episode ends unsolved");
    v.Field("progress_reward", progress_reward,
            "weight of the per-guess reward for the share of the range ruled out, in [0, 1); "
            "0 = sparse");
  }
  absl::Status Validate() const {
    if (range < 2 || range > 4096) {
      return absl::InvalidArgumentError("env.guess.range must be in [2, 4096]");
    }
    if (max_guesses < 1) return absl::InvalidArgumentError("env.guess.max_guesses must be >= 1");
    if (!(progress_reward >= 0 && progress_reward < 1)) {
      return absl::InvalidArgumentError(
          "env.guess.progress_reward must be in [0, 1): at 1 or more an unsolved episode could "
          "earn as much as a solved one");
    }
    return absl::OkStatus();
  }
};

struct CalcOptions {
  int64_t num_operands = 2;  // operands in the expression to evaluate
  int64_t max_operand = 99;  // operands are drawn from [0, max_operand]
  int64_t max_turns = 4;     // actions before the episode ends unsolved

  template <typename V>
  void VisitFields(V& v) {
    v.Field("num_operands", num_operands, "operands per expression (difficulty)");
    v.Field("max_operand", max_operand, "operands are drawn from [0, max_operand]");
    v.Field("max_turns", max_turns, "actions before the episode ends unsolved");
  }
  absl::Status Validate() const {
    if (num_operands < 2 || num_operands > 8) {
      return absl::InvalidArgumentError("env.calc.num_operands must be in [2, 8]");
    }
    if (max_operand < 1 || max_operand > 9999) {
      return absl::InvalidArgumentError("env.calc.max_operand must be in [1, 9999]");
    }
    if (max_turns < 2) {
      return absl::InvalidArgumentError(
          "env.calc.max_turns must be >= 2 (one tool call, one answer)");
    }
    return absl::OkStatus();
  }
};

// The scripted expert of repair (tasks/repair.h): `oracle` knows the correct program and patches
// every wrong line; `search` reads the program and tries one-token edits of one line, running
// the tests after each, and gives up after a failed run with probability expert_give_up — a
// demonstration of the loop for a warm start, which reinforcement learning can make persistent.
enum class RepairExpertKind { kOracle, kSearch };
inline constexpr config::ChoiceName<RepairExpertKind> kRepairExpertNames[] = {
    {"oracle", RepairExpertKind::kOracle}, {"search", RepairExpertKind::kSearch}};

struct RepairOptions {
  int64_t num_lines = 6;       // program length
  int64_t num_bugs = 1;        // lines mutated from the correct program
  int64_t num_tests = 6;       // unit tests (inputs 0..9, values mod 10)
  int64_t max_turns = 16;      // horizon: a few for easy runs, hundreds for long ones
  bool partial_credit = true;  // reward = fraction of tests passing; false: 1 only when all pass
  RepairExpertKind expert = RepairExpertKind::kOracle;
  double expert_give_up = 0.5;  // search: chance of submitting after each failed test run

  template <typename V>
  void VisitFields(V& v) {
    v.Field("num_lines", num_lines, "lines in the program");
    v.Field("num_bugs", num_bugs, "lines that are wrong (each breaks a test)");
    v.Field("num_tests", num_tests, "unit tests, at most 10");
    v.Field("max_turns", max_turns, "actions before the episode ends (then it is scored)");
    v.Field("partial_credit", partial_credit,
            "reward the fraction of tests passing; false: 1 when all pass, else 0");
    v.Choice("expert", expert, kRepairExpertNames,
             "scripted expert: oracle (patches from the correct program) or search (edits one "
             "line, tests, retries)");
    v.Field("expert_give_up", expert_give_up,
            "search expert: probability of submitting after a failed test run, in [0, 1]");
  }
  absl::Status Validate() const {
    if (num_lines < 2 || num_lines > 200) {
      return absl::InvalidArgumentError("env.repair.num_lines must be in [2, 200]");
    }
    if (num_bugs < 1 || num_bugs > num_lines) {
      return absl::InvalidArgumentError("env.repair.num_bugs must be in [1, env.repair.num_lines]");
    }
    if (num_tests < 1 || num_tests > 10) {
      return absl::InvalidArgumentError("env.repair.num_tests must be in [1, 10]");
    }
    if (max_turns < 1 || max_turns > 100000) {
      return absl::InvalidArgumentError("env.repair.max_turns must be in [1, 100000]");
    }
    if (!(expert_give_up >= 0 && expert_give_up <= 1)) {
      return absl::InvalidArgumentError("env.repair.expert_give_up must be in [0, 1]");
    }
    return absl::OkStatus();
  }
};

// copy (tasks/copy.h): the string's length is a bounded Pareto on [min_length, max_length], so
// the tokens an episode generates are heavy-tailed (p50 6, p90 21, p99 53 at the defaults).
struct CopyOptions {
  int64_t min_length = 4;     // shortest string, also the Pareto's scale x_m
  int64_t max_length = 64;    // longest string; actor.max_new_tokens must be >= max_length + 2
  double length_alpha = 1.2;  // tail index: smaller = heavier tail (1.2: p99 / p50 ~ 9)
  int64_t alphabet = 10;      // the digits are 0 .. alphabet - 1

  template <typename V>
  void VisitFields(V& v) {
    v.Field("min_length", min_length, "shortest digit string (the Pareto's scale)");
    v.Field("max_length", max_length,
            "longest digit string; actor.max_new_tokens must be >= max_length + 2");
    v.Field("length_alpha", length_alpha,
            "tail index of the bounded Pareto of lengths, > 0 (smaller = heavier tail)");
    v.Field("alphabet", alphabet, "digits 0 .. alphabet - 1, in [2, 10]");
  }
  absl::Status Validate() const {
    if (min_length < 1) return absl::InvalidArgumentError("env.copy.min_length must be >= 1");
    if (max_length < min_length || max_length > 4096) {
      return absl::InvalidArgumentError(StrCat("env.copy.max_length = ", max_length,
                                               " must be in [env.copy.min_length = ", min_length,
                                               ", 4096]"));
    }
    if (!(length_alpha > 0 && length_alpha <= 100)) {  // NaN fails too
      return absl::InvalidArgumentError(
          "env.copy.length_alpha must be in (0, 100] (the Pareto's tail index; smaller = heavier)");
    }
    if (alphabet < 2 || alphabet > 10) {
      return absl::InvalidArgumentError("env.copy.alphabet must be in [2, 10] (decimal digits)");
    }
    return absl::OkStatus();
  }
};

// An environment run as N copies of a user command speaking docs/env-protocol.md.
struct ProcessOptions {
  std::vector<std::string> command;   // argv; the first word is looked up on PATH
  int64_t copies = 4;                 // processes kept running; one episode each at a time
  double start_timeout_seconds = 10;  // hello handshake after a (re)start
  double step_timeout_seconds = 30;   // reset or step reply; then the episode ends as timeout
  double score_timeout_seconds = 2;   // partial score after a timeout or on budget expiry
  int64_t max_line_bytes = 16 << 20;  // a longer reply line is a protocol error

  template <typename V>
  void VisitFields(V& v) {
    v.Field("command", command, "argv of the environment program, e.g. [\"python3\", \"env.py\"]");
    v.Field("copies", copies, "processes kept running (episodes served at once)");
    v.Field("start_timeout_seconds", start_timeout_seconds, "limit for the hello handshake");
    v.Field("step_timeout_seconds", step_timeout_seconds,
            "limit for a reset or step reply; the episode then ends as timeout");
    v.Field("score_timeout_seconds", score_timeout_seconds, "limit for a partial score reply");
    v.Field("max_line_bytes", max_line_bytes, "longest reply line; longer is a protocol error");
  }
  absl::Status Validate() const {
    if (copies < 1) return absl::InvalidArgumentError("env.process.copies must be >= 1");
    if (!(start_timeout_seconds > 0) || !(step_timeout_seconds > 0) ||
        !(score_timeout_seconds > 0)) {
      return absl::InvalidArgumentError(
          "env.process.start_timeout_seconds, step_timeout_seconds and score_timeout_seconds "
          "must be > 0");
    }
    if (max_line_bytes < 1024) {
      return absl::InvalidArgumentError("env.process.max_line_bytes must be >= 1024");
    }
    return absl::OkStatus();
  }
};

struct EnvOptions {
  EnvKind kind = EnvKind::kGuess;
  int64_t max_observation_bytes = 4096;  // longer observations are truncated and counted
  int64_t workers = 2;                   // threads running env compute for async episodes
  LatencyOptions latency;
  LatencyOptions tool_latency;  // added instead of `latency` on steps that call a tool
  GuessOptions guess;
  CalcOptions calc;
  RepairOptions repair;
  CopyOptions copy;
  ProcessOptions process;

  template <typename V>
  void VisitFields(V& v) {
    v.Choice("kind", kind, kEnvKindNames, "built-in task, or an external process");
    v.Field("max_observation_bytes", max_observation_bytes,
            "longer observations are truncated to this and counted");
    v.Field("workers", workers, "threads running environment compute for async episodes");
    v.Section("latency", latency);
    v.Section("tool_latency", tool_latency);
    v.Section("guess", guess);
    v.Section("calc", calc);
    v.Section("repair", repair);
    v.Section("copy", copy);
    v.Section("process", process);
  }

  absl::Status Validate() const {
    if (max_observation_bytes < 16) {
      return absl::InvalidArgumentError("env.max_observation_bytes must be >= 16");
    }
    if (workers < 1) return absl::InvalidArgumentError("env.workers must be >= 1");
    if (absl::Status s = latency.Validate("env.latency"); !s.ok()) return s;
    if (absl::Status s = tool_latency.Validate("env.tool_latency"); !s.ok()) return s;
    if (absl::Status s = guess.Validate(); !s.ok()) return s;
    if (absl::Status s = calc.Validate(); !s.ok()) return s;
    if (absl::Status s = repair.Validate(); !s.ok()) return s;
    if (absl::Status s = copy.Validate(); !s.ok()) return s;
    if (absl::Status s = process.Validate(); !s.ok()) return s;
    if (kind == EnvKind::kProcess && process.command.empty()) {
      return absl::InvalidArgumentError(
          "env.process.command must be set when env.kind = \"process\" "
          "(e.g. [\"python3\", \"examples/envs/guess_env.py\"])");
    }
    return absl::OkStatus();
  }
};

}  // namespace flywheel

#endif  // FLYWHEEL_ENV_ENV_OPTIONS_H_
