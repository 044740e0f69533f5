#include "flywheel/env/process/env_check.h"

#include <memory>
#include <optional>
#include <random>
#include <set>
#include <sstream>

#include "absl/time/clock.h"
#include "flywheel/core/strings.h"
#include "flywheel/env/process/protocol.h"
#include "flywheel/env/process/subprocess.h"
#include "flywheel/env/task_source.h"

namespace flywheel {
namespace {

constexpr size_t kMaxLineBytes = 16 << 20;

class Checker {
 public:
  Checker(const std::vector<std::string>& command, const EnvCheckOptions& options,
          EnvCheckReport& report)
      : command_(command), options_(options), report_(report), rng_(options.seed) {}

  void Run() {
    absl::StatusOr<std::unique_ptr<Subprocess>> p = Subprocess::Start(command_);
    if (!p.ok()) {
      report_.violations.push_back(std::string(p.status().message()));
      return;
    }
    process_ = *std::move(p);
    if (!Hello()) return;
    for (int64_t e = 0; e < options_.episodes; ++e) {
      if (!Episode(e)) return;
    }
    if (!ErrorReplies()) return;
    Close();
  }

 private:
  absl::Duration Timeout() const {
    return absl::Milliseconds(static_cast<int64_t>(options_.timeout_seconds * 1000));
  }

  // Sends a request and returns the reply line; nullopt (with a violation) when the process
  // crashed or stayed silent, after which nothing more can be checked.
  std::optional<std::string> Request(const std::string& request, std::string_view what) {
    absl::Status status = process_->WriteLine(request);
    absl::StatusOr<std::string> line = std::string();
    if (!status.ok()) line = status;
    if (status.ok()) line = process_->ReadLine(absl::Now() + Timeout(), kMaxLineBytes);
    if (line.ok()) return *line;
    std::string problem;
    if (line.status().code() == absl::StatusCode::kDeadlineExceeded) {
      problem = StrCat("no reply within ", options_.timeout_seconds, " s");
    } else if (line.status().code() == absl::StatusCode::kResourceExhausted) {
      problem = std::string(line.status().message());
    } else {
      process_->WaitExit(absl::Now() + absl::Milliseconds(500));
      problem = StrCat("the process died (", process_->ExitDescription(), ")");
    }
    const std::string tail = process_->StderrTail();
    report_.violations.push_back(StrCat(what, ": ", problem, " after ", protocol::Quote(request),
                                        tail.empty() ? "" : StrCat("; stderr: ", tail)));
    report_.notes.push_back("the remaining checks were skipped");
    return std::nullopt;
  }

  // Records a violation once: the same problem in a later episode is not repeated.
  void Violation(std::string_view what, std::string_view detail) {
    ++violation_events_;
    if (!seen_.insert(std::string(detail)).second) return;
    report_.violations.push_back(StrCat(what, ": ", detail));
  }
  void Violation(std::string_view what, const absl::Status& status) {
    Violation(what, ToStd(status.message()));
  }

  void CheckVocabulary(std::string_view what, const std::string& observation) {
    if (InVocabulary(vocabulary_, observation)) return;
    Violation(what, StrCat("observation ", protocol::Quote(observation),
                           " has words outside the declared vocabulary"));
  }

  bool Hello() {
    std::optional<std::string> line = Request(protocol::HelloRequest(), "hello");
    if (!line) return false;
    absl::StatusOr<protocol::Hello> hello = protocol::ParseHello(*line);
    if (!hello.ok()) {
      Violation("hello", hello.status());
      return true;  // go on with a byte vocabulary to find more
    }
    name_ = hello->name;
    vocabulary_ = hello->vocabulary;
    report_.passed.push_back(StrCat(
        "hello: protocol_version ", hello->version, ", name \"", name_, "\", vocabulary ",
        vocabulary_.kind == VocabularySpec::kWords ? StrCat(vocabulary_.words.size(), " words")
                                                   : std::string("bytes")));
    return true;
  }

  std::string RandomAction() {
    if (vocabulary_.kind == VocabularySpec::kWords && !vocabulary_.words.empty()) {
      return vocabulary_
          .words[std::uniform_int_distribution<size_t>(0, vocabulary_.words.size() - 1)(rng_)];
    }
    static const char* kActions[] = {"0", "1", "7", "hello", "ANSWER 3", ""};
    return kActions[std::uniform_int_distribution<int>(0, 5)(rng_)];
  }

  // Resets; returns the first observation, or nullopt when the process is unusable.
  std::optional<std::optional<StepResult>> Reset(uint64_t seed, std::string_view what) {
    std::optional<std::string> line = Request(protocol::ResetRequest(name_, seed), what);
    if (!line) return std::nullopt;
    absl::StatusOr<StepResult> r = protocol::ParseObservation(*line);
    if (!r.ok()) {
      Violation(what, r.status());
      return std::optional<StepResult>();
    }
    CheckVocabulary(what, r->observation);
    return std::optional<StepResult>(*std::move(r));
  }

