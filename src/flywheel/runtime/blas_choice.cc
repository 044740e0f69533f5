#include "flywheel/runtime/blas_choice.h"

#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <thread>
#include <vector>

#include "flywheel/core/status_macros.h"
#include "flywheel/core/strings.h"
#include "flywheel/model/blas_threads.h"
#include "flywheel/model/torch_status.h"

namespace flywheel {
namespace {

constexpr double kKeepManyFactor = 1.25;

// Seconds for one micro-batch's worth of the model's projection GEMMs (forward and the two
// backward products of each), at the BLAS's current pool size.
double TimeProbe(const std::vector<std::pair<torch::Tensor, torch::Tensor>>& gemms) {
  const auto start = std::chrono::steady_clock::now();
  for (const auto& [x, w] : gemms) {
    torch::Tensor y = torch::mm(x, w.t());      // forward   [rows, out]
    torch::Tensor dx = torch::mm(y, w);         // d input   [rows, in]
    torch::Tensor dw = torch::mm(y.t(), x);     // d weight  [out, in]
    (void)dx;
    (void)dw;
  }
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

absl::Status Probe(const ModelOptions& model, int64_t token_budget, int cores, BlasChoice& c) {
  return TorchCall("timing the learner's GEMMs for run.blas_threads = 0 (auto)", [&] {
    torch::NoGradGuard no_grad;
    const int64_t rows = std::clamp<int64_t>(token_budget, 64, 4096);
    const int64_t h = model.hidden_size;
    const int64_t kv = model.num_kv_heads * model.HeadDim();
    std::vector<std::pair<torch::Tensor, torch::Tensor>> gemms;
    torch::Tensor x = torch::randn({rows, h});
    for (int64_t out : {h, kv, kv, h, model.intermediate_size, model.intermediate_size}) {
      gemms.emplace_back(x, torch::randn({out, h}));
    }
    gemms.emplace_back(torch::randn({rows, model.intermediate_size}),
                       torch::randn({h, model.intermediate_size}));
    std::vector<double> one, many;
    for (int round = 0; round < 5; ++round) {  // alternate, so drifting load hits both sides
      (void)SetBlasThreads(1);
      one.push_back(TimeProbe(gemms));
      (void)SetBlasThreads(cores);
      many.push_back(TimeProbe(gemms));
    }
    c.probe_seconds_one = Median(one);
    c.probe_seconds_many = Median(many);
  });
}

}  // namespace

nlohmann::json BlasChoice::ToJson() const {
  nlohmann::json j = {{"library", library},     {"threads_before", threads_before},
                      {"threads", threads},     {"reason", reason},
                      {"cores", cores}};
  if (probe_seconds_one > 0) {
    j["probe_seconds_one"] = probe_seconds_one;
    j["probe_seconds_many"] = probe_seconds_many;
  }
  return j;
}

std::string BlasChoice::DebugString() const {
  if (threads == 0) return StrCat("BLAS: ", library, ", ", reason);
  return StrCat("BLAS: ", threads, " OpenBLAS thread(s) (was ", threads_before, "): ", reason);
}

absl::StatusOr<BlasChoice> ChooseBlasThreads(BlasRole role, int64_t configured,
                                             const ModelOptions& model, int64_t token_budget) {
  if (configured < 0) {
    return absl::InvalidArgumentError(
        StrCat("run.blas_threads (", configured, ") must be >= 0 (0 = auto)"));
  }
  const BlasInfo blas = LoadedBlas();
  BlasChoice c;
  c.library = blas.library;
  c.threads_before = blas.threads;
  c.cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  if (!blas.settable) {
    c.reason = "not OpenBLAS: its threads are left as they are";
    return c;
  }
  if (configured > 0) {
    c.threads = static_cast<int>(configured);
    c.reason = "run.blas_threads";
  } else if (role == BlasRole::kEmbedded) {
    c.threads = 1;
    c.reason = "auto: actor and learner threads share the cores; a pool on top would spin";
  } else if (role == BlasRole::kActorProcess) {
    c.threads = 1;
    c.reason = "auto: decode GEMMs are a few rows";
  } else if (c.cores == 1) {
    c.threads = 1;
    c.reason = "auto: one core";
  } else {
    RETURN_IF_ERROR(Probe(model, token_budget, c.cores, c));
    const double speedup = c.probe_seconds_one / std::max(c.probe_seconds_many, 1e-12);
    c.threads = speedup >= kKeepManyFactor ? c.cores : 1;
    c.reason = StrCat("auto: the learner's GEMMs ran ", speedup, "x as fast on ", c.cores,
                      " threads as on 1 (", c.probe_seconds_many * 1e3, " vs ",
                      c.probe_seconds_one * 1e3, " ms); more threads are kept from ",
                      kKeepManyFactor, "x");
  }
  RETURN_IF_ERROR(SetBlasThreads(c.threads));
  return c;
}

}  // namespace flywheel
