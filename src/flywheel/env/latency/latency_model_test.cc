// Each latency model's distribution, measured as the virtual time the latency wrapper waits.
#include "flywheel/env/latency/latency_model.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>

#include "flywheel/core/clock.h"
#include "flywheel/env/latency/latency_env.h"
#include "flywheel/env/test_util.h"

namespace flywheel {
namespace {

using ::testing::HasSubstr;

constexpr double kZ99 = 2.3263478740408408;  // standard normal 0.99 quantile

// Step latencies in ms, as the virtual clock sees them through LatencyEnv.
std::vector<double> DrawThroughWrapper(const LatencyOptions& options, int n, uint64_t seed = 1) {
  auto factory = LatencyModelFactory::Create(options);
  EXPECT_TRUE(factory.ok()) << factory.status();
  VirtualClock clock;
  LatencyEnv env(std::make_unique<testing::EndlessEnv>(), *factory, nullptr, &clock);
  EXPECT_TRUE(env.Reset(TaskInstance{"t", seed}).ok());
  std::vector<double> ms;
  for (int i = 0; i < n; ++i) {
    const absl::Time before = clock.Now();
    auto r = env.Step("a");
    EXPECT_TRUE(r.ok());
    EXPECT_EQ(r->latency, absl::ZeroDuration()) << "waited on the clock, not reported";
    ms.push_back(absl::ToDoubleMilliseconds(clock.Now() - before));
  }
  return ms;
}

double Mean(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x;
  return s / v.size();
}

double Quantile(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  return v[static_cast<size_t>(q * (v.size() - 1))];
}

TEST(LatencyModelTest, Constant) {
  const auto ms = DrawThroughWrapper(testing::Latency(LatencyKind::kConstant, 50), 1000);
  for (double x : ms) EXPECT_DOUBLE_EQ(x, 50);
}

TEST(LatencyModelTest, LognormalMeanAndTail) {
  const double mean = 100, sigma = 1.0;
  const auto ms =
      DrawThroughWrapper(testing::Latency(LatencyKind::kLognormal, mean, sigma), 200000);
  const double mu = std::log(mean) - sigma * sigma / 2;
  EXPECT_NEAR(Mean(ms), mean, 0.03 * mean);
  EXPECT_NEAR(Quantile(ms, 0.5), std::exp(mu), 0.03 * std::exp(mu));
  EXPECT_NEAR(Quantile(ms, 0.99), std::exp(mu + kZ99 * sigma), 0.05 * std::exp(mu + kZ99 * sigma));
}

TEST(LatencyModelTest, ParetoMeanAndHeavyTail) {
  const double mean = 100, alpha = 2.5;
  const double t_min = mean * (alpha - 1) / alpha;  // 60 ms
  const auto ms =
      DrawThroughWrapper(testing::Latency(LatencyKind::kPareto, mean, 1, alpha), 200000);
  EXPECT_NEAR(Mean(ms), mean, 0.03 * mean);
  EXPECT_GE(*std::min_element(ms.begin(), ms.end()), t_min - 0.001);
  // P(X > t) = (t_min / t)^alpha: the 0.99 quantile is t_min · 100^(1/alpha).
  const double p99 = t_min * std::pow(100.0, 1 / alpha);
  EXPECT_NEAR(Quantile(ms, 0.99), p99, 0.05 * p99);
  // The tail beyond 10 · t_min holds 10^-alpha of the mass (0.32 %).
  const double beyond =
      std::count_if(ms.begin(), ms.end(), [&](double x) { return x > 10 * t_min; });
  EXPECT_NEAR(beyond / ms.size(), std::pow(10.0, -alpha), 0.15 * std::pow(10.0, -alpha));
}

TEST(LatencyModelTest, TraceReplaysInOrderAndWraps) {
  const auto path = std::filesystem::temp_directory_path() / "flywheel_trace_test.txt";
  std::ofstream(path) << "# recorded step latencies, ms\n10\n20\n\n30.5\n40\n";
  const auto ms = DrawThroughWrapper(
      testing::Latency(LatencyKind::kTrace, 0, 1, 1.5, path.string()), 400, /*seed=*/3);
  EXPECT_NEAR(Mean(ms), (10 + 20 + 30.5 + 40) / 4, 1e-9);
  const std::vector<double> cycle = {10, 20, 30.5, 40};
  const auto start = std::find(cycle.begin(), cycle.end(), ms[0]) - cycle.begin();
  for (size_t i = 0; i < ms.size(); ++i) EXPECT_DOUBLE_EQ(ms[i], cycle[(start + i) % 4]);
}

TEST(LatencyModelTest, BadTraceNamesFileAndLine) {
  const auto path = std::filesystem::temp_directory_path() / "flywheel_bad_trace.txt";
  std::ofstream(path) << "10\nfast\n";
  auto factory =
      LatencyModelFactory::Create(testing::Latency(LatencyKind::kTrace, 0, 1, 1.5, path.string()));
  ASSERT_FALSE(factory.ok());
  EXPECT_THAT(factory.status().message(), HasSubstr(path.string() + ":2: \"fast\""));
  auto missing = LatencyModelFactory::Create(
      testing::Latency(LatencyKind::kTrace, 0, 1, 1.5, "/nonexistent/trace.txt"));
  EXPECT_THAT(missing.status().message(), HasSubstr("/nonexistent/trace.txt"));
}

TEST(LatencyModelTest, ToolCallsDrawFromTheToolModel) {
  auto step = LatencyModelFactory::Create(testing::Latency(LatencyKind::kConstant, 10));
  auto tool = LatencyModelFactory::Create(testing::Latency(LatencyKind::kConstant, 500));
  ASSERT_TRUE(step.ok() && tool.ok());
  LatencyEnv env(std::make_unique<testing::EndlessEnv>(), *step, *tool);  // reporting mode
  ASSERT_TRUE(env.Reset(TaskInstance{"t", 1}).ok());
  EXPECT_EQ(env.Step("a")->latency, absl::Milliseconds(10));
  EXPECT_EQ(env.Step("tool")->latency, absl::Milliseconds(500));
}

TEST(LatencyModelTest, RolloutsOfAGroupDrawDifferentLatencies) {
  LatencyOptions options = testing::Latency(LatencyKind::kLognormal, 100);
  auto factory = LatencyModelFactory::Create(options);
  ASSERT_TRUE(factory.ok());
  std::vector<absl::Duration> first;
  for (int64_t rollout = 0; rollout < 2; ++rollout) {
    LatencyEnv env(std::make_unique<testing::EndlessEnv>(), *factory, nullptr);
    ASSERT_TRUE(env.Reset(TaskInstance{"t", 1, 0, rollout}).ok());
    first.push_back(env.Step("a")->latency);
  }
  EXPECT_NE(first[0], first[1]);
}

// Phases multiply every draw by the factor of the phase the factory's clock is in, cycling.
TEST(LatencyModelTest, PhasesScaleDrawsByTheClocksPhase) {
  LatencyOptions options;
  options.model = LatencyKind::kConstant;
  options.mean_ms = 100;
  options.phase_seconds = 10;
  options.phase_scales = {0.1, 3.0};
  ASSERT_TRUE(options.Validate("env.latency").ok());
  VirtualClock clock;
  auto factory = LatencyModelFactory::Create(options, &clock);
  ASSERT_TRUE(factory.ok()) << factory.status();
  std::unique_ptr<LatencyModel> model = (*factory)->NewModel(1);
  EXPECT_EQ(model->Sample(), absl::Milliseconds(10));  // phase 0: x 0.1
  clock.Advance(absl::Seconds(12));
  EXPECT_EQ(model->Sample(), absl::Milliseconds(300));  // phase 1: x 3
  clock.Advance(absl::Seconds(10));
  EXPECT_EQ(model->Sample(), absl::Milliseconds(10));  // phase 2 = phase 0 again
  options.phase_scales.clear();
  EXPECT_THAT(std::string(options.Validate("env.latency").message()),
              HasSubstr("env.latency.phase_scales must list"));
  options.phase_scales = {-1};
  EXPECT_THAT(std::string(options.Validate("env.latency").message()), HasSubstr(">= 0"));
}

}  // namespace
}  // namespace flywheel
