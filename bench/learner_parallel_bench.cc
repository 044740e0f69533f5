// Trained tokens/s of the learner at 1 rank and at 2 ranks, per sharding mode, on the same global
// batches, and what the ranks send each other:
//
//   for each model size (guess, big) and each mode (none = data parallel, grads_optimizer, full):
//     side 1:  one rank trains the global batch alone
//     side 2:  two ranks each train their share of it (AssignMicroBatches), gradients summed
//     warm-up both, then `rounds` rounds of `steps` steps, the order of the sides alternating;
//     tokens/s = real tokens of the global batches / seconds of the round, median over rounds
//   scaling = tokens/s at 2 ranks / tokens/s at 1 rank
//
// Ranks are threads of this process, as in the learner's parallel tests: each its own model
// replica, LearnerStep and dist::Communicator (Gloo over TCP on 127.0.0.1, one HashStore), each
// at::set_num_threads(1), OpenBLAS at one thread. Threads rather than processes because nothing
// is shared between the ranks but the memory bus and the cores (no shared tensor, lock or
// allocator arena on the hot path: glibc gives each thread its own arena), the collectives go
// through the same sockets as between processes, and the 1-rank side runs on a thread of the
// same kind, so neither side gets a setup the other lacks.
//
// The 1-rank peer: data parallel's is the plain single-process learner (no communicator, the
// best it can do); a sharded mode's is the same mode over a group of one (the same layer
// gathering and, with full sharding, the same recomputation), so that its scaling measures the
// second rank and its communication, not the cost of sharding itself (that is full_vs_none_1).
//
// Bytes per step per rank, three ways:
//   comm_bytes   LearnerStepResult::comm_bytes (Communicator::bytes_sent: the payload each
//                collective moves per rank under a ring algorithm, counted as they are issued)
//   theory       from the parameter bytes P (per unit for full sharding), N ranks:
//                  none:            all-reduce                 2(N-1)/N · P
//                  grads_optimizer: reduce-scatter + all-gather 2(N-1)/N · P (padded units)
//                  full:            per micro-batch and layer: all-gather (forward) + all-gather
//                                   (backward recompute) + reduce-scatter of its gradient,
//                                   3(N-1)/N · P_layer · k (k micro-batches of this rank);
//                                   the root unit (embedding, norm) once: 2(N-1)/N · P_root
//                (plus 8 bytes of the global grad-norm all-reduce in the sharded modes)
//   wire         bytes the loopback interface carried during the timed steps (/proc/net/dev,
//                tx of "lo"), divided by ranks and steps: what Gloo really sent, with TCP/IP
//                headers, and with whatever else on this machine used loopback meanwhile
//
// comm_overlap: of the gradient all-reduce's time (first bucket launched to last bucket reduced,
// CommStats), the share that passed before the last backward ended, summed over the timed steps
// of data parallel at 2 ranks on the big model.
#include <algorithm>
#include <chrono>
#include <cstdlib>  // getloadavg (glibc)
#include <fstream>
#include <functional>
#include <memory>
#include <random>
#include <sstream>
#include <thread>

#include <torch/torch.h>
#include <torch/csrc/distributed/c10d/HashStore.hpp>

#include "bench/agent_batch.h"
#include "bench/registry.h"
#include "flywheel/core/status_macros.h"
#include "flywheel/core/strings.h"
#include "flywheel/dist/communicator.h"
#include "flywheel/learner/advantages.h"
#include "flywheel/learner/learner_step.h"
#include "flywheel/learner/packer.h"
#include "flywheel/learner/sharding.h"
#include "flywheel/model/attention_layout.h"
#include "flywheel/model/blas_threads.h"
#include "flywheel/model/transformer.h"

