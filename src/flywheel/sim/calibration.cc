#include "flywheel/sim/calibration.h"

#include <torch/torch.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <torch/csrc/distributed/c10d/HashStore.hpp>
#include <utility>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "flywheel/actor/actor.h"
#include "flywheel/actor/env_tokenizer.h"
#include "flywheel/actor/rollout_engine.h"
#include "flywheel/core/emulated_device.h"
#include "flywheel/core/status_macros.h"
#include "flywheel/core/strings.h"
#include "flywheel/dist/communicator.h"
#include "flywheel/env/env_executor.h"
#include "flywheel/env/env_factory.h"
#include "flywheel/env/task_source.h"
#include "flywheel/model/transformer.h"
#include "flywheel/model/weight_snapshot.h"
#include "flywheel/runtime/blas_choice.h"
#include "flywheel/runtime/learner_session.h"
#include "flywheel/runtime/policy_setup.h"

namespace flywheel::sim {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

double SecondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

// Least squares y = a + b·x; with a negative intercept, the line through the origin instead
// (an overhead below zero is noise, not a cost).
struct Line {
  double intercept = 0;
  double slope = 0;
};

Line FitLine(const std::vector<std::pair<double, double>>& points) {
  double sx = 0, sy = 0, sxx = 0, sxy = 0;
  const double n = static_cast<double>(points.size());
  for (const auto& [x, y] : points) {
    sx += x;
    sy += y;
    sxx += x * x;
    sxy += x * y;
  }
  Line line;
  const double var = n * sxx - sx * sx;
  if (var > 0) {
    line.slope = (n * sxy - sx * sy) / var;
    line.intercept = (sy - line.slope * sx) / n;
  }
  if (var <= 0 || line.intercept < 0 || line.slope <= 0) {
    line.intercept = 0;
    line.slope = sxx > 0 ? sxy / sxx : 0;
  }
  return line;
}

// Policy turns of a trajectory: its runs of trainable tokens.
int64_t PolicyTurns(const Trajectory& t) {
  int64_t turns = 0;
  for (size_t i = 0; i < t.trainable.size(); ++i) {
    turns += t.trainable[i] != 0 && (i == 0 || t.trainable[i - 1] == 0);
  }
  return turns;
}

int64_t PromptLength(const Trajectory& t) {
  for (size_t i = 0; i < t.trainable.size(); ++i) {
    if (t.trainable[i] != 0) return static_cast<int64_t>(i);
  }
  return t.size();
}

// The job's actor playing `count` episodes (whole groups) with the initial weights; the finished
// trajectories. Without the environment's configured latency (the simulator draws it from the
// same models): an episode's shape does not depend on it, and an environment of minutes per
// step would otherwise make the calibration take hours.
absl::StatusOr<std::vector<Trajectory>> RecordEpisodes(
    const JobConfig& job, const Tokenizer& tokenizer, std::shared_ptr<const WeightSnapshot> weights,
    int64_t count) {
  EnvOptions env = job.env;
  env.latency = LatencyOptions{};
  env.latency.model = LatencyKind::kNone;
  env.tool_latency = env.latency;
  ASSIGN_OR_RETURN(const std::unique_ptr<EnvFactory> factory, EnvFactory::Create(env));
  absl::Mutex mu;
  std::vector<Trajectory> episodes;
  EnvExecutor executor(EnvExecutor::OptionsFor(env));
  const uint64_t seed = static_cast<uint64_t>(job.run.seed);
  TaskSource tasks(factory->task_name(), MixSeed(seed + 17), job.actor.group_size);
  ASSIGN_OR_RETURN(std::unique_ptr<RolloutEngine> engine,
                   RolloutEngine::Create(job.actor.engine, std::move(weights)));
  absl::Status run;
  {
    Actor actor(
        "calibration", job.actor, job.sampling, std::move(engine), factory.get(), &executor,
        &tokenizer, &tasks,
        [&](Trajectory t) {
          absl::MutexLock lock(&mu);
          episodes.push_back(std::move(t));
          return absl::OkStatus();
        },
        MixSeed(seed + 1));
    run = actor.Run(count);
    executor.Close();
  }
  RETURN_IF_ERROR(Annotate(run, "calibration: recording episodes"));
  if (episodes.empty()) return absl::InternalError("calibration: the actor finished no episode");
  return episodes;
}

struct DecodePoint {
  int64_t batch = 0;
  double step_s = 0;     // median decode step
  double prefill_s = 0;  // the first step: every prompt prefilled, one token each
};

struct DecodeMeasurement {
  std::vector<DecodePoint> points;
  std::vector<double> swaps;  // extra seconds of a step that takes new weights
};

// The job's engine stepping b sequences at once for b = 1, 2, 4, … and episodes_in_flight.
absl::StatusOr<DecodeMeasurement> MeasureDecode(const JobConfig& job, const Transformer& model,
                                                const std::vector<Trajectory>& episodes,
                                                int64_t max_seq_len, int64_t timed_steps) {
  ASSIGN_OR_RETURN(std::shared_ptr<const WeightSnapshot> weights, MakeSnapshot(model, 0));
  ASSIGN_OR_RETURN(std::unique_ptr<RolloutEngine> engine,
                   RolloutEngine::Create(job.actor.engine, weights));
  int64_t longest_prompt = 1;
  for (const Trajectory& t : episodes) longest_prompt = std::max(longest_prompt, PromptLength(t));
  const int64_t steps = std::min(timed_steps, max_seq_len - longest_prompt - 2);
  if (steps < 2) {
    return absl::InvalidArgumentError(StrCat("calibration: model.max_seq_len = ", max_seq_len,
                                             " leaves no room to time decode steps "
                                             "after prompts of ",
                                             longest_prompt, " tokens"));
  }
  const int64_t widest = job.actor.episodes_in_flight;
  std::vector<int64_t> sizes;
  for (int64_t b = 1; b < widest; b *= 2) sizes.push_back(b);
  sizes.push_back(widest);
  const double f = EmulatedSlowdown();
  SequenceId next_seed = 1;
  int64_t next_version = 1;

  // Starts b sequences on recorded prompts, returns the first (prefill) step's seconds.
  auto start = [&](int64_t b, std::vector<SequenceId>& ids) -> absl::StatusOr<double> {
    for (int64_t i = 0; i < b; ++i) {
      const Trajectory& t = episodes[static_cast<size_t>(i) % episodes.size()];
      const std::vector<int64_t> prompt(t.tokens.begin(), t.tokens.begin() + PromptLength(t));
      SequenceOptions sequence;
      sequence.sampling = job.sampling;
      sequence.seed = static_cast<uint64_t>(next_seed++);
      ASSIGN_OR_RETURN(SequenceId id, engine->AddSequence(prompt, sequence));
      TurnOptions turn;
      turn.max_new_tokens = steps + 2;  // no stop token: every step generates for all b
      RETURN_IF_ERROR(engine->StartTurn(id, turn));
      ids.push_back(id);
    }
    const Clock::time_point t0 = Clock::now();
    RETURN_IF_ERROR(engine->Step().status());
    return SecondsSince(t0);
  };
  auto finish = [&](const std::vector<SequenceId>& ids) -> absl::Status {
    for (SequenceId id : ids) RETURN_IF_ERROR(engine->RemoveSequence(id));
    return absl::OkStatus();
  };

  DecodeMeasurement out;
  {  // Warm-up: an "auto" backend decides at its first step (actor/backend_choice.h).
    std::vector<SequenceId> ids;
    RETURN_IF_ERROR(start(widest, ids).status());
    for (int64_t s = 0; s < std::min<int64_t>(steps, 4); ++s) {
      RETURN_IF_ERROR(engine->Step().status());
    }
    RETURN_IF_ERROR(finish(ids));
  }
  for (int64_t b : sizes) {
    std::vector<SequenceId> ids;
    ASSIGN_OR_RETURN(const double prefill, start(b, ids));
    std::vector<double> times;
    for (int64_t s = 0; s < steps; ++s) {
      const Clock::time_point t0 = Clock::now();
      RETURN_IF_ERROR(engine->Step().status());
      times.push_back(SecondsSince(t0));
    }
    out.points.push_back({b, f * Median(times), f * prefill});
    if (b == widest) {
      // New weights between two steps, as a publish reaches an actor: the step that takes them.
      for (int r = 0; r < 3 && r < steps / 2; ++r) {
        ASSIGN_OR_RETURN(std::shared_ptr<const WeightSnapshot> newer,
                         MakeSnapshot(model, next_version++));
        engine->PublishSnapshot(std::move(newer));
        const Clock::time_point t0 = Clock::now();
        RETURN_IF_ERROR(engine->Step().status());
        out.swaps.push_back(std::max(0.0, f * (SecondsSince(t0) - Median(times))));
      }
    }
    RETURN_IF_ERROR(finish(ids));
  }
  return out;
}

struct LearnerPoint {
  int64_t tokens = 0;
  double step_s = 0;
  double compute_s = 0;
};

// The job's learner as it runs (learner.world_size ranks as threads of this process, rank 0 on
// this one) on batches of the recorded episodes: a whole batch and half of one, alternately,
// after a warm-up step. Rank 0's step time: the group's, all-reduce and contention included.
absl::StatusOr<std::vector<LearnerPoint>> MeasureLearner(const JobConfig& job,
                                                         const ModelOptions& model_options,
                                                         const std::vector<Trajectory>& episodes,
                                                         const fs::path& work_dir, int64_t steps) {
  JobConfig lj = job;
  lj.run.mode = TrainMode::kAsync;
  lj.run.runs_dir = work_dir.string();
  lj.run.name = "calibration-learner";
  lj.learner.checkpoint_every = 0;
  lj.learner.world_size = job.run.mode == TrainMode::kElastic ? 1 : job.learner.world_size;
  const int world_size = static_cast<int>(lj.learner.world_size);
  std::vector<std::thread> followers;
  std::vector<absl::Status> follower_status(world_size);
  std::unique_ptr<dist::Communicator> group;
  // Joins the followers however this function returns (rank 0's session ends their Follow).
  struct Joiner {
    std::vector<std::thread>& threads;
    ~Joiner() {
      for (std::thread& t : threads) t.join();
    }
  } joiner{followers};
  if (world_size > 1) {
    auto store = c10::make_intrusive<c10d::HashStore>();
    for (int rank = 1; rank < world_size; ++rank) {
      followers.emplace_back([&, store, rank] {
        follower_status[rank] = RunFollowerRank(store, rank, lj, model_options, false);
      });
    }
    dist::CommunicatorOptions options;
    options.name = "calibration learner group";
    ASSIGN_OR_RETURN(group, dist::Communicator::Create(store, 0, world_size, options));
  }
  ASSIGN_OR_RETURN(std::unique_ptr<LearnerSession> session,
                   LearnerSession::Open(lj, model_options, /*resume=*/false, group.get()));
  std::map<std::string, std::vector<const Trajectory*>> groups;
  for (const Trajectory& t : episodes) groups[t.group_id].push_back(&t);
  const int64_t full = std::min<int64_t>(job.run.batch_groups, static_cast<int64_t>(groups.size()));
  const int64_t half = std::max<int64_t>(1, full / 2);
  // A batch of `n` groups whose tokens carry the learner's version (lag 0: nothing is dropped).
  auto batch = [&](int64_t n) {
    std::vector<Trajectory> out;
    int64_t taken = 0;
    for (const auto& [id, members] : groups) {
      if (taken++ == n) break;
      for (const Trajectory* t : members) {
        out.push_back(*t);
        for (int64_t& v : out.back().versions) {
          if (v != kNoVersion) v = session->version();
        }
      }
    }
    return out;
  };
  auto step = [&](int64_t n) -> absl::StatusOr<LearnerPoint> {
    std::vector<Trajectory> b = batch(n);
    LearnerPoint point;
    for (const Trajectory& t : b) point.tokens += t.size();
    const Clock::time_point t0 = Clock::now();
    ASSIGN_OR_RETURN(TrainedStep trained, session->Step(std::move(b), absl::ZeroDuration()));
    point.step_s = SecondsSince(t0);
    point.compute_s = trained.result.times.compute();
    return point;
  };
  RETURN_IF_ERROR(step(full).status());  // warm-up
  std::vector<LearnerPoint> points;
  for (int64_t s = 0; s < steps; ++s) {
    for (int64_t n : {half, full}) {
      ASSIGN_OR_RETURN(LearnerPoint p, step(n));
      points.push_back(p);
    }
  }
  RETURN_IF_ERROR(session->Finish());
  session.reset();
  for (std::thread& t : followers) t.join();
  followers.clear();
  for (int rank = 1; rank < world_size; ++rank) {
    RETURN_IF_ERROR(Annotate(follower_status[rank], StrCat("calibration learner rank ", rank)));
  }
  return points;
}

}  // namespace

