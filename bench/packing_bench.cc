// Padding waste and distinct shapes of the learner's packer over many steps of length-mixed
// agent trajectories, against padding each trajectory to its own bucket row (the usual
// "bucketing without packing"). Same trajectories, same buckets and token budget for all.
#include <chrono>
#include <map>
#include <random>
#include <set>

#include "bench/registry.h"
#include "flywheel/core/strings.h"
#include "flywheel/learner/packer.h"

namespace flywheel::bench {
namespace {

// Agent trajectories: a prompt, then turns of generated actions and environment observations;
// total length log-normal (median ~`median`, heavy right tail), clamped to the largest bucket.
std::vector<Trajectory> MakePackingBatch(std::mt19937_64& rng, int64_t count, double median,
                                         int64_t max_len, int64_t step) {
  std::lognormal_distribution<double> total(std::log(median), 0.7);
  std::vector<Trajectory> batch;
  for (int64_t i = 0; i < count; ++i) {
    const int64_t n = std::clamp<int64_t>(static_cast<int64_t>(total(rng)), 16, max_len);
    Trajectory t;
    t.id = StrCat("s", step, "-", i);
    const int64_t prompt = n / 4;
    for (int64_t j = 0; j < n; ++j) {
      const bool generated = j >= prompt && (j / 32) % 2 == 0;  // alternate action/observation
      if (generated) {
        t.AppendGenerated(static_cast<int32_t>(j % 1000), -1.0f, step);
      } else {
        t.AppendPrompt(static_cast<int32_t>(j % 1000));
      }
    }
    batch.push_back(std::move(t));
  }
  return batch;
}

struct Tally {
  int64_t real = 0, capacity = 0;
  std::set<std::pair<int64_t, int64_t>> shapes;
  std::vector<double> pack_ms;
  double waste() const { return capacity ? 1.0 - static_cast<double>(real) / capacity : 0.0; }
};

// One row per trajectory, padded to the smallest bucket that fits; micro-batches of
// token_budget / L rows per bucket (fixed shapes, as the packer's).
void PadPerTrajectory(const std::vector<Trajectory>& batch, const PackerOptions& o, Tally& t) {
  std::map<int64_t, int64_t> rows_per_bucket;
  for (const Trajectory& tr : batch) {
    const int64_t L = *std::lower_bound(o.buckets.begin(), o.buckets.end(), tr.size());
    ++rows_per_bucket[L];
    t.real += tr.size();
  }
  for (const auto& [L, count] : rows_per_bucket) {
    const int64_t rows = std::max<int64_t>(1, o.token_budget / L);
    t.capacity += (count + rows - 1) / rows * rows * L;
    t.shapes.insert({rows, L});
  }
}

}  // namespace

absl::StatusOr<BenchReport> RunPackingBench(const BenchArgs& args) {
  const int64_t steps = args.GetInt("steps", args.quick ? 20 : 200);
  const int64_t batch_size = args.GetInt("batch", 64);
  const double median = args.GetDouble("median_len", 700);
  PackerOptions o;
  o.buckets = {512, 1024, 2048, 4096};
  o.token_budget = args.GetInt("token_budget", 16384);
  PackerOptions carry = o;
  carry.carry_over = true;
  Packer ffd(o), ffd_carry(carry);
  Tally naive, plain, carried_tally;

  std::mt19937_64 rng(args.GetInt("seed", 1));
  std::vector<Trajectory> held;
  int64_t total_held = 0, max_extra_lag_steps = 0;
  for (int64_t s = 0; s < steps; ++s) {
    std::vector<Trajectory> batch = MakePackingBatch(rng, batch_size, median, o.buckets.back(), s);
    PadPerTrajectory(batch, o, naive);

    auto timed_pack = [&](Packer& packer, const std::vector<Trajectory>& input, int64_t carried,
                          Tally& tally) -> absl::StatusOr<PackedStep> {
      std::vector<std::vector<float>> adv;
      for (const Trajectory& t : input) adv.emplace_back(t.tokens.size(), 1.0f);
      const auto start = std::chrono::steady_clock::now();
      auto step = packer.Pack(input, adv, carried);
      tally.pack_ms.push_back(
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
              .count());
      if (!step.ok()) return step.status();
      tally.real += step->real_tokens;
      tally.capacity += step->capacity_tokens;
      for (const auto& mb : step->micro_batches) tally.shapes.insert({mb.rows, mb.length});
      return step;
    };
    auto p = timed_pack(ffd, batch, 0, plain);
    if (!p.ok()) return p.status();

    std::vector<Trajectory> input = held;
    const int64_t carried = static_cast<int64_t>(held.size());
    input.insert(input.end(), batch.begin(), batch.end());
    auto c = timed_pack(ffd_carry, input, carried, carried_tally);
    if (!c.ok()) return c.status();
    held.clear();
    for (int64_t i : c->held_back) {
      if (i < carried) max_extra_lag_steps = 2;  // would break the one-step promise
      held.push_back(input[i]);
    }
    if (!held.empty()) max_extra_lag_steps = std::max<int64_t>(max_extra_lag_steps, 1);
    total_held += static_cast<int64_t>(held.size());
  }
  // What is still held at the end was generated but not trained on in these steps.
  int64_t held_tokens = 0;
  for (const Trajectory& t : held) held_tokens += t.size();

  BenchReport report;
  report.config = {{"steps", steps},
                   {"batch", batch_size},
                   {"median_len", median},
                   {"length_distribution", "lognormal(sigma=0.7), clamped to [16, 4096]"},
                   {"buckets", o.buckets},
                   {"token_budget", o.token_budget}};
  auto result = [](const Tally& t) {
    nlohmann::json j = {{"padding_waste", t.waste()},
                        {"distinct_shapes", static_cast<int64_t>(t.shapes.size())},
                        {"real_tokens", t.real},
                        {"capacity_tokens", t.capacity}};
    if (!t.pack_ms.empty()) {
      j["pack_ms_p50"] = Percentile(t.pack_ms, 0.5);
      j["pack_ms_p99"] = Percentile(t.pack_ms, 0.99);
    }
    return j;
  };
  report.results["pad_per_trajectory"] = result(naive);
  report.results["ffd"] = result(plain);
  report.results["ffd_carry_over"] = result(carried_tally);
  report.results["ffd_carry_over"]["held_back_per_step"] =
      static_cast<double>(total_held) / static_cast<double>(steps);
  report.results["ffd_carry_over"]["max_extra_lag_steps"] = max_extra_lag_steps;
  report.results["ffd_carry_over"]["held_at_end_tokens"] = held_tokens;

  report.table = {{"variant", "padding_waste", "distinct_shapes", "pack ms p50"}};
  auto row = [&](const char* name, const Tally& t) {
    report.table.push_back(
        {name, fmt::format("{:.4f}", t.waste()), std::to_string(t.shapes.size()),
         t.pack_ms.empty() ? "-" : fmt::format("{:.2f}", Percentile(t.pack_ms, 0.5))});
  };
  row("pad_per_trajectory", naive);
  row("ffd", plain);
  row("ffd_carry_over", carried_tally);

  const int64_t shapes =
      static_cast<int64_t>(std::max(plain.shapes.size(), carried_tally.shapes.size()));
  report.ratios["padding_waste"] = carried_tally.waste();
  report.ratios["padding_waste_without_carry_over"] = plain.waste();
  report.ratios["distinct_shapes"] = shapes;
  report.ratios["buckets"] = o.buckets.size();
  report.ratios["waste_ratio_vs_pad_per_trajectory"] =
      carried_tally.waste() > 0 ? naive.waste() / carried_tally.waste() : 0.0;
  report.summary = fmt::format(
      "padding waste {:.4f} with carry-over, {:.4f} without, {:.4f} padding each trajectory; "
      "{} distinct shapes for {} buckets",
      carried_tally.waste(), plain.waste(), naive.waste(), shapes, o.buckets.size());
  return report;
}

}  // namespace flywheel::bench
