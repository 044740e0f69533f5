// The list of benchmarks reachable as `flywheel bench NAME`. Add one line per benchmark.
#include "bench/registry.h"

namespace flywheel::bench {

const std::vector<BenchEntry>& Benchmarks() {
  static const std::vector<BenchEntry>* entries = new std::vector<BenchEntry>{
      {"matmul", "float32 matmul GFLOP/s of LibTorch here (the MFU denominator; shows the BLAS in use)", RunMatmulBench},
      {"buffer", "trajectory buffer in-process and over gRPC (durable) vs Redis Streams", RunBufferBench},
  };
  return *entries;
}

}  // namespace flywheel::bench