  bool Episode(int64_t e) {
    const uint64_t seed = MixSeed(options_.seed + e) & ((uint64_t{1} << 53) - 1);
    const std::string what = StrCat("episode ", e + 1);
    const int64_t violations_before = violation_events_;
    auto first = Reset(seed, StrCat(what, " reset"));
    if (!first) return false;
    // Budget expiry asks for a partial score at any point, also right after reset.
    if (e == 0 && !Score(StrCat(what, " score after reset"))) return false;
    if (e == 0 && *first) {
      // Group rollouts rely on the same seed giving the same instance.
      auto again = Reset(seed, StrCat(what, " reset again with the same seed"));
      if (!again) return false;
      if (*again && (*again)->observation != (*first)->observation) {
        report_.violations.push_back(StrCat("reset is not deterministic: seed ", seed, " gave ",
                                            protocol::Quote((*first)->observation), " then ",
                                            protocol::Quote((*again)->observation)));
      } else if (*again) {
        report_.passed.push_back("reset: the same seed gives the same first observation");
      }
    }
    if (*first && (*first)->done) {
      report_.notes.push_back(StrCat(what, ": the episode was done at reset"));
      return true;
    }
    bool done = false;
    int64_t steps = 0;
    for (; steps < options_.max_steps && !done; ++steps) {
      const std::string action = RandomAction();
      const std::string step_what = StrCat(what, " step ", steps + 1, " (action \"", action, "\")");
      std::optional<std::string> line = Request(protocol::StepRequest(action), step_what);
      if (!line) return false;
      absl::StatusOr<StepResult> r = protocol::ParseObservation(*line);
      if (!r.ok()) {
        Violation(step_what, r.status());
        return true;  // state unknown: next episode
      }
      CheckVocabulary(step_what, r->observation);
      done = r->done;
      if (steps == 0 && !done && !Score(StrCat(what, " score after a step"))) return false;
    }
    if (!done) {
      report_.notes.push_back(StrCat(what, ": not done after ", steps, " random actions"));
      return true;
    }
    if (violation_events_ == violations_before) {
      report_.passed.push_back(StrCat(what, ": done after ", steps, " steps, every reply valid"));
    }
    std::optional<std::string> line =
        Request(protocol::StepRequest(RandomAction()), StrCat(what, " step after done"));
    if (!line) return false;
    ExpectError(StrCat(what, " step after done"), *line);
    return true;
  }

  bool Score(const std::string& what) {
    std::optional<std::string> line = Request(protocol::ScoreRequest(), what);
    if (!line) return false;
    absl::StatusOr<double> score = protocol::ParseScore(*line);
    if (!score.ok()) {
      Violation(what, score.status());
    } else if (!score_passed_) {
      score_passed_ = true;
      report_.passed.push_back(StrCat("score: a partial score in [0, 1] (", *score, ")"));
    }
    return true;
  }

  void ExpectError(const std::string& what, const std::string& line) {
    absl::StatusOr<StepResult> r = protocol::ParseObservation(line);
    if (r.status().code() == absl::StatusCode::kFailedPrecondition) {
      report_.passed.push_back(StrCat(what, ": answered with an error reply"));
    } else {
      Violation(what,
                StrCat("expected {\"type\":\"error\",\"message\":…}, got ", protocol::Quote(line)));
    }
  }

  bool ErrorReplies() {
    for (const auto& [request, what] :
         {std::pair<std::string, std::string>{R"({"type":"frobnicate"})", "unknown request type"},
          {"this is not json", "a request line that is not JSON"}}) {
      std::optional<std::string> line = Request(request, what);
      if (!line) return false;
      ExpectError(what, *line);
    }
    return true;
  }

  void Close() {
    if (!process_->WriteLine(protocol::CloseRequest()).ok() ||
        !process_->WaitExit(absl::Now() + Timeout())) {
      report_.violations.push_back(
          StrCat("close: the process did not exit within ", options_.timeout_seconds, " s"));
      return;
    }
    if (process_->exit_code() != 0) {
      report_.violations.push_back(
          StrCat("close: the process ", process_->ExitDescription(), ", expected code 0"));
      return;
    }
    report_.passed.push_back("close: exited with code 0");
  }

  const std::vector<std::string>& command_;
  const EnvCheckOptions options_;
  EnvCheckReport& report_;
  std::mt19937_64 rng_;
  std::unique_ptr<Subprocess> process_;
  std::string name_ = "?";
  VocabularySpec vocabulary_;
  bool score_passed_ = false;
  std::set<std::string> seen_;    // violation details already reported
  int64_t violation_events_ = 0;  // including repeats
};

}  // namespace

EnvCheckReport CheckEnvironment(const std::vector<std::string>& command,
                                const EnvCheckOptions& options) {
  EnvCheckReport report;
  Checker(command, options, report).Run();
  return report;
}

}  // namespace flywheel