namespace flywheel::bench {
namespace {

using Clock = std::chrono::steady_clock;

constexpr double kScalingGoal = 1.7;
constexpr double kOverlapGoal = 0.5;

// A model size and the batches it trains on.
struct SizeSpec {
  std::string name;
  ModelOptions model;
  std::vector<int64_t> buckets;
  int64_t token_budget = 0;
  double median_len = 0;     // log-normal trajectory length
  int64_t trajectories = 0;  // per global batch, at least (more until the packing is even)
  int64_t min_micro_batches = 4;
};

// What the learner's packer makes of `batch` (the learner packs the same way on every rank).
absl::StatusOr<PackedStep> PackLikeTheLearner(const LearnerOptions& o,
                                              const std::vector<Trajectory>& batch) {
  ASSIGN_OR_RETURN(auto advantages,
                   ComputeAdvantages(batch, AdvantageOptions::FromLearnerOptions(o)));
  Packer packer(PackerOptions::FromLearnerOptions(o));
  return packer.Pack(batch, advantages);
}

// `steps` global batches with a fixed seed, each of at least `trajectories` trajectories and
// grown (two at a time) until it packs into an even number >= min_micro_batches of
// micro-batches: an odd count would make one of 2 ranks run a zero-weight padding micro-batch,
// a property of the batch rather than of the parallel learner.
struct GlobalBatches {
  std::vector<std::vector<Trajectory>> batches;
  std::vector<int64_t> micro_batches, real_tokens;
  int64_t total_real_tokens = 0;
};

absl::StatusOr<GlobalBatches> MakeGlobalBatches(const SizeSpec& size, const LearnerOptions& o,
                                                int64_t steps, uint64_t seed) {
  GlobalBatches out;
  for (int64_t s = 0; s < steps; ++s) {
    for (int64_t count = size.trajectories;; count += 2) {
      if (count > 64 * size.trajectories) {
        return absl::InternalError(StrCat(
            "learner-parallel: batch ", s, " of ", size.name,
            " never packs into an even number >= ", size.min_micro_batches, " of micro-batches"));
      }
      std::mt19937_64 rng(seed + 1000 * static_cast<uint64_t>(s));
      std::vector<Trajectory> batch =
          MakeAgentBatch(rng, count,
                         {.median = size.median_len,
                          .min_len = 8,
                          .max_len = size.buckets.back(),
                          .turn = size.median_len < 100 ? 2 : 32,  // short guess-like episodes
                          .vocab = size.model.vocab_size},
                         s);
      ASSIGN_OR_RETURN(PackedStep packed, PackLikeTheLearner(o, batch));
      const auto m = static_cast<int64_t>(packed.micro_batches.size());
      if (m < size.min_micro_batches || m % 2 != 0 || !packed.held_back.empty()) continue;
      out.batches.push_back(std::move(batch));
      out.micro_batches.push_back(m);
      out.real_tokens.push_back(packed.real_tokens);
      out.total_real_tokens += packed.real_tokens;
      break;
    }
  }
  return out;
}

// Runs fn(rank) on `ranks` fresh threads, each with one intra-op thread; the first error wins.
absl::Status OnRankThreads(int ranks, const std::function<absl::Status(int)>& fn) {
  std::vector<absl::Status> status(ranks);
  std::vector<std::thread> threads;
  for (int r = 0; r < ranks; ++r) {
    threads.emplace_back([&, r] {
      at::set_num_threads(1);  // OpenMP's thread count is per thread: set it on each rank
      status[r] = fn(r);
    });
  }
  for (std::thread& t : threads) t.join();
  for (int r = 0; r < ranks; ++r) {
    if (!status[r].ok()) {
      return absl::Status(status[r].code(), StrCat("rank ", r, ": ", status[r].message()));
    }
  }
  return absl::OkStatus();
}

// Bytes sent on the loopback interface so far (tx of "lo" in /proc/net/dev); -1 if unknown.
int64_t LoopbackTxBytes() {
  std::ifstream in("/proc/net/dev");
  std::string line;
  while (std::getline(in, line)) {
    const size_t colon = line.find(':');
    if (colon == std::string::npos) continue;
    std::string name = line.substr(0, colon);
    name.erase(0, name.find_first_not_of(' '));
    if (name != "lo") continue;
    std::istringstream fields(line.substr(colon + 1));
    int64_t v = 0;
    for (int i = 0; i < 9 && fields >> v; ++i) {
    }  // rx: bytes packets errs drop fifo frame compressed multicast; then tx bytes
    return fields ? v : -1;
  }
  return -1;
}

// One side of a comparison: `ranks` replicas of the model, each with its LearnerStep.
struct ParallelSide {
  ShardingMode mode = ShardingMode::kNone;
  int ranks = 1;
  c10::intrusive_ptr<c10d::HashStore> store;
  std::vector<std::unique_ptr<dist::Communicator>> comms;
  std::vector<Transformer> models;
  std::vector<std::unique_ptr<LearnerStep>> learners;
  std::vector<double> round_seconds;
  std::vector<std::vector<LearnerStepResult>> timed;  // per rank, every timed step
  int64_t wire_bytes = 0;                             // loopback tx over the timed rounds
  bool wire_known = true;

