// The list of benchmarks reachable as `flywheel bench NAME`. Add one line per benchmark.
#include "bench/registry.h"

namespace flywheel::bench {

const std::vector<BenchEntry>& Benchmarks() {
  static const std::vector<BenchEntry>* entries = new std::vector<BenchEntry>{
      {"matmul", "float32 matmul GFLOP/s of LibTorch here (the MFU denominator; shows the BLAS in use)", RunMatmulBench},
      {"rollout", "generated tokens/s: rollout engine vs full recompute vs eager PyTorch", RunRolloutBench},
      {"rollout-gpu", "generated tokens/s on a GPU (Qwen3-0.6B-shaped, bfloat16): rollout engine vs transformers generate with a static cache, per batch size", RunRolloutGpuBench},
      {"packing", "learner packer: padding waste and distinct shapes over length-mixed steps vs padding each trajectory", RunPackingBench},
      {"env_executor", "episodes waiting on env latency: executor + timer queue vs blocking threads", RunEnvExecutorBench},
      {"learner", "trained tokens/s: learner step vs eager PyTorch; MFU; packer waste and shapes", RunLearnerBench},
      {"learner-parallel", "trained tokens/s at 1 and 2 ranks per sharding mode (scaling), bytes sent per rank vs theory, all-reduce overlap", RunLearnerParallelBench},
      {"buffer", "trajectory buffer in-process and over gRPC (durable) vs Redis Streams", RunBufferBench},
      {"trajectory-tree", "learner tokens and seconds per branching execution: flat paths vs prefix trees (and per J_max)", RunTrajectoryTreeBench},
      {"pipeline", "guess training under heavy-tailed env latency: async vs colocated learner utilization, samples/s, time to a reward (and per latency median)", RunPipelineBench},
      {"elastic", "heavy-tailed copy task on the same cells: colocated vs static splits vs the elastic scheduler, time to a reward, samples/s, switch seconds", RunElasticBench},
      {"sim", "cluster simulator: simulated events/s, 1e6 episodes on 1,024 devices, and the published ratios (Tunix utilisation, elastic speedups) reproduced next to the published ones", RunSimBench},
      {"learning", "the built-in tasks learning from a fresh start: seconds to a success target, final evaluation; tree vs flat job: time per step and reward gap", RunLearningBench},
      {"tokenizer", "tokenizer.json BPE encode MB/s (Qwen3, Llama-3), one thread: flywheel vs Hugging Face tokenizers, and id mismatches", RunTokenizerBench},
      {"gateway", "generated tokens/s and per-call latency of 64 agents through the OpenAI-compatible gateway vs the same engine driven directly; tree vs flat learner time per step on the executions it recorded", RunGatewayBench},
  };
  return *entries;
}

}  // namespace flywheel::bench
