// Every `flywheel bench` entry point, declared here and listed in registry.cc.
#ifndef FLYWHEEL_BENCH_REGISTRY_H_
#define FLYWHEEL_BENCH_REGISTRY_H_

#include <vector>

#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>

#include "bench/bench.h"

namespace flywheel::bench {

const std::vector<BenchEntry>& Benchmarks();

absl::StatusOr<BenchReport> RunMatmulBench(const BenchArgs& args);
absl::StatusOr<BenchReport> RunPackingBench(const BenchArgs& args);
absl::StatusOr<BenchReport> RunEnvExecutorBench(const BenchArgs& args);
absl::StatusOr<BenchReport> RunBufferBench(const BenchArgs& args);
// Float32 n x n matmul throughput, the peak for model-FLOP utilisation figures.
double MeasureMatmulGflops(int64_t n, int repeats);
// n x n matmul TFLOP/s in `dtype` on `device` (synchronised): the GPU arm's MFU denominator.
double MeasureDeviceMatmulTflops(const c10::Device& device, c10::ScalarType dtype, int64_t n,
                                 int repeats);
absl::StatusOr<BenchReport> RunRolloutBench(const BenchArgs& args);
// The rollout engine on a GPU against transformers' generate (rollout_gpu_bench.cc).
absl::StatusOr<BenchReport> RunRolloutGpuBench(const BenchArgs& args);
absl::StatusOr<BenchReport> RunLearnerBench(const BenchArgs& args);
absl::StatusOr<BenchReport> RunLearnerParallelBench(const BenchArgs& args);
absl::StatusOr<BenchReport> RunTrajectoryTreeBench(const BenchArgs& args);
absl::StatusOr<BenchReport> RunPipelineBench(const BenchArgs& args);
absl::StatusOr<BenchReport> RunElasticBench(const BenchArgs& args);
absl::StatusOr<BenchReport> RunLearningBench(const BenchArgs& args);
absl::StatusOr<BenchReport> RunSimBench(const BenchArgs& args);
absl::StatusOr<BenchReport> RunTokenizerBench(const BenchArgs& args);
absl::StatusOr<BenchReport> RunGatewayBench(const BenchArgs& args);

}  // namespace flywheel::bench

#endif  // FLYWHEEL_BENCH_REGISTRY_H_
