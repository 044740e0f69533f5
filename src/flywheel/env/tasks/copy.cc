#include "flywheel/env/tasks/copy.h"

#include <algorithm>
#include <cmath>

#include "flywheel/core/strings.h"
#include "flywheel/env/task_source.h"
#include "flywheel/env/tasks/text.h"

namespace flywheel {
namespace {

constexpr std::string_view kCorrect = "correct";
constexpr std::string_view kWrong = "wrong";

VocabularySpec CopyVocabulary(int64_t alphabet) {
  std::vector<std::string> words;
  for (int64_t d = 0; d < alphabet; ++d) words.push_back(std::to_string(d));
  words.emplace_back(kCopyEndMarker);
  words.emplace_back(kCorrect);
  words.emplace_back(kWrong);
  return VocabularySpec::Words(std::move(words));
}

// Correct positions over max(target length, answer length): 1 only for the exact target.
double Score(const std::vector<std::string>& target, const std::vector<std::string_view>& answer) {
  const size_t common = std::min(target.size(), answer.size());
  int64_t correct = 0;
  for (size_t i = 0; i < common; ++i) correct += target[i] == answer[i] ? 1 : 0;
  return static_cast<double>(correct) / static_cast<double>(std::max(target.size(), answer.size()));
}

class CopyExpert : public Policy {
 public:
  void Begin(const TaskInstance&, std::string_view observation) override {
    answer_ = StrCat(Trim(observation), " ", kCopyEndMarker);
  }
  std::string Act(std::string_view) override { return answer_; }

 private:
  std::string answer_;
};

class CopyRandom : public Policy {
 public:
  CopyRandom(int64_t alphabet, uint64_t seed) : alphabet_(alphabet), rng_(seed) {}
  void Begin(const TaskInstance&, std::string_view observation) override {
    length_ = static_cast<int64_t>(SplitWords(observation).size());
  }
  std::string Act(std::string_view) override {
    std::uniform_int_distribution<int64_t> digit(0, alphabet_ - 1);
    std::string answer;
    for (int64_t i = 0; i < length_; ++i) answer += StrCat(digit(rng_), " ");
    return StrCat(answer, kCopyEndMarker);
  }

 private:
  const int64_t alphabet_;
  std::mt19937_64 rng_;
  int64_t length_ = 0;
};

}  // namespace

CopyLengthDistribution::CopyLengthDistribution(const CopyOptions& options)
    : min_length_(options.min_length),
      max_length_(options.max_length),
      alpha_(options.length_alpha),
      mass_(1.0 - std::pow(static_cast<double>(options.min_length) /
                               static_cast<double>(options.max_length + 1),
                           options.length_alpha)) {}

int64_t CopyLengthDistribution::operator()(std::mt19937_64& rng) const {
  const double u = std::uniform_real_distribution<double>(0.0, 1.0)(rng);
  const double x = static_cast<double>(min_length_) / std::pow(1.0 - u * mass_, 1.0 / alpha_);
  // x < max_length + 1 in exact arithmetic; the clamp guards rounding at u near 1.
  return std::clamp(static_cast<int64_t>(std::floor(x)), min_length_, max_length_);
}

CopyEnv::CopyEnv(const CopyOptions& options)
    : options_(options), vocabulary_(CopyVocabulary(options.alphabet)), lengths_(options) {}

absl::StatusOr<StepResult> CopyEnv::Reset(const TaskInstance& task) {
  std::mt19937_64 rng(MixSeed(task.seed));
  const int64_t length = lengths_(rng);
  std::uniform_int_distribution<int64_t> digit(0, options_.alphabet - 1);
  target_.clear();
  StepResult r;
  for (int64_t i = 0; i < length; ++i) {
    target_.push_back(std::to_string(digit(rng)));
    r.observation += i == 0 ? target_.back() : StrCat(" ", target_.back());
  }
  target_.emplace_back(kCopyEndMarker);
  started_ = true;
  done_ = false;
  score_ = 0;
  r.partial_score = 0;
  return r;
}

absl::StatusOr<StepResult> CopyEnv::Step(std::string_view action) {
  if (!started_) return absl::FailedPreconditionError("copy: step before reset");
  if (done_) return absl::FailedPreconditionError("copy: step after the episode ended");
  score_ = Score(target_, SplitWords(action));
  done_ = true;
  StepResult r;
  r.observation = score_ == 1.0 ? kCorrect : kWrong;
  r.reward = score_;
  r.done = true;
  r.end = EpisodeEnd::kDone;
  r.partial_score = score_;
  return r;
}

// Before the answer nothing is copied yet (0); after it, the answer's score.
absl::StatusOr<double> CopyEnv::ScorePartial() {
  if (!started_) return absl::FailedPreconditionError("copy: score before reset");
  return score_;
}

std::string CopyEnv::DebugString() const {
  return StrCat("copy(min_length=", options_.min_length, ", max_length=", options_.max_length,
                ", length_alpha=", options_.length_alpha, ", alphabet=", options_.alphabet, ")");
}

std::unique_ptr<Policy> MakeCopyExpert() { return std::make_unique<CopyExpert>(); }

std::unique_ptr<Policy> MakeCopyRandom(const CopyOptions& options, uint64_t seed) {
  return std::make_unique<CopyRandom>(options.alphabet, seed);
}

}  // namespace flywheel
