#include "bench/pipeline_curve.h"

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>

#include "flywheel/core/strings.h"

namespace flywheel::bench {
namespace {

// Sample-weighted mean reward of points[begin, end).
double WeightedReward(const std::vector<StepPoint>& points, size_t begin, size_t end) {
  double sum = 0, weight = 0;
  for (size_t i = begin; i < end; ++i) {
    const double w = static_cast<double>(std::max<int64_t>(points[i].trajectories, 1));
    sum += w * points[i].reward_mean;
    weight += w;
  }
  return weight > 0 ? sum / weight : 0.0;
}

}  // namespace

absl::StatusOr<std::vector<StepPoint>> ReadStepPoints(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(StrCat("cannot read ", path));
  std::vector<StepPoint> points;
  int64_t line_number = 0;
  for (std::string line; std::getline(in, line);) {
    ++line_number;
    if (line.empty()) continue;
    const nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_discarded()) {
      return absl::DataLossError(
          StrCat(path, ":", line_number, ": not JSON: ", line.substr(0, 200)));
    }
    try {
      StepPoint p;
      p.step = j.at("step").get<int64_t>();
      p.elapsed_s = j.at("elapsed_s").get<double>();
      p.reward_mean = j.at("reward_mean").get<double>();
      p.trajectories = j.at("trajectories").get<int64_t>();
      p.busy_s = j.at("learner_busy_s").get<double>();
      p.wait_s = j.at("learner_wait_s").get<double>();
      const nlohmann::json& dropped = j.at("dropped");
      p.trained = p.trajectories - dropped.value("learner_stale", int64_t{0}) -
                  dropped.value("learner_too_long", int64_t{0});
      points.push_back(p);
    } catch (const nlohmann::json::exception& e) {
      return absl::DataLossError(StrCat(path, ":", line_number, ": not a metrics line (", e.what(),
                                        "): ", line.substr(0, 200)));
    }
  }
  return points;
}

CurveSummary SummariseCurve(const std::vector<StepPoint>& points, const CurveOptions& options) {
  CurveSummary s;
  s.steps = static_cast<int64_t>(points.size());
  for (const StepPoint& p : points) {
    s.samples += p.trained;
    s.busy_s += p.busy_s;
    s.wait_s += p.wait_s;
  }
  if (points.empty()) return s;
  const size_t k = static_cast<size_t>(std::max<int64_t>(options.smooth_steps, 1));
  const size_t last = static_cast<size_t>(std::max<int64_t>(options.final_steps, 1));
  s.final_reward =
      WeightedReward(points, points.size() - std::min(last, points.size()), points.size());
  if (points.size() < k) {
    s.first_smoothed_reward = s.best_smoothed_reward = WeightedReward(points, 0, points.size());
    return s;
  }
  s.first_smoothed_reward = WeightedReward(points, 0, k);
  s.best_smoothed_reward = s.first_smoothed_reward;
  for (size_t i = k - 1; i < points.size(); ++i) {
    const double smoothed = WeightedReward(points, i + 1 - k, i + 1);
    s.best_smoothed_reward = std::max(s.best_smoothed_reward, smoothed);
    if (!s.time_to_target_s.has_value() && smoothed >= options.target_reward) {
      s.time_to_target_s = points[i].elapsed_s;
      s.target_step = points[i].step;
    }
  }
  return s;
}

}  // namespace flywheel::bench