absl::StatusOr<Calibration> CalibrateJob(const JobConfig& job, const CalibrationOptions& options) {
  RETURN_IF_ERROR(CheckSimulable(job));
  RETURN_IF_ERROR(job.Validate());
  if (options.episodes < 1 || options.decode_steps < 2 || options.learner_steps < 1) {
    return absl::InvalidArgumentError(
        "calibration needs >= 1 episode, >= 2 decode steps and >= 1 learner step");
  }
  const Clock::time_point started = Clock::now();
  SetEmulatedSlowdown(job.run.emulated_slowdown);
  ASSIGN_OR_RETURN(std::unique_ptr<EnvFactory> factory, EnvFactory::Create(job.env));
  ASSIGN_OR_RETURN(std::unique_ptr<Tokenizer> tokenizer, MakeTokenizer(factory->vocabulary()));
  ASSIGN_OR_RETURN(ModelOptions model_options,
                   ResolveModelOptions(job, *tokenizer, factory->task_name()));
  // The thread settings of the job's cells: one BLAS thread in the embedded job; one intra-op
  // thread per rank when ranks (or elastic cells) share the process.
  ASSIGN_OR_RETURN(const BlasChoice blas,
                   ChooseBlasThreads(BlasRole::kEmbedded, job.run.blas_threads, model_options,
                                     job.learner.token_budget));
  if (job.learner.world_size > 1 || job.run.mode == TrainMode::kElastic) torch::set_num_threads(1);
  // (A group's rank 0 runs on this thread, its other ranks on threads with one intra-op thread.)
  torch::manual_seed(static_cast<uint64_t>(job.run.seed));
  ASSIGN_OR_RETURN(Transformer model, MakeTransformer(model_options));
  ASSIGN_OR_RETURN(std::shared_ptr<const WeightSnapshot> initial, MakeSnapshot(model, 0));

  const int64_t group = job.actor.group_size;
  const int64_t wanted = std::max(options.episodes, job.run.batch_groups * group);
  ASSIGN_OR_RETURN(const std::vector<Trajectory> episodes,
                   RecordEpisodes(job, *tokenizer, initial, (wanted + group - 1) / group * group));

  // The engine on a thread of its own, as an actor's (its intra-op setting is per thread).
  absl::StatusOr<DecodeMeasurement> decode = absl::UnknownError("not run");
  std::thread([&] {
    decode = MeasureDecode(job, model, episodes, model_options.max_seq_len, options.decode_steps);
  }).join();
  RETURN_IF_ERROR(decode.status());

  fs::path work_dir = options.work_dir;
  const bool temporary = work_dir.empty();
  if (temporary) {
    work_dir = fs::temp_directory_path() / StrCat("flywheel-calibrate-", ::getpid());
  }
  std::error_code ignored;
  fs::remove_all(work_dir / "calibration-learner", ignored);
  absl::StatusOr<std::vector<LearnerPoint>> learner =
      MeasureLearner(job, model_options, episodes, work_dir, options.learner_steps);
  fs::remove_all(temporary ? work_dir : work_dir / "calibration-learner", ignored);
  RETURN_IF_ERROR(learner.status());

  Calibration out;
  MeasuredCosts& c = out.costs;
  c.params = static_cast<double>(model->NumParameters());
  c.layers = model_options.num_layers;
  c.hidden = model_options.hidden_size;
  const int64_t head_dim = model_options.HeadDim();
  c.kv_bytes_per_token =
      2.0 * static_cast<double>(model_options.num_layers * model_options.num_kv_heads * head_dim) *
      sizeof(float);
  c.bytes_per_param = sizeof(float);
  c.max_seq_len = model_options.max_seq_len;
  std::vector<std::pair<double, double>> decode_points, learner_points;
  nlohmann::json decode_json = nlohmann::json::array(), learner_json = nlohmann::json::array();
  for (const DecodePoint& p : decode->points) {
    decode_points.push_back({static_cast<double>(p.batch), p.step_s});
    decode_json.push_back(
        {{"batch", p.batch}, {"step_s", p.step_s}, {"prefill_step_s", p.prefill_s}});
  }
  for (const LearnerPoint& p : *learner) {
    learner_points.push_back({static_cast<double>(p.tokens), p.step_s});
    learner_json.push_back(
        {{"tokens", p.tokens}, {"step_s", p.step_s}, {"compute_s", p.compute_s}});
  }
  const Line decode_line = FitLine(decode_points);
  const Line learner_line = FitLine(learner_points);
  c.decode_overhead_s = decode_line.intercept;
  c.decode_seconds_per_sequence = decode_line.slope;
  // The group trains T tokens in o + t·T, each of its ranks T / ranks of them: one cell's time
  // per token is t · ranks (the simulator gives each rank its share, job_costs.h).
  const int64_t ranks = job.run.mode == TrainMode::kElastic ? 1 : job.learner.world_size;
  c.step_overhead_s = learner_line.intercept;
  c.train_seconds_per_token = learner_line.slope * static_cast<double>(ranks);
  c.weight_swap_s = Median(decode->swaps);
  for (const Trajectory& t : episodes) {
    const int64_t prompt = PromptLength(t);
    const int64_t generated = t.NumTrainable();
    c.turns.push_back(std::max<int64_t>(1, PolicyTurns(t)));
    c.prompt_tokens.push_back(std::max<int64_t>(1, prompt));
    c.generated_tokens.push_back(std::max<int64_t>(1, generated));
    c.observation_tokens.push_back(std::max<int64_t>(0, t.size() - prompt - generated));
  }
  ASSIGN_OR_RETURN(out.sim, SimConfigForJob(job, c));
  out.report = {{"measured", c.ToJson()},
                {"decode_points", decode_json},
                {"weight_swap_samples_s", decode->swaps},
                {"learner_points", learner_json},
                {"emulated_slowdown", EmulatedSlowdown()},
                {"blas", blas.ToJson()},
                {"seconds", SecondsSince(started)}};
  return out;
}

}  // namespace flywheel::sim
