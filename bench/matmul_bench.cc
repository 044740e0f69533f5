// Matmul throughput of LibTorch on this machine at a few sizes. Its peak is the denominator of
// the learner's model-FLOP utilisation, and it shows at once whether OpenBLAS is in use (the
// reference BLAS is ~20x slower).
#include <chrono>

#include <torch/cuda.h>
#include <torch/torch.h>

#include "bench/registry.h"
#include "flywheel/core/strings.h"

namespace flywheel::bench {

double MeasureMatmulGflops(int64_t n, int repeats) {
  torch::NoGradGuard no_grad;
  torch::manual_seed(0);
  auto a = torch::randn({n, n});
  auto b = torch::randn({n, n});
  auto c = torch::matmul(a, b);  // warm-up
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < repeats; ++i) c = torch::matmul(a, b);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return 2.0 * n * n * n * repeats / seconds / 1e9;
}

double MeasureDeviceMatmulTflops(const torch::Device& device, torch::ScalarType dtype, int64_t n,
                                 int repeats) {
  torch::NoGradGuard no_grad;
  const auto options = torch::TensorOptions().device(device).dtype(dtype);
  auto a = torch::randn({n, n}, options);
  auto b = torch::randn({n, n}, options);
  auto c = torch::matmul(a, b);  // warm-up: the library's handle and kernel choice
  c = torch::matmul(a, b);
  if (device.is_cuda()) torch::cuda::synchronize(device.index());
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < repeats; ++i) c = torch::matmul(a, b);
  if (device.is_cuda()) torch::cuda::synchronize(device.index());
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return 2.0 * n * n * n * repeats / seconds / 1e12;
}

absl::StatusOr<BenchReport> RunMatmulBench(const BenchArgs& args) {
  const int repeats = static_cast<int>(args.GetInt("repeats", args.quick ? 2 : 10));
  BenchReport report;
  report.config = {{"sizes", {256, 512, 1024}}, {"repeats", repeats}, {"dtype", "float32"}};
  report.table = {{"n", "GFLOP/s"}};
  double peak = 0;
  for (int64_t n : {256, 512, 1024}) {
    const double gflops = MeasureMatmulGflops(n, repeats);
    peak = std::max(peak, gflops);
    report.results[StrCat("n_", n)] = {{"gflops", gflops}};
    report.table.push_back({std::to_string(n), fmt::format("{:.1f}", gflops)});
  }
  report.ratios["peak_gflops"] = peak;
  report.summary = fmt::format("peak {:.1f} GFLOP/s (float32 matmul)", peak);
  return report;
}

}  // namespace flywheel::bench
