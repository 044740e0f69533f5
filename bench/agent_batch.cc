#include "bench/agent_batch.h"

#include <algorithm>
#include <cmath>

#include "flywheel/core/strings.h"

namespace flywheel::bench {

std::vector<Trajectory> MakeAgentBatch(std::mt19937_64& rng, int64_t count,
                                       const AgentBatchShape& shape, int64_t step) {
  std::lognormal_distribution<double> total(std::log(shape.median), 0.7);
  std::normal_distribution<float> logprob(-2.0f, 0.5f);
  std::vector<Trajectory> batch;
  for (int64_t i = 0; i < count; ++i) {
    const int64_t n =
        std::clamp<int64_t>(static_cast<int64_t>(total(rng)), shape.min_len, shape.max_len);
    Trajectory t;
    t.id = StrCat("s", step, "-", i);
    t.execution_id = t.id;
    t.group_id = StrCat("g", step, "-", i / 4);
    t.final_reward = static_cast<float>(rng() % 2);
    const int64_t prompt = n / 4;
    for (int64_t j = 0; j < n; ++j) {
      const auto token = static_cast<int32_t>(rng() % shape.vocab);
      if (j >= prompt && (j / shape.turn) % 2 == 0) {
        t.AppendGenerated(token, std::min(-0.01f, logprob(rng)), 0);
      } else {
        t.AppendPrompt(token);
      }
    }
    batch.push_back(std::move(t));
  }
  return batch;
}

}  // namespace flywheel::bench