  ~ParallelSide() {
    learners.clear();  // before the communicators and models they borrow
    comms.clear();
  }
};

absl::StatusOr<std::unique_ptr<ParallelSide>> MakeSide(const SizeSpec& size,
                                                       const LearnerOptions& base,
                                                       ShardingMode mode, int ranks) {
  auto side = std::make_unique<ParallelSide>();
  side->mode = mode;
  side->ranks = ranks;
  side->models.resize(ranks, Transformer(nullptr));
  side->learners.resize(ranks);
  side->comms.resize(ranks);
  side->timed.resize(ranks);
  // Data parallel alone needs no group; a sharded mode needs one even of size 1.
  const bool grouped = ranks > 1 || mode != ShardingMode::kNone;
  if (grouped) side->store = c10::make_intrusive<c10d::HashStore>();
  LearnerOptions o = base;
  o.sharding = mode;
  o.world_size = ranks;
  ParallelSide* s = side.get();
  RETURN_IF_ERROR(OnRankThreads(ranks, [&, s](int r) -> absl::Status {
    if (grouped) {
      dist::CommunicatorOptions c;
      c.name = StrCat("learner-parallel ", size.name, " ", ranks, " ranks");
      c.timeout = std::chrono::milliseconds(300000);  // a big-model step at 1 core takes seconds
      ASSIGN_OR_RETURN(s->comms[r], dist::Communicator::Create(s->store, r, ranks, c));
    }
    ASSIGN_OR_RETURN(s->models[r], MakeTransformer(size.model));  // same seed: same weights
    Transformer model = s->models[r];
    PolicyForward forward = [model](const PackedMicroBatch& mb) -> absl::StatusOr<torch::Tensor> {
      ASSIGN_OR_RETURN(AttentionLayout layout, MakePackedLayout(mb.doc_lengths, mb.length));
      return model->forward(mb.tokens, layout);
    };
    std::vector<std::string> names;
    for (const auto& item : model->named_parameters()) names.push_back(item.key());
    ParallelContext parallel{s->comms[r].get(), TransformerUnits(names),
                             mode == ShardingMode::kFull ? model.get() : nullptr};
    s->learners[r] = std::make_unique<LearnerStep>(o, 1000000, model->parameters(), forward,
                                                   nullptr, 1.0, RealClock(), 0, parallel);
    return absl::OkStatus();
  }));
  return side;
}

// Every rank trains on every batch in order; returns the seconds until the last rank finished.
absl::StatusOr<double> TrainRound(ParallelSide& side, const GlobalBatches& global, bool timed) {
  const int64_t lo_before = timed ? LoopbackTxBytes() : 0;
  const auto start = Clock::now();
  RETURN_IF_ERROR(OnRankThreads(side.ranks, [&](int r) -> absl::Status {
    for (const std::vector<Trajectory>& batch : global.batches) {
      ASSIGN_OR_RETURN(LearnerStepResult result, side.learners[r]->Step(batch));
      if (timed) side.timed[r].push_back(std::move(result));
    }
    return absl::OkStatus();
  }));
  const double seconds = SecondsSince(start);
  if (timed) {
    const int64_t lo_after = LoopbackTxBytes();
    side.wire_known = side.wire_known && lo_before >= 0 && lo_after >= 0;
    side.wire_bytes += lo_after - lo_before;
    side.round_seconds.push_back(seconds);
  }
  return seconds;
}

// Parameter bytes of the model, whole and per TransformerUnits unit (padded to N for shards).
struct ParamBytes {
  int64_t total = 0;
  int64_t root = 0;
  int64_t layers = 0;        // all decoder layers together
  int64_t padded_total = 0;  // the flat units padded to a multiple of N
  int64_t padded_root = 0;
};

ParamBytes CountParamBytes(const ModelOptions& m, int n) {
  auto made = MakeTransformer(m);
  ParamBytes out;
  if (!made.ok()) return out;
  std::vector<std::string> names;
  std::vector<int64_t> numel;
  for (const auto& item : (*made)->named_parameters()) {
    names.push_back(item.key());
    numel.push_back(item.value().numel());
  }
  const std::vector<ShardUnit> units = TransformerUnits(names);
  for (const ShardUnit& u : units) {
    int64_t length = 0;
    for (int64_t i : u.parameters) length += numel[i];
    const int64_t padded = ShardLength(length, n) * n;
    out.total += 4 * length;
    out.padded_total += 4 * padded;
    if (u.name == "root") {
      out.root += 4 * length;
      out.padded_root += 4 * padded;
    } else {
      out.layers += 4 * length;
    }
  }
  return out;
}

// Bytes one rank sends per step by the formulas of the header comment; `k` = micro-batches of
// this rank per step.
double TheoryBytes(ShardingMode mode, const ParamBytes& p, int n, double k) {
  if (n <= 1) return 0;
  const double f = static_cast<double>(n - 1) / n;
  switch (mode) {
    case ShardingMode::kNone:
      return 2 * f * p.total;
    case ShardingMode::kGradsOptimizer:
      return 2 * f * p.padded_total + 2 * f * 8;
    case ShardingMode::kFull:
      return 3 * f * (p.padded_total - p.padded_root) * k + 2 * f * p.padded_root + 2 * f * 8;
  }
  return 0;
}

// The figures of one side, from its timed steps.
nlohmann::json SideJson(const ParallelSide& side, const GlobalBatches& global,
                        const ParamBytes& p) {
  const double tps = static_cast<double>(global.total_real_tokens) / Median(side.round_seconds);
  std::vector<double> comm_bytes, rank_mbs;
  double comm_s = 0, overlapped_s = 0;
  int64_t buckets = 0, in_backward = 0;
  for (const auto& per_rank : side.timed) {
    for (const LearnerStepResult& r : per_rank) {
      comm_bytes.push_back(static_cast<double>(r.comm_bytes));
      rank_mbs.push_back(static_cast<double>(r.rank_micro_batches));
      comm_s += r.comm.comm_seconds;
      overlapped_s += r.comm.overlapped_seconds;
      buckets += r.comm.buckets;
      in_backward += r.comm.launched_during_backward;
    }
  }
  const double k = Median(rank_mbs);
  const double measured = Median(comm_bytes);
  const double theory = TheoryBytes(side.mode, p, side.ranks, k);
  const int64_t steps = static_cast<int64_t>(side.timed[0].size());
  const LearnerStepResult& last = side.timed[0].back();
  nlohmann::json out = {
      {"ranks", side.ranks},
      {"tokens_per_s", tps},
      {"seconds_per_round", side.round_seconds},
      {"rank_micro_batches_per_step", k},
      {"comm_bytes_per_step_per_rank", measured},
      {"theory_bytes_per_step_per_rank", theory},
      {"comm_bytes_over_theory", theory > 0 ? nlohmann::json(measured / theory) : nlohmann::json()},
      {"rank0_param_bytes", last.param_bytes},
      {"rank0_grad_bytes", last.grad_bytes},
      {"rank0_optimizer_bytes", last.optimizer_bytes}};
  if (side.ranks > 1 && side.wire_known && steps > 0) {
    const double wire = static_cast<double>(side.wire_bytes) / side.ranks / steps;
    out["wire_bytes_per_step_per_rank"] = wire;
    out["wire_over_theory"] = theory > 0 ? nlohmann::json(wire / theory) : nlohmann::json();
  }
  if (side.mode == ShardingMode::kNone && side.ranks > 1) {
    out["comm"] = {{"buckets_per_step", static_cast<double>(buckets) / (steps * side.ranks)},
                   {"launched_during_backward_per_step",
                    static_cast<double>(in_backward) / (steps * side.ranks)},
                   {"comm_seconds_per_step", comm_s / (steps * side.ranks)},
                   {"overlapped_seconds_per_step", overlapped_s / (steps * side.ranks)},
                   {"overlap", comm_s > 0 ? overlapped_s / comm_s : 0.0}};
  }
  return out;
}

std::string ModeName(ShardingMode mode) {
  for (const auto& c : kShardingModeNames) {
    if (c.value == mode) return std::string(c.name);
  }
  return "?";
}

absl::StatusOr<std::vector<ShardingMode>> ParseModes(const std::string& list) {
  std::vector<ShardingMode> modes;
  std::stringstream in(list);
  std::string name;
  while (std::getline(in, name, ',')) {
    bool found = false;
    for (const auto& c : kShardingModeNames) {
      if (name == c.name) {
        modes.push_back(c.value);
        found = true;
      }
    }
    if (!found) {
      return absl::InvalidArgumentError(StrCat("learner-parallel: --param modes=", list, ": \"",
                                               name, "\" is none of none, grads_optimizer, full"));
    }
  }
  if (modes.empty()) return absl::InvalidArgumentError("learner-parallel: --param modes is empty");
  return modes;
}

std::vector<SizeSpec> Sizes(const BenchArgs& args) {
  // examples/guess.toml's [model]; its task's vocabulary is 21 words and a few specials. An
  // execution is 6 short turns; a learner step packs 16 groups of 8 (batch_groups x group_size).
  SizeSpec guess;
  guess.name = "guess";
  guess.model.vocab_size = args.GetInt("guess_vocab", 32);
  guess.model.hidden_size = 64;
  guess.model.num_layers = 2;
  guess.model.num_heads = 4;
  guess.model.num_kv_heads = 2;
  guess.model.intermediate_size = 172;
  guess.model.max_seq_len = 256;
  guess.buckets = {64, 128, 256};
  guess.token_budget = args.GetInt("guess_token_budget", 512);  // guess.toml: 4096 = 1 mb
  guess.median_len = 30;
  guess.trajectories = args.quick ? 32 : 128;

  // Big enough that the gradients (~100 MB) take a while to all-reduce.
  SizeSpec big;
  big.name = "big";
  big.model.vocab_size = args.GetInt("big_vocab", args.quick ? 256 : 4096);
  big.model.hidden_size = args.GetInt("big_hidden", args.quick ? 128 : 512);
  big.model.num_layers = args.GetInt("big_layers", args.quick ? 2 : 8);
  big.model.num_heads = args.GetInt("big_heads", args.quick ? 4 : 8);
  big.model.num_kv_heads = args.GetInt("big_kv_heads", args.quick ? 2 : 4);
  big.model.intermediate_size = args.GetInt("big_intermediate", args.quick ? 344 : 1376);
  // Agent trajectories of a few hundred tokens; ~2k real tokens per step keep a step of the big
  // model at one core to seconds, so that the whole benchmark fits in ~10 minutes here.
  big.model.max_seq_len = 512;
  big.buckets = args.quick ? std::vector<int64_t>{64, 128} : std::vector<int64_t>{128, 256, 512};
  big.token_budget = args.GetInt("big_token_budget", args.quick ? 256 : 512);
  big.median_len = args.GetDouble("big_median_len", args.quick ? 40 : 200);
  big.trajectories = args.GetInt("big_trajectories", 8);
  for (SizeSpec* s : {&guess, &big}) s->model.seed = 1;
  return {guess, big};
}

}  // namespace

absl::StatusOr<BenchReport> RunLearnerParallelBench(const BenchArgs& args) {
  const int64_t steps = args.GetInt("steps", args.quick ? 1 : 2);
  const int64_t rounds = std::max<int64_t>(1, args.GetInt("rounds", args.quick ? 1 : 3));
  const int64_t warmup = args.GetInt("warmup", 1);
  const double bucket_mb = args.GetDouble("grad_bucket_mb", 25.0);
  const std::string modes_param = args.GetString("modes", "none,grads_optimizer,full");
  if (steps <= 0 || warmup < 0) {
    return absl::InvalidArgumentError(StrCat("learner-parallel: --param steps (", steps,
                                             ") must be > 0 and warmup (", warmup, ") >= 0"));
  }
  ASSIGN_OR_RETURN(std::vector<ShardingMode> modes, ParseModes(modes_param));
  // Other work on the machine takes cores from the 2-rank side first: the report states it.
  double load_before = -1, load_after = -1;
  (void)getloadavg(&load_before, 1);
  // One BLAS thread per rank; OpenBLAS's count is global (the intra-op count is per thread).
  (void)SetBlasThreads(1);

  LearnerOptions base;
  base.loss = PolicyLossKind::kTruncatedIs;
  base.max_staleness = -1;  // the same batches are trained on every round
  base.lr = 1e-4;
  base.grad_bucket_mb = bucket_mb;
  base.carry_over = false;  // each step trains exactly its global batch

  BenchReport report;
  report.table = {{"model", "mode", "tok/s 1 rank", "tok/s 2 ranks", "scaling", "MB/step/rank",
                   "theory MB", "wire MB", "overlap"}};
  nlohmann::json sizes_config = nlohmann::json::object();
  nlohmann::json scaling = nlohmann::json::object();
  nlohmann::json bytes_vs_theory = nlohmann::json::object();
  double dp_big_scaling = -1, dp_big_overlap = -1;
  double full_vs_none_big = -1;
  for (const SizeSpec& size : Sizes(args)) {
    RETURN_IF_ERROR(size.model.Validate());
    LearnerOptions o = base;
    o.buckets = size.buckets;
    o.token_budget = size.token_budget;
    ASSIGN_OR_RETURN(GlobalBatches global,
                     MakeGlobalBatches(size, o, steps, args.GetInt("seed", 1)));
    const ParamBytes p = CountParamBytes(size.model, 2);
    ASSIGN_OR_RETURN(Transformer probe, MakeTransformer(size.model));
    sizes_config[size.name] = {{"vocab_size", size.model.vocab_size},
                               {"hidden_size", size.model.hidden_size},
                               {"num_layers", size.model.num_layers},
                               {"num_heads", size.model.num_heads},
                               {"num_kv_heads", size.model.num_kv_heads},
                               {"intermediate_size", size.model.intermediate_size},
                               {"parameters", probe->NumParameters()},
                               {"param_bytes", p.total},
                               {"root_unit_bytes", p.root},
                               {"buckets", size.buckets},
                               {"token_budget", size.token_budget},
                               {"median_len", size.median_len},
                               {"trajectories_per_step",
                                [&] {
                                  std::vector<size_t> n;
                                  for (const auto& b : global.batches) n.push_back(b.size());
                                  return n;
                                }()},
                               {"micro_batches_per_step", global.micro_batches},
                               {"real_tokens_per_step", global.real_tokens}};
    nlohmann::json per_mode = nlohmann::json::object();
    std::map<ShardingMode, double> one_rank_tps;
    for (ShardingMode mode : modes) {
      std::vector<std::unique_ptr<ParallelSide>> sides;
      for (int ranks : {1, 2}) {
        ASSIGN_OR_RETURN(auto side, MakeSide(size, o, mode, ranks));
        sides.push_back(std::move(side));
      }
      for (int64_t w = 0; w < warmup; ++w) {
        for (auto& side : sides) RETURN_IF_ERROR(TrainRound(*side, global, false).status());
      }
      for (int64_t r = 0; r < rounds; ++r) {
        // Alternate which side goes first, so that drift in the machine's load hits both.
        for (int i = 0; i < 2; ++i) {
          RETURN_IF_ERROR(TrainRound(*sides[r % 2 == 0 ? i : 1 - i], global, true).status());
        }
      }
      nlohmann::json one = SideJson(*sides[0], global, p);
      nlohmann::json two = SideJson(*sides[1], global, p);
      const double ratio = two["tokens_per_s"].get<double>() / one["tokens_per_s"].get<double>();
      one_rank_tps[mode] = one["tokens_per_s"].get<double>();
      const std::string name = ModeName(mode);
      per_mode[name] = {{"1_rank", one}, {"2_ranks", two}, {"scaling_2_ranks", ratio}};
      scaling[size.name][name] = ratio;
      bytes_vs_theory[size.name][name] = {
          {"comm_bytes", two["comm_bytes_per_step_per_rank"]},
          {"theory", two["theory_bytes_per_step_per_rank"]},
          {"ratio", two["comm_bytes_over_theory"]},
          {"wire_bytes", two.value("wire_bytes_per_step_per_rank", nlohmann::json())},
          {"wire_ratio", two.value("wire_over_theory", nlohmann::json())}};
      const double overlap = two.contains("comm") ? two["comm"]["overlap"].get<double>() : -1.0;
      if (size.name == "big" && mode == ShardingMode::kNone) {
        dp_big_scaling = ratio;
        dp_big_overlap = overlap;
      }
      auto mb = [](const nlohmann::json& v) {
        return v.is_number() ? fmt::format("{:.1f}", v.get<double>() / 1e6) : std::string("-");
      };
      report.table.push_back(
          {size.name, name, fmt::format("{:.0f}", one["tokens_per_s"].get<double>()),
           fmt::format("{:.0f}", two["tokens_per_s"].get<double>()), fmt::format("{:.2f}", ratio),
           mb(two["comm_bytes_per_step_per_rank"]), mb(two["theory_bytes_per_step_per_rank"]),
           mb(two.value("wire_bytes_per_step_per_rank", nlohmann::json())),
           overlap >= 0 ? fmt::format("{:.2f}", overlap) : std::string("-")});
    }
    if (size.name == "big" && one_rank_tps.count(ShardingMode::kNone) &&
        one_rank_tps.count(ShardingMode::kFull)) {
      full_vs_none_big = one_rank_tps[ShardingMode::kFull] / one_rank_tps[ShardingMode::kNone];
    }
    report.results[size.name] = per_mode;
  }

  (void)getloadavg(&load_after, 1);
  const double cores = std::thread::hardware_concurrency();
  report.config = {{"load_average_1min", {{"start", load_before}, {"end", load_after}}},
                   {"threads_per_rank", 1},
                   {"blas_threads_per_rank", 1},
                   {"ranks", "threads of one process, one Gloo communicator each (HashStore)"},
                   {"steps_per_round", steps},
                   {"rounds", rounds},
                   {"warmup_rounds", warmup},
                   {"modes", modes_param},
                   {"grad_bucket_mb", bucket_mb},
                   {"loss", "truncated_is (cap 2), token mean, grad clip 1, AdamW"},
                   {"one_rank_peer",
                    "none: single-process learner (no group); sharded modes: the same mode over "
                    "a group of 1"},
                   {"theory",
                    "none: 2(N-1)/N P; grads_optimizer: 2(N-1)/N P_padded + norm; full: "
                    "3(N-1)/N P_layers k + 2(N-1)/N P_root + norm (k = micro-batches per rank)"},
                   {"wire", "loopback tx bytes during the timed rounds / ranks / steps"},
                   {"sizes", sizes_config},
                   {"quick", args.quick}};

  const bool dp_measured = dp_big_scaling >= 0;
  report.ratios["scaling_2_ranks"] = dp_measured ? nlohmann::json(dp_big_scaling) : nullptr;
  report.ratios["scaling_2_ranks_goal"] = kScalingGoal;
  report.ratios["scaling_goal_met"] = dp_measured && dp_big_scaling >= kScalingGoal;
  report.ratios["comm_overlap"] = dp_measured ? nlohmann::json(dp_big_overlap) : nullptr;
  report.ratios["comm_overlap_goal"] = kOverlapGoal;
  report.ratios["comm_overlap_goal_met"] = dp_measured && dp_big_overlap >= kOverlapGoal;
  report.ratios["scaling_by_size_and_mode"] = scaling;
  report.ratios["bytes_vs_theory"] = bytes_vs_theory;
  report.ratios["full_vs_none_1_rank_big"] =
      full_vs_none_big >= 0 ? nlohmann::json(full_vs_none_big) : nullptr;
  if (!dp_measured) {
    report.summary = "data parallel (mode none) not run: no scaling_2_ranks or comm_overlap";
  } else {
    report.summary = fmt::format(
        "big model, data parallel: 2 ranks train {:.2f}x the tokens/s of 1 (goal {:.1f}: {}); "
        "{:.0f}% of the all-reduce time hidden behind backward (goal {:.0f}%: {})",
        dp_big_scaling, kScalingGoal, dp_big_scaling >= kScalingGoal ? "met" : "MISSED",
        100 * dp_big_overlap, 100 * kOverlapGoal,
        dp_big_overlap >= kOverlapGoal ? "met" : "MISSED");
  }
  if (std::max(load_before, load_after) > cores - 1) {
    report.summary += fmt::format(
        " [load average {:.1f}/{:.1f} on {:.0f} cores: 2 ranks did not have a core each]",
        load_before, load_after, cores);
  }
  return report;
}

}  // namespace flywheel::bench
